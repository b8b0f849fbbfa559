package balancertest

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/lbkit/lbkit/balancer"
)

// checkEmpty: a new Balancer, and one given an empty set, answer
// ErrNoBackend itself.
func checkEmpty(newBalancer func() balancer.Balancer) error {
	b := newBalancer()
	if err := wantNoBackend(b, "before any Update"); err != nil {
		return err
	}
	if err := b.Update(nil); err != nil {
		return fmt.Errorf("Update(nil): %w, want nil: an empty set is valid", err)
	}
	if err := wantNoBackend(b, "after Update(nil)"); err != nil {
		return err
	}
	if err := update(b, backends("e", 3, false)); err != nil {
		return err
	}
	if err := b.Update([]balancer.Backend{}); err != nil {
		return fmt.Errorf("Update(empty): %w, want nil: an empty set is valid", err)
	}
	return wantNoBackend(b, "after emptying a set of 3")
}

// sizes are the set sizes the kit tries where size matters.
var sizes = []int{1, 2, 3, 5, 8, 16, 33, 64}

// checkInSet: every pick is one of the Backend values of the current set,
// for sizes and weights, first tries and retries.
func checkInSet(newBalancer func() balancer.Balancer) error {
	for _, n := range sizes {
		for _, weighted := range []bool{false, true} {
			b := newBalancer()
			bs := backends("s", n, weighted)
			if err := update(b, bs); err != nil {
				return err
			}
			want := members(bs)
			// Some requests stay in flight while others finish, as in a proxy.
			held, err := pickIn(b, want, 200, true, false)
			if err != nil {
				return fmt.Errorf("n=%d weighted=%v: %w", n, weighted, err)
			}
			if _, err := pickIn(b, want, 500, false, false); err != nil {
				return fmt.Errorf("n=%d weighted=%v: %w", n, weighted, err)
			}
			if _, err := pickIn(b, want, 300, false, true); err != nil {
				return fmt.Errorf("n=%d weighted=%v, retries: %w", n, weighted, err)
			}
			fb := feedback(b)
			for _, h := range held {
				fb.Done(h, balancer.Result{Latency: 2e6})
			}
		}
	}
	return nil
}

// removedPicks is how many picks checkRemoved makes after removals, first
// tries and retries together: enough that a picker returning a removed
// backend once in 10,000 picks is caught in 19 runs out of 20
// (1 − (1 − 10⁻⁴)³⁰⁰⁰⁰ ≈ 0.95).
const removedPicks = 30000

// runSizes are the set sizes of the runs of Updates that Removed and Avoid
// make on one Balancer: every size class a picker might treat apart (one
// backend; either side of 8, 16, 64 and 128; up to 256), going up and down,
// in a run long enough (22 Updates, 28 in all for Removed) that a flaw
// appearing only after a dozen Updates shows. Few are large: a large
// Update is the costliest (a Maglev table built per zone of a locality
// Balancer, a schedule of every weight).
var runSizes = []int{3, 64, 65, 1, 100, 9, 129, 16, 33, 2, 17, 256, 5, 70, 4, 8, 1, 64, 40, 7, 200, 3}

// runPicks is how many picks Removed makes after each Update of its run,
// first tries and retries each.
const runPicks = 400

// churn returns the sets of a run of Updates, one per size: each keeps
// about half of the set before it, in a new order, and fills up with new
// backends (weights 1 to 4), so that every Update removes backends, adds
// others and moves those that stay. The same seed gives the same sets.
func churn(prefix string, sizes []int, seed uint64) [][]balancer.Backend {
	r := rand.New(rand.NewPCG(seed, 1))
	var sets [][]balancer.Backend
	var prev []balancer.Backend
	made := 0
	for _, n := range sizes {
		set := slices.Clone(prev)
		r.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
		set = set[:min(len(set)/2, n)]
		for len(set) < n {
			set = append(set, balancer.NewEndpoint(fmt.Sprintf("%s-%d.test:8080", prefix, made), 1+made%4))
			made++
		}
		r.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
		sets = append(sets, set)
		prev = set
	}
	return sets
}

// checkRemoved: once Update returns, a removed backend is never picked, on
// a first try or a retry, even with requests to it still in flight, and
// through a run of Updates over sets of 1 to 256 backends.
func checkRemoved(newBalancer func() balancer.Balancer) error {
	b := newBalancer()
	fb := feedback(b)
	a := backends("a", 8, true)
	if err := update(b, a); err != nil {
		return err
	}
	held, err := pickIn(b, members(a), 100, true, false)
	if err != nil {
		return fmt.Errorf("set A: %w", err)
	}
	// B keeps four of A and adds three; C shares nothing with A or B.
	bSet := append(append([]balancer.Backend{}, a[2:6]...), backends("b", 3, false)...)
	cSet := backends("c", 5, true)
	steps := []struct {
		name string
		set  []balancer.Backend
	}{{"B (half of A removed)", bSet}, {"C (disjoint)", cSet}, {"A again", a}, {"one of A", a[7:]}, {"B again", bSet}}
	per := removedPicks / (2 * (len(steps) + 1))
	for i, st := range steps {
		if err := update(b, st.set); err != nil {
			return err
		}
		want := members(st.set)
		for _, retries := range []bool{false, true} {
			if _, err := pickIn(b, want, per, false, retries); err != nil {
				return fmt.Errorf("after Update to %s: %w", st.name, err)
			}
		}
		if i == 0 {
			// Requests picked from A finish now, some on removed backends.
			for _, h := range held {
				fb.Done(h, balancer.Result{Latency: 1e6})
			}
			for _, retries := range []bool{false, true} {
				if _, err := pickIn(b, want, per, false, retries); err != nil {
					return fmt.Errorf("after Done for A's requests: %w", err)
				}
			}
		}
	}
	for i, set := range churn("rm", runSizes, 11) {
		if err := update(b, set); err != nil {
			return err
		}
		for _, retries := range []bool{false, true} {
			if _, err := pickIn(b, members(set), runPicks, false, retries); err != nil {
				return fmt.Errorf("after Update %d (of a run of %d) to a set of %d: %w", len(steps)+2+i, len(runSizes), len(set), err)
			}
		}
	}
	return nil
}
