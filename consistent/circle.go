package consistent

import "github.com/lbkit/lbkit/balancer"

// circle is what the ring and the Maglev table share: a cyclic sequence of
// positions (the ring's sorted points, or the table's slots), each owned by
// a backend, and what a retry needs to walk it. It is immutable once built.
type circle struct {
	backends []balancer.Backend // the set, in the caller's order (a copy)
	ids      []string           // ids[i] = backends[i].ID(), read once at Update
	weights  []int              // weights[i] = backends[i]'s weight, read once at Update
	owner    []int32            // owner[p] indexes backends

	// gap[p] is how many steps back, walking counter-clockwise and wrapping,
	// the previous position with the same owner as p lies; len(owner) if p
	// is its owner's only position. A walk that started d steps before p
	// meets p's owner for the first time at p exactly when gap[p] > d, which
	// lets a retry find the next distinct backend with no set of seen
	// backends (and so no allocation), in O(1) per step.
	//
	// Worked example: owners a b a c b (positions 0..4) give gaps 3 2 2 5 3.
	// Walking from 1 (b): 2 is a with gap 2 > d=1, new; 3 is c, gap 5 > 2,
	// new; 4 is b, gap 3 ≤ 3, seen (at 1).
	gap []uint32
}

// newCircle takes a validated set, whose backends, IDs and weights were read
// once. The caller fills owner and then calls setGaps.
func newCircle(set balancer.Set) circle {
	return circle{backends: set.Backends, ids: set.IDs, weights: set.Weights}
}

// setGaps computes gap from owner in two passes: the first finds each
// owner's last position, so that the second can measure the gap of each
// owner's first position across the wrap.
//
// Cost: O(len(owner) + len(backends)) and one allocation of each size.
func (c *circle) setGaps() {
	last := make([]int, len(c.backends))
	for p, o := range c.owner {
		last[o] = p - len(c.owner) // as seen from the first lap
	}
	c.gap = make([]uint32, len(c.owner))
	for p, o := range c.owner {
		c.gap[p] = uint32(p - last[o])
		last[o] = p
	}
}

// step walks clockwise from p, d steps from the walk's start, to the next
// position whose owner the walk has not met, and returns it with its
// distance from the start. The caller must know such an owner exists: it
// has met fewer than len(backends) distinct owners.
func (c *circle) step(p int, d uint32) (int, uint32) {
	for {
		p++
		d++
		if p == len(c.owner) {
			p = 0
		}
		if c.gap[p] > d {
			return p, d
		}
	}
}

// target returns the position of the backend a request gets when its key
// lands on position p: the attempt-th distinct backend walking clockwise
// from p (the key's own for attempt 0, wrapping after len(backends)
// attempts), or the next distinct one after it if that is avoid and the set
// has another backend.
//
// It also returns the distance walked from p and how many distinct backends
// the walk has met, target included, so that a bounded-load walk can carry
// on from there without meeting any of them again.
//
// Cost: O(1) for attempt 0. Neighbouring positions mostly belong to
// different backends, so a retry walks little more than attempt positions
// while attempt is small against n, and never more than len(owner).
func (c *circle) target(p, attempt int, avoid string) (q int, d uint32, met int) {
	n := len(c.backends)
	k := 0
	if attempt > 0 { // a negative attempt counts as the first
		k = attempt
		if k >= n {
			k %= n
		}
	}
	q = p
	for range k {
		q, d = c.step(q, d)
	}
	if n > 1 && c.ids[c.owner[q]] == avoid { // never true for "": IDs are not empty
		if k == n-1 {
			// Every backend has been met; the one after the last is the
			// key's own, the first met.
			return p, d, n
		}
		q, d = c.step(q, d)
		k++
	}
	return q, d, k + 1
}
