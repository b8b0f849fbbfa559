package leastconn

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// ScanBelow is the set size at which New's default mode changes: sets of
// fewer backends are scanned exactly, larger ones use the power of two
// choices. BenchmarkCrossover measures where the two cost the same, and
// BenchmarkChoicesThroughput what two choices give up below 16; the
// package doc ("Scan or two choices") says why the threshold sits above
// the crossover.
const ScanBelow = 16

// MaxChoices is the largest number of candidates WithChoices accepts; a
// larger one is a bad option. gRPC's least_request caps its
// choice_count at the same 10 (gRFC A48): past a few choices the balance
// improves only by a constant factor (Mitzenmacher: the maximum load falls
// as ln ln n / ln d) while the cost grows linearly.
const MaxChoices = 10

// maxRedraws bounds how often a candidate of a weighted set is drawn again
// because it repeats an earlier candidate or is the backend to avoid. A
// redraw is needed with probability equal to the weight share already
// drawn, so four are rarely used up unless a few backends hold most of the
// weight; the pick then compares one candidate fewer (see
// snapshot.drawExcept). Unweighted sets need no redraws.
const maxRedraws = 4

// Picker sends each request to the backend with the fewest requests in
// flight relative to its weight. Create it with New; the zero value is not
// ready.
//
// Pick, Done, Update and InFlight are safe for concurrent use. Pick and Done
// take no lock and allocate nothing. Update builds the new set aside under a
// mutex that only Update takes, and publishes it with one atomic store, so
// it never blocks Pick or Done. A Picker must not be copied.
type Picker struct {
	// Immutable after New.
	rand    func() uint64
	choices int      // candidates per pick at and above ScanBelow, or always if forced
	forced  bool     // choices applies at every size (WithChoices, WithScan)
	reports *reports // nil unless WithReports or WithReportMetric
	err     error    // the first bad option, which Update returns

	// Guarded by mu, which only Update takes.
	mu  sync.Mutex
	reg balancer.Registry[backend]

	// Atomic.
	snap atomic.Pointer[snapshot] // the published set; empty, never nil, after New
}

// backend is the state of one backend: its in-flight count and, with
// reports, its latest reported utilisation. The count has the first cache
// line to itself (InFlight is padded to one); the report takes the second.
// Embedding InFlight makes backend a balancer.Busy, so a removed backend's
// state stays while it counts requests.
type backend struct {
	balancer.InFlight
	util atomic.Uint64 // float64 bits of the reported utilisation
	at   atomic.Int64  // when it came, in clock nanoseconds; 0: never
	_    [64 - 16]byte
}

// reports is what a Picker that weighs reports needs, immutable after New
// but for now.
type reports struct {
	metric string           // named metric to read, or "" for Load.Utilization
	expiry int64            // nanoseconds a report counts
	clock  func() time.Time // read by Done only
	now    atomic.Int64     // the clock at the latest report Done took: Pick's time
}

var (
	_ balancer.Balancer        = (*Picker)(nil)
	_ balancer.Feedback        = (*Picker)(nil)
	_ balancer.InFlightCounter = (*Picker)(nil)
)

// snapshot is an immutable published set.
type snapshot struct {
	entries []entry
	// k is the number of candidates a pick draws, or 0 for an exact scan.
	k int
	// alias is Walker's alias table for drawing candidates in proportion to
	// weight; nil when every weight is equal and candidates are drawn
	// uniformly.
	alias []column
	// states finds a backend's counter by ID for Done, including the
	// counters of recently removed backends.
	states balancer.States[backend]
}

// entry is one backend with what Pick reads, gathered in one place.
type entry struct {
	c  *backend // shared with every snapshot that holds this ID
	w  uint64   // weight; 1 for all when every weight is equal
	id string   // read once, so Avoid costs a string comparison
	b  balancer.Backend
}

// column is one column of the alias table: a draw that lands on it keeps it
// when the low 32 bits of the random number are below cut, and takes alias
// otherwise.
type column struct {
	cut   uint64 // in [0, 2³²]
	alias int
}

// Option configures a Picker.
type Option interface {
	apply(*config)
}

type config struct {
	rand    func() uint64
	choices int
	forced  bool
	reports bool
	metric  string
	expiry  time.Duration
	clock   func() time.Time
	err     error // the first bad option
}

// bad keeps err if it is the first bad option.
func (c *config) bad(err error) {
	if c.err == nil {
		c.err = err
	}
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithRand sets the source of randomness used to draw candidates and break
// ties. The default is math/rand/v2's Uint64. Pick calls it at most once per
// pick and derives any further numbers it needs from that one; tests and
// simulations pass a seeded source to make picks repeatable. A nil f is a
// bad option. f must be safe for concurrent use if Pick is called
// concurrently.
func WithRand(f func() uint64) Option {
	return optionFunc(func(c *config) {
		if f == nil {
			c.bad(balancer.BadOption("WithRand", "nil", "a function"))
			return
		}
		c.rand = f
	})
}

// WithChoices makes every pick draw k distinct candidates at random (in
// proportion to weight when weights differ) and take the least loaded of
// them, whatever the size of the set: the power of k choices. k must be in
// [2, MaxChoices]; another k is a bad option. A set of k backends or
// fewer is scanned exactly, which is what drawing all of them would give.
// The last of WithChoices and WithScan wins.
//
// Without either option, sets of fewer than ScanBelow backends are scanned
// and larger ones use two choices.
func WithChoices(k int) Option {
	return optionFunc(func(c *config) {
		if k < 2 || k > MaxChoices {
			c.bad(balancer.BadOption("WithChoices", k, fmt.Sprintf("2 to %d", MaxChoices)))
			return
		}
		c.choices = k
		c.forced = true
	})
}

// WithScan makes every pick scan the whole set and take the least loaded
// backend, whatever the size of the set. Pick then costs O(n). The last of
// WithChoices and WithScan wins.
func WithScan() Option {
	return optionFunc(func(c *config) {
		c.choices = 0
		c.forced = true
	})
}

// DefaultReportExpiry is how long a backend's load report counts with
// WithReports: 10 s, the window of lbhttp.Reporter's rates and gRPC's
// default out-of-band reporting period. A backend that reported itself
// busy and has been sent nothing since is compared by its in-flight count
// again once its report is this old, so that it is tried again.
const DefaultReportExpiry = 10 * time.Second

// maxReportRatio bounds how far apart two reports weigh in a pair: the
// ratio of two candidates' reported utilisations counts as at most 10 to
// 1, so that one report of a near-zero (or huge) utilisation neither takes
// every request nor starves its backend until the next report comes. A
// backend reporting 0.0001 beside three at 0.5 holds at most about ten
// times the requests of each, 10/13 of them, and one reporting 1e300
// about a tenth (TestReportsExtremeBounded). The 10 is gRPC's bound on a
// weight against the mean in weighted round robin (kMaxRatio in C++'s
// static_stride_scheduler.cc); wrr's Reported uses the same.
const maxReportRatio = 10

// WithReports makes Pick weigh the load the backends report
// (balancer.Result.Load, through Done) against the requests this picker
// has in flight on them: two choices, at every size (WithChoices sets
// more; WithScan compares all), and of the two, the lower reported
// utilisation × (in flight + 1). A candidate without a report younger
// than DefaultReportExpiry (WithReportExpiry), or two reports more than
// a tenth of the expiry apart in age, make the pair compare in-flight
// counts, as without reports. The utilisation is
// Load.Utilization (application_utilization, or cpu_utilization when that
// is zero); WithReportMetric reads a named metric instead. Weights still
// draw the candidates and weigh the in-flight comparison, not the
// reported one: a report already says how loaded the backend is.
func WithReports() Option {
	return optionFunc(func(c *config) {
		c.reports = true
	})
}

// WithReportMetric is WithReports with the utilisation read from the
// named metric name of each report (Load.Metric) instead of
// Load.Utilization: a queue length, a GPU's memory, whatever the backends
// send. Negative and missing values are no report. An empty name is a bad
// option.
func WithReportMetric(name string) Option {
	return optionFunc(func(c *config) {
		if name == "" {
			c.bad(balancer.BadOption("WithReportMetric", `""`, "a metric's name"))
			return
		}
		WithReports().apply(c)
		c.metric = name
	})
}

// WithReportExpiry sets how long a report counts, with WithReports. The
// default is DefaultReportExpiry. A d of zero or less is a bad option.
func WithReportExpiry(d time.Duration) Option {
	return optionFunc(func(c *config) {
		if d <= 0 {
			c.bad(balancer.BadOption("WithReportExpiry", d, "more than 0"))
			return
		}
		c.expiry = d
	})
}

// WithClock sets the clock Done reads when it takes a report, with
// WithReports (Pick reads none: it ages reports by the time of the latest
// one). The default is the monotonic clock. Tests and simulations pass
// their own. A nil now is a bad option.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) {
		if now == nil {
			c.bad(balancer.BadOption("WithClock", "nil", "a function"))
			return
		}
		c.clock = now
	})
}

// New returns a least-connections Picker with an empty set; call Update to
// give it backends. By default it scans sets of fewer than ScanBelow
// backends and uses the power of two choices for larger ones. A bad
// option (see balancer.ErrBadOption) makes every Update return its error,
// and the Picker stays empty.
func New(opts ...Option) *Picker {
	c := config{rand: rand.Uint64, choices: 2, expiry: DefaultReportExpiry}
	for _, o := range opts {
		o.apply(&c)
	}
	p := &Picker{rand: c.rand, choices: c.choices, forced: c.forced, err: c.err}
	if c.reports {
		p.reports = &reports{metric: c.metric, expiry: int64(c.expiry), clock: c.clock}
		if p.reports.clock == nil {
			epoch := time.Now()
			p.reports.clock = func() time.Time { return epoch.Add(time.Since(epoch)) }
		}
	}
	p.snap.Store(&snapshot{})
	return p
}

// Update replaces the set. It validates bs first (see balancer.Validate) and
// on error keeps the previous set. In-flight counts are carried by ID: a
// backend that stays, or leaves and comes back, keeps its count, and a
// request picked before it left is still counted down by its Done.
//
// Each weight is read once (balancer.NewSet). Calls to Update are
// serialised, validation included. If an option given to New was bad,
// Update returns its error (wrapping balancer.ErrBadOption) every time and
// the set stays empty.
//
// Cost: O(n) and a few allocations: the entries, the registry's maps and,
// for a weighted set sampled by choices, the alias table.
func (p *Picker) Update(bs []balancer.Backend) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return fmt.Errorf("leastconn: update: %w", p.err)
	}
	set, err := balancer.NewSet(bs)
	if err != nil {
		return fmt.Errorf("leastconn: update: %w", err)
	}
	s := &snapshot{
		entries: make([]entry, set.Len()),
		states:  p.reg.Sync(set.Backends),
		k:       p.choicesFor(set.Len()),
	}
	equal := true
	for i, b := range set.Backends {
		w := uint64(set.Weights[i])
		s.entries[i] = entry{c: s.states.At(i), w: w, id: set.IDs[i], b: b}
		equal = equal && w == s.entries[0].w
	}
	if equal {
		// Equal weights compare like no weights; setting them to 1 keeps
		// the products in Pick small and lets draws skip the alias table.
		for i := range s.entries {
			s.entries[i].w = 1
		}
	} else if s.k > 0 {
		s.alias = buildAlias(s.entries)
	}
	p.snap.Store(s)
	return nil
}

// choicesFor returns the number of candidates for a set of n, or 0 to scan.
func (p *Picker) choicesFor(n int) int {
	if !p.forced && n < ScanBelow && p.reports == nil {
		return 0
	}
	if p.choices >= n {
		return 0 // drawing every backend is a scan
	}
	return p.choices
}

// Pick returns the backend with the fewest requests in flight for its
// weight, and counts one more request on it: call Done when the request
// finishes. If the set has another backend, Pick never returns req.Avoid.
// The request's Key and Attempt are ignored. Pick returns
// balancer.ErrNoBackend when the set is empty.
//
// The load of a backend is 0 when it is idle and (in-flight+1)/weight
// otherwise; Pick compares loads by cross-multiplying, without a division.
// Ties are broken at random, in proportion to weight.
//
// Cost: one random number from the WithRand source (none for a scan that
// meets no tie), then O(n) atomic loads for a scan or k for choices (n if
// every draw lands on the backend to avoid; see the package doc), and one
// atomic add. No lock, no allocation.
func (p *Picker) Pick(req balancer.Request) (balancer.Backend, error) {
	s := p.snap.Load()
	var i int
	switch {
	case len(s.entries) == 0:
		return nil, balancer.ErrNoBackend
	case len(s.entries) == 1:
		i = 0 // the only backend, even if it is the one to avoid
	case p.reports != nil:
		i = s.pickReported(req.Avoid, p.rand, p.reports)
	case s.k == 0:
		i = s.scan(req.Avoid, p.rand)
	default:
		i = s.sample(req.Avoid, p.rand)
	}
	e := &s.entries[i]
	e.c.Inc()
	return e.b, nil
}

// Done counts one request to b as finished. Call it exactly once for every
// backend Pick returned, when its request has finished, failed or been
// abandoned. Without WithReports the Result is not read; with it, Done
// keeps the utilisation of r.Load, if it has one. Done for a backend that
// has since left the set still finds its counter (the registry keeps a
// removed backend's counter while it counts requests, see
// balancer.Registry); Done for nil, for a backend never picked or for one
// long gone does nothing. A count never goes below zero.
//
// Cost: one map read by ID and one atomic compare-and-swap; with a report,
// a clock read and three atomic stores more (and the named metric's
// lookup, with WithReportMetric). No lock, no allocation.
func (p *Picker) Done(b balancer.Backend, r balancer.Result) {
	c := p.snap.Load().states.Lookup(b)
	if c == nil {
		return
	}
	c.Dec()
	if p.reports != nil {
		p.reports.take(c, &r.Load)
	}
}

// take keeps the utilisation a report gives, if any.
func (rp *reports) take(c *backend, l *balancer.Load) {
	var u float64
	if rp.metric == "" {
		u = l.Utilization()
	} else if v, ok := l.Metric(rp.metric); ok {
		u = v
	}
	if !(u > 0) || math.IsInf(u, 1) {
		return // no report, or one that says nothing of utilisation
	}
	now := max(rp.clock().UnixNano(), 1)
	c.util.Store(math.Float64bits(u))
	c.at.Store(now)
	if now > rp.now.Load() {
		rp.now.Store(now) // a racing older store is corrected by the next report
	}
}

// Utilization returns the utilisation the backend with this ID last
// reported, and false if it has no report that counts now (none, one
// older than the expiry, or the Picker does not weigh reports). It is an
// accessor for observability and tests.
func (p *Picker) Utilization(id string) (float64, bool) {
	c := p.snap.Load().states.LookupID(id)
	if c == nil || p.reports == nil {
		return 0, false
	}
	return c.report(p.reports.now.Load(), p.reports.expiry)
}

// report returns the utilisation c reported and whether it counts at now.
func (c *backend) report(now, expiry int64) (float64, bool) {
	u, _, ok := c.reportAt(now, expiry)
	return u, ok
}

// reportAt is report with the report's time.
func (c *backend) reportAt(now, expiry int64) (float64, int64, bool) {
	at := c.at.Load()
	if at == 0 || now-at > expiry {
		return 0, 0, false
	}
	return math.Float64frombits(c.util.Load()), at, true
}

// staleGap: two reports weigh against each other only while they are at
// most expiry/staleGap apart in age (1 s at the default expiry of 10 s).
// A backend that loses its pairs on its report draws no request, so it
// sends no new report: compared against its rivals' fresher ones, an old
// high report would starve it until it expired, however far the others'
// loads had fallen meanwhile (TestReportsStaleNotStarved). Past the gap
// the pair compares requests in flight, as for a backend without a
// report, until the next report of the stale one settles it. gRPC's
// weighted round robin needs no such rule: it gives a backend its weight's
// share of picks, never none.
const staleGap = 10

// InFlight returns the number of requests Pick has counted on the backend
// with this ID and Done has not yet counted down: its Pick count minus its
// Done count, never below zero. A recently removed backend still reports
// its count; an unknown ID reports 0. It is an accessor for observability
// (metrics, tests; balancer.InFlightCounter); it costs one map read and
// allocates nothing.
func (p *Picker) InFlight(id string) int64 {
	if c := p.snap.Load().states.LookupID(id); c != nil {
		return c.Load()
	}
	return 0
}

// load returns e's load as the numerator of a fraction over e.w: 0 when
// idle, in-flight+1 otherwise.
//
// Why in-flight+1: on a backend that shares a capacity of w among the
// requests it serves, a new request would take time in proportion to
// (in-flight+1)/w, so comparing that sends it where it would be served
// soonest. HAProxy's leastconn (lb_fwlc.c) sorts servers by the same key.
// nginx compares in-flight/w, the load before the pick: it ties a weight-1
// backend holding 1 request with a weight-10 backend holding 10, although
// the next request would take 2 units on the first and 1.1 on the second.
// In steady state both keep in-flight close to proportional to weight
// (in-flight+1 ∝ w instead of in-flight ∝ w: about one request apart).
//
// Why idle is 0 and not 1/w: otherwise, under light load, the heaviest
// backend would take every request until it held w_max/w_min − 1 of them,
// and the others none. As in HAProxy, every idle backend is equally attractive;
// Pick then breaks the tie in proportion to weight (see scan and sample).
func (e *entry) load() uint64 {
	n := uint64(e.c.Load())
	if n == 0 {
		return 0
	}
	return n + 1
}

// scan returns the index of the least loaded backend other than avoid,
// comparing every one. Ties are broken at random in proportion to weight,
// in a second pass that runs only when the first found a tie: it draws one
// number below the tied weight and walks the tied backends to it. Counts
// may move between the passes; if the drawn backend is no longer tied, the
// first pass's choice stands. A scan without ties calls rnd not at all.
//
// Loads are compared as fractions without dividing: a/wa < b/wb exactly
// when a·wb < b·wa. Weights are at most balancer.MaxWeight (< 2²⁰), so the
// products stay below 2⁶³ for any in-flight count under 2⁴³.
//
// Why not a random start offset: it is fair when every backend ties, but
// not when a few do. With loads 0, 0, 1, 1 the scan from a random start
// takes the first backend three times in four (from starts 0, 2 and 3).
func (s *snapshot) scan(avoid string, rnd func() uint64) int {
	best := -1
	var bl, bw, tied uint64 // best's load and weight; the weight of its ties
	for i := range s.entries {
		e := &s.entries[i]
		if e.id == avoid {
			continue
		}
		l := e.load()
		if best >= 0 {
			if lhs, rhs := l*bw, bl*e.w; lhs > rhs {
				continue
			} else if lhs == rhs {
				tied += e.w
				continue
			}
		}
		best, bl, bw, tied = i, l, e.w, e.w
	}
	if tied == bw {
		return best // no tie
	}
	x := below(rnd(), tied)
	for i := range s.entries {
		e := &s.entries[i]
		if e.id == avoid || e.load()*bw != bl*e.w {
			continue
		}
		if x < e.w {
			return i
		}
		x -= e.w
	}
	return best
}

// sample returns the index of the least loaded of s.k distinct candidates
// drawn at random, other than avoid. Candidates are drawn uniformly when
// every weight is equal and in proportion to weight otherwise, and a tie
// goes to the earlier draw, so idle backends are chosen in proportion to
// weight, as in scan.
func (s *snapshot) sample(avoid string, rnd func() uint64) int {
	r := wyrand(rnd())
	if s.k == 2 {
		if i, ok := s.sampleTwo(avoid, &r); ok {
			return i
		}
	}
	var cands [MaxChoices]int
	m := s.candidates(avoid, &r, &cands)
	if m == 0 {
		// Every draw failed: a weighted set where the backend to avoid
		// holds nearly all the weight. The scan finds another, breaking
		// ties with numbers from the same draw (WithRand: one call to rnd
		// per pick).
		return s.scan(avoid, r.next)
	}
	best := cands[0]
	bl, bw := s.entries[best].load(), s.entries[best].w
	for _, i := range cands[1:m] {
		e := &s.entries[i]
		if l := e.load(); l*bw < bl*e.w {
			best, bl, bw = i, l, e.w
		}
	}
	return best
}

// candidates draws s.k distinct candidates other than avoid into cands, in
// the order drawn, and returns how many it drew: fewer when a weighted
// draw gives up (see drawExcept), 0 when every one did. A draw that lands
// on avoid excludes it from then on and draws a replacement.
func (s *snapshot) candidates(avoid string, r *wyrand, cands *[MaxChoices]int) int {
	// excluded holds the candidates drawn so far and, once drawn, the
	// backend to avoid, in increasing order (see drawExcept).
	var excluded [MaxChoices + 1]int
	m, n := 0, 0
	for range s.k {
		i := s.drawExcept(r, excluded[:m])
		if i < 0 {
			continue
		}
		m = insert(excluded[:m+1], i)
		if s.entries[i].id == avoid {
			if i = s.drawExcept(r, excluded[:m]); i < 0 {
				continue
			}
			m = insert(excluded[:m+1], i)
		}
		cands[n] = i
		n++
	}
	return n
}

// sampleTwo is sample for two candidates, the default, without the
// bookkeeping of k. It reports false, having compared nothing, when a
// candidate is the backend to avoid (or, in a weighted set, when it could
// not draw two distinct ones), leaving that case to sample.
func (s *snapshot) sampleTwo(avoid string, r *wyrand) (int, bool) {
	i := s.draw(r)
	var j int
	if s.alias == nil {
		// Uniform over the other n-1, shifted past i: distinct at once.
		if j = int(below(r.next(), uint64(len(s.entries)-1))); j >= i {
			j++
		}
	} else {
		for range maxRedraws + 1 {
			if j = s.draw(r); j != i {
				break
			}
		}
		if j == i {
			return 0, false
		}
	}
	a, b := &s.entries[i], &s.entries[j]
	if a.id == avoid || b.id == avoid {
		return 0, false
	}
	if b.load()*a.w < a.load()*b.w {
		return j, true
	}
	return i, true
}

// pickReported is Pick with WithReports: s.k candidates drawn as sample
// draws them (candidates; every backend, in a random rotation, when s.k is 0),
// and the best of them by better.
func (s *snapshot) pickReported(avoid string, rnd func() uint64, rp *reports) int {
	now := rp.now.Load()
	r := wyrand(rnd())
	best := -1
	consider := func(i int) {
		if best < 0 || s.better(&s.entries[best], &s.entries[i], now, rp.expiry) {
			best = i
		}
	}
	if s.k == 0 {
		n := len(s.entries)
		start := int(below(r.next(), uint64(n)))
		for j := range n {
			i := (start + j) % n
			if s.entries[i].id != avoid {
				consider(i)
			}
		}
		return best // n ≥ 2: another backend than avoid exists
	}
	var cands [MaxChoices]int
	m := s.candidates(avoid, &r, &cands)
	if m == 0 {
		return s.scan(avoid, r.next) // as in sample
	}
	for _, i := range cands[:m] {
		consider(i)
	}
	return best
}

// better reports whether b should be taken over a: when both have reports
// that count, by reported utilisation × (in flight + 1), the load the
// backend says it carries scaled by what this picker has added to it
// since, with the ratio of the two utilisations bounded to
// maxReportRatio, while the two reports are close in age (see staleGap);
// otherwise by in-flight count for weight, as without reports.
func (s *snapshot) better(a, b *entry, now, expiry int64) bool {
	ua, ata, oka := a.c.reportAt(now, expiry)
	ub, atb, okb := b.c.reportAt(now, expiry)
	if oka && okb && max(ata-atb, atb-ata) <= expiry/staleGap {
		// ub/ua, bounded (see maxReportRatio); both are positive and
		// finite, so the quotient is a number, at worst 0 or +Inf.
		r := min(max(ub/ua, 1/maxReportRatio), maxReportRatio)
		return r*float64(b.c.Load()+1) < float64(a.c.Load()+1)
	}
	return b.load()*a.w < a.load()*b.w
}

// drawExcept draws an index not in excluded, which is sorted. Without
// weights it is exact and costs one number: it draws x uniformly from the
// n-m indexes left and steps it past every excluded index at or below it,
// which maps 0, 1, 2, ... onto the indexes left in increasing order. With
// weights it draws from the alias table and draws again when it hits an
// excluded index, up to maxRedraws times, then gives up and returns -1.
func (s *snapshot) drawExcept(r *wyrand, excluded []int) int {
	if s.alias == nil {
		x := int(below(r.next(), uint64(len(s.entries)-len(excluded))))
		for _, d := range excluded {
			if x < d {
				break
			}
			x++
		}
		return x
	}
	for range maxRedraws + 1 {
		if i := s.draw(r); !slices.Contains(excluded, i) {
			return i
		}
	}
	return -1
}

// insert adds i to the sorted list xs[:len(xs)-1], in place, and returns
// the new length, len(xs).
func insert(xs []int, i int) int {
	j := len(xs) - 1
	for ; j > 0 && xs[j-1] > i; j-- {
		xs[j] = xs[j-1]
	}
	xs[j] = i
	return len(xs)
}

// draw returns a random index, uniform when every weight is equal and in
// proportion to weight otherwise. One number serves both steps of the alias
// method: its high bits choose the column and its low 32 bits the side of
// the cut, which are independent to within n/2³².
func (s *snapshot) draw(r *wyrand) int {
	x := r.next()
	i := int(below(x, uint64(len(s.entries))))
	if s.alias == nil || x&0xffffffff < s.alias[i].cut {
		return i
	}
	return s.alias[i].alias
}

// buildAlias returns Walker's alias table for the entries' weights, by
// Vose's method in integer arithmetic: column i holds w_i·n/W of the
// probability of a draw landing on it (W the sum of the weights), topped
// up to exactly 1 with probability from one heavier backend, its alias.
//
// Worked example, weights 1, 2, 5 (n = 3, W = 8): scaled to w·n they are 3,
// 6, 15 against a column height of 8. Column 0 keeps 3/8 and lends 5/8 to
// backend 2, which has 15−5 = 10 left; column 1 keeps 6/8 and lends 2/8 to
// backend 2 (8 left); column 2 keeps 8/8. Backend 2's share is then
// (5+2+8)/24 = 5/8, as its weight says.
//
// Cost: O(n) and one allocation; a draw then costs O(1).
func buildAlias(es []entry) []column {
	n := uint64(len(es))
	var total uint64
	for _, e := range es {
		total += e.w
	}
	t := make([]column, n)
	scaled := make([]uint64, n) // w·n, against a column height of total
	var small, large []int
	for i, e := range es {
		scaled[i] = e.w * n // < 2²⁰ · n: no overflow for any set that fits in memory
		t[i] = column{cut: 1 << 32, alias: i}
		if scaled[i] < total {
			small = append(small, i)
		} else {
			large = append(large, i)
		}
	}
	for len(small) > 0 && len(large) > 0 {
		si, li := small[len(small)-1], large[len(large)-1]
		small = small[:len(small)-1]
		// cut = scaled[si]/total in 32-bit fixed point; scaled[si] < total,
		// so the 128-bit quotient fits.
		hi, lo := bits.Mul64(scaled[si], 1<<32)
		q, _ := bits.Div64(hi, lo, total)
		t[si] = column{cut: q, alias: li}
		scaled[li] -= total - scaled[si]
		if scaled[li] < total {
			large = large[:len(large)-1]
			small = append(small, li)
		}
	}
	// What is left in either list is a full column (exactly, in integer
	// arithmetic), already set to keep itself.
	return t
}

// below maps x, uniform in [0, 2⁶⁴), to [0, n) by multiplying instead of
// dividing (Lemire's multiply-shift): ⌊x·n/2⁶⁴⌋, the high word of x·n.
func below(x, n uint64) uint64 {
	hi, _ := bits.Mul64(x, n)
	return hi
}

// wyrand is a tiny generator (Wang Yi's wyrand) for the few numbers a pick
// needs after its seed: one multiply per number, no shared state, nothing
// to allocate.
type wyrand uint64

func (r *wyrand) next() uint64 {
	*r += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(uint64(*r), uint64(*r)^0xe7037ed1a0b428db)
	return hi ^ lo
}
