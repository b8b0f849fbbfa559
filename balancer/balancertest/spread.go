package balancertest

import (
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/lbkit/lbkit/balancer"
)

// subsetter is implemented by a Balancer that serves a part of each set
// and says which: package subset's Balancer. Spread finds it with
// balancer.As, through any decorators around it.
type subsetter interface {
	Subset() []string
}

// spreadSets are the sets Spread gives: sizes either side of 8, weights 1
// or 1 to 4.
var spreadSets = []struct {
	n        int
	weighted bool
}{{2, false}, {3, false}, {8, false}, {8, true}, {33, false}}

// spreadOrders are the orders Spread gives each set in: as made (by ID),
// reversed, and shuffled.
var spreadOrders = []string{"in the order of their IDs", "in reverse order", "shuffled"}

// spreadZone is where Spread's backends run: all in one zone, at priority
// 0, so that a picker that routes by locality (package locality, whose
// conformance test makes the caller's zone "a") has no reason to leave
// any of them out.
var spreadZone = balancer.Locality{Zone: "a"}

// checkSpread: every backend of the set draws first tries, whatever the
// order of the slice: a backend that draws none is starved, by its ID or
// by its position. A subset picker (see subsetter) must spread over every
// backend of its subset. Picks are first tries with varied keys, each
// done at once with Result{} (nothing measured, so that a learner has no
// reason to prefer one), supportPicks per backend, for sets of 2 to 33,
// each given in the order of its IDs, reversed and shuffled to one
// Balancer.
func checkSpread(newBalancer func() balancer.Balancer) error {
	for _, ss := range spreadSets {
		b := newBalancer()
		bs := backends("sp", ss.n, ss.weighted)
		for i, x := range bs {
			bs[i] = x.(*balancer.Endpoint).At(spreadZone)
		}
		r := rand.New(rand.NewPCG(uint64(ss.n), 9))
		for _, order := range spreadOrders {
			set := slices.Clone(bs)
			switch order {
			case spreadOrders[1]:
				slices.Reverse(set)
			case spreadOrders[2]:
				r.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
			}
			if err := update(b, set); err != nil {
				return err
			}
			what := fmt.Sprintf("a set of %d (weights %s) %s", ss.n, weightsOf(ss.weighted), order)
			if err := spreadOver(b, set, balancer.Result{}, what); err != nil {
				return err
			}
		}
	}
	return spreadLoads(newBalancer)
}

// weightsOf names the weights of backends(_, _, weighted).
func weightsOf(weighted bool) string {
	if weighted {
		return "1 to 4"
	}
	return "1"
}

// spreadOver makes supportPicks first tries per backend of set, each done
// at once with res, and fails if a backend that must draw picks draws
// none: every backend of set, or of the subset a subsetter layer serves.
func spreadOver(b balancer.Balancer, set []balancer.Backend, res balancer.Result, what string) error {
	picks := supportPicks * max(len(set), 4)
	count, err := tally(b, members(set), picks, func(balancer.Backend, int) balancer.Result { return res })
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	drew := make(map[string]bool, len(count))
	for x := range count {
		drew[x.ID()] = true
	}
	must := make([]string, 0, len(set))
	for _, x := range set {
		must = append(must, x.ID())
	}
	serves := ""
	if s, ok := balancer.As[subsetter](b); ok {
		must, serves = s.Subset(), " of the subset it serves"
	}
	var starved []string
	for _, id := range must {
		if !drew[id] {
			starved = append(starved, id)
		}
	}
	if len(starved) > 0 {
		return fmt.Errorf("%s: %d backends%s drew none of %d first tries, %s the first (the set's IDs run from %s): every backend must draw picks, whatever its ID or position",
			what, len(starved), serves, picks, starved[0], rangeOf(set))
	}
	return nil
}

// rangeOf names the smallest and largest IDs of set.
func rangeOf(set []balancer.Backend) string {
	ids := make([]string, len(set))
	for i, x := range set {
		ids[i] = x.ID()
	}
	slices.Sort(ids)
	return ids[0] + " to " + ids[len(ids)-1]
}
