package rr

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/lbkit/lbkit/balancer"
)

// Picker picks backends in turn. Create it with New; the zero value is not
// ready.
//
// Pick and Update are safe for concurrent use. Pick takes no lock and
// allocates nothing. Update builds the new set aside and publishes it with
// one atomic store, so it never blocks Pick; calls to Update are serialised
// by a mutex that Pick never takes. A Picker must not be copied.
//
// The struct is laid out in whole cache lines (a size class the allocator
// aligns to 64 bytes): the snapshot pointer, which every Pick reads, shares
// its line only with the mutex that Update takes, and the counter, which
// every Pick writes, has a line of its own, so that neither the caller's
// data nor the counter's traffic evicts the pointer from a reader's cache.
type Picker struct {
	// Atomic: read by every Pick.
	snap atomic.Pointer[snapshot] // the published set; empty, never nil, after New
	// Guarded by itself: taken by Update only.
	mu sync.Mutex
	// Immutable after New: the first bad option, which Update returns.
	err error
	_   [64 - 8 - 8 - 16]byte

	// Atomic: written by every Pick.
	next atomic.Uint64 // position of the last pick; starts random
	_    [64 - 8]byte
}

// snapshot is an immutable published set.
type snapshot struct {
	entries []entry
	n       uint64 // len(entries)
}

// entry is one backend with its ID read once, so that Avoid costs a string
// comparison and no interface call.
type entry struct {
	b  balancer.Backend
	id string
}

var (
	_ balancer.Balancer = (*Picker)(nil)
)

// Option configures a Picker.
type Option interface {
	apply(*config)
}

type config struct {
	rand func() uint64
	err  error // the first bad option
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithRand sets the source of the random start position. The default is
// math/rand/v2's Uint64, so that a fleet of proxies started together does not
// send its first requests to the same backend. Tests and simulations pass a
// seeded source to make the sequence repeatable. A nil f is a bad option.
func WithRand(f func() uint64) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.bad(balancer.BadOption("WithRand", "nil", "a function"))
			return
		}
		c.rand = f
	})
}

// bad keeps err if it is the first bad option.
func (c *config) bad(err error) {
	if c.err == nil {
		c.err = err
	}
}

// New returns a round-robin Picker with an empty set; call Update to give it
// backends. A bad option (see balancer.ErrBadOption) makes every Update
// return its error, and the Picker stays empty.
func New(opts ...Option) *Picker {
	c := config{rand: rand.Uint64}
	for _, o := range opts {
		o.apply(&c)
	}
	p := &Picker{err: c.err}
	p.next.Store(c.rand() - 1) // Pick adds before it reads
	p.snap.Store(&snapshot{})
	return p
}

// Update replaces the set. It validates bs first (see balancer.Validate) and
// on error keeps the previous set. Weights are validated but not used: round
// robin gives every backend an equal share (use wrr for weights). The
// position carries on from the previous set, so an update does not send a
// burst to the first backend.
//
// Calls to Update are serialised, validation included: an Update called
// while another runs waits for it, so a slow Update that started first
// cannot overwrite a newer set.
//
// If an option given to New was bad, Update returns its error (wrapping
// balancer.ErrBadOption) every time and the set stays empty.
//
// Cost: O(n) and a few allocations.
func (p *Picker) Update(bs []balancer.Backend) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return fmt.Errorf("rr: update: %w", p.err)
	}
	set, err := balancer.NewSet(bs)
	if err != nil {
		return fmt.Errorf("rr: update: %w", err)
	}
	s := &snapshot{entries: make([]entry, set.Len()), n: uint64(set.Len())}
	for i, b := range set.Backends {
		s.entries[i] = entry{b: b, id: set.IDs[i]}
	}
	p.snap.Store(s)
	return nil
}

// Pick returns the next backend in turn. The request's Key and Attempt are
// ignored; if the turn falls on req.Avoid and the set has another backend,
// Pick returns the one after it. It returns balancer.ErrNoBackend when the
// set is empty.
//
// Cost: one atomic add and one division; no allocation, no lock.
// Pick fits the compiler's inlining budget (check with go build
// -gcflags=-m); keep it there. BenchmarkPick measures it inlined, beside
// its floor, BenchmarkAtomicAdd; BenchmarkPickInterface, through the
// interface, where it is not.
func (p *Picker) Pick(req balancer.Request) (balancer.Backend, error) {
	s := p.snap.Load()
	if s.n == 0 {
		return nil, balancer.ErrNoBackend
	}
	i := p.next.Add(1) % s.n
	if s.entries[i].id == req.Avoid { // never true for "": IDs are not empty
		// Take the next one; with a single backend that is the same one.
		if i++; i == s.n {
			i = 0
		}
	}
	return s.entries[i].b, nil
}
