package health_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/leastconn"
)

// picksOf returns how many of n picks, none finished, went to backend i,
// and the picks, for Done.
func (r *rig) picksOf(t *testing.T, i, n int) (int, []balancer.Backend) {
	t.Helper()
	got := 0
	var picked []balancer.Backend
	for range n {
		b, err := r.h.Pick(balancer.Request{})
		require.NoError(t, err)
		picked = append(picked, b)
		if b.ID() == r.bs[i].ID() {
			got++
		}
	}
	return got, picked
}

// done reports a result for every pick.
func (r *rig) done(picked []balancer.Backend, res balancer.Result) {
	for _, b := range picked {
		r.h.Done(b, res)
	}
	r.h.Apply()
}

// TestTrial checks the trial that follows an ejection: once its ejection
// ends, a backend is back, but takes one request at a time (of 40 picks
// with none finished, one, where round robin over four would give it 10)
// until a request succeeds; then it takes its full share again. A trial
// request that fails ejects it again at once, for twice the base time
// (its second ejection in a row), with ReasonTrial; an abandoned one
// frees it for the next.
func TestTrial(t *testing.T) {
	ok := balancer.Result{Latency: time.Millisecond}
	t.Run("success ends it", func(t *testing.T) {
		r := newRig(t, nil, health.Config{}, 4)
		r.fail(1, 5, errFail)
		r.clock.Advance(30 * time.Second)
		r.h.Apply()
		st := r.state(1)
		require.Equal(t, health.Up, st.State)
		assert.True(t, st.Trial, "back from an ejection: on trial")
		assert.Equal(t, r.without(), r.spy.current(), "a backend on trial is in the inner picker's set")

		got, picked := r.picksOf(t, 1, 40)
		assert.Equal(t, 1, got, "one request at a time while on trial")
		var trial balancer.Backend
		for _, b := range picked {
			if b.ID() == r.bs[1].ID() {
				trial = b
			}
		}
		r.h.Done(trial, ok)
		assert.False(t, r.state(1).Trial, "a request succeeded: fully back")
		got, _ = r.picksOf(t, 1, 40)
		assert.Equal(t, 10, got, "its full share again")
	})
	t.Run("failure ejects again", func(t *testing.T) {
		r := newRig(t, nil, health.Config{}, 4)
		r.fail(1, 5, errFail)
		r.clock.Advance(30 * time.Second)
		r.h.Apply()
		got, picked := r.picksOf(t, 1, 8)
		require.Equal(t, 1, got)
		for _, b := range picked {
			res := ok
			if b.ID() == r.bs[1].ID() {
				res = balancer.Result{Latency: time.Millisecond, Err: errFail}
			}
			r.h.Done(b, res)
		}
		r.h.Apply()
		st := r.state(1)
		assert.Equal(t, health.Ejected, st.State, "one failed trial request ejects")
		assert.Equal(t, health.ReasonTrial, st.Reason)
		assert.Equal(t, r.clock.Now().Add(60*time.Second), st.EjectedUntil, "the second ejection in a row: twice the base time")
		assert.False(t, st.Trial)
		changes := r.rec.all()
		require.NotEmpty(t, changes)
		last := changes[len(changes)-1]
		assert.Equal(t, health.ReasonTrial, last.Reason)
		assert.ErrorIs(t, last.Err, errFail)
	})
	t.Run("abandoned frees it", func(t *testing.T) {
		r := newRig(t, nil, health.Config{}, 4)
		r.fail(1, 5, errFail)
		r.clock.Advance(30 * time.Second)
		r.h.Apply()
		got, picked := r.picksOf(t, 1, 8)
		require.Equal(t, 1, got)
		r.done(picked, balancer.Result{Err: balancer.ErrAbandoned})
		assert.True(t, r.state(1).Trial, "an abandoned request proves nothing")
		got, _ = r.picksOf(t, 1, 8)
		assert.Equal(t, 1, got, "but frees the backend for the next trial request")
	})
	t.Run("after probes", func(t *testing.T) {
		// Rise passing probes end an ejection early: the probe says the
		// backend answers its health check, the trial asks a request.
		r := newRig(t, nil, health.Config{}, 4)
		r.fail(2, 5, errFail)
		r.probe(2, 2, nil)
		st := r.state(2)
		require.Equal(t, health.Up, st.State)
		assert.Equal(t, health.ReasonProbe, st.Reason)
		assert.True(t, st.Trial)
		got, picked := r.picksOf(t, 2, 8)
		require.Equal(t, 1, got)
		for _, b := range picked {
			if b.ID() == r.bs[2].ID() {
				r.h.Done(b, balancer.Result{Latency: time.Second, Err: errFail})
			}
		}
		r.h.Apply()
		assert.Equal(t, health.Ejected, r.state(2).State, "its requests still fail: out again")
	})
	t.Run("NoTrial", func(t *testing.T) {
		r := newRig(t, nil, health.Config{NoTrial: true}, 4)
		r.fail(1, 5, errFail)
		r.clock.Advance(30 * time.Second)
		r.h.Apply()
		assert.False(t, r.state(1).Trial)
		got, _ := r.picksOf(t, 1, 40)
		assert.Equal(t, 10, got, "back in full at once")
		r.fail(1, 4, errFail)
		assert.Equal(t, health.Up, r.state(1).State, "and five failures in a row eject, not one")
	})
	t.Run("a set of one", func(t *testing.T) {
		// With nothing else to pick, the trial backend gets the picks.
		r := newRig(t, nil, health.Config{}, 1)
		r.fail(0, 5, errFail)
		r.clock.Advance(30 * time.Second)
		r.h.Apply()
		got, _ := r.picksOf(t, 0, 5)
		assert.Equal(t, 5, got)
	})
}

// TestTrialLeastConn checks the trial with least connections, which sends
// a returning backend (none in flight) every request until it catches up:
// on trial it gets one.
func TestTrialLeastConn(t *testing.T) {
	r := newRig(t, leastconn.New(), health.Config{}, 4)
	r.fail(3, 5, errFail)
	_, picked := r.picksOf(t, 3, 20) // the others carry the load
	r.clock.Advance(30 * time.Second)
	r.h.Apply()
	got, more := r.picksOf(t, 3, 10)
	assert.Equal(t, 1, got, "one of the first 10 picks, not all of them")
	r.done(append(picked, more...), balancer.Result{Latency: time.Millisecond})
	assert.False(t, r.state(3).Trial)
	for _, id := range r.bs {
		assert.Zero(t, r.h.InFlight(id.ID()), "every pick handed back was counted down: %s", id.ID())
	}
}

// TestTrialPickAllocs checks that Pick and Done allocate nothing while a
// backend is on trial.
func TestTrialPickAllocs(t *testing.T) {
	r := newRig(t, nil, health.Config{}, 4)
	r.fail(1, 5, errFail)
	r.clock.Advance(30 * time.Second)
	r.h.Apply()
	_, held := r.picksOf(t, 1, 4) // the trial request stays in flight
	require.True(t, r.state(1).Trial)
	allocs := testing.AllocsPerRun(1000, func() {
		b, err := r.h.Pick(balancer.Request{})
		if err != nil {
			panic(err)
		}
		r.h.Done(b, balancer.Result{Latency: time.Millisecond})
	})
	assert.Zero(t, allocs)
	require.True(t, r.state(1).Trial, "still on trial: its request has not ended")
	r.done(held, balancer.Result{Latency: time.Millisecond})
}

// TestTrialConcurrent runs Picks and Dones from 8 goroutines, under
// -race, while one backend of four fails nine requests in ten, is ejected
// (for a nanosecond), comes back on trial, and so on: every pick handed
// back by the trial is counted down in the inner picker, and once the
// backend's requests succeed it is off trial.
func TestTrialConcurrent(t *testing.T) {
	r := newRig(t, leastconn.New(), health.Config{BaseEjectionTime: time.Nanosecond, MaxEjectionTime: time.Nanosecond}, 4)
	bad := r.bs[1].ID()
	var trials, ejections int
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				b, err := r.h.Pick(balancer.Request{})
				if err != nil {
					panic(err)
				}
				res := balancer.Result{Latency: time.Millisecond}
				if b.ID() == bad && (g+i)%10 != 0 {
					res.Err = errFail
				}
				r.h.Done(b, res)
				if i%20 != 0 {
					continue
				}
				// Every goroutine applies: one of them may run all its
				// iterations before the others start.
				if g == 0 {
					r.clock.Advance(time.Second)
				}
				r.h.Apply()
				if g == 0 && r.h.View().Backends[1].Trial {
					trials++
				}
			}
		})
	}
	wg.Wait()
	for _, c := range r.rec.all() {
		if c.ID == bad && c.New == health.Ejected {
			ejections++
		}
	}
	t.Logf("%d ejections, on trial at %d of 100 looks", ejections, trials)
	assert.Positive(t, ejections)
	for _, b := range r.bs {
		assert.Zero(t, r.h.InFlight(b.ID()), "%s: every pick, handed back or not, was counted down", b.ID())
	}
	// The last Done may have asked for an ejection after the last Apply:
	// apply it, then let it end, so that the backend is back (on trial or
	// not) with nothing in flight.
	r.h.Apply()
	r.clock.Advance(time.Second)
	r.h.Apply()
	require.Equal(t, health.Up, r.h.View().Backends[1].State)
	// Least connections breaks ties at random, and with nothing in flight
	// all four tie: a fixed number of picks may miss the backend (8 did,
	// one run in ten). Pick until one reaches it, within a bound that a
	// backend taking its quarter misses with odds of (3/4)^200, but that a
	// trial stuck busy (every pick of it handed back) never ends early.
	reached := false
	for i := 0; i < 200 && !reached; i++ {
		b, err := r.h.Pick(balancer.Request{})
		require.NoError(t, err)
		reached = b.ID() == bad
		r.h.Done(b, balancer.Result{Latency: time.Millisecond})
	}
	assert.True(t, reached, "the backend on trial takes a request")
	assert.False(t, r.h.View().Backends[1].Trial, "a request succeeded: off trial")
}

// probesDown has backend 1's probes fail Fall times, unapplied: the
// applier sees the verdict before any ejection asked for meanwhile.
func probesDown(r *rig) {
	for range 3 {
		r.h.Observe(r.bs[1].ID(), errFail)
	}
}

// TestTrialRejoins checks that a backend on trial whose trial request
// failed while it was out for another reason (drained, or its probes
// down), so that no ejection followed, is free for a new trial request
// when it is back: else every pick of it would be handed back, and it
// would stay on trial, and out of use, for good.
func TestTrialRejoins(t *testing.T) {
	failed := balancer.Result{Latency: time.Millisecond, Err: errFail}
	for _, tc := range []struct {
		name      string
		out, in   func(r *rig)
		beforeOut bool // the trial request fails before the backend goes out
	}{
		{"drained, then failed", func(r *rig) { require.NoError(t, r.h.Drain(r.bs[1].ID())) }, func(r *rig) { require.NoError(t, r.h.Enable(r.bs[1].ID())) }, false},
		{"failed, then drained", func(r *rig) { require.NoError(t, r.h.Drain(r.bs[1].ID())) }, func(r *rig) { require.NoError(t, r.h.Enable(r.bs[1].ID())) }, true},
		{"probes down, then failed", probesDown, func(r *rig) { r.probe(1, 2, nil) }, false},
		{"failed, then probes down", probesDown, func(r *rig) { r.probe(1, 2, nil) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil, health.Config{}, 4)
			r.fail(1, 5, errFail)
			r.clock.Advance(30 * time.Second)
			r.h.Apply()
			require.True(t, r.state(1).Trial)
			got, picked := r.picksOf(t, 1, 8)
			require.Equal(t, 1, got, "the trial request")
			var trial balancer.Backend
			for _, b := range picked {
				if b.ID() == r.bs[1].ID() {
					trial = b
				} else {
					r.h.Done(b, balancer.Result{Latency: time.Millisecond})
				}
			}
			if tc.beforeOut {
				r.h.Done(trial, failed) // asks for an ejection, not yet applied
				tc.out(r)
			} else {
				tc.out(r)
				r.h.Done(trial, failed)
			}
			r.h.Apply()
			require.NotEqual(t, health.Up, r.state(1).State, "out")
			require.NotEqual(t, health.Ejected, r.state(1).State, "out for another reason than an ejection")
			tc.in(r)
			r.h.Apply()
			st := r.state(1)
			require.Equal(t, health.Up, st.State)
			require.True(t, st.InSet)
			assert.True(t, st.Trial, "still on trial: no request has succeeded")
			got, picked = r.picksOf(t, 1, 40)
			assert.Equal(t, 1, got, "back: one trial request at a time, not none")
			r.done(picked, balancer.Result{Latency: time.Millisecond})
			assert.False(t, r.state(1).Trial, "its trial request succeeded: off trial")
		})
	}
}
