package bench_test

import (
	"testing"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/bench"
)

// BenchmarkPick is the comparison of selection cost: every algorithm, sets
// of 4, 64 and 1024, serial and parallel, Pick plus Done where there is one.
func BenchmarkPick(b *testing.B) {
	for _, a := range bench.Algorithms() {
		weights := "equal"
		if a.Weighted {
			weights = "1-100"
		}
		b.Run("algo="+a.Name, func(b *testing.B) {
			b.Run("weights="+weights, func(b *testing.B) {
				balancertest.Benchmark(b, a.New, balancertest.BenchOptions{Weighted: a.Weighted})
			})
		})
	}
}

// Every configuration compared is a conforming picker: the comparison is
// only worth reading if each entry keeps the contracts.
func TestAlgorithmsConform(t *testing.T) {
	seen := map[string]bool{}
	for _, a := range bench.Algorithms() {
		if seen[a.Name] {
			t.Fatalf("duplicate algorithm name %q", a.Name)
		}
		seen[a.Name] = true
		t.Run(a.Name, func(t *testing.T) {
			balancertest.Run(t, func() balancer.Balancer { return a.New() })
		})
	}
}
