package rr_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/rr"
)

// BenchmarkPick calls Pick on a *rr.Picker, as code holding the concrete type
// does; Pick is small enough for the compiler to inline there. Compare it
// with BenchmarkAtomicAdd, its floor, in the same run.
func BenchmarkPick(b *testing.B) {
	for _, n := range []int{4, 64, 1024} {
		p := rr.New()
		if err := p.Update(balancer.Endpoints(addrs(n)...)); err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("n=%d/mode=serial", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = p.Pick(balancer.Request{})
			}
		})
		b.Run(fmt.Sprintf("n=%d/mode=parallel", n), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, _ = p.Pick(balancer.Request{})
				}
			})
		})
	}
}

// BenchmarkPickInterface runs the harness every algorithm shares: Pick
// through the balancer.Balancer interface with a client address as key, as
// a proxy holding any picker pays it.
func BenchmarkPickInterface(b *testing.B) {
	balancertest.Benchmark(b, func() balancer.Balancer { return rr.New() }, balancertest.BenchOptions{})
}

// BenchmarkAtomicAdd is the floor: round robin cannot be cheaper than the
// one atomic add it is built on.
func BenchmarkAtomicAdd(b *testing.B) {
	var n atomic.Uint64
	b.Run("mode=serial", func(b *testing.B) {
		for b.Loop() {
			n.Add(1)
		}
	})
	b.Run("mode=parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				n.Add(1)
			}
		})
	})
}
