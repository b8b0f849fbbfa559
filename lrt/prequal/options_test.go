package prequal_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/lrt/prequal"
)

// A bad option's error sticks: every Update returns it, wrapping
// balancer.ErrBadOption and naming the option and its value, and the
// Picker stays empty. The value at each bound is taken.
func TestBadOptions(t *testing.T) {
	for _, tt := range []struct {
		opt  prequal.Option
		want string
	}{
		{prequal.WithQuantile(-0.1), "WithQuantile(-0.1)"},
		{prequal.WithQuantile(1.5), "WithQuantile(1.5)"},
		{prequal.WithQuantile(math.NaN()), "WithQuantile(NaN)"},
		{prequal.WithProbeRate(0), "WithProbeRate(0)"},
		{prequal.WithProbeRate(0.001), "WithProbeRate(0.001)"},
		{prequal.WithProbeRate(17), "WithProbeRate(17)"},
		{prequal.WithProbeRate(math.NaN()), "WithProbeRate(NaN)"},
		{prequal.WithReuse(0), "WithReuse(0)"},
		{prequal.WithReuse(math.MaxInt32 + 1), "WithReuse(2147483648)"},
		{prequal.WithReportExpiry(time.Microsecond), "WithReportExpiry(1µs)"},
		{prequal.WithReportExpiry(0), "WithReportExpiry(0s)"},
		{prequal.WithProbeTimeout(0), "WithProbeTimeout(0s)"},
		{prequal.WithProbeTimeout(-time.Second), "WithProbeTimeout(-1s)"},
		{prequal.WithTick(99 * time.Microsecond), "WithTick(99µs)"},
		{prequal.WithTick(0), "WithTick(0s)"},
		{prequal.WithRand(nil), "WithRand(nil)"},
		{prequal.WithClock(nil), "WithClock(nil)"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			p := prequal.New(nil, tt.opt)
			for range 2 {
				err := p.Update(balancer.Endpoints("a", "b"))
				require.ErrorIs(t, err, balancer.ErrBadOption)
				assert.ErrorContains(t, err, tt.want)
				t.Log(err)
			}
			_, err := p.Pick(balancer.Request{})
			assert.ErrorIs(t, err, balancer.ErrNoBackend, "the set stays empty")
		})
	}
	for _, opt := range []prequal.Option{
		prequal.WithQuantile(0), prequal.WithQuantile(1), prequal.WithProbeRate(0.01), prequal.WithProbeRate(16),
		prequal.WithReuse(1), prequal.WithReuse(math.MaxInt32), prequal.WithReportExpiry(time.Millisecond),
		prequal.WithProbeTimeout(time.Nanosecond), prequal.WithTick(100 * time.Microsecond),
		prequal.WithRand(func() uint64 { return 1 }), prequal.WithClock(time.Now),
	} {
		assert.NoError(t, prequal.New(nil, opt).Update(balancer.Endpoints("a")), "a good value")
	}
}
