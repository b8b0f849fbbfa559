package xdspolicy_test

import (
	"fmt"
	"maps"
	"slices"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/lbkit/lbkit/examples/grpc/lbpolicy"
	"github.com/lbkit/lbkit/examples/grpcxds/xdspolicy"
)

// A control plane built on go-control-plane gives a Cluster lbkit's ring
// hash on the x-user metadata, with round robin after it for clients
// (and Envoys) that do not have lbkit's policies.
func Example() {
	ring, err := xdspolicy.Policy(lbpolicy.RingHash, `{"key": "x-user", "boundedLoad": 1.25}`)
	if err != nil {
		panic(err)
	}
	cluster := &clusterv3.Cluster{
		Name:                 "echo-cluster",
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{
			EdsConfig: &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}},
		},
		LoadBalancingPolicy: xdspolicy.LoadBalancingPolicy(ring, xdspolicy.RoundRobin()),
	}

	for _, p := range cluster.GetLoadBalancingPolicy().GetPolicies() {
		ext := p.GetTypedExtensionConfig()
		fmt.Println(ext.GetName(), ext.GetTypedConfig().GetTypeUrl())
		ts := &xdstypev3.TypedStruct{}
		if ext.GetTypedConfig().UnmarshalTo(ts) == nil {
			fields := ts.GetValue().GetFields()
			for _, k := range slices.Sorted(maps.Keys(fields)) {
				fmt.Printf("  %s: %v\n", k, fields[k].AsInterface())
			}
		}
	}

	// A config the policy refuses is refused here, not NACKed by every
	// client.
	_, err = xdspolicy.Policy(lbpolicy.RingHash, `{"boundedLoad": 1.25}`)
	fmt.Println(err)
	// Output:
	// lbkit_ring_hash type.googleapis.com/xds.type.v3.TypedStruct
	//   boundedLoad: 1.25
	//   key: x-user
	// envoy.load_balancing_policies.round_robin type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin
	// xdspolicy: a client would refuse this Cluster: lbpolicy: lbkit_ring_hash config: balancer: bad option: "key" is required (or "requestHashHeader", by gRFC A76's rules): name the metadata entry that holds the affinity key
}
