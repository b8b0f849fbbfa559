package bench_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/lrt/prequal"
	"github.com/lbkit/lbkit/wrr"
)

// BenchmarkPick is the comparison of selection cost: every algorithm, sets
// of 4, 64 and 1024, serial and parallel, Pick plus Done where there is one.
func BenchmarkPick(b *testing.B) {
	for _, a := range append(catalog.Algorithms(), catalog.LoadAware()...) {
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
	for _, a := range append(catalog.Algorithms(), catalog.LoadAware()...) {
		if seen[a.Name] {
			t.Fatalf("duplicate algorithm name %q", a.Name)
		}
		seen[a.Name] = true
		t.Run(a.Name, func(t *testing.T) {
			balancertest.Run(t, func() balancer.Balancer { return a.New() })
		})
	}
}

// The benchmark's report reaches the pickers that weigh reports, and
// prequal's pool is full: the rows measure the paths they name.
func TestLoadAwareBenchState(t *testing.T) {
	set := balancer.Endpoints("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80")
	for _, a := range catalog.LoadAware() {
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
