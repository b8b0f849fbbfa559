package leastconn_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/leastconn"
)

// BenchmarkPickDone runs the harness every algorithm shares (Pick then
// Done through the interfaces, 4, 64 and 1024 backends, serial and
// parallel) once per selection mode: the default, a forced scan and forced
// two choices.
func BenchmarkPickDone(b *testing.B) {
	for _, m := range []struct {
		name string
		opts []leastconn.Option
	}{
		{"auto", nil},
		{"scan", []leastconn.Option{leastconn.WithScan()}},
		{"p2c", []leastconn.Option{leastconn.WithChoices(2)}},
	} {
		b.Run("select="+m.name, func(b *testing.B) {
			balancertest.Benchmark(b, func() balancer.Balancer { return leastconn.New(m.opts...) }, balancertest.BenchOptions{})
		})
	}
}

// BenchmarkPickDoneWeighted is the harness with weights 1 to 100, where
// two choices draw their candidates from the alias table.
func BenchmarkPickDoneWeighted(b *testing.B) {
	balancertest.Benchmark(b, func() balancer.Balancer { return leastconn.New(leastconn.WithChoices(2)) },
		balancertest.BenchOptions{Weighted: true})
}

// BenchmarkCrossover measures Pick+Done for the scan and for two choices
// at the sizes around the default threshold, ScanBelow. "idle" has no
// request in flight, so every scan meets ties (the harness's case, and a
// lightly loaded proxy's); "loaded" holds 0 to 15 requests on each backend,
// so that ties are rare and branches less predictable, as under load.
func BenchmarkCrossover(b *testing.B) {
	for _, load := range []string{"idle", "loaded"} {
		for _, n := range []int{2, 4, 8, 12, 16, 24, 32, 64} {
			for _, m := range []struct {
				name string
				opt  leastconn.Option
			}{
				{"scan", leastconn.WithScan()},
				{"p2c", leastconn.WithChoices(2)},
			} {
				p := leastconn.New(m.opt)
				bs := make([]balancer.Backend, n)
				for i := range bs {
					bs[i] = balancer.NewEndpoint(fmt.Sprintf("10.0.%d.%d:8080", i>>8, i&255), 1)
				}
				if err := p.Update(bs); err != nil {
					b.Fatal(err)
				}
				if load == "loaded" {
					r := rand.New(rand.NewPCG(1, 2))
					for i := range bs {
						if err := p.Update(bs[i : i+1]); err != nil {
							b.Fatal(err)
						}
						for range r.IntN(16) {
							_, _ = p.Pick(balancer.Request{})
						}
					}
					if err := p.Update(bs); err != nil {
						b.Fatal(err)
					}
				}
				b.Run(fmt.Sprintf("load=%s/n=%d/select=%s", load, n, m.name), func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						got, _ := p.Pick(balancer.Request{})
						p.Done(got, balancer.Result{})
					}
				})
			}
		}
	}
}

// BenchmarkFloor is what any in-flight picker built on balancer's shared
// state pays per request whatever its selection: one random number from
// math/rand/v2, one States.Lookup by ID for Done, and the counter's Inc and
// Dec. Compare BenchmarkPickDone's p2c figures with it in the same run.
func BenchmarkFloor(b *testing.B) {
	for _, n := range []int{4, 64, 1024} {
		var reg balancer.Registry[balancer.InFlight]
		bs := make([]balancer.Backend, n)
		for i := range bs {
			bs[i] = balancer.NewEndpoint(fmt.Sprintf("10.%d.%d.%d:8080", i>>16&255, i>>8&255, i&255), 1)
		}
		states := reg.Sync(bs)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			var sink uint64
			for b.Loop() {
				x := rand.Uint64()
				sink += x
				i := int(x & uint64(n-1)) // n is a power of two
				states.At(i).Inc()
				states.Lookup(bs[i]).Dec()
			}
			_ = sink
		})
	}
}

// BenchmarkBalance reports how evenly each mode spreads requests that stay
// in flight: n backends, 8n requests picked and held, then the largest
// count minus the mean ("peak-mean", 0 is perfect). The scan is exact; two
// choices stay within a few requests of the mean, as Berenbrink et al.
// ("Balanced allocations: the heavily loaded case", 2006) show: ln ln n /
// ln 2 + O(1) above it, however many requests.
func BenchmarkBalance(b *testing.B) {
	for _, n := range []int{16, 64, 1024} {
		bs := make([]balancer.Backend, n)
		for i := range bs {
			bs[i] = balancer.NewEndpoint(fmt.Sprintf("10.0.%d.%d:8080", i>>8, i&255), 1)
		}
		for _, m := range []struct {
			name string
			opt  leastconn.Option
		}{
			{"scan", leastconn.WithScan()},
			{"p2c", leastconn.WithChoices(2)},
			{"choices=3", leastconn.WithChoices(3)},
		} {
			b.Run(fmt.Sprintf("n=%d/select=%s", n, m.name), func(b *testing.B) {
				const perBackend = 8
				var excess float64
				for b.Loop() {
					p := leastconn.New(m.opt)
					if err := p.Update(bs); err != nil {
						b.Fatal(err)
					}
					for range perBackend * n {
						_, _ = p.Pick(balancer.Request{})
					}
					var most int64
					for _, be := range bs {
						most = max(most, p.InFlight(be.ID()))
					}
					excess += float64(most - perBackend)
				}
				b.ReportMetric(excess/float64(b.N), "peak-mean")
			})
		}
	}
}

// BenchmarkChoicesThroughput reports what two choices give up against the
// exact scan when backends differ in speed: n backends answering in 50 to
// 500 ms (evenly spread, ±10% jitter), 25 closed-loop users per backend
// with no think time, one virtual minute. The metric is requests served
// with two choices over requests served with the scan (1 = as good). Two
// choices draw each backend as a candidate in at most 2/n of the picks, so
// a fast backend that would need a larger share to stay as busy as the
// others cannot get it; weights that follow capacity lift the cap, since
// weighted sets draw candidates in proportion to weight ("weighted"
// variant: weights ∝ 1/service time).
func BenchmarkChoicesThroughput(b *testing.B) {
	for _, weightedSet := range []bool{false, true} {
		for _, n := range []int{4, 8, 16, 64} {
			base := make([]time.Duration, n)
			bs := make([]balancer.Backend, n)
			for i := range bs {
				base[i] = ms(50 + 450*i/(n-1))
				w := 1
				if weightedSet {
					w = int(500 * time.Millisecond / base[i] * 10) // 100 at 50 ms, 10 at 500 ms
				}
				bs[i] = balancer.NewEndpoint(fmt.Sprintf("10.0.0.%d:8080", i), w)
			}
			name := fmt.Sprintf("weighted=%v/n=%d", weightedSet, n)
			b.Run(name, func(b *testing.B) {
				var ratio float64
				for b.Loop() {
					served := map[bool]int{}
					for _, scan := range []bool{true, false} {
						opt := leastconn.WithChoices(2)
						if scan {
							opt = leastconn.WithScan()
						}
						s := sim{backends: bs, service: jittered(0.1, base...), users: 25 * n,
							length: time.Minute, seed: 5, opts: []leastconn.Option{opt}}
						served[scan] = s.run(b).picks
					}
					ratio += float64(served[false]) / float64(served[true])
				}
				b.ReportMetric(ratio/float64(b.N), "p2c/scan")
			})
		}
	}
}
