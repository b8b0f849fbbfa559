package lbhttp

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// The errors of the timeouts. Each is a net.Error whose Timeout method
// reports true and matches context.DeadlineExceeded with errors.Is, so
// that ErrorHandler answers 504 Gateway Timeout, and each is a failure of
// the backend in the Result its attempt reports: health counts it towards
// an ejection, lrt takes its latency as a sample.
var (
	// ErrAttemptTimeout ends an attempt whose backend sent no response
	// headers within Config.AttemptTimeout, or, for a response held
	// (Config.HoldBytes), not the whole of its held part. The attempt's
	// Result has that latency.
	ErrAttemptTimeout error = timeoutError("lbhttp: the backend sent no response headers, or not the start of the body the Transport holds, within the attempt timeout")
	// ErrRequestTimeout ends the attempt in flight when Config.RequestTimeout
	// passes before any backend answered.
	ErrRequestTimeout error = timeoutError("lbhttp: no backend answered within the request timeout")
	// ErrIdleTimeout ends a response body that a reader waited on for
	// Config.IdleTimeout without a byte arriving. The reader gets it from
	// Read.
	ErrIdleTimeout error = timeoutError("lbhttp: the backend sent nothing within the idle timeout while streaming the body")
)

type timeoutError string

func (e timeoutError) Error() string   { return string(e) }
func (timeoutError) Timeout() bool     { return true }
func (timeoutError) Temporary() bool   { return true }
func (timeoutError) Is(err error) bool { return err == context.DeadlineExceeded }

// errHedgeLost ends the attempt that another attempt of the same request
// beat, and is its Result's Err: it wraps balancer.ErrAbandoned, since a
// race lost teaches nothing about the backend.
var errHedgeLost = fmt.Errorf("lbhttp: another attempt answered first: %w", balancer.ErrAbandoned)

// Why a guard ended its attempt; 0 while it has not.
const (
	endAttempt = iota + 1 // the attempt timeout passed before the headers
	endRequest            // the request timeout passed before the headers
	endIdle               // the body stalled for the idle timeout
	endLost               // another attempt answered first
	endCaller             // the request's context ended
)

// causeOf returns the error an end is reported with: nil for endCaller,
// which the request's own cause stands for.
func causeOf(why int32) error {
	switch why {
	case endAttempt:
		return ErrAttemptTimeout
	case endRequest:
		return ErrRequestTimeout
	case endIdle:
		return ErrIdleTimeout
	case endLost:
		return errHedgeLost
	}
	return nil
}

// A guard bounds one attempt. It owns the context the attempt is sent
// with, a cancellable context of its own rather than one derived from the
// request's (context.WithTimeout and context.WithCancel allocate, and
// register with the request's context, on every attempt), and a timer:
// armed for the attempt timeout (or what is left of the request timeout)
// until the response headers arrive, then for the idle timeout while the
// body streams.
//
// The request's cancellation reaches the guard's context through
// context.AfterFunc, which costs two allocations and a registration with
// the request's context (on a context nothing has derived from yet, also
// the map that holds it). A Transport registers when the attempt starts,
// so that a caller's cancel ends the attempt at once. Behind NewProxy,
// where the request's context ends when the client has gone and nobody
// waits for RoundTrip to return, a second timer, the linker, registers
// only once the attempt has run proxyLinkAfter (or at the request's
// deadline if that is sooner): the attempts that end sooner, nearly all
// of them, do without. An attempt whose client leaves in that time runs
// on until then, or until its own end.
//
// A guard whose attempt ended without anything firing (the timer, the
// request's cancellation, a lost race) goes back to its Transport's pool
// and serves another attempt: its context was never cancelled, and its
// timers are reset rather than made anew. A guard that fired is dropped, so
// that a callback still running can never touch the next attempt. The
// linker is the exception: its function only ever acts on the link state
// below, so a guard whose linker fired is reused once the link is undone.
//
// Fields are set before the attempt starts and read-only while it runs,
// except those marked atomic. A guard must not be copied.
type guard struct {
	// Immutable after newGuard.
	t      *Transport
	own    context.Context // a cancelCtx of context.Background()
	cancel context.CancelCauseFunc
	timer  *time.Timer // time.AfterFunc(expire); stopped while pooled
	linker *time.Timer // time.AfterFunc(linkCaller); stopped while pooled
	goneFn func()      // gone, bound once: a method value allocates

	// Set by start, for one attempt; the attempt's goroutine only.
	caller context.Context
	armed  bool // the timer was reset and not seen stopped
	fired  bool // the timer fired before the headers were in: its function may re-arm it

	// Atomic.
	first atomic.Int32             // what the timer means before the headers: endAttempt or endRequest
	head  atomic.Int32             // the wait for the headers: headWait, headIn, headTimedOut
	body  atomic.Pointer[respBody] // the body streaming, while the idle timeout watches it
	ended atomic.Int32             // why the guard ended the attempt; 0 if it has not
	link  atomic.Int32             // whether the request's cancellation reaches the guard: linkOff, linkWait, linkBusy, linkOn

	// The timer's schedule, for late firings (see grace): when it is due,
	// in the Transport's nanotime; how much grace the wait it guards has
	// had; and, while a body streams, the read that grace was for.
	due      atomic.Int64
	spent    atomic.Int64
	graceFor atomic.Int64

	// unlink stops the AfterFunc watching caller. linkCaller writes it
	// before it sets linkOn; release reads it once it has seen linkOn.
	unlink func() bool

	// For a first attempt that may be hedged: the race, and the timer
	// that starts the hedge (both made at the guard's first race). raced
	// is set, by the attempt's goroutine, once the timer has fired.
	race       hedgeRace
	hedgeTimer *time.Timer
	raced      bool
}

// newGuard returns a guard of t's, from its pool or new.
func (t *Transport) newGuard() *guard {
	if g, ok := t.guards.Get().(*guard); ok {
		return g
	}
	g := &guard{t: t}
	g.own, g.cancel = context.WithCancelCause(context.Background())
	g.goneFn = g.gone
	g.timer = time.AfterFunc(time.Hour, g.expire)
	g.timer.Stop()
	g.linker = time.AfterFunc(time.Hour, g.linkCaller)
	g.linker.Stop()
	return g
}

// proxyLinkAfter is how long a proxied attempt runs before the request's
// cancellation is registered with its guard: long enough that even a
// saturated proxy's attempts nearly all end sooner and skip the
// registration's allocations (through the ready proxy on one core at 64
// connections, with other jobs loading the machine, the clients' p99 was
// 4 to 50 ms; with a wait of 10 ms, 2.5% of the attempts still
// registered, with 50 ms 0.05%), and short beside what a departed
// client's attempt may cost its backend otherwise (the timeouts, seconds).
// The attempts that run longer pay a timer firing (a goroutine) on top of
// the registration.
const proxyLinkAfter = 100 * time.Millisecond

// The states of guard.link.
const (
	linkOff  = iota // nothing to pass on (a context that cannot be cancelled), or released
	linkWait        // the linker is armed
	linkBusy        // linkCaller is registering
	linkOn          // registered: unlink undoes it
)

// start prepares g for an attempt on behalf of caller, sent at now: the
// request's cancellation will end it, and, if d is positive, the timer
// will end it with why (endAttempt or endRequest) after d unless the
// headers come first.
func (g *guard) start(caller context.Context, now time.Time, d time.Duration, why int32) {
	g.caller = caller
	if done := caller.Done(); done != nil {
		select {
		case <-done:
			g.end(endCaller) // gave up already: nothing to wait for
		default:
			wait := g.t.linkAfter
			if wait > 0 {
				if dl, ok := caller.Deadline(); ok {
					wait = min(wait, dl.Sub(now))
				}
			}
			g.link.Store(linkWait) // publishes caller to linkCaller
			if wait > 0 {
				g.linker.Reset(wait)
			} else {
				g.linkCaller()
			}
		}
	}
	if d > 0 {
		g.first.Store(why)
		g.head.Store(headWait)
		g.spent.Store(0)
		g.armed = true
		g.arm(g.t.nanotime(), d)
	}
}

// The states of guard.head, while the timer bounds the wait for the
// headers.
const (
	headWait     = iota // waiting
	headIn              // the headers came first
	headTimedOut        // the timer ended the wait first
)

// headers stops the header timer, and reports whether the attempt is
// still on: the timer had not ended the wait for the headers, nor
// anything else ended the attempt.
func (g *guard) headers() bool {
	if g.armed {
		g.armed = false
		if !g.head.CompareAndSwap(headWait, headIn) {
			return false
		}
		// If the timer has fired, its function finds the headers in, or
		// has re-armed the timer for a grace: either way the guard is
		// not reused (release).
		g.fired = !g.timer.Stop()
	}
	return g.ended.Load() == 0
}

// stream arms the idle timeout for rb, whose reads now say whether the
// backend is keeping the reader waiting.
func (g *guard) stream(rb *respBody, idle time.Duration) {
	g.spent.Store(0)
	g.graceFor.Store(0)
	g.body.Store(rb)
	g.armed = true
	g.arm(g.t.nanotime(), idle)
}

// arm resets the timer to fire d after now, a reading of the Transport's
// nanotime.
func (g *guard) arm(now int64, d time.Duration) {
	g.due.Store(now + int64(d))
	g.timer.Reset(d)
}

// end ends the attempt for why, the first time only, and reports whether
// this call did.
func (g *guard) end(why int32) bool {
	if why == 0 || !g.ended.CompareAndSwap(0, why) {
		return false
	}
	if why == endCaller {
		g.cancel(context.Cause(g.caller))
	} else {
		g.cancel(causeOf(why))
	}
	return true
}

// cause returns the error the attempt ended with, if the guard ended it,
// and nil otherwise or if the request's context did.
func (g *guard) cause() error {
	return causeOf(g.ended.Load())
}

// gone is the AfterFunc of the request's context.
func (g *guard) gone() { g.end(endCaller) }

// linkCaller is the linker's function: it registers gone with the
// request's context, unless the attempt was released first. If release
// comes while it registers, it undoes the registration itself, and the
// guard is not reused. It may run late, for an attempt released since
// (Stop came too late to stop it): it then finds the link off, or links
// the guard's next attempt early, which that attempt's release undoes.
func (g *guard) linkCaller() {
	if !g.link.CompareAndSwap(linkWait, linkBusy) {
		return
	}
	stop := context.AfterFunc(g.caller, g.goneFn)
	g.unlink = stop
	if !g.link.CompareAndSwap(linkBusy, linkOn) {
		stop() // released meanwhile
	}
}

// unlinkCaller stops the request's cancellation from reaching g, and
// reports whether g may serve another attempt: false if the cancellation
// came (gone ran, or is running) or linkCaller is registering now.
func (g *guard) unlinkCaller() bool {
	switch g.link.Load() {
	case linkOff:
		return true
	case linkWait:
		// If Stop is too late, linkCaller has started: it finds the link
		// off, or busy and then on, which the cases below handle.
		g.linker.Stop()
		if g.link.CompareAndSwap(linkWait, linkOff) {
			return true
		}
	}
	if g.link.CompareAndSwap(linkBusy, linkOff) {
		return false // linkCaller undoes its registration; g is dropped
	}
	g.link.Store(linkOff) // linkOn: linkCaller is done with g
	stop := g.unlink
	g.unlink = nil
	return stop()
}

// expire is the timer's function. Before the headers, it ends the
// attempt. While a body streams it ends it only if a read has been
// waiting for the idle timeout; a reader that is simply slow to read
// again (a proxy writing to a slow client) is not the backend's fault, so
// the timer is re-armed for what is left. Either way it first gives a
// timer that fired late its grace (see grace). Re-arming the timer is the
// last thing it does with the guard.
func (g *guard) expire() {
	now := g.t.nanotime()
	rb := g.body.Load()
	if rb == nil {
		if g.head.Load() != headWait {
			return // the headers are in, and the body not yet watched
		}
		why := g.first.Load()
		limit := g.t.attemptTimeout
		if why == endRequest {
			limit = g.t.requestTimeout
		}
		if g.grace(now, limit) {
			return
		}
		if g.head.CompareAndSwap(headWait, headTimedOut) {
			g.end(why)
		}
		return
	}
	idle := g.t.idleTimeout
	if since := rb.waiting.Load(); since != 0 {
		waited := time.Duration(now - since)
		if waited >= idle {
			if g.graceFor.Swap(since) != since {
				g.spent.Store(0) // a read the graces so far were not for
			}
			if g.grace(now, idle) {
				return
			}
			g.end(endIdle)
			return
		}
		idle -= waited
	}
	g.arm(now, idle)
}

// How late a timer may fire before its firing is taken for a sign that
// the proxy could not run (a stop-the-world pause, CPU throttling, a
// stopped process, a machine too busy to schedule it), and the least
// grace such a firing gets: well above how late a timer fires in a
// process that runs, well below a timeout. TestPausedProxy stops the
// proxy for longer than its timeouts.
const (
	lateAfter = 10 * time.Millisecond
	minGrace  = 20 * time.Millisecond
)

// grace re-arms the timer, at now, for a grace instead of letting it end
// the wait it bounds, if it fired late, and reports whether it did. A
// timer that fires late has its function run before the goroutines whose
// reads completed meanwhile (Go's scheduler runs due timers before it
// polls the network): ending the wait then would call a backend's answer,
// already there, a timeout. So a firing late by L re-arms the timer for L
// (at least minGrace), the time the process lost, for it to catch up
// with what arrived meanwhile; a grace that fires late has one too. The
// graces of one wait add up to limit at most (the timeout that bounds
// it): a process that is kept from running for good still ends every
// wait, at twice its timeout at worst.
func (g *guard) grace(now int64, limit time.Duration) bool {
	late := time.Duration(now - g.due.Load())
	spent := time.Duration(g.spent.Load())
	if late <= lateAfter || spent >= limit {
		return false
	}
	wait := min(max(late, minGrace), limit-spent)
	g.spent.Store(int64(spent + wait))
	g.arm(now, wait)
	return true
}

// release ends g's part in its attempt, once the attempt's Done has been
// reported, and puts it back in the pool if nothing fired.
func (g *guard) release() {
	if g == nil {
		return
	}
	g.body.Store(nil)
	clean := !g.raced && !g.fired
	g.fired = false
	if g.armed {
		g.armed = false
		clean = g.timer.Stop() && clean
	}
	clean = g.unlinkCaller() && clean
	if clean && g.ended.Load() == 0 && g.own.Err() == nil {
		g.caller = nil // not read again: the AfterFunc was stopped before it ran
		g.t.guards.Put(g)
	}
}

// attemptCtx is the context an attempt is sent with: the guard's
// cancellation, the request's values and deadline. It lives in the
// attempt, so that what the base transport keeps of it (net/http's dials
// keep its values) stays the request's when the guard moves on.
type attemptCtx struct {
	own      context.Context
	caller   context.Context
	deadline time.Time // when the guard's timer ends the header wait; zero if never
}

func (c *attemptCtx) Deadline() (time.Time, bool) {
	d, ok := c.caller.Deadline()
	if !c.deadline.IsZero() && (!ok || c.deadline.Before(d)) {
		return c.deadline, true
	}
	return d, ok
}

func (c *attemptCtx) Done() <-chan struct{} { return c.own.Done() }
func (c *attemptCtx) Err() error            { return c.own.Err() }

// Value answers the context package's own key with the guard's context,
// so that a context derived from this one (net/http derives one per
// request) is registered with it rather than watched by a goroutine of
// its own; every other key is the request's.
func (c *attemptCtx) Value(key any) any {
	if v := c.own.Value(key); v != nil {
		return v
	}
	return c.caller.Value(key)
}

// nanotime is a monotonic clock reading in nanoseconds since t was made,
// never 0.
func (t *Transport) nanotime() int64 { return int64(time.Since(t.epoch)) + 1 }
