package xdspolicy_test

import (
	"maps"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/consistent"
	"github.com/lbkit/lbkit/examples/grpc/lbpolicy"
)

// RPCs through xds:///echo reach the lbkit picker the Cluster names: each
// RPC is one Pick and one Done of the recorder, whose set is the
// ClusterLoadAssignment's endpoints, each of weight 1.
func TestPicksGoThroughLbkit(t *testing.T) {
	cp := newControlPlane(t)
	bs := startBackends(t, 3)
	cp.set(t, resources(t, mustPolicy(t, recorderName, ""), oneZone(bs)))
	c := dial(t, cp)
	waitAll(t, c, bs)
	r := <-recorders
	picks, dones := r.picks.Load(), r.dones.Load()
	seen := map[string]int{}
	for range 30 {
		seen[mustCall(t, c, "")]++
	}
	picks, dones = r.picks.Load()-picks, r.dones.Load()-dones
	t.Logf("set %v; 30 RPCs: %d picks, %d dones, answered by %v", r.lastSet(), picks, dones, seen)
	assert.Equal(t, map[string]int{bs[0].addr: 1, bs[1].addr: 1, bs[2].addr: 1}, r.lastSet())
	assert.Equal(t, int64(30), picks, "one lbkit Pick per RPC")
	assert.Equal(t, int64(30), dones, "one lbkit Done per RPC")
	for _, b := range bs {
		assert.Equal(t, 10, seen[b.addr], "rr inside the recorder: an equal share for %s", b.addr)
	}
}

// lbkit_ring_hash with its config in the TypedStruct: every RPC of a user
// (the x-user metadata the config names) reaches one backend, the one
// lbkit's own ring gives that key over the same three backends of
// weight 1, as a client of the policy that resolves the backends by DNS
// would pick. gRPC's ring_hash under xDS hashes what the route's
// hash_policy says (none here: a random hash per RPC), round_robin
// ignores the key.
func TestRingHashKeyAffinity(t *testing.T) {
	cp := newControlPlane(t)
	bs := startBackends(t, 3)
	cp.set(t, resources(t, mustPolicy(t, lbpolicy.RingHash, `{"key": "x-user", "boundedLoad": 1.25}`), oneZone(bs)))
	c := dial(t, cp)
	waitAll(t, c, bs)

	ring := consistent.NewRing(consistent.WithBoundedLoad(1.25))
	require.NoError(t, ring.Update(lbk.Endpoints(addrs(bs)...)))
	perBackend := map[string]int{}
	for u := range 40 {
		user := "user-" + strconv.Itoa(u)
		want, err := ring.Pick(lbk.Request{Key: user})
		require.NoError(t, err)
		ring.Done(want, lbk.Result{}) // as each RPC ends before the next
		for range 3 {
			assert.Equal(t, want.ID(), mustCall(t, c, user), "user %s", user)
		}
		perBackend[want.ID()]++
	}
	t.Logf("users per backend: %v", perBackend)
	assert.Len(t, perBackend, 3, "40 users spread over the three backends")
}

// lbkit_least_conn: with an RPC held in flight on one backend, every
// sequential RPC goes to the other two. round_robin would send a third
// there, and least_request's two random choices (with replacement) would
// pick it about one RPC in nine.
func TestLeastConnAvoidsBusyBackend(t *testing.T) {
	cp := newControlPlane(t)
	bs := startBackends(t, 3)
	cp.set(t, resources(t, mustPolicy(t, lbpolicy.LeastConn, ""), oneZone(bs)))
	c := dial(t, cp)
	mustCall(t, c, "") // the channel is up

	busy := bs[0]
	busy.hold.Store(true)
	errs := make(chan error, 64)
	sent := 0
	require.Eventually(t, func() bool {
		if busy.held.Load() > 0 {
			return true
		}
		if sent < cap(errs) {
			sent++
			go func() { _, err := call(t.Context(), c, ""); errs <- err }()
		}
		return false
	}, wait, 5*time.Millisecond, "no RPC reached %s", busy.addr)
	// Let the RPCs that went elsewhere finish: the rest are held.
	done := 0
	require.Eventually(t, func() bool {
		for ; len(errs) > 0; done++ {
			assert.NoError(t, <-errs)
		}
		return done+int(busy.held.Load()) == sent
	}, wait, 5*time.Millisecond)
	before := busy.served.Load()

	seen := map[string]int{}
	for range 60 {
		seen[mustCall(t, c, "")]++
	}
	t.Logf("%d in flight on %s; then 60 RPCs went to %v", busy.held.Load(), busy.addr, seen)
	assert.Equal(t, before, busy.served.Load(), "no RPC to the backend with one in flight")
	assert.Zero(t, seen[busy.addr])
	assert.Greater(t, seen[bs[1].addr], 10, "ties broken fairly")
	assert.Greater(t, seen[bs[2].addr], 10, "ties broken fairly")

	close(busy.release)
	for ; done < sent; done++ {
		require.NoError(t, <-errs)
	}
}

// Locality and endpoint weights reach lbkit_wrr as the endpoints'
// weights, reduced to the smallest integers in the same ratio: zone a of
// weight 3 holds b0; zone b of weight 1 holds b1 and b2; gRPC gives each
// endpoint its locality's share times its share within the locality
// (gRFC A113) in fixed point, 3/4, 1/8 and 1/8 of 2³¹, which are 6, 1 and
// 1. lbkit's smooth weighted round robin then sends exactly 60, 10 and 10
// of 80 RPCs.
func TestWeightsFromLocalitiesAndEndpoints(t *testing.T) {
	cp := newControlPlane(t)
	bs := startBackends(t, 3)
	cp.set(t, resources(t, mustPolicy(t, recorderName, ""),
		place{zone: "a", weight: 3, endpoints: []endpoint{{addr: bs[0].addr}}},
		place{zone: "b", weight: 1, endpoints: []endpoint{{addr: bs[1].addr, weight: 5}, {addr: bs[2].addr, weight: 5}}},
	))
	c := dial(t, cp)
	mustCall(t, c, "")
	r := <-recorders
	require.Eventually(t, func() bool { return len(r.lastSet()) == 3 }, wait, 10*time.Millisecond)
	assert.Equal(t, map[string]int{bs[0].addr: 6, bs[1].addr: 1, bs[2].addr: 1}, r.lastSet())

	// The same through lbkit_wrr, as shares of RPCs.
	cp2 := newControlPlane(t)
	cp2.set(t, resources(t, mustPolicy(t, lbpolicy.WeightedRoundRobin, ""),
		place{zone: "a", weight: 3, endpoints: []endpoint{{addr: bs[0].addr}}},
		place{zone: "b", weight: 1, endpoints: []endpoint{{addr: bs[1].addr, weight: 5}, {addr: bs[2].addr, weight: 5}}},
	))
	c2 := dial(t, cp2)
	waitAll(t, c2, bs)
	seen := map[string]int{}
	for range 80 {
		seen[mustCall(t, c2, "")]++
	}
	t.Logf("80 RPCs: %v", seen)
	assert.InDelta(t, 60, seen[bs[0].addr], 2)
	assert.InDelta(t, 10, seen[bs[1].addr], 2)
	assert.InDelta(t, 10, seen[bs[2].addr], 2)
}

// waitAll sends RPCs, each with a user of its own, until every backend
// has answered one, so that every endpoint is READY and in the lbkit
// picker's set.
func waitAll(t *testing.T, c testClient, bs []*backend) {
	t.Helper()
	waitN(t, c, len(bs))
}

// waitN is waitAll for n backends.
func waitN(t *testing.T, c testClient, n int) {
	t.Helper()
	seen := map[string]bool{}
	i := 0
	require.Eventually(t, func() bool {
		i++
		if addr := mustCall(t, c, "warm-up-"+strconv.Itoa(i)); addr != "" {
			seen[addr] = true
		}
		return len(seen) == n
	}, wait, time.Millisecond, "not every backend answered: %v", slices.Collect(maps.Keys(seen)))
}
