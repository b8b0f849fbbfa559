package xdspolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	wrrlocalityv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lbkit/lbkit/examples/grpc/lbpolicy"
)

// TypeURLPrefix is what a TypedStruct's type_url holds before the policy
// name. gRPC takes the name from after the last "/" (gRFC A52), so any
// prefix would do; this is the one A52's examples and Envoy's own
// extensions use.
const TypeURLPrefix = "type.googleapis.com/"

// Policy returns the entry of a Cluster's load_balancing_policy that has
// gRPC clients use lbkit's built-in policy name (lbpolicy.LeastConn,
// lbpolicy.RingHash, ...) with config, the policy's JSON config as in a
// service config: `{"key": "x-user", "boundedLoad": 1.25}`, or "" for {}.
//
// The config is checked as a client will check it, by the policy's own
// ParseConfig on the JSON the client will see (the Struct turned back
// into JSON), so that a control plane finds a bad one before it sends it:
// a client refuses the whole Cluster resource over it (a NACK) and keeps
// the last Cluster it accepted. An unknown name or a bad config is an
// error naming the policy and the fault.
func Policy(name, config string) (*clusterv3.LoadBalancingPolicy_Policy, error) {
	for _, b := range lbpolicy.Builders() {
		if b.Name() == name {
			return PolicyFor(b, config)
		}
	}
	return nil, fmt.Errorf("xdspolicy: %q is not one of lbpolicy's built-in policies (use PolicyFor with a Builder of your own)", name)
}

// PolicyFor is Policy for any lbpolicy Builder: a built-in one from
// lbpolicy.Builders, or one made with lbpolicy.NewBuilder. The clients
// must register a Builder of the same name and config before they dial
// (lbpolicy.Register registers the built-in ones).
func PolicyFor(b *lbpolicy.Builder, config string) (*clusterv3.LoadBalancingPolicy_Policy, error) {
	if b == nil {
		return nil, errors.New("xdspolicy: nil Builder")
	}
	s := &structpb.Struct{}
	if len(bytes.TrimSpace([]byte(config))) > 0 {
		if err := protojson.Unmarshal([]byte(config), s); err != nil {
			return nil, fmt.Errorf("xdspolicy: %s config %s is not a JSON object: %w", b.Name(), config, err)
		}
	}
	// What a client parses: gRPC's converter (xdslbregistry/converter,
	// convertCustomPolicy) marshals the Struct with encoding/json.
	js, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("xdspolicy: %s config: %w", b.Name(), err)
	}
	if _, err := b.ParseConfig(js); err != nil {
		return nil, fmt.Errorf("xdspolicy: a client would refuse this Cluster: %w", err)
	}
	ts, err := anypb.New(&xdstypev3.TypedStruct{TypeUrl: TypeURLPrefix + b.Name(), Value: s})
	if err != nil {
		return nil, fmt.Errorf("xdspolicy: %s: %w", b.Name(), err)
	}
	return entry(b.Name(), ts), nil
}

// RoundRobin returns the entry for Envoy's and gRPC's built-in
// round_robin, to list after an lbkit policy: a client that has not
// registered the lbkit policy skips that entry and takes the next one it
// knows (gRFC A52), and Envoy, which knows no lbkit policy, takes this
// one too.
func RoundRobin() *clusterv3.LoadBalancingPolicy_Policy {
	// RoundRobin has no field set: its encoding is empty.
	rr := &anypb.Any{TypeUrl: TypeURLPrefix + string(proto.MessageName(&roundrobinv3.RoundRobin{}))}
	return entry("envoy.load_balancing_policies.round_robin", rr)
}

// WRRLocality returns the entry for gRPC's wrr_locality around the
// entries given, in order of preference: the policy then runs once per
// locality, and gRPC's weighted_target splits RPCs between localities by
// their weights (at random, in proportion), as for Envoy's and gRPC's
// default. Without it, an lbkit policy runs once per priority over the
// endpoints of every locality in it, each endpoint weighted by its
// locality's share times its share of the locality.
func WRRLocality(entries ...*clusterv3.LoadBalancingPolicy_Policy) (*clusterv3.LoadBalancingPolicy_Policy, error) {
	wl, err := anypb.New(&wrrlocalityv3.WrrLocality{EndpointPickingPolicy: LoadBalancingPolicy(entries...)})
	if err != nil {
		return nil, fmt.Errorf("xdspolicy: wrr_locality: %w", err)
	}
	return entry("envoy.load_balancing_policies.wrr_locality", wl), nil
}

// LoadBalancingPolicy returns a Cluster's load_balancing_policy listing
// the entries in order of preference: a client uses the first it has
// registered. With an lbkit policy first and RoundRobin second, clients
// without lbkit fall back rather than refuse the Cluster.
func LoadBalancingPolicy(entries ...*clusterv3.LoadBalancingPolicy_Policy) *clusterv3.LoadBalancingPolicy {
	return &clusterv3.LoadBalancingPolicy{Policies: entries}
}

func entry(name string, cfg *anypb.Any) *clusterv3.LoadBalancingPolicy_Policy {
	return &clusterv3.LoadBalancingPolicy_Policy{
		TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: name, TypedConfig: cfg},
	}
}
