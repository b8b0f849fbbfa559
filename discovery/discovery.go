package discovery

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// ErrRefused wraps the error of a Publish that refused its endpoints: the
// target keeps its previous set. The message lists every endpoint at
// fault, so that a source can pass it on (an xDS NACK's error_detail, a
// log line) as it is.
var ErrRefused = errors.New("discovery: endpoints refused")

// Source is what every discovery source in lbkit implements (lbhttp's
// Refresher, lbkube's Watcher, the xDS and etcd clients), by the rules of
// the decorators: Start begins the background work once and returns an
// error wrapping balancer.ErrStarted if called again, and one wrapping
// balancer.ErrClosed after Close; the work ends with Start's context or
// Close; Close waits for it, leaves no goroutine behind, is idempotent, and
// leaves the target with the last set it was given. balancertest's
// RunSource checks these rules on a source of yours.
type Source interface {
	balancer.Starter
	io.Closer
}

// State is what a source says of an endpoint's fitness to serve.
type State uint8

const (
	// Healthy endpoints take traffic: xDS HEALTHY and UNKNOWN, a
	// Kubernetes endpoint that is ready, every DNS answer.
	Healthy State = iota
	// Unhealthy endpoints are known but not fit to serve: xDS UNHEALTHY
	// and TIMEOUT. They stay in the set of a target that is a
	// balancer.HealthUpdater (health.Balancer, which keeps them out of the
	// picks; a locality level counts them when it weighs
	// its healthy share, as Envoy does); any other target is given the
	// set without them.
	Unhealthy
	// Draining endpoints finish the requests they have and get no new
	// ones: xDS DRAINING, a Kubernetes endpoint that is terminating. An
	// endpoint the target already serves stays in its set, drained through
	// the first balancer.Admin layer of the target (health.Balancer), until
	// the source stops listing it; one it never served is left out, since
	// nothing of it is in flight. Without an Admin layer, draining
	// endpoints are left out at once.
	Draining
)

// String returns "healthy", "unhealthy" or "draining".
func (s State) String() string {
	switch s {
	case Healthy:
		return "healthy"
	case Unhealthy:
		return "unhealthy"
	case Draining:
		return "draining"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Endpoint is one backend as a discovery source reports it.
type Endpoint struct {
	// Addr is the endpoint's network address, "host:port", spelled any
	// way: its balancer.CanonicalAddr is the backend's ID, so that two
	// spellings of one address are one backend, and the same ID as a
	// static set spelled that way.
	Addr string
	// Weight is the endpoint's weight, from 1 to balancer.MaxWeight; 0
	// means 1 (a source that says nothing of weights).
	Weight int
	// Locality is where the endpoint runs, for package locality.
	Locality balancer.Locality
	// State says whether the endpoint takes traffic.
	State State
	// Labels are the endpoint's metadata as the source gives it (xDS
	// metadata, etcd record fields, Kubernetes labels). The default
	// backend carries them (balancer.Labeler), for package route.
	Labels map[string]string
	// HashKey is the endpoint's hash key (balancer.HashKeyer): the hash
	// pickers (package consistent) place it by this key instead of its
	// ID, so that an endpoint that comes back at another address with the
	// same key keeps its keys; Envoy's and gRPC's (gRFC A76) "envoy.lb"
	// hash_key in xDS. "" means the ID. The default backend carries it.
	HashKey string
}

// ID returns the endpoint's backend ID, balancer.CanonicalAddr of its
// address, and an error wrapping balancer.ErrBadAddr if the address does
// not parse. Sources that skip bad records rather than refuse an update
// call it to find them.
func (e Endpoint) ID() (string, error) { return balancer.CanonicalAddr(e.Addr) }

// Config configures a Publisher. Its zero value is ready to use.
type Config struct {
	// Backend makes the backend given to the target for an endpoint whose
	// ID is id. Nil: balancer.NewEndpoint(id, weight).At(e.Locality),
	// WithLabels(e.Labels) if it has any, WithHashKey(e.HashKey) if it has
	// one, the weight being e.Weight or 1.
	// A source's own type (one that holds a connection) comes in here; its
	// ID must be id.
	Backend func(id string, e Endpoint) balancer.Backend
}

// Report says what a Publish gave the target.
type Report struct {
	// Healthy, Unhealthy and Draining list the IDs given to the target in
	// each state, sorted. Unhealthy is empty for a target that is no
	// HealthUpdater (they were left out); Draining lists only those kept
	// in the set, drained.
	Healthy, Unhealthy, Draining []string
	// Left lists the draining IDs left out of the set (never served, or
	// no Admin layer), sorted.
	Left []string
}

// Publisher brings a target's set in line with what a discovery source
// reports, by the rules every lbkit source follows: the endpoints are
// validated first, and a bad update changes nothing; draining endpoints
// are drained before the Update that could re-spread them and again
// after it; health reaches a HealthUpdater target; endpoints drained by
// the Publisher are enabled when they are listed healthy again. It is the
// part of a source that does not depend on where the endpoints come from.
//
// Create it with New. Publish is safe for concurrent use; concurrent calls
// are serialised, and the last to take the lock wins.
type Publisher struct {
	// Immutable after New.
	target balancer.Updater
	hu     balancer.HealthUpdater // target's, or nil
	admin  balancer.Admin         // target's first Admin layer, or nil
	cfg    Config

	// Guarded by mu.
	mu      sync.Mutex
	inSet   map[string]bool // IDs of the set the target last took
	drained map[string]bool // IDs this Publisher drained and has not enabled
	order   []string        // drained IDs, oldest first, for the bound
}

// New returns a Publisher that feeds target, usually the outermost layer
// of a stack (subset ▶ health ▶ locality ▶ algorithm). It looks for the
// Admin layer (balancer.As through the decorators' Unwrap) and for
// HealthUpdater on target itself: health given to an inner layer would be
// overwritten by the layers around it at their next Update.
func New(target balancer.Updater, cfg Config) (*Publisher, error) {
	if target == nil {
		return nil, errors.New("discovery: nil target")
	}
	p := &Publisher{target: target, cfg: cfg, inSet: map[string]bool{}, drained: map[string]bool{}}
	p.hu, _ = target.(balancer.HealthUpdater)
	p.admin = adminOf(target)
	return p, nil
}

// adminOf returns the first layer of target that is a balancer.Admin, or
// nil if none is.
func adminOf(target balancer.Updater) balancer.Admin {
	if a, ok := target.(balancer.Admin); ok {
		return a // an Updater that is no Picker, which As cannot take
	}
	p, _ := target.(balancer.Picker)
	a, _ := balancer.As[balancer.Admin](p)
	return a
}

// Publish gives the target eps. It refuses, with an error wrapping
// ErrRefused that names each endpoint at fault, an update with an address
// that does not parse, two endpoints of one ID (two spellings of one
// address included), a weight outside [0, balancer.MaxWeight] or a
// priority outside [0, balancer.MaxPriority]; the target's set is then
// untouched. An error from the target's Update (which also leaves its set
// in place) is returned wrapped; errors of the drains and enables that
// follow a successful Update are returned joined, the set being taken.
// An ID the Admin layer does not know (one outside a subset) is not an
// error.
//
// An empty eps is published: the source was told the set is empty. A
// source must never call Publish with an empty set because of a failure
// of its own (a lost connection, a timeout); it keeps the last good set
// by not publishing.
//
// Cost: O(n log n) for n endpoints, the target's Update, and one Drain or
// Enable per endpoint that changes state.
func (p *Publisher) Publish(eps []Endpoint) (Report, error) {
	ids, err := check(eps)
	if err != nil {
		return Report{}, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()

	var r Report
	set := make([]balancer.Backend, 0, len(eps))
	var up []bool
	if p.hu != nil {
		up = make([]bool, 0, len(eps))
	}
	var drain, enable []string
	for i, e := range eps {
		id := ids[i]
		switch {
		case e.State == Draining && (p.admin == nil || !p.inSet[id]):
			r.Left = append(r.Left, id)
			continue
		case e.State == Draining:
			r.Draining = append(r.Draining, id)
			drain = append(drain, id)
		case e.State == Unhealthy && p.hu == nil:
			continue
		case e.State == Unhealthy:
			r.Unhealthy = append(r.Unhealthy, id)
		default:
			r.Healthy = append(r.Healthy, id)
		}
		if e.State != Draining && p.drained[id] {
			enable = append(enable, id)
		}
		set = append(set, p.backend(id, e))
		if up != nil {
			up = append(up, e.State != Unhealthy)
		}
	}
	// Drain first, while the backend is still in the set: an Update can
	// re-spread the set (a subset drawing anew) and must not hand new
	// requests to an endpoint on its way out.
	var errs []error
	for _, id := range drain {
		if !p.drained[id] {
			errs = append(errs, known(p.admin.Drain(id)))
			p.markDrained(id)
		}
	}
	if p.hu != nil {
		err = p.hu.UpdateHealth(set, up)
	} else {
		err = p.target.Update(set)
	}
	if err != nil {
		return Report{}, fmt.Errorf("discovery: update: %w", errors.Join(append(errs, err)...))
	}
	p.inSet = make(map[string]bool, len(set))
	for _, b := range set {
		p.inSet[b.ID()] = true
	}
	// Drain again: the Update may have brought a drained backend back
	// into an inner layer (a subset around health picks anew).
	for _, id := range drain {
		errs = append(errs, known(p.admin.Drain(id)))
	}
	for _, id := range enable {
		errs = append(errs, known(p.admin.Enable(id)))
		delete(p.drained, id)
	}
	for _, l := range [][]string{r.Healthy, r.Unhealthy, r.Draining, r.Left} {
		slices.Sort(l)
	}
	if err := errors.Join(errs...); err != nil {
		return r, fmt.Errorf("discovery: %w", err)
	}
	return r, nil
}

func (p *Publisher) backend(id string, e Endpoint) balancer.Backend {
	if p.cfg.Backend != nil {
		return p.cfg.Backend(id, e)
	}
	b := balancer.NewEndpoint(id, max(e.Weight, 1)).At(e.Locality)
	if len(e.Labels) > 0 {
		b = b.WithLabels(e.Labels)
	}
	if e.HashKey != "" {
		b = b.WithHashKey(e.HashKey)
	}
	return b
}

// check validates eps and returns their IDs, or an error wrapping
// ErrRefused that names every endpoint at fault.
func check(eps []Endpoint) ([]string, error) {
	ids := make([]string, len(eps))
	seen := make(map[string]int, len(eps))
	var errs []error
	for i, e := range eps {
		id, err := e.ID()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("endpoint %d: %w", i, err))
			continue
		case e.Weight < 0 || e.Weight > balancer.MaxWeight:
			errs = append(errs, fmt.Errorf("endpoint %d (%s): %w: %d, want 1 to %d (0 for 1)", i, id, balancer.ErrBadWeight, e.Weight, balancer.MaxWeight))
		case e.Locality.Priority < 0 || e.Locality.Priority > balancer.MaxPriority:
			errs = append(errs, fmt.Errorf("endpoint %d (%s): %w: priority %d, want 0 to %d", i, id, balancer.ErrBadLocality, e.Locality.Priority, balancer.MaxPriority))
		case e.State > Draining:
			errs = append(errs, fmt.Errorf("endpoint %d (%s): unknown %v", i, id, e.State))
		}
		if j, dup := seen[id]; dup {
			errs = append(errs, fmt.Errorf("endpoints %d (%q) and %d (%q): %w %s", j, eps[j].Addr, i, e.Addr, balancer.ErrDuplicateID, id))
		}
		seen[id] = i
		ids[i] = id
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrRefused, errors.Join(errs...))
	}
	return ids, nil
}

// known drops the error of a Drain or Enable for a backend the Admin layer
// does not know: one outside this client's subset, to which it sends
// nothing.
func known(err error) error {
	if errors.Is(err, balancer.ErrUnknownBackend) {
		return nil
	}
	return err
}

// markDrained records a drained ID, keeping the record bounded: the last
// max(4n, 1024) drained, for a set of n, which outlasts health's own
// record of removed backends (max(n, 64)), so that an address that comes
// back (a new pod given a terminated pod's IP) is always enabled.
func (p *Publisher) markDrained(id string) {
	p.drained[id] = true
	p.order = append(p.order, id)
	for limit := max(4*len(p.inSet), 1024); len(p.order) > limit; {
		old := p.order[0]
		p.order = p.order[1:]
		if !p.inSet[old] {
			delete(p.drained, old)
		}
	}
}

// Defaults of Backoff, gRPC's connection backoff
// (grpc/doc/connection-backoff.md): base 1 s, factor 1.6, at most 120 s,
// jitter ±20%.
const (
	DefaultBackoffBase = time.Second
	DefaultBackoffMax  = 120 * time.Second
)

// Backoff is the wait between a source's attempts to reach a server that
// went away (a control plane, etcd), so that a fleet of clients neither
// hammers a recovering server nor reconnects in step. Its zero value is
// gRPC's connection backoff.
type Backoff struct {
	// Base is the first wait. Zero: DefaultBackoffBase.
	Base time.Duration
	// Max bounds every wait. Zero: DefaultBackoffMax.
	Max time.Duration
	// Rand returns a number in [0, 1) for the jitter. Nil: math/rand/v2.
	Rand func() float64
}

// Delay returns the wait before retry n (0 for the first): Base × 1.6ⁿ,
// capped at Max, times a factor drawn uniformly from [0.8, 1.2), and never
// above Max. A negative n is 0.
func (b Backoff) Delay(n int) time.Duration {
	base, top := cmp.Or(b.Base, DefaultBackoffBase), cmp.Or(b.Max, DefaultBackoffMax)
	d := float64(base)
	for i := 0; i < n && d < float64(top); i++ {
		d *= 1.6
	}
	d = min(d, float64(top))
	r := rand.Float64
	if b.Rand != nil {
		r = b.Rand
	}
	return min(time.Duration(d*(0.8+0.4*r())), top)
}
