package health

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/rr"
)

// A change queued while another goroutine finishes delivering is delivered
// before the caller that queued it returns, by it or by the other. Two
// goroutines queue a change each and deliver, as note and the methods that
// call it do, at once, many times; after both have returned the queue must
// be empty. Before deliver cleared its flag in the critical section that
// found the queue empty, a change slipped into the gap once in some 5,000
// to 150,000 rounds and stayed queued.
func TestDeliverLeavesNothingQueued(t *testing.T) {
	var got atomic.Int64
	h, err := New(rr.New(), Config{Clock: &stillClock{}, OnChange: func(Change) { got.Add(1) }})
	require.NoError(t, err)
	queue := func() {
		h.qmu.Lock()
		h.queue = append(h.queue, Change{})
		h.qmu.Unlock()
		h.deliver()
	}
	const rounds = 200000
	for i := range rounds {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 2 {
			wg.Go(func() { <-start; queue() })
		}
		close(start)
		wg.Wait()
		h.qmu.Lock()
		left := len(h.queue)
		h.qmu.Unlock()
		require.Zero(t, left, "round %d: a change stayed queued after every caller returned", i)
	}
	require.Equal(t, int64(2*rounds), got.Load())
}
