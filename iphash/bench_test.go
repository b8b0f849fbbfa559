package iphash_test

import (
	"testing"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/iphash"
)

// BenchmarkPickInterface runs the harness every algorithm shares: Pick
// through the balancer.Balancer interface, keys cycling through 1024 client
// addresses of four forms, at 4, 64 and 1024 backends. With weights, the
// home is found by a binary search over the laid-out weights.
func BenchmarkPickInterface(b *testing.B) {
	newPicker := func() balancer.Balancer { return iphash.New() }
	b.Run("weighted=false", func(b *testing.B) {
		balancertest.Benchmark(b, newPicker, balancertest.BenchOptions{})
	})
	b.Run("weighted=true", func(b *testing.B) {
		balancertest.Benchmark(b, newPicker, balancertest.BenchOptions{Weighted: true})
	})
}
