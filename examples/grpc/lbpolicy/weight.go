package lbpolicy

import (
	"fmt"

	lbk "github.com/lbkit/lbkit/balancer"
	"google.golang.org/grpc/experimental/balancer/weight"
	"google.golang.org/grpc/resolver"
)

// weightKey is the resolver.Endpoint attribute key under which SetWeight
// stores a weight.
type weightKey struct{}

// SetWeight returns a copy of ep that carries weight w, for the weighted
// policies (lbkit_wrr, and weights in lbkit_least_conn and the hash
// policies). Use it in a resolver, or in a manual resolver's state:
//
//	r.InitialState(resolver.State{Endpoints: []resolver.Endpoint{
//		lbpolicy.SetWeight(resolver.Endpoint{Addresses: []resolver.Address{{Addr: "10.0.0.1:50051"}}}, 3),
//		lbpolicy.SetWeight(resolver.Endpoint{Addresses: []resolver.Address{{Addr: "10.0.0.2:50051"}}}, 1),
//	}})
//
// w must be in [1, balancer.MaxWeight]; the policy refuses a resolver
// update that holds any other weight, and keeps the previous endpoints.
func SetWeight(ep resolver.Endpoint, w int) resolver.Endpoint {
	ep.Attributes = ep.Attributes.WithValue(weightKey{}, w)
	return ep
}

// WeightOf returns ep's weight: the one SetWeight stored, else the one
// gRPC's own experimental weight attribute holds (set by xDS, for
// example; 0 there means unset, and a weight above balancer.MaxWeight is
// taken as MaxWeight), else 1.
func WeightOf(ep resolver.Endpoint) int {
	if w, ok := ep.Attributes.Value(weightKey{}).(int); ok {
		return w
	}
	if w := weight.FromEndpoint(ep).Weight; w > 0 {
		return int(min(w, lbk.MaxWeight))
	}
	return 1
}

// endpointID is the lbkit backend ID of ep: its first address, which is
// stable for as long as the resolver lists the endpoint.
func endpointID(ep resolver.Endpoint) string {
	if len(ep.Addresses) == 0 {
		return ""
	}
	return ep.Addresses[0].Addr
}

// checkEndpoints refuses what would make lbkit's Update fail later, when
// gRPC can no longer be told: an endpoint without an address, two
// different endpoints with the same first address, a weight out of range.
// Checking the whole resolver list up front keeps the ready subsets valid.
// An endpoint listed twice is allowed: endpointsharding keeps one.
func checkEndpoints(eps []resolver.Endpoint) error {
	seen := make(map[string]resolver.Endpoint, len(eps))
	for i, ep := range eps {
		id := endpointID(ep)
		if id == "" {
			return fmt.Errorf("lbpolicy: endpoint %d: %w", i, lbk.ErrEmptyID)
		}
		if prev, dup := seen[id]; dup && !sameAddrs(prev, ep) {
			return fmt.Errorf("lbpolicy: endpoint %q: %w", id, lbk.ErrDuplicateID)
		}
		seen[id] = ep
		if w := WeightOf(ep); w < 1 || w > lbk.MaxWeight {
			return fmt.Errorf("lbpolicy: endpoint %q: weight %d: %w", id, w, lbk.ErrBadWeight)
		}
	}
	return nil
}

// sameAddrs reports whether a and b list the same addresses in the same
// order.
func sameAddrs(a, b resolver.Endpoint) bool {
	if len(a.Addresses) != len(b.Addresses) {
		return false
	}
	for i := range a.Addresses {
		if a.Addresses[i].Addr != b.Addresses[i].Addr {
			return false
		}
	}
	return true
}
