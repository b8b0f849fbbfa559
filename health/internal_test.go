package health

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/rr"
)

type stillClock struct{ t time.Time }

func (c *stillClock) Now() time.Time { return c.t }

// OnChange runs with none of the Balancer's locks held, whichever method
// made the change: TryLock succeeds on each of them from inside it. The
// Balancer is driven from this goroutine alone, so a lock found held could
// only be held by the caller of OnChange.
func TestOnChangeHoldsNoLock(t *testing.T) {
	clock := &stillClock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
	var h *Balancer
	calls := 0
	h, err := New(rr.New(), Config{
		Clock: clock,
		OnChange: func(Change) {
			calls++
			for name, l := range map[string]interface{ TryLock() bool }{"mu": &h.mu, "qmu": &h.qmu, "life": &h.life} {
				if assert.True(t, l.TryLock(), "%s is held during OnChange", name) {
					l.(interface{ Unlock() }).Unlock()
				}
			}
		},
	})
	require.NoError(t, err)
	bs := balancer.Endpoints("a.test:1", "b.test:1")
	require.NoError(t, h.Update(bs))
	h.Done(bs[0], balancer.Result{Err: balancer.ErrNoBackend}) // any error: one of five
	for range 4 {
		h.Done(bs[0], balancer.Result{Err: balancer.ErrNoBackend})
	}
	h.Apply() // ejection
	require.NoError(t, h.Drain("b.test:1"))
	require.NoError(t, h.Enable("b.test:1"))
	h.Observe("b.test:1", balancer.ErrNoBackend)
	h.Observe("b.test:1", balancer.ErrNoBackend)
	h.Observe("b.test:1", balancer.ErrNoBackend)
	h.Apply() // down
	clock.t = clock.t.Add(time.Hour)
	require.NoError(t, h.Update(bs)) // the ejection ends inside Update
	assert.Equal(t, 5, calls)        // ejected, draining, up, down, ejection ended
}

// Failures of a backend already out (down by probes, here in panic mode
// with every backend down) ask for nothing: the applier is not woken once
// per failed request.
func TestFailuresOfOutBackendAskNothing(t *testing.T) {
	h, err := New(rr.New(), Config{Clock: &stillClock{}, Fall: 1})
	require.NoError(t, err)
	bs := balancer.Endpoints("a.test:1", "b.test:1")
	require.NoError(t, h.Update(bs))
	h.Observe("a.test:1", balancer.ErrNoBackend)
	h.Observe("b.test:1", balancer.ErrNoBackend)
	h.Apply()
	require.True(t, h.View().Panic, "%+v", h.View())
	for range 20 {
		h.Done(bs[0], balancer.Result{Err: balancer.ErrNoBackend})
	}
	assert.False(t, h.pending.Load())
	assert.Zero(t, h.failing.Load())
}

// A probe's wait is Interval ± Jitter, capped at the largest Duration when
// the sum does not fit: never negative, which would probe back to back.
func TestNextWaitSaturates(t *testing.T) {
	const maxD = time.Duration(math.MaxInt64)
	tests := []struct {
		interval, jitter time.Duration
		draw             uint64
		want             time.Duration
	}{
		{time.Second, 100 * time.Millisecond, 0, 900 * time.Millisecond},
		{time.Second, 100 * time.Millisecond, uint64(200 * time.Millisecond), 1100 * time.Millisecond},
		{maxD, maxD / 10, 0, maxD - maxD/10},
		{maxD, maxD / 10, uint64(maxD / 10), maxD},
		{maxD, maxD / 10, uint64(maxD/10) + 1, maxD},
		{maxD, maxD / 10, uint64(2 * (maxD / 10)), maxD},
		{maxD, maxD - 1, 2*uint64(maxD) - 2, maxD},
		{maxD / 2, maxD/2 - 1, 2*uint64(maxD/2) - 2, maxD - 2},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d±%d/draw=%d", tt.interval, tt.jitter, tt.draw), func(t *testing.T) {
			h, err := New(rr.New(), Config{Interval: tt.interval, Jitter: tt.jitter, Rand: func() uint64 { return tt.draw }})
			require.NoError(t, err)
			assert.Equal(t, tt.want, h.nextWait())
		})
	}
}

// A failure reported by a Done that races with the Update removing its
// backend leaves no failure counted on the removed node: once every
// backend has been removed, no backend has a failure counted, and Done's
// fast path for successes (failing == 0) is back. Before Done checked
// again after counting, a Done that had seen the backend live just before
// the removal left failing above zero for good.
func TestFailingCountSurvivesRemoval(t *testing.T) {
	h, err := New(rr.New(), Config{Clock: &stillClock{}, ConsecutiveFailures: 1 << 30})
	require.NoError(t, err)
	// Every Update replaces the set with backends never seen, so that no
	// removed backend comes back (which would reset its count).
	var cur atomic.Pointer[[]balancer.Backend]
	next := func(i int) []balancer.Backend {
		return balancer.Endpoints(fmt.Sprintf("a%d.test:1", i), fmt.Sprintf("b%d.test:1", i))
	}
	bs := next(0)
	require.NoError(t, h.Update(bs))
	cur.Store(&bs)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				h.Done((*cur.Load())[g], balancer.Result{Err: balancer.ErrNoBackend})
			}
		})
	}
	for i := 1; i <= 20000; i++ {
		bs := next(i)
		require.NoError(t, h.Update(bs))
		cur.Store(&bs)
	}
	close(stop)
	wg.Wait()
	require.NoError(t, h.Update(nil))
	assert.Zero(t, h.failing.Load())
}
