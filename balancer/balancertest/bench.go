package balancertest

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/lbkit/lbkit/balancer"
)

// BenchOptions configures Benchmark. The zero value benchmarks sets of 4, 64
// and 1024 backends of weight 1.
type BenchOptions struct {
	// Sizes are the set sizes to measure; nil means 4, 64 and 1024.
	Sizes []int
	// Weighted gives the backends weights drawn uniformly from 1 to 100, from
	// a fixed seed, so that every run measures the same set.
	Weighted bool
	// Load is the load report every Done passes (balancer.Result.Load), for
	// pickers that weigh reports; the zero Load passes none.
	Load balancer.Load
	// Prepare, when set, is called after Update and before the timing, with
	// the Balancer and its set: to bring a picker to the state it serves
	// in (a probing picker's pool filled, say).
	Prepare func(balancer.Balancer, []balancer.Backend)
}

// Benchmark measures one selection: Pick, followed by Done when the
// Balancer implements balancer.Feedback, called through the interfaces as
// a proxy holding a balancer.Balancer would (a picker that counts in-flight
// requests needs its Done to stay in a steady state, and the pair is what a
// proxy pays per request). For each size it runs "n=<size>/mode=serial" and
// "n=<size>/mode=parallel" (b.RunParallel), reporting allocations.
//
// Keys cycle through 1024 client addresses made ahead of time, so the
// figures include a hash picker's hashing and parsing but not the making of
// keys. It is the one harness every lbkit algorithm's benchmarks and the
// comparison in package bench use.
func Benchmark(b *testing.B, newBalancer func() balancer.Balancer, opt BenchOptions) {
	sizes := opt.Sizes
	if sizes == nil {
		sizes = []int{4, 64, 1024}
	}
	ks := keys(1024)
	for _, n := range sizes {
		bal := newBalancer()
		set := benchSet(n, opt.Weighted)
		if err := bal.Update(set); err != nil {
			b.Fatalf("Update: %v", err)
		}
		if opt.Prepare != nil {
			opt.Prepare(bal, set)
		}
		fb, _ := bal.(balancer.Feedback) // nil: measure Pick alone
		res := balancer.Result{Latency: 1e6, Load: opt.Load}
		b.Run(fmt.Sprintf("n=%d/mode=serial", n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				got, err := bal.Pick(balancer.Request{Key: ks[i&1023]})
				if err != nil {
					b.Fatal(err)
				}
				if fb != nil {
					fb.Done(got, res)
				}
				i++
			}
		})
		b.Run(fmt.Sprintf("n=%d/mode=parallel", n), func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := rand.IntN(1024)
				for pb.Next() {
					got, err := bal.Pick(balancer.Request{Key: ks[i&1023]})
					if err != nil {
						b.Error(err)
						return
					}
					if fb != nil {
						fb.Done(got, res)
					}
					i++
				}
			})
		})
	}
}

// benchSet returns n endpoints, weighted from a fixed seed if asked.
func benchSet(n int, weighted bool) []balancer.Backend {
	r := rand.New(rand.NewPCG(1, 2))
	bs := make([]balancer.Backend, n)
	for i := range bs {
		w := 1
		if weighted {
			w = 1 + r.IntN(100)
		}
		bs[i] = balancer.NewEndpoint(fmt.Sprintf("10.%d.%d.%d:8080", i>>16&255, i>>8&255, i&255), w)
	}
	return bs
}
