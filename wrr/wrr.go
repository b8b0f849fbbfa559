package wrr

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/lbkit/lbkit/balancer"
)

// DefaultMaxSchedule is the schedule's default capacity in slots (see
// WithMaxSchedule): 2¹⁸ slots, 2 MiB at eight bytes a slot.
const DefaultMaxSchedule = 1 << 18

// maxLimit bounds WithMaxSchedule so that build's arithmetic, which reaches
// the square of the period, stays far inside int64 (2⁵² < 2⁶³). A set of
// more than 2²⁵ backends raises the capacity past it (to 2n); such a
// schedule would still index only its own backends, but past 2³¹ slots the
// squares could overflow and it might not be nginx's sequence.
const maxLimit = 1 << 26

// Picker picks backends in nginx's smooth weighted round-robin order. Create
// it with New; the zero value is not ready.
//
// Pick and Update are safe for concurrent use. Pick takes no lock and
// allocates nothing. Update builds the new schedule aside and publishes it
// with one atomic store, so it never blocks Pick; calls to Update are
// serialised by a mutex that Pick never takes. A Picker must not be copied.
//
// The struct is laid out in whole cache lines (a size class the allocator
// aligns to 64 bytes): the snapshot pointer, which every Pick reads, shares
// its line only with fields that Pick reads or Update alone writes, and the
// counter, which every Pick writes, has a line of its own.
type Picker struct {
	// Atomic: read by every Pick.
	snap atomic.Pointer[snapshot] // the published set; never nil after New
	// Immutable after New.
	limit int64 // most slots a schedule may hold, unless n is over half that
	// Guarded by itself: taken by Update only.
	mu sync.Mutex
	// Immutable after New: the first bad option, which Update returns.
	err error
	_   [64 - 8 - 8 - 8 - 16]byte

	// Atomic: written by every Pick.
	next atomic.Uint64 // position of the last pick; starts random
	_    [64 - 8]byte
}

// snapshot is an immutable published set and its schedule.
//
// An empty set is published as one slot pointing at an entry with a nil
// backend and the ID "", with err set to balancer.ErrNoBackend, so that Pick
// needs no test for it: both of its paths land on that entry and return
// err. That saving is what keeps Pick within the inlining budget.
type snapshot struct {
	entries []entry
	// sched is one period. Slot i holds, in its low 32 bits, the index of
	// the backend whose turn it is, and in its high 32 bits the index of the
	// backend of the next slot whose backend differs (see link): Pick's
	// answer when the first is to be avoided.
	sched  []uint64
	period uint64 // len(sched)
	err    error  // what Pick returns with entries[...].b: nil, but for the empty set
}

// entry is one backend with its ID read once, so that Avoid costs a string
// comparison and no interface call. It is 32 bytes, and kept so: Pick reads
// entries at random, and 1024 of them fill a 32 KiB L1 data cache.
type entry struct {
	b  balancer.Backend
	id string
}

// empty is the snapshot of an empty set (see snapshot): a period of 1, so
// that every pick lands on its one slot.
func empty() *snapshot {
	return &snapshot{
		entries: []entry{{}},
		sched:   []uint64{0},
		period:  1,
		err:     balancer.ErrNoBackend,
	}
}

var _ balancer.Balancer = (*Picker)(nil)

// Option configures a Picker, and a Reported too (every Option is a
// ReportedOption).
type Option interface {
	apply(*config)
	applyReported(*reportedConfig)
}

type config struct {
	rand  func() uint64
	limit int64
	err   error // the first bad option
}

// bad keeps err if it is the first bad option.
func (c *config) bad(err error) {
	if c.err == nil {
		c.err = err
	}
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

func (f optionFunc) applyReported(c *reportedConfig) { f(&c.config) }

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

// WithMaxSchedule sets how many slots the schedule may hold, which bounds
// its memory (eight bytes a slot) and the time Update spends building it.
// The default is DefaultMaxSchedule (2¹⁸). When the weights, divided by
// their greatest common divisor, sum to more, they are scaled down to fill
// exactly this many slots, and each backend's share of picks is then off its
// weight share by less than (k+1)/slots, where k is the number of backends
// held to one slot because their share is below about 1/slots (see the
// package documentation). For a set of more than slots/2 backends the
// capacity is 2n.
//
// slots must be in [1, 2²⁶]; another value is a bad option.
func WithMaxSchedule(slots int) Option {
	return optionFunc(func(c *config) {
		if slots < 1 || slots > maxLimit {
			c.bad(balancer.BadOption("WithMaxSchedule", slots, fmt.Sprintf("1 to %d", maxLimit)))
			return
		}
		c.limit = int64(slots)
	})
}

// New returns a smooth weighted round-robin Picker with an empty set; call
// Update to give it backends. A bad option (see balancer.ErrBadOption)
// makes every Update return its error, and the Picker stays empty.
func New(opts ...Option) *Picker {
	c := config{rand: rand.Uint64, limit: DefaultMaxSchedule}
	for _, o := range opts {
		o.apply(&c)
	}
	p := &Picker{limit: c.limit, err: c.err}
	p.next.Store(c.rand() - 1) // Pick adds before it reads
	p.snap.Store(empty())
	return p
}

// Update replaces the set. It validates bs first (see balancer.Validate) and
// on error keeps the previous set. It then computes one period of the
// smooth sequence for the weights (see the package documentation) and
// publishes it. The position carries on from the previous set, so an update
// does not send a burst to the first backend.
//
// Cost: O(n log n + P·min(n, log n)) time for a period of P slots (the sum
// of the weights divided by their gcd, or the schedule's capacity if that
// is smaller) and O(n + P) memory, of which 8·P bytes stay with the
// published set. BenchmarkUpdate measures it, at 1024 backends with
// weights up to 10000 (P = 2¹⁸) among others.
//
// Each weight is read once (balancer.NewSet): the value validated is the
// value scheduled. Calls to Update are serialised, validation included.
// If an option given to New was bad, Update returns its error (wrapping
// balancer.ErrBadOption) every time and the set stays empty.
func (p *Picker) Update(bs []balancer.Backend) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return fmt.Errorf("wrr: update: %w", p.err)
	}
	set, err := balancer.NewSet(bs)
	if err != nil {
		return fmt.Errorf("wrr: update: %w", err)
	}
	ws := make([]int64, set.Len())
	for i, w := range set.Weights {
		ws[i] = int64(w)
	}
	p.publish(set, ws)
	return nil
}

// publish builds the schedule of set with weights ws (each in [1,
// MaxWeight], one per backend) and publishes it. The caller serialises
// calls: Update holds p.mu, Reported its own mutex.
func (p *Picker) publish(set balancer.Set, ws []int64) {
	if set.Len() == 0 {
		p.snap.Store(empty())
		return
	}
	s := &snapshot{entries: make([]entry, set.Len())}
	for i, b := range set.Backends {
		s.entries[i] = entry{b: b, id: set.IDs[i]}
	}
	s.sched = build(slotCounts(ws, max(p.limit, 2*int64(set.Len()))))
	link(s.sched)
	s.period = uint64(len(s.sched))
	p.snap.Store(s)
}

// Pick returns the backend whose turn it is in the schedule. The request's
// Key and Attempt are ignored. If the turn falls on req.Avoid, Pick returns
// the backend of the next turn that is not req.Avoid's (the only backend,
// in a set of one). It returns balancer.ErrNoBackend when the set is empty.
//
// Cost: one atomic add, one division and two dependent loads (the
// slot, then the backend), whatever the number of backends or the weights;
// no allocation, no lock. Pick fits the compiler's inlining budget (cost 62
// of 80 with Go 1.26; check with go build -gcflags=-m=2), which saves the
// call where it is called on a *Picker; keep it there.
func (p *Picker) Pick(req balancer.Request) (balancer.Backend, error) {
	s := p.snap.Load()
	v := s.sched[p.next.Add(1)%s.period]
	e := &s.entries[uint32(v)]
	if e.id == req.Avoid { // never for "" but in the empty set: IDs are not empty
		e = &s.entries[v>>32]
	}
	return e.b, s.err
}

// Period returns the length of the schedule in use: the number of picks
// after which the sequence repeats, and the schedule's size in slots (eight
// bytes each). It is the sum of the weights divided by their greatest
// common divisor, or the capacity when that sum is larger (see
// WithMaxSchedule), and 0 for an empty set.
func (p *Picker) Period() int {
	s := p.snap.Load()
	if s.err != nil {
		return 0
	}
	return int(s.period)
}
