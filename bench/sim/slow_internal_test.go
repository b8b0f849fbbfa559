package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/catalog"
)

// oneBackend returns an engine of three users in front of one backend
// that serves in a second, with the given capacity and stalls, under
// variant v, its events not played: the test drives it.
func oneBackend(t *testing.T, capacity int, v Variant, stalls ...Outage) *engine {
	t.Helper()
	sc := &Scenario{Name: "one", Backends: []Backend{{Latency: time.Second, Capacity: capacity, Stalls: stalls}},
		Users: 3, Stages: []Stage{{time.Minute, 3}}, Think: time.Hour}
	require.NoError(t, sc.Validate())
	a, ok := catalog.Lookup("rr")
	require.True(t, ok)
	e, err := newEngine(sc, v, a, 1, 1)
	require.NoError(t, err)
	return e
}

// An attempt that times out leaves its backend: out of the queue, whose
// ticket for it is then skipped, or out of service, which frees its slot.
func TestLeave(t *testing.T) {
	e := oneBackend(t, 1, Timeout)
	s := &e.servers[0]
	for u := range int32(3) {
		e.send(u)
	}
	require.Equal(t, []uint8{atServer, queued, queued}, []uint8{e.users[0].state, e.users[1].state, e.users[2].state})
	assert.Equal(t, 3, s.inflight)
	assert.Equal(t, 1, s.busy)

	e.now = int64(500 * time.Millisecond)
	e.timedOut(1, e.users[1].token) // as if its timer had fired
	assert.Equal(t, idle, e.users[1].state)
	assert.Equal(t, 2, s.inflight, "it left the queue")
	assert.Equal(t, 1, s.busy)
	assert.Equal(t, int64(1), e.errs, "no retry: the request fails")

	e.now = int64(time.Second)
	e.finish(0, e.users[0].token)
	assert.Equal(t, int64(1), e.ok)
	assert.Equal(t, atServer, e.users[2].state, "the ticket of the attempt that left is skipped")
	assert.Equal(t, 1, s.inflight)
	assert.Equal(t, 1, s.busy)

	e.now = int64(1500 * time.Millisecond)
	e.timedOut(2, e.users[2].token)
	assert.Equal(t, 0, s.inflight, "it left service")
	assert.Equal(t, 0, s.busy, "and its slot")
	assert.Equal(t, int64(2), e.errs)
	e.finish(2, e.users[2].token-1) // the answer it would have had: void
	assert.Equal(t, int64(1), e.ok)
}

// A stalled backend serves but holds its answers; one whose attempt
// timed out meanwhile is not sent, the others leave when the stall ends.
func TestStallHolds(t *testing.T) {
	e := oneBackend(t, 0, Timeout, Outage{At: time.Millisecond, Until: 10 * time.Second})
	s := &e.servers[0]
	e.setStall(0, true)
	e.send(0)
	e.send(1)
	e.now = int64(time.Second)
	e.finish(0, e.users[0].token)
	e.finish(1, e.users[1].token)
	assert.Len(t, s.held, 2, "the answers are held")
	assert.Equal(t, 2, s.inflight, "and their requests still in flight")
	assert.Zero(t, e.ok)

	e.now = int64(5 * time.Second)
	e.timedOut(1, e.users[1].token)
	assert.Equal(t, 1, s.inflight)
	assert.Equal(t, int64(1), e.errs)

	e.now = int64(6 * time.Second)
	e.setStall(0, false)
	assert.Equal(t, int64(1), e.ok, "the answer still wanted leaves")
	assert.Equal(t, 6*time.Second, time.Duration(e.latency.Quantile(1)))
	assert.Zero(t, s.inflight)
	assert.Empty(t, s.held)
}

// The tokens of a user's attempt and of its hedge never meet: each names
// its own, and an old one names neither.
func TestTokens(t *testing.T) {
	e := oneBackend(t, 0, Retry|Hedge)
	us, h := &e.users[0], &e.hedges[0]
	for range 3 {
		us.next()
		h.next()
	}
	assert.Zero(t, us.token&hedgeToken)
	assert.NotZero(t, h.token&hedgeToken)
	assert.Same(t, &us.try, e.tryOf(0, us.token))
	assert.Same(t, h, e.tryOf(0, h.token))
	assert.Nil(t, e.tryOf(0, us.token-1))
	assert.Nil(t, e.tryOf(0, h.token-1))
	us.token = ^uint32(0) &^ hedgeToken
	us.next()
	assert.Zero(t, us.token, "the user's wraps round below the hedge's")
}
