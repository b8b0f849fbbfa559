package balancer

import "errors"

// ErrBadLocality reports a backend whose locality Update cannot use: a
// priority outside [0, MaxPriority].
var ErrBadLocality = errors.New("balancer: locality out of range")

// MaxPriority is the largest priority Validate accepts. Envoy's clusters
// rarely have more than three levels; the bound keeps a typo (a port number
// given as a priority) from building a routing table of thousands of empty
// levels.
const MaxPriority = 127

// Locality says where a backend runs: its zone, and the priority of the
// tier it belongs to. Package locality reads it to keep traffic in the
// caller's zone and to fail over from one tier to the next; every other
// picker ignores it (but Update still validates it). The zero Locality,
// zone "" at priority 0, is a backend that says nothing of where it runs.
type Locality struct {
	// Zone names the failure domain the backend runs in: a cloud zone such
	// as "us-east-1a" (Kubernetes' topology.kubernetes.io/zone label), a
	// rack, a data centre. "" means unknown, and is a zone of its own.
	Zone string
	// Priority is the backend's tier, after Envoy's priority levels: the
	// backends of priority 0 take the traffic while they are healthy
	// enough; priority 1 takes what level 0 cannot, and so on down. In
	// [0, MaxPriority].
	Priority int
}

// Locator is implemented by backends that know their locality. Pickers
// that use it (package locality) read it with LocalityOf once per Update,
// as weights are read; a Backend that does not implement Locator is at the
// zero Locality. Endpoint implements it.
type Locator interface {
	Locality() Locality
}

// LocalityOf returns b's locality: b.Locality() if b is a Locator, else the
// zero Locality. It does not validate; Validate does.
func LocalityOf(b Backend) Locality {
	if l, ok := b.(Locator); ok {
		return l.Locality()
	}
	return Locality{}
}

// HealthUpdater is implemented by pickers that want every backend with its
// health, not only the healthy ones: package locality does, because a
// priority level's share of healthy backends decides how much traffic the
// level keeps (Envoy's overprovisioning factor), and because in panic mode
// it sends a level's traffic to all of its backends, healthy or not.
//
// Package health calls UpdateHealth instead of Update when the picker it
// wraps implements HealthUpdater, with every backend that is neither
// drained nor in maintenance and, for each, whether it is eligible; it then
// leaves panic mode to the picker. Any other caller may call Update, which
// must mean UpdateHealth with every backend healthy.
type HealthUpdater interface {
	// UpdateHealth replaces the set with bs, of which healthy[i] tells
	// whether bs[i] is fit to serve. A backend marked unhealthy gets no
	// picks while more than half of its priority level (the backends of
	// its Locality's Priority) is healthy; below that, an implementation
	// may fall back to all of the level, as locality's levels panic.
	// An implementation that routes by priority (one that, given every
	// backend healthy, sends first tries to the first level only) keeps
	// doing so: while every backend of the levels before priority p is
	// healthy, no first try (Attempt 0, no Avoid) goes to a backend of
	// priority p; retries may walk on. UpdateHealth validates as Update does, refuses
	// a healthy slice of another length than bs, and on error keeps the
	// previous set and health. It keeps neither slice. balancertest's
	// HealthUpdate and HealthLevels checks test these rules.
	UpdateHealth(bs []Backend, healthy []bool) error
}

// Labeler is implemented by backends that carry labels (metadata), such as
// {"version": "v2", "track": "canary"}: package route reads them, once per
// Update, to group the backends by a label's value. Endpoint implements
// it (WithLabels); discovery sources fill it from the system's metadata.
type Labeler interface {
	// Labels returns the backend's labels. The caller must not modify the
	// map.
	Labels() map[string]string
}

// LabelOf returns the value of b's label key, or "" if b is no Labeler or
// has no such label.
func LabelOf(b Backend, key string) string {
	if l, ok := b.(Labeler); ok {
		return l.Labels()[key]
	}
	return ""
}
