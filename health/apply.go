package health

import (
	"fmt"
	"math"
	"time"
)

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
	if h.s.rate.on {
		h.judge(now, cur.nodes)
	}
	h.step(now, cur.nodes, true)
	if changed, panicking := h.targetChanged(cur.nodes); !changed {
		h.panicking = panicking
	} else {
		tbs, tnodes, up, panicking := h.target(cur.bs, cur.nodes)
		if err := h.handPanicking(tbs, up, panicking); err != nil {
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
	// frees or a success cancels them, and Pick stops avoiding them. An
	// ejected backend Pick avoids by its flag (see ejecting).
	limit := max(1, len(nodes)*h.s.maxEjectedPercent/100)
	for _, n := range nodes {
		w := Reason(n.want.Load())
		switch {
		case w == 0 || !eject:
		case n.ejected || n.admin != Up || !n.up:
			h.clearWant(n) // already out
		case ejected < limit:
			h.eject(n, now, w) // flagEjected first: Pick goes on avoiding it
			h.clearWant(n)
			ejected++
		default:
			n.setFlag(flagCapped, true)
			// No slot: a backend on trial whose trial failed may try
			// again, one request at a time, until one frees.
			n.busy.Store(false)
		}
	}
	for _, n := range nodes {
		el := n.eligible()
		if el != n.wasEligible {
			n.setFlag(flagOut, !el)
			h.resetFails(n)  // a run of failures does not span a time out
			n.tally.Store(0) // nor does an interval's count
		}
		if el && !n.wasEligible && n.flags.Load()&flagTrial != 0 {
			// Back on trial from an absence other than an ejection (drained,
			// probes down, the source's word), whose trial request failed
			// or was abandoned while it was out and so left it busy with no
			// ejection to end: free it for a new trial request, or Pick
			// hands back every pick of it, for good. (uneject has freed it
			// already when an ejection ended.) TestTrialRejoins.
			n.busy.Store(false)
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
	h.watched.Add(1)
	n.passes.Store(0)
	h.resetFails(n)
	if n.flags.Load()&flagTrial != 0 {
		// Still on trial, and busy, until the ejection ends: until the
		// inner picker has the new set, a pick of n is handed back.
		n.busy.Store(true)
	}
	h.note(n, now, why, n.getErr(&n.wantErr), n.until)
}

// decayed returns the ejection count less one for each base period spent
// in since the last ejection ended, once off trial: time on trial is no
// time in, so a trial that fails ejects for longer than the last time.
func (n *node) decayed(now time.Time, base time.Duration) int {
	if n.ejected || n.returned.IsZero() || n.flags.Load()&flagTrial != 0 {
		return n.ejections
	}
	return max(n.ejections-int(now.Sub(n.returned)/base), 0)
}

func (h *Balancer) uneject(n *node, now time.Time, why Reason) {
	n.ejected = false
	n.setFlag(flagEjected, false)
	h.watched.Add(-1)
	n.returned = now
	h.resetFails(n)
	h.clearWant(n)
	if h.s.trial {
		h.startTrial(n)
	}
	h.note(n, now, why, nil, time.Time{})
}

// startTrial puts n on trial, unless it is already.
func (h *Balancer) startTrial(n *node) {
	n.busy.Store(false)
	if n.flags.Or(flagTrial)&flagTrial == 0 {
		h.trials.Add(1)
	}
}

// endTrial takes n off trial, if it is on it.
func (h *Balancer) endTrial(n *node) {
	if n.flags.And(^uint32(flagTrial))&flagTrial != 0 {
		h.trials.Add(-1)
	}
	n.busy.Store(false)
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
	if !h.sweepAt.IsZero() {
		due = min(due, h.sweepAt.Sub(h.epoch))
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

// judge makes the judgement of failure rates if it is due, else schedules
// it if some request has been counted since the last one. A judgement
// takes every node's tally of the interval. If MinimumHosts eligible
// backends have RequestVolume requests or more, it asks for the ejection
// of each of them whose share of failures reaches Threshold; step then
// makes the ejections the cap allows, as for ConsecutiveFailures. It
// withdraws an ejection an earlier judgement asked for, still waiting for
// a slot, whose backend no longer qualifies. The next judgement is
// scheduled an interval on if some request was counted, and otherwise by
// the next count (Done), so that an idle Balancer schedules nothing and a
// lazy applier may step down. O(n). h.mu must be held.
func (h *Balancer) judge(now time.Time, nodes []*node) {
	if h.sweepAt.IsZero() {
		if h.counting.Load() {
			h.sweepAt = now.Add(h.s.rate.interval)
		}
		return
	}
	if now.Before(h.sweepAt) {
		return
	}
	r := h.s.rate
	h.sweepAt = time.Time{}
	h.counting.Store(false) // before the swaps: see count
	busy, judged := false, 0
	for _, n := range nodes {
		t := n.tally.Swap(0)
		busy = busy || t != 0
		n.rateReqs, n.rateFails = int64(t&math.MaxUint32), int64(t>>32)
		if n.eligible() && n.rateReqs >= r.volume {
			judged++
		}
	}
	for _, n := range nodes {
		hit := judged >= r.minHosts && n.eligible() && n.rateReqs >= r.volume &&
			n.rateFails*100 >= r.threshold*n.rateReqs
		switch w := Reason(n.want.Load()); {
		case hit && w == 0:
			n.setErr(&n.wantErr, fmt.Errorf("health: %d of %d requests failed in the interval, at or above the threshold of %d%%",
				n.rateFails, n.rateReqs, r.threshold))
			h.mark(n, ReasonFailureRate)
		case !hit && w == ReasonFailureRate:
			h.clearWant(n)
		}
	}
	if busy {
		h.counting.Store(true)
		h.sweepAt = now.Add(r.interval)
	}
}
