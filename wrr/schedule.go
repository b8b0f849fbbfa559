package wrr

import (
	"cmp"
	"math"
	"slices"
)

// slotCounts returns how many of the schedule's slots each backend gets,
// given its weight: the weights divided by their greatest common divisor,
// or, when those sum to more than limit, the weights scaled to sum to
// exactly limit (then divided by their own common divisor, if any). limit
// must be at least 2·len(ws), and every weight at least 1.
//
// Scaling is exact where it can be and bounded where it cannot:
//
//   - A backend whose fair part of the slots is less than one gets one
//     (rounded up, so that no backend in the set is starved). Taking those
//     slots leaves fewer for the rest, so this is decided lightest first:
//     with the k lightest backends already at one slot, the next one is
//     too if w·(limit−k) < W−W_k, where W_k is the weight of those k.
//   - The other limit−k slots are shared among the rest in proportion to
//     their weights by largest remainders (Hamilton's method): each gets
//     the floor or the ceiling of its quota q = w·(limit−k)/(W−W_k), and
//     q ≥ 1 by the rule above, so each gets at least one.
//
// Each backend's share of the schedule then differs from its weight share by
// less than (k+1)/limit; the package documentation has the proof, and
// TestScaledShareBound the check.
//
// Cost: O(n log n) when scaling (two sorts), O(n) otherwise.
func slotCounts(ws []int64, limit int64) []int64 {
	s := reduce(ws)
	var total int64
	for _, w := range s {
		total += w
	}
	if total <= limit {
		return s
	}

	// Lightest first: a stable sort keeps equal weights in index order.
	order := make([]int, len(s))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(s[a], s[b]) })
	k, light := 0, int64(0) // backends held to one slot, and their weight
	for _, i := range order {
		if s[i]*(limit-int64(k)) >= total-light {
			break // this one's quota is at least one, and so are the rest's
		}
		light += s[i]
		k++
	}
	rest, rw := limit-int64(k), total-light

	// Hamilton's method over the rest: floors first, then one more slot to
	// each of the largest remainders until rest is reached. The remainders
	// sum to less than the number of backends sharing them, so none gets
	// more than one extra.
	type share struct {
		i   int
		rem int64
	}
	shares := make([]share, 0, len(s)-k)
	left := rest // slots not yet given
	for j, i := range order {
		if j < k {
			s[i] = 1
			continue
		}
		q := s[i] * rest // < 2⁶³: weights ≤ MaxWeight and rest ≤ maxLimit
		s[i] = q / rw
		left -= s[i]
		shares = append(shares, share{i, q % rw})
	}
	// Largest remainder first; on ties, the lower index.
	slices.SortFunc(shares, func(a, b share) int {
		if c := cmp.Compare(b.rem, a.rem); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	for _, x := range shares[:left] {
		s[x.i]++
	}
	// Scaled counts may share a divisor; a shorter period is the same
	// sequence.
	return reduce(s)
}

// reduce returns ws divided by their greatest common divisor, in a new
// slice. Dividing all weights by a common factor does not change nginx's
// sequence: every current weight is scaled by the same factor, so every
// comparison comes out the same, and the period shrinks by that factor.
func reduce(ws []int64) []int64 {
	var g int64
	for _, w := range ws {
		g = gcd(g, w)
	}
	s := make([]int64, len(ws))
	for i, w := range ws {
		s[i] = w / g
	}
	return s
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// scanMax is the largest set for which build runs nginx's own loop: for
// small sets its O(n) scan a step costs less than the tournament's O(log n)
// replays. BenchmarkBuild sets the two side by side: the scan is the
// cheaper at 16, the two cross somewhere between 32 and 64 (the point
// moves between runs and machines), and at 1024 the tournament is far the
// cheaper.
const scanMax = 32

// build returns one period of nginx's smooth weighted round robin over the
// weights s: the index of the backend picked at each step, as nginx's loop
// (scan) would pick them, in the low 32 bits of each slot (link fills the
// high ones).
//
// Cost: O(P·min(n, log n)) for a period of P = Σs slots; one allocation of
// 8·P bytes that is kept, and O(n) more while building.
func build(s []int64) []uint64 {
	var total int64
	for _, w := range s {
		total += w
	}
	switch {
	case total == int64(len(s)): // all weights 1: plain round robin
		out := make([]uint64, total)
		for i := range out {
			out[i] = uint64(i)
		}
		return out
	case len(s) <= scanMax:
		return scan(s, total)
	}
	return tournament(s, total)
}

// scan is ngx_http_upstream_get_peer's loop (nginx's
// ngx_http_upstream_round_robin.c), run for one period of total steps:
//
//	for every step:
//		for every backend i: current[i] += s[i]
//		pick the i with the largest current[i], the first one on ties
//		current[pick] -= total
//
// After total steps each backend has been picked s[i] times and every
// current weight is back at zero, so the sequence repeats. O(n) a step.
func scan(s []int64, total int64) []uint64 {
	current := make([]int64, len(s))
	out := make([]uint64, total)
	for step := range out {
		best := 0
		for i, w := range s {
			current[i] += w
			if current[i] > current[best] { // strictly: the first one wins ties
				best = i
			}
		}
		current[best] -= total
		out[step] = uint64(best)
	}
	return out
}

// tournament returns the same sequence as scan, with a kinetic tournament
// in about O(log n) a step instead of O(n).
//
// # Why a kinetic tournament
//
// Before step t's pick, backend i's current weight is
//
//	x_i(t) = s_i·t − total·c_i
//
// where c_i is how many times it has been picked: a line in t, with slope
// s_i, that drops by total when the backend is picked. No key fixed per
// backend orders the picks (weights 5,1,1 pick b before a at step 3 and a
// before c at step 4, though a's third turn, b's first and c's first are
// all equally due), so a heap does not reproduce nginx; the order between
// two backends changes as their lines cross.
//
// A tournament tree over the backends keeps, at each node, the winner of
// its subtree (largest x, lowest index on ties) and the step at which that
// may change: when the node's loser, drifting up faster, overtakes its
// winner (one division), or when a descendant's winner may change. Each
// step repairs the nodes that have fallen due, takes the root's winner, and
// replays the path above the picked leaf, whose line has dropped.
//
// Leaves are sorted by weight, so the left winner of any node is never the
// heavier: only when the lighter one leads can it be overtaken by drift.
// With this order the drift events all but vanish (measured: 10.1 node
// replays a step for 1024 backends, against log₂ 1024 = 10 for the path
// alone; see TestBuildReplays), and the cost is the path: O(log n) a step,
// O(total·log n) in all. (Kinetic tournaments bound events by O(log n) per
// changed line, so O(total·log² n) is the worst case.)
//
// Values stay exact in int64: s_i·t and total·c_i are at most total², and
// total ≤ maxLimit = 2²⁶.
func tournament(s []int64, total int64) []uint64 {
	t := newTourney(s, total)
	out := make([]uint64, total)
	for step := int64(1); step <= total; step++ {
		if t.nodes[1].due <= step {
			t.repair(1, step)
		}
		top := t.nodes[1]
		out[step-1] = uint64(top.id)
		leaf := t.leaves + int(top.pos)
		t.nodes[leaf].b += total
		for x := leaf / 2; x >= 1; x /= 2 {
			t.play(x, step+1)
		}
	}
	return out
}

// link stores in the high 32 bits of each slot the backend of the next slot,
// cyclically, whose backend differs, or its own if there is none (a set of
// one): where Pick goes when the slot's backend is to be avoided. O(P).
func link(sched []uint64) {
	last := len(sched) - 1
	own := func(i int) uint64 { return sched[i] & (1<<32 - 1) }
	other := own(last) // for the last slot: the first slot that differs
	for _, v := range sched {
		if v != own(last) {
			other = v
			break
		}
	}
	sched[last] |= other << 32
	for i := last - 1; i >= 0; i-- {
		if next := own(i + 1); next != own(i) {
			sched[i] |= next << 32
		} else {
			sched[i] |= sched[i+1] &^ (1<<32 - 1) // the same as the next slot's
		}
	}
}

// never is a due step that never comes.
const never = math.MaxInt64

// tourney is the kinetic tournament tree of tournament: a complete binary tree
// in an array (children of x at 2x and 2x+1, leaves from index leaves on).
type tourney struct {
	nodes  []player
	leaves int
}

// player is a node: its subtree's winner, with the winner's line copied in
// so that a replay reads the two children and nothing else.
type player struct {
	w   int64 // slope: the winner's weight
	b   int64 // the winner's current weight is w·t − b
	due int64 // first step at which this subtree's winner may change
	id  int32 // the winner's index in the set; −1 for an empty subtree
	pos int32 // the winner's leaf position
}

func newTourney(s []int64, total int64) *tourney {
	order := make([]int32, len(s))
	for i := range order {
		order[i] = int32(i)
	}
	// Stable: equal weights stay in index order, so that, among them, the
	// left one is the lower index.
	slices.SortStableFunc(order, func(a, b int32) int {
		switch {
		case s[a] < s[b]:
			return -1
		case s[a] > s[b]:
			return 1
		}
		return 0
	})
	leaves := 1
	for leaves < len(s) {
		leaves *= 2
	}
	t := &tourney{nodes: make([]player, 2*leaves), leaves: leaves}
	for j := range leaves {
		p := player{due: never, id: -1, pos: int32(j)}
		if j < len(s) {
			p.id, p.w = order[j], s[order[j]]
		}
		t.nodes[leaves+j] = p
	}
	for x := leaves - 1; x >= 1; x-- {
		t.play(x, 1)
	}
	return t
}

// play sets node x from its two children as of step t.
func (t *tourney) play(x int, step int64) {
	l, r := &t.nodes[2*x], &t.nodes[2*x+1]
	due := min(l.due, r.due)
	if r.id < 0 { // padding is on the right only
		t.nodes[x] = *l
		t.nodes[x].due = due
		return
	}
	// l.w ≤ r.w: leaves are sorted by weight.
	d := (l.w-r.w)*step - (l.b - r.b) // x_l − x_r
	if d < 0 || (d == 0 && r.id < l.id) {
		// The right one leads and climbs at least as fast: it stays ahead
		// until a pick changes a line.
		t.nodes[x] = *r
		t.nodes[x].due = due
		return
	}
	// The left one leads; a heavier right one gains slope a step and wins
	// once d is below zero, or at zero if it has the lower index.
	if slope := r.w - l.w; slope > 0 {
		var k int64
		if r.id < l.id {
			k = (d + slope - 1) / slope // ceil(d/slope); d > 0 here
		} else {
			k = d/slope + 1 // d ≥ 0: Go's division is the floor
		}
		due = min(due, step+k)
	}
	t.nodes[x] = *l
	t.nodes[x].due = due
}

// repair replays every node under and including x that has fallen due by
// step, children first.
func (t *tourney) repair(x int, step int64) {
	if c := 2 * x; c < t.leaves {
		if t.nodes[c].due <= step {
			t.repair(c, step)
		}
		if t.nodes[c+1].due <= step {
			t.repair(c+1, step)
		}
	}
	t.play(x, step)
}
