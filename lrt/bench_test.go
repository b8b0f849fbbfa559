package lrt_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/lrt"
)

var modes = []lrt.Mode{lrt.Balanced, lrt.Naive}

// BenchmarkPickDone runs the harness every algorithm shares: Pick then
// Done through the balancer interfaces, as a proxy pays per request.
func BenchmarkPickDone(b *testing.B) {
	for _, m := range modes {
		b.Run("algo=lrt-"+m.String(), func(b *testing.B) {
			balancertest.Benchmark(b, func() balancer.Balancer { return lrt.New(lrt.WithMode(m)) }, balancertest.BenchOptions{})
		})
	}
}

// warm returns a Picker over n backends whose estimates were learned at
// different times, so that Pick pays for the decay of one against the
// other as it does in service.
func warm(b *testing.B, n int, opts ...lrt.Option) (*lrt.Picker, []balancer.Backend) {
	var now time.Duration
	start := time.Now()
	p := lrt.New(append(opts, lrt.WithClock(func() time.Time { return start.Add(now) }))...)
	bs := balancer.Endpoints(addrs(n)...)
	if err := p.Update(bs); err != nil {
		panic(err)
	}
	for i, be := range bs {
		now += time.Millisecond
		got, err := p.Pick(balancer.Request{Avoid: be.ID()})
		if err != nil {
			panic(err)
		}
		p.Done(got, balancer.Result{})
		p.Done(be, balancer.Result{Latency: time.Duration(10+i%50) * time.Millisecond})
	}
	return p, bs
}

// BenchmarkPick measures Pick alone on a *lrt.Picker, with estimates of
// different ages. Nothing calls Done, so in-flight counts only grow; that
// changes which backend wins, not what a pick costs.
func BenchmarkPick(b *testing.B) {
	for _, m := range modes {
		for _, n := range []int{4, 64, 1024} {
			p, _ := warm(b, n, lrt.WithMode(m))
			b.Run(fmt.Sprintf("algo=lrt-%v/n=%d/mode=serial", m, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					_, _ = p.Pick(balancer.Request{})
				}
			})
			b.Run(fmt.Sprintf("algo=lrt-%v/n=%d/mode=parallel", m, n), func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						_, _ = p.Pick(balancer.Request{})
					}
				})
			})
		}
	}
}

// BenchmarkDone measures Done alone: the lookup by ID, the clock, the
// estimate's update. WithClock is left out, so the clock is the real one.
func BenchmarkDone(b *testing.B) {
	p := lrt.New()
	bs := balancer.Endpoints(addrs(64)...)
	if err := p.Update(bs); err != nil {
		b.Fatal(err)
	}
	res := balancer.Result{Latency: 20 * time.Millisecond}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p.Done(bs[i&63], res)
		i++
	}
}

// BenchmarkClock is the clock Done reads by default, for comparison with
// BenchmarkDone in the same run.
func BenchmarkClock(b *testing.B) {
	start := time.Now()
	var d time.Duration
	for b.Loop() {
		d += time.Since(start)
	}
	_ = d
}

// BenchmarkScanOrTwoChoices is the cost side of scanMax: Pick in the
// Balanced mode comparing the whole set (scan) or two of it (p2c), for
// small sets. See TestScanOrTwoChoices for the quality side.
func BenchmarkScanOrTwoChoices(b *testing.B) {
	for _, n := range []int{2, 4, 8, 16} {
		for _, way := range []struct {
			name string
			max  int
		}{{"scan", n}, {"p2c", 1}} {
			p, _ := warm(b, n, lrt.WithScanMax(way.max))
			b.Run(fmt.Sprintf("n=%d/way=%s", n, way.name), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					_, _ = p.Pick(balancer.Request{})
				}
			})
		}
	}
}
