package sim

import (
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
)

// clockFunc adapts the simulator's clock to health.Clock.
type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

// healthWrapper is what the simulator needs of package health's Balancer:
// the picker interfaces, and the seams to feed probe results and apply
// changes on the simulator's goroutine.
type healthWrapper interface {
	balancer.Balancer
	balancer.Feedback
	Observe(id string, err error)
	Apply()
}

var _ healthWrapper = (*health.Balancer)(nil)

// newHealth wraps inner in package health's Balancer, with its defaults
// but for: no prober (the simulator schedules checks every interval and
// feeds them through Observe), passive ejection only if v has Passive, the
// virtual clock, a seeded source for its random draws, and, with
// FailureRate, failure-percentage ejection at FailRateThreshold. It never calls
// Start: the simulator calls Apply after each event that may change a
// backend's health, and every tickEvery.
func newHealth(inner balancer.Balancer, v Variant, interval time.Duration, now func() time.Time, rand func() uint64) (healthWrapper, error) {
	var rate *health.FailureRateCheck
	if v&FailureRate != 0 {
		rate = &health.FailureRateCheck{Threshold: FailRateThreshold}
	}
	return health.New(inner, health.Config{
		Interval:    interval,
		NoEjection:  v&Passive == 0,
		FailureRate: rate,
		Clock:       clockFunc(now),
		Rand:        rand,
	})
}
