package bench_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/bench"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/lrt/prequal"
	"github.com/lbkit/lbkit/wrr"
)

// BenchmarkPick is the comparison of selection cost: every algorithm, sets
// of 4, 64 and 1024, serial and parallel, Pick plus Done where there is one.
func BenchmarkPick(b *testing.B) {
	for _, a := range append(bench.Algorithms(), bench.LoadAware()...) {
		weights := "equal"
		if a.Weighted {
			weights = "1-100"
		}
		b.Run("algo="+a.Name, func(b *testing.B) {
			b.Run("weights="+weights, func(b *testing.B) {
				balancertest.Benchmark(b, a.New, balancertest.BenchOptions{Weighted: a.Weighted, Load: a.Load, Prepare: a.Prepare})
			})
		})
	}
}

// Every configuration compared is a conforming picker: the comparison is
// only worth reading if each entry keeps the contracts.
func TestAlgorithmsConform(t *testing.T) {
	seen := map[string]bool{}
	for _, a := range append(bench.Algorithms(), bench.LoadAware()...) {
		if seen[a.Name] {
			t.Fatalf("duplicate algorithm name %q", a.Name)
		}
		seen[a.Name] = true
		t.Run(a.Name, func(t *testing.T) {
			balancertest.Run(t, func() balancer.Balancer { return a.New() })
		})
	}
}

// Sim builds pickers on the caller's random source: the same seed gives
// the same picks, and the algorithms that draw (rr's start, wrr's start,
// leastconn's and lrt's ties) draw from it.
func TestSimSeams(t *testing.T) {
	epoch := time.Unix(1_700_000_000, 0)
	picks := func(a bench.Algorithm, seed uint64) []string {
		var now time.Duration
		src := rand.New(rand.NewPCG(seed, 0))
		p := a.Sim(src.Uint64, func() time.Time { return epoch.Add(now) })
		require.NoError(t, p.Update(balancer.WeightedEndpoints(
			balancer.Weighted{Addr: "10.0.0.1:80", Weight: 3}, balancer.Weighted{Addr: "10.0.0.2:80", Weight: 1},
			balancer.Weighted{Addr: "10.0.0.3:80", Weight: 2}, balancer.Weighted{Addr: "10.0.0.4:80", Weight: 1})))
		fb, _ := p.(balancer.Feedback)
		var ids []string
		for i := range 200 {
			b, err := p.Pick(balancer.Request{Key: fmt.Sprintf("192.0.2.%d", i%50)})
			require.NoError(t, err)
			ids = append(ids, b.ID())
			now += time.Millisecond
			if fb != nil {
				fb.Done(b, balancer.Result{Latency: time.Duration(1+i%7) * time.Millisecond})
			}
		}
		return ids
	}
	for _, a := range append(bench.Algorithms(), bench.LoadAware()...) {
		t.Run(a.Name, func(t *testing.T) {
			require.NotNil(t, a.Sim)
			first := picks(a, 1)
			assert.Equal(t, first, picks(a, 1), "same seed, same picks")
			distinct := map[string]bool{}
			for seed := range uint64(6) {
				distinct[fmt.Sprint(picks(a, seed))] = true
			}
			switch a.Name {
			case "rr", "wrr", "leastconn", "leastconn-p2c", "lrt", "lrt-naive", "wrr-reported", "leastconn-reports", "prequal":
				assert.Greater(t, len(distinct), 1, "the seed reaches the picker")
			default:
				assert.Len(t, distinct, 1, "hash pickers draw nothing")
			}
		})
	}
}

func TestLookup(t *testing.T) {
	for _, want := range bench.Algorithms() {
		got, ok := bench.Lookup(want.Name)
		require.True(t, ok, want.Name)
		assert.Equal(t, want.Name, got.Name)
		assert.Equal(t, want.Weighted, got.Weighted)
	}
	_, ok := bench.Lookup("random")
	assert.False(t, ok)
	// The load-aware ones stay out of what the simulator and the proxy
	// command run and look up by default.
	for _, a := range bench.LoadAware() {
		_, ok := bench.Lookup(a.Name)
		assert.False(t, ok, a.Name)
	}
}

// The benchmark's report reaches the pickers that weigh reports, and
// prequal's pool is full: the rows measure the paths they name.
func TestLoadAwareBenchState(t *testing.T) {
	set := balancer.Endpoints("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80")
	for _, a := range bench.LoadAware() {
		t.Run(a.Name, func(t *testing.T) {
			p := a.New()
			require.NoError(t, p.Update(set))
			if a.Prepare != nil {
				a.Prepare(p, set)
			}
			b, err := p.Pick(balancer.Request{})
			require.NoError(t, err)
			p.(balancer.Feedback).Done(b, balancer.Result{Latency: time.Millisecond, Load: a.Load})
			switch q := p.(type) {
			case *wrr.Reported:
				assert.True(t, a.Load.Reported())
				_, ok := q.Weight(b.ID())
				assert.False(t, ok, "in the blackout, but the report was taken (no panic, no lock)")
			case *leastconn.Picker:
				_, ok := q.Utilization(b.ID())
				assert.True(t, ok)
			case *prequal.Picker:
				assert.Equal(t, len(set), q.Stats().Pool)
				assert.Equal(t, "10.0.0.2:80", b.ID(), "RIFs 0, 1, 2: the quantile is 1, and of the cold two the faster (19 ms)")
			default:
				t.Fatalf("unexpected %T", p)
			}
		})
	}
}
