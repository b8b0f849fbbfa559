package health_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/health"
)

// BenchmarkPick measures Pick+Done for every algorithm, bare and wrapped,
// so that the decorator's cost reads off one run:
// algo=<name>/wrap=bare|health|failrate|ramping/n=<size>/mode=serial|parallel.
// failrate is health with Config.FailureRate on, so that every Done
// counts toward a failure rate; ramping is health with one backend of the
// set ramping up under slow start, the slowest path of Pick.
func BenchmarkPick(b *testing.B) {
	for _, a := range catalog.Algorithms() {
		opt := balancertest.BenchOptions{Weighted: a.Weighted}
		b.Run("algo="+a.Name, func(b *testing.B) {
			b.Run("wrap=bare", func(b *testing.B) {
				balancertest.Benchmark(b, a.New, opt)
			})
			b.Run("wrap=health", func(b *testing.B) {
				balancertest.Benchmark(b, func() balancer.Balancer {
					h, err := health.New(a.New(), health.Config{})
					if err != nil {
						b.Fatal(err)
					}
					return h
				}, opt)
			})
			b.Run("wrap=failrate", func(b *testing.B) {
				balancertest.Benchmark(b, func() balancer.Balancer {
					h, err := health.New(a.New(), health.Config{FailureRate: &health.FailureRateCheck{}})
					if err != nil {
						b.Fatal(err)
					}
					return h
				}, opt)
			})
			b.Run("wrap=ramping", func(b *testing.B) {
				balancertest.Benchmark(b, func() balancer.Balancer { return newRamping(b, a.New()) }, opt)
			})
		})
	}
}

// ramping is a health.Balancer whose Update leaves the set's first backend
// ramping up for an hour.
type ramping struct {
	*health.Balancer
	clock *fakeClock
}

func newRamping(b *testing.B, inner balancer.Balancer) *ramping {
	clock := newFakeClock()
	h, err := health.New(inner, health.Config{SlowStart: time.Hour, Clock: clock})
	if err != nil {
		b.Fatal(err)
	}
	return &ramping{Balancer: h, clock: clock}
}

func (r *ramping) Update(bs []balancer.Backend) error {
	if err := r.Balancer.Update(bs); err != nil {
		return err
	}
	r.Done(bs[0], balancer.Result{Err: errRefused})
	r.Apply()
	r.clock.Advance(31 * time.Second)
	r.Apply()
	if v := r.View(); v.Backends[0].Ramp >= 1 {
		return fmt.Errorf("not ramping: %+v", v.Backends[0])
	}
	return nil
}

// BenchmarkInnerUpdate measures what one ejection costs the inner picker:
// an Update of 1024 backends that drops one, or brings it back.
func BenchmarkInnerUpdate(b *testing.B) {
	for _, a := range catalog.Algorithms() {
		b.Run("algo="+a.Name+"/n=1024", func(b *testing.B) {
			full := benchSet(1024, a.Weighted)
			less := full[1:]
			p := a.New()
			if err := p.Update(full); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				set := full
				if i%2 == 0 {
					set = less
				}
				if err := p.Update(set); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// benchSet returns n endpoints, weighted 1 to 100 by a fixed rule if asked.
func benchSet(n int, weighted bool) []balancer.Backend {
	bs := make([]balancer.Backend, n)
	for i := range bs {
		w := 1
		if weighted {
			w = 1 + (i*37)%100
		}
		bs[i] = balancer.NewEndpoint(fmt.Sprintf("10.%d.%d.%d:8080", i>>16&255, i>>8&255, i&255), w)
	}
	return bs
}

// BenchmarkEject measures, with Start running, the time from a Done that
// reports a refused connection to the return of the inner Update that
// takes the backend out: the applier's wake-up plus the inner Update.
// It reports the mean as ns/eject and the worst as max-ns/eject; ns/op
// also counts bringing the backend back.
func BenchmarkEject(b *testing.B) {
	for _, a := range catalog.Algorithms() {
		for _, n := range []int{64, 1024} {
			b.Run(fmt.Sprintf("algo=%s/n=%d", a.Name, n), func(b *testing.B) {
				w := &watched{Balancer: a.New(), updated: make(chan int, 1)}
				h, err := health.New(w, health.Config{MaxEjectedPercent: 100})
				if err != nil {
					b.Fatal(err)
				}
				defer h.Close()
				bs := benchSet(n, a.Weighted)
				if err := h.Update(bs); err != nil {
					b.Fatal(err)
				}
				<-w.updated
				if err := h.Start(context.Background()); err != nil {
					b.Fatal(err)
				}
				var total, worst time.Duration
				i := 0
				for b.Loop() {
					victim := bs[i%n]
					t0 := time.Now()
					h.Done(victim, balancer.Result{Err: errRefused})
					for <-w.updated != n-1 {
					}
					d := time.Since(t0)
					total, worst = total+d, max(worst, d)
					h.Observe(victim.ID(), nil) // Rise (2) passes bring it back
					h.Observe(victim.ID(), nil)
					for <-w.updated != n {
					}
					i++
				}
				b.ReportMetric(float64(total.Nanoseconds())/float64(i), "ns/eject")
				b.ReportMetric(float64(worst.Nanoseconds()), "max-ns/eject")
			})
		}
	}
}

// watched is an inner picker that reports the size of every set it takes,
// once its Update has returned.
type watched struct {
	balancer.Balancer
	updated chan int
}

func (w *watched) Update(bs []balancer.Backend) error {
	err := w.Balancer.Update(bs)
	w.updated <- len(bs)
	return err
}

func (w *watched) Done(b balancer.Backend, r balancer.Result) {
	if fb, ok := w.Balancer.(balancer.Feedback); ok {
		fb.Done(b, r)
	}
}

// BenchmarkApply measures health's own share of an ejection, without the
// applier's wake-up and with an inner picker whose Update does nothing:
// per op, one ejection and one return, each an Apply over the whole set.
func BenchmarkApply(b *testing.B) {
	for _, n := range []int{64, 1024} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			h, err := health.New(nopBalancer{}, health.Config{MaxEjectedPercent: 100, Clock: newFakeClock()})
			if err != nil {
				b.Fatal(err)
			}
			bs := benchSet(n, false)
			if err := h.Update(bs); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				victim := bs[i%n]
				h.Done(victim, balancer.Result{Err: errRefused})
				h.Apply()
				h.Observe(victim.ID(), nil)
				h.Observe(victim.ID(), nil)
				h.Apply()
				i++
			}
		})
	}
}

// nopBalancer takes any set and picks nothing.
type nopBalancer struct{}

func (nopBalancer) Update([]balancer.Backend) error { return nil }
func (nopBalancer) Pick(balancer.Request) (balancer.Backend, error) {
	return nil, balancer.ErrNoBackend
}
