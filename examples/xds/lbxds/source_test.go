package lbxds_test

import (
	"context"
	"errors"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/discovery"
	"github.com/lbkit/lbkit/examples/xds/lbxds"
	"github.com/lbkit/lbkit/rr"
)

// The conformance check for discovery sources, against go-control-plane's
// server: Set pushes a snapshot, Fail stops the server (its listener and
// streams close), Heal serves again on the same address.
func TestRunSource(t *testing.T) {
	for _, svc := range []lbxds.Service{lbxds.ADS, lbxds.EDS} {
		t.Run(svc.String(), func(t *testing.T) {
			cp := newControlPlane(t)
			balancertest.RunSource(t, balancertest.SourceHarness{
				New: func(t testing.TB, target balancer.Updater) discovery.Source {
					return newStopped(t, cp, map[string]balancer.Updater{"svc": target}, func(c *lbxds.Config) { c.Service = svc })
				},
				Set: func(t testing.TB, eps []discovery.Endpoint) {
					l := loc("r", "z", 0, 0)
					for _, e := range eps {
						l.LbEndpoints = append(l.LbEndpoints, healthy(e.Addr))
					}
					cp.set(t, cla("svc", l))
				},
				Fail:   func(testing.TB) { cp.stop() },
				Heal:   func(t testing.TB) { cp.start(t) },
				Settle: 8 * time.Second,
			})
		})
	}
}

func TestNew(t *testing.T) {
	target := rr.New()
	plain := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	node := &corev3.Node{Id: "n"}
	tests := []struct {
		name string
		cfg  lbxds.Config
		want string
	}{
		{"no node", lbxds.Config{Clusters: map[string]balancer.Updater{"c": target}, DialOptions: plain}, "lbxds: Config.Node with an Id is required"},
		{"no node id", lbxds.Config{Node: &corev3.Node{}, Clusters: map[string]balancer.Updater{"c": target}, DialOptions: plain}, "lbxds: Config.Node with an Id is required"},
		{"no cluster", lbxds.Config{Node: node, DialOptions: plain}, "lbxds: Config.Clusters names no cluster"},
		{"nil target", lbxds.Config{Node: node, Clusters: map[string]balancer.Updater{"c": nil}, DialOptions: plain}, `lbxds: Config.Clusters: cluster "c" has a nil target`},
		{"empty name", lbxds.Config{Node: node, Clusters: map[string]balancer.Updater{"": target}, DialOptions: plain}, "lbxds: Config.Clusters: a cluster with no name"},
		{"one target twice", lbxds.Config{Node: node, Clusters: map[string]balancer.Updater{"a": target, "b": target}, DialOptions: plain}, `lbxds: Config.Clusters: clusters "a" and "b" have one target`},
		{"bad service", lbxds.Config{Node: node, Clusters: map[string]balancer.Updater{"c": target}, DialOptions: plain, Service: 7}, "lbxds: Config.Service is Service(7), want ADS or EDS"},
		{"no credentials", lbxds.Config{Node: node, Clusters: map[string]balancer.Updater{"c": target}}, "lbxds: grpc: no transport security set"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := lbxds.New("127.0.0.1:1", tt.cfg)
			require.Error(t, err)
			assert.Nil(t, c)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// Start waits for every cluster's first set, and says which are missing
// when InitialTimeout passes; the client keeps trying, and a cluster that
// comes later is taken.
func TestStartNotReady(t *testing.T) {
	cp := newControlPlane(t)
	cp.set(t, cla("a", loc("r", "z", 0, 0, healthy("10.0.0.1:80"))))
	a, b := rr.New(), rr.New()
	c := newStopped(t, cp, map[string]balancer.Updater{"a": a, "b": b}, func(c *lbxds.Config) { c.InitialTimeout = 300 * time.Millisecond })
	err := c.Start(context.Background())
	require.ErrorIs(t, err, lbxds.ErrNotReady)
	assert.Contains(t, err.Error(), `after 300ms for "b"`)
	assert.NotContains(t, err.Error(), `"a"`)
	assert.ErrorIs(t, c.Start(context.Background()), balancer.ErrStarted)

	cp.set(t, cla("a", loc("r", "z", 0, 0, healthy("10.0.0.1:80"))), cla("b", loc("r", "z", 0, 0, healthy("10.0.0.2:80"))))
	require.Eventually(t, func() bool {
		p, err := b.Pick(balancer.Request{})
		return err == nil && p.ID() == "10.0.0.2:80"
	}, wait, 5*time.Millisecond)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	d := newStopped(t, cp, map[string]balancer.Updater{"none": rr.New()})
	assert.ErrorIs(t, d.Start(ctx), context.Canceled, "Start's context ended before the first set")
	require.NoError(t, d.Close())
	assert.ErrorIs(t, d.Start(context.Background()), balancer.ErrClosed)

	never := newStopped(t, cp, map[string]balancer.Updater{"a": rr.New()})
	require.NoError(t, never.Close(), "Close before Start")
	assert.True(t, errors.Is(never.Start(context.Background()), balancer.ErrClosed))
}

// The same go-control-plane server over plain EDS takes two clusters at
// once; each has its own target.
func TestTwoClusters(t *testing.T) {
	cp := newControlPlane(t)
	v := cp.set(t,
		cla("a", loc("r", "z", 0, 0, healthy("10.0.0.1:80"))),
		cla("b", loc("r", "z", 0, 0, healthy("10.0.0.2:80"), healthy("10.0.0.3:80"))))
	a, b := &recorder{}, &recorder{}
	c := newClient(t, cp, map[string]balancer.Updater{"a": a, "b": b}, func(c *lbxds.Config) { c.Service = lbxds.EDS })
	waitVersion(t, c, v)
	assert.Equal(t, []string{"10.0.0.1:80"}, a.last())
	assert.Equal(t, []string{"10.0.0.2:80", "10.0.0.3:80"}, b.last())

	// One good, one bad: the good one is taken, the response NACKed.
	from := len(cp.reqs())
	bad := cp.set(t,
		cla("a", loc("r", "z", 0, 0, healthy("10.0.0.4:80"))),
		cla("b", loc("r", "z", 0, 0, ep("10.0.0.2:80", 0, 0), healthy("10.0.0.2:80"))))
	nack, _ := cp.waitRequest(t, from, "NACKing "+bad, func(r *discoveryRequest) bool { return r.GetErrorDetail() != nil })
	assert.Equal(t, v, nack.GetVersionInfo(), "a NACK carries the last version ACKed")
	assert.Contains(t, nack.GetErrorDetail().GetMessage(), `cluster "b"`)
	assert.NotContains(t, nack.GetErrorDetail().GetMessage(), `cluster "a"`)
	assert.Equal(t, []string{"10.0.0.4:80"}, a.last(), "the good cluster beside the bad one is taken")
	assert.Equal(t, []string{"10.0.0.2:80", "10.0.0.3:80"}, b.last(), "the bad one keeps its set")
}
