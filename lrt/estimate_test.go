package lrt

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The Taylor branch of expNeg must be as good as the documentation says,
// right up to where math.Exp takes over.
func TestExpNeg(t *testing.T) {
	for _, x := range []float64{0, 1e-9, 5.2e-5, 1e-3, 0.01, 0.03, 1.0/16 - 1e-12, 1.0 / 16, 0.5, 1, 10, 745, 800} {
		want := math.Exp(-x)
		got := expNeg(x)
		if want == 0 {
			assert.Zero(t, got, "x=%g", x)
			continue
		}
		assert.InEpsilon(t, want, got, 7e-7, "x=%g", x)
	}
}

func TestPack(t *testing.T) {
	tests := []struct {
		name  string
		est   float64
		stamp uint32
		prov  bool
	}{
		{"zero", 0, 0, false},
		{"provisional", float64(100 * time.Millisecond), 7, true},
		{"measured", float64(123456789 * time.Nanosecond), math.MaxUint32, false},
		{"largest", maxEstimate, 1 << 31, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := pack(tt.est, tt.stamp, tt.prov)
			assert.InDelta(t, tt.est, value(w), tt.est*1e-7)
			assert.Equal(t, tt.stamp, stamp(w))
			assert.Equal(t, !tt.prov && w != 0, measured(w))
		})
	}
	assert.False(t, measured(0), "an unset word is not a measurement")
}

func TestAge(t *testing.T) {
	tests := []struct {
		name      string
		now, then uint32
		want      uint32
	}{
		{"same tick", 5, 5, 0},
		{"later", 105, 5, 100},
		{"across the wrap", 3, math.MaxUint32 - 1, 5},
		{"then ahead: a clock that stepped back", 5, 15, 0},
		{"then ahead by 2³⁰: still a step back", 0, 1 << 30, 0},
		{"then ahead by more: a very old stamp", 0, 1<<30 + 1, math.MaxUint32 - 1<<30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, age(tt.now, tt.then))
		})
	}
}

// A tick is the largest power of two of nanoseconds not above τ/2¹⁴.
func TestTick(t *testing.T) {
	tests := []struct {
		tau  time.Duration
		tick time.Duration
	}{
		{DefaultDecay, 1 << 19},
		{time.Second, 1 << 15},
		{time.Millisecond, 32},
		{time.Millisecond - 1, 1 << 19}, // ignored: the default
	}
	for _, tt := range tests {
		t.Run(tt.tau.String(), func(t *testing.T) {
			c := New(WithDecay(tt.tau)).cfg
			assert.Equal(t, tt.tick, time.Duration(1)<<c.shift)
			assert.InEpsilon(t, float64(tt.tick)/float64(c.tau), c.perTick, 1e-12)
		})
	}
}

// The penalty table: factor^k up to 64.
func TestPenalty(t *testing.T) {
	tests := []struct {
		factor float64
		want   []float64
	}{
		{2, []float64{1, 2, 4, 8, 16, 32, 64}},
		{10, []float64{1, 10, 64}},
		{1, []float64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, New(WithErrorFactor(tt.factor)).cfg.penalty, "factor %v", tt.factor)
	}
}
