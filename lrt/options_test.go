package lrt_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/lrt"
)

// A bad option's error sticks: every Update returns it, wrapping
// balancer.ErrBadOption and naming the option and its value, and the
// Picker stays empty. The value at each bound is taken.
func TestBadOptions(t *testing.T) {
	for _, tt := range []struct {
		opt  lrt.Option
		want string
	}{
		{lrt.WithMode(lrt.Mode(7)), "WithMode(Mode(7))"},
		{lrt.WithMode(-1), "WithMode(Mode(-1))"},
		{lrt.WithRand(nil), "WithRand(nil)"},
		{lrt.WithClock(nil), "WithClock(nil)"},
		{lrt.WithDecay(500 * time.Microsecond), "WithDecay(500µs)"},
		{lrt.WithDecay(0), "WithDecay(0s)"},
		{lrt.WithDecay(-time.Second), "WithDecay(-1s)"},
		{lrt.WithInitial(0), "WithInitial(0s)"},
		{lrt.WithInitial(-time.Millisecond), "WithInitial(-1ms)"},
		{lrt.WithInitial(1<<43 + 1), "WithInitial(2h26m36.093022209s)"},
		{lrt.WithInitial(math.MaxInt64), "WithInitial(2562047h47m16.854775807s)"},
		{lrt.WithErrorFactor(0.5), "WithErrorFactor(0.5)"},
		{lrt.WithErrorFactor(math.NaN()), "WithErrorFactor(NaN)"},
		{lrt.WithErrorFactor(math.Inf(1)), "WithErrorFactor(+Inf)"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			p := lrt.New(tt.opt)
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
	for _, opt := range []lrt.Option{
		lrt.WithMode(lrt.Naive), lrt.WithDecay(time.Millisecond), lrt.WithInitial(1),
		lrt.WithInitial(1 << 43), lrt.WithErrorFactor(1), lrt.WithRand(func() uint64 { return 1 }),
		lrt.WithClock(time.Now),
	} {
		assert.NoError(t, lrt.New(opt).Update(balancer.Endpoints("a")), "a good value")
	}
}
