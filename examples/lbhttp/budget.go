package lbhttp

import (
	"fmt"
	"math"
	"runtime"
	"sync/atomic"
	"time"
)

// Defaults of BudgetConfig: Finagle's RetryBudget (20% of requests plus 10
// retries a second, over a 10 s window). Envoy's retry budget is the same
// 20%, of the requests in flight, with at least 3 retries at once; gRPC's
// retryThrottling is a token bucket the service config sizes.
const (
	DefaultBudgetRatio        = 0.2
	DefaultBudgetMinPerSecond = 10
	DefaultBudgetWindow       = 10 * time.Second
)

// budgetSlots is how many slots a Budget's window is cut into: the window
// slides by a tenth of itself.
const budgetSlots = 10

// BudgetConfig configures a Budget. Every field's zero value means the
// documented default.
type BudgetConfig struct {
	// Ratio is the share of requests that may be retried or hedged: 0.2
	// lets 20 retries go for every 100 requests. Zero:
	// DefaultBudgetRatio. It must not be negative.
	Ratio float64
	// MinPerSecond is how many retries a second are allowed on top of
	// Ratio, so that a client sending few requests can still retry one.
	// Zero: DefaultBudgetMinPerSecond. It must not be negative.
	MinPerSecond float64
	// Window is the time over which requests and retries are counted.
	// Zero: DefaultBudgetWindow. It must be at least budgetSlots
	// nanoseconds, and is rounded down to a multiple of them.
	Window time.Duration
}

// Budget bounds the extra load retries and hedges put on the backends: in
// any Window, the retries and hedges it allows are at most Ratio times the
// requests that started in that Window, plus MinPerSecond times the
// Window's length in seconds. A Transport calls Request for every request
// and Retry before every retry or hedge; when Retry says no, the request
// fails with its last error at once, instead of adding load to backends
// that are already failing. One Budget may be shared by several
// Transports (all the routes to one service, say).
//
// Time is the caller's: both methods take the current time, so that a
// simulator can drive a Budget in virtual time. Times a little out of
// order (from goroutines racing) are harmless: a request or retry in a
// slot the window has left is not counted.
//
// Cost: Request is one atomic load and one atomic add (and, once per
// slot, a compare-and-swap that starts the slot); Retry reads every
// slot, which is cheap next to the retry it allows. Neither allocates or
// takes a lock. A Budget is safe for concurrent use and must not be
// copied.
type Budget struct {
	// Immutable after NewBudget.
	ratio   float64
	reserve float64 // MinPerSecond × Window, in retries
	width   int64   // of a slot, in nanoseconds

	slots [budgetSlots]budgetSlot
}

// budgetSlot counts the requests and retries of one slot of time. epoch
// is the slot's number (time / width), or rotating while one goroutine
// resets the counters for a new epoch.
type budgetSlot struct {
	epoch atomic.Int64
	reqs  atomic.Int64
	spent atomic.Int64
}

const rotating = math.MinInt64

// NewBudget returns a Budget with the given settings, or an error for a
// negative or not-a-number Ratio or MinPerSecond, or a Window too short to
// cut into slots.
func NewBudget(c BudgetConfig) (*Budget, error) {
	switch {
	case c.Ratio < 0 || math.IsNaN(c.Ratio) || math.IsInf(c.Ratio, 0):
		return nil, fmt.Errorf("lbhttp: budget Ratio %v is not a share of 0 or more", c.Ratio)
	case c.MinPerSecond < 0 || math.IsNaN(c.MinPerSecond) || math.IsInf(c.MinPerSecond, 0):
		return nil, fmt.Errorf("lbhttp: budget MinPerSecond %v is not a rate of 0 or more", c.MinPerSecond)
	case c.Window < 0 || (c.Window > 0 && c.Window < budgetSlots):
		return nil, fmt.Errorf("lbhttp: budget Window %v is negative or shorter than %dns", c.Window, budgetSlots)
	}
	b := &Budget{ratio: c.Ratio, width: int64(c.Window / budgetSlots)}
	if b.ratio == 0 {
		b.ratio = DefaultBudgetRatio
	}
	if b.width == 0 {
		b.width = int64(DefaultBudgetWindow / budgetSlots)
	}
	minimum := c.MinPerSecond
	if minimum == 0 {
		minimum = DefaultBudgetMinPerSecond
	}
	b.reserve = minimum * float64(b.width*budgetSlots) / float64(time.Second)
	for i := range b.slots {
		b.slots[i].epoch.Store(-1) // no epoch yet: every slot starts empty
	}
	return b, nil
}

// Request counts a request that started at now.
func (b *Budget) Request(now time.Time) {
	e := now.UnixNano() / b.width
	s := &b.slots[e%budgetSlots]
	if s.epoch.Load() == e || b.enter(s, e) {
		s.reqs.Add(1)
	}
}

// Retry reports whether a retry or hedge may be sent at now, and if so
// counts it. It says no when the retries and hedges of the window would
// exceed Ratio times its requests plus the minimum.
func (b *Budget) Retry(now time.Time) bool {
	e := now.UnixNano() / b.width
	s := &b.slots[e%budgetSlots]
	for i := 0; s.epoch.Load() != e; i++ {
		if b.enter(s, e) {
			break
		}
		if i == 100 || s.epoch.Load() > e {
			return false // the slot went on without us: a clock far behind
		}
		runtime.Gosched() // another goroutine is starting the slot
	}
	// Count first, then check: of two retries racing for the last place
	// both may be refused, but never both allowed.
	s.spent.Add(1)
	var reqs, spent int64
	for i := range b.slots {
		o := &b.slots[i]
		if ep := o.epoch.Load(); ep > e-budgetSlots && ep <= e {
			reqs += o.reqs.Load()
			spent += o.spent.Load()
		}
	}
	if float64(spent) > b.ratio*float64(reqs)+b.reserve {
		s.spent.Add(-1)
		return false
	}
	return true
}

// enter makes s the slot of epoch e, resetting its counters, unless it
// already is, another goroutine is doing it, or s holds a later epoch. It
// reports whether s is e's slot now.
func (b *Budget) enter(s *budgetSlot, e int64) bool {
	old := s.epoch.Load()
	if old == e {
		return true
	}
	if old == rotating || old > e || !s.epoch.CompareAndSwap(old, rotating) {
		return s.epoch.Load() == e
	}
	s.reqs.Store(0)
	s.spent.Store(0)
	s.epoch.Store(e)
	return true
}
