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
//
// Addresses are compared as balancer.CanonicalAddr spells them (those
// that are host:port; a unix socket path as it is), so that two spellings
// of one address (127.0.0.1:80 and 127.0.0.1:080), which gRPC would dial
// as two connections to one server, giving it a double share, are refused
// too, with both named.
func checkEndpoints(eps []resolver.Endpoint) error {
	type first struct {
		ep   int    // the first endpoint holding the address
		addr string // its spelling there
	}
	owner := make(map[string]first, len(eps)) // by canonical address
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
			key := a.Addr
			if c, err := lbk.CanonicalAddr(a.Addr); err == nil {
				key = c
			}
			f, dup := owner[key]
			switch {
			case !dup:
				owner[key] = first{i, a.Addr}
			case f.addr != a.Addr:
				return fmt.Errorf("lbpolicy: %q in endpoint %q and %q in endpoint %q are both %s: %w",
					f.addr, endpointID(eps[f.ep]), a.Addr, id, key, lbk.ErrDuplicateID)
			case f.ep == i:
				return fmt.Errorf("lbpolicy: endpoint %q: address %q listed twice: %w", id, a.Addr, lbk.ErrDuplicateID)
			case !sameAddrs(eps[f.ep], ep) || WeightOf(eps[f.ep]) != w:
				return fmt.Errorf("lbpolicy: endpoints %q and %q share address %q: %w", endpointID(eps[f.ep]), id, a.Addr, lbk.ErrDuplicateID)
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
