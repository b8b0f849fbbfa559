package lbkube

import (
	"cmp"
	"fmt"
	"net"
	"slices"
	"strconv"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/lbkit/lbkit/balancer"
)

// state is what an endpoint's conditions make of it.
type state uint8

const (
	// excluded: not ready and not terminating (a failing readiness probe,
	// a pod starting): no traffic, as kube-proxy does.
	excluded state = iota
	// draining: terminating; requests in flight finish, no new ones.
	draining
	// eligible: ready.
	eligible
)

// endpoint is one address of a Service, merged over its slices.
type endpoint struct {
	id     string // host:port
	zone   string // the endpoint's zone, or its hint (see merge)
	own    string // the endpoint's own zone
	hints  []string
	state  state
	family discoveryv1.AddressType
}

// merged is the set that the slices of one Service make.
type merged struct {
	endpoints []endpoint // by ID
	hinted    bool       // every eligible endpoint had a zone hint, so zones are hints
	problems  []string   // slices skipped, and why
}

// merge makes one set of the slices: the first address of every endpoint
// of every slice of an accepted address type, at the slice's port named
// port ("" with a slice of one port: that port), keyed host:port as
// balancer.CanonicalAddr spells it (an upper-case IPv6 address, or an
// IPv4-mapped one, is the address its canonical spelling names). An
// address that appears in several slices, as it does for a moment while
// the EndpointSlice controller moves it, is kept once, in its best state
// (ready, then terminating). Zones come from topology hints when every
// eligible endpoint has one (kube-proxy's rule: hints are used all or not
// at all): the endpoint's own zone if the hints name it, else the first
// hint; otherwise from the endpoint's zone.
//
// merge is pure: the set depends on the slices alone, not on their order.
func merge(es []*discoveryv1.EndpointSlice, port string, family discoveryv1.AddressType) merged {
	var m merged
	byID := map[string]int{}
	es = slices.Clone(es)
	slices.SortFunc(es, func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
	for _, s := range es {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			m.problems = append(m.problems, fmt.Sprintf("slice %s: address type %s is not an IP family", s.Name, s.AddressType))
			continue
		}
		if family != "" && s.AddressType != family {
			continue
		}
		p, err := portOf(s, port)
		if err != nil {
			m.problems = append(m.problems, fmt.Sprintf("slice %s: %v", s.Name, err))
			continue
		}
		for _, e := range s.Endpoints {
			if len(e.Addresses) == 0 || net.ParseIP(e.Addresses[0]) == nil {
				continue
			}
			id, err := balancer.CanonicalAddr(net.JoinHostPort(e.Addresses[0], strconv.Itoa(int(p))))
			if err != nil {
				m.problems = append(m.problems, fmt.Sprintf("slice %s: %v", s.Name, err))
				continue
			}
			ep := endpoint{id: id, state: stateOf(e.Conditions), family: s.AddressType}
			if e.Zone != nil {
				ep.own = *e.Zone
			}
			if e.Hints != nil {
				for _, z := range e.Hints.ForZones {
					ep.hints = append(ep.hints, z.Name)
				}
			}
			if j, dup := byID[ep.id]; dup {
				if ep.state > m.endpoints[j].state {
					m.endpoints[j] = ep
				}
				continue
			}
			byID[ep.id] = len(m.endpoints)
			m.endpoints = append(m.endpoints, ep)
		}
	}
	slices.SortFunc(m.endpoints, func(a, b endpoint) int { return cmp.Compare(a.id, b.id) })
	m.hinted = slices.ContainsFunc(m.endpoints, func(e endpoint) bool { return e.state == eligible }) &&
		!slices.ContainsFunc(m.endpoints, func(e endpoint) bool { return e.state == eligible && len(e.hints) == 0 })
	for i := range m.endpoints {
		e := &m.endpoints[i]
		e.zone = e.own
		if m.hinted && len(e.hints) > 0 && !slices.Contains(e.hints, e.own) {
			e.zone = e.hints[0]
		}
	}
	return m
}

// portOf returns the number of the slice's port named name, which must be
// from 1 to 65535 (the API server validates ports; a fake or a broken
// client may not).
func portOf(s *discoveryv1.EndpointSlice, name string) (int32, error) {
	var names []string
	for _, p := range s.Ports {
		n := ""
		if p.Name != nil {
			n = *p.Name
		}
		names = append(names, strconv.Quote(n))
		if p.Port == nil {
			continue
		}
		if n == name || name == "" && len(s.Ports) == 1 {
			if *p.Port < 1 || *p.Port > 65535 {
				return 0, fmt.Errorf("port %q is %d, not from 1 to 65535", n, *p.Port)
			}
			return *p.Port, nil
		}
	}
	if name == "" && len(s.Ports) > 1 {
		return 0, fmt.Errorf("%d ports (%v): set Config.Port to one of their names", len(s.Ports), names)
	}
	return 0, fmt.Errorf("no port named %q among %v", name, names)
}

// stateOf maps an endpoint's conditions: ready (nil means ready) is
// eligible; terminating is draining, serving or not (its requests in
// flight finish); anything else is left out.
func stateOf(c discoveryv1.EndpointConditions) state {
	switch {
	case c.Terminating != nil && *c.Terminating:
		return draining
	case c.Ready == nil || *c.Ready:
		return eligible
	}
	return excluded
}
