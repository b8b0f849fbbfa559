package wrr_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/wrr"
)

// randomSet returns n endpoints with weights from 1 to hi, from a fixed seed.
func randomSet(n, hi int) []balancer.Backend {
	r := rand.New(rand.NewPCG(1, 2))
	bs := make([]balancer.Backend, n)
	for i := range bs {
		bs[i] = balancer.NewEndpoint(fmt.Sprintf("10.%d.%d.%d:8080", i>>16&255, i>>8&255, i&255), 1+r.IntN(hi))
	}
	return bs
}

// BenchmarkPick calls Pick on a *wrr.Picker, as code holding the concrete
// type does, over backends weighted 1 to 100. The schedule for 1024 of them
// is about 52000 slots, so the n=1024 figures include walking 200 KiB.
func BenchmarkPick(b *testing.B) {
	for _, n := range []int{4, 64, 1024} {
		p := wrr.New()
		if err := p.Update(randomSet(n, 100)); err != nil {
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

// BenchmarkPickInterface runs the harness every algorithm shares, with
// weights 1 to 100: Pick through the balancer.Balancer interface, as a proxy
// holding any picker pays it.
func BenchmarkPickInterface(b *testing.B) {
	balancertest.Benchmark(b, func() balancer.Balancer { return wrr.New() }, balancertest.BenchOptions{Weighted: true})
}

// BenchmarkUpdate measures building a schedule: validation, slot counts and
// the tournament. With weights up to 10000 the sums far exceed the default
// capacity, so the period is 2¹⁸ slots; with weights up to 100 it is the
// sum itself. It reports the period as slots/op.
func BenchmarkUpdate(b *testing.B) {
	for _, c := range []struct{ n, hi, slots int }{
		{4, 100, 0}, {64, 100, 0}, {1024, 100, 0},
		{64, 10000, 0}, {1024, 10000, 0},
		{1024, 10000, 1 << 16}, {1024, 10000, 1 << 20},
	} {
		name := fmt.Sprintf("n=%d/weights=1..%d", c.n, c.hi)
		opts := []wrr.Option{}
		if c.slots != 0 {
			name += fmt.Sprintf("/max=%d", c.slots)
			opts = append(opts, wrr.WithMaxSchedule(c.slots))
		}
		bs := randomSet(c.n, c.hi)
		b.Run(name, func(b *testing.B) {
			p := wrr.New(opts...)
			b.ReportAllocs()
			for b.Loop() {
				if err := p.Update(bs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(p.Period()), "slots/op")
		})
	}
}

// BenchmarkReportedDone measures Done taking in a load report, serial and
// parallel, with the weight loop started (so no lazy loop starts). Each
// goroutine reports on its own backend, as the Dones of different
// backends do.
func BenchmarkReportedDone(b *testing.B) {
	p := wrr.NewReported()
	if err := p.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	bs := randomSet(64, 1)
	if err := p.Update(bs); err != nil {
		b.Fatal(err)
	}
	res := balancer.Result{Latency: time.Millisecond, Load: balancer.Load{RPS: 100, CPU: 0.5, EPS: 1}}
	b.Run("mode=serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p.Done(bs[0], res)
		}
	})
	b.Run("mode=parallel", func(b *testing.B) {
		var next atomic.Int32
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			be := bs[next.Add(1)%int32(len(bs))]
			for pb.Next() {
				p.Done(be, res)
			}
		})
	})
}

// BenchmarkRefresh measures a weight recomputation that changes the
// weights, so that the schedule is rebuilt: the background loop's cost
// per period.
func BenchmarkRefresh(b *testing.B) {
	for _, n := range []int{4, 64, 1024} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			now := time.Unix(1_700_000_000, 0)
			p := wrr.NewReported(wrr.WithClock(func() time.Time { return now }), wrr.WithBlackout(0))
			bs := randomSet(n, 1)
			if err := p.Update(bs); err != nil {
				b.Fatal(err)
			}
			r := rand.New(rand.NewPCG(3, 4))
			b.ReportAllocs()
			for b.Loop() {
				for _, be := range bs {
					p.Done(be, balancer.Result{Load: balancer.Load{RPS: 1 + 99*r.Float64(), CPU: 0.5}})
				}
				now = now.Add(time.Second)
				p.Refresh()
			}
			b.ReportMetric(float64(p.Period()), "slots/op")
		})
	}
}
