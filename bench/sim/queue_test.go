package sim

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The queue gives events back in (at, seq) order whichever way they came
// in: the heap, a lane pushed in time order, or a lane pushed out of
// order (which falls back to the heap), interleaved with pops as a run
// interleaves them. This is what keeps a run's result the same as with a
// heap alone.
func TestQueueOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var q queue
	lanes := []int{q.addLane(), q.addLane(), q.addLane()}
	var want []event // every event pushed, with the seq the queue gives it
	var got []event
	now := int64(0)
	for range 20_000 {
		if q.len() > 0 && r.IntN(3) == 0 {
			ev := q.pop()
			now = ev.at
			got = append(got, ev)
			continue
		}
		delay := []int64{0, 100, 5000}[r.IntN(3)]
		switch l := r.IntN(5); {
		case l < 3: // a constant delay ahead, as the engine's lanes
			q.pushLane(lanes[l], now+delay*int64(l+1), evSend, int32(len(want)), 0)
		case l == 3: // before lane 2's last event (but not in the past): to the heap
			q.pushLane(lanes[2], now, evFinish, int32(len(want)), 0)
		default:
			q.push(now+r.Int64N(10_000), evTick, int32(len(want)), 0)
		}
		want = append(want, event{seq: q.seq, arg: int32(len(want))})
	}
	for q.len() > 0 {
		got = append(got, q.pop())
	}
	require.Len(t, got, len(want))
	for i := 1; i < len(got); i++ {
		require.False(t, got[i].before(&got[i-1]), "event %d came out before %d", i, i-1)
	}
	seqs := make([]uint64, len(got))
	for i, ev := range got {
		seqs[i] = ev.seq
	}
	slices.SortFunc(seqs, cmp.Compare)
	for i := range seqs {
		assert.Equal(t, uint64(i+1), seqs[i], "every event came out once")
	}
	assert.Equal(t, -1, func() int {
		var q queue
		for range maxLanes {
			q.addLane()
		}
		return q.addLane()
	}(), "no more than maxLanes lanes")
}
