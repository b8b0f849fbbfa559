package health

import (
	"fmt"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

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
	return h.UpdateHealth(bs, nil)
}

// UpdateHealth is Update with the set's source's word on each backend's
// health: healthy[i] false takes bs[i] out as a failing probe would
// (State Down, ReasonSource), whatever its probes say, until a later
// UpdateHealth or Update says it is healthy; nil means all are (Update).
// A discovery source that knows health (an xDS control plane's
// health_status) gives it here, so that a HealthUpdater inside (package
// locality) still counts the unhealthy backends in their level's size.
// It refuses a healthy slice of another length than bs, keeps neither
// slice, and on error keeps the previous set and health.
func (h *Balancer) UpdateHealth(bs []balancer.Backend, healthy []bool) error {
	// Validate under the mutex: an Update that started first, and is slow
	// to read its backends, must not overwrite a newer set.
	h.mu.Lock()
	s, err := balancer.NewSet(bs)
	switch {
	case err != nil:
		err = fmt.Errorf("health: update: %w", err)
	case healthy != nil && len(healthy) != s.Len():
		err = fmt.Errorf("health: update: %d health flags for %d backends", len(healthy), s.Len())
	default:
		err = h.update(s.Backends, s.IDs, healthy)
	}
	h.mu.Unlock()
	h.deliver()
	h.poke()
	return err
}

func (h *Balancer) update(bs []balancer.Backend, ids []string, healthy []bool) error {
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
	// The source's word, taken back if the inner picker refuses the set.
	var flipped []*node
	for i, n := range nodes {
		if down := healthy != nil && !healthy[i]; down != n.srcDown {
			n.srcDown = down
			flipped = append(flipped, n)
		}
	}
	tbs, tnodes, up, panicking := h.target(bs, nodes)
	if err := h.handPanicking(tbs, up, panicking); err != nil {
		for _, n := range flipped {
			n.srcDown = !n.srcDown
		}
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
			h.clearWant(n)
			h.endTrial(n)
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
	for _, n := range flipped {
		h.note(n, now, ReasonSource, nil, time.Time{})
	}
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
			if n.ejected { // forgotten: Pick's count of ejected backends leaves it
				n.ejected = false
				h.watched.Add(-1)
			}
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
	h.clearWant(n)
	n.passes.Store(0)
	n.tally.Store(0)
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

// handPanicking is hand, keeping h.panicky true while the inner picker
// may hold an ejected backend that Pick must not avoid: set before a
// panic set is handed, cleared once a set that is not one has been.
func (h *Balancer) handPanicking(tbs []balancer.Backend, up []bool, panicking bool) error {
	if panicking {
		h.panicky.Store(true)
	}
	err := h.hand(tbs, up)
	if err != nil {
		h.panicky.Store(h.panicking)
	} else {
		h.panicky.Store(panicking)
	}
	return err
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
