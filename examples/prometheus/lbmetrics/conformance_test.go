package lbmetrics_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/examples/prometheus/lbmetrics"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/leastconn"
)

// wrap returns a constructor of fresh decorated balancers around newInner,
// each with a Metrics of its own, as the kit starts every check afresh.
func wrap(t testing.TB, cfg lbmetrics.Config, newInner func() balancer.Balancer) func() balancer.Balancer {
	return func() balancer.Balancer {
		m, err := lbmetrics.New(cfg)
		require.NoError(t, err)
		b, err := m.Wrap(newInner())
		require.NoError(t, err)
		return b
	}
}

// The decorator keeps every contract of package balancer around one
// algorithm of each family, timing every Pick (the costliest setting) or
// the default sample of them. (Maglev is left out: building its table
// makes the kit take 20 s under -race, for the same decorator code.)
func TestConformance(t *testing.T) {
	some := map[string]bool{"rr": true, "wrr": true, "leastconn": true, "iphash": true, "ring-bounded": true, "lrt": true}
	for _, a := range catalog.Algorithms() {
		if !some[a.Name] {
			continue
		}
		t.Run("algo="+a.Name, func(t *testing.T) {
			balancertest.Run(t, wrap(t, lbmetrics.Config{PickSampling: 1}, a.New))
		})
	}
	t.Run("algo=leastconn/sampled", func(t *testing.T) {
		balancertest.Run(t, wrap(t, lbmetrics.Config{}, func() balancer.Balancer { return leastconn.New() }))
	})
}

// Around health, as the proxy uses it: health's changes reach
// HealthChanged from inside the decorator's Update.
func TestConformanceHealth(t *testing.T) {
	balancertest.Run(t, func() balancer.Balancer {
		m, err := lbmetrics.New(lbmetrics.Config{PickSampling: 1})
		require.NoError(t, err)
		h, err := health.New(leastconn.New(), health.Config{OnChange: m.HealthChanged, ConsecutiveFailures: 2})
		require.NoError(t, err)
		t.Cleanup(func() { h.Close() })
		b, err := m.Wrap(h)
		require.NoError(t, err)
		return b
	})
}

// The decorator is transparent: Start, Close and Unwrap reach the picker
// inside (balancer's doc, "Decorators").
func TestConformanceDecorator(t *testing.T) {
	balancertest.RunDecorator(t, func(inner balancer.Balancer) (balancer.Balancer, error) {
		m, err := lbmetrics.New(lbmetrics.Config{})
		if err != nil {
			return nil, err
		}
		return m.Wrap(inner)
	})
}
