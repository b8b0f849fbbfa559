package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// Balancer keeps failing backends away from the picker it wraps. Create it
// with New; the zero value is not ready.
//
// Pick, Done, Observe, Apply, Update, View, InFlight and the admin methods
// are safe for concurrent use. Pick takes no lock and allocates nothing. Done
// allocates nothing and never runs the inner Update itself; it takes no
// lock on its common path. A Done that asks for an ejection takes that
// backend's own mutex, to keep the error for OnChange; without Start and
// with the real clock, the one that finds no applier running also takes
// the mutex that guards Start and Close, and starts the lazy applier (see
// the package doc). Update, Apply, View and the admin methods serialise on
// a mutex that Pick and Done never take. A Balancer must not be copied.
type Balancer struct {
	// Immutable after New.
	inner   balancer.Balancer
	fb      balancer.Feedback        // inner's Feedback, or nil
	hu      balancer.HealthUpdater   // inner's HealthUpdater, or nil: it gets the whole set
	counter balancer.InFlightCounter // inner's InFlightCounter, or nil
	s       settings
	epoch   time.Time     // the Clock's time at New; due is measured from it
	wake    chan struct{} // capacity 1: a pending change for the applier
	// runLazy runs a lazy applier; see request.
	runLazy func()

	// Atomic: read by Pick, Done and Observe without a lock.
	cur     atomic.Pointer[set]     // the current set, for lookups by ID
	ramp    atomic.Pointer[rampSet] // backends ramping up; nil when none
	pending atomic.Bool             // a Done or Observe asked for a change
	due     atomic.Int64            // next timed transition, ns after epoch; noDue if none
	lazy    atomic.Bool             // a lazily started applier runs
	failing atomic.Int64            // nodes whose fails is not 0; Done skips its lookup on success when 0
	started atomic.Bool             // Start was called: no lazy applier is needed

	// Guarded by mu, which Update, Apply, View and the admin methods take.
	mu        sync.Mutex
	known     map[string]*node // by ID: the set's nodes and the removed ones kept
	removed   []*node          // the removed nodes kept, oldest removal first
	handed    []*node          // what the inner picker was last given, in set order
	handedUp  []bool           // with hu: which of handed it was told are eligible
	handedNew bool             // handed changed since publish last built the ramp set
	panicking bool             // handed is the fallback set
	seeded    bool             // a non-empty set was given: later additions ramp up
	gen       uint64           // counts Updates, to find removed nodes
	innerErr  error            // the last inner Update made by Apply failed with it

	// Guarded by qmu: changes waiting for OnChange.
	qmu        sync.Mutex
	queue      []Change
	delivering bool

	// Guarded by life: the goroutines this Balancer started.
	life        sync.Mutex
	running     bool // Start was called
	closed      bool // Close was called or Start's context ended
	innerClosed bool // Close has closed the inner picker
	ctx         context.Context
	cancel      context.CancelFunc
	routines    sync.WaitGroup
}

var (
	_ balancer.Balancer        = (*Balancer)(nil)
	_ balancer.Feedback        = (*Balancer)(nil)
	_ balancer.InFlightCounter = (*Balancer)(nil)
	_ balancer.Starter         = (*Balancer)(nil)
	_ balancer.Unwrapper       = (*Balancer)(nil)
	_ io.Closer                = (*Balancer)(nil)
)

// noDue marks that no timed transition is scheduled.
const noDue = math.MaxInt64

// set is an immutable published set: the backends in Update's order, their
// nodes, and their nodes by ID.
type set struct {
	bs    []balancer.Backend
	nodes []*node
	byID  map[string]*node
}

// lookup returns b's node, or nil if b is nil or not in the set. It costs
// one map read and allocates nothing.
func (s *set) lookup(b balancer.Backend) *node {
	if b == nil {
		return nil
	}
	return s.byID[b.ID()]
}

// minKept is how many removed backends' nodes a Balancer keeps at least,
// whatever the size of the set (balancer.Registry's rule).
const minKept = 64

// rampSet holds, for each backend ramping up, the threshold below which a
// random 64-bit number accepts a pick of it: its factor times 2⁶⁴.
type rampSet struct {
	accept map[string]uint64
}

// Bits of node.flags, mirrored from the guarded fields for lock-free readers.
const (
	flagLive    = 1 << iota // in the current set
	flagEjected             // passively ejected
	flagMaint               // in maintenance: probe results are ignored
	flagOut                 // not eligible: Done counts no failure for it
)

// Bits of node.verdict: the active verdict and the streak of results
// against it.
const (
	upBit      = 1 << 63
	streakMask = upBit - 1
)

// node is the health of one backend, kept by ID across updates and for a
// while after its backend leaves the set (see keep). The zero node is a
// backend never seen; join sets it up.
type node struct {
	// Atomic: written by Done, Observe and probers without a lock.
	fails   atomic.Int64  // consecutive failed requests
	want    atomic.Uint32 // Reason of a requested ejection; 0 if none
	verdict atomic.Uint64 // upBit, and results in a row against it
	passes  atomic.Int64  // passing probes in a row while ejected
	flags   atomic.Uint32
	be      atomic.Pointer[backendRef] // the current Backend value, for probers

	// Guarded by errMu, taken only on the way to a change of state, never
	// on Done's common path. A mutex rather than an atomic pointer, so that
	// keeping an error allocates nothing.
	errMu    sync.Mutex
	wantErr  error // the failure that asked for the ejection
	probeErr error // the last failing probe since the last passing one

	// Guarded by Balancer.mu.
	id          string
	init        bool
	mark        uint64 // Balancer.gen of the last Update that held it
	admin       State  // Up, Draining or Maintenance
	up          bool   // the verdict as last applied
	ejected     bool
	until       time.Time // when the ejection ends
	ejections   int       // ejections in a row, before decay
	returned    time.Time // when the last ejection ended
	state       State
	reason      Reason
	since       time.Time
	wasEligible bool
	ramping     bool
	rampFrom    time.Time
	factor      float64 // the ramp's share factor at the last step
	pubRamping  bool    // ramping, as Pick last saw it
	published   float64 // factor, as Pick last saw it
	stopProbe   context.CancelFunc
}

type backendRef struct{ b balancer.Backend }

func (n *node) eligible() bool {
	return n.admin == Up && n.up && !n.ejected
}

// summary is the State reported for n.
func (n *node) summary() State {
	switch {
	case n.admin != Up:
		return n.admin
	case !n.up:
		return Down
	case n.ejected:
		return Ejected
	}
	return Up
}

func (n *node) setFlag(f uint32, on bool) {
	if on {
		n.flags.Or(f)
	} else {
		n.flags.And(^f)
	}
}

// setErr stores err in *p under n.errMu.
func (n *node) setErr(p *error, err error) {
	n.errMu.Lock()
	*p = err
	n.errMu.Unlock()
}

// getErr loads *p under n.errMu.
func (n *node) getErr(p *error) error {
	n.errMu.Lock()
	defer n.errMu.Unlock()
	return *p
}

// New returns a Balancer that hands inner the eligible subset of every set
// given to Update (or, if inner is a balancer.HealthUpdater, every backend
// not drained or in maintenance with its eligibility, through
// UpdateHealth). inner must be new, with an empty set, and is from then on
// updated only through the Balancer. New checks cfg and returns an error
// wrapping ErrConfig if a field is out of range; it starts no goroutine.
func New(inner balancer.Balancer, cfg Config) (*Balancer, error) {
	if inner == nil || isNilPointer(inner) {
		return nil, fmt.Errorf("%w: nil inner balancer", ErrConfig)
	}
	s, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	h := &Balancer{inner: inner, s: s, wake: make(chan struct{}, 1)}
	h.fb, _ = inner.(balancer.Feedback)
	h.hu, _ = inner.(balancer.HealthUpdater)
	h.counter, _ = inner.(balancer.InFlightCounter)
	h.epoch = s.clock.Now()
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.ctx.Done() // make its channel now, not in the applier
	h.cur.Store(&set{})
	h.known = make(map[string]*node)
	h.due.Store(noDue)
	lazyTimer := stoppedTimer() // only one lazy applier runs at a time
	h.runLazy = func() { h.run(nil, false, lazyTimer) }
	return h, nil
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

func isNilPointer(v any) bool {
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}

// Update replaces the set. It validates bs (see balancer.Validate) and on
// error keeps the previous set. Backends that stay keep their health, and
// so do backends that come back after leaving: the state of the last
// max(n, 64) backends removed is kept by ID, for a set of n (which ones
// depends only on the order of the sets given to Update). New backends
// start up, or down with Config.InitialDown; those added after the first
// non-empty set ramp up under Config.SlowStart. Probing starts for new
// backends and stops for removed ones.
//
// Update first applies what is pending or due, as Apply would, then hands
// the inner picker the eligible backends of bs (the very values given
// here), or, if none is eligible, every backend not drained or in
// maintenance (panic mode). An ejection that waits for a free slot (see
// Config.MaxEjectedPercent) is made under the new set's cap once the inner
// picker has taken the set, before Update returns, at the cost of a second
// inner Update. If the inner Update fails, the error is returned and the
// previous set stays, with every backend's state as that Apply left it.
//
// Cost: O(n) and the inner Update, which is usually the larger part.
func (h *Balancer) Update(bs []balancer.Backend) error {
	// Validate under the mutex: an Update that started first, and is slow
	// to read its backends, must not overwrite a newer set.
	h.mu.Lock()
	s, err := balancer.NewSet(bs)
	if err == nil {
		err = h.update(s.Backends, s.IDs)
	} else {
		err = fmt.Errorf("health: update: %w", err)
	}
	h.mu.Unlock()
	h.deliver()
	h.poke()
	return err
}

func (h *Balancer) update(bs []balancer.Backend, ids []string) error {
	now := h.s.clock.Now()
	prev := h.cur.Load()
	// What is pending or due is applied to the current set, under its cap:
	// if the inner picker refuses the new set, that is all that changed.
	h.step(now, prev.nodes, true)
	// Nothing is registered or retired until the inner picker takes the
	// set: a node for a new ID is made here and kept only then.
	nodes := make([]*node, len(bs))
	byID := make(map[string]*node, len(bs))
	for i, b := range bs {
		id := ids[i]
		n := h.known[id]
		if n == nil {
			n = new(node)
		}
		if n.flags.Load()&flagLive == 0 {
			h.join(n, b, now)
		}
		nodes[i], byID[id] = n, n
	}
	// The joining nodes catch up (an ejection that ended while they were
	// away, a ramp). Ejections waiting for a slot wait for the new cap.
	h.step(now, nodes, false)
	tbs, tnodes, up, panicking := h.target(bs, nodes)
	if err := h.hand(tbs, up); err != nil {
		// The inner picker keeps its set; give it what the first step
		// made of the current one, if that changed.
		h.applyLocked(now)
		return fmt.Errorf("health: update: %w", err)
	}
	h.gen++
	for i, n := range nodes {
		n.mark = h.gen
		n.be.Store(&backendRef{bs[i]})
	}
	for _, n := range prev.nodes {
		if n.mark != h.gen {
			n.setFlag(flagLive, false)
			h.resetFails(n)
			n.ramping = false
			h.stopProber(n)
		}
	}
	h.keep(prev.nodes, nodes)
	for _, n := range nodes {
		n.setFlag(flagLive, true)
		h.startProber(n)
	}
	h.cur.Store(&set{bs: bs, nodes: nodes, byID: byID})
	h.handed, h.handedUp, h.panicking, h.innerErr = tnodes, up, panicking, nil
	h.handedNew = true
	h.seeded = h.seeded || len(bs) > 0
	h.applyLocked(now) // ejections the new cap makes room for; publishes
	return nil
}

// keep records the nodes of a set the inner picker has taken, and keeps
// those of prev that left it, so that a backend coming back finds its
// state: the last max(len(nodes), minKept) removed, in the order they
// were removed (set order within one Update). Which nodes are kept
// depends on nothing but the sequence of sets. h.mu must be held and
// h.gen marks the new set's nodes.
func (h *Balancer) keep(prev, nodes []*node) {
	for _, n := range nodes {
		h.known[n.id] = n
	}
	removed := make([]*node, 0, len(h.removed)+len(prev))
	for _, n := range h.removed {
		if n.mark != h.gen { // not back in the set
			removed = append(removed, n)
		}
	}
	for _, n := range prev {
		if n.mark != h.gen {
			removed = append(removed, n)
		}
	}
	if drop := len(removed) - max(len(nodes), minKept); drop > 0 {
		for _, n := range removed[:drop] {
			delete(h.known, n.id)
		}
		clear(removed[:drop]) // the array must not keep them either
		removed = removed[drop:]
	}
	h.removed = removed
}

// join sets up a node for a backend entering the set: new, or back after
// leaving it.
func (h *Balancer) join(n *node, b balancer.Backend, now time.Time) {
	if !n.init {
		n.init = true
		n.id = b.ID()
		n.admin = Up
		n.up = !h.s.initialDown
		if n.up {
			n.verdict.Store(upBit)
		}
		n.state, n.since = n.summary(), now
	}
	h.resetFails(n)
	n.want.Store(0)
	n.passes.Store(0)
	// A backend of the first set is not returning from anywhere: no ramp.
	n.wasEligible = !h.seeded && n.eligible()
	n.setFlag(flagOut, !n.eligible())
}

// panics reports whether nodes call for panic mode: none is eligible, and
// some backend is neither drained nor in maintenance.
func panics(nodes []*node) bool {
	fallback := false
	for _, n := range nodes {
		if n.eligible() {
			return false
		}
		fallback = fallback || n.admin == Up
	}
	return fallback
}

// inTarget reports whether the inner picker should have n: if it is
// eligible, or in panic mode if it is neither drained nor in maintenance.
// An inner HealthUpdater (whole) has every backend neither drained nor in
// maintenance, and is told which are eligible.
func inTarget(n *node, panicking, whole bool) bool {
	if panicking || whole {
		return n.admin == Up
	}
	return n.eligible()
}

// target returns what the inner picker should have and whether that is the
// panic-mode fallback; for an inner HealthUpdater, also which backends are
// eligible (up), and never the fallback: such a picker decides by its own
// rule what to do when too few are (package locality panics per level).
func (h *Balancer) target(bs []balancer.Backend, nodes []*node) (tbs []balancer.Backend, tnodes []*node, up []bool, panicking bool) {
	whole := h.hu != nil
	panicking = !whole && panics(nodes)
	tbs = make([]balancer.Backend, 0, len(nodes))
	tnodes = make([]*node, 0, len(nodes))
	if whole {
		up = make([]bool, 0, len(nodes))
	}
	for i, n := range nodes {
		if inTarget(n, panicking, whole) {
			tbs, tnodes = append(tbs, bs[i]), append(tnodes, n)
			if whole {
				up = append(up, n.eligible())
			}
		}
	}
	return tbs, tnodes, up, panicking
}

// hand gives the inner picker its set: through UpdateHealth, with up, if
// it is a HealthUpdater, else through Update.
func (h *Balancer) hand(tbs []balancer.Backend, up []bool) error {
	if h.hu != nil {
		return h.hu.UpdateHealth(tbs, up)
	}
	return h.inner.Update(tbs)
}

// targetChanged reports, without allocating, whether target(nodes) differs
// from what the inner picker has (for an inner HealthUpdater, in a
// backend's eligibility too), and whether it is the panic set. The two can
// be the same set: all of it.
func (h *Balancer) targetChanged(nodes []*node) (changed, panicking bool) {
	whole := h.hu != nil
	panicking = !whole && panics(nodes)
	j := 0
	for _, n := range nodes {
		if inTarget(n, panicking, whole) {
			if j == len(h.handed) || h.handed[j] != n || whole && h.handedUp[j] != n.eligible() {
				return true, panicking
			}
			j++
		}
	}
	return j != len(h.handed), panicking
}

// Pick returns the inner picker's choice. While a backend ramps up under
// slow start, a pick of it with factor f is kept with probability f;
// otherwise it is handed back to the inner picker (Done with
// balancer.ErrAbandoned) and Pick asks again with Avoid set to it, once.
// A request that already names a backend to avoid is passed through as it
// is, so that Avoid keeps its meaning.
//
// Cost: the inner Pick and one atomic load; while some backend ramps up,
// also a map read and a random number, and for a put-back pick an inner
// Done and a second inner Pick. No lock, no allocation.
func (h *Balancer) Pick(req balancer.Request) (balancer.Backend, error) {
	b, err := h.inner.Pick(req)
	if rs := h.ramp.Load(); rs != nil && err == nil && req.Avoid == "" {
		return h.rampPick(rs, b, req)
	}
	return b, err
}

func (h *Balancer) rampPick(rs *rampSet, b balancer.Backend, req balancer.Request) (balancer.Backend, error) {
	id := b.ID()
	t, ok := rs.accept[id]
	if !ok || h.s.rand() < t {
		return b, nil
	}
	if h.fb != nil {
		h.fb.Done(b, balancer.Result{Err: balancer.ErrAbandoned})
	}
	req.Avoid = id
	return h.inner.Pick(req)
}

// Done observes the result of a request to b, then passes it to the inner
// picker if that is a balancer.Feedback. Call it once per Pick, when the
// request has finished (see balancer.Feedback).
//
// A success resets b's count of consecutive failures. A failure (see
// Config.IsFailure) that makes ConsecutiveFailures in a row, or a refused
// connection, asks for b's ejection: Done marks it and wakes the applier,
// which hands the inner picker the new set; Done itself never waits. An
// abandoned result changes nothing. Done for nil, unknown or removed
// backends only passes the result on.
//
// Cost, besides the inner Done: on a success while no backend has a
// failure counted, one atomic load; otherwise a map read by ID and a few
// atomic operations, and on a failure the walk of the error's chain. No
// allocation. No lock, but for the Done that asks for an ejection: it
// takes b's error mutex, uncontended, and, if it must start the lazy
// applier (no Start, real clock, none running), the mutex that guards
// Start and Close, and starts a goroutine.
func (h *Balancer) Done(b balancer.Backend, r balancer.Result) {
	if h.s.passive {
		h.observeResult(b, r)
	}
	if h.fb != nil {
		h.fb.Done(b, r)
	}
}

func (h *Balancer) observeResult(b balancer.Backend, r balancer.Result) {
	if r.Abandoned() {
		return // the caller gave up: nothing was learned
	}
	if !h.s.isFailure(r) {
		// A success ends the backend's run of failures, and withdraws an
		// ejection still waiting (for the cap, or for the applier). While
		// no backend has a failure counted, which is the usual state,
		// there is nothing to end and no need to look the backend up.
		if h.failing.Load() == 0 {
			return
		}
		if n := h.cur.Load().lookup(b); n != nil {
			if n.fails.Load() != 0 {
				h.resetFails(n)
			}
			if n.want.Load() != 0 {
				n.want.Store(0)
			}
		}
		return
	}
	n := h.cur.Load().lookup(b)
	if n == nil || n.flags.Load()&(flagLive|flagOut) != flagLive {
		return // unknown, removed, or already out (in panic mode, say)
	}
	reason := ReasonFailures
	if r.Err != nil && errors.Is(r.Err, syscall.ECONNREFUSED) {
		reason = ReasonRefused
	}
	c := n.fails.Add(1)
	if c == 1 {
		h.failing.Add(1)
		// An Update may have removed n, or a step taken it out, since the
		// check above, and reset its count before this one was added: undo
		// it, or failing stays above zero for good. (A count above one
		// means an earlier Done counted 1 after that reset, and will undo
		// both.)
		if n.flags.Load()&(flagLive|flagOut) != flagLive {
			h.resetFails(n)
			return
		}
	}
	if (c < h.s.consecutive && reason != ReasonRefused) || n.want.Load() != 0 {
		return
	}
	n.setErr(&n.wantErr, r.Err)
	if n.want.CompareAndSwap(0, uint32(reason)) {
		h.request()
	}
}

// resetFails ends n's run of failures, keeping h.failing in step.
func (h *Balancer) resetFails(n *node) {
	if n.fails.Swap(0) != 0 {
		h.failing.Add(-1)
	}
}

// request marks a pending change and wakes the applier, starting one if
// none runs and the real clock is in use. It never blocks; it takes
// h.life only to start an applier.
func (h *Balancer) request() {
	h.pending.Store(true)
	h.wakeApplier()
}

// poke makes the applier see the time of the next timed transition, which
// a method running on the caller's goroutine may have moved earlier: it
// wakes the applier, or starts one lazily (as request does), if a
// transition is due at all. It must be called with no lock held.
func (h *Balancer) poke() {
	if h.due.Load() != noDue {
		h.wakeApplier()
	}
}

// wakeApplier wakes the applier, and starts one if none runs, Start was
// not called and the real clock is in use.
func (h *Balancer) wakeApplier() {
	select {
	case h.wake <- struct{}{}:
	default:
	}
	if h.s.lazyApplier && !h.started.Load() && h.lazy.CompareAndSwap(false, true) {
		h.life.Lock()
		if h.closed || h.running {
			h.lazy.Store(false)
		} else {
			h.routines.Add(1)
			go h.runLazy() // a func value made in New: starting it allocates nothing
		}
		h.life.Unlock()
	}
}

// Observe feeds one active-check result for the backend with this ID, as
// if the prober had produced it: nil is a pass, anything else a failure.
// It counts toward Rise and Fall exactly like a probe, and a change it
// causes is applied by the applier, or by the next Apply. Observe for an
// ID not in the set, or in maintenance, does nothing.
//
// The probers Start runs call the same code. The scenario simulator calls
// Observe directly, with a virtual Clock and no Start.
func (h *Balancer) Observe(id string, err error) {
	n := h.cur.Load().byID[id]
	if n == nil || n.flags.Load()&flagLive == 0 {
		return
	}
	h.observe(n, err)
}

func (h *Balancer) observe(n *node, err error) {
	f := n.flags.Load()
	if f&flagMaint != 0 {
		return
	}
	if err != nil {
		n.setErr(&n.probeErr, err)
		n.passes.Store(0)
	} else {
		n.setErr(&n.probeErr, nil)
		if f&flagEjected != 0 && n.passes.Add(1) == int64(h.s.rise) {
			h.request() // enough passes to un-eject
		}
	}
	for {
		old := n.verdict.Load()
		up := old&upBit != 0
		next := old & upBit // a result that agrees ends the streak
		flipped := false
		if (err == nil) != up {
			streak, need := old&streakMask+1, uint64(h.s.fall)
			if !up {
				need = uint64(h.s.rise)
			}
			if streak >= need {
				next, flipped = (old&upBit)^upBit, true
			} else {
				next = old&upBit | streak
			}
		}
		if old == next || n.verdict.CompareAndSwap(old, next) {
			if flipped {
				h.request()
			}
			return
		}
	}
}

// Apply applies, now and on the caller's goroutine, every pending change
// (ejections asked for by Done, verdicts reached by probes or Observe)
// and every timed transition due at the Clock's time (ejections ending,
// slow-start steps), then calls the inner Update at most once, if the
// eligible set changed. OnChange is called for each change before Apply
// returns, unless another goroutine is delivering changes at the time,
// which then delivers them before its own call returns. If a timed
// transition is then scheduled, Apply wakes the applier (or, without Start
// and with the real clock, starts one), so that it is applied on time.
//
// When nothing is pending or due, Apply costs two atomic loads and a
// reading of the Clock. The applier goroutine (see Start) does the same
// work.
func (h *Balancer) Apply() {
	if h.apply() {
		h.poke()
	}
}

// apply is Apply without waking the applier, for the applier itself. It
// reports whether it applied anything.
func (h *Balancer) apply() bool {
	if !h.pending.Load() {
		d := h.due.Load()
		if d == noDue || int64(h.s.clock.Now().Sub(h.epoch)) < d {
			return false
		}
	}
	h.mu.Lock()
	h.applyLocked(h.s.clock.Now())
	h.mu.Unlock()
	h.deliver()
	return true
}

// applyLocked steps every node and hands the inner picker the result if it
// changed. h.mu must be held.
func (h *Balancer) applyLocked(now time.Time) {
	cur := h.cur.Load()
	h.step(now, cur.nodes, true)
	if changed, panicking := h.targetChanged(cur.nodes); !changed {
		h.panicking = panicking
	} else {
		tbs, tnodes, up, panicking := h.target(cur.bs, cur.nodes)
		if err := h.hand(tbs, up); err != nil {
			h.innerErr = err // keep what the inner picker has; the next change retries
		} else {
			h.handed, h.handedUp, h.panicking, h.innerErr = tnodes, up, panicking, nil
			h.handedNew = true
		}
	}
	h.publish(now)
}

// step moves every node to its state at now: verdicts, ejections ending,
// ejections asked for (up to the cap of nodes, if eject), and slow-start
// ramps. Without eject, ejections asked for stay pending. h.mu must be
// held.
func (h *Balancer) step(now time.Time, nodes []*node, eject bool) {
	if eject {
		h.pending.Store(false) // before reading: a later request is not lost
	}
	ejected := 0
	for _, n := range nodes {
		if n.admin != Maintenance {
			if up := n.verdict.Load()&upBit != 0; up != n.up {
				n.up = up
				var err error
				if !up {
					err = n.getErr(&n.probeErr)
				}
				h.note(n, now, ReasonProbe, err, time.Time{})
			}
		}
		if n.ejected {
			switch {
			case !now.Before(n.until):
				h.uneject(n, now, ReasonEjectionEnded)
			case n.passes.Load() >= int64(h.s.rise):
				h.uneject(n, now, ReasonProbe)
			}
		}
		if n.ejected {
			ejected++
		}
	}
	// Ejections asked for, in set order, while the cap allows; one
	// backend may always be ejected. The rest stay asked for until a slot
	// frees or a success cancels them.
	limit := max(1, len(nodes)*h.s.maxEjectedPercent/100)
	for _, n := range nodes {
		w := Reason(n.want.Load())
		switch {
		case w == 0 || !eject:
		case n.ejected || n.admin != Up || !n.up:
			n.want.Store(0) // already out
		case ejected < limit:
			n.want.Store(0)
			h.eject(n, now, w)
			ejected++
		}
	}
	for _, n := range nodes {
		el := n.eligible()
		if el != n.wasEligible {
			n.setFlag(flagOut, !el)
			h.resetFails(n) // a run of failures does not span a time out
		}
		if el && !n.wasEligible && h.s.slowStart > 0 {
			n.ramping, n.rampFrom = true, now
		}
		n.wasEligible = el
		n.ramping = n.ramping && el
		if n.ramping {
			f := h.s.slowStartMin + (1-h.s.slowStartMin)*float64(now.Sub(n.rampFrom))/float64(h.s.slowStart)
			n.factor = min(f, 1)
			n.ramping = f < 1
		}
	}
}

func (h *Balancer) eject(n *node, now time.Time, why Reason) {
	base, most := h.s.baseEject, h.s.maxEject
	k := min(n.decayed(now, base), int(most/base)) + 1
	n.ejections = k
	d := most // k base times, unless that is more (or does not fit a Duration)
	if k <= int(most/base) {
		d = base * time.Duration(k)
	}
	n.until = now.Add(d)
	n.ejected = true
	n.setFlag(flagEjected, true)
	n.passes.Store(0)
	h.resetFails(n)
	h.note(n, now, why, n.getErr(&n.wantErr), n.until)
}

// decayed returns the ejection count less one for each base period spent
// in since the last ejection ended.
func (n *node) decayed(now time.Time, base time.Duration) int {
	if n.ejected || n.returned.IsZero() {
		return n.ejections
	}
	return max(n.ejections-int(now.Sub(n.returned)/base), 0)
}

func (h *Balancer) uneject(n *node, now time.Time, why Reason) {
	n.ejected = false
	n.setFlag(flagEjected, false)
	n.returned = now
	h.resetFails(n)
	n.want.Store(0)
	h.note(n, now, why, nil, time.Time{})
}

// note records a change of n's summary state, if there is one, for
// OnChange. h.mu must be held.
func (h *Balancer) note(n *node, now time.Time, why Reason, err error, until time.Time) {
	s := n.summary()
	if s == n.state {
		return
	}
	c := Change{ID: n.id, Old: n.state, New: s, Reason: why, Err: err, At: now, Until: until}
	n.state, n.reason, n.since = s, why, now
	if h.s.onChange != nil {
		h.qmu.Lock()
		h.queue = append(h.queue, c)
		h.qmu.Unlock()
	}
}

// publish stores what Pick reads for slow start, if it changed, and when
// the applier must next run. It allocates only when a ramp starts, steps
// or ends. h.mu must be held.
func (h *Balancer) publish(now time.Time) {
	ramping, changed := false, h.handedNew
	for _, n := range h.handed {
		ramping = ramping || n.ramping
		changed = changed || n.ramping != n.pubRamping || n.ramping && n.factor != n.published
	}
	if changed {
		var next *rampSet
		for _, n := range h.handed {
			n.pubRamping, n.published = n.ramping, n.factor
			if n.ramping {
				if next == nil {
					next = &rampSet{accept: make(map[string]uint64)}
				}
				next.accept[n.id] = uint64(n.factor * (1 << 64))
			}
		}
		h.ramp.Store(next)
		h.handedNew = false
	}
	due := time.Duration(noDue)
	if ramping {
		due = now.Sub(h.epoch) + max(h.s.slowStart/rampSteps, time.Millisecond)
	}
	for _, n := range h.cur.Load().nodes {
		if n.ejected {
			due = min(due, n.until.Sub(h.epoch))
		}
	}
	h.due.Store(int64(due))
}

// rampSteps is how many steps a slow-start ramp is applied in.
const rampSteps = 20

// deliver calls OnChange for the queued changes, in order, with no lock
// held. If another goroutine is delivering, it will deliver these too.
func (h *Balancer) deliver() {
	if h.s.onChange == nil {
		return
	}
	h.qmu.Lock()
	if h.delivering {
		h.qmu.Unlock()
		return
	}
	h.delivering = true
	// delivering is cleared in the critical section that finds the queue
	// empty: a change queued after it is seen by its own caller's deliver,
	// never left to a deliverer that has already decided to stop.
	for len(h.queue) > 0 {
		q := h.queue
		h.queue = nil
		h.qmu.Unlock()
		h.deliverAll(q)
		h.qmu.Lock()
	}
	h.delivering = false
	h.qmu.Unlock()
}

// deliverAll calls OnChange for each of q, with no lock held. If OnChange
// panics, delivering is cleared so that later changes are still delivered.
func (h *Balancer) deliverAll(q []Change) {
	ok := false
	defer func() {
		if !ok {
			h.qmu.Lock()
			h.delivering = false
			h.qmu.Unlock()
		}
	}()
	for _, c := range q {
		h.s.onChange(c)
	}
	ok = true
}

// Drain takes the backend out of the inner picker's set gently: it gets
// no new requests, those in flight finish, and its probes go on. Enable
// brings it back. Drain returns an error wrapping ErrUnknownBackend if id
// is not in the set. The state survives Update while the backend stays.
//
// Drain, Maintenance and Enable for a backend in the set apply everything
// pending or due before they return, as Apply does, whether or not the
// backend's own state changes.
func (h *Balancer) Drain(id string) error { return h.setAdmin(id, Draining) }

// Maintenance takes the backend out as Drain does and also pauses its
// probes; results fed to Observe are ignored. Enable brings it back.
func (h *Balancer) Maintenance(id string) error { return h.setAdmin(id, Maintenance) }

// Enable ends Drain or Maintenance. The backend returns if its probes and
// passive checks allow, ramping up under slow start.
func (h *Balancer) Enable(id string) error { return h.setAdmin(id, Up) }

func (h *Balancer) setAdmin(id string, a State) error {
	h.mu.Lock()
	n := h.cur.Load().byID[id]
	if n == nil {
		h.mu.Unlock()
		return fmt.Errorf("%w %q", ErrUnknownBackend, id)
	}
	now := h.s.clock.Now()
	if n.admin != a {
		n.admin = a
		n.setFlag(flagMaint, a == Maintenance)
		if a == Maintenance {
			h.stopProber(n)
		} else {
			h.startProber(n)
		}
		h.note(n, now, ReasonAdmin, nil, time.Time{})
	}
	h.applyLocked(now) // what is pending or due, whether or not n changed
	h.mu.Unlock()
	h.deliver()
	h.poke()
	return nil
}

// InFlight returns the inner picker's count of requests in flight on the
// backend with this ID, if the inner picker counts them (it implements
// balancer.InFlightCounter: leastconn, lrt, consistent's bounded Ring),
// and 0 otherwise. Health counts nothing itself; this passes the inner
// count through, so that metrics and the conformance kit read it through
// the decorator. No lock, no allocation.
func (h *Balancer) InFlight(id string) int64 {
	if h.counter == nil {
		return 0
	}
	return h.counter.InFlight(id)
}

// View returns a snapshot of every backend's state.
func (h *Balancer) View() View {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.s.clock.Now()
	cur := h.cur.Load()
	v := View{Backends: make([]Status, len(cur.nodes)), Panic: h.panicking, InnerErr: h.innerErr}
	inSet := make(map[*node]bool, len(h.handed))
	for _, n := range h.handed {
		inSet[n] = true
	}
	for i, n := range cur.nodes {
		st := Status{
			ID:           n.id,
			State:        n.state,
			Reason:       n.reason,
			Since:        n.since,
			InSet:        inSet[n],
			ProbeUp:      n.up,
			Ejections:    n.decayed(now, h.s.baseEject),
			Ramp:         1,
			LastProbeErr: n.getErr(&n.probeErr),
		}
		if n.ejected {
			st.EjectedUntil = n.until
		}
		if n.ramping {
			st.Ramp = n.factor
		}
		v.Backends[i] = st
	}
	return v
}

// Start starts the background work: one goroutine per backend probing it
// (if Config.Probe is set) and the applier, which applies pending changes
// and timed transitions as they come. Cancelling ctx or calling Close
// stops them all; Close also waits for them. Start returns an error
// wrapping ErrStarted if called twice, or ErrClosed after Close.
//
// Then, as every decorator does (see balancer's doc, "Decorators"), Start
// starts the inner picker with ctx if it has a Start method
// (balancer.Starter): a metrics decorator, or another decorator with work
// of its own. Its error is returned, wrapped; health's own work is running
// by then, and Close stops both.
func (h *Balancer) Start(ctx context.Context) error {
	h.life.Lock()
	switch {
	case h.closed:
		h.life.Unlock()
		return fmt.Errorf("health: start: %w", ErrClosed)
	case h.running:
		h.life.Unlock()
		return fmt.Errorf("health: start: %w", ErrStarted)
	}
	h.running = true
	h.started.Store(true)
	h.routines.Add(1)
	go h.run(ctx.Done(), true, stoppedTimer())
	h.life.Unlock()

	h.mu.Lock()
	for _, n := range h.cur.Load().nodes {
		h.startProber(n)
	}
	h.mu.Unlock()

	if s, ok := h.inner.(balancer.Starter); ok {
		if err := s.Start(ctx); err != nil {
			return fmt.Errorf("health: start: the inner picker: %w", err)
		}
	}
	return nil
}

// Close stops every goroutine the Balancer started and waits for them to
// return: probes in progress are cancelled through their context. Then it
// closes the inner picker, if that has a Close method (io.Closer), once:
// a later Close does not close it again. It returns the inner Close's
// error, wrapped. Pick, Done, Update and Apply keep working after Close,
// with no background work: call Apply to apply changes. Close is
// idempotent. It must not be called from OnChange.
func (h *Balancer) Close() error {
	h.shutdown()
	h.routines.Wait()
	c, ok := h.inner.(io.Closer)
	if !ok {
		return nil
	}
	h.life.Lock()
	done := h.innerClosed
	h.innerClosed = true
	h.life.Unlock()
	if done {
		return nil
	}
	if err := c.Close(); err != nil {
		return fmt.Errorf("health: close: the inner picker: %w", err)
	}
	return nil
}

// Unwrap returns the picker health wraps, so that balancer.As finds it, or
// a layer inside it, through health: for its admin methods. Give the set
// to health's Update, never to the inner picker's, and Start and Close
// health, which start and close the inner picker.
func (h *Balancer) Unwrap() balancer.Picker { return h.inner }

func (h *Balancer) shutdown() {
	h.life.Lock()
	h.closed = true
	h.cancel()
	h.life.Unlock()
}

// lazyLinger is how long a lazily started applier stays after its last
// work, so that a backend flapping near its threshold does not start one
// goroutine per flap.
const lazyLinger = time.Second

// run is the applier. The one Start runs (persistent) lives until stop or
// Close; a lazy one returns after lazyLinger with nothing pending or
// scheduled. t is the applier's timer, stopped.
func (h *Balancer) run(stop <-chan struct{}, persistent bool, t *time.Timer) {
	defer h.routines.Done()
	for {
		h.apply()
		var tick <-chan time.Time
		idle := false
		if d := h.due.Load(); d != noDue {
			t.Reset(max(time.Duration(d)-h.s.clock.Now().Sub(h.epoch), 0))
			tick = t.C
		} else if !persistent {
			t.Reset(lazyLinger)
			tick, idle = t.C, true
		}
		select {
		case <-h.ctx.Done():
			t.Stop()
			return
		case <-stop:
			t.Stop()
			h.shutdown()
			return
		case <-h.wake:
			t.Stop()
		case <-tick:
			if idle && !h.busy() {
				// Step down, unless a request or a due time slips in
				// meanwhile: request and poke set theirs before they
				// look at lazy.
				h.lazy.Store(false)
				if !h.busy() || !h.lazy.CompareAndSwap(false, true) {
					return
				}
			}
		}
	}
}

// busy reports whether a change is pending or a timed transition due.
func (h *Balancer) busy() bool {
	return h.pending.Load() || h.due.Load() != noDue
}

// startProber starts probing n if probing is configured, Start was called,
// and n is not in maintenance. h.mu must be held.
func (h *Balancer) startProber(n *node) {
	if h.s.probe == nil || n.stopProbe != nil || n.admin == Maintenance {
		return
	}
	h.life.Lock()
	defer h.life.Unlock()
	if !h.running || h.closed {
		return
	}
	ctx, cancel := context.WithCancel(h.ctx)
	n.stopProbe = cancel
	h.routines.Add(1)
	go h.probeLoop(ctx, n)
}

// stopProber stops probing n. h.mu must be held.
func (h *Balancer) stopProber(n *node) {
	if n.stopProbe != nil {
		n.stopProbe()
		n.stopProbe = nil
	}
}

// probeLoop probes n at once, then every Interval ± Jitter after the end
// of the previous probe, until ctx ends.
func (h *Balancer) probeLoop(ctx context.Context, n *node) {
	defer h.routines.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, h.s.timeout)
		err := h.s.probe.Probe(pctx, n.be.Load().b)
		cancel()
		if ctx.Err() != nil {
			return // stopped mid-probe: the result says nothing of the backend
		}
		h.observe(n, err)
		t.Reset(h.nextWait())
	}
}

// nextWait returns Interval plus a uniform offset in [-Jitter, +Jitter],
// capped at the largest Duration: the sum, up to Interval+Jitter < 2⁶⁴, is
// taken in uint64.
func (h *Balancer) nextWait() time.Duration {
	j := h.s.jitter
	if j == 0 {
		return h.s.interval
	}
	w := uint64(h.s.interval-j) + h.s.rand()%(2*uint64(j)+1)
	return time.Duration(min(w, math.MaxInt64))
}
