package prequal

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// Defaults; the package documentation sets each against the paper.
const (
	// PoolSize is the most probe answers the pool holds.
	PoolSize = 16
	// DefaultQuantile is Q_RIF: a probed backend is hot when its
	// requests in flight are above this quantile of the pool's.
	DefaultQuantile = 0.84
	// DefaultProbeRate is how many probes each pick asks for, on average.
	DefaultProbeRate = 1.0
	// DefaultReuse is how many picks one probe answer may serve.
	DefaultReuse = 4
	// DefaultReportExpiry is how long a probe answer stays in the pool.
	DefaultReportExpiry = time.Second
	// DefaultProbeTimeout bounds one probe.
	DefaultProbeTimeout = 500 * time.Millisecond
	// DefaultTick is how often the probe loop sends the probes asked for
	// and drops stale answers.
	DefaultTick = 2 * time.Millisecond
)

// maxProbeRate bounds WithProbeRate: past a few probes a pick, probing
// costs more than the requests it steers.
const maxProbeRate = 16

// rateUnit is the fixed point of the probe demand: a pick adds
// rate·rateUnit, and each probe sent takes rateUnit.
const rateUnit = 1 << 16

// ProbeFunc asks backend b how loaded it is: its requests in flight
// (Load.InFlight) and its latency estimate for a request arriving now
// (Load.Latency). lbhttp's Prober.Probe is one, for backends behind
// lbhttp's Reporter. It must honour ctx, which carries the probe timeout,
// and be safe for concurrent use.
type ProbeFunc func(ctx context.Context, b balancer.Backend) (balancer.Load, error)

// Picker picks by recent probes of the backends, after Prequal: among the
// backends of the pool whose requests in flight are not in the top of
// the pool (cold), the one with the lowest latency; if every one is hot,
// the one with the fewest requests in flight. Probes are sent by a
// background loop, asynchronously, at a rate tied to the request rate;
// Pick only reads their answers. Create it with New; the zero value is not
// ready.
//
// Pick, Done, Update, Stats and InFlight are safe for concurrent use.
// Pick and Done take no lock and allocate nothing; Pick sends nothing and
// reads no clock. A Picker must not be copied.
type Picker struct {
	// Immutable after New.
	cfg config

	// Atomic.
	snap   atomic.Pointer[snapshot]        // the published set; empty, never nil, after New
	pool   [PoolSize]atomic.Pointer[probe] // answers; nil slots are empty
	demand atomic.Uint64                   // probes asked for and not sent, in rateUnit
	sent   atomic.Uint64                   // probes sent, for Stats
	failed atomic.Uint64                   // probes that failed

	// Guarded by mu, which only Update takes.
	mu  sync.Mutex
	reg balancer.Registry[state]

	// The probe loop: Start and Close.
	life balancer.Lifecycle
}

// state is this picker's own count of requests in flight on a backend,
// kept by ID across updates.
type state struct {
	balancer.InFlight
}

// snapshot is a published set.
type snapshot struct {
	entries []entry
	states  balancer.States[state]
}

// entry is one backend with its ID read once and its state.
type entry struct {
	b  balancer.Backend
	id string
	st *state
}

// probe is one probe answer in the pool. Immutable but for uses.
type probe struct {
	st    *state  // whose answer
	pos   int     // its index in the snapshot it was made for; checked on use
	rif   float64 // requests in flight the backend reported
	lat   float64 // its latency estimate, in nanoseconds
	local int64   // this picker's requests in flight on it when the answer came
	at    int64   // when the answer came, in clock nanoseconds
	uses  atomic.Int32
}

var (
	_ balancer.Balancer        = (*Picker)(nil)
	_ balancer.Feedback        = (*Picker)(nil)
	_ balancer.InFlightCounter = (*Picker)(nil)
	_ balancer.Starter         = (*Picker)(nil) // so a decorator in front starts it
	_ io.Closer                = (*Picker)(nil) // and closes it
)

// Option configures a Picker.
type Option interface {
	apply(*config)
}

type config struct {
	probe    ProbeFunc
	quantile float64
	rate     uint64 // probes per pick, in rateUnit
	reuse    int32
	maxAge   time.Duration
	timeout  time.Duration
	tick     time.Duration
	rand     func() uint64
	clock    func() time.Time
	err      error // the first bad option, which Update returns
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// bad keeps err if it is the first bad option.
func (c *config) bad(err error) {
	if c.err == nil {
		c.err = err
	}
}

// WithQuantile sets Q_RIF, the quantile of the pool's requests in flight
// above which a backend is hot. The default is DefaultQuantile (0.84).
// 1 makes every backend cold, so that latency alone decides; 0 makes hot
// all but the least loaded, so that requests in flight decide. A q
// outside [0, 1], or NaN, is a bad option.
func WithQuantile(q float64) Option {
	return optionFunc(func(c *config) {
		if !(q >= 0 && q <= 1) {
			c.bad(balancer.BadOption("WithQuantile", q, "0 to 1"))
			return
		}
		c.quantile = q
	})
}

// WithProbeRate sets how many probes each pick asks for, on average; 0.5
// is one probe every other pick. The default is DefaultProbeRate (1). An
// r outside [0.01, 16], or NaN, is a bad option.
func WithProbeRate(r float64) Option {
	return optionFunc(func(c *config) {
		if !(r >= 0.01 && r <= maxProbeRate) {
			c.bad(balancer.BadOption("WithProbeRate", r, fmt.Sprintf("0.01 to %d", maxProbeRate)))
			return
		}
		c.rate = uint64(r * rateUnit)
	})
}

// WithReuse sets how many picks one probe answer may serve before it
// leaves the pool. The default is DefaultReuse (4). An n outside
// [1, 2³¹-1] is a bad option.
func WithReuse(n int) Option {
	return optionFunc(func(c *config) {
		if n < 1 || n > math.MaxInt32 {
			c.bad(balancer.BadOption("WithReuse", n, fmt.Sprintf("1 to %d", math.MaxInt32)))
			return
		}
		c.reuse = int32(n)
	})
}

// WithReportExpiry sets how long a probe answer, the backend's report,
// stays in the pool. The default is DefaultReportExpiry (1 s). A d below
// a millisecond is a bad option.
func WithReportExpiry(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < time.Millisecond {
			c.bad(balancer.BadOption("WithReportExpiry", d, "at least 1ms"))
			return
		}
		c.maxAge = d
	})
}

// WithProbeTimeout bounds each probe. The default is DefaultProbeTimeout
// (500 ms). A d of zero or less is a bad option.
func WithProbeTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.bad(balancer.BadOption("WithProbeTimeout", d, "more than 0"))
			return
		}
		c.timeout = d
	})
}

// WithTick sets how often the probe loop sends the probes asked for and
// drops stale answers: a probe leaves at most a tick after the pick that
// asked for it. The default is DefaultTick (2 ms). A d below 100 µs is a
// bad option: a loop that wakes more often costs more CPU than its probes
// save.
func WithTick(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d < minTick {
			c.bad(balancer.BadOption("WithTick", d, "at least "+minTick.String()))
			return
		}
		c.tick = d
	})
}

// minTick is the shortest tick WithTick takes.
const minTick = 100 * time.Microsecond

// WithRand sets the random source for the backends to probe and for picks
// made without probes. The default is math/rand/v2's Uint64. It must be
// safe for concurrent use. A nil f is a bad option.
func WithRand(f func() uint64) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.bad(balancer.BadOption("WithRand", "nil", "a function"))
			return
		}
		c.rand = f
	})
}

// WithClock sets the clock probe answers are stamped and aged by (Pick
// reads none). The default is the monotonic clock. A nil now is a bad
// option.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) {
		if now == nil {
			c.bad(balancer.BadOption("WithClock", "nil", "a function"))
			return
		}
		c.clock = now
	})
}

// New returns a probing Picker with an empty set, probing with probe; call
// Update to give it backends, and Start to probe. Without Start (and after
// Close) nothing is probed and, once the pool is empty, picks fall back to
// two random choices on this picker's in-flight counts. With a nil probe,
// Start's loop sends nothing, and the pool fills only through Observe (a
// caller that probes by itself, after Step). A bad option (see
// balancer.ErrBadOption) makes every Update return its error, and the
// Picker stays empty.
func New(probe ProbeFunc, opts ...Option) *Picker {
	c := config{
		probe:    probe,
		quantile: DefaultQuantile,
		rate:     uint64(DefaultProbeRate * rateUnit),
		reuse:    DefaultReuse,
		maxAge:   DefaultReportExpiry,
		timeout:  DefaultProbeTimeout,
		tick:     DefaultTick,
		rand:     rand.Uint64,
	}
	for _, o := range opts {
		o.apply(&c)
	}
	if c.clock == nil {
		epoch := time.Now()
		c.clock = func() time.Time { return epoch.Add(time.Since(epoch)) }
	}
	p := &Picker{cfg: c}
	p.snap.Store(&snapshot{})
	return p
}

// ticks returns the clock in nanoseconds.
func (p *Picker) ticks() int64 { return p.cfg.clock().UnixNano() }

// Update replaces the set. It validates bs first (see balancer.Validate)
// and on error keeps the previous set. Weights are validated and not
// used: probes say what each backend can take. Requests in flight are
// kept by ID; probe answers for backends that stay are kept (moved to
// their new place), those for backends that left are dropped.
//
// Cost: O(n) plus the registry's bookkeeping, and a few allocations.
func (p *Picker) Update(bs []balancer.Backend) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cfg.err != nil {
		return fmt.Errorf("prequal: update: %w", p.cfg.err)
	}
	set, err := balancer.NewSet(bs)
	if err != nil {
		return fmt.Errorf("prequal: update: %w", err)
	}
	states := p.reg.Sync(set.Backends)
	s := &snapshot{entries: make([]entry, set.Len()), states: states}
	pos := make(map[*state]int, set.Len())
	for i, b := range set.Backends {
		s.entries[i] = entry{b: b, id: set.IDs[i], st: states.At(i)}
		pos[s.entries[i].st] = i
	}
	p.snap.Store(s)
	for i := range p.pool {
		old := p.pool[i].Load()
		if old == nil {
			continue
		}
		var moved *probe
		if j, ok := pos[old.st]; ok {
			moved = &probe{st: old.st, pos: j, rif: old.rif, lat: old.lat, local: old.local, at: old.at}
			moved.uses.Store(old.uses.Load())
		}
		p.pool[i].CompareAndSwap(old, moved) // a probe answer may have taken the slot meanwhile
	}
	return nil
}

// candidate is a usable probe answer as Pick weighs it.
type candidate struct {
	slot int
	pr   *probe
	rif  float64
}

// Pick returns a backend by the hot-cold rule over the pool's answers for
// backends of the current set other than req.Avoid: a backend is hot when
// its requests in flight, as probed plus those this picker has added since,
// are above the Q_RIF quantile of the pool's; among the cold, the lowest
// latency estimate wins (ties: fewer in flight); if all are hot, the
// fewest in flight. With no usable answer it takes the one of two random
// backends with fewer of this picker's requests in flight. It counts
// the request in flight and the answer's use, and asks the probe loop for
// more probes (WithProbeRate). It returns balancer.ErrNoBackend when the
// set is empty.
//
// Cost: one atomic add for the probe demand, up to 16 atomic loads of the
// pool and as many of in-flight counts, an insertion sort of at most 16
// numbers, one atomic add for the use (and a compare-and-swap when the
// answer is used up), one for the count. No lock, no allocation, no clock,
// no I/O.
func (p *Picker) Pick(req balancer.Request) (balancer.Backend, error) {
	s := p.snap.Load()
	n := len(s.entries)
	switch n {
	case 0:
		return nil, balancer.ErrNoBackend
	case 1:
		e := &s.entries[0]
		e.st.Inc()
		p.ask()
		return e.b, nil
	}
	p.ask()
	// The newest usable answer of each backend in the pool.
	var cands [PoolSize]candidate
	m := 0
	for i := range p.pool {
		pr := p.pool[i].Load()
		if pr == nil || pr.pos >= n {
			continue
		}
		e := &s.entries[pr.pos]
		if e.st != pr.st || e.id == req.Avoid {
			continue // made for a set before, or the backend to avoid
		}
		j := 0
		for j < m && cands[j].pr.st != pr.st {
			j++
		}
		if j < m && cands[j].pr.at >= pr.at {
			continue // an older answer of a backend already in
		}
		if j == m {
			m++
		}
		cands[j] = candidate{slot: i, pr: pr, rif: pr.rif + float64(max(e.st.Load()-pr.local, 0))}
	}
	if m == 0 {
		return p.fallback(s, req.Avoid), nil
	}
	var rifs [PoolSize]float64
	for i := range cands[:m] {
		rifs[i] = cands[i].rif
	}
	hot := quantile(rifs[:m], p.cfg.quantile)
	best, bestCold := 0, cands[0].rif <= hot
	for i := 1; i < m; i++ {
		if cold := cands[i].rif <= hot; preferred(&cands[i], cold, &cands[best], bestCold) {
			best, bestCold = i, cold
		}
	}
	c := &cands[best]
	if c.pr.uses.Add(1) >= p.cfg.reuse {
		p.pool[c.slot].CompareAndSwap(c.pr, nil)
	}
	e := &s.entries[c.pr.pos]
	e.st.Inc()
	return e.b, nil
}

// preferred is the hot-cold rule: whether c (cold or not) wins over b. A
// cold backend beats a hot one; between cold ones the lower latency wins,
// then the fewer in flight; between hot ones the fewer in flight.
func preferred(c *candidate, cold bool, b *candidate, bCold bool) bool {
	switch {
	case cold != bCold:
		return cold
	case cold && c.pr.lat != b.pr.lat:
		return c.pr.lat < b.pr.lat
	}
	return c.rif < b.rif
}

// ask adds one pick's worth of probes to the demand.
func (p *Picker) ask() { p.demand.Add(p.cfg.rate) }

// quantile returns the q-quantile of xs (nearest rank below: the
// ⌊q·(n−1)⌋-th smallest), sorting them in place. n is at most PoolSize,
// and an insertion sort of 16 numbers is cheaper than anything cleverer.
func quantile(xs []float64, q float64) float64 {
	for i := 1; i < len(xs); i++ {
		for j := i; j > 0 && xs[j] < xs[j-1]; j-- {
			xs[j], xs[j-1] = xs[j-1], xs[j]
		}
	}
	return xs[int(q*float64(len(xs)-1))]
}

// fallback counts and returns, for a pick with no usable answer, the one
// of two backends drawn at random (other than avoid; n ≥ 2) with fewer of
// this picker's requests in flight: the power of two choices on what the
// picker knows without probes, rather than a blind draw, so that a pool
// that runs dry between two turns of the loop does not scatter requests.
func (p *Picker) fallback(s *snapshot, avoid string) balancer.Backend {
	r := p.cfg.rand()
	n := uint64(len(s.entries))
	i := uint64(uint32(r)) * n >> 32
	j := (r >> 32) * (n - 1) >> 32
	if j >= i {
		j++
	}
	a, b := &s.entries[i], &s.entries[j]
	switch {
	case a.id == avoid:
		a = b
	case b.id == avoid:
	case b.st.Load() < a.st.Load():
		a = b
	}
	a.st.Inc()
	return a.b
}

// Done takes the request off the backend's in-flight count. The Result is
// not read: latency and load come from probes. Done for nil, for a
// backend never in the set, or for one removed long ago does nothing.
//
// Cost: one map read by ID and one atomic compare-and-swap. No lock, no
// allocation.
func (p *Picker) Done(b balancer.Backend, _ balancer.Result) {
	if st := p.snap.Load().states.Lookup(b); st != nil {
		st.Dec()
	}
}

// Stats is what a Picker has done and holds, for metrics and tests.
type Stats struct {
	// Pool is the number of probe answers in the pool.
	Pool int
	// Sent and Failed count the probes sent since New, and those that
	// failed (an error, a timeout).
	Sent, Failed uint64
}

// Stats returns the pool's size and the probe counts.
func (p *Picker) Stats() Stats {
	st := Stats{Sent: p.sent.Load(), Failed: p.failed.Load()}
	for i := range p.pool {
		if p.pool[i].Load() != nil {
			st.Pool++
		}
	}
	return st
}

// InFlight returns the requests this picker has in flight on the backend
// with this ID (0 for an unknown one).
func (p *Picker) InFlight(id string) int64 {
	if st := p.snap.Load().states.LookupID(id); st != nil {
		return st.Load()
	}
	return 0
}

// Start runs the probe loop until ctx ends or Close is called: every tick
// it drops answers older than the maximum age and sends the probes the
// picks asked for, each in its own goroutine, at most 16 at a time (asks
// beyond those are dropped: a backend slow to answer probes is slow). It
// returns an error wrapping balancer.ErrStarted if called twice, or
// balancer.ErrClosed after Close (balancer.Lifecycle's rules).
//
// The loop allocates (a goroutine, a context and an answer per probe, and
// what the ProbeFunc allocates); Pick and Done never do.
func (p *Picker) Start(ctx context.Context) error {
	if err := p.life.Start(ctx, p.loop); err != nil {
		return fmt.Errorf("prequal: start: %w", err)
	}
	return nil
}

// Close stops the probe loop, waits for it and for the probes it sent to
// end, and empties the pool, whose answers would no longer age out. Pick,
// Done and Update keep working, on the fallback (see Pick). Close is
// idempotent.
func (p *Picker) Close() error {
	p.life.Close()
	for i := range p.pool {
		p.pool[i].Store(nil)
	}
	return nil
}

// loop is the probe loop, until ctx ends.
func (p *Picker) loop(ctx context.Context) {
	sem := make(chan struct{}, PoolSize)
	var probes sync.WaitGroup
	defer probes.Wait()
	t := time.NewTicker(p.cfg.tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.tick(ctx, sem, &probes)
	}
}

// tick is one turn of Start's loop: step, with each probe sent in a
// goroutine of its own, at most PoolSize at a time.
func (p *Picker) tick(ctx context.Context, sem chan struct{}, probes *sync.WaitGroup) {
	if p.cfg.probe == nil {
		p.step(nil)
		return
	}
	p.step(func(s *snapshot, i int) bool {
		select {
		case sem <- struct{}{}:
		default:
			return false // 16 probes out: drop the rest of the asks
		}
		probes.Add(1)
		p.sent.Add(1)
		go func() {
			defer probes.Done()
			defer func() { <-sem }()
			p.probeOne(ctx, s, i)
		}()
		return true
	})
}

// Step runs one turn of the probe loop by hand, for a simulation or a
// test that drives time itself (WithClock) with no loop running: it drops
// answers older than the maximum age, then calls send with the backend to
// probe for each probe the picks have asked for since the last turn.
// Answers go back through Observe, at once or later. Start's loop does
// the same every tick, with send probing through the ProbeFunc.
func (p *Picker) Step(send func(balancer.Backend)) {
	p.step(func(s *snapshot, i int) bool {
		send(s.entries[i].b)
		return true
	})
}

// step drops stale answers and calls launch for each probe asked for,
// with the backend's place in the set, until launch returns false; a nil
// launch sends nothing and forgets the asks.
func (p *Picker) step(launch func(s *snapshot, i int) bool) {
	now := p.ticks()
	for i := range p.pool {
		if pr := p.pool[i].Load(); pr != nil && now-pr.at > int64(p.cfg.maxAge) {
			p.pool[i].CompareAndSwap(pr, nil)
		}
	}
	k := p.demand.Swap(0)
	p.demand.Add(k % rateUnit) // the fraction waits for the next pick
	s := p.snap.Load()
	if len(s.entries) == 0 || launch == nil {
		return
	}
	for range k / rateUnit {
		i, _ := bits.Mul64(p.cfg.rand(), uint64(len(s.entries)))
		if !launch(s, int(i)) {
			return
		}
	}
}

// probeOne probes the i-th backend of s and takes its answer.
func (p *Picker) probeOne(ctx context.Context, s *snapshot, i int) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.timeout)
	defer cancel()
	l, err := p.cfg.probe(ctx, s.entries[i].b)
	if err != nil || !p.answer(s, i, l) {
		p.failed.Add(1)
	}
}

// Observe puts an answer about b in the pool, as a probe's: b's requests
// in flight (l.InFlight) and its latency estimate (l.Latency), stamped
// now. Use it for answers that come another way: probes your code sends
// after Step, a simulator's backends, a report that came with a response.
// An answer for a backend not in the set, or with a negative, NaN or
// infinite figure, is ignored; a count in flight below this picker's own
// on b counts as that (see answer).
//
// Cost: O(n) to find b in the set, one allocation, and the insertion.
func (p *Picker) Observe(b balancer.Backend, l balancer.Load) {
	if b == nil {
		return
	}
	s := p.snap.Load()
	id := b.ID()
	for i := range s.entries {
		if s.entries[i].id == id {
			p.answer(s, i, l)
			return
		}
	}
}

// answer puts l, an answer about the i-th backend of s, in the pool, and
// reports whether it did: not for a bad answer (a count in flight that is
// negative, NaN or infinite, a negative latency), nor for a backend that
// left the set since s.
//
// The count in flight is raised to at least this picker's own on the
// backend, which the backend holds (or is about to) whatever it says:
// otherwise a backend answering 0 in flight and 0 latency, honestly
// idle a moment ago or lying, would stay cold and fastest however many
// requests it is sent, and take nearly all of them
// (TestLyingAnswerBounded). A lower latency still wins among the cold,
// as the paper's rule says.
func (p *Picker) answer(s *snapshot, i int, l balancer.Load) bool {
	if !(l.InFlight >= 0) || math.IsInf(l.InFlight, 1) || l.Latency < 0 {
		return false
	}
	st := s.entries[i].st
	if now := p.snap.Load(); now != s {
		// The set changed while the probe was out: find the backend's new
		// place, if it is still in the set.
		i = -1
		for j := range now.entries {
			if now.entries[j].st == st {
				i = j
				break
			}
		}
		if i < 0 {
			return false
		}
	}
	local := st.Load()
	p.insert(&probe{st: st, pos: i, rif: max(l.InFlight, float64(local)), lat: float64(l.Latency), local: local, at: p.ticks()})
	return true
}

// insert puts pr in an empty slot, or in place of the oldest answer;
// concurrent inserts and Picks may race for a slot, so it retries a few
// times and then gives up (the next probe comes soon).
func (p *Picker) insert(pr *probe) {
	for range 4 {
		oldest, at := -1, int64(math.MaxInt64)
		for i := range p.pool {
			cur := p.pool[i].Load()
			if cur == nil {
				if p.pool[i].CompareAndSwap(nil, pr) {
					return
				}
				continue
			}
			if cur.at < at {
				oldest, at = i, cur.at
			}
		}
		if oldest >= 0 {
			if cur := p.pool[oldest].Load(); cur != nil && cur.at == at && p.pool[oldest].CompareAndSwap(cur, pr) {
				return
			}
		}
	}
}
