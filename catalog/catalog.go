package catalog

import (
	"math"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/consistent"
	"github.com/lbkit/lbkit/iphash"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/lrt"
	"github.com/lbkit/lbkit/lrt/prequal"
	"github.com/lbkit/lbkit/rr"
	"github.com/lbkit/lbkit/wrr"
)

// Algorithm is one picker configuration: a name and how to build it.
type Algorithm struct {
	// Name is short and stable: it names sub-benchmarks and table rows.
	Name string
	// New returns a fresh picker with an empty set, with the algorithm's
	// own defaults for randomness and time: what a service would use.
	New func() balancer.Balancer
	// Sim returns a fresh picker with an empty set whose randomness and
	// clock are the caller's, for simulations in virtual time (package
	// bench/sim): rand feeds the algorithm's random choices and now is the
	// clock it reads, if it reads one. Algorithms without randomness or
	// time (the hash pickers) ignore them. A nil rand or now keeps the
	// algorithm's default, so Sim(nil, nil) is what New returns.
	Sim func(rand func() uint64, now func() time.Time) balancer.Balancer
	// Weighted is true when the algorithm is only worth measuring with
	// unequal weights (wrr: with equal weights it is rr). The benchmark then
	// draws weights from 1 to 100 from a fixed seed, and the simulator gives
	// it the scenario's weights (the others see equal weights, as in the
	// study lbkit grew out of).
	Weighted bool
	// Reports is true for an algorithm that weighs the load reports
	// backends send with their answers (balancer.Result.Load): the
	// simulator's backends measure themselves and report only for those
	// (and for probing pickers, which ask).
	Reports bool
	// Load is the load report the benchmark passes in every Done, for the
	// algorithms of LoadAware that weigh reports; the zero Load for the
	// others.
	Load balancer.Load
	// Prepare, when set, brings a picker just given its set to the state
	// it serves in before the benchmark times it (prequal: a full pool).
	Prepare func(balancer.Balancer, []balancer.Backend)
}

// Algorithms returns every lbkit algorithm with its defaults, plus the
// variants that show a trade-off: leastconn with two random choices at
// every size (by default it scans sets below 16, so a four-backend
// scenario would never show the power of two choices), consistent's ring
// with bounded loads (c = 1.25) and lrt's naive mode, which herds.
func Algorithms() []Algorithm {
	return []Algorithm{
		algorithm("rr", false, func(r func() uint64, _ func() time.Time) balancer.Balancer {
			return rr.New(withRand(r, rr.WithRand)...)
		}),
		algorithm("wrr", true, func(r func() uint64, _ func() time.Time) balancer.Balancer {
			return wrr.New(withRand(r, wrr.WithRand)...)
		}),
		algorithm("leastconn", false, func(r func() uint64, _ func() time.Time) balancer.Balancer {
			return leastconn.New(withRand(r, leastconn.WithRand)...)
		}),
		algorithm("leastconn-p2c", false, func(r func() uint64, _ func() time.Time) balancer.Balancer {
			return leastconn.New(append(withRand(r, leastconn.WithRand), leastconn.WithChoices(2))...)
		}),
		algorithm("iphash", false, func(func() uint64, func() time.Time) balancer.Balancer {
			return iphash.New()
		}),
		algorithm("ring", false, func(func() uint64, func() time.Time) balancer.Balancer {
			return consistent.NewRing()
		}),
		algorithm("ring-bounded", false, func(func() uint64, func() time.Time) balancer.Balancer {
			return consistent.NewRing(consistent.WithBoundedLoad(1.25))
		}),
		algorithm("maglev", false, func(func() uint64, func() time.Time) balancer.Balancer {
			return consistent.NewMaglev()
		}),
		algorithm("lrt", false, func(r func() uint64, now func() time.Time) balancer.Balancer {
			return lrt.New(append(withRand(r, lrt.WithRand), withClock(now, lrt.WithClock)...)...)
		}),
		algorithm("lrt-naive", false, func(r func() uint64, now func() time.Time) balancer.Balancer {
			opts := append(withRand(r, lrt.WithRand), withClock(now, lrt.WithClock)...)
			return lrt.New(append(opts, lrt.WithMode(lrt.Naive))...)
		}),
	}
}

// LoadAware returns the algorithms that weigh what the backends say of
// their own load, beside Algorithms' for the selection-cost benchmark:
// wrr's Reported (weights after gRFC A58 from load reports),
// leastconn with WithReports (two choices on reported utilisation) and
// lrt/prequal (probes). They are kept out of Algorithms, which is what
// the proxy command offers and lbsim runs by default: the first two need
// backends that send load reports (Result.Load in Done), prequal backends
// that answer probes (through Start's loop, or Step and Observe in
// virtual time). The simulator's backends do both (package bench/sim,
// "Load reports and probes"); lbsim runs these with its load scenarios,
// or when named.
//
// In the benchmark, every Done carries a report (Load), and prequal's pool
// is filled with 16 answers that neither age out nor are used up, so that
// every pick runs the hot-cold rule over a full pool: its cost when
// probes keep up.
func LoadAware() []Algorithm {
	report := balancer.Load{RPS: 100, Application: 0.5, EPS: 1}
	return []Algorithm{
		{
			Name: "wrr-reported",
			New:  func() balancer.Balancer { return wrr.NewReported() },
			Sim: func(r func() uint64, now func() time.Time) balancer.Balancer {
				// Closed, so that no loop recomputes the weights on real
				// time: in virtual time the caller calls Refresh every
				// weight period, as package bench/sim does.
				p := wrr.NewReported(append(withRand(r, reported(wrr.WithRand)), withClock(now, wrr.WithClock)...)...)
				_ = p.Close()
				return p
			},
			Reports: true,
			Load:    report,
		},
		{
			Name: "leastconn-reports",
			New:  func() balancer.Balancer { return leastconn.New(leastconn.WithReports()) },
			Sim: func(r func() uint64, now func() time.Time) balancer.Balancer {
				opts := append(withRand(r, leastconn.WithRand), withClock(now, leastconn.WithClock)...)
				return leastconn.New(append(opts, leastconn.WithReports())...)
			},
			Reports: true,
			Load:    report,
		},
		{
			Name: "prequal",
			New: func() balancer.Balancer {
				return prequal.New(nil, prequal.WithReuse(math.MaxInt32), prequal.WithReportExpiry(math.MaxInt64))
			},
			Sim: func(r func() uint64, now func() time.Time) balancer.Balancer {
				return prequal.New(nil, append(withRand(r, prequal.WithRand), withClock(now, prequal.WithClock)...)...)
			},
			Prepare: fillPool,
		},
	}
}

// fillPool gives a prequal picker one answer from each of up to 16
// backends of set, with requests in flight from 0 to 15 and latencies
// that fall as they rise, so that the hot-cold rule has both kinds to
// weigh.
func fillPool(b balancer.Balancer, set []balancer.Backend) {
	p, ok := b.(*prequal.Picker)
	if !ok {
		return
	}
	for i := range min(len(set), prequal.PoolSize) {
		p.Observe(set[i], balancer.Load{InFlight: float64(i), Latency: time.Duration(20-i) * time.Millisecond})
	}
}

// withRand returns the option with(r), or none for a nil r: a nil
// function is a bad option, and Sim's nil means the algorithm's default.
func withRand[O any](r func() uint64, with func(func() uint64) O) []O {
	if r == nil {
		return nil
	}
	return []O{with(r)}
}

// withClock is withRand for a clock.
func withClock[O any](now func() time.Time, with func(func() time.Time) O) []O {
	if now == nil {
		return nil
	}
	return []O{with(now)}
}

// reported makes wrr.WithRand a ReportedOption, for withRand.
func reported(with func(func() uint64) wrr.Option) func(func() uint64) wrr.ReportedOption {
	return func(r func() uint64) wrr.ReportedOption { return with(r) }
}

// algorithm fills New from sim, called with nil for both: every Sim above
// passes no option for a nil argument.
func algorithm(name string, weighted bool, sim func(func() uint64, func() time.Time) balancer.Balancer) Algorithm {
	return Algorithm{
		Name:     name,
		New:      func() balancer.Balancer { return sim(nil, nil) },
		Sim:      sim,
		Weighted: weighted,
	}
}

// Lookup returns the configuration of Algorithms named name, and false
// when there is none.
func Lookup(name string) (Algorithm, bool) {
	for _, a := range Algorithms() {
		if a.Name == name {
			return a, true
		}
	}
	return Algorithm{}, false
}
