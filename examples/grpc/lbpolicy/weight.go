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
// gRPC can no longer be told, or make a backend's ID or weight change at
// random: an endpoint without an address, a weight out of range, and an
// address in two endpoints that are not the same one listed twice (the
// same addresses in the same order, with the same weight).
// endpointsharding keeps one child per set of addresses, whatever their
// order, and which of two listings it keeps changes from one resolver
// update to the next; lbkit's ID is the first address. An endpoint listed
// twice exactly is allowed: endpointsharding keeps one.
func checkEndpoints(eps []resolver.Endpoint) error {
	owner := make(map[string]int, len(eps)) // address → first endpoint holding it
	for i, ep := range eps {
		id := endpointID(ep)
		if id == "" {
			return fmt.Errorf("lbpolicy: endpoint %d: %w", i, lbk.ErrEmptyID)
		}
		w := WeightOf(ep)
		if w < 1 || w > lbk.MaxWeight {
			return fmt.Errorf("lbpolicy: endpoint %q: weight %d: %w", id, w, lbk.ErrBadWeight)
		}
		for _, a := range ep.Addresses {
			j, dup := owner[a.Addr]
			if !dup {
				owner[a.Addr] = i
				continue
			}
			if j == i {
				return fmt.Errorf("lbpolicy: endpoint %q: address %q listed twice: %w", id, a.Addr, lbk.ErrDuplicateID)
			}
			if !sameAddrs(eps[j], ep) || WeightOf(eps[j]) != w {
				return fmt.Errorf("lbpolicy: endpoints %q and %q share address %q: %w", endpointID(eps[j]), id, a.Addr, lbk.ErrDuplicateID)
			}
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
