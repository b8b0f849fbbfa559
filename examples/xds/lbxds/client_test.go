package lbxds_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/discovery"
	"github.com/lbkit/lbkit/examples/xds/lbxds"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/locality"
	"github.com/lbkit/lbkit/rr"
	"github.com/lbkit/lbkit/wrr"
)

// newLocality is locality over wrr, with a seeded draw.
func newLocality(t testing.TB) *locality.Balancer {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	l, err := locality.New(func() balancer.Balancer { return wrr.New() }, locality.Config{Rand: r.Uint64})
	require.NoError(t, err)
	return l
}

// newStack is health ▶ locality ▶ wrr, the stack the package doc wires.
func newStack(t testing.TB) (*health.Balancer, *locality.Balancer) {
	t.Helper()
	l := newLocality(t)
	h, err := health.New(l, health.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	return h, l
}

// picks returns how many of n picks went to each backend.
func picks(t testing.TB, p balancer.Picker, n int) map[string]int {
	t.Helper()
	out := map[string]int{}
	for range n {
		b, err := p.Pick(balancer.Request{})
		require.NoError(t, err)
		out[b.ID()]++
	}
	return out
}

func loadsOf(v locality.View) map[int]float64 {
	out := map[int]float64{}
	for _, lv := range v.Levels {
		out[lv.Priority] = lv.Load
	}
	return out
}

// Locality and endpoint weights reach the picker as shares of the picks,
// and priority 1 gets nothing while priority 0 is healthy.
func TestWeightsAndPriorities(t *testing.T) {
	cp := newControlPlane(t)
	v := cp.set(t, cla("svc",
		loc("r", "a", 0, 3, ep("10.0.0.1:80", 1, 0), ep("10.0.0.2:80", 3, 0)),
		loc("r", "b", 0, 1, ep("10.0.1.1:80", 5, 0)),
		loc("r", "c", 1, 1, healthy("10.0.2.1:80")),
	))
	h, l := newStack(t)
	c := newClient(t, cp, map[string]balancer.Updater{"svc": h})
	waitVersion(t, c, v)

	view := l.View()
	require.Len(t, view.Levels, 2)
	assert.Equal(t, map[int]float64{0: 1, 1: 0}, loadsOf(view), "priority 0 takes everything")
	shares := map[string]float64{}
	for _, z := range view.Levels[0].Zones {
		shares[z.Zone] = z.Share
	}
	assert.InDelta(t, 0.75, shares["r/a"], 1e-9, "locality weights 3:1")
	assert.InDelta(t, 0.25, shares["r/b"], 1e-9)

	const n = 40_000
	got := picks(t, h, n)
	want := map[string]float64{"10.0.0.1:80": 0.75 * 0.25, "10.0.0.2:80": 0.75 * 0.75, "10.0.1.1:80": 0.25}
	for id, share := range want {
		assert.InDelta(t, share, float64(got[id])/n, 0.01, "%s", id)
	}
	assert.Zero(t, got["10.0.2.1:80"], "priority 1 gets no pick")
}

// Unhealthy endpoints lower their level's share, by the assignment's
// overprovisioning factor, when the client's target is the locality
// layer (a balancer.HealthUpdater); 0 or no factor is the locality's own.
func TestHealthAndOverprovisioning(t *testing.T) {
	cp := newControlPlane(t)
	tier := func(p uint32, base string, down int) *endpointv3.LocalityLbEndpoints {
		l := loc("r", "a", p, 0)
		for i := range 10 {
			hs := corev3.HealthStatus_HEALTHY
			if i < down {
				hs = corev3.HealthStatus_UNHEALTHY
			}
			l.LbEndpoints = append(l.LbEndpoints, ep(fmt.Sprintf("%s.%d:80", base, i), 0, hs))
		}
		return l
	}
	l := newLocality(t)
	c := newClient(t, cp, map[string]balancer.Updater{"svc": l})

	// 60% of priority 0 healthy: 1.4 × 0.6 = 84% stays there.
	waitVersion(t, c, cp.set(t, cla("svc", tier(0, "10.0.0", 4), tier(1, "10.0.1", 0))))
	assert.InDelta(t, 0.84, loadsOf(l.View())[0], 1e-9)
	// The assignment's factor 1.0: 60%.
	waitVersion(t, c, cp.set(t, withFactor(cla("svc", tier(0, "10.0.0", 4), tier(1, "10.0.1", 0)), 100)))
	assert.InDelta(t, 0.6, loadsOf(l.View())[0], 1e-9)
	// No factor: the locality's own again.
	waitVersion(t, c, cp.set(t, cla("svc", tier(0, "10.0.0", 4), tier(1, "10.0.1", 0))))
	assert.InDelta(t, 0.84, loadsOf(l.View())[0], 1e-9)

	// A factor the locality layer cannot take is NACKed; the factor and
	// the set stay.
	good := c.Status().Version
	from := len(cp.reqs())
	bad := cp.set(t, withFactor(cla("svc", tier(0, "10.0.0", 6), tier(1, "10.0.1", 0)), 50))
	nack, _ := cp.waitRequest(t, from, "NACKing "+bad, func(r *discoveryRequest) bool { return r.GetErrorDetail() != nil })
	assert.Equal(t, good, nack.GetVersionInfo())
	assert.Contains(t, nack.GetErrorDetail().GetMessage(), "policy.overprovisioning_factor 50: the target's locality layer takes 100 to 1000")
	assert.InDelta(t, 0.84, loadsOf(l.View())[0], 1e-9)
}

// With health at the top of the stack, as the package doc wires it, the
// Publisher's target is health.Balancer, a balancer.HealthUpdater: the
// endpoints the control plane calls UNHEALTHY stay in the set, unhealthy,
// down to locality, which counts them in their level's size and keeps
// 0.6 × 1.4 = 84% of the traffic at priority 0, as Envoy does.
func TestHealthOnTopKeepsUnhealthy(t *testing.T) {
	cp := newControlPlane(t)
	h, l := newStack(t)
	rec := make(chan lbxds.Update, 16)
	c := newClient(t, cp, map[string]balancer.Updater{"svc": h}, func(c *lbxds.Config) {
		c.OnUpdate = func(u lbxds.Update) {
			if u.Cluster != "" {
				rec <- u
			}
		}
	})
	p0 := loc("r", "a", 0, 0)
	for i := range 10 {
		hs := corev3.HealthStatus_HEALTHY
		if i < 4 {
			hs = corev3.HealthStatus_UNHEALTHY
		}
		p0.LbEndpoints = append(p0.LbEndpoints, ep(fmt.Sprintf("10.0.0.%d:80", i), 0, hs))
	}
	v := cp.set(t, cla("svc", p0, loc("r", "a", 1, 0, healthy("10.0.1.1:80"))))
	waitVersion(t, c, v)
	u := <-rec
	require.True(t, u.Taken)
	assert.Len(t, u.Report.Healthy, 7)
	assert.Len(t, u.Report.Unhealthy, 4, "health.Balancer is a HealthUpdater: unhealthy endpoints stay, unhealthy")
	lv := l.View().Levels[0]
	assert.Equal(t, 10, lv.Total, "locality sees the 10 endpoints of priority 0")
	assert.Equal(t, 6, lv.Healthy)
	assert.InDelta(t, 0.84, lv.Load, 1e-9, "and keeps 84% of the traffic at priority 0, as Envoy does")
}

// Each NACK rule, over the stream: the client NACKs with the last version
// it ACKed, the response's nonce and an error_detail saying why, and the
// target keeps its set; a good snapshot after it is taken.
func TestNACKRules(t *testing.T) {
	tests := []struct {
		name string
		cla  *endpointv3.ClusterLoadAssignment
		want string
	}{
		{"endpoint weight 0", cla("svc", loc("r", "a", 0, 0, ep("10.0.0.1:80", 0, 0),
			&endpointv3.LbEndpoint{HostIdentifier: healthy("10.0.0.2:80").HostIdentifier, LoadBalancingWeight: wrapperspb.UInt32(0)})),
			"endpoint 1 (10.0.0.2:80): load_balancing_weight 0, want at least 1"},
		{"duplicate address", cla("svc", loc("r", "a", 0, 0, healthy("10.0.0.1:80")), loc("r", "b", 0, 0, healthy("10.0.0.1:80"))),
			"address 10.0.0.1:80 again"},
		{"duplicate locality", cla("svc", loc("r", "a", 0, 0, healthy("10.0.0.1:80")), loc("r", "a", 0, 0, healthy("10.0.0.2:80"))),
			"the same locality as locality 0, at the same priority"},
		{"priority gap", cla("svc", loc("r", "a", 0, 0, healthy("10.0.0.1:80")), loc("r", "a", 2, 0, healthy("10.0.0.2:80"))),
			"no locality at priority 1, below priority 2"},
		{"weight sum", cla("svc", loc("r", "a", 0, 0, ep("10.0.0.1:80", math.MaxUint32, 0), ep("10.0.0.2:80", 1, 0))),
			"the endpoint weights of the locality add up to more than 4294967295"},
		{"locality weight sum", cla("svc", loc("r", "a", 0, math.MaxUint32, healthy("10.0.0.1:80")), loc("r", "b", 0, 1, healthy("10.0.0.2:80"))),
			"the locality weights of priority 0 add up to more than 4294967295"},
		{"bad address", cla("svc", loc("r", "a", 0, 0, healthy("10.0.0.1:80"), healthy("[::1%]:80"))),
			`endpoint 1: balancer: bad address "::1%": not an IP address`},
	}
	cp := newControlPlane(t)
	target := &recorder{}
	updates := make(chan lbxds.Update, 64)
	c := newClient(t, cp, map[string]balancer.Updater{"svc": target}, func(c *lbxds.Config) {
		c.OnUpdate = func(u lbxds.Update) { updates <- u }
	})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			goodSet := []string{fmt.Sprintf("10.1.0.%d:80", i)}
			good := cp.set(t, cla("svc", loc("r", "a", 0, 0, healthy(goodSet[0]))))
			waitVersion(t, c, good)
			require.Equal(t, goodSet, target.last())
			drain(updates)
			sets := target.count()

			from := len(cp.reqs())
			bad := cp.set(t, tt.cla)
			nack, _ := cp.waitRequest(t, from, "NACKing "+bad, func(r *discoveryRequest) bool { return r.GetErrorDetail() != nil })
			assert.Equal(t, good, nack.GetVersionInfo(), "a NACK carries the last version ACKed")
			assert.Contains(t, cp.noncesOf(bad), nack.GetResponseNonce(), "and the nonce of the response it refuses")
			assert.Equal(t, int32(codes.InvalidArgument), nack.GetErrorDetail().GetCode())
			assert.Contains(t, nack.GetErrorDetail().GetMessage(), tt.want)
			assert.Contains(t, nack.GetErrorDetail().GetMessage(), `lbxds: ClusterLoadAssignment rejected: cluster "svc"`)
			assert.Equal(t, []string{"svc"}, nack.GetResourceNames())

			u := <-updates
			assert.False(t, u.Taken)
			assert.Equal(t, bad, u.Version)
			require.ErrorIs(t, u.Err, lbxds.ErrRejected)
			assert.Equal(t, sets, target.count(), "the target was given nothing")
			assert.Equal(t, goodSet, target.last(), "and keeps its set")
			s := c.Status()
			assert.Equal(t, good, s.Version)
			assert.ErrorIs(t, s.NACK, lbxds.ErrRejected)
		})
	}
	waitVersion(t, c, cp.set(t, cla("svc", loc("r", "a", 0, 0, healthy("10.2.0.1:80")))))
	assert.Equal(t, []string{"10.2.0.1:80"}, target.last(), "a good snapshot after the bad ones is taken")
	assert.NoError(t, c.Status().NACK, "and ACKed")
}

// drain empties ch.
func drain[T any](ch chan T) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// go-control-plane's snapshot cache answers a NACK by sending the
// refused version again, at once (go-control-plane #962). The client
// waits Backoff's delays before each NACK of a version it NACKed already,
// so the two do not spin: over a second, with the tests' backoff (50 ms
// doubling by 1.6 to 500 ms), a handful of NACKs, not thousands.
func TestNACKRepeatsBackOff(t *testing.T) {
	cp := newControlPlane(t)
	target := &recorder{}
	c := newClient(t, cp, map[string]balancer.Updater{"svc": target})
	waitVersion(t, c, cp.set(t, cla("svc", loc("r", "a", 0, 0, healthy("10.0.0.1:80")))))

	from := len(cp.reqs())
	cp.set(t, cla("svc", loc("r", "a", 0, 0, healthy("10.0.0.1:80"), healthy("10.0.0.1:80"))))
	_, first := cp.waitRequest(t, from, "a first NACK", func(r *discoveryRequest) bool { return r.GetErrorDetail() != nil })
	time.Sleep(time.Second)
	nacks := 0
	for _, r := range cp.reqs()[first:] {
		if r.GetErrorDetail() != nil {
			nacks++
		}
	}
	// Waits of 50, 80, 128, 205, 328 ms (±20%) fill a second with about
	// 6 NACKs; a client that NACKed at once would send one per round
	// trip on loopback.
	t.Logf("%d NACKs in the second after the first", nacks)
	assert.GreaterOrEqual(t, nacks, 2, "the client keeps answering")
	assert.LessOrEqual(t, nacks, 12)

	// The snapshot fixed: taken at the next NACK's answer, within the
	// longest wait.
	waitVersion(t, c, cp.set(t, cla("svc", loc("r", "a", 0, 0, healthy("10.0.0.2:80")))))
	assert.Equal(t, []string{"10.0.0.2:80"}, target.last())
}

// The control plane stopped: the target keeps serving its set; the
// client reconnects after its backoff and subscribes with the version it
// last ACKed; started again with a new snapshot, the new set is taken.
func TestControlPlaneRestart(t *testing.T) {
	cp := newControlPlane(t)
	h, _ := newStack(t)
	c := newClient(t, cp, map[string]balancer.Updater{"svc": h})
	v1 := cp.set(t, cla("svc", loc("r", "a", 0, 0, healthy("10.0.0.1:80"), healthy("10.0.0.2:80"))))
	waitVersion(t, c, v1)
	require.Equal(t, 1, c.Status().Streams)

	cp.stop()
	waitStatus(t, c, "disconnected", func(s lbxds.Status) bool { return !s.Connected && s.StreamErr != nil })
	time.Sleep(300 * time.Millisecond) // a few failed attempts
	got := picks(t, h, 100)
	assert.Equal(t, map[string]int{"10.0.0.1:80": 50, "10.0.0.2:80": 50}, got, "the last good set serves while the control plane is away")

	from := len(cp.reqs())
	v2 := cp.set(t, cla("svc", loc("r", "a", 0, 0, healthy("10.0.0.3:80"))))
	cp.start(t)
	first, _ := cp.waitRequest(t, from, "opening a new stream", func(r *discoveryRequest) bool { return r.GetNode() != nil })
	assert.Equal(t, v1, first.GetVersionInfo(), "the new stream subscribes with the last version ACKed")
	assert.Empty(t, first.GetResponseNonce(), "and no nonce: nonces are the stream's")
	assert.Equal(t, nodeID, first.GetNode().GetId())
	assert.Equal(t, "lbkit", first.GetNode().GetUserAgentName())
	assert.Equal(t, lbxds.TypeURL, first.GetTypeUrl())
	waitVersion(t, c, v2)
	assert.Equal(t, map[string]int{"10.0.0.3:80": 10}, picks(t, h, 10))
	assert.GreaterOrEqual(t, c.Status().Streams, 2)
}

// A thousand endpoints in ten localities, then a thousand others.
func TestThousandEndpoints(t *testing.T) {
	cp := newControlPlane(t)
	h, l := newStack(t)
	c := newClient(t, cp, map[string]balancer.Updater{"svc": h})
	waitVersion(t, c, cp.set(t, bigCLA("svc", 1000, 10)))
	check := func(prefix string) {
		t.Helper()
		v := l.View()
		require.Len(t, v.Levels, 1)
		assert.Equal(t, 1000, v.Levels[0].Total)
		assert.Equal(t, 1000, v.Levels[0].Healthy)
		require.Len(t, v.Levels[0].Zones, 10)
		for _, z := range v.Levels[0].Zones {
			assert.Equal(t, 100, z.Total, "zone %s", z.Zone)
			assert.InDelta(t, 0.1, z.Share, 1e-9, "zone %s", z.Zone)
		}
		hv := h.View()
		require.Len(t, hv.Backends, 1000)
		for _, b := range hv.Backends {
			require.True(t, strings.HasPrefix(b.ID, prefix), b.ID)
		}
		got := picks(t, h, 10_000)
		assert.Len(t, got, 1000, "every endpoint is picked")
	}
	check("10.")

	next := bigCLA("svc", 1000, 10)
	for _, lle := range next.GetEndpoints() {
		for _, e := range lle.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			sa.Address = "172.16." + strings.Join(strings.Split(sa.GetAddress(), ".")[2:], ".")
		}
	}
	waitVersion(t, c, cp.set(t, next))
	check("172.16.")
}

// Updates arrive on the client's goroutine, one at a time, with no lock
// held: OnUpdate may call the client.
func TestOnUpdate(t *testing.T) {
	cp := newControlPlane(t)
	var mu sync.Mutex
	var seen []lbxds.Update
	var c *lbxds.Client
	ready := make(chan struct{})
	c = newStopped(t, cp, map[string]balancer.Updater{"svc": rr.New()}, func(cfg *lbxds.Config) {
		cfg.OnUpdate = func(u lbxds.Update) {
			<-ready
			_ = c.Status() // no lock is held
			mu.Lock()
			seen = append(seen, u)
			mu.Unlock()
		}
	})
	close(ready)
	v := cp.set(t, cla("svc", loc("r", "a", 0, 0, healthy("10.0.0.1:80"), ep("10.0.0.2:80", 0, corev3.HealthStatus_DRAINING))))
	require.NoError(t, c.Start(t.Context()))
	waitVersion(t, c, v)
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, seen)
	u := seen[0]
	assert.Equal(t, "svc", u.Cluster)
	assert.Equal(t, v, u.Version)
	assert.True(t, u.Taken)
	assert.NoError(t, u.Err)
	assert.Equal(t, []string{"10.0.0.1:80"}, u.Report.Healthy)
	assert.Equal(t, []string{"10.0.0.2:80"}, u.Report.Left, "a draining endpoint never served is left out")
	assert.True(t, slices.IsSorted(u.Report.Healthy))
}

// While the control plane is away, the client tries again after
// Backoff.Delay(n) for the nth attempt in a row without an answer, the
// jitter drawn from Backoff.Rand; the count starts again once a stream
// has had a response.
func TestReconnectBackoff(t *testing.T) {
	cp := newControlPlane(t)
	var mu sync.Mutex
	var ends []time.Time
	var draws atomic.Int64
	bo := discovery.Backoff{Base: 100 * time.Millisecond, Max: 400 * time.Millisecond, Rand: func() float64 { draws.Add(1); return 0.5 }}
	c := newClient(t, cp, map[string]balancer.Updater{"svc": rr.New()}, func(c *lbxds.Config) {
		c.Backoff = bo
		c.OnUpdate = func(u lbxds.Update) {
			if u.Cluster == "" {
				mu.Lock()
				ends = append(ends, time.Now())
				mu.Unlock()
			}
		}
	})
	waitVersion(t, c, cp.set(t, cla("svc", loc("r", "a", 0, 0, healthy("10.0.0.1:80")))))
	cp.stop()
	time.Sleep(1800 * time.Millisecond)
	cp.start(t)
	waitStatus(t, c, "connected again", func(s lbxds.Status) bool { return s.Connected })

	mu.Lock()
	defer mu.Unlock()
	// The stream that had answers ends, then attempts fail, each after
	// the wait before it: 100, 160, 256, then 400 ms (Max), the jitter
	// factor 0.8 + 0.4 × 0.5 = 1.
	require.GreaterOrEqual(t, len(ends), 4, "stream ends: %v", ends)
	var gaps []time.Duration
	for i := 1; i < len(ends); i++ {
		gaps = append(gaps, ends[i].Sub(ends[i-1]).Round(time.Millisecond))
	}
	t.Logf("the gaps between stream ends: %v", gaps)
	for i := 1; i < len(ends); i++ {
		want := bo.Delay(i - 1)
		assert.GreaterOrEqual(t, ends[i].Sub(ends[i-1]), want-5*time.Millisecond, "the wait before attempt %d", i)
	}
	assert.Equal(t, 400*time.Millisecond, bo.Delay(3))
	assert.Positive(t, draws.Load(), "the jitter is drawn")
}

// Config.Backend makes each cluster's backends, told which cluster.
func TestBackendFunc(t *testing.T) {
	cp := newControlPlane(t)
	type labelled struct {
		*balancer.Endpoint
		cluster string
		labels  map[string]string
	}
	p := rr.New()
	c := newClient(t, cp, map[string]balancer.Updater{"svc": p}, func(c *lbxds.Config) {
		c.Backend = func(cluster, id string, e discovery.Endpoint) balancer.Backend {
			return labelled{balancer.NewEndpoint(id, e.Weight).At(e.Locality), cluster, e.Labels}
		}
	})
	e := withMetadata(healthy("[::ffff:10.0.0.1]:80"), "envoy.lb", map[string]any{"version": "v2"})
	waitVersion(t, c, cp.set(t, cla("svc", loc("r", "a", 0, 0, e))))
	b, err := p.Pick(balancer.Request{})
	require.NoError(t, err)
	l, ok := b.(labelled)
	require.True(t, ok, "%T", b)
	assert.Equal(t, "10.0.0.1:80", l.ID(), "the canonical ID")
	assert.Equal(t, "svc", l.cluster)
	assert.Equal(t, map[string]string{"envoy.lb/version": "v2"}, l.labels)
	assert.Equal(t, balancer.Locality{Zone: "r/a"}, l.Locality())
}
