package xdspolicy_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"

	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/consistent"
	"github.com/lbkit/lbkit/examples/grpc/lbpolicy"
	"github.com/lbkit/lbkit/examples/grpcxds/xdspolicy"
)

// rawPolicy is a load_balancing_policy entry naming typeURL by
// TypedStruct with config as its Struct, unchecked: what a control plane
// without xdspolicy could send.
func rawPolicy(t testing.TB, typeURL, config string) *clusterv3.LoadBalancingPolicy_Policy {
	t.Helper()
	s := &structpb.Struct{}
	require.NoError(t, protojson.Unmarshal([]byte(config), s))
	return &clusterv3.LoadBalancingPolicy_Policy{TypedExtensionConfig: &corev3.TypedExtensionConfig{
		Name: typeURL, TypedConfig: mustAny(t, &xdstypev3.TypedStruct{TypeUrl: typeURL, Value: s}),
	}}
}

// sticky reports whether every user of users reaches one backend over
// rounds RPCs each, and how many backends the users reach in all.
func sticky(t *testing.T, c testClient, users, rounds int) (bool, int) {
	t.Helper()
	all := map[string]bool{}
	ok := true
	for u := range users {
		user := "user-" + strconv.Itoa(u)
		seen := map[string]bool{}
		for range rounds {
			seen[mustCall(t, c, user)] = true
		}
		ok = ok && len(seen) == 1
		for a := range seen {
			all[a] = true
		}
	}
	return ok, len(all)
}

// A change of the Cluster's policy, and of its config, reaches a channel
// in use: lbkit_round_robin (a user's RPCs go everywhere), then
// lbkit_ring_hash on x-user (each user sticks to one backend), then the
// ring on x-tenant, which these RPCs do not set (all of them hash the
// empty key: one backend).
func TestPolicyChangeReachesChannel(t *testing.T) {
	cp := newControlPlane(t)
	bs := startBackends(t, 3)
	v := cp.set(t, resources(t, mustPolicy(t, lbpolicy.RoundRobin, ""), oneZone(bs)))
	c := dial(t, cp)
	waitAll(t, c, bs)
	cp.waitACK(t, v)
	ok, n := sticky(t, c, 5, 6)
	assert.False(t, ok, "round robin: a user's RPCs spread")
	assert.Equal(t, 3, n)

	v = cp.set(t, resources(t, mustPolicy(t, lbpolicy.RingHash, `{"key": "x-user"}`), oneZone(bs)))
	cp.waitACK(t, v)
	require.Eventually(t, func() bool { ok, _ := sticky(t, c, 10, 4); return ok }, wait, 10*time.Millisecond,
		"the ring's affinity never came")
	ok, n = sticky(t, c, 20, 4)
	assert.True(t, ok, "ring hash on x-user: each user on one backend")
	assert.Greater(t, n, 1, "users spread over the backends")

	v = cp.set(t, resources(t, mustPolicy(t, lbpolicy.RingHash, `{"key": "x-tenant"}`), oneZone(bs)))
	cp.waitACK(t, v)
	require.Eventually(t, func() bool { _, n := sticky(t, c, 10, 1); return n == 1 }, wait, 10*time.Millisecond,
		"the new key never came")
	_, n = sticky(t, c, 20, 2)
	assert.Equal(t, 1, n, "ring hash on x-tenant, which no RPC sets: one backend for all")
}

// A Cluster whose lbkit config the policy refuses is NACKed, with the
// policy's reason in the NACK and the last accepted version in its
// version_info; the channel goes on with the last accepted Cluster (here
// lbkit_ring_hash on x-user, whose mapping stays lbkit's), and takes the
// next good one.
func TestBadConfigIsNACKed(t *testing.T) {
	cp := newControlPlane(t)
	bs := startBackends(t, 3)
	good := cp.set(t, resources(t, mustPolicy(t, lbpolicy.RingHash, `{"key": "x-user"}`), oneZone(bs)))
	c := dial(t, cp)
	waitAll(t, c, bs)
	cp.waitACK(t, good)

	ring := consistent.NewRing()
	require.NoError(t, ring.Update(lbk.Endpoints(addrs(bs)...)))
	keepsRing := func() {
		t.Helper()
		for u := range 10 {
			user := "user-" + strconv.Itoa(u)
			want, err := ring.Pick(lbk.Request{Key: user})
			require.NoError(t, err)
			assert.Equal(t, want.ID(), mustCall(t, c, user), "user %s", user)
		}
	}
	for _, tt := range badConfigs {
		t.Run(tt.name, func(t *testing.T) {
			_, err := xdspolicy.Policy(tt.policy, tt.config)
			require.Error(t, err, "xdspolicy refuses it before it is sent")
			assert.Contains(t, err.Error(), tt.reason)

			bad := cp.set(t, resources(t, &clusterv3.LoadBalancingPolicy{Policies: []*clusterv3.LoadBalancingPolicy_Policy{
				rawPolicy(t, xdspolicy.TypeURLPrefix+tt.policy, tt.config)}}, oneZone(bs)))
			nack := cp.waitNACK(t, bad)
			t.Logf("NACK of %s: version_info %q, %s", bad, nack.GetVersionInfo(), nack.GetErrorDetail().GetMessage())
			assert.Equal(t, good, nack.GetVersionInfo(), "the NACK names the last version accepted")
			assert.Contains(t, nack.GetErrorDetail().GetMessage(), tt.reason)
			keepsRing()
		})
	}

	// A good Cluster again is taken.
	v := cp.set(t, resources(t, mustPolicy(t, lbpolicy.RoundRobin, ""), oneZone(bs)))
	cp.waitACK(t, v)
	require.Eventually(t, func() bool { ok, _ := sticky(t, c, 3, 6); return !ok }, wait, 10*time.Millisecond,
		"round robin never came after the NACKs")
}

// A channel whose first Cluster is NACKed has no policy to run: its RPCs
// fail UNAVAILABLE, naming the Cluster and the policy's reason.
func TestFirstClusterNACKed(t *testing.T) {
	cp := newControlPlane(t)
	bs := startBackends(t, 1)
	bad := cp.set(t, resources(t, &clusterv3.LoadBalancingPolicy{Policies: []*clusterv3.LoadBalancingPolicy_Policy{
		rawPolicy(t, xdspolicy.TypeURLPrefix+lbpolicy.RingHash, `{}`)}}, oneZone(bs)))
	c := dial(t, cp)
	var err error
	require.Eventually(t, func() bool { // the first RPC takes the channel out of idle
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err = c.UnaryCall(ctx, &testgrpc.SimpleRequest{}) // fail fast
		return status.Code(err) == codes.Unavailable
	}, wait, 10*time.Millisecond, "last error: %v", err)
	cp.waitNACK(t, bad)
	t.Logf("RPC: %v", err)
	assert.Contains(t, err.Error(), clusterName)
	assert.Contains(t, err.Error(), `"key" is required`)
	assert.Zero(t, bs[0].served.Load())
}

// gRFC A52's rule for the list: a client skips an entry whose type it has
// not registered, and takes the first it has (here the recorder, after
// an unregistered name); a list of unregistered entries only is NACKed.
func TestUnregisteredPolicySkipped(t *testing.T) {
	cp := newControlPlane(t)
	bs := startBackends(t, 2)
	rec, err := xdspolicy.PolicyFor(recorderBuilder, "")
	require.NoError(t, err)
	v := cp.set(t, resources(t, xdspolicy.LoadBalancingPolicy(
		rawPolicy(t, xdspolicy.TypeURLPrefix+"lbkit_not_registered", `{}`), rec), oneZone(bs)))
	c := dial(t, cp)
	waitAll(t, c, bs)
	cp.waitACK(t, v)
	r := <-recorders
	before := r.picks.Load()
	for range 10 {
		mustCall(t, c, "")
	}
	assert.Equal(t, int64(10), r.picks.Load()-before, "the recorder, second in the list, picks")

	bad := cp.set(t, resources(t, xdspolicy.LoadBalancingPolicy(
		rawPolicy(t, xdspolicy.TypeURLPrefix+"lbkit_not_registered", `{}`)), oneZone(bs)))
	nack := cp.waitNACK(t, bad)
	t.Logf("NACK: %s", nack.GetErrorDetail().GetMessage())
	assert.Contains(t, nack.GetErrorDetail().GetMessage(), "no supported policy found")
	assert.Equal(t, v, nack.GetVersionInfo())
}

// An entry gRPC has registered, with a config its policy refuses, is not
// skipped for the next: the Cluster is NACKed, though a good entry
// follows (A52 stops at the first registered entry).
func TestBadEntryNotSkipped(t *testing.T) {
	cp := newControlPlane(t)
	bs := startBackends(t, 1)
	good := cp.set(t, resources(t, mustPolicy(t, lbpolicy.RoundRobin, ""), oneZone(bs)))
	c := dial(t, cp)
	mustCall(t, c, "")
	cp.waitACK(t, good)
	bad := cp.set(t, resources(t, xdspolicy.LoadBalancingPolicy(
		rawPolicy(t, xdspolicy.TypeURLPrefix+lbpolicy.RingHash, `{}`), xdspolicy.RoundRobin()), oneZone(bs)))
	nack := cp.waitNACK(t, bad)
	assert.Contains(t, nack.GetErrorDetail().GetMessage(), `"key" is required`)
}
