package xdspolicy_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/log"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	server "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	grpcbalancer "google.golang.org/grpc/balancer"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/grpc/lbpolicy"
	"github.com/lbkit/lbkit/examples/grpcxds/xdspolicy"
	"github.com/lbkit/lbkit/rr"
)

// The xDS names of the test service: the channel dials xds:///echo, whose
// Listener names the route, whose only route goes to the cluster, whose
// endpoints are the ClusterLoadAssignment of the same name.
const (
	nodeID       = "lbkit-grpcxds-test"
	service      = "echo"
	routeName    = "echo-route"
	clusterName  = "echo-cluster"
	target       = "xds:///" + service
	recorderName = "lbkit_test_recorder"
)

// wait bounds every wait for the control plane, the xDS client and the
// channel: far more than a healthy run takes (milliseconds on loopback),
// so that a loaded machine does not fail a test, and finite, so that a
// broken one does.
const wait = 30 * time.Second

func TestMain(m *testing.M) {
	// What a client does once, before it dials: the lbkit policies, and a
	// test one that records what its lbkit picker is given.
	lbpolicy.Register()
	b, err := lbpolicy.NewBuilder(recorderName, func() lbk.Balancer {
		r := &recorder{inner: rr.New()}
		select {
		case recorders <- r:
		default:
		}
		return r
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	recorderBuilder = b
	grpcbalancer.Register(b)
	os.Exit(m.Run())
}

// recorderBuilder is the recorder's policy, registered as recorderName.
var recorderBuilder *lbpolicy.Builder

// policyOf is xdspolicy.Policy, and PolicyFor for the recorder.
func policyOf(name, config string) (*clusterv3.LoadBalancingPolicy_Policy, error) {
	if name == recorderName {
		return xdspolicy.PolicyFor(recorderBuilder, config)
	}
	return xdspolicy.Policy(name, config)
}

// recorders receives every recorder built, for the test that asked for
// it (the tests using one do not run in parallel).
var recorders = make(chan *recorder, 16)

// recorder is an lbkit picker (rr inside) that counts its Picks and
// Dones and keeps the last set it was given.
type recorder struct {
	inner *rr.Picker
	picks atomic.Int64
	dones atomic.Int64

	mu  sync.Mutex
	set map[string]int // ID → weight
}

func (r *recorder) Pick(req lbk.Request) (lbk.Backend, error) {
	r.picks.Add(1)
	return r.inner.Pick(req)
}

func (r *recorder) Update(bs []lbk.Backend) error {
	set := make(map[string]int, len(bs))
	for _, b := range bs {
		set[b.ID()] = lbk.WeightOf(b)
	}
	r.mu.Lock()
	r.set = set
	r.mu.Unlock()
	return r.inner.Update(bs)
}

func (r *recorder) Done(lbk.Backend, lbk.Result) { r.dones.Add(1) }

func (r *recorder) lastSet() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.set
}

// controlPlane is go-control-plane's own server (snapshot cache, ADS) on
// a loopback port, recording every request it receives.
type controlPlane struct {
	cache cache.SnapshotCache
	addr  string

	mu        sync.Mutex
	requests  []*discoveryv3.DiscoveryRequest
	responses []*discoveryv3.DiscoveryResponse
	version   int
}

func newControlPlane(t testing.TB) *controlPlane {
	t.Helper()
	cp := &controlPlane{}
	ctx, cancel := context.WithCancel(context.Background())
	cp.cache = cache.NewSnapshotCache(false, cache.IDHash{}, log.LoggerFuncs{})
	srv := server.NewServer(ctx, cp.cache, server.CallbackFuncs{
		StreamRequestFunc: func(_ int64, req *discoveryv3.DiscoveryRequest) error {
			cp.mu.Lock()
			cp.requests = append(cp.requests, req)
			cp.mu.Unlock()
			if req.GetErrorDetail() != nil {
				// go-control-plane's snapshot cache answers a NACK with
				// the refused version again at once (go-control-plane
				// #962), and gRPC NACKs it again: pace the exchange
				// while a test holds a bad snapshot.
				time.Sleep(50 * time.Millisecond)
			}
			return nil
		},
		StreamResponseFunc: func(_ context.Context, _ int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
			cp.mu.Lock()
			cp.responses = append(cp.responses, resp)
			cp.mu.Unlock()
		},
	})
	gs := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	cp.addr = lis.Addr().String()
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		cancel()
	})
	return cp
}

// bootstrap is the xDS bootstrap config of a client of cp: one server,
// insecure, ADS over xDS v3.
func (cp *controlPlane) bootstrap() []byte {
	return fmt.Appendf(nil, `{
		"xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
		"node": {"id": %q}
	}`, cp.addr, nodeID)
}

// set makes the snapshot for the test node hold rs, under a new version,
// which it returns.
func (cp *controlPlane) set(t testing.TB, rs map[resource.Type][]types.Resource) string {
	t.Helper()
	cp.mu.Lock()
	cp.version++
	v := "v" + strconv.Itoa(cp.version)
	cp.mu.Unlock()
	snap, err := cache.NewSnapshot(v, rs)
	require.NoError(t, err)
	require.NoError(t, cp.cache.SetSnapshot(context.Background(), nodeID, snap))
	return v
}

// waitNACK waits for the client to NACK the Cluster response of version
// v, and returns the NACK.
func (cp *controlPlane) waitNACK(t testing.TB, v string) *discoveryv3.DiscoveryRequest {
	t.Helper()
	var nack *discoveryv3.DiscoveryRequest
	require.Eventually(t, func() bool {
		cp.mu.Lock()
		defer cp.mu.Unlock()
		nonces := map[string]bool{}
		for _, r := range cp.responses {
			if r.GetTypeUrl() == resource.ClusterType && r.GetVersionInfo() == v {
				nonces[r.GetNonce()] = true
			}
		}
		for _, r := range cp.requests {
			if r.GetTypeUrl() == resource.ClusterType && r.GetErrorDetail() != nil && nonces[r.GetResponseNonce()] {
				nack = r
				return true
			}
		}
		return false
	}, wait, 10*time.Millisecond, "no NACK of Cluster version %s", v)
	return nack
}

// waitACK waits for the client to ACK the Cluster response of version v.
func (cp *controlPlane) waitACK(t testing.TB, v string) {
	t.Helper()
	require.Eventually(t, func() bool {
		cp.mu.Lock()
		defer cp.mu.Unlock()
		for _, r := range cp.requests {
			if r.GetTypeUrl() == resource.ClusterType && r.GetErrorDetail() == nil && r.GetVersionInfo() == v {
				return true
			}
		}
		return false
	}, wait, 10*time.Millisecond, "no ACK of Cluster version %s", v)
}

// endpoint is one EDS endpoint: a backend's address and its weight (0
// for unset).
type endpoint struct {
	addr   string
	weight uint32
}

// place is one EDS locality; a weight of 0 leaves it unset, and gRPC
// then ignores the locality.
type place struct {
	zone      string
	priority  uint32
	weight    uint32
	endpoints []endpoint
}

// resources returns the four resources of the test service: a Listener
// (an ApiListener whose HttpConnectionManager takes its routes from RDS),
// the RouteConfiguration, the Cluster (EDS, over ADS) with policy as its
// load_balancing_policy, and the ClusterLoadAssignment.
func resources(t testing.TB, policy *clusterv3.LoadBalancingPolicy, places ...place) map[resource.Type][]types.Resource {
	t.Helper()
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}},
			RouteConfigName: routeName,
		}},
		HttpFilters: []*hcmv3.HttpFilter{{Name: "router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(t, &routerv3.Router{})}}},
	})
	require.NoError(t, err)
	lis := &listenerv3.Listener{Name: service, ApiListener: &listenerv3.ApiListener{ApiListener: hcm}}
	route := &routev3.RouteConfiguration{
		Name: routeName,
		VirtualHosts: []*routev3.VirtualHost{{
			Domains: []string{service},
			Routes: []*routev3.Route{{
				Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: clusterName}}},
			}},
		}},
	}
	cl := &clusterv3.Cluster{
		Name:                 clusterName,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{
			EdsConfig: &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}},
		},
		LoadBalancingPolicy: policy,
	}
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: clusterName}
	for _, p := range places {
		loc := &endpointv3.LocalityLbEndpoints{
			Locality: &corev3.Locality{Region: "test", Zone: p.zone},
			Priority: p.priority,
		}
		if p.weight > 0 {
			loc.LoadBalancingWeight = wrapperspb.UInt32(p.weight)
		}
		for _, e := range p.endpoints {
			host, port, err := net.SplitHostPort(e.addr)
			require.NoError(t, err)
			pn, err := strconv.ParseUint(port, 10, 32)
			require.NoError(t, err)
			lep := &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(pn)}}}}}}}
			if e.weight > 0 {
				lep.LoadBalancingWeight = wrapperspb.UInt32(e.weight)
			}
			loc.LbEndpoints = append(loc.LbEndpoints, lep)
		}
		cla.Endpoints = append(cla.Endpoints, loc)
	}
	return map[resource.Type][]types.Resource{
		resource.ListenerType: {lis},
		resource.RouteType:    {route},
		resource.ClusterType:  {cl},
		resource.EndpointType: {cla},
	}
}

// oneZone puts every backend, each of weight 0 (unset), in one locality
// of weight 1 at priority 0. (gRPC ignores a locality without a weight.)
func oneZone(bs []*backend) place {
	p := place{zone: "a", weight: 1}
	for _, b := range bs {
		p.endpoints = append(p.endpoints, endpoint{addr: b.addr})
	}
	return p
}

func mustAny(t testing.TB, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	require.NoError(t, err)
	return a
}

// mustPolicy is xdspolicy.Policy, which must succeed, in a list of one.
func mustPolicy(t testing.TB, name, config string) *clusterv3.LoadBalancingPolicy {
	t.Helper()
	p, err := policyOf(name, config)
	require.NoError(t, err)
	return &clusterv3.LoadBalancingPolicy{Policies: []*clusterv3.LoadBalancingPolicy_Policy{p}}
}

// backend is a gRPC server on loopback whose UnaryCall answers with its
// address (as SimpleResponse.Hostname) and counts the calls it served.
// With hold set, a call waits until release is closed (or its context
// ends) before it answers.
type backend struct {
	testgrpc.UnimplementedTestServiceServer
	addr    string
	served  atomic.Int64
	held    atomic.Int64 // calls waiting on release now
	hold    atomic.Bool
	release chan struct{}
	gs      *grpc.Server
}

func (b *backend) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	b.served.Add(1)
	if b.hold.Load() {
		b.held.Add(1)
		defer b.held.Add(-1)
		select {
		case <-b.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &testgrpc.SimpleResponse{Hostname: b.addr}, nil
}

// startBackends starts n backends on 127.0.0.1, stopped when the test
// ends.
func startBackends(t testing.TB, n int, opts ...grpc.ServerOption) []*backend {
	t.Helper()
	bs := make([]*backend, n)
	for i := range bs {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		b := &backend{addr: lis.Addr().String(), release: make(chan struct{}), gs: grpc.NewServer(opts...)}
		testgrpc.RegisterTestServiceServer(b.gs, b)
		go func() { _ = b.gs.Serve(lis) }()
		t.Cleanup(b.gs.Stop)
		bs[i] = b
	}
	return bs
}

// testClient is the client of the backends' service.
type testClient = testgrpc.TestServiceClient

// dial returns a client of target through gRPC's own xds resolver, with
// the bootstrap config of cp given in process, closed when the test ends.
func dial(t testing.TB, cp *controlPlane, opts ...grpc.DialOption) testgrpc.TestServiceClient {
	t.Helper()
	rb, err := xds.NewXDSResolverWithConfigForTesting(cp.bootstrap())
	require.NoError(t, err)
	cc, err := grpc.NewClient(target, append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithResolvers(rb),
	}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return testgrpc.NewTestServiceClient(cc)
}

// call sends one UnaryCall with x-user set to user (if not empty), and
// returns the address of the backend that answered.
func call(ctx context.Context, c testgrpc.TestServiceClient, user string) (string, error) {
	if user != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-user", user)
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	resp, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
	if err != nil {
		return "", err
	}
	return resp.GetHostname(), nil
}

// mustCall is call, which must succeed: an error fails the test (with
// t.Errorf, so that it may run in the condition of require.Eventually,
// in a goroutine of its own) and returns "".
func mustCall(t testing.TB, c testgrpc.TestServiceClient, user string) string {
	t.Helper()
	addr, err := call(context.Background(), c, user)
	assert.NoError(t, err, "RPC for user %q", user)
	return addr
}

// addrs returns the backends' addresses.
func addrs(bs []*backend) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.addr
	}
	slices.Sort(out)
	return out
}
