package subset_test

import (
	"slices"
	"strconv"
	"testing"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/rr"
	"github.com/lbkit/lbkit/subset"
)

// Pick and Done through a subset of 20, beside the bare picker.
func BenchmarkPick(b *testing.B) {
	inners := []struct {
		name string
		new  func() balancer.Balancer
	}{
		{"rr", func() balancer.Balancer { return rr.New() }},
		{"leastconn", func() balancer.Balancer { return leastconn.New() }},
	}
	for _, in := range inners {
		b.Run("algo="+in.name+"/wrap=bare", func(b *testing.B) {
			balancertest.Benchmark(b, in.new, balancertest.BenchOptions{})
		})
		b.Run("algo="+in.name+"/wrap=subset", func(b *testing.B) {
			balancertest.Benchmark(b, func() balancer.Balancer {
				s, err := subset.New(in.new(), subset.Config{ClientID: "bench"})
				if err != nil {
					b.Fatal(err)
				}
				return s
			}, balancertest.BenchOptions{})
		})
	}
}

// Update of a set that loses or regains one backend: ranking the set and
// the inner Update of 20.
func BenchmarkUpdate(b *testing.B) {
	for _, m := range modes {
		for _, n := range []int{300, 1024} {
			b.Run("mode="+m.name+"/n="+strconv.Itoa(n), func(b *testing.B) {
				full := fleet(n)
				less := full[1:]
				s, err := subset.New(rr.New(), m.cfg(7, 100, 20))
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					set := full
					if i%2 == 0 {
						set = less
					}
					if err := s.Update(set); err != nil {
						b.Fatal(err)
					}
					i++
				}
			})
		}
	}
}

// The fleet, 100 clients and 300 backends with subsets of 20, in
// each mode: clients per backend against all-to-all, each backend's share
// of picks against the mean, and the (client, backend) pairs that move
// when one backend leaves. The loop body is one whole measurement.
func BenchmarkSpread(b *testing.B) {
	const count, n, size, picks = 100, 300, 20, 600
	bs := fleet(n)
	less := slices.Delete(slices.Clone(bs), 137, 138)
	for _, m := range modes {
		b.Run("mode="+m.name+"/clients=100/n=300/size=20", func(b *testing.B) {
			var s spread
			var pairs int
			for b.Loop() {
				s = measure(b, clients(b, m, count, size, bs), bs, picks)
				_, _, pairs = moved(b, m, count, size, bs, less)
			}
			b.ReportMetric(float64(s.maxConns)/count*100, "max-conns-%-of-all")
			b.ReportMetric(s.meanConns/count*100, "mean-conns-%-of-all")
			b.ReportMetric(s.maxLoad, "max-load/mean")
			b.ReportMetric(s.minLoad, "min-load/mean")
			b.ReportMetric(float64(pairs), "pairs-moved/leave")
		})
	}
}
