package lrt

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// Picker sends each request to the backend expected to answer it soonest.
// Create it with New; the zero value is not ready.
//
// Pick, Done, Update, Stats and InFlight are safe for concurrent use. Pick and Done
// take no lock and allocate nothing; Update builds the new set aside and
// publishes it with one atomic store, so it never blocks them. A Picker must
// not be copied.
type Picker struct {
	// Immutable after New.
	cfg config

	// Atomic.
	snap atomic.Pointer[snapshot] // the published set; empty, never nil, after New

	// Guarded by mu, which only Update takes.
	mu  sync.Mutex
	reg balancer.Registry[state]
	gen uint64 // counts updates; see state.gen
}

// snapshot is a published set: immutable but for the tried cursor.
type snapshot struct {
	entries []entry
	states  balancer.States[state] // for Done's lookup by ID

	// fresh lists the entries whose estimate was provisional when the set
	// was published (every entry at start-up, newcomers and returning
	// backends later), in a random rotation. The first picks of the set
	// go to them in turn, one each, unless a measurement came first: an
	// estimate that is only a guess must be put to the test, or a backend
	// guessed slower than the measured ones would wait for its guess to
	// decay, tens of seconds at the default τ, before its first request.
	fresh []int32
	// tried counts the picks that took a ticket for fresh; once it reaches
	// len(fresh), Pick only reads it.
	tried atomic.Uint64
}

// entry is one backend with its ID read once, so that Avoid costs a string
// comparison and no interface call, and its state, so that Pick reaches it
// without a map.
type entry struct {
	b  balancer.Backend
	id string
	st *state
}

var (
	_ balancer.Balancer        = (*Picker)(nil)
	_ balancer.Feedback        = (*Picker)(nil)
	_ balancer.InFlightCounter = (*Picker)(nil)
)

// Mode is the rule that turns estimates into a choice.
type Mode int

const (
	// Balanced, the default, picks the backend with the lowest latency
	// estimate × (requests in flight + 1): the time a new request would
	// wait if it queued behind the ones already there. Among four
	// backends or fewer it compares them all; in larger sets it compares
	// two drawn at random (power of two choices).
	Balanced Mode = iota
	// Naive picks the backend with the lowest latency estimate, ignoring
	// load. It herds: the fastest backend gets everything until its own
	// latency rises, then the next one does. It is kept to show why the
	// default exists (see the package documentation), not for production.
	Naive
)

// String returns "balanced" or "naive".
func (m Mode) String() string {
	switch m {
	case Balanced:
		return "balanced"
	case Naive:
		return "naive"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// scanMax is the largest set Balanced compares in full. With two choices a
// backend can win at most the share of pairs it is drawn in, 2/n of picks,
// which at four backends caps the fastest at half the traffic even when it
// could take more (TestScanOrTwoChoices). The scan's cost grows with the
// set and two choices' does not (BenchmarkScanOrTwoChoices): four is
// where, when the value was chosen, the scan stopped paying.
const scanMax = 4

// Defaults.
const (
	// DefaultDecay is τ, the time constant of the estimate: Finagle's and
	// Linkerd's default.
	DefaultDecay = 10 * time.Second
	// DefaultInitial is the provisional estimate of backends when none in
	// the set has been measured yet.
	DefaultInitial = 100 * time.Millisecond
	// DefaultErrorFactor multiplies the success estimate to make the
	// latency an error is recorded as, once per consecutive error.
	DefaultErrorFactor = 2.0
)

// maxPenalty caps the multiplier that consecutive errors reach, so that a
// backend that failed a hundred times in a row is tried again after some
// τ·ln(64) ≈ 4τ of decay, not never.
const maxPenalty = 64

// Option configures a Picker.
type Option interface {
	apply(*config)
}

type config struct {
	mode    Mode
	scanMax int // sets up to this size are compared in full
	rand    func() uint64
	clock   func() time.Time // nil: the monotonic clock, read by time.Since
	tau     time.Duration
	initial float64 // nanoseconds
	factor  float64
	err     error // the first bad option, which Update returns

	// Derived in New.
	shift   uint          // a tick is 2^shift ns
	perTick float64       // tick/τ: the decay exponent of one tick
	penalty []float64     // penalty[k]: the multiplier after k consecutive errors
	ticks   func() uint32 // the clock, in ticks since New
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// bad keeps err if it is the first bad option.
func (c *config) bad(err error) {
	if c.err == nil {
		c.err = err
	}
}

// WithMode sets the selection rule. The default is Balanced. A Mode other
// than Balanced and Naive is a bad option.
func WithMode(m Mode) Option {
	return optionFunc(func(c *config) {
		if m != Balanced && m != Naive {
			c.bad(balancer.BadOption("WithMode", m, "Balanced or Naive"))
			return
		}
		c.mode = m
	})
}

// WithRand sets the random source for the power of two choices and for
// breaking ties. The default is math/rand/v2's Uint64. Tests and simulations
// pass a seeded source to make choices repeatable. A nil f is a bad option.
func WithRand(f func() uint64) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.bad(balancer.BadOption("WithRand", "nil", "a function"))
			return
		}
		c.rand = f
	})
}

// WithClock sets the clock that Done and Update read (Pick reads none). The
// default is the monotonic clock. Simulations and tests pass a clock of
// their own to drive time; it should not step back, and if it does, the
// time between two updates counts as zero. A nil now is a bad option.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) {
		if now == nil {
			c.bad(balancer.BadOption("WithClock", "nil", "a function"))
			return
		}
		c.clock = now
	})
}

// WithDecay sets τ, the time constant of the estimate: a response's weight
// in it falls by a factor e every τ, and an idle backend's estimate decays
// toward zero by the same factor. The default is DefaultDecay (10 s). A
// τ below a millisecond is a bad option (the estimate's clock ticks in
// τ/2¹⁴; see New).
func WithDecay(tau time.Duration) Option {
	return optionFunc(func(c *config) {
		if tau < time.Millisecond {
			c.bad(balancer.BadOption("WithDecay", tau, "at least 1ms"))
			return
		}
		c.tau = tau
	})
}

// WithInitial sets the provisional estimate given to backends when no
// backend of the set has been measured, at start-up usually; later
// additions get the mean of the measured estimates instead. The default
// is DefaultInitial (100 ms). d must be above zero (with an estimate of
// zero, unmeasured backends would take every request until they answered)
// and at most the cap on every estimate (2⁴³ ns, about 2 h 26 min);
// another d is a bad option.
func WithInitial(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 || float64(d) > maxEstimate {
			c.bad(balancer.BadOption("WithInitial", d, "more than 0 and at most "+time.Duration(maxEstimate).String()))
			return
		}
		c.initial = float64(d)
	})
}

// WithErrorFactor sets the penalty for a failed request: it is recorded as
// a response that took factor^k × max(its latency, the backend's success
// estimate), k being the number of failures in a row. The multiplier
// stops growing at 64 or at k = 16, whichever comes first: with the default
// factor at 64 (k = 6); with a factor of 1.1 at 1.1¹⁶ ≈ 4.6.
// The default is DefaultErrorFactor (2). A factor of 1 records a failure
// as a response no faster than the backend's usual, so that it never
// lowers the estimate; a factor below 1, NaN or an infinity is a bad
// option.
func WithErrorFactor(f float64) Option {
	return optionFunc(func(c *config) {
		if !(f >= 1) || math.IsInf(f, 0) {
			c.bad(balancer.BadOption("WithErrorFactor", f, "a finite number, 1 or more"))
			return
		}
		c.factor = f
	})
}

// New returns a Picker with an empty set; call Update to give it backends.
// A bad option (see balancer.ErrBadOption) makes every Update return its
// error, and the Picker stays empty.
func New(opts ...Option) *Picker {
	c := config{
		scanMax: scanMax,
		rand:    rand.Uint64,
		tau:     DefaultDecay,
		initial: float64(DefaultInitial),
		factor:  DefaultErrorFactor,
	}
	for _, o := range opts {
		o.apply(&c)
	}
	// A tick is the largest power of two of nanoseconds not above τ/2¹⁴
	// (2¹⁹ ns ≈ 0.52 ms for τ = 10 s): fine enough that one tick moves
	// the estimate by under 1/8192 of a gap, coarse enough that 32 bits of
	// ticks span more than 2¹⁷·τ (26 days at the default).
	c.shift = uint(bits.Len64(uint64(c.tau)>>14) - 1) // τ ≥ 1 ms: τ>>14 ≥ 61
	c.perTick = float64(uint64(1)<<c.shift) / float64(c.tau)
	c.penalty = []float64{1}
	for m := c.factor; len(c.penalty) < 17; m *= c.factor {
		c.penalty = append(c.penalty, min(m, maxPenalty))
		if m >= maxPenalty {
			break
		}
	}
	c.ticks = tickClock(c.clock, c.shift)
	p := &Picker{cfg: c, gen: 1} // above the zero gen of new states
	p.snap.Store(&snapshot{})
	return p
}

// tickClock returns a function that reads the time in ticks since now.
// Without a clock of the user's, it reads only the monotonic clock
// (time.Since of a time with a monotonic reading), about half the cost of
// time.Now. Times before the start give negative ticks, which wrap; age
// treats them as no time at all.
func tickClock(clock func() time.Time, shift uint) func() uint32 {
	if clock == nil {
		epoch := time.Now()
		return func() uint32 { return uint32(int64(time.Since(epoch)) >> shift) }
	}
	epoch := clock()
	return func() uint32 { return uint32(int64(clock().Sub(epoch)) >> shift) }
}

// Update replaces the set. It validates bs first (see balancer.Validate) and
// on error keeps the previous set. Weights are validated but not used: the
// estimates say what each backend can take.
//
// What was learned about a backend (its estimate, its requests in flight)
// is kept by ID, across updates and while it is out of the set for a while.
// A backend with no measurement gets a provisional estimate, stamped now:
// the mean of the estimates (decayed to now) of the measured backends that
// stay in the set, or the WithInitial value when there are none. Its first
// Done replaces it. The mean makes a newcomer look like an average
// backend, so that it gets an average backend's share of requests in
// flight until it has answered once: not all of them, as an estimate of
// zero would give it, nor none.
//
// A backend that comes back after an absence keeps its estimate unless,
// decayed by the absence, it has fallen below that mean; then it starts
// from the mean as a newcomer does. Without that rule a backend ejected
// for a minute by a health check would come back looking nearly free and
// draw every request until it answered. An estimate older than 2³⁰ ticks
// (6.5 days at the default τ) counts as no measurement.
//
// Cost: O(n) plus the registry's O(live + retired), a few allocations, and
// one clock read.
func (p *Picker) Update(bs []balancer.Backend) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg.err != nil {
		return fmt.Errorf("lrt: update: %w", p.cfg.err)
	}
	set, err := balancer.NewSet(bs)
	if err != nil {
		return fmt.Errorf("lrt: update: %w", err)
	}
	states := p.reg.Sync(set.Backends)
	now := p.cfg.ticks()
	// A state whose gen is the previous update's was in the previous set.
	stayed := p.gen
	p.gen++
	initial, sum, n := p.cfg.initial, 0.0, 0
	for i := range states.Len() {
		st := states.At(i)
		if w := st.est.Load(); st.gen == stayed && measured(w) && !stale(w, now) {
			sum += p.cfg.decayed(w, now)
			n++
		}
	}
	if n > 0 {
		initial = sum / float64(n)
	}
	s := &snapshot{entries: make([]entry, set.Len()), states: states}
	for i, b := range set.Backends {
		st := states.At(i)
		w := st.est.Load()
		fresh := w == 0 || stale(w, now)
		back := st.gen != stayed && (!measured(w) || p.cfg.decayed(w, now) < initial)
		// A CAS, not a store: a Done through the previous snapshot may be
		// updating a state that comes back; its sample wins.
		if (fresh || back) && st.est.CompareAndSwap(w, pack(initial, now, true)) && fresh {
			st.ok.Store(0) // nothing learned, or nothing worth keeping
		}
		st.gen = p.gen
		s.entries[i] = entry{b: b, id: set.IDs[i], st: st}
		if !measured(st.est.Load()) {
			s.fresh = append(s.fresh, int32(i))
		}
	}
	if len(s.fresh) > 1 {
		// A random rotation, so that a fleet of proxies started together
		// does not send every first request to the same backend.
		k := int(p.cfg.rand() % uint64(len(s.fresh)))
		s.fresh = append(s.fresh[k:], s.fresh[:k]...)
	}
	p.snap.Store(s)
	return nil
}

// stale reports whether an est word was set 2³⁰ ticks ago or more: long
// enough that it has decayed to nothing, and half the range over which
// cheaper can compare stamps. (A state retired for a multiple of 2³² ticks,
// 26 days at the default, and revived escapes this and is read as recent;
// its next Done corrects it.)
func stale(w uint64, now uint32) bool { return age(now, stamp(w)) >= 1<<30 }

// Pick returns the backend with the lowest cost: in the Balanced mode the
// latency estimate × (requests in flight + 1), in the Naive mode the
// estimate alone, each estimate decayed for the time since it was last
// updated. Balanced compares all backends of sets up to four and two drawn
// at random in larger ones; Naive compares all. Ties go to a random one.
// The request's Key and Attempt are ignored; a backend whose ID is
// req.Avoid is skipped when the set has another. Pick counts the request as
// in flight on the backend it returns until Done. It returns
// balancer.ErrNoBackend when the set is empty.
//
// Cost, Balanced: one random number, two or four atomic loads of state and
// as many of in-flight counts, one exponential per pair of backends whose
// estimates were last updated at different ticks, one atomic add. Naive:
// O(n), with up to n−1 exponentials. No lock, no allocation, no clock.
func (p *Picker) Pick(req balancer.Request) (balancer.Backend, error) {
	s := p.snap.Load()
	var e *entry
	switch n := len(s.entries); {
	case n == 0:
		return nil, balancer.ErrNoBackend
	case n == 1:
		e = &s.entries[0]
	default:
		if s.tried.Load() < uint64(len(s.fresh)) {
			e = s.untried(req.Avoid) // nil once the tickets run out
		}
		if e == nil {
			e = p.choose(s.entries, req.Avoid)
		}
	}
	e.st.inflight.Inc()
	return e.b, nil
}

// choose is the selection proper: two choices in larger sets in the
// Balanced mode, else a scan.
func (p *Picker) choose(es []entry, avoid string) *entry {
	if len(es) > p.cfg.scanMax && p.cfg.mode == Balanced {
		return p.twoChoices(es, avoid)
	}
	return p.scan(es, avoid)
}

// untried takes tickets for the fresh entries until it finds one still
// unmeasured that is not avoid, and returns it; nil once the tickets run
// out. A backend measured since the set was published (through a request
// picked before) needs no trial and is passed over.
func (s *snapshot) untried(avoid string) *entry {
	for {
		t := s.tried.Add(1) - 1
		if t >= uint64(len(s.fresh)) {
			return nil
		}
		e := &s.entries[s.fresh[t]]
		if e.id != avoid && !measured(e.st.est.Load()) {
			return e
		}
	}
}

// cost returns what Pick compares for one backend, and its stamp.
func (c *config) cost(st *state) (float64, uint32) {
	w := st.est.Load()
	v := value(w)
	if c.mode == Balanced {
		v *= float64(st.inflight.Load() + 1)
	}
	return v, stamp(w)
}

// twoChoices draws two distinct backends and returns the cheaper:
// Mitzenmacher's power of two choices, which keeps the busiest backend
// within O(log log n) of the mean while reading two states, not n.
func (p *Picker) twoChoices(es []entry, avoid string) *entry {
	r := p.cfg.rand()
	n := uint64(len(es))
	// Two indices from the two halves of r by multiply-shift (Lemire's
	// fastrange), j from n−1 values and shifted past i so that i ≠ j.
	i := uint64(uint32(r)) * n >> 32
	j := (r >> 32) * (n - 1) >> 32
	if j >= i {
		j++
	}
	a, b := &es[i], &es[j]
	switch avoid {
	case a.id:
		return b
	case b.id:
		return a
	}
	ca, sa := p.cfg.cost(a.st)
	cb, sb := p.cfg.cost(b.st)
	// The winner is a coin toss when loads are even: select it with a
	// conditional move rather than a branch that would be mispredicted.
	if p.cfg.cheaper(ca, sa, cb, sb) {
		i = j
	}
	return &es[i]
}

// scan compares every backend but the one to avoid, starting at a random
// one so that ties (a fresh set, where all estimates are alike) are broken
// at random rather than always for the first.
//
// It decays every cost to the newest stamp in the set, which a first pass
// finds. Comparing each backend with the best so far instead (cheaper)
// would chain every exponential on the one before; decayed to a common
// stamp they are independent, and the processor overlaps them.
func (p *Picker) scan(es []entry, avoid string) *entry {
	newest := stamp(es[0].st.est.Load())
	for i := range es {
		if s := stamp(es[i].st.est.Load()); int32(s-newest) > 0 {
			newest = s
		}
	}
	n := uint64(len(es))
	i := uint64(uint32(p.cfg.rand())) * n >> 32
	// Costs are compared as the bits of non-negative float64s, which order
	// like the numbers, so that the compiler can select the best with
	// conditional moves: with even loads the winner moves from pick to
	// pick, and a branch on it would often be mispredicted.
	best, bc := uint64(0), uint64(math.MaxUint64)
	for range n {
		if e := &es[i]; e.id != avoid {
			c, s := p.cfg.cost(e.st)
			// age is 0 for a stamp a concurrent Done moved past newest.
			c *= expNeg(float64(age(newest, s)) * p.cfg.perTick)
			if cb := math.Float64bits(c); cb < bc {
				best, bc = i, cb
			}
		}
		if i++; i == n {
			i = 0
		}
	}
	return &es[best]
}

// Done records a finished request: it takes the request off the backend's
// in-flight count and folds its latency into the estimate (see the package
// documentation); a failed request counts as a slow one. An abandoned
// request (r.Abandoned()) and a success with no latency (Result{}) only
// leave the in-flight count: they teach nothing about the backend. Done
// for nil, for a backend never in the set, or for one removed long ago is
// a no-op; for one removed recently it still updates the kept state.
//
// Cost: a map lookup by ID, one clock read, one exponential, and a
// compare-and-swap that retries only when another Done for the same
// backend lands in between. No lock, no allocation.
func (p *Picker) Done(b balancer.Backend, r balancer.Result) {
	st := p.snap.Load().states.Lookup(b)
	if st == nil {
		return
	}
	st.inflight.Dec()
	switch {
	case r.Err == nil && r.Latency <= 0, r.Abandoned():
		// Nothing measured, or given up on: no sample (see balancer.Result).
		// A zero latency taken as a sample would make the backend look
		// free and draw every request.
		return
	}
	st.observe(p.cfg.ticks(), float64(max(r.Latency, 0)), r.Err != nil, &p.cfg)
}

// Stats is what a Picker knows about one backend.
type Stats struct {
	// Latency is the estimate as Pick would weigh it now: the learned
	// value decayed for the time since it was last updated.
	Latency time.Duration
	// Measured is false while Latency is provisional: the backend has not
	// reported a Done since it joined.
	Measured bool
	// InFlight is the number of requests picked and not yet Done.
	InFlight int64
}

// Stats returns what the picker knows about the backend with b's ID, and
// false if it knows nothing (b is nil, never was in the set, or left it
// long ago). It is meant for metrics and tests.
//
// Cost: a map lookup and one clock read.
func (p *Picker) Stats(b balancer.Backend) (Stats, bool) {
	st := p.snap.Load().states.Lookup(b)
	if st == nil {
		return Stats{}, false
	}
	w := st.est.Load()
	return Stats{
		Latency:  time.Duration(p.cfg.decayed(w, p.cfg.ticks())),
		Measured: measured(w),
		InFlight: st.inflight.Load(),
	}, true
}

// InFlight returns the number of requests Pick has counted on the backend
// with this ID and Done has not yet counted down (Stats' InFlight), never
// below zero; 0 for an unknown ID. A recently removed backend still
// reports its count. It is the balancer.InFlightCounter accessor, for
// metrics and tests: one map read, no allocation.
func (p *Picker) InFlight(id string) int64 {
	if st := p.snap.Load().states.LookupID(id); st != nil {
		return st.inflight.Load()
	}
	return 0
}
