package lbxds_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	edsv3 "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/log"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	server "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/discovery"
	"github.com/lbkit/lbkit/examples/xds/lbxds"
)

// nodeID is the node every test client says it is.
const nodeID = "lbkit-test"

// wait bounds every wait for the control plane and the client: far more
// than a healthy run takes (milliseconds on loopback), so that a loaded
// machine does not fail a test, and finite, so that a broken one does.
const wait = 20 * time.Second

// controlPlane is go-control-plane's own server (snapshot cache, ADS and
// EDS) on a loopback port, which it keeps across stop and start.
type controlPlane struct {
	cache cache.SnapshotCache
	xds   server.Server
	addr  string
	ctx   context.Context
	stopX context.CancelFunc

	mu        sync.Mutex
	gs        *grpc.Server
	requests  []*discoveryv3.DiscoveryRequest  // every request received, in order
	responses []*discoveryv3.DiscoveryResponse // every response sent, in order
	version   int
	changed   chan struct{}
}

func newControlPlane(t testing.TB) *controlPlane {
	t.Helper()
	cp := &controlPlane{changed: make(chan struct{}, 1)}
	cp.ctx, cp.stopX = context.WithCancel(context.Background())
	cp.cache = cache.NewSnapshotCache(false, cache.IDHash{}, log.LoggerFuncs{})
	cp.xds = server.NewServer(cp.ctx, cp.cache, server.CallbackFuncs{
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			cp.mu.Lock()
			cp.requests = append(cp.requests, req)
			cp.mu.Unlock()
			select {
			case cp.changed <- struct{}{}:
			default:
			}
			return nil
		},
		StreamResponseFunc: func(_ context.Context, _ int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
			cp.mu.Lock()
			cp.responses = append(cp.responses, resp)
			cp.mu.Unlock()
		},
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cp.addr = lis.Addr().String()
	cp.serve(lis)
	t.Cleanup(func() {
		cp.stop()
		cp.stopX()
	})
	return cp
}

func (cp *controlPlane) serve(lis net.Listener) {
	gs := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, cp.xds)
	edsv3.RegisterEndpointDiscoveryServiceServer(gs, cp.xds)
	cp.mu.Lock()
	cp.gs = gs
	cp.mu.Unlock()
	go func() { _ = gs.Serve(lis) }()
}

// stop stops the server: its listener and every stream close.
func (cp *controlPlane) stop() {
	cp.mu.Lock()
	gs := cp.gs
	cp.gs = nil
	cp.mu.Unlock()
	if gs != nil {
		gs.Stop()
	}
}

// start serves again on the same address.
func (cp *controlPlane) start(t testing.TB) {
	t.Helper()
	var lis net.Listener
	var err error
	for range 100 { // the port may linger a moment after Stop
		if lis, err = net.Listen("tcp", cp.addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, err, "listen again on %s", cp.addr)
	cp.serve(lis)
}

// set makes the snapshot for the test node hold clas, under a new
// version, which it returns.
func (cp *controlPlane) set(t testing.TB, clas ...*endpointv3.ClusterLoadAssignment) string {
	t.Helper()
	cp.mu.Lock()
	cp.version++
	v := "v" + strconv.Itoa(cp.version)
	cp.mu.Unlock()
	rs := make([]types.Resource, len(clas))
	for i, c := range clas {
		rs[i] = c
	}
	snap, err := cache.NewSnapshot(v, map[resource.Type][]types.Resource{resource.EndpointType: rs})
	require.NoError(t, err)
	require.NoError(t, cp.cache.SetSnapshot(context.Background(), nodeID, snap))
	return v
}

// reqs returns the requests received so far.
func (cp *controlPlane) reqs() []*discoveryv3.DiscoveryRequest {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return slices.Clone(cp.requests)
}

// noncesOf returns the nonces of the responses sent with version v.
func (cp *controlPlane) noncesOf(v string) []string {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	var out []string
	for _, r := range cp.responses {
		if r.GetVersionInfo() == v {
			out = append(out, r.GetNonce())
		}
	}
	return out
}

// waitRequest waits for a request after the first from that ok accepts,
// and returns it and its position.
func (cp *controlPlane) waitRequest(t testing.TB, from int, what string, ok func(*discoveryv3.DiscoveryRequest) bool) (*discoveryv3.DiscoveryRequest, int) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		rs := cp.reqs()
		for i := from; i < len(rs); i++ {
			if ok(rs[i]) {
				return rs[i], i
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no request %s within %v; the control plane saw %d requests", what, wait, len(rs))
		}
		select {
		case <-cp.changed:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// newClient returns a started client of cp for the clusters given, with
// short backoffs for the tests. Start does not wait for the first sets:
// the tests wait for the versions they push.
func newClient(t testing.TB, cp *controlPlane, clusters map[string]balancer.Updater, opts ...func(*lbxds.Config)) *lbxds.Client {
	t.Helper()
	c := newStopped(t, cp, clusters, append([]func(*lbxds.Config){func(c *lbxds.Config) { c.InitialTimeout = -1 }}, opts...)...)
	require.NoError(t, c.Start(context.Background()))
	return c
}

func newStopped(t testing.TB, cp *controlPlane, clusters map[string]balancer.Updater, opts ...func(*lbxds.Config)) *lbxds.Client {
	t.Helper()
	cfg := lbxds.Config{
		Node:           &corev3.Node{Id: nodeID},
		Clusters:       clusters,
		DialOptions:    dialOptions(),
		Backoff:        discovery.Backoff{Base: 50 * time.Millisecond, Max: 500 * time.Millisecond},
		InitialTimeout: wait,
	}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := lbxds.New(cp.addr, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// dialOptions: plaintext on loopback, and gRPC's own reconnection of the
// connection as quick as the tests' stream backoff.
func dialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
}

// waitStatus waits for the client's status to satisfy ok.
func waitStatus(t testing.TB, c *lbxds.Client, what string, ok func(lbxds.Status) bool) lbxds.Status {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		s := c.Status()
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client's status is %+v after %v; want %s", s, wait, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitVersion waits for the client to ACK version v.
func waitVersion(t testing.TB, c *lbxds.Client, v string) {
	t.Helper()
	waitStatus(t, c, "version "+v+" ACKed", func(s lbxds.Status) bool { return s.Version == v })
}

// Building ClusterLoadAssignments.

func cla(name string, locs ...*endpointv3.LocalityLbEndpoints) *endpointv3.ClusterLoadAssignment {
	return &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: locs}
}

// withFactor sets the assignment's overprovisioning factor.
func withFactor(c *endpointv3.ClusterLoadAssignment, f uint32) *endpointv3.ClusterLoadAssignment {
	c.Policy = &endpointv3.ClusterLoadAssignment_Policy{OverprovisioningFactor: wrapperspb.UInt32(f)}
	return c
}

// loc is a locality; weight 0 leaves its load_balancing_weight unset.
func loc(region, zone string, priority, weight uint32, eps ...*endpointv3.LbEndpoint) *endpointv3.LocalityLbEndpoints {
	l := &endpointv3.LocalityLbEndpoints{
		Locality:    &corev3.Locality{Region: region, Zone: zone},
		LbEndpoints: eps,
		Priority:    priority,
	}
	if weight > 0 {
		l.LoadBalancingWeight = wrapperspb.UInt32(weight)
	}
	return l
}

// ep is an endpoint at host:port; weight 0 leaves its weight unset.
func ep(hostport string, weight uint32, hs corev3.HealthStatus) *endpointv3.LbEndpoint {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		panic(err)
	}
	p, err := strconv.ParseUint(port, 10, 32)
	if err != nil {
		panic(err)
	}
	e := &endpointv3.LbEndpoint{
		HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address:       host,
				PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)},
			}}},
		}},
		HealthStatus: hs,
	}
	if weight > 0 {
		e.LoadBalancingWeight = wrapperspb.UInt32(weight)
	}
	return e
}

// healthy is ep with HEALTHY and no weight.
func healthy(hostport string) *endpointv3.LbEndpoint {
	return ep(hostport, 0, corev3.HealthStatus_HEALTHY)
}

// withMetadata adds filter_metadata to e.
func withMetadata(e *endpointv3.LbEndpoint, ns string, fields map[string]any) *endpointv3.LbEndpoint {
	st, err := structpb.NewStruct(fields)
	if err != nil {
		panic(err)
	}
	e.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{ns: st}}
	return e
}

// bigCLA is n endpoints in zones localities of one priority, each
// locality of weight 1, the endpoints 10.z.i/256.i%256:8080.
func bigCLA(name string, n, zones int) *endpointv3.ClusterLoadAssignment {
	c := cla(name)
	for z := range zones {
		l := loc("r", fmt.Sprintf("z%d", z), 0, 1)
		for i := z; i < n; i += zones {
			l.LbEndpoints = append(l.LbEndpoints, healthy(fmt.Sprintf("10.%d.%d.%d:8080", z, i/256, i%256)))
		}
		c.Endpoints = append(c.Endpoints, l)
	}
	return c
}

type discoveryRequest = discoveryv3.DiscoveryRequest

// recorder is a target that keeps every set it is given, as sorted IDs.
type recorder struct {
	mu   sync.Mutex
	sets [][]string
}

func (r *recorder) Update(bs []balancer.Backend) error {
	set, err := balancer.NewSet(bs)
	if err != nil {
		return err
	}
	ids := slices.Sorted(slices.Values(set.IDs))
	r.mu.Lock()
	r.sets = append(r.sets, ids)
	r.mu.Unlock()
	return nil
}

// last returns the last set, nil before any.
func (r *recorder) last() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sets) == 0 {
		return nil
	}
	return r.sets[len(r.sets)-1]
}

// count returns how many sets the recorder was given.
func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sets)
}
