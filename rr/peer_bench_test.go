package rr_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/rr"
)

// grpcRR is the round robin of gRPC's round_robin policy, as grpc-go's
// endpointsharding writes it (balancer/endpointsharding,
// pickerWithChildStates.Pick): one atomic add to a uint32 and a 32-bit
// remainder, on a picker that holds the slice beside the counter.
type grpcRR struct {
	backends []balancer.Backend
	next     uint32
}

func (p *grpcRR) Pick(balancer.Request) (balancer.Backend, error) {
	i := atomic.AddUint32(&p.next, 1)
	return p.backends[i%uint32(len(p.backends))], nil
}

// BenchmarkVsGRPC is issue 28's side-by-side row for round robin: Pick
// through the balancer.Picker interface, lbkit's beside gRPC's, at 4, 64
// and 1024 backends, serial and parallel, in one run. Both are bound by
// the one atomic add every pick makes on a shared counter; in parallel
// that add moves the counter's cache line between the cores at each pick.
func BenchmarkVsGRPC(b *testing.B) {
	for _, n := range []int{4, 64, 1024} {
		set := balancer.Endpoints(addrs(n)...)
		p := rr.New()
		if err := p.Update(set); err != nil {
			b.Fatal(err)
		}
		pickers := []struct {
			name string
			p    balancer.Picker
		}{{"grpc", &grpcRR{backends: set}}, {"rr", p}}
		for _, pk := range pickers {
			b.Run(fmt.Sprintf("n=%d/mode=serial/algo=%s", n, pk.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					_, _ = pk.p.Pick(balancer.Request{})
				}
			})
			b.Run(fmt.Sprintf("n=%d/mode=parallel/algo=%s", n, pk.name), func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						_, _ = pk.p.Pick(balancer.Request{})
					}
				})
			})
		}
	}
}
