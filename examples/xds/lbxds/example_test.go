package lbxds_test

import (
	"context"
	"fmt"
	"net"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/log"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	server "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/xds/lbxds"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/locality"
)

// A go-control-plane server on loopback serves cluster "cart": two
// localities of weight 3 and 1 at priority 0, one at priority 1 with an
// endpoint that is draining. The client feeds health ▶ locality ▶
// leastconn, which an lbhttp proxy would serve from.
func Example() {
	// The control plane: go-control-plane's snapshot cache and ADS server.
	snapshots := cache.NewSnapshotCache(false, cache.IDHash{}, log.LoggerFuncs{})
	gs := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, server.NewServer(context.Background(), snapshots, nil))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()

	endpoint := func(ip string, hs corev3.HealthStatus) *endpointv3.LbEndpoint {
		return &endpointv3.LbEndpoint{HealthStatus: hs, HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
				Address: ip, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080}}}}}}}
	}
	place := func(zone string, priority, weight uint32, eps ...*endpointv3.LbEndpoint) *endpointv3.LocalityLbEndpoints {
		return &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{Region: "us-east-1", Zone: zone},
			Priority: priority, LoadBalancingWeight: wrapperspb.UInt32(weight), LbEndpoints: eps}
	}
	cart := &endpointv3.ClusterLoadAssignment{ClusterName: "cart", Endpoints: []*endpointv3.LocalityLbEndpoints{
		place("us-east-1a", 0, 3, endpoint("10.0.0.1", corev3.HealthStatus_HEALTHY), endpoint("10.0.0.2", corev3.HealthStatus_HEALTHY)),
		place("us-east-1b", 0, 1, endpoint("10.0.1.1", corev3.HealthStatus_HEALTHY)),
		place("us-west-2a", 1, 1, endpoint("10.9.0.1", corev3.HealthStatus_UNKNOWN), endpoint("10.9.0.2", corev3.HealthStatus_DRAINING)),
	}}
	snap, err := cache.NewSnapshot("v1", map[resource.Type][]types.Resource{resource.EndpointType: {cart}})
	if err != nil {
		panic(err)
	}
	if err := snapshots.SetSnapshot(context.Background(), "edge-proxy-1", snap); err != nil {
		panic(err)
	}

	// The client, feeding the stack.
	l, err := locality.New(func() balancer.Balancer { return leastconn.New() }, locality.Config{})
	if err != nil {
		panic(err)
	}
	h, err := health.New(l, health.Config{})
	if err != nil {
		panic(err)
	}
	defer h.Close()
	c, err := lbxds.New(lis.Addr().String(), lbxds.Config{
		Node:        &corev3.Node{Id: "edge-proxy-1"},
		Clusters:    map[string]balancer.Updater{"cart": h},
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
	})
	if err != nil {
		panic(err)
	}
	if err := c.Start(context.Background()); err != nil {
		panic(err)
	}
	defer c.Close()

	fmt.Println("version", c.Status().Version)
	for _, lv := range l.View().Levels {
		for _, z := range lv.Zones {
			fmt.Printf("priority %d, zone %s: %d endpoint(s), %.0f%% of the level\n", lv.Priority, z.Zone, z.Total, 100*z.Share)
		}
	}
	// The draining endpoint was never served: it is left out.
	fmt.Println(len(h.View().Backends), "backends")
	// Output:
	// version v1
	// priority 0, zone us-east-1/us-east-1a: 2 endpoint(s), 75% of the level
	// priority 0, zone us-east-1/us-east-1b: 1 endpoint(s), 25% of the level
	// priority 1, zone us-east-1/us-west-2a: 1 endpoint(s), 100% of the level
	// 4 backends
}
