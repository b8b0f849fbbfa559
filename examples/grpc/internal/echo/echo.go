package echo

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Method is the full name of the service's one method.
const Method = "/lbkit.example.Echo/Echo"

// Handler serves one RPC: it gets the request's text and returns the reply
// or an error (a status error, for a code other than UNKNOWN).
type Handler func(ctx context.Context, msg string) (string, error)

// Register adds the service to s, served by h.
func Register(s *grpc.Server, h Handler) {
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "lbkit.example.Echo",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Echo",
			Handler: func(_ any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				call := func(ctx context.Context, req any) (any, error) {
					out, err := h(ctx, req.(*wrapperspb.StringValue).GetValue())
					if err != nil {
						return nil, err
					}
					return wrapperspb.String(out), nil
				}
				if icpt == nil {
					return call(ctx, in)
				}
				return icpt(ctx, in, &grpc.UnaryServerInfo{FullMethod: Method}, call)
			},
		}},
		Metadata: "echo",
	}, nil)
}

// Call sends msg and returns the reply.
func Call(ctx context.Context, cc grpc.ClientConnInterface, msg string, opts ...grpc.CallOption) (string, error) {
	out := new(wrapperspb.StringValue)
	if err := cc.Invoke(ctx, Method, wrapperspb.String(msg), out, opts...); err != nil {
		return "", err
	}
	return out.GetValue(), nil
}
