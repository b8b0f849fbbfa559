package lbhttp

import (
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/lbkit/lbkit/balancer"
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
// simulator can drive a Budget in virtual time, from any time.Time (the
// zero Time included). Times a little out of order (from goroutines
// racing) are harmless: a request or retry in a slot the window has left
// is not counted.
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
// is the slot's number (see epochOf), unused before its first, or
// rotating while one goroutine resets the counters for a new epoch.
type budgetSlot struct {
	epoch atomic.Int64
	reqs  atomic.Int64
	spent atomic.Int64
}

// The epochs no slot of time has: epochOf gives them only for times
// 2⁶³ slots from 1970 (292 years for a slot of a nanosecond), where it
// wraps.
const (
	rotating = math.MinInt64
	unused   = math.MinInt64 + 1
)

// epochOf returns the number of the slot of width w nanoseconds that t is
// in, ⌊t/w⌋ in nanoseconds since 1970, for any t: the nanoseconds are
// counted in 128 bits (UnixNano's int64 holds only 1678 to 2262), and the
// quotient is kept modulo 2⁶⁴, which after would only wrap. Slots are
// compared by their difference (later), so that a wrap is a step like any.
func epochOf(t time.Time, w int64) int64 {
	sec, nsec := t.Unix(), uint64(t.Nanosecond())
	// x = sec·10⁹ + nsec in two's complement, hi:lo.
	hi, lo := bits.Mul64(uint64(sec), 1e9)
	if sec < 0 {
		hi -= 1e9
	}
	var c uint64
	lo, c = bits.Add64(lo, nsec, 0)
	hi += c
	neg := int64(hi) < 0
	if neg { // ⌊x/w⌋ = −⌊(−x + w − 1)/w⌋
		lo, c = bits.Sub64(0, lo, 0)
		hi = -hi - c
		lo, c = bits.Add64(lo, uint64(w-1), 0)
		hi += c
	}
	_, r := bits.Div64(0, hi, uint64(w))
	q, _ := bits.Div64(r, lo, uint64(w)) // the low word of the quotient
	if neg {
		return -int64(q)
	}
	return int64(q)
}

// later reports whether epoch a is after epoch b, modulo 2⁶⁴.
func later(a, b int64) bool { return a-b > 0 }

// slotOf returns the slot of epoch e.
func (b *Budget) slotOf(e int64) *budgetSlot {
	i := e % budgetSlots
	if i < 0 {
		i += budgetSlots
	}
	return &b.slots[i]
}

// NewBudget returns a Budget with the given settings, or an error for a
// negative or not-a-number Ratio or MinPerSecond, or a Window too short to
// cut into slots.
func NewBudget(c BudgetConfig) (*Budget, error) {
	switch {
	case c.Ratio < 0 || math.IsNaN(c.Ratio) || math.IsInf(c.Ratio, 0):
		return nil, fmt.Errorf("lbhttp: %w: budget Ratio %v is not a share of 0 or more", balancer.ErrBadOption, c.Ratio)
	case c.MinPerSecond < 0 || math.IsNaN(c.MinPerSecond) || math.IsInf(c.MinPerSecond, 0):
		return nil, fmt.Errorf("lbhttp: %w: budget MinPerSecond %v is not a rate of 0 or more", balancer.ErrBadOption, c.MinPerSecond)
	case c.Window < 0 || (c.Window > 0 && c.Window < budgetSlots):
		return nil, fmt.Errorf("lbhttp: %w: budget Window %v is negative or shorter than %dns", balancer.ErrBadOption, c.Window, budgetSlots)
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
		b.slots[i].epoch.Store(unused)
	}
	return b, nil
}

// Request counts a request that started at now.
func (b *Budget) Request(now time.Time) {
	e := epochOf(now, b.width)
	s := b.slotOf(e)
	if s.epoch.Load() == e || b.enter(s, e) {
		s.reqs.Add(1)
	}
}

// Retry reports whether a retry or hedge may be sent at now, and if so
// counts it. It says no when the retries and hedges of the window would
// exceed Ratio times its requests plus the minimum.
func (b *Budget) Retry(now time.Time) bool {
	e := epochOf(now, b.width)
	s := b.slotOf(e)
	for i := 0; s.epoch.Load() != e; i++ {
		if b.enter(s, e) {
			break
		}
		if ep := s.epoch.Load(); i == 100 || (ep != rotating && later(ep, e)) {
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
		if ep := o.epoch.Load(); ep != rotating && ep != unused && e-ep >= 0 && e-ep < budgetSlots {
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
	if old == rotating || (old != unused && later(old, e)) || !s.epoch.CompareAndSwap(old, rotating) {
		return s.epoch.Load() == e
	}
	s.reqs.Store(0)
	s.spent.Store(0)
	s.epoch.Store(e)
	return true
}
