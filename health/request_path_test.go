package health_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/lrt"
	"github.com/lbkit/lbkit/rr"
)

// Pick and Done allocate nothing: on success, on failures below the
// threshold, on abandoned requests, and while a backend ramps up.
func TestPickDoneAllocs(t *testing.T) {
	inners := map[string]func() balancer.Balancer{
		"rr":        func() balancer.Balancer { return rr.New() },
		"leastconn": func() balancer.Balancer { return leastconn.New() },
		"lrt":       func() balancer.Balancer { return lrt.New() },
	}
	for name, inner := range inners {
		t.Run(name, func(t *testing.T) {
			r := newRig(t, inner(), health.Config{ConsecutiveFailures: 1 << 30, SlowStart: time.Hour}, 16)
			// Backend 0 returns from an ejection and ramps up for the hour.
			r.h.Done(r.bs[0], balancer.Result{Err: errRefused})
			r.h.Apply()
			r.clock.Advance(time.Minute)
			r.h.Apply()
			require.Less(t, r.state(0).Ramp, 1.0)

			results := []balancer.Result{
				{Latency: time.Millisecond},
				{Latency: time.Millisecond, Err: errFail},
				{Err: balancer.ErrAbandoned},
				{},
			}
			for _, res := range results {
				allocs := testing.AllocsPerRun(2000, func() {
					b, err := r.h.Pick(balancer.Request{})
					if err != nil {
						panic(err)
					}
					r.h.Done(b, res)
				})
				assert.Zero(t, allocs, "result %+v", res)
			}
		})
	}
}

// A burst of ejections is applied together: while the applier is busy
// with an inner Update, the requests of 99 more backends pile up, and the
// next Update takes them all. Done never waits meanwhile.
func TestEjectionsCoalesce(t *testing.T) {
	inner := newSpy(rr.New())
	h, err := health.New(inner, health.Config{MaxEjectedPercent: 100})
	require.NoError(t, err)
	defer h.Close()
	addrs := make([]string, 200)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("10.0.%d.%d:80", i/256, i%256)
	}
	bs := balancer.Endpoints(addrs...)
	require.NoError(t, h.Update(bs))
	require.NoError(t, h.Start(context.Background()))
	before := inner.updates()

	parked, release := inner.parkNext()
	h.Done(bs[0], balancer.Result{Err: errRefused})
	<-parked // the applier is inside the inner Update for backend 0

	var wg sync.WaitGroup
	for g := range 4 { // Dones from several goroutines, as in a proxy
		wg.Go(func() {
			for i := 1 + g; i < 100; i += 4 {
				h.Done(bs[i], balancer.Result{Err: errRefused})
			}
		})
	}
	doneReturned := make(chan struct{})
	go func() { wg.Wait(); close(doneReturned) }()
	select {
	case <-doneReturned:
	case <-time.After(10 * time.Second):
		t.Fatal("Done waited for the applier's inner Update")
	}
	release()
	eventually(t, func() bool { return len(inner.current()) == 100 }, "the 100 backends never left the set")
	assert.Equal(t, 2, inner.updates()-before, "one inner Update for the first ejection, one for the 99 others")
	assert.Equal(t, addrs[100:], inner.current())
}

// Driven through Observe, Apply and a virtual clock, with seeded
// randomness, a run is the same every time: what the scenario simulator
// relies on.
func TestDeterministic(t *testing.T) {
	run := func() string {
		var log strings.Builder
		clock := newFakeClock()
		rnd := rand.New(rand.NewPCG(7, 7))
		h, err := health.New(leastconn.New(leastconn.WithRand(rnd.Uint64)), health.Config{
			Clock:     clock,
			Rand:      rnd.Uint64,
			SlowStart: 10 * time.Second,
			OnChange:  func(c health.Change) { fmt.Fprintln(&log, c, c.At.Unix()) },
		})
		require.NoError(t, err)
		bs := balancer.Endpoints(ids(8)...)
		require.NoError(t, h.Update(bs))
		var held []balancer.Backend
		for i := range 5000 {
			b, err := h.Pick(balancer.Request{})
			require.NoError(t, err)
			fmt.Fprint(&log, b.ID()[8:], " ")
			held = append(held, b)
			if len(held) > 30 {
				res := balancer.Result{Latency: 20 * time.Millisecond}
				if held[0] == bs[3] && i < 2000 {
					res.Err = errFail
				}
				h.Done(held[0], res)
				held = held[1:]
			}
			if i%97 == 0 {
				h.Observe(bs[i%8].ID(), map[bool]error{true: errFail}[i%3 == 0])
			}
			clock.Advance(5 * time.Millisecond)
			h.Apply()
		}
		return log.String()
	}
	a, b := run(), run()
	assert.Equal(t, a, b)
	assert.Contains(t, a, "ejected", "the run exercised ejections")
}

// OnChange may call back into the Balancer: View, the admin methods,
// Update. Were it called under a lock, this would deadlock.
func TestOnChangeMayCallBack(t *testing.T) {
	var h *health.Balancer
	var views []int
	r := newRig(t, nil, health.Config{OnChange: func(c health.Change) {
		views = append(views, len(h.View().Backends))
		if c.New == health.Ejected {
			_ = h.Drain(c.ID)
		}
	}}, 3)
	h = r.h
	r.fail(0, 1, errRefused)
	assert.Equal(t, []int{3, 3}, views)
	assert.Equal(t, health.Draining, r.state(0).State)
}

// Which removed backends keep their state is decided by the sets given to
// Update and nothing else: the most recently removed are kept, up to
// max(n, 64) of them for a set of n, in the order Update was given them.
// 100 drained backends, a set of one, then the 100 again: the 35 removed
// first are new again, the last 64 still drained. (With
// balancer.Registry, which retires in map order, the survivors changed
// from run to run.)
func TestRemovedStateKeptInSetOrder(t *testing.T) {
	run := func() []health.State {
		r := newRig(t, nil, health.Config{}, 100)
		for _, b := range r.bs {
			require.NoError(t, r.h.Drain(b.ID()))
		}
		require.NoError(t, r.h.Update(r.bs[:1]))
		require.NoError(t, r.h.Update(r.bs))
		var states []health.State
		for _, st := range r.h.View().Backends {
			states = append(states, st.State)
		}
		return states
	}
	want := slices.Repeat([]health.State{health.Draining}, 100)
	for i := 1; i <= 35; i++ {
		want[i] = health.Up
	}
	for range 3 {
		assert.Equal(t, want, run())
	}
}
