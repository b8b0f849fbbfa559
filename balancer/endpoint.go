package balancer

import "maps"

// Endpoint is a ready-made Backend: a network address, which is also its ID,
// a weight and a locality (zone and priority, for package locality). Use it
// when the address is all a picker needs to carry; wrap your own type (a
// URL, a connection pool) when it is not.
//
// An Endpoint is immutable and safe for concurrent use.
type Endpoint struct {
	addr   string
	weight int
	loc    Locality
	labels map[string]string
	key    string
}

var (
	_ Backend   = (*Endpoint)(nil)
	_ Weighter  = (*Endpoint)(nil)
	_ Locator   = (*Endpoint)(nil)
	_ Labeler   = (*Endpoint)(nil)
	_ HashKeyer = (*Endpoint)(nil)
)

// NewEndpoint returns an Endpoint for addr with the given weight. The weight
// is checked by Update (see Validate), not here, so that a bad value from
// configuration is reported with the rest of the set.
func NewEndpoint(addr string, weight int) *Endpoint {
	return &Endpoint{addr: addr, weight: weight}
}

// Endpoints returns one Endpoint of weight 1 for each address, typed as the
// []Backend that Update takes.
func Endpoints(addrs ...string) []Backend {
	bs := make([]Backend, len(addrs))
	for i, a := range addrs {
		bs[i] = &Endpoint{addr: a, weight: 1}
	}
	return bs
}

// Weighted is an address and its weight, and optionally its locality, for
// WeightedEndpoints.
type Weighted struct {
	Addr     string
	Weight   int
	Locality Locality
}

// WeightedEndpoints returns one Endpoint per address and weight, in order,
// typed as the []Backend that Update takes. Weights are checked by Update.
//
//	bs := balancer.WeightedEndpoints(
//		balancer.Weighted{Addr: "10.0.0.1:8080", Weight: 3},
//		balancer.Weighted{Addr: "10.0.0.2:8080", Weight: 1},
//	)
func WeightedEndpoints(ws ...Weighted) []Backend {
	bs := make([]Backend, len(ws))
	for i, w := range ws {
		bs[i] = &Endpoint{addr: w.Addr, weight: w.Weight, loc: w.Locality}
	}
	return bs
}

// At returns a copy of e at locality l: the zone it runs in and its
// priority (see Locality). The priority is checked by Update, as weights
// are.
//
//	b := balancer.NewEndpoint("10.0.0.1:8080", 1).At(balancer.Locality{Zone: "us-east-1a"})
func (e *Endpoint) At(l Locality) *Endpoint {
	if e == nil {
		return nil
	}
	c := *e
	c.loc = l
	return &c
}

// WithLabels returns a copy of e carrying a copy of labels: its metadata,
// such as {"version": "v2"}, which package route reads to send requests to
// the backends that match.
//
//	b := balancer.NewEndpoint("10.0.0.9:8080", 5).WithLabels(map[string]string{"track": "canary"})
func (e *Endpoint) WithLabels(labels map[string]string) *Endpoint {
	if e == nil {
		return nil
	}
	c := *e
	c.labels = maps.Clone(labels)
	return &c
}

// WithHashKey returns a copy of e placed by key on a hash picker's ring or
// table instead of by its address (see HashKeyer): a backend that changes
// address keeps its keys while its hash key stays. "" means the address.
//
//	b := balancer.NewEndpoint("10.0.0.9:6379", 1).WithHashKey("cache-2")
func (e *Endpoint) WithHashKey(key string) *Endpoint {
	if e == nil {
		return nil
	}
	c := *e
	c.key = key
	return &c
}

// The methods below are safe on a nil *Endpoint, which has the empty ID and
// weight 0: a nil Endpoint passed to Done is then an unknown backend, not a
// panic, and Validate refuses it in a set.

// ID returns the address.
func (e *Endpoint) ID() string {
	if e == nil {
		return ""
	}
	return e.addr
}

// Addr returns the address, such as "10.0.0.1:8080".
func (e *Endpoint) Addr() string { return e.ID() }

// Weight returns the weight given to NewEndpoint.
func (e *Endpoint) Weight() int {
	if e == nil {
		return 0
	}
	return e.weight
}

// Locality returns the locality given to At, or the zero Locality.
func (e *Endpoint) Locality() Locality {
	if e == nil {
		return Locality{}
	}
	return e.loc
}

// Labels returns the labels given to WithLabels, or nil. The map is the
// Endpoint's own: read it, do not modify it.
func (e *Endpoint) Labels() map[string]string {
	if e == nil {
		return nil
	}
	return e.labels
}

// HashKey returns the key given to WithHashKey, or "".
func (e *Endpoint) HashKey() string {
	if e == nil {
		return ""
	}
	return e.key
}

// String returns the address.
func (e *Endpoint) String() string { return e.ID() }
