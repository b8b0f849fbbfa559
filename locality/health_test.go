package locality_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/locality"
)

// clock is a health.Clock that moves only when told.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

var errDown = errors.New("probe failed")

// Health wraps the locality Balancer and hands it every backend with its
// health: a level's unhealthy backends lower its share (overprovisioning),
// a drained backend leaves the level altogether, and when the levels
// cannot take the traffic between them, a level below the threshold
// panics on its own backends, while health itself does not.
func TestUnderHealth(t *testing.T) {
	l0 := concat(tier("a", 0, 5), tier("b", 0, 5))
	l1 := tier("a", 1, 10)
	set := concat(l0, l1)
	l := newRR(t, locality.Config{Zone: "a"})
	h, err := health.New(l, health.Config{Clock: &clock{now: time.Unix(0, 0)}, Fall: 1, Rise: 1, NoEjection: true})
	require.NoError(t, err)
	require.NoError(t, h.Update(set))
	assert.InDelta(t, 1, loads(l.View())[0], 1e-9)

	down := func(bs ...balancer.Backend) {
		for _, b := range bs {
			h.Observe(b.ID(), errDown)
		}
		h.Apply()
	}
	level := func(v locality.View, p int) locality.Level {
		for _, lv := range v.Levels {
			if lv.Priority == p {
				return lv
			}
		}
		t.Fatalf("no level %d", p)
		return locality.Level{}
	}

	// 6 of 10 healthy: 0.84 stays, 0.16 spills to level 1.
	down(l0[0], l0[1], l0[5], l0[6])
	v := l.View()
	assert.Equal(t, 6, level(v, 0).Healthy)
	assert.InDelta(t, 0.84, loads(v)[0], 1e-9)
	_, picked := shares(t, h, 20000, balancer.Request{})
	assert.InDelta(t, 0.16, sum(picked, l1), 0.02, "level 1's share of picks")

	// Draining two healthy backends of level 0 takes them out of its
	// count: 4 of 8 healthy, 0.7.
	require.NoError(t, h.Drain(l0[2].ID()))
	require.NoError(t, h.Drain(l0[7].ID()))
	v = l.View()
	assert.Equal(t, 8, level(v, 0).Total)
	assert.InDelta(t, 0.7, loads(v)[0], 1e-9)

	// Every backend down: health does not panic, locality does, level 0
	// taking everything on its 8 backends, never the drained ones.
	down(set...)
	hv := h.View()
	assert.False(t, hv.Panic)
	v = l.View()
	assert.True(t, level(v, 0).Panic)
	assert.InDelta(t, 1, loads(v)[0], 1e-9)
	_, picked = shares(t, h, 4000, balancer.Request{})
	assert.InDelta(t, 1, sum(picked, l0), 1e-9)
	assert.Zero(t, picked[l0[2].ID()], "a drained backend gets nothing, even in panic")
	assert.Zero(t, picked[l0[7].ID()])
	assert.Len(t, picked, 8)

	// Level 1 comes back: it takes everything, level 0 leaves panic.
	for _, b := range l1 {
		h.Observe(b.ID(), nil)
	}
	h.Apply()
	v = l.View()
	assert.False(t, level(v, 0).Panic)
	assert.InDelta(t, 1, loads(v)[1], 1e-9)
}

// Passive ejection lowers a level's health as probes do.
func TestUnderHealthEjection(t *testing.T) {
	set := concat(tier("a", 0, 4), tier("a", 1, 4))
	l := newRR(t, locality.Config{})
	h, err := health.New(l, health.Config{Clock: &clock{now: time.Unix(0, 0)}, ConsecutiveFailures: 1})
	require.NoError(t, err)
	require.NoError(t, h.Update(set))
	h.Done(set[0], balancer.Result{Latency: time.Millisecond, Err: errors.New("502")})
	h.Apply()
	v := l.View()
	assert.Equal(t, 3, v.Levels[0].Healthy)
	assert.InDelta(t, 1, loads(v)[0], 1e-9, "3 of 4 × 1.4 covers it")
	h.Done(set[1], balancer.Result{Latency: time.Millisecond, Err: errors.New("502")})
	h.Apply()
	assert.InDelta(t, 0.7, loads(l.View())[0], 1e-9, "2 of 4: 0.7 stays, 0.3 spills")
}

// sum adds the shares of bs.
func sum(picked map[string]float64, bs []balancer.Backend) float64 {
	s := 0.0
	for _, b := range bs {
		s += picked[b.ID()]
	}
	return s
}
