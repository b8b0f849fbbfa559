package lbxds_test

import (
	"errors"
	"fmt"
	"math"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/discovery"
	"github.com/lbkit/lbkit/examples/xds/lbxds"
)

type got struct {
	zone     string
	priority int
	weight   int
	state    discovery.State
}

func summary(a lbxds.Assignment) map[string]got {
	out := map[string]got{}
	for _, e := range a.Endpoints {
		out[e.Addr] = got{e.Locality.Zone, e.Locality.Priority, e.Weight, e.State}
	}
	return out
}

func TestZoneName(t *testing.T) {
	assert.Equal(t, "us-east-1/us-east-1a/rack7", lbxds.ZoneName("us-east-1", "us-east-1a", "rack7"))
	assert.Equal(t, "us-east-1/us-east-1a", lbxds.ZoneName("us-east-1", "us-east-1a", ""))
	assert.Equal(t, "us-east-1", lbxds.ZoneName("us-east-1", "", ""))
	assert.Equal(t, "/a", lbxds.ZoneName("", "a", ""))
	assert.Equal(t, "//s", lbxds.ZoneName("", "", "s"))
	assert.Empty(t, lbxds.ZoneName("", "", ""))
}

// The mapping: zones, priorities, states, canonical addresses.
func TestReadMapping(t *testing.T) {
	a, err := lbxds.Read(cla("c",
		loc("us-east-1", "us-east-1a", 0, 0,
			ep("10.0.0.1:80", 0, corev3.HealthStatus_HEALTHY),
			ep("10.0.0.2:80", 3, corev3.HealthStatus_UNKNOWN),
			ep("10.0.0.3:80", 0, corev3.HealthStatus_UNHEALTHY),
			ep("10.0.0.4:80", 0, corev3.HealthStatus_TIMEOUT),
			ep("10.0.0.5:80", 0, corev3.HealthStatus_DRAINING),
			ep("10.0.0.6:80", 0, corev3.HealthStatus_DEGRADED),
			ep("[::ffff:10.0.0.7]:80", 0, corev3.HealthStatus(42)), // a value this version does not know
		),
		&endpointv3.LocalityLbEndpoints{Priority: 1, LbEndpoints: []*endpointv3.LbEndpoint{healthy("[2001:DB8::1]:80")}}, // no locality
	), nil)
	require.NoError(t, err)
	assert.Equal(t, "c", a.Cluster)
	assert.Zero(t, a.Overprovisioning, "no factor")
	z := "us-east-1/us-east-1a"
	assert.Equal(t, map[string]got{
		"10.0.0.1:80":      {z, 0, 1, discovery.Healthy},
		"10.0.0.2:80":      {z, 0, 3, discovery.Healthy},
		"10.0.0.3:80":      {z, 0, 1, discovery.Unhealthy},
		"10.0.0.4:80":      {z, 0, 1, discovery.Unhealthy},
		"10.0.0.5:80":      {z, 0, 1, discovery.Draining},
		"10.0.0.6:80":      {z, 0, 1, discovery.Unhealthy},
		"10.0.0.7:80":      {z, 0, 1, discovery.Unhealthy},
		"[2001:db8::1]:80": {"", 1, 1, discovery.Healthy},
	}, summary(a))

	custom, err := lbxds.Read(cla("c", loc("r", "z", 0, 0, healthy("10.0.0.1:80"))), func(_, zone, _ string) string { return zone })
	require.NoError(t, err)
	assert.Equal(t, "z", custom.Endpoints[0].Locality.Zone, "Config.ZoneName")

	f, err := lbxds.Read(withFactor(cla("c"), 200), nil)
	require.NoError(t, err)
	assert.Equal(t, 200, f.Overprovisioning)
	assert.Empty(t, f.Endpoints)
}

func TestReadLabels(t *testing.T) {
	e := withMetadata(healthy("10.0.0.1:80"), "envoy.lb", map[string]any{"version": "v2", "canary": true, "shard": 3, "nested": map[string]any{"x": 1}})
	e.GetEndpoint().Hostname = "api-0.internal"
	a, err := lbxds.Read(cla("c", loc("r", "z", 0, 0, e, healthy("10.0.0.2:80"))), nil)
	require.NoError(t, err)
	assert.Equal(t, map[string]string{
		"hostname":         "api-0.internal",
		"envoy.lb/version": "v2",
		"envoy.lb/canary":  "true",
		"envoy.lb/shard":   "3",
	}, a.Endpoints[0].Labels, "strings, numbers and bools; nested values are left out")
	assert.Nil(t, a.Endpoints[1].Labels)
}

// The "envoy.lb" hash_key metadata, when a string, is the endpoint's hash
// key (gRFC A76, Envoy's ring_hash and Maglev); of another type, or in
// another namespace, it is not.
func TestReadHashKey(t *testing.T) {
	a, err := lbxds.Read(cla("c", loc("r", "z", 0, 0,
		withMetadata(healthy("10.0.0.1:80"), "envoy.lb", map[string]any{"hash_key": "cache-1"}),
		withMetadata(healthy("10.0.0.2:80"), "envoy.lb", map[string]any{"hash_key": 7}),
		withMetadata(healthy("10.0.0.3:80"), "other", map[string]any{"hash_key": "x"}),
		healthy("10.0.0.4:80"),
	)), nil)
	require.NoError(t, err)
	var keys []string
	for _, e := range a.Endpoints {
		keys = append(keys, e.HashKey)
	}
	assert.Equal(t, []string{"cache-1", "", "", ""}, keys)
	assert.Equal(t, "cache-1", a.Endpoints[0].Labels["envoy.lb/hash_key"], "and a label, as all metadata")
}

// Weights: an endpoint's own without locality weights (Envoy's default);
// with them, w × L / W per zone, whole numbers over their gcd, so that each
// zone's total is in the ratio of its locality weight.
func TestReadWeights(t *testing.T) {
	weights := func(t *testing.T, c *endpointv3.ClusterLoadAssignment) map[string]int {
		t.Helper()
		a, err := lbxds.Read(c, nil)
		require.NoError(t, err)
		out := map[string]int{}
		for _, e := range a.Endpoints {
			out[e.Addr] = e.Weight
		}
		return out
	}
	t.Run("endpoint weights alone", func(t *testing.T) {
		assert.Equal(t, map[string]int{"10.0.0.1:80": 5, "10.0.0.2:80": 1, "10.0.1.1:80": 2}, weights(t, cla("c",
			loc("r", "a", 0, 0, ep("10.0.0.1:80", 5, 0), ep("10.0.0.2:80", 0, 0)),
			loc("r", "b", 0, 0, ep("10.0.1.1:80", 2, 0)))))
	})
	t.Run("locality weights 3:1", func(t *testing.T) {
		// a: L=3 over two endpoints of 1; b: L=1 over four. 6+6 : 1+1+1+1 = 3:1.
		assert.Equal(t, map[string]int{
			"10.0.0.1:80": 6, "10.0.0.2:80": 6,
			"10.0.1.1:80": 1, "10.0.1.2:80": 1, "10.0.1.3:80": 1, "10.0.1.4:80": 1,
		}, weights(t, cla("c",
			loc("r", "a", 0, 3, healthy("10.0.0.1:80"), healthy("10.0.0.2:80")),
			loc("r", "b", 0, 1, healthy("10.0.1.1:80"), healthy("10.0.1.2:80"), healthy("10.0.1.3:80"), healthy("10.0.1.4:80"))),
		))
	})
	t.Run("locality and endpoint weights", func(t *testing.T) {
		// a: L=1, endpoints 1 and 3 (W=4); b: L=1, one endpoint of 1.
		// Shares within the priority: a 1/2 split 1:3, b 1/2.
		assert.Equal(t, map[string]int{"10.0.0.1:80": 1, "10.0.0.2:80": 3, "10.0.1.1:80": 4}, weights(t, cla("c",
			loc("r", "a", 0, 1, ep("10.0.0.1:80", 1, 0), ep("10.0.0.2:80", 3, 0)),
			loc("r", "b", 0, 1, ep("10.0.1.1:80", 7, 0)))))
	})
	t.Run("equal localities keep the endpoint weights", func(t *testing.T) {
		assert.Equal(t, map[string]int{"10.0.0.1:80": 2, "10.0.0.2:80": 1, "10.0.1.1:80": 2, "10.0.1.2:80": 1}, weights(t, cla("c",
			loc("r", "a", 0, 5, ep("10.0.0.1:80", 2, 0), ep("10.0.0.2:80", 1, 0)),
			loc("r", "b", 0, 5, ep("10.0.1.1:80", 2, 0), ep("10.0.1.2:80", 1, 0)))))
	})
	t.Run("priorities apart", func(t *testing.T) {
		// Each priority is reduced on its own.
		assert.Equal(t, map[string]int{"10.0.0.1:80": 1, "10.0.1.1:80": 1, "10.0.2.1:80": 1}, weights(t, cla("c",
			loc("r", "a", 0, 2, ep("10.0.0.1:80", 4, 0)),
			loc("r", "b", 0, 2, ep("10.0.1.1:80", 4, 0)),
			loc("r", "a", 1, 9, ep("10.0.2.1:80", 7, 0)))))
	})
	t.Run("scaled past MaxWeight", func(t *testing.T) {
		// Endpoint weights of 4e9 and 1e9: scaled, the largest to MaxWeight.
		assert.Equal(t, map[string]int{"10.0.0.1:80": balancer.MaxWeight, "10.0.0.2:80": balancer.MaxWeight / 4}, weights(t, cla("c",
			loc("r", "a", 0, 0, ep("10.0.0.1:80", 4_000_000_000, 0)),
			loc("r", "b", 0, 0, ep("10.0.0.2:80", 1_000_000_000, 0)))))
		// Locality weights whose exact weights overflow: 3 and 2³²−4 over
		// endpoint sums that share no factor.
		w := weights(t, cla("c",
			loc("r", "a", 0, 3, ep("10.0.0.1:80", 65537, 0)),
			loc("r", "b", 0, math.MaxUint32-4, ep("10.0.1.1:80", 65521, 0), ep("10.0.1.2:80", 1, 0))))
		assert.Equal(t, balancer.MaxWeight, w["10.0.1.1:80"])
		assert.Equal(t, 1, w["10.0.0.1:80"], "rounded to at least 1")
		ratio := float64(w["10.0.1.1:80"]+w["10.0.1.2:80"]) / float64(w["10.0.0.1:80"])
		assert.Greater(t, ratio, 1e5, "b's share dwarfs a's, as its weight does")
	})
	t.Run("skipped localities", func(t *testing.T) {
		a, err := lbxds.Read(cla("c",
			loc("r", "a", 0, 2, healthy("10.0.0.1:80")),
			loc("r", "b", 0, 0, healthy("10.0.1.1:80"))), nil)
		require.NoError(t, err)
		assert.Len(t, a.Endpoints, 1)
		assert.Equal(t, []string{`priority 0 zone "r/b"`}, a.Skipped)
	})
}

// Every NACK rule, each with the words its error must carry; a valid
// assignment around each fault, so that the fault alone refuses it.
func TestReadRejects(t *testing.T) {
	good := func() *endpointv3.LocalityLbEndpoints {
		return loc("r", "ok", 0, 0, healthy("10.9.9.9:80"))
	}
	withAddr := func(sa *corev3.Address) *endpointv3.LbEndpoint {
		return &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: sa}}}
	}
	sock := func(host string, port uint32) *corev3.Address {
		return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}
	}
	tests := []struct {
		name string
		cla  *endpointv3.ClusterLoadAssignment
		want []string
	}{
		{"endpoint weight 0", cla("c", good(), loc("r", "a", 0, 0, &endpointv3.LbEndpoint{
			HostIdentifier:      healthy("10.0.0.1:80").HostIdentifier,
			LoadBalancingWeight: wrapperspb.UInt32(0),
		})), []string{`locality 1 (priority 0, zone "r/a"), endpoint 0 (10.0.0.1:80): load_balancing_weight 0`}},
		{"duplicate address", cla("c", good(), loc("r", "a", 0, 0, healthy("10.0.0.1:80")), loc("r", "b", 0, 0, healthy("[::ffff:10.0.0.1]:80"))),
			[]string{"endpoint 0: address 10.0.0.1:80 again (first at locality 1, endpoint 0)"}},
		{"duplicate locality in a priority", cla("c", good(), loc("r", "a", 0, 0, healthy("10.0.0.1:80")), loc("r", "a", 0, 0, healthy("10.0.0.2:80"))),
			[]string{`locality 2 (priority 0, zone "r/a"): the same locality as locality 1, at the same priority`}},
		{"two localities, one zone name", cla("c", good(),
			&endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{Region: "r/a"}, LbEndpoints: []*endpointv3.LbEndpoint{healthy("10.0.0.1:80")}},
			loc("r", "a", 0, 0, healthy("10.0.0.2:80"))),
			[]string{`locality 2 (priority 0, zone "r/a"): another locality than locality 1 but the same zone name`}},
		{"gap in the priorities", cla("c", good(), loc("r", "a", 2, 0, healthy("10.0.0.1:80"))),
			[]string{"no locality at priority 1, below priority 2"}},
		{"priority past MaxPriority", cla("c", good(), loc("r", "a", 128, 0, healthy("10.0.0.1:80"))),
			[]string{"priority 128, want at most 127"}},
		{"locality weights over 2³²−1", cla("c", loc("r", "a", 0, math.MaxUint32, healthy("10.0.0.1:80")), loc("r", "b", 0, 1, healthy("10.0.0.2:80"))),
			[]string{`locality 1 (priority 0, zone "r/b"): the locality weights of priority 0 add up to more than 4294967295`}},
		{"endpoint weights over 2³²−1", cla("c", good(), loc("r", "a", 0, 0, ep("10.0.0.1:80", math.MaxUint32, 0), ep("10.0.0.2:80", 1, 0))),
			[]string{"endpoint 1 (10.0.0.2:80): the endpoint weights of the locality add up to more than 4294967295"}},
		{"address that does not parse", cla("c", good(), loc("r", "a", 0, 0, withAddr(sock("10.0.0.300", 80)))),
			[]string{`locality 1 (priority 0, zone "r/a"), endpoint 0: balancer: bad address "10.0.0.300": not an IP address`}},
		{"a name, not an IP address", cla("c", good(), loc("r", "a", 0, 0, withAddr(sock("api.internal", 80)))), []string{`bad address "api.internal": not an IP address`}},
		{"port 0", cla("c", good(), loc("r", "a", 0, 0, withAddr(sock("10.0.0.1", 0)))), []string{`address "10.0.0.1" port 0, want 1 to 65535`}},
		{"port past 65535", cla("c", good(), loc("r", "a", 0, 0, withAddr(sock("10.0.0.1", 70000)))), []string{"port 70000"}},
		{"no address", cla("c", good(), loc("r", "a", 0, 0, withAddr(nil))), []string{"endpoint 0: no socket address"}},
		{"pipe", cla("c", good(), loc("r", "a", 0, 0, withAddr(&corev3.Address{Address: &corev3.Address_Pipe{Pipe: &corev3.Pipe{Path: "/s"}}}))),
			[]string{"a pipe address, not a socket address"}},
		{"named port", cla("c", good(), loc("r", "a", 0, 0, withAddr(&corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "10.0.0.1", PortSpecifier: &corev3.SocketAddress_NamedPort{NamedPort: "http"}}}}))),
			[]string{`named_port "http"`}},
		{"named endpoint", cla("c", good(), loc("r", "a", 0, 0, &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_EndpointName{EndpointName: "e1"}})),
			[]string{`endpoint_name "e1": named endpoints are not supported`}},
		{"LEDS", cla("c", good(), &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{Zone: "a"}, LbConfig: &endpointv3.LocalityLbEndpoints_LedsClusterLocalityConfig{
			LedsClusterLocalityConfig: &endpointv3.LedsClusterLocalityConfig{LedsCollectionName: "x"}}}),
			[]string{"LEDS is not supported"}},
		{"overprovisioning factor 0", withFactor(cla("c", good()), 0), []string{"policy.overprovisioning_factor is 0"}},
		{"no cluster name", cla("", good()), []string{"no cluster_name"}},
		{"every fault named", cla("c", loc("r", "a", 0, 0, withAddr(sock("nope", 80)), ep("10.0.0.1:80", 0, 0), healthy("10.0.0.1:80")), loc("r", "a", 0, 0), loc("r", "b", 3, 0)),
			[]string{`bad address "nope"`, "address 10.0.0.1:80 again", "the same locality as locality 0", "no locality at priority 1", "no locality at priority 2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := lbxds.Read(tt.cla, nil)
			require.ErrorIs(t, err, lbxds.ErrRejected)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
			assert.Empty(t, a.Endpoints, "nothing of a rejected assignment")
			assert.Contains(t, err.Error(), fmt.Sprintf("cluster %q", tt.cla.GetClusterName()))
		})
	}
	_, err := lbxds.Read(nil, nil)
	assert.True(t, errors.Is(err, lbxds.ErrRejected), "a nil assignment has no cluster name")
}
