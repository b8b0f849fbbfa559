package iphash_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/iphash"
)

// A bad option's error sticks: every Update returns it, wrapping
// balancer.ErrBadOption and naming the option and its values, and the
// Picker stays empty. The bounds themselves are taken.
func TestBadOptions(t *testing.T) {
	for _, tt := range []struct {
		v4, v6 int
		want   string
	}{
		{-1, 128, "WithPrefixBits(-1, 128)"},
		{33, 128, "WithPrefixBits(33, 128)"},
		{32, -1, "WithPrefixBits(32, -1)"},
		{32, 129, "WithPrefixBits(32, 129)"},
		{-5, 500, "WithPrefixBits(-5, 500)"},
	} {
		t.Run(tt.want, func(t *testing.T) {
			p := iphash.New(iphash.WithPrefixBits(tt.v4, tt.v6))
			for range 2 {
				err := p.Update(balancer.Endpoints("a", "b"))
				require.ErrorIs(t, err, balancer.ErrBadOption)
				assert.ErrorContains(t, err, tt.want)
				t.Log(err)
			}
			_, err := p.Pick(balancer.Request{Key: "1.2.3.4"})
			assert.ErrorIs(t, err, balancer.ErrNoBackend, "the set stays empty")
		})
	}
	for _, bits := range [][2]int{{0, 0}, {32, 128}, {24, 64}} {
		p := iphash.New(iphash.WithPrefixBits(bits[0], bits[1]))
		assert.NoError(t, p.Update(balancer.Endpoints("a")), bits)
	}
}
