package xdspolicy_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/orca"

	"github.com/lbkit/lbkit/examples/grpc/lbpolicy"
	"github.com/lbkit/lbkit/examples/grpcxds/xdspolicy"
)

// The lbkit policy runs once per priority, under gRPC's priority policy,
// which fails over: with priority 0's two backends stopped, RPCs go to
// priority 1's, through a second lbkit_least_conn.
func TestPriorityFailover(t *testing.T) {
	cp := newControlPlane(t)
	bs := startBackends(t, 3)
	cp.set(t, resources(t, mustPolicy(t, lbpolicy.LeastConn, ""),
		place{zone: "a", weight: 1, endpoints: []endpoint{{addr: bs[0].addr}, {addr: bs[1].addr}}},
		place{zone: "b", weight: 1, priority: 1, endpoints: []endpoint{{addr: bs[2].addr}}},
	))
	c := dial(t, cp)
	for range 20 {
		assert.NotEqual(t, bs[2].addr, mustCall(t, c, ""), "priority 0 serves while it can")
	}
	// Stopped abruptly: an RPC sent as the connections close may fail
	// (there is no retryPolicy here), so the switch is waited for.
	bs[0].gs.Stop()
	bs[1].gs.Stop()
	failed := 0
	require.Eventually(t, func() bool {
		addr, err := call(t.Context(), c, "")
		if err != nil {
			failed++
		}
		return addr == bs[2].addr
	}, wait, 10*time.Millisecond)
	t.Logf("%d RPCs failed while priority 0 went down", failed)
	for range 20 {
		assert.Equal(t, bs[2].addr, mustCall(t, c, ""), "priority 1 serves")
	}
}

// Wrapped in wrr_locality (its endpoint_picking_policy), the lbkit
// policy runs once per locality, under gRPC's weighted_target, which
// splits the RPCs by locality weight at random: two recorders, one per
// locality, each with its locality's endpoints; zone a (weight 3) gets
// about three quarters.
func TestUnderWRRLocality(t *testing.T) {
	cp := newControlPlane(t)
	bs := startBackends(t, 3)
	rec, err := xdspolicy.PolicyFor(recorderBuilder, "")
	require.NoError(t, err)
	entry, err := xdspolicy.WRRLocality(rec)
	require.NoError(t, err)
	cp.set(t, resources(t, xdspolicy.LoadBalancingPolicy(entry),
		place{zone: "a", weight: 3, endpoints: []endpoint{{addr: bs[0].addr}}},
		place{zone: "b", weight: 1, endpoints: []endpoint{{addr: bs[1].addr}, {addr: bs[2].addr}}},
	))
	c := dial(t, cp)
	waitAll(t, c, bs)
	r1, r2 := <-recorders, <-recorders
	sets := []map[string]int{r1.lastSet(), r2.lastSet()}
	assert.ElementsMatch(t, []map[string]int{{bs[0].addr: 1}, {bs[1].addr: 1, bs[2].addr: 1}}, sets,
		"one lbkit picker per locality, each with its own endpoints")

	seen := map[string]int{}
	const n = 400
	for range n {
		seen[mustCall(t, c, "")]++
	}
	t.Logf("%d RPCs: %v", n, seen)
	assert.InDelta(t, 0.75, float64(seen[bs[0].addr])/n, 0.1, "zone a by its weight")
	assert.InDelta(t, seen[bs[1].addr], seen[bs[2].addr], 0.2*n/4+2, "round robin within zone b")
}

// ORCA under xDS: the per-RPC load reports of backends serving with
// grpc-go's orca package reach the lbkit picker's Done through gRPC's
// cluster_impl, and lbkit_wrr_orca weighs by them: with a blackout of an
// hour, no weight applies (a third each); the Cluster changed to no
// blackout, the backend reporting four times the utilisation gets about
// a ninth (gRFC A58's weights 500, 500, 125).
func TestORCAUnderXDS(t *testing.T) {
	cp := newControlPlane(t)
	var bs []*backend
	for _, u := range []float64{0.2, 0.2, 0.8} {
		rec := orca.NewServerMetricsRecorder()
		rec.SetApplicationUtilization(u)
		rec.SetQPS(100)
		bs = append(bs, startBackends(t, 1, orca.CallMetricsServerOption(rec), grpc.ChainUnaryInterceptor(askForReport))...)
	}
	cp.set(t, resources(t, mustPolicy(t, lbpolicy.ReportedWRR, `{"blackoutPeriod": "1h"}`), oneZone(bs)))
	c := dial(t, cp)
	waitAll(t, c, bs)
	share := func(n int) float64 {
		before := bs[2].served.Load()
		for range n {
			mustCall(t, c, "")
		}
		return float64(bs[2].served.Load()-before) / float64(n)
	}
	s := share(90)
	t.Logf("blackout 1h: the busy backend's share %.3f", s)
	assert.InDelta(t, 1.0/3, s, 0.05)

	v := cp.set(t, resources(t, mustPolicy(t, lbpolicy.ReportedWRR, `{"blackoutPeriod": "0s", "weightUpdatePeriod": "0.1s"}`), oneZone(bs)))
	cp.waitACK(t, v)
	require.Eventually(t, func() bool { return share(90) < 0.2 }, wait, 50*time.Millisecond,
		"the weights never applied")
	s = share(900)
	t.Logf("no blackout: the busy backend's share %.3f", s)
	assert.InDelta(t, 1.0/9, s, 0.05)
}

// askForReport asks for the RPC's ORCA recorder, without which grpc-go
// sends no trailer report.
func askForReport(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	_ = orca.CallMetricsRecorderFromContext(ctx)
	return h(ctx, req)
}
