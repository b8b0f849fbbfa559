package balancertest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/lbkit/lbkit/balancer"
)

// The rules of balancer.HealthUpdater that HealthLevels checks, over
// healthy shares and priority levels (balancer.Locality.Priority):
//
//   - A backend marked unhealthy gets no picks, first tries or retries,
//     while more than half of its priority level is healthy. (Below that,
//     a level may panic and serve all of its backends, as locality's do
//     under Envoy's default threshold of 50%.)
//   - While every backend of the levels before priority p is healthy, no
//     first try (Attempt 0, no Avoid) goes to a backend of priority p: a
//     healthy level takes all of its traffic, whatever overprovisioning
//     factor (at least 1) lets it keep the traffic as it degrades.
//     Retries may walk on to later levels. This rule is asked only of a
//     Balancer that routes by priority: one that, given two levels all
//     healthy through Update, sends no first try to the second. A
//     HealthUpdater that does not (health.Balancer around a plain picker,
//     which leaves priorities to a locality.Balancer inside, if any) must
//     keep the first rule only.
//
// The backends are of weight 1, so that a share of backends is a share of
// weight, and spread over zones "a", "b" and "c", so that a zone-aware
// picker routes among them.

// level is one priority level of a HealthLevels case: n backends, of
// which down are marked unhealthy.
type level struct {
	priority, n, down int
}

// healthCases are the layouts HealthLevels gives: one level at every
// healthy share above half, for sizes 3 to 33; then several levels.
var healthCases = func() [][]level {
	var out [][]level
	for _, n := range []int{3, 5, 8, 16, 33} {
		for down := 1; 2*(n-down) > n; down++ {
			if n >= 16 && down != 1 && 2*(n-down-1) > n {
				continue
			}
			out = append(out, []level{{0, n, down}})
		}
	}
	out = append(out,
		[]level{{2, 8, 3}},             // one level, not at priority 0
		[]level{{0, 4, 0}, {1, 4, 0}},  // level 0 healthy: level 1 gets no first try
		[]level{{0, 1, 0}, {1, 33, 0}}, // a level of one
		[]level{{0, 3, 0}, {1, 16, 7}, {2, 2, 0}},
		[]level{{3, 5, 0}, {7, 5, 0}}, // priorities with gaps
		[]level{{0, 8, 2}, {1, 8, 1}}, // level 0 degraded: level 1 may help
		[]level{{0, 5, 2}, {1, 5, 0}, {2, 9, 4}},
	)
	return out
}()

// levelZones are the zones HealthLevels' backends are spread over.
var levelZones = []string{"a", "b", "c"}

// describeLevels names a layout in messages.
func describeLevels(ls []level) string {
	s := ""
	for i, l := range ls {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("priority %d: %d of %d healthy", l.priority, l.n-l.down, l.n)
	}
	return s
}

// checkHealthLevels: for a balancer.HealthUpdater (any other Balancer
// passes at once), the rules above hold at every layout of healthCases,
// the set shuffled and the unhealthy backends drawn at random (from a
// fixed seed).
func checkHealthLevels(newBalancer func() balancer.Balancer) error {
	b := newBalancer()
	hu, ok := b.(balancer.HealthUpdater)
	if !ok {
		return nil
	}
	byPriority, err := routesByPriority(b)
	if err != nil {
		return err
	}
	r := rand.New(rand.NewPCG(24, 5))
	for c, ls := range healthCases {
		var set []balancer.Backend
		var up []bool
		prio := map[balancer.Backend]int{}
		for _, l := range ls {
			down := make([]bool, l.n)
			for _, i := range r.Perm(l.n)[:l.down] {
				down[i] = true
			}
			for i := range l.n {
				x := balancer.NewEndpoint(fmt.Sprintf("hl%d-p%d-%d.test:8080", c, l.priority, i), 1).
					At(balancer.Locality{Zone: levelZones[i%len(levelZones)], Priority: l.priority})
				set = append(set, x)
				up = append(up, !down[i])
				prio[x] = l.priority
			}
		}
		perm := r.Perm(len(set))
		shuffled, flags := make([]balancer.Backend, len(set)), make([]bool, len(set))
		for i, j := range perm {
			shuffled[i], flags[i] = set[j], up[j]
		}
		where := describeLevels(ls)
		if err := hu.UpdateHealth(shuffled, flags); err != nil {
			return fmt.Errorf("UpdateHealth of a valid set (%s): %w", where, err)
		}
		// What may be picked: not the unhealthy backends of a level more
		// than half healthy; on a first try, not a level all of whose
		// predecessors are wholly healthy (the first level excepted).
		anyTry := map[string]balancer.Backend{}
		firstTry := map[string]balancer.Backend{}
		degradedBefore := false
		for j, l := range ls {
			for i, x := range shuffled {
				if prio[x] == l.priority && (flags[i] || 2*(l.n-l.down) <= l.n) {
					anyTry[x.ID()] = x
					if j == 0 || degradedBefore || !byPriority {
						firstTry[x.ID()] = x
					}
				}
			}
			degradedBefore = degradedBefore || l.down > 0
		}
		if err := picksWithin(b, firstTry, anyTry, 400); err != nil {
			return fmt.Errorf("with %s: %w", where, err)
		}
	}
	return nil
}

// routesByPriority reports whether b, given two priority levels of four
// healthy backends each through Update, sends every one of 200 first
// tries to the first level.
func routesByPriority(b balancer.Balancer) (bool, error) {
	var set []balancer.Backend
	for p := range 2 {
		for i := range 4 {
			set = append(set, balancer.NewEndpoint(fmt.Sprintf("rp-p%d-%d.test:8080", p, i), 1).
				At(balancer.Locality{Zone: levelZones[i%len(levelZones)], Priority: p}))
		}
	}
	if err := b.Update(set); err != nil {
		return false, fmt.Errorf("Update of two priority levels, all healthy: %w", err)
	}
	fb, _ := b.(balancer.Feedback)
	for i := range 200 {
		got, err := b.Pick(balancer.Request{Key: key(i)})
		if err != nil {
			return false, fmt.Errorf("Pick from two priority levels, all healthy: %w", err)
		}
		if fb != nil {
			fb.Done(got, balancer.Result{})
		}
		if balancer.LocalityOf(got).Priority != 0 {
			return false, nil
		}
	}
	return true, nil
}

// picksWithin makes picks first tries, each within first, and as many
// retries (Attempt 1 to 4, Avoid a backend of the set or an unknown ID),
// each within any.
func picksWithin(b balancer.Balancer, first, anyTry map[string]balancer.Backend, picks int) error {
	fb := feedback(b)
	ids := make([]string, 0, len(anyTry))
	for id := range anyTry {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	ids = append(ids, "removed-or-unknown.test:1")
	for i := range 2 * picks {
		req := balancer.Request{Key: key(i)}
		want, what := first, "a first try"
		if i >= picks {
			req.Attempt, req.Avoid = 1+i%4, ids[i%len(ids)]
			want, what = anyTry, "a retry"
		}
		got, err := b.Pick(req)
		if err != nil {
			return fmt.Errorf("%s, %+v: unexpected error: %w", what, req, err)
		}
		if got == nil {
			return fmt.Errorf("%s, %+v: nil backend with nil error", what, req)
		}
		fb.Done(got, balancer.Result{Latency: 1e6})
		if _, ok := want[got.ID()]; !ok {
			return fmt.Errorf("%s, %+v, got %s (%s): %s", what, req, got.ID(), healthOf(got, anyTry, first), rule(got, anyTry))
		}
	}
	return nil
}

// healthOf says what kind of backend got is, for messages.
func healthOf(got balancer.Backend, anyTry, first map[string]balancer.Backend) string {
	p := balancer.LocalityOf(got).Priority
	if _, ok := anyTry[got.ID()]; !ok {
		return fmt.Sprintf("marked unhealthy, at priority %d", p)
	}
	if _, ok := first[got.ID()]; !ok {
		return fmt.Sprintf("at priority %d, past a level whose backends are all healthy", p)
	}
	return fmt.Sprintf("at priority %d", p)
}

// rule is the rule a pick of got broke.
func rule(got balancer.Backend, anyTry map[string]balancer.Backend) string {
	if _, ok := anyTry[got.ID()]; !ok {
		return "a backend marked unhealthy gets no picks while more than half of its priority level is healthy"
	}
	return "no first try goes past a priority level whose backends are all healthy"
}

// checkHealthUpdate: for a Balancer that is a balancer.HealthUpdater
// (package locality's is; any other passes at once), a backend marked
// unhealthy among seven healthy ones is never picked; UpdateHealth keeps
// neither slice; a refused UpdateHealth (health flags of another length,
// an invalid set) leaves the previous set and health in place; and Update
// means every backend healthy.
func checkHealthUpdate(newBalancer func() balancer.Balancer) error {
	b := newBalancer()
	hu, ok := b.(balancer.HealthUpdater)
	if !ok {
		return nil
	}
	bs := backends("hu", 8, true)
	all := members(bs)
	healthy := func(n int) []bool {
		up := make([]bool, n)
		for i := range up {
			up[i] = true
		}
		return up
	}
	if err := hu.UpdateHealth(slices.Clone(bs), healthy(len(bs))); err != nil {
		return fmt.Errorf("UpdateHealth of a valid set of %d, all healthy: %w", len(bs), err)
	}
	// The backend marked unhealthy is one this Balancer picks when all are
	// healthy, so that Update's check below can expect it back.
	held, err := pickIn(b, all, 400, true, false)
	fb := feedback(b)
	for _, p := range held {
		fb.Done(p, balancer.Result{Latency: 1e6})
	}
	if err != nil {
		return fmt.Errorf("all healthy: %w", err)
	}
	down := -1
	for i := range bs {
		if slices.Contains(held, bs[i]) {
			down = i
			break
		}
	}
	if down < 0 {
		return errors.New("all healthy: 400 picks returned no backend") // pickIn would have failed
	}
	want := members(slices.Delete(slices.Clone(bs), down, down+1))

	set, up := slices.Clone(bs), healthy(len(bs))
	up[down] = false
	if err := hu.UpdateHealth(set, up); err != nil {
		return fmt.Errorf("UpdateHealth with %q unhealthy: %w", bs[down].ID(), err)
	}
	if _, err := pickIn(b, want, 400, false, true); err != nil {
		return fmt.Errorf("with %q marked unhealthy, 7 of 8 healthy: %w", bs[down].ID(), err)
	}
	// The caller reuses both slices: nothing may change.
	for i := range up {
		up[i] = i == down
		set[i] = balancer.NewEndpoint(fmt.Sprintf("intruder-%d.test:1", i), 1)
	}
	if _, err := pickIn(b, want, 400, false, false); err != nil {
		return fmt.Errorf("after the caller overwrote the slices it passed to UpdateHealth (it must keep neither): %w", err)
	}

	other := backends("hv", 8, false)
	refused := []struct {
		name string
		set  []balancer.Backend
		up   []bool
	}{
		{"7 health flags for 8 backends", other, healthy(7)},
		{"9 health flags for 8 backends", other, healthy(9)},
		{"a duplicate ID", append(slices.Clone(other), balancer.NewEndpoint(other[1].ID(), 1)), healthy(9)},
	}
	for _, c := range refused {
		if err := hu.UpdateHealth(c.set, c.up); err == nil {
			return fmt.Errorf("UpdateHealth with %s returned nil, want an error", c.name)
		}
		if _, err := pickIn(b, want, 200, false, false); err != nil {
			return fmt.Errorf("after the refused UpdateHealth with %s, the previous set and health must stay: %w", c.name, err)
		}
	}

	if err := update(b, slices.Clone(bs)); err != nil {
		return err
	}
	const tries = 4000
	for i := range tries {
		got, err := b.Pick(balancer.Request{Key: key(i)})
		if err := member(got, err, all); err != nil {
			return fmt.Errorf("after Update: pick %d: %w", i, err)
		}
		fb.Done(got, balancer.Result{Latency: 1e6})
		if got == bs[down] {
			return nil
		}
	}
	return fmt.Errorf("Update must mean every backend healthy: %q, marked unhealthy before, drew none of %d picks after Update (it drew picks when all were healthy)", bs[down].ID(), tries)
}
