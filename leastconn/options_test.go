package leastconn_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/leastconn"
)

// A bad option's error sticks: every Update returns it, wrapping
// balancer.ErrBadOption and naming the option and its value, and the
// Picker stays empty. The value at each bound is taken.
func TestBadOptions(t *testing.T) {
	for _, tt := range []struct {
		opt  leastconn.Option
		want string
	}{
		{leastconn.WithRand(nil), "WithRand(nil)"},
		{leastconn.WithChoices(1), "WithChoices(1)"},
		{leastconn.WithChoices(0), "WithChoices(0)"},
		{leastconn.WithChoices(leastconn.MaxChoices + 1), "WithChoices(11)"},
		{leastconn.WithReportMetric(""), `WithReportMetric("")`},
		{leastconn.WithReportExpiry(0), "WithReportExpiry(0s)"},
		{leastconn.WithReportExpiry(-time.Second), "WithReportExpiry(-1s)"},
		{leastconn.WithClock(nil), "WithClock(nil)"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			p := leastconn.New(leastconn.WithReports(), tt.opt)
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
	for _, opt := range []leastconn.Option{
		leastconn.WithChoices(2), leastconn.WithChoices(leastconn.MaxChoices), leastconn.WithReportMetric("queue"),
		leastconn.WithReportExpiry(time.Nanosecond), leastconn.WithRand(func() uint64 { return 1 }),
		leastconn.WithClock(time.Now),
	} {
		assert.NoError(t, leastconn.New(opt).Update(balancer.Endpoints("a")), "a good value")
	}
}
