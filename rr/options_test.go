package rr_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/rr"
)

// A bad option's error sticks: every Update returns it, wrapping
// balancer.ErrBadOption and naming the option and its value, and the
// Picker stays empty.
func TestBadOptions(t *testing.T) {
	for _, tt := range []struct {
		name string
		opt  rr.Option
		want string
	}{
		{"nil rand", rr.WithRand(nil), "WithRand(nil)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := rr.New(rr.WithRand(func() uint64 { return 0 }), tt.opt)
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
	p := rr.New(rr.WithRand(func() uint64 { return 0 }))
	require.NoError(t, p.Update(balancer.Endpoints("a")), "a good option")
}
