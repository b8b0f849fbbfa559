package wrr

import (
	"context"
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
	// DefaultReportExpiry is how long a report stays usable. A backend silent
	// for longer gets the mean weight again, and the blackout anew.
	DefaultReportExpiry = 3 * time.Minute
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
// from elsewhere gets less. No weight is used above 10 times the mean of
// the others (see scaleWeights), so that no single report takes the
// traffic. Picks follow nginx's smooth sequence for those
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
	lazy   atomic.Bool                             // a lazy loop runs, started by a report

	// Guarded by mu, which Update, Refresh and Weight take, never Pick or
	// Done.
	mu   sync.Mutex
	reg  balancer.Registry[report]
	set  balancer.Set
	live []*report
	last []int64 // the weights last scheduled; nil: none yet for this set

	// Start's loop, and Close.
	life balancer.Lifecycle
}

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
// a weight from its first report; a negative d is a bad option.
func WithBlackout(d time.Duration) ReportedOption {
	return reportedFunc(func(c *reportedConfig) {
		if d < 0 {
			c.bad(balancer.BadOption("WithBlackout", d, "0 or more"))
			return
		}
		c.blackout = d
	})
}

// WithReportExpiry sets how long a report stays usable (A58's
// weight_expiration_period). The default is DefaultReportExpiry (3 min,
// A58's). A d of zero or less is a bad option.
func WithReportExpiry(d time.Duration) ReportedOption {
	return reportedFunc(func(c *reportedConfig) {
		if d <= 0 {
			c.bad(balancer.BadOption("WithReportExpiry", d, "more than 0"))
			return
		}
		c.expiry = d
	})
}

// WithWeightPeriod sets how often the background loop recomputes the
// weights (see Start). The default is DefaultWeightPeriod (1 s, A58's);
// a d below MinWeightPeriod is a bad option (A58 raises it to 100 ms;
// lbkit says so instead).
func WithWeightPeriod(d time.Duration) ReportedOption {
	return reportedFunc(func(c *reportedConfig) {
		if d < MinWeightPeriod {
			c.bad(balancer.BadOption("WithWeightPeriod", d, "at least "+MinWeightPeriod.String()))
			return
		}
		c.period = d
	})
}

// WithErrorPenalty sets A58's error_utilization_penalty, the weight of
// the error rate eps/qps beside the utilisation. The default is
// DefaultErrorPenalty (1); 0 ignores errors. A negative f, NaN or an
// infinity is a bad option.
func WithErrorPenalty(f float64) ReportedOption {
	return reportedFunc(func(c *reportedConfig) {
		if !(f >= 0) || math.IsInf(f, 1) {
			c.bad(balancer.BadOption("WithErrorPenalty", f, "a finite number, 0 or more"))
			return
		}
		c.penalty = f
	})
}

// WithClock sets the clock Done, Refresh and Weight read (Pick reads
// none). The default is the monotonic clock. Tests and simulations pass
// their own and call Refresh; it should not step back. A nil now is a bad
// option.
func WithClock(now func() time.Time) ReportedOption {
	return reportedFunc(func(c *reportedConfig) {
		if now == nil {
			c.bad(balancer.BadOption("WithClock", "nil", "a function"))
			return
		}
		c.clock = now
	})
}

// NewReported returns a report-driven weighted round-robin picker with an
// empty set; call Update to give it backends. Until reports arrive (and
// after the blackout) every backend weighs the same, and picks go round
// robin. A bad option (see balancer.ErrBadOption) makes every Update
// return its error, and the Reported stays empty.
func NewReported(opts ...ReportedOption) *Reported {
	c := reportedConfig{
		config:   config{limit: DefaultMaxSchedule},
		blackout: DefaultBlackout,
		expiry:   DefaultReportExpiry,
		period:   DefaultWeightPeriod,
		penalty:  DefaultErrorPenalty,
	}
	for _, o := range opts {
		o.applyReported(&c)
	}
	inner := []Option{WithMaxSchedule(int(c.limit))}
	if c.rand != nil {
		inner = append(inner, WithRand(c.rand))
	}
	p := &Reported{rr: New(inner...), cfg: c}
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
	if math.IsInf(u, 1) || math.IsInf(l.RPS, 1) || !(l.EPS >= 0) || math.IsInf(l.EPS, 1) {
		return // not a report: Load's fields are finite and non-negative
	}
	w := l.RPS / (u + p.cfg.penalty*l.EPS/l.RPS)
	if !(w >= minWeight) || math.IsInf(w, 0) {
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
	if !p.lazy.Load() && p.idle() && p.lazy.CompareAndSwap(false, true) {
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
	if p.cfg.err != nil {
		return fmt.Errorf("wrr: update: %w", p.cfg.err)
	}
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

// The bounds of a reported weight, against the others', after gRPC's
// C++ weighted_round_robin (static_stride_scheduler.cc: kMaxRatio 10,
// kMinRatio 0.01). C++ clamps the largest weight at 10 times the mean of
// all weights, its own included; in a set of ten or fewer that bound never
// binds (among four, the largest is at most four times the mean, whatever
// it is), so one report of a near-zero utilisation would take nearly every
// pick. Here the mean is that of the usable weights other than the
// largest: the bound holds in every set, and is C++'s in large ones.
const (
	// maxRatio: no weight exceeds maxRatio times the mean of the usable
	// weights but the largest. One backend among n whose others weigh
	// alike takes at most maxRatio/(maxRatio+n-1) of the picks (10/13
	// among four).
	maxRatio = 10
	// minRatio: no usable weight is below minRatio times the mean of the
	// bounded weights, so that a backend that reported itself swamped
	// still gets the requests that bring its next report.
	minRatio = 0.01
)

// minWeight is the smallest A58 weight Done takes, the smallest normal
// float64: below it a weight has lost its precision, and the mean in
// scaleWeights, whose terms are divided before they are summed, could
// round to zero.
const minWeight = 0x1p-1022

// scaleWeights turns A58 weights into the schedule's integer weights, as
// grpc-go's newScheduler does, with C++'s bounds: with fewer than two
// usable weights, every backend weighs 1 (round robin); otherwise every
// usable weight is bounded to [minRatio × mean, ceiling], where the
// ceiling is maxRatio times the mean of the usable weights but the
// largest (see maxRatio), a backend without one weighs the mean of the
// bounded weights, and the ceiling is scaled to reportedScale, every
// weight to at least 1. One ceiling for all keeps the weights' order.
//
// Nothing overflows for weights up to math.MaxFloat64: terms are divided
// before they are summed, and every weight is divided by the ceiling
// before it is scaled. Worked example, weights 1e6 (a report of cpu
// 0.0001 at 100 qps), 200, 200, 200: the ceiling is 10 × 200 = 2000, so
// the weights are 1000, 100, 100, 100, and the first backend takes 10/13
// of the picks, not 1e6/(1e6+600).
func scaleWeights(ws []float64) []int64 {
	out := make([]int64, len(ws))
	n, top := 0, -1
	for i, w := range ws {
		if w > 0 {
			n++
			if top < 0 || w > ws[top] {
				top = i
			}
		}
	}
	if n < 2 {
		for i := range out {
			out[i] = 1
		}
		return out
	}
	// The mean of the others: each term at least minWeight/(n-1) > 0.
	var rest float64
	for i, w := range ws {
		if w > 0 && i != top {
			rest += w / float64(n-1)
		}
	}
	ceil := ws[top]
	if ceil/maxRatio > rest {
		ceil = rest * maxRatio // below ws[top]: no overflow
	}
	// Relative to the ceiling every bounded weight is in (0, 1].
	var mean float64
	for _, w := range ws {
		if w > 0 {
			mean += min(w, ceil) / ceil / float64(n)
		}
	}
	floor := minRatio * mean
	for i, w := range ws {
		r := mean
		if w > 0 {
			r = max(min(w, ceil)/ceil, floor)
		}
		out[i] = max(1, int64(math.Round(r*reportedScale)))
	}
	return out
}

// Weight returns the weight the backend with this ID has in the schedule
// now, as A58 computes it (qps / utilisation and penalty, before the
// schedule's bounds, see scaleWeights), and whether it
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

// Start runs the weight loop until ctx ends or Close is called: every
// period (WithWeightPeriod) it recomputes the weights and rebuilds the
// schedule if they changed. Without Start, reports start a lazy loop (see
// Done), which stops when reports stop; Start's keeps weights expiring on
// time even when every backend falls silent. Start returns an error
// wrapping balancer.ErrStarted if called twice, or balancer.ErrClosed
// after Close (balancer.Lifecycle's rules).
func (p *Reported) Start(ctx context.Context) error {
	if err := p.life.Start(ctx, func(ctx context.Context) { p.loop(ctx.Done(), false) }); err != nil {
		return fmt.Errorf("wrr: reported: start: %w", err)
	}
	return nil
}

// Close stops the weight loop and waits for Start's to return; a lazy
// loop ends at its next tick without recomputing. Pick, Done, Update and
// Refresh keep working: call Refresh to recompute. Close is idempotent.
func (p *Reported) Close() error {
	p.life.Close()
	return nil
}

// idle reports whether neither Start's loop runs nor Close was called: a
// report may then start a lazy loop.
func (p *Reported) idle() bool { return !p.life.Started() && !p.life.Closed() }

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
		if lazy && !p.idle() {
			p.lazy.Store(false)
			return
		}
		p.mu.Lock()
		fresh := p.refresh(p.ticks())
		p.mu.Unlock()
		if lazy && !fresh {
			p.lazy.Store(false)
			return
		}
	}
}
