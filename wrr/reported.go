package wrr

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// Defaults of a Reported, gRPC's weighted_round_robin's (gRFC A58, and
// grpc-go's balancer/weightedroundrobin/config.go).
const (
	// DefaultBlackout is how long a backend must have reported, without
	// a gap as long as the expiry, before its weight is used: a new or
	// returning backend, whose first reports speak of a backend that was
	// not yet serving, does not swing the schedule.
	DefaultBlackout = 10 * time.Second
	// DefaultExpiry is how long a report stays usable. A backend silent
	// for longer gets the mean weight again, and the blackout anew.
	DefaultExpiry = 3 * time.Minute
	// DefaultWeightPeriod is how often weights are recomputed and the
	// schedule rebuilt (when they changed).
	DefaultWeightPeriod = time.Second
	// DefaultErrorPenalty multiplies the error rate eps/qps in the weight
	// formula (A58's error_utilization_penalty).
	DefaultErrorPenalty = 1.0
)

// MinWeightPeriod is the shortest weight period WithWeightPeriod takes,
// as in grpc-go: a schedule is rebuilt at most ten times a second.
const MinWeightPeriod = 100 * time.Millisecond

// reportedScale is what the largest weight is scaled to before the
// schedule is built (gRPC scales to 65535 for its stride scheduler): one
// part in a thousand is finer than reports are exact, and it keeps the
// period of a set of n at most 1000·n slots.
const reportedScale = 1000

// Reported is weighted round robin with weights from the backends' own
// load reports, after gRPC's weighted_round_robin (gRFC A58): each
// backend's weight is
//
//	qps / (utilization + error_penalty × eps/qps)
//
// from its latest report (balancer.Result.Load: RPS, EPS, and Application
// utilisation, or CPU when that is zero), so that a backend serving more
// for the same utilisation gets more traffic, and one whose load comes
// from elsewhere gets less. Picks follow nginx's smooth sequence for those
// weights, as Picker's do; the weights are recomputed off the request
// path at a fixed period and the schedule published like any set. Create
// it with NewReported; the zero value is not ready.
//
// Pick, Done, Update, Refresh and Weight are safe for concurrent use.
// Pick is Picker's: no lock, no allocation. Done takes no lock and
// allocates nothing: for a Result with a report, a map lookup, a clock
// read and three atomic stores; without one, nothing. A Reported must not
// be copied.
type Reported struct {
	// Immutable after NewReported.
	rr  *Picker
	cfg reportedConfig

	// Atomic.
	states atomic.Pointer[balancer.States[report]] // Done's lookup; never nil after NewReported
	bg     atomic.Int32                            // bgNone, bgLazy, bgStarted, bgClosed

	// Guarded by mu, which Update, Refresh and Weight take, never Pick or
	// Done.
	mu   sync.Mutex
	reg  balancer.Registry[report]
	set  balancer.Set
	live []*report
	last []int64 // the weights last scheduled; nil: none yet for this set

	// Guarded by life: Start and Close.
	life    sync.Mutex
	cancel  context.CancelFunc
	running sync.WaitGroup
}

// The background states of a Reported (Reported.bg).
const (
	bgNone    = iota // nothing runs; the next report starts a lazy loop
	bgLazy           // a lazy loop runs, started by a report
	bgStarted        // Start's loop runs
	bgClosed         // Close was called: nothing runs or starts
)

// report is what a Reported knows of one backend: A58's weight, last
// updated and non_empty_since, each an atomic word that Done stores
// without a lock. Times are clock ticks (see Reported.ticks), 0 for none.
// Padded to a cache line, so that the Dones of different backends do not
// contend.
type report struct {
	weight  atomic.Uint64 // float64 bits of the last usable report's weight
	updated atomic.Int64  // when it came
	since   atomic.Int64  // when the current run of reports began
	_       [64 - 24]byte
}

var (
	_ balancer.Balancer = (*Reported)(nil)
	_ balancer.Feedback = (*Reported)(nil)
	_ balancer.Starter  = (*Reported)(nil) // so a decorator in front starts it
	_ io.Closer         = (*Reported)(nil) // and closes it
)

// ReportedOption configures a Reported. Every Option (WithRand,
// WithMaxSchedule) is one too.
type ReportedOption interface {
	applyReported(*reportedConfig)
}

type reportedConfig struct {
	config
	blackout, expiry, period time.Duration
	penalty                  float64
	clock                    func() time.Time // nil: the monotonic clock
}

type reportedFunc func(*reportedConfig)

func (f reportedFunc) applyReported(c *reportedConfig) { f(c) }

// WithBlackout sets how long a backend must report, with no gap as long
// as the expiry, before its weight is used; until then it weighs the mean
// of the others. The default is DefaultBlackout (10 s, A58's). Zero uses
// a weight from its first report; negative values are ignored.
func WithBlackout(d time.Duration) ReportedOption {
	return reportedFunc(func(c *reportedConfig) {
		if d >= 0 {
			c.blackout = d
		}
	})
}

// WithExpiry sets how long a report stays usable. The default is
// DefaultExpiry (3 min, A58's). Values of zero or less are ignored.
func WithExpiry(d time.Duration) ReportedOption {
	return reportedFunc(func(c *reportedConfig) {
		if d > 0 {
			c.expiry = d
		}
	})
}

// WithWeightPeriod sets how often the background loop recomputes the
// weights (see Start). The default is DefaultWeightPeriod (1 s, A58's);
// values below MinWeightPeriod are raised to it.
func WithWeightPeriod(d time.Duration) ReportedOption {
	return reportedFunc(func(c *reportedConfig) {
		c.period = max(d, MinWeightPeriod)
	})
}

// WithErrorPenalty sets A58's error_utilization_penalty, the weight of
// the error rate eps/qps beside the utilisation. The default is
// DefaultErrorPenalty (1); 0 ignores errors. Negative values, NaN and
// infinities are ignored.
func WithErrorPenalty(f float64) ReportedOption {
	return reportedFunc(func(c *reportedConfig) {
		if f >= 0 && !math.IsInf(f, 1) {
			c.penalty = f
		}
	})
}

// WithClock sets the clock Done, Refresh and Weight read (Pick reads
// none). The default is the monotonic clock. Tests and simulations pass
// their own and call Refresh; it should not step back.
func WithClock(now func() time.Time) ReportedOption {
	return reportedFunc(func(c *reportedConfig) {
		if now != nil {
			c.clock = now
		}
	})
}

// NewReported returns a report-driven weighted round-robin picker with an
// empty set; call Update to give it backends. Until reports arrive (and
// after the blackout) every backend weighs the same, and picks go round
// robin.
func NewReported(opts ...ReportedOption) *Reported {
	c := reportedConfig{
		config:   config{limit: DefaultMaxSchedule},
		blackout: DefaultBlackout,
		expiry:   DefaultExpiry,
		period:   DefaultWeightPeriod,
		penalty:  DefaultErrorPenalty,
	}
	for _, o := range opts {
		o.applyReported(&c)
	}
	p := &Reported{rr: New(WithRand(c.rand), WithMaxSchedule(int(c.limit))), cfg: c}
	if c.clock == nil {
		epoch := time.Now()
		p.cfg.clock = func() time.Time { return epoch.Add(time.Since(epoch)) }
	}
	p.states.Store(&balancer.States[report]{})
	return p
}

// ticks returns the clock in nanoseconds since the Unix epoch, never 0
// (which means none).
func (p *Reported) ticks() int64 { return max(p.cfg.clock().UnixNano(), 1) }

// Pick returns the backend whose turn it is in the smooth schedule of the
// current weights; see Picker.Pick, which it is. The Request's Key and
// Attempt are ignored; Avoid is honoured.
func (p *Reported) Pick(req balancer.Request) (balancer.Backend, error) { return p.rr.Pick(req) }

// Done takes in the load report of a finished request, if r carries one
// that A58 can use: a positive rps and a positive utilisation
// (Application, or CPU when that is zero). Others, and every Result
// without a report, are ignored, as are backends not in the set. The
// weight is used at the next recomputation (see Start).
//
// Without Start, the first usable report starts a goroutine that
// recomputes the weights every period until no backend has reported for
// the expiry (one allocation, when it starts).
//
// Cost with a report: a map lookup by ID, a clock read, three atomic
// stores. Without: two comparisons. No lock.
func (p *Reported) Done(b balancer.Backend, r balancer.Result) {
	l := &r.Load
	u := l.Utilization()
	if !(u > 0) || !(l.RPS > 0) {
		return
	}
	w := l.RPS / (u + p.cfg.penalty*l.EPS/l.RPS)
	if !(w > 0) || math.IsInf(w, 0) {
		return // a tiny utilisation with a huge rate: nothing to weigh by
	}
	st := p.states.Load().Lookup(b)
	if st == nil {
		return
	}
	now := p.ticks()
	st.weight.Store(math.Float64bits(w))
	st.updated.Store(now)
	st.since.CompareAndSwap(0, now)
	if p.bg.Load() == bgNone && p.bg.CompareAndSwap(bgNone, bgLazy) {
		go p.loop(nil, true)
	}
}

// Update replaces the set. It validates bs first (see balancer.Validate)
// and on error keeps the previous set. Static weights are validated and
// not used: reports decide. What was learned of a backend is kept by ID
// across updates; one that joins, or comes back, serves its blackout
// again before its reports count (A58 resets non_empty_since when an
// endpoint becomes READY). The schedule is rebuilt at once for the new
// set with the weights known now.
//
// Cost: that of Picker.Update for weights up to 1000, plus the registry's
// bookkeeping.
func (p *Reported) Update(bs []balancer.Backend) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	set, err := balancer.NewSet(bs)
	if err != nil {
		return fmt.Errorf("wrr: update: %w", err)
	}
	prev := make(map[*report]bool, len(p.live))
	for _, st := range p.live {
		prev[st] = true
	}
	states := p.reg.Sync(set.Backends)
	live := make([]*report, states.Len())
	for i := range live {
		live[i] = states.At(i)
		if !prev[live[i]] {
			live[i].since.Store(0)
		}
	}
	p.set, p.live, p.last = set, live, nil
	p.states.Store(&states)
	p.refresh(p.ticks())
	return nil
}

// Refresh recomputes the weights from the reports now and rebuilds the
// schedule if they changed. The background loop calls it every period;
// call it yourself to drive a Reported on a clock of your own (WithClock),
// as a simulation does.
//
// Cost: O(n), and when the weights changed, the schedule's build (see
// Picker.Update): for 1024 backends about 36 ms, once per period, off
// the request path.
func (p *Reported) Refresh() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refresh(p.ticks())
}

// refresh is Refresh with mu held. It reports whether some backend has a
// report within the expiry.
func (p *Reported) refresh(now int64) bool {
	if len(p.live) == 0 {
		if p.last == nil {
			p.rr.publish(p.set, nil)
			p.last = []int64{}
		}
		return false
	}
	ws := make([]float64, len(p.live))
	fresh := false
	for i, st := range p.live {
		ws[i] = p.weightOf(st, now)
		fresh = fresh || now-st.updated.Load() < int64(p.cfg.expiry)
	}
	ints := scaleWeights(ws)
	if !slices.Equal(ints, p.last) || p.last == nil {
		p.rr.publish(p.set, ints)
		p.last = ints
	}
	return fresh
}

// weightOf is A58's weight of one backend now: 0 (use the mean) without
// a report, for a report older than the expiry (which also restarts the
// blackout), and during the blackout.
func (p *Reported) weightOf(st *report, now int64) float64 {
	upd := st.updated.Load()
	if upd == 0 {
		return 0
	}
	if now-upd >= int64(p.cfg.expiry) {
		st.since.Store(0)
		return 0
	}
	since := st.since.Load()
	if p.cfg.blackout > 0 && (since == 0 || now-since < int64(p.cfg.blackout)) {
		return 0
	}
	return math.Float64frombits(st.weight.Load())
}

// scaleWeights turns A58 weights into the schedule's integer weights, as
// grpc-go's newScheduler does: with fewer than two usable weights, every
// backend weighs 1 (round robin); otherwise a backend without one weighs
// the mean of the others, and the largest is scaled to reportedScale,
// every weight to at least 1.
func scaleWeights(ws []float64) []int64 {
	out := make([]int64, len(ws))
	var sum, top float64
	n := 0
	for _, w := range ws {
		if w > 0 {
			sum += w
			top = max(top, w)
			n++
		}
	}
	if n < 2 {
		for i := range out {
			out[i] = 1
		}
		return out
	}
	mean := sum / float64(n)
	for i, w := range ws {
		if w == 0 {
			w = mean
		}
		out[i] = max(1, int64(math.Round(w*reportedScale/top)))
	}
	return out
}

// Weight returns the weight the backend with this ID has in the schedule
// now, as A58 computes it (qps / utilisation and penalty), and whether it
// is its own: false when it has no usable report (none yet, expired, or
// in its blackout) and weighs the mean, or when the ID is not in the set.
// It is meant for metrics and tests.
func (p *Reported) Weight(id string) (float64, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.states.Load().LookupID(id)
	if st == nil || !slices.Contains(p.live, st) {
		return 0, false
	}
	w := p.weightOf(st, p.ticks())
	return w, w > 0
}

// Period returns the length of the schedule in use; see Picker.Period.
func (p *Reported) Period() int { return p.rr.Period() }

// Errors of Start.
var (
	errStarted = errors.New("wrr: reported: already started")
	errClosed  = errors.New("wrr: reported: closed")
)

// Start runs the weight loop until ctx ends or Close is called: every
// period (WithWeightPeriod) it recomputes the weights and rebuilds the
// schedule if they changed. Without Start, reports start a lazy loop (see
// Done), which stops when reports stop; Start's keeps weights expiring on
// time even when every backend falls silent. Start returns an error if
// called twice, or after Close.
func (p *Reported) Start(ctx context.Context) error {
	p.life.Lock()
	defer p.life.Unlock()
	switch p.bg.Load() {
	case bgClosed:
		return errClosed
	case bgStarted:
		return errStarted
	}
	p.bg.Store(bgStarted) // a lazy loop sees it and ends
	ctx, p.cancel = context.WithCancel(ctx)
	p.running.Add(1)
	go func() {
		defer p.running.Done()
		p.loop(ctx.Done(), false)
	}()
	return nil
}

// Close stops the weight loop and waits for Start's to return; a lazy
// loop ends at its next tick without recomputing. Pick, Done, Update and
// Refresh keep working: call Refresh to recompute. Close is idempotent.
func (p *Reported) Close() error {
	p.life.Lock()
	p.bg.Store(bgClosed)
	if p.cancel != nil {
		p.cancel()
	}
	p.life.Unlock()
	p.running.Wait()
	return nil
}

// loop recomputes the weights every period until stop is closed (Start's
// loop) or, lazy, until Start or Close takes over or no backend has
// reported within the expiry (after a last recomputation that puts the
// expired weights out of use).
func (p *Reported) loop(stop <-chan struct{}, lazy bool) {
	t := time.NewTicker(p.cfg.period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if lazy && p.bg.Load() != bgLazy {
			return
		}
		p.mu.Lock()
		fresh := p.refresh(p.ticks())
		p.mu.Unlock()
		if lazy && !fresh && p.bg.CompareAndSwap(bgLazy, bgNone) {
			return
		}
	}
}
