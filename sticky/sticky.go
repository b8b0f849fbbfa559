package sticky

import (
	"context"
	"fmt"
	"io"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/lbkit/lbkit/balancer"
)

// ErrConfig reports an argument New refuses. It wraps
// balancer.ErrBadOption.
var ErrConfig = fmt.Errorf("sticky: invalid config: %w", balancer.ErrBadOption)

// Balancer sends a request whose Request.Prefer names a backend of its set
// to that backend, and every other request to the picker it wraps. Create
// it with New; the zero value is not ready.
//
// Pick and Done are safe for concurrent use with each other and with
// Update; they take no lock and allocate nothing. Update serialises on a
// mutex that Pick and Done never take. A Balancer must not be copied.
type Balancer struct {
	// Immutable after New.
	inner   balancer.Balancer
	fb      balancer.Feedback        // inner's, or nil
	counter balancer.InFlightCounter // inner's, or nil

	// Atomic: what Pick and Done read.
	cur atomic.Pointer[snapshot]

	// Guarded by mu.
	mu       sync.Mutex
	registry balancer.Registry[balancer.InFlight]
}

var (
	_ balancer.Balancer        = (*Balancer)(nil)
	_ balancer.Feedback        = (*Balancer)(nil)
	_ balancer.InFlightCounter = (*Balancer)(nil)
	_ balancer.Starter         = (*Balancer)(nil)
	_ balancer.Unwrapper       = (*Balancer)(nil)
	_ io.Closer                = (*Balancer)(nil)
)

// snapshot is what one Update published; immutable.
type snapshot struct {
	index    map[string]int // ID → position in backends
	backends []balancer.Backend
	// pinned counts, per backend, the requests this layer picked itself
	// (a Prefer honoured) whose Done has not come: those Dones are not the
	// inner picker's to count down. Retired counters stay reachable by ID
	// until their last Done.
	pinned balancer.States[balancer.InFlight]
}

// New returns a Balancer around inner, which must be new, with an empty
// set, and is from then on updated only through the Balancer. It returns
// an error wrapping ErrConfig for a nil inner.
func New(inner balancer.Balancer) (*Balancer, error) {
	if inner == nil || reflect.ValueOf(inner).Kind() == reflect.Pointer && reflect.ValueOf(inner).IsNil() {
		return nil, fmt.Errorf("%w: nil inner balancer", ErrConfig)
	}
	b := &Balancer{inner: inner}
	b.fb, _ = inner.(balancer.Feedback)
	b.counter, _ = inner.(balancer.InFlightCounter)
	b.cur.Store(&snapshot{})
	return b, nil
}

// Update validates bs (balancer.NewSet), hands the very Backend values to
// the inner picker, and then publishes them as the backends a Prefer may
// name. On error, from validation or from the inner picker, the previous
// set stays in both.
//
// Cost: O(n), and the inner Update.
func (b *Balancer) Update(bs []balancer.Backend) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	set, err := balancer.NewSet(bs)
	if err != nil {
		return fmt.Errorf("sticky: update: %w", err)
	}
	if err := b.inner.Update(set.Backends); err != nil {
		return fmt.Errorf("sticky: update: %w", err)
	}
	s := &snapshot{index: make(map[string]int, set.Len()), backends: set.Backends}
	for i, id := range set.IDs {
		s.index[id] = i
	}
	s.pinned = b.registry.Sync(set.Backends)
	b.cur.Store(s)
	return nil
}

// Pick returns the backend req.Prefer names when it is in the set and is
// not req.Avoid, and otherwise the inner picker's pick for req.
//
// Cost: for a Prefer, one atomic load, one map read and one atomic add;
// otherwise the inner Pick. No lock, no allocation.
func (b *Balancer) Pick(req balancer.Request) (balancer.Backend, error) {
	if req.Prefer != "" && req.Prefer != req.Avoid {
		s := b.cur.Load()
		if i, ok := s.index[req.Prefer]; ok && s.pinned.At(i).Inc() > 0 {
			return s.backends[i], nil
		}
		// Not in the set (gone, drained, ejected), or its counter was
		// sealed under an older snapshot: pick afresh.
	}
	return b.inner.Pick(req)
}

// Done counts down a request this layer picked itself, if one to be is
// counted on be's ID, and otherwise passes the result on to the inner
// picker, if it is a balancer.Feedback.
//
// When requests of both kinds are in flight to one backend, the first
// Done to come counts down whichever was counted here: the inner picker
// gets exactly as many Dones for a backend as it made picks of it, each
// the result of a request to that backend, though not always of the one
// it picked.
//
// Cost: one atomic load, one map read, an atomic compare-and-swap when a
// pinned request is counted, and the inner Done otherwise.
func (b *Balancer) Done(be balancer.Backend, r balancer.Result) {
	if be == nil {
		return
	}
	if c := b.cur.Load().pinned.Lookup(be); c != nil && c.Dec() {
		return
	}
	if b.fb != nil {
		b.fb.Done(be, r)
	}
}

// InFlight returns the requests in flight to the backend with this ID:
// those this layer picked, and those the inner picker counts, if it is a
// balancer.InFlightCounter.
func (b *Balancer) InFlight(id string) int64 {
	var n int64
	if c := b.cur.Load().pinned.LookupID(id); c != nil {
		n = c.Load()
	}
	if b.counter != nil {
		n += b.counter.InFlight(id)
	}
	return n
}

// Start starts the inner picker's background work, if it has a Start
// method, and returns its error as it is (balancer.StartInner).
func (b *Balancer) Start(ctx context.Context) error { return balancer.StartInner(ctx, b.inner) }

// Close closes the inner picker if it is an io.Closer, and returns its
// error as it is (balancer.CloseInner).
func (b *Balancer) Close() error { return balancer.CloseInner(b.inner) }

// Unwrap returns the picker inside, for its admin methods.
func (b *Balancer) Unwrap() balancer.Picker { return b.inner }
