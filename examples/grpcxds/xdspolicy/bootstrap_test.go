package xdspolicy_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"

	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/consistent"
	"github.com/lbkit/lbkit/examples/grpc/lbpolicy"
)

// childEnv, when set, makes TestBootstrapFromEnv the client half, in a
// process of its own; its value is the JSON of the backend each user
// must reach.
const childEnv = "LBKIT_XDSPOLICY_CHILD_WANT"

// The way a deployment configures gRPC: the bootstrap in
// GRPC_XDS_BOOTSTRAP_CONFIG, read once when the process starts, and the
// xds resolver registered by importing google.golang.org/grpc/xds, with
// no option in the dial. grpc-go reads the variable at init, so the
// client runs in a child process (this test binary again), against the
// control plane and backends of this one; each user's RPCs reach the
// backend lbkit's ring gives the user.
func TestBootstrapFromEnv(t *testing.T) {
	if want := os.Getenv(childEnv); want != "" {
		clientFromEnv(t, want)
		return
	}
	cp := newControlPlane(t)
	bs := startBackends(t, 3)
	cp.set(t, resources(t, mustPolicy(t, lbpolicy.RingHash, `{"key": "x-user"}`), oneZone(bs)))

	ring := consistent.NewRing()
	require.NoError(t, ring.Update(lbk.Endpoints(addrs(bs)...)))
	want := map[string]string{}
	for u := range 20 {
		user := "user-" + strconv.Itoa(u)
		b, err := ring.Pick(lbk.Request{Key: user})
		require.NoError(t, err)
		want[user] = b.ID()
	}
	js, err := json.Marshal(want)
	require.NoError(t, err)

	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestBootstrapFromEnv$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+string(js), "GRPC_XDS_BOOTSTRAP_CONFIG="+string(cp.bootstrap()))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the client process:\n%s", out)
	assert.Contains(t, string(out), "--- PASS: TestBootstrapFromEnv")
	var served int64
	for _, b := range bs {
		served += b.served.Load()
	}
	assert.GreaterOrEqual(t, served, int64(3*len(want)), "the child's RPCs reached this process's backends")
}

// clientFromEnv is the child: three RPCs per user through xds:///echo,
// each to the backend want gives.
func clientFromEnv(t *testing.T, want string) {
	users := map[string]string{}
	require.NoError(t, json.Unmarshal([]byte(want), &users))
	require.NotEmpty(t, os.Getenv("GRPC_XDS_BOOTSTRAP_CONFIG"))
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer cc.Close()
	c := testgrpc.NewTestServiceClient(cc)
	backends := map[string]bool{}
	for _, addr := range users {
		backends[addr] = true
	}
	waitN(t, c, len(backends))
	for user, addr := range users {
		for range 3 {
			assert.Equal(t, addr, mustCall(t, c, user), "user %s", user)
		}
	}
	t.Logf("%d users, each on lbkit's ring's backend", len(users))
}
