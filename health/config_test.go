package health_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/rr"
)

// Out-of-range fields are refused by New with an error naming the field,
// never a panic nor a silent default.
func TestInvalidConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  health.Config
		want string // in the message
	}{
		{"negative interval", health.Config{Interval: -time.Second}, "Interval"},
		{"interval below the minimum", health.Config{Interval: time.Microsecond}, "Interval"},
		{"negative jitter", health.Config{Jitter: -1}, "Jitter"},
		{"jitter as long as the interval", health.Config{Interval: time.Second, Jitter: time.Second}, "Jitter"},
		{"jitter over the default interval", health.Config{Jitter: 6 * time.Second}, "Jitter"},
		{"negative timeout", health.Config{Timeout: -time.Second}, "Timeout"},
		{"negative rise", health.Config{Rise: -1}, "Rise"},
		{"negative fall", health.Config{Fall: -2}, "Fall"},
		{"negative consecutive failures", health.Config{ConsecutiveFailures: -5}, "ConsecutiveFailures"},
		{"negative base ejection", health.Config{BaseEjectionTime: -time.Second}, "BaseEjectionTime"},
		{"negative max ejection", health.Config{MaxEjectionTime: -time.Second}, "MaxEjectionTime"},
		{"base above max", health.Config{BaseEjectionTime: time.Minute, MaxEjectionTime: time.Second}, "MaxEjectionTime"},
		{"share above 100%", health.Config{MaxEjectedPercent: 101}, "MaxEjectedPercent"},
		{"negative share", health.Config{MaxEjectedPercent: -1}, "MaxEjectedPercent"},
		{"negative slow start", health.Config{SlowStart: -time.Second}, "SlowStart"},
		{"slow-start floor above 100%", health.Config{SlowStartMinPercent: 150}, "SlowStartMinPercent"},
		{"HTTP status range upside down", health.Config{Probe: health.HTTP(health.HTTPCheck{StatusMin: 300, StatusMax: 200})}, "status range"},
		{"HTTP status out of range", health.Config{Probe: health.HTTP(health.HTTPCheck{StatusMin: 200, StatusMax: 600})}, "status range"},
		{"HTTP body longer than read", health.Config{Probe: health.HTTP(health.HTTPCheck{BodyContains: "long", MaxBody: 2})}, "BodyContains"},
		{"nil Func", health.Config{Probe: health.Func(nil)}, "Func(nil)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := health.New(rr.New(), tt.cfg)
			require.ErrorIs(t, err, health.ErrConfig)
			require.ErrorIs(t, err, balancer.ErrBadOption)
			assert.Nil(t, h)
			assert.Contains(t, err.Error(), tt.want)
			assert.Contains(t, err.Error(), "health: invalid config: ")
		})
	}
	var nilPicker *rr.Picker
	for _, inner := range []any{nil, nilPicker} {
		var err error
		if inner == nil {
			_, err = health.New(nil, health.Config{})
		} else {
			_, err = health.New(nilPicker, health.Config{})
		}
		assert.ErrorIs(t, err, health.ErrConfig)
	}
}

// A base ejection time above 300 s raises the default maximum with it, as
// Envoy does, rather than being refused.
func TestMaxEjectionDefaultFollowsBase(t *testing.T) {
	r := newRig(t, nil, health.Config{BaseEjectionTime: 10 * time.Minute}, 2)
	r.fail(0, 1, errRefused)
	assert.Equal(t, 10*time.Minute, r.state(0).EjectedUntil.Sub(r.clock.Now()))
}

// Names of states and reasons, as logs show them.
func TestStrings(t *testing.T) {
	assert.Equal(t, "up", health.Up.String())
	assert.Equal(t, "maintenance", health.Maintenance.String())
	assert.Equal(t, "state(9)", health.State(9).String())
	assert.Equal(t, "connection refused", health.ReasonRefused.String())
	assert.Equal(t, "reason(9)", health.Reason(9).String())
	c := health.Change{ID: "a:1", Old: health.Up, New: health.Ejected, Reason: health.ReasonFailures, Err: errFail}
	assert.Equal(t, "a:1: up -> ejected (consecutive failures): test: 503 service unavailable", c.String())
}
