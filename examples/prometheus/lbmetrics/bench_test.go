package lbmetrics_test

import (
	"testing"

	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/examples/prometheus/lbmetrics"
)

// BenchmarkPickDone measures Pick followed by Done, as a proxy pays per
// request, for each algorithm bare and wrapped: wrap=none is the
// algorithm alone, wrap=sampled the decorator with its default of one Pick
// timed in 8, wrap=every the decorator timing every Pick.
//
//	go test -run '^$' -bench 'PickDone/algo=(rr|leastconn)/' -benchtime 1s ./lbmetrics/
func BenchmarkPickDone(b *testing.B) {
	wraps := []struct {
		name     string
		sampling int // 0: no decorator
	}{{"none", 0}, {"sampled", lbmetrics.DefaultPickSampling}, {"every", 1}}
	for _, a := range catalog.Algorithms() {
		for _, w := range wraps {
			b.Run("algo="+a.Name+"/wrap="+w.name, func(b *testing.B) {
				newBalancer := a.New
				if w.sampling > 0 {
					newBalancer = wrap(b, lbmetrics.Config{PickSampling: w.sampling}, a.New)
				}
				balancertest.Benchmark(b, newBalancer, balancertest.BenchOptions{Weighted: a.Weighted})
			})
		}
	}
}
