package wrr_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/wrr"
)

// A bad option's error sticks: every Update returns it, wrapping
// balancer.ErrBadOption and naming the option and its value, and the
// picker stays empty. The values on either side of each bound are taken.
func TestBadOptions(t *testing.T) {
	for _, tt := range []struct {
		opt  wrr.Option
		want string
	}{
		{wrr.WithRand(nil), "WithRand(nil)"},
		{wrr.WithMaxSchedule(0), "WithMaxSchedule(0)"},
		{wrr.WithMaxSchedule(-5), "WithMaxSchedule(-5)"},
		{wrr.WithMaxSchedule(1<<26 + 1), "WithMaxSchedule(67108865)"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			p := wrr.New(tt.opt)
			checkSticks(t, p, tt.want)
			// Every Option is a ReportedOption: the same error there.
			checkSticks(t, wrr.NewReported(tt.opt), tt.want)
		})
	}
	for _, tt := range []struct {
		opt  wrr.ReportedOption
		want string
	}{
		{wrr.WithBlackout(-time.Nanosecond), "WithBlackout(-1ns)"},
		{wrr.WithReportExpiry(0), "WithReportExpiry(0s)"},
		{wrr.WithReportExpiry(-time.Second), "WithReportExpiry(-1s)"},
		{wrr.WithWeightPeriod(wrr.MinWeightPeriod - 1), "WithWeightPeriod(99.999999ms)"},
		{wrr.WithWeightPeriod(0), "WithWeightPeriod(0s)"},
		{wrr.WithErrorPenalty(-0.5), "WithErrorPenalty(-0.5)"},
		{wrr.WithErrorPenalty(math.NaN()), "WithErrorPenalty(NaN)"},
		{wrr.WithErrorPenalty(math.Inf(1)), "WithErrorPenalty(+Inf)"},
		{wrr.WithClock(nil), "WithClock(nil)"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			checkSticks(t, wrr.NewReported(tt.opt), tt.want)
		})
	}
	// The first bad option is the one reported.
	checkSticks(t, wrr.NewReported(wrr.WithBlackout(-1), wrr.WithClock(nil)), "WithBlackout(-1ns)")

	for _, opt := range []wrr.ReportedOption{
		wrr.WithMaxSchedule(1), wrr.WithMaxSchedule(1 << 26), wrr.WithBlackout(0),
		wrr.WithReportExpiry(time.Nanosecond), wrr.WithWeightPeriod(wrr.MinWeightPeriod),
		wrr.WithErrorPenalty(0), wrr.WithClock(time.Now),
	} {
		p := wrr.NewReported(opt)
		assert.NoError(t, p.Update(balancer.Endpoints("a")), "a good value")
		require.NoError(t, p.Close())
	}
}

// checkSticks checks that p's Updates fail with the bad option want names,
// twice, and that p stays empty.
func checkSticks(t *testing.T, p balancer.Balancer, want string) {
	t.Helper()
	for range 2 {
		err := p.Update(balancer.Endpoints("a", "b"))
		require.ErrorIs(t, err, balancer.ErrBadOption)
		assert.ErrorContains(t, err, want)
	}
	t.Log(p.Update(nil))
	_, err := p.Pick(balancer.Request{})
	assert.ErrorIs(t, err, balancer.ErrNoBackend, "the set stays empty")
}
