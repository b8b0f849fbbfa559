package health_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/rr"
)

// health.Balancer is what balancer.Admin names.
var _ balancer.Admin = (*health.Balancer)(nil)

// wholeSpy is an inner picker that implements balancer.HealthUpdater and
// records what health hands it. Update must not be called on it by health.
type wholeSpy struct {
	*rr.Picker

	mu      sync.Mutex
	ids     []string
	healthy []bool
	calls   int
	plain   int // Updates, which health must not make
	failure error
}

func (w *wholeSpy) Update(bs []balancer.Backend) error {
	w.mu.Lock()
	w.plain++
	w.mu.Unlock()
	return w.Picker.Update(bs)
}

func (w *wholeSpy) UpdateHealth(bs []balancer.Backend, healthy []bool) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failure != nil {
		return w.failure
	}
	w.calls++
	w.ids = w.ids[:0]
	for _, b := range bs {
		w.ids = append(w.ids, b.ID())
	}
	w.healthy = append(w.healthy[:0], healthy...)
	return w.Picker.Update(bs)
}

// last returns the healthy backends' and the unhealthy ones' IDs of the
// last UpdateHealth.
func (w *wholeSpy) last() (up, down []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i, id := range w.ids {
		if w.healthy[i] {
			up = append(up, id)
		} else {
			down = append(down, id)
		}
	}
	return up, down
}

// A picker that implements balancer.HealthUpdater gets every backend that
// is neither drained nor in maintenance, told which are eligible, through
// UpdateHealth and never Update; health leaves panic mode to it.
func TestHealthUpdaterGetsWholeSet(t *testing.T) {
	clock := newFakeClock()
	w := &wholeSpy{Picker: rr.New()}
	h, err := health.New(w, health.Config{Clock: clock, Fall: 1, Rise: 1})
	require.NoError(t, err)
	bs := balancer.Endpoints("a:1", "b:1", "c:1")
	require.NoError(t, h.Update(bs))
	up, down := w.last()
	assert.Equal(t, []string{"a:1", "b:1", "c:1"}, up)
	assert.Empty(t, down)

	h.Observe("b:1", errors.New("probe failed"))
	h.Apply()
	up, down = w.last()
	assert.Equal(t, []string{"a:1", "c:1"}, up, "a down backend stays in the set, unhealthy")
	assert.Equal(t, []string{"b:1"}, down)

	require.NoError(t, h.Drain("c:1"))
	up, down = w.last()
	assert.Equal(t, []string{"a:1"}, up, "a drained backend leaves the set altogether")
	assert.Equal(t, []string{"b:1"}, down)

	h.Observe("a:1", errors.New("probe failed"))
	h.Apply()
	up, down = w.last()
	assert.Empty(t, up)
	assert.Equal(t, []string{"a:1", "b:1"}, down, "no fallback set: the inner picker panics by its own rule")
	v := h.View()
	assert.False(t, v.Panic, "health itself is not in panic mode")
	for _, st := range v.Backends {
		assert.Equal(t, st.ID != "c:1", st.InSet, "%s: InSet is every backend neither drained nor in maintenance", st.ID)
	}

	calls := w.calls
	h.Observe("a:1", errors.New("probe failed")) // agrees with the verdict: no change
	h.Apply()
	assert.Equal(t, calls, w.calls, "nothing changed: no UpdateHealth")

	h.Observe("a:1", nil)
	h.Apply()
	up, _ = w.last()
	assert.Equal(t, []string{"a:1"}, up, "a change of eligibility alone is handed on")
	assert.Zero(t, w.plain, "health never calls Update on a HealthUpdater")

	w.failure = errors.New("inner refuses")
	err = h.Update(balancer.Endpoints("a:1"))
	assert.ErrorIs(t, err, w.failure)
	w.failure = nil
	got, err := h.Pick(balancer.Request{})
	require.NoError(t, err)
	assert.Contains(t, []string{"a:1", "b:1"}, got.ID(), "the previous set stays")
}
