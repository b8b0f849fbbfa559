package lbpolicy

import (
	"cmp"
	"fmt"
	"slices"

	lbk "github.com/lbkit/lbkit/balancer"
	"google.golang.org/grpc/experimental/balancer/weight"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/ringhash"
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
//
// The policy, which sees every endpoint of a resolver update, first
// scales gRPC's weights down together when any is above MaxWeight, so
// that their ratios survive (see scaleWeights): gRPC's xDS client sets
// them as fractions of 2³¹.
func WeightOf(ep resolver.Endpoint) int {
	if w, ok := ep.Attributes.Value(weightKey{}).(int); ok {
		return w
	}
	if w := weight.FromEndpoint(ep).Weight; w > 0 {
		return int(min(w, lbk.MaxWeight))
	}
	return 1
}

// scaleWeights returns eps with the weights of gRPC's attribute brought
// into [1, balancer.MaxWeight] in the same ratios, when any of them is
// above MaxWeight; otherwise eps itself. They are divided by their
// greatest common divisor and, if the largest is still above MaxWeight,
// scaled to make it MaxWeight, rounded, each at least 1. Weights set with
// SetWeight, and endpoints without a weight, are left alone. The
// returned endpoints carry their weight as SetWeight sets it.
//
// Why: under xDS, grpc-go v1.85 (gRFC A113, unless
// GRPC_EXPERIMENTAL_PF_WEIGHTED_SHUFFLING=false) gives each endpoint its
// locality's share of the priority times its own share of the locality,
// in fixed point with 31 fractional bits: three equal endpoints in one
// locality weigh 715,827,882 each, and 3:1 weigh 1,610,612,736 and
// 536,870,912. Taken one by one, each would be capped to MaxWeight, the
// ratios lost (and a ring would get its maximum of points for three
// backends); divided by their gcd they are 1, 1, 1 and 3, 1.
//
// Cost: O(n) for n endpoints, and a copy of eps only when it scales.
func scaleWeights(eps []resolver.Endpoint) []resolver.Endpoint {
	var g, top uint64
	for _, ep := range eps {
		if w := grpcWeight(ep); w > 0 {
			g, top = gcd(g, w), max(top, w)
		}
	}
	if top <= lbk.MaxWeight {
		return eps
	}
	top /= g
	out := slices.Clone(eps)
	for i, ep := range out {
		w := grpcWeight(ep)
		if w == 0 {
			continue
		}
		w /= g
		if top > lbk.MaxWeight {
			// w·MaxWeight < 2³²·10⁶: no overflow.
			w = max(1, (w*lbk.MaxWeight+top/2)/top)
		}
		out[i] = SetWeight(ep, int(w))
	}
	return out
}

// grpcWeight returns the weight of gRPC's attribute on ep, or 0 if it has
// none or SetWeight set one (which wins).
func grpcWeight(ep resolver.Endpoint) uint64 {
	if _, ok := ep.Attributes.Value(weightKey{}).(int); ok {
		return 0
	}
	return uint64(weight.FromEndpoint(ep).Weight)
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// HashKeyOf returns ep's hash key, gRFC A76's endpoint hash key: the one
// google.golang.org/grpc/resolver/ringhash.SetHashKey stored, as a
// resolver does for endpoints that keep an identity across addresses, and
// as gRPC's xDS client does from the EDS endpoint metadata "envoy.lb"
// hash_key. "" if it has none. lbkit_ring_hash and lbkit_maglev place the
// endpoint on the ring or table by this key, when not empty, instead of
// its address (see balancer.HashKeyer), so that an endpoint that comes
// back at a new address with the same key keeps its RPCs' keys.
func HashKeyOf(ep resolver.Endpoint) string { return ringhash.HashKey(ep) }

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
//
// If placed (the hash policies, which place endpoints by their hash keys),
// two endpoints with one placement key, their hash key (HashKeyOf) or
// else their first address, are refused too, as lbkit's Update would
// refuse them (balancer.ErrDuplicateHashKey), and so is an endpoint listed
// twice with two hash keys.
func checkEndpoints(eps []resolver.Endpoint, placed bool) error {
	type first struct {
		ep   int    // the first endpoint holding the address
		addr string // its spelling there
	}
	owner := make(map[string]first, len(eps)) // by canonical address
	var places map[string]int                 // placement key → first endpoint, if placed
	if placed {
		places = make(map[string]int, len(eps))
	}
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
			case !sameAddrs(eps[f.ep], ep) || WeightOf(eps[f.ep]) != w || placed && HashKeyOf(eps[f.ep]) != HashKeyOf(ep):
				return fmt.Errorf("lbpolicy: endpoints %q and %q share address %q: %w", endpointID(eps[f.ep]), id, a.Addr, lbk.ErrDuplicateID)
			}
		}
		if !placed {
			continue
		}
		key := cmp.Or(HashKeyOf(ep), id)
		if j, dup := places[key]; dup && !sameAddrs(eps[j], ep) {
			return fmt.Errorf("lbpolicy: endpoints %q and %q are both placed at %q (an endpoint without a hash key is placed by its first address): %w",
				endpointID(eps[j]), id, key, lbk.ErrDuplicateHashKey)
		}
		places[key] = i
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
