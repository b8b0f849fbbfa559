package health

import (
	"errors"
	"syscall"

	"github.com/lbkit/lbkit/balancer"
)

// Pick returns the inner picker's choice. A pick of a backend whose
// ejection a Done has asked for, and the applier has not yet handed the
// inner picker (Done never waits for it), or of an ejected backend (an
// inner Pick that overlapped the inner Update may return it), is handed
// back to the inner picker (Done with balancer.ErrAbandoned) and Pick
// asks again with Avoid set to it, once: a request that starts after that
// Done returned does not reach the backend, unless it is the only one (or
// a second one is being ejected too), or in panic mode, or the inner
// picker is a HealthUpdater, which has the ejected backends and decides.
// An ejection the cap makes wait for a slot (Config.MaxEjectedPercent) is
// not avoided once the applier has seen it.
// While a backend ramps up under slow start, a pick of it with factor f
// is kept with probability f; otherwise it is handed back in the same
// way. A pick of a backend on trial after an ejection (see
// Config.NoTrial) whose trial request is still in flight is handed back
// the same way. A request that already names a backend to avoid is passed
// through as it is, so that Avoid keeps its meaning.
//
// Cost: the inner Pick and three atomic loads; while an ejection is asked
// for or in force, also a map read; while some backend ramps up, a map
// read and a random number; while some backend is on trial, a map read
// and a compare-and-swap; for a put-back pick an inner Done and a second
// inner Pick. No lock, no allocation.
func (h *Balancer) Pick(req balancer.Request) (balancer.Backend, error) {
	b, err := h.inner.Pick(req)
	if err == nil && req.Avoid == "" {
		if h.watched.Load() != 0 && h.ejecting(b) {
			b, err = h.repick(b, req)
		} else if rs := h.ramp.Load(); rs != nil {
			b, err = h.rampPick(rs, b, req)
		}
	}
	if err == nil && h.trials.Load() != 0 {
		return h.trialPick(b, req)
	}
	return b, err
}

// trialPick returns b, unless b is on trial with a request in flight:
// then it hands b back to the inner picker (Done with
// balancer.ErrAbandoned) and asks again with Avoid set to it, once. A
// request that already names a backend to avoid gets b whatever: Avoid
// keeps its meaning.
func (h *Balancer) trialPick(b balancer.Backend, req balancer.Request) (balancer.Backend, error) {
	n := h.cur.Load().lookup(b)
	if n == nil || n.flags.Load()&flagTrial == 0 || n.busy.CompareAndSwap(false, true) || req.Avoid != "" {
		return b, nil
	}
	return h.repick(b, req)
}

// ejecting reports whether Pick must not return b: its ejection has been
// asked for and is not waiting for the cap, or it is ejected and the
// inner picker should not have it (not a HealthUpdater, not in panic).
func (h *Balancer) ejecting(b balancer.Backend) bool {
	n := h.cur.Load().lookup(b)
	if n == nil {
		return false
	}
	// want before flags: step sets flagEjected before it clears want.
	if n.want.Load() != 0 {
		return n.flags.Load()&(flagLive|flagCapped) == flagLive
	}
	return n.flags.Load()&(flagLive|flagEjected) == flagLive|flagEjected && h.hu == nil && !h.panicky.Load()
}

// repick hands b back to the inner picker and picks again avoiding it.
func (h *Balancer) repick(b balancer.Backend, req balancer.Request) (balancer.Backend, error) {
	if h.fb != nil {
		h.fb.Done(b, balancer.Result{Err: balancer.ErrAbandoned})
	}
	req.Avoid = b.ID()
	return h.inner.Pick(req)
}

func (h *Balancer) rampPick(rs *rampSet, b balancer.Backend, req balancer.Request) (balancer.Backend, error) {
	t, ok := rs.accept[b.ID()]
	if !ok || h.s.rand() < t {
		return b, nil
	}
	return h.repick(b, req)
}

// Done observes the result of a request to b, then passes it to the inner
// picker if that is a balancer.Feedback. Call it once per Pick, when the
// request has finished (see balancer.Feedback).
//
// A success resets b's count of consecutive failures. A failure (see
// Config.IsFailure) that makes ConsecutiveFailures in a row, or a refused
// connection, asks for b's ejection: Done marks it and wakes the applier,
// which hands the inner picker the new set; Done itself never waits. For
// a backend on trial after an ejection, a success ends the trial, and one
// failure asks for its ejection. An abandoned result changes nothing
// (but frees a backend on trial for its next trial request). Done for
// nil, unknown or removed backends only passes the result on.
//
// With Config.FailureRate, Done also counts the result toward b's failure
// rate for the interval.
//
// Cost, besides the inner Done: on a success while no backend has a
// failure counted or is on trial, two atomic loads; otherwise a map read by ID and a few
// atomic operations, and on a failure the walk of the error's chain.
// With Config.FailureRate, a map read by ID and one atomic add on every
// result, and the first result after an interval without any wakes the
// applier, as an ejection does. No
// allocation. No lock, but for the Done that asks for an ejection: it
// takes b's error mutex, uncontended, and, if it must start the lazy
// applier (no Start, real clock, none running), the mutex that guards
// Start and Close, and starts a goroutine.
func (h *Balancer) Done(b balancer.Backend, r balancer.Result) {
	// A success under the default IsFailure, with failure rates off and no
	// backend with a failure counted or on trial, the usual Done, has
	// nothing to observe: decide that here, on two atomic loads, rather
	// than copy r (a Result with its Load is about a hundred bytes) into
	// observeResult and again into IsFailure. observeResult would return
	// at once for it.
	if h.s.passive && (r.Err != nil || !h.s.anyError || h.s.rate.on || h.failing.Load() != 0 || h.trials.Load() != 0) {
		h.observeResult(b, &r)
	}
	if h.fb != nil {
		h.fb.Done(b, r)
	}
}

func (h *Balancer) observeResult(b balancer.Backend, r *balancer.Result) {
	if h.trials.Load() != 0 && h.trialResult(b, r) {
		return
	}
	if r.Abandoned() {
		return // the caller gave up: nothing was learned
	}
	failed := h.s.isFailure(*r)
	var n *node
	if h.s.rate.on {
		// Failure rates count every result: one lookup serves both checks.
		n = h.cur.Load().lookup(b)
		h.count(n, failed)
	}
	if !failed {
		// A success ends the backend's run of failures, and withdraws an
		// ejection still waiting (for the cap, or for the applier), but
		// for one its failure rate asked for, which the next judgement
		// withdraws if the rate has fallen. While no backend has a
		// failure counted, which is the usual state, there is nothing to
		// end and no need to look the backend up.
		if h.failing.Load() == 0 {
			return
		}
		if n == nil {
			n = h.cur.Load().lookup(b)
		}
		if n != nil {
			if n.fails.Load() != 0 {
				h.resetFails(n)
			}
			if w := n.want.Load(); w != 0 && Reason(w) != ReasonFailureRate {
				h.clearWant(n)
			}
		}
		return
	}
	if n == nil {
		n = h.cur.Load().lookup(b)
	}
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
	h.ask(n, reason)
}

// ask asks for n's ejection for reason, unless one is asked for already,
// and wakes the applier.
func (h *Balancer) ask(n *node, reason Reason) {
	if h.mark(n, reason) {
		h.request()
	}
}

// mark asks for n's ejection for reason, unless one is asked for already,
// and reports whether it did.
func (h *Balancer) mark(n *node, reason Reason) bool {
	n.setFlag(flagCapped, false) // Pick avoids it until the applier has seen it
	// Counted before the want is set, so that Pick, which looks only while
	// the count is not zero, never misses a want another Done can see.
	h.watched.Add(1)
	if !n.want.CompareAndSwap(0, uint32(reason)) {
		h.watched.Add(-1)
		return false
	}
	return true
}

// count adds a finished request to n's tally for Config.FailureRate, if n
// is in the set and eligible, and, if no judgement of failure rates is
// scheduled, has the applier schedule one. One atomic add; the first count
// after an idle interval also wakes the applier (see request).
func (h *Balancer) count(n *node, failed bool) {
	if n == nil || n.flags.Load()&(flagLive|flagOut) != flagLive {
		return
	}
	d := uint64(1)
	if failed {
		d += 1 << 32
	}
	n.tally.Add(d)
	// After the add: a judgement that clears counting swaps the tallies
	// after it, so it either sees this count or this load sees false.
	if !h.counting.Load() && h.counting.CompareAndSwap(false, true) {
		h.request()
	}
}

// trialResult observes r for b if b is on trial, and reports whether
// that is all there is to do. A success ends the trial (the success is
// then observed as any is); an abandoned result frees b for another
// trial request; a failure asks for b's ejection at once, and keeps b
// busy (through the ejection, until its end starts a new trial; or, if b
// is out for another reason and no ejection follows, until it is back),
// so that no other request reaches it meanwhile.
func (h *Balancer) trialResult(b balancer.Backend, r *balancer.Result) bool {
	n := h.cur.Load().lookup(b)
	if n == nil || n.flags.Load()&flagTrial == 0 {
		return false
	}
	if r.Abandoned() {
		if n.flags.Load()&flagOut == 0 {
			n.busy.Store(false)
		}
		return true
	}
	if !h.s.isFailure(*r) {
		h.endTrial(n)
		return false
	}
	if n.flags.Load()&(flagLive|flagOut) != flagLive || n.want.Load() != 0 {
		return true // out already, or its ejection asked for
	}
	n.busy.Store(true)
	n.setErr(&n.wantErr, r.Err)
	h.ask(n, ReasonTrial)
	return true
}

// clearWant withdraws n's ejection asked for, if any, keeping h.watched
// in step.
func (h *Balancer) clearWant(n *node) {
	if n.want.Swap(0) != 0 {
		h.watched.Add(-1)
	}
	n.setFlag(flagCapped, false)
}

// resetFails ends n's run of failures, keeping h.failing in step.
func (h *Balancer) resetFails(n *node) {
	if n.fails.Swap(0) != 0 {
		h.failing.Add(-1)
	}
}
