package lbpolicy

import (
	"context"
	"testing"

	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestAttemptReachesPicker checks that an Attempt in the context reaches
// the lbkit picker as Request.Attempt and Avoid, that Picked names the
// endpoint picked, and that OnlyElsewhere refuses a set of one.
func TestAttemptReachesPicker(t *testing.T) {
	children := make([]balancer.Picker, 4)
	for i := range children {
		children[i] = &childPicker{name: string(rune('a' + i))}
	}
	p := testPicker(t, RingHash, `{"key": "x-user"}`, newTestRing(t), children...)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice")

	first := new(Attempt)
	res, err := p.Pick(balancer.PickInfo{Ctx: WithAttempt(ctx, first)})
	require.NoError(t, err)
	home := res.Metadata.Get("child")[0]
	assert.Equal(t, home, first.Picked(), "Picked names the endpoint")
	assert.False(t, first.Refused())

	for range 10 { // a hash picker: the same key, the same home, unless avoided
		hedge := &Attempt{N: 1, Avoid: first.Picked(), OnlyElsewhere: true}
		res, err = p.Pick(balancer.PickInfo{Ctx: WithAttempt(ctx, hedge)})
		require.NoError(t, err)
		assert.NotEqual(t, home, res.Metadata.Get("child")[0], "Avoid reached the ring")
		assert.Equal(t, res.Metadata.Get("child")[0], hedge.Picked())
	}
	res, err = p.Pick(balancer.PickInfo{Ctx: ctx})
	require.NoError(t, err)
	assert.Equal(t, home, res.Metadata.Get("child")[0], "no Attempt: the key's home")

	// A set of one: Avoid cannot be kept; OnlyElsewhere refuses the pick.
	lc := leastconn.New()
	one := testPicker(t, LeastConn, `{}`, lc, &childPicker{name: "a"})
	a := &Attempt{N: 1, Avoid: "a", OnlyElsewhere: true}
	_, err = one.Pick(balancer.PickInfo{Ctx: WithAttempt(context.Background(), a)})
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.True(t, a.Refused())
	assert.Empty(t, a.Picked())
	assert.Zero(t, lc.InFlight("a"), "a refused pick is taken off the count")
	a = &Attempt{N: 1, Avoid: "a"} // without OnlyElsewhere, sent there
	_, err = one.Pick(balancer.PickInfo{Ctx: WithAttempt(context.Background(), a)})
	require.NoError(t, err)
	assert.Equal(t, "a", a.Picked())
}

// newTestRing returns the ring lbkit_ring_hash builds.
func newTestRing(t *testing.T) lbk.Balancer {
	t.Helper()
	r, err := newRing(&Config{})
	require.NoError(t, err)
	return r
}
