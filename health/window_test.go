package health_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/rr"
)

// picks returns how many of n picks returned id, handing each back.
func picks(t *testing.T, h *health.Balancer, id string, n int) int {
	t.Helper()
	got := 0
	for range n {
		b, err := h.Pick(balancer.Request{})
		require.NoError(t, err)
		if b.ID() == id {
			got++
		}
		h.Done(b, balancer.Result{Err: balancer.ErrAbandoned})
	}
	return got
}

// From the Done that asks for an ejection until the applier has handed
// the inner picker the set without the backend, Pick does not return it:
// here the applier is parked inside that inner Update.
func TestNoPickWhileEjectionApplies(t *testing.T) {
	inner := newSpy(rr.New())
	h, err := health.New(inner, health.Config{BaseEjectionTime: time.Hour})
	require.NoError(t, err)
	defer h.Close()
	bs := balancer.Endpoints(ids(3)...)
	require.NoError(t, h.Update(bs))
	require.NoError(t, h.Start(context.Background()))

	parked, release := inner.parkNext()
	h.Done(bs[0], balancer.Result{Err: errRefused})
	<-parked // the applier is inside the inner Update that drops bs[0]
	assert.Zero(t, picks(t, h, bs[0].ID(), 60), "picks of the backend being ejected, while the ejection applies")
	release()
	eventually(t, func() bool { return h.View().Backends[0].State == health.Ejected }, "ejected")
	assert.Zero(t, picks(t, h, bs[0].ID(), 60), "after")
}

// Without an applier (a virtual clock, no Start), an ejection asked for
// waits for Apply; Pick keeps away from the backend meanwhile. An ejection
// the cap refuses, and one a success withdraws, leave the backend picked
// again once Apply has seen them.
func TestNoPickBeforeApply(t *testing.T) {
	r := newRig(t, nil, health.Config{MaxEjectedPercent: 25}, 4) // one of four
	id0, id1, id2 := r.bs[0].ID(), r.bs[1].ID(), r.bs[2].ID()
	r.h.Done(r.bs[0], balancer.Result{Err: errRefused})
	assert.Zero(t, picks(t, r.h, id0, 40), "asked for, not applied")
	r.h.Apply()
	require.Equal(t, health.Ejected, r.state(0).State)
	assert.Zero(t, picks(t, r.h, id0, 40), "applied")

	// The cap is reached: b1's ejection waits for a slot, and b1 serves.
	r.h.Done(r.bs[1], balancer.Result{Err: errRefused})
	r.h.Apply()
	require.Equal(t, health.Up, r.state(1).State)
	assert.Equal(t, 20, picks(t, r.h, id1, 60), "capped: picked as the other two")

	// A success withdraws b2's ejection before Apply.
	r.h.Done(r.bs[2], balancer.Result{Err: errRefused})
	assert.Zero(t, picks(t, r.h, id2, 30), "asked for")
	r.h.Done(r.bs[2], balancer.Result{Latency: time.Millisecond})
	r.h.Apply()
	require.Equal(t, health.Up, r.state(2).State)
	assert.Equal(t, 20, picks(t, r.h, id2, 60), "withdrawn: picked as the other two")
}

// Under load, with the applier running: once a Done that asks for b0's
// ejection has returned, no Pick that starts later returns b0.
func TestNoPickAfterEjectingDone(t *testing.T) {
	for run := range 50 {
		inner := rr.New()
		h, err := health.New(inner, health.Config{BaseEjectionTime: time.Hour})
		require.NoError(t, err)
		bs := balancer.Endpoints(ids(4)...)
		require.NoError(t, h.Update(bs))
		require.NoError(t, h.Start(context.Background()))
		var asked atomic.Bool // a Done for b0 with a refusal has returned
		var late atomic.Int64 // picks of b0 that started after it
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 500 {
					after := asked.Load()
					b, err := h.Pick(balancer.Request{})
					if err != nil {
						t.Error(err)
						return
					}
					if b.ID() == bs[0].ID() {
						if after {
							late.Add(1)
						}
						h.Done(b, balancer.Result{Err: errRefused})
						asked.Store(true)
						continue
					}
					h.Done(b, balancer.Result{Latency: time.Millisecond})
				}
			})
		}
		wg.Wait()
		require.NoError(t, h.Close())
		require.True(t, asked.Load())
		assert.Zero(t, late.Load(), "run %d: picks of b0 after the Done that ejected it returned", run)
	}
}
