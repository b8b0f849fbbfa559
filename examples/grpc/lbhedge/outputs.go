package lbhedge

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// outputs holds what a hedge's call options write (its header, trailer
// and peer), so that two attempts never write the caller's at once; the
// winner's are copied to the caller's once attempt 0 has returned.
type outputs struct {
	header, trailer metadata.MD
	peer            peer.Peer
}

// redirect returns opts with the caller's grpc.Header, grpc.Trailer and
// grpc.Peer options pointed at o; opts itself is left as it is.
func (o *outputs) redirect(opts []grpc.CallOption) []grpc.CallOption {
	out := make([]grpc.CallOption, len(opts))
	for i, opt := range opts {
		switch opt.(type) {
		case grpc.HeaderCallOption:
			opt = grpc.Header(&o.header)
		case grpc.TrailerCallOption:
			opt = grpc.Trailer(&o.trailer)
		case grpc.PeerCallOption:
			opt = grpc.Peer(&o.peer)
		}
		out[i] = opt
	}
	return out
}

// copyTo writes o to the caller's options among opts.
func (o *outputs) copyTo(opts []grpc.CallOption) {
	for _, opt := range opts {
		switch opt := opt.(type) {
		case grpc.HeaderCallOption:
			*opt.HeaderAddr = o.header
		case grpc.TrailerCallOption:
			*opt.TrailerAddr = o.trailer
		case grpc.PeerCallOption:
			*opt.PeerAddr = o.peer
		}
	}
}
