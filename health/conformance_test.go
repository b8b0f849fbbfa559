package health_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/bench"
	"github.com/lbkit/lbkit/health"
)

// Every algorithm, wrapped with the default Config, keeps every contract of
// package balancer. With a slow-start window and a clock that stands still,
// backends added after the first set ramp up for the whole run, so Pick's
// re-pick path is under the same checks.
func TestConformance(t *testing.T) {
	configs := []struct {
		name string
		cfg  func() health.Config
	}{
		{"defaults", func() health.Config { return health.Config{} }},
		{"ramping", func() health.Config {
			return health.Config{SlowStart: time.Minute, Clock: newFakeClock()}
		}},
	}
	for _, a := range bench.Algorithms() {
		for _, c := range configs {
			t.Run("algo="+a.Name+"/cfg="+c.name, func(t *testing.T) {
				balancertest.Run(t, func() balancer.Balancer {
					h, err := health.New(a.New(), c.cfg())
					require.NoError(t, err)
					return h
				})
			})
		}
	}
}

// Health is a transparent decorator: Start, Close and Unwrap reach the
// picker inside (balancer's doc, "Decorators").
func TestConformanceDecorator(t *testing.T) {
	balancertest.RunDecorator(t, func(inner balancer.Balancer) (balancer.Balancer, error) {
		return health.New(inner, health.Config{})
	})
}
