package health_test

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/health"
)

// Every algorithm, wrapped with the default Config, keeps every contract of
// package balancer. With a slow-start window and a clock that stands still,
// backends added after the first set ramp up for the whole run, so Pick's
// re-pick path is under the same checks.
func TestConformance(t *testing.T) {
	// rateEjections counts the ejections for a failure rate under
	// cfg=failrate, which must make some, or it checks nothing of them.
	var rateEjections, rateRuns atomic.Int64
	t.Cleanup(func() {
		if !t.Failed() && rateRuns.Load() > 0 && rateEjections.Load() == 0 {
			t.Error("cfg=failrate: no ejection for a failure rate under the kit")
		}
	})
	configs := []struct {
		name string
		cfg  func() health.Config
	}{
		{"defaults", func() health.Config { return health.Config{} }},
		{"ramping", func() health.Config {
			return health.Config{SlowStart: time.Minute, Clock: newFakeClock()}
		}},
		// Failure rates counted by every Done, and judged at every Update:
		// the clock moves a millisecond, the interval, at each reading.
		// The kit's refused connections eject at once, before any
		// judgement; so that failure rates eject too, a result with an odd
		// latency counts as a failure, and any backend with one in the
		// interval is ejected, under the cap.
		{"failrate", func() health.Config {
			rateRuns.Add(1)
			return health.Config{
				Clock:     &tickingClock{fakeClock: newFakeClock(), step: time.Millisecond},
				IsFailure: func(r balancer.Result) bool { return r.Err != nil || r.Latency%2 == 1 },
				OnChange: func(c health.Change) {
					if c.Reason == health.ReasonFailureRate {
						rateEjections.Add(1)
					}
				},
				FailureRate: &health.FailureRateCheck{Interval: time.Millisecond, Threshold: 1, RequestVolume: 1, MinimumHosts: 1},
			}
		}},
	}
	for _, a := range conformanceAlgorithms() {
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

// tickingClock moves step on at every reading.
type tickingClock struct {
	*fakeClock
	step time.Duration
}

func (c *tickingClock) Now() time.Time {
	c.Advance(c.step)
	return c.fakeClock.Now()
}

// conformanceAlgorithms returns the algorithms the conformance runs put
// inside the decorator: every one without the race detector, one of each
// family under it (see race_on_test.go).
func conformanceAlgorithms() []catalog.Algorithm {
	all := catalog.Algorithms()
	if !raceEnabled {
		return all
	}
	var out []catalog.Algorithm
	for _, a := range all {
		if slices.Contains([]string{"rr", "leastconn", "ring-bounded", "lrt"}, a.Name) {
			out = append(out, a)
		}
	}
	return out
}
