package health_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/rr"
)

// InFlight reads the inner picker's count through the decorator, and is 0
// around a picker that counts nothing.
func TestInFlightPassesThrough(t *testing.T) {
	tests := []struct {
		name  string
		inner balancer.Balancer
		want  int64 // the count while one request is in flight
	}{
		{"leastconn", leastconn.New(), 1},
		{"rr", rr.New(), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := health.New(tt.inner, health.Config{})
			require.NoError(t, err)
			defer h.Close()
			require.NoError(t, h.Update(balancer.Endpoints("a:80")))
			var c balancer.InFlightCounter = h
			b, err := h.Pick(balancer.Request{})
			require.NoError(t, err)
			assert.Equal(t, tt.want, c.InFlight("a:80"))
			assert.Zero(t, c.InFlight("nobody:80"))
			h.Done(b, balancer.Result{Err: balancer.ErrAbandoned})
			assert.Zero(t, c.InFlight("a:80"))
		})
	}
}

// Drain takes a backend out of new picks while its requests in flight
// still reach the inner picker's Done; probes go on. Maintenance also
// pauses probes. Enable brings it back. Both survive an Update.
func TestDrainAndMaintenance(t *testing.T) {
	lc := leastconn.New()
	r := newRig(t, lc, health.Config{}, 3)
	held, err := r.h.Pick(balancer.Request{})
	require.NoError(t, err)

	require.NoError(t, r.h.Drain(held.ID()))
	drained := indexOf(r.bs, held.ID())
	assert.Equal(t, r.without(drained), r.spy.current(), "out of the set as soon as Drain returns")
	assert.Equal(t, health.Draining, r.state(drained).State)
	for range 100 {
		b, err := r.h.Pick(balancer.Request{})
		require.NoError(t, err)
		assert.NotEqual(t, held.ID(), b.ID())
		r.h.Done(b, balancer.Result{Latency: time.Millisecond})
	}
	assert.Equal(t, int64(1), lc.InFlight(held.ID()), "the request in flight is still counted")
	r.h.Done(held, balancer.Result{Latency: time.Millisecond})
	assert.Equal(t, int64(0), lc.InFlight(held.ID()), "its Done reached the inner picker")

	r.probe(drained, 3, errFail)
	assert.Equal(t, health.Draining, r.state(drained).State, "draining wins over down in the summary")
	assert.False(t, r.state(drained).ProbeUp, "probes of a draining backend count")
	r.probe(drained, 2, nil)

	require.NoError(t, r.h.Update(r.bs), "an Update of the same set keeps the drain")
	assert.Equal(t, health.Draining, r.state(drained).State)
	require.NoError(t, r.h.Maintenance(held.ID()))
	r.probe(drained, 10, errFail)
	assert.True(t, r.state(drained).ProbeUp, "results are ignored in maintenance")
	require.NoError(t, r.h.Enable(held.ID()))
	assert.Equal(t, r.without(), r.spy.current())
	assert.Equal(t, health.Up, r.state(drained).State)

	var reasons []health.Reason
	var states []health.State
	for _, c := range r.rec.all() {
		reasons, states = append(reasons, c.Reason), append(states, c.New)
	}
	assert.Equal(t, []health.State{health.Draining, health.Maintenance, health.Up}, states)
	assert.Equal(t, []health.Reason{health.ReasonAdmin, health.ReasonAdmin, health.ReasonAdmin}, reasons)

	for _, f := range []func(string) error{r.h.Drain, r.h.Maintenance, r.h.Enable} {
		assert.ErrorIs(t, f("nobody.test:1"), health.ErrUnknownBackend)
	}
}

func indexOf(bs []balancer.Backend, id string) int {
	for i, b := range bs {
		if b.ID() == id {
			return i
		}
	}
	return -1
}

// Health is kept by ID across updates: a backend that stays keeps its
// ejection, and so does one that leaves and comes back.
func TestStateCarriedAcrossUpdates(t *testing.T) {
	r := newRig(t, nil, health.Config{}, 4)
	r.fail(1, 1, errRefused)
	require.NoError(t, r.h.Update(r.bs[1:]))
	assert.Equal(t, health.Ejected, r.h.View().Backends[0].State)
	require.NoError(t, r.h.Update(r.bs[2:]))
	require.NoError(t, r.h.Update(r.bs))
	assert.Equal(t, health.Ejected, r.state(1).State, "back in the set, still ejected")
	assert.Equal(t, r.without(1), r.spy.current())
}

// If the inner Update fails, Update returns its error and the previous
// set stays, for health and for the inner picker.
func TestInnerUpdateFailureKeepsPreviousSet(t *testing.T) {
	r := newRig(t, nil, health.Config{}, 3)
	boom := errors.New("inner: no")
	r.spy.mu.Lock()
	r.spy.failure = boom
	r.spy.mu.Unlock()
	err := r.h.Update(balancer.Endpoints("x.test:1"))
	assert.ErrorIs(t, err, boom)
	v := r.h.View()
	require.Len(t, v.Backends, 3)
	assert.Equal(t, r.bs[0].ID(), v.Backends[0].ID)
	for range 30 {
		b, err := r.h.Pick(balancer.Request{})
		require.NoError(t, err)
		assert.Contains(t, r.without(), b.ID())
	}
	r.h.Observe("x.test:1", errFail) // not in the set: ignored
	r.h.Observe(r.bs[0].ID(), nil)   // in the set: counted
}

// Invalid sets are refused before anything changes.
func TestInvalidUpdate(t *testing.T) {
	r := newRig(t, nil, health.Config{}, 2)
	err := r.h.Update([]balancer.Backend{balancer.NewEndpoint("a.test:1", 0)})
	assert.ErrorIs(t, err, balancer.ErrBadWeight)
	assert.Contains(t, err.Error(), "health: update:")
	assert.Len(t, r.h.View().Backends, 2)
}

// Slow start ramps a returning backend's share up over the window, with
// round robin, which ignores weights, and with least connections, which
// would otherwise flood it: its count is 0 while the others carry the
// load, so it gets every pick until it catches up.
func TestSlowStartRamp(t *testing.T) {
	const window = 100 * time.Second
	pickers := []struct {
		name string
		new  func(rnd func() uint64) balancer.Balancer
		// linear: the share follows the factor (f/4 of the picks); else
		// the inner picker's own balancing takes over once the backend's
		// load catches up, and the ramp mostly spreads out the first burst.
		linear bool
	}{
		{"rr", func(rnd func() uint64) balancer.Balancer { return rr.New(rr.WithRand(rnd)) }, true},
		{"leastconn", func(rnd func() uint64) balancer.Balancer { return leastconn.New(leastconn.WithRand(rnd)) }, false},
	}
	for _, p := range pickers {
		t.Run(p.name, func(t *testing.T) {
			// run returns how many of the first 10 picks after the return
			// went to the returning backend, then its share in each tenth of
			// the window and in one tenth after it: 400 picks per tenth, 40
			// in flight, finished oldest first.
			run := func(slow time.Duration) (int, []float64) {
				rnd := rand.New(rand.NewPCG(1, 2))
				// No trial: it, too, holds back the first picks of a
				// returning backend (TestTrial); this is slow start's.
				r := newRig(t, p.new(rnd.Uint64), health.Config{SlowStart: slow, Rand: rnd.Uint64, NoTrial: true}, 4)
				var inFlight []balancer.Backend
				pick := func() bool {
					b, err := r.h.Pick(balancer.Request{})
					require.NoError(t, err)
					inFlight = append(inFlight, b)
					if len(inFlight) > 40 {
						r.h.Done(inFlight[0], balancer.Result{Latency: 10 * time.Millisecond})
						inFlight = inFlight[1:]
					}
					return b.ID() == r.bs[0].ID()
				}
				r.fail(0, 1, errRefused)
				for range 400 {
					pick() // the others carry the load
				}
				r.clock.Advance(30 * time.Second)
				r.h.Apply()
				require.Equal(t, health.Up, r.state(0).State)
				burst := 0
				for range 10 {
					if pick() {
						burst++
					}
				}
				var shares []float64
				for range 11 {
					got := 0
					for range 400 {
						if pick() {
							got++
						}
					}
					shares = append(shares, float64(got)/400)
					r.clock.Advance(window / 10)
					r.h.Apply()
				}
				return burst, shares
			}
			burst, ramp := run(window)
			floodBurst, flood := run(0)
			t.Logf("first 10 picks after the return: %d with slow start, %d without", burst, floodBurst)
			t.Logf("share per tenth of the window, with slow start: %.3f", ramp)
			t.Logf("without: %.3f", flood)
			assert.LessOrEqual(t, burst, 3)
			assert.Less(t, ramp[0], flood[0]/2, "the first tenth: well below the share without slow start")
			for i := 1; i < 10; i++ {
				assert.GreaterOrEqual(t, ramp[i], ramp[i-1]-0.03, "the share grows over the window (tenth %d)", i)
			}
			assert.InDelta(t, 0.25, ramp[10], 0.05, "after the window, a fair share")
			assert.InDelta(t, 0.25, flood[10], 0.05)
			if p.linear {
				assert.Less(t, ramp[0], 0.06, "the first tenth: about 10%% of a fair 25%%")
				assert.Greater(t, ramp[9], 3*ramp[0], "the last tenth gets several times the first")
			} else {
				assert.GreaterOrEqual(t, floodBurst, 9, "without slow start, the returning backend takes the first picks")
			}
		})
	}
}

// A slow-start pick that is put back leaves the inner picker's in-flight
// count as it was: leastconn sees one request, not two.
func TestSlowStartRePickIsCounted(t *testing.T) {
	lc := leastconn.New()
	r := newRig(t, lc, health.Config{SlowStart: time.Hour, SlowStartMinPercent: 1}, 2)
	r.fail(0, 1, errRefused)
	r.clock.Advance(30 * time.Second)
	r.h.Apply()
	require.Less(t, r.state(0).Ramp, 0.02)
	for range 200 {
		b, err := r.h.Pick(balancer.Request{})
		require.NoError(t, err)
		r.h.Done(b, balancer.Result{Latency: time.Millisecond})
	}
	for _, b := range r.bs {
		assert.Zero(t, lc.InFlight(b.ID()), "%s: every pick made is finished", b.ID())
	}
}

// An inner Update that fails in Apply leaves the inner picker its previous
// set and shows in View until a later change succeeds.
func TestInnerUpdateFailureInApply(t *testing.T) {
	r := newRig(t, nil, health.Config{MaxEjectedPercent: 100}, 3)
	boom := errors.New("inner: no")
	r.spy.mu.Lock()
	r.spy.failure = boom
	r.spy.mu.Unlock()
	r.fail(0, 1, errRefused)
	v := r.h.View()
	assert.ErrorIs(t, v.InnerErr, boom)
	assert.Equal(t, health.Ejected, v.Backends[0].State)
	assert.True(t, v.Backends[0].InSet, "the inner picker keeps its set")
	assert.Equal(t, r.without(), r.spy.current())

	r.spy.mu.Lock()
	r.spy.failure = nil
	r.spy.mu.Unlock()
	r.fail(1, 1, errRefused)
	assert.NoError(t, r.h.View().InnerErr)
	assert.Equal(t, r.without(0, 1), r.spy.current())
}

// An Update the inner picker refuses leaves every backend's state as it
// was, however many backends the refused set would have removed: the next
// Update of the same set finds every drain and ejection. (Health kept its state
// in a balancer.Registry, whose Sync ran before the inner Update: the
// refused set retired the 100 backends, the Registry evicted 36 of them,
// and the rollback brought them back as new, Up.)
func TestRefusedUpdateKeepsState(t *testing.T) {
	r := newRig(t, nil, health.Config{}, 100)
	r.fail(1, 1, errRefused)
	for i := 2; i < 100; i++ {
		require.NoError(t, r.h.Drain(r.bs[i].ID()))
	}
	before, set := r.h.View(), r.spy.current()
	changes := len(r.rec.all())

	boom := errors.New("inner: no")
	r.spy.mu.Lock()
	r.spy.failure = boom
	r.spy.mu.Unlock()
	require.ErrorIs(t, r.h.Update(balancer.Endpoints("x.test:1")), boom)
	assert.Equal(t, before, r.h.View(), "the refused Update changed nothing")
	assert.Equal(t, set, r.spy.current())
	assert.Len(t, r.rec.all(), changes, "no change reported")

	r.spy.mu.Lock()
	r.spy.failure = nil
	r.spy.mu.Unlock()
	require.NoError(t, r.h.Update(r.bs))
	v := r.h.View()
	assert.Equal(t, health.Up, v.Backends[0].State)
	assert.Equal(t, health.Ejected, v.Backends[1].State)
	var lost []string
	for _, st := range v.Backends[2:] {
		if st.State != health.Draining {
			lost = append(lost, st.ID)
		}
	}
	assert.Empty(t, lost, "drained backends no longer drained")
	assert.Equal(t, []string{r.bs[0].ID()}, r.spy.current())
}

// A refused Update ejects no backend that was waiting for a free slot,
// though the larger set it brought would have had room: the cap is the
// current set's until the inner picker takes the new one. Once it does,
// Update applies the waiting ejection before it returns.
func TestRefusedUpdateEjectsNothingWaiting(t *testing.T) {
	r := newRig(t, nil, health.Config{}, 2) // cap: one of two
	r.fail(0, 1, errRefused)
	r.fail(1, 1, errRefused) // waits for a slot
	require.Equal(t, health.Ejected, r.state(0).State)
	require.Equal(t, health.Up, r.state(1).State)
	before, set := r.h.View(), r.spy.current()
	bigger := append(slices.Clone(r.bs), balancer.Endpoints(ids(10)[2:]...)...)

	boom := errors.New("inner: no")
	r.spy.mu.Lock()
	r.spy.failure = boom
	r.spy.mu.Unlock()
	require.ErrorIs(t, r.h.Update(bigger), boom)
	assert.Equal(t, before, r.h.View())
	assert.Equal(t, set, r.spy.current())

	r.spy.mu.Lock()
	r.spy.failure = nil
	r.spy.mu.Unlock()
	require.NoError(t, r.h.Update(bigger))
	assert.Equal(t, health.Ejected, r.state(1).State, "room in the set of 10: ejected by Update")
	assert.Equal(t, ids(10)[2:], r.spy.current())
}

// Drain, Maintenance and Enable apply what is pending before they return,
// even when the backend is already in the state asked for.
func TestAdminAppliesPending(t *testing.T) {
	for _, f := range []func(h *health.Balancer, id string) error{
		(*health.Balancer).Enable, // b is up: no change of its own
		(*health.Balancer).Drain,
	} {
		r := newRig(t, nil, health.Config{}, 3)
		r.h.Done(r.bs[0], balancer.Result{Err: errRefused}) // pending, not applied
		require.Equal(t, r.without(), r.spy.current())
		require.NoError(t, f(r.h, r.bs[1].ID()))
		assert.Equal(t, health.Ejected, r.state(0).State)
		assert.NotContains(t, r.spy.current(), r.bs[0].ID())
	}
}
