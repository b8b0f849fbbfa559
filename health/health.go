package health

import (
	"context"
	"fmt"
	"io"
	"math"
	"reflect"
	"sync"
	"sync/atomic"
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
	watched atomic.Int64            // nodes whose want is not 0, plus nodes ejected (kept ones too); Pick skips its lookup when 0
	panicky atomic.Bool             // the inner picker may hold ejected backends: panic mode, or about to be
	trials  atomic.Int64            // nodes with flagTrial; Pick and Done look nothing up for trials when 0
	started atomic.Bool             // Start was called: no lazy applier is needed
	// counting: with Config.FailureRate, some node's tally may not be 0;
	// a judgement of failure rates is then scheduled (see sweep).
	counting atomic.Bool

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
	sweepAt   time.Time        // with Config.FailureRate, when failure rates are next judged; zero if not scheduled

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
	_ balancer.HealthUpdater   = (*Balancer)(nil)
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
	flagCapped              // its ejection asked for waits for a slot (the cap): Pick does not avoid it
	flagTrial               // back from an ejection until a request succeeds, or ejected again from that trial
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
	busy    atomic.Bool                // on trial, a request is in flight: Pick sends no other
	be      atomic.Pointer[backendRef] // the current Backend value, for probers
	// tally counts, with Config.FailureRate, the requests finished in the
	// interval (low 32 bits) and the failed ones among them (high 32
	// bits), so that Done counts either with one atomic add and a
	// judgement takes both with one swap. An interval holds up to 2³²−1
	// requests per backend before the count carries into the failures:
	// over 400 million a second at the default interval.
	tally atomic.Uint64

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
	srcDown     bool   // the set's source says it is unhealthy (UpdateHealth)
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
	rateReqs    int64 // requests finished in the last interval judged (Config.FailureRate)
	rateFails   int64 // failed ones among them
}

type backendRef struct{ b balancer.Backend }

func (n *node) eligible() bool {
	return n.admin == Up && n.up && !n.srcDown && !n.ejected
}

// summary is the State reported for n.
func (n *node) summary() State {
	switch {
	case n.admin != Up:
		return n.admin
	case !n.up || n.srcDown:
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
