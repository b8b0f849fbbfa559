package balancertest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// The checks here look at what a picker keeps about each backend across
// Updates and finished requests: its values and weights, its learned and
// counted state, keyed by ID.

// shares makes picks picks with the keys key(0), key(1), ..., each Done at
// once with Result{} (nothing measured), and returns each ID's share.
func shares(b balancer.Balancer, want map[string]balancer.Backend, picks int) (map[string]float64, error) {
	count, err := tally(b, want, picks, func(balancer.Backend, int) balancer.Result { return balancer.Result{} })
	if err != nil {
		return nil, err
	}
	return sharesOf(count, picks), nil
}

// sharePicks is how many picks checkNewValues makes to compare shares, and
// shareTolerance how far a backend's share may then be from the share a
// new Balancer given the same set gives it: a picker that draws at random
// (leastconn among idle backends) differs by sampling noise, under 0.03
// at this many picks, while one that kept the old weights differs by 0.44.
const (
	sharePicks     = 4000
	shareTolerance = 0.1
)

// sharesOf turns counts of picks into shares, by ID.
func sharesOf(count map[balancer.Backend]int, picks int) map[string]float64 {
	out := make(map[string]float64, len(count))
	for b, c := range count {
		out[b.ID()] = float64(c) / float64(picks)
	}
	return out
}

// sameSupport reports whether two spreads of picks pick the same backends
// at all.
func sameSupport(a, b map[string]float64) bool {
	for id, x := range a {
		if (x > 0) != (b[id] > 0) {
			return false
		}
	}
	for id, y := range b {
		if (y > 0) != (a[id] > 0) {
			return false
		}
	}
	return true
}

// instances is how many new Balancers perInstance compares. A subset
// picker with a random salt that serves 3 of 8 backends gives four
// instances one subset about once in 56³ tries.
const instances = 4

// perInstance reports whether Balancers of newBalancer, given the set bs,
// pick different backends at all: instances new Balancers, supportPicks
// first tries per backend each, done with Result{}. A check that compares
// one Balancer with another can judge only a picker that places backends
// alike in every instance; one that serves each instance its own subset
// (a subset decorator drawing a random salt, as gRFC A68's random
// subsetting does) cannot be judged so, and such a check skips the
// comparison. A check asks only once two spreads it compares pick
// different backends: what it looks for (weights kept, abandoned requests
// taken for slow ones) changes how often a backend is picked, never
// whether, in a picker that places backends alike in every instance; so
// different backends there are the flaw itself (every key sent to one
// backend, a backend ejected), and the check judges them.
func perInstance(newBalancer func() balancer.Balancer, bs []balancer.Backend) (bool, error) {
	var first map[string]float64
	for i := range instances {
		b := newBalancer()
		if err := update(b, bs); err != nil {
			return false, err
		}
		got, err := shares(b, members(bs), supportPicks*len(bs))
		if err != nil {
			return false, err
		}
		if i == 0 {
			first = got
		} else if !sameSupport(first, got) {
			return true, nil
		}
	}
	return false, nil
}

// checkNewValues: an Update that keeps every ID but brings new Backend
// values and new weights takes them: picks return the new values, and each
// backend draws the share a new Balancer given the same set gives it
// (unless Balancers of the constructor pick different backends from one
// set; see perInstance).
func checkNewValues(newBalancer func() balancer.Balancer) error {
	const n = 8
	first := backends("nv", n, false)
	anew := func(weight func(i int) int) []balancer.Backend {
		bs := make([]balancer.Backend, n)
		for i, x := range first {
			bs[i] = balancer.NewEndpoint(x.ID(), weight(i))
		}
		return bs
	}
	steps := []struct {
		name string
		set  []balancer.Backend
	}{
		{"the same IDs as new Backend values, the first now of weight 9", anew(func(i int) int {
			if i == 0 {
				return 9
			}
			return 1
		})},
		{"the same IDs as new values again, all of weight 1", anew(func(int) int { return 1 })},
	}
	b := newBalancer()
	if err := update(b, first); err != nil {
		return err
	}
	if _, err := shares(b, members(first), 200); err != nil {
		return err
	}
	for _, st := range steps {
		if err := update(b, st.set); err != nil {
			return err
		}
		got, err := shares(b, members(st.set), sharePicks)
		if err != nil {
			return fmt.Errorf("after an Update to %s: %w", st.name, err)
		}
		fresh := newBalancer()
		if err := update(fresh, st.set); err != nil {
			return err
		}
		want, err := shares(fresh, members(st.set), sharePicks)
		if err != nil {
			return fmt.Errorf("a new Balancer given %s: %w", st.name, err)
		}
		if !sameSupport(got, want) {
			if per, err := perInstance(newBalancer, st.set); err != nil || per {
				if err != nil {
					return err
				}
				continue // placed per instance: nothing to compare; the values were checked
			}
		}
		for _, x := range st.set {
			id := x.ID()
			if math.Abs(got[id]-want[id]) > shareTolerance {
				return fmt.Errorf("after an Update to %s, %s drew %.0f%% of %d picks, against %.0f%% from a new Balancer given the same set: Update must take the new weights, as a new Balancer does, and neither keep those of the IDs it knew nor move every key elsewhere",
					st.name, id, 100*got[id], sharePicks, 100*want[id])
			}
		}
	}
	return nil
}

// orderSizes are the sizes of the sets Order gives again: a set smaller
// than a subset picker's subset, and one larger (gRFC A68's default
// subset is 20).
var orderSizes = []int{6, 40}

// regiving is a set given again to Update.
type regiving struct {
	name string
	set  []balancer.Backend
}

// regivings returns bs given again: as it is, reversed, shuffled, and as
// new Backend values with the same IDs and weights.
func regivings(bs []balancer.Backend) []regiving {
	reversed, shuffled := slices.Clone(bs), slices.Clone(bs)
	slices.Reverse(reversed)
	r := rand.New(rand.NewPCG(uint64(len(bs)), 5))
	r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	values := make([]balancer.Backend, len(bs))
	for i, b := range bs {
		values[i] = balancer.NewEndpoint(b.ID(), balancer.WeightOf(b))
	}
	return []regiving{
		{"in the same order", slices.Clone(bs)},
		{"in reverse order", reversed},
		{"shuffled", shuffled},
		{"as new Backend values of the same IDs and weights", values},
	}
}

// checkOrder: state is keyed by ID, not by position in the slice, and an
// Update of the set in force moves nothing: the same set given again, in
// the same order, in another, or as new values of the same IDs and
// weights, in sets of 6 and 40. The backends that draw picks stay the
// same (a subset picker keeps its subset), keys keep their backends and
// retry sequences (for a picker with key affinity), a backend taught to
// be slow does not draw more picks (in the set of 6), and the counts of
// requests in flight stay with their IDs (for a balancer.InFlightCounter).
func checkOrder(newBalancer func() balancer.Balancer) error {
	for _, n := range orderSizes {
		bs := backends("o", n, true)
		agains := regivings(bs)
		where := func(err error) error {
			return fmt.Errorf("a set of %d %w", n, err)
		}
		if err := orderSupport(newBalancer, bs, agains); err != nil {
			return where(err)
		}
		if err := orderKeys(newBalancer, bs, agains); err != nil {
			return where(err)
		}
		if err := orderCounts(newBalancer, bs, agains); err != nil {
			return where(err)
		}
		if n > 8 {
			continue
		}
		for _, again := range agains {
			if err := orderLearned(newBalancer, bs, again.set); err != nil {
				return where(fmt.Errorf("given again %s: %w", again.name, err))
			}
		}
	}
	return nil
}

// acrossRegivings measures b, then gives it each of agains in turn,
// making *want its members, and compares what measure sees then with the
// first measure.
func acrossRegivings[T any](b balancer.Balancer, agains []regiving, want *map[string]balancer.Backend, measure func() (T, error), compare func(before, after T) error) error {
	before, err := measure()
	if err != nil {
		return err
	}
	for _, again := range agains {
		if err := update(b, again.set); err != nil {
			return err
		}
		*want = members(again.set)
		after, err := measure()
		if err == nil {
			err = compare(before, after)
		}
		if err != nil {
			return fmt.Errorf("given again %s: %w", again.name, err)
		}
	}
	return nil
}

// supportPicks is how many picks per backend orderSupport makes to see
// which backends draw picks: a backend of weight 1 among weights 1 to 4
// then expects about 25, and is missed by chance about once in 10^11.
const supportPicks = 64

// orderSupport finds the backends that draw picks, twice, then after each
// Update of agains: an Update of the same set must not change them. If
// they change between the first two looks, without an Update, the picker
// picks as it goes (a prober, a learner) and nothing is judged.
func orderSupport(newBalancer func() balancer.Balancer, bs []balancer.Backend, agains []regiving) error {
	b := newBalancer()
	if err := update(b, bs); err != nil {
		return err
	}
	picks := supportPicks * len(bs)
	want := members(bs)
	look := func() (map[string]bool, error) {
		count, err := tally(b, want, picks, func(balancer.Backend, int) balancer.Result { return balancer.Result{} })
		if err != nil {
			return nil, err
		}
		seen := make(map[string]bool, len(count))
		for x := range count {
			seen[x.ID()] = true
		}
		return seen, nil
	}
	first, err := look()
	if err != nil {
		return err
	}
	stable := true
	return acrossRegivings(b, agains, &want, look, func(before, after map[string]bool) error {
		stable = stable && maps.Equal(first, before)
		if stable && !maps.Equal(before, after) {
			return fmt.Errorf("the backends that draw picks changed: %d of %d drew picks in %d before, %d after (%s): an Update that brings the set in force moves nothing (a subset picker keeps its subset)",
				len(before), len(bs), picks, len(after), supportDiff(bs, before, after))
		}
		return nil
	})
}

// supportDiff names a backend that draws picks only before, and one that
// draws them only after.
func supportDiff(bs []balancer.Backend, before, after map[string]bool) string {
	var gone, came []string
	for _, x := range bs {
		switch id := x.ID(); {
		case before[id] && !after[id]:
			gone = append(gone, id)
		case after[id] && !before[id]:
			came = append(came, id)
		}
	}
	var parts []string
	if len(gone) > 0 {
		parts = append(parts, fmt.Sprintf("%d no longer, %s the first", len(gone), gone[0]))
	}
	if len(came) > 0 {
		parts = append(parts, fmt.Sprintf("%d new, %s the first", len(came), came[0]))
	}
	return strings.Join(parts, "; ")
}

// aroundUpdate returns what measure sees before and after b's Update to
// set, and makes *want the members of set once it is given.
func aroundUpdate[T any](b balancer.Balancer, set []balancer.Backend, want *map[string]balancer.Backend, measure func() (T, error)) (before, after T, err error) {
	if before, err = measure(); err != nil {
		return before, after, err
	}
	if err = update(b, set); err != nil {
		return before, after, err
	}
	*want = members(set)
	after, err = measure()
	return before, after, err
}

// orderKeys compares the first three attempts of 64 keys before and after
// the reordering, for a picker with key affinity: every key's first tries
// agree, three in a row, and keys have different homes (as Retries finds).
func orderKeys(newBalancer func() balancer.Balancer, bs []balancer.Backend, agains []regiving) error {
	const nkeys, attempts = 64, 3
	b := newBalancer()
	fb := feedback(b)
	if err := update(b, bs); err != nil {
		return err
	}
	want := members(bs)
	pick := func(k, a int) (string, error) {
		got, err := b.Pick(balancer.Request{Key: key(k), Attempt: a})
		if err := member(got, err, want); err != nil {
			return "", fmt.Errorf("key %q attempt %d: %w", key(k), a, err)
		}
		fb.Done(got, balancer.Result{})
		return got.ID(), nil
	}
	homes := map[string]bool{}
	for k := range nkeys {
		var first string
		for i := range 3 {
			home, err := pick(k, 0)
			if err != nil {
				return err
			}
			if i == 0 {
				first = home
			} else if home != first {
				return nil // no key affinity: nothing to keep
			}
		}
		homes[first] = true
	}
	if len(homes) < 2 {
		return nil // one backend for every key: no key affinity
	}
	walk := func() ([][attempts]string, error) {
		out := make([][attempts]string, nkeys)
		for k := range nkeys {
			for a := range attempts {
				id, err := pick(k, a)
				if err != nil {
					return nil, err
				}
				out[k][a] = id
			}
		}
		return out, nil
	}
	return acrossRegivings(b, agains, &want, walk, func(before, after [][attempts]string) error {
		for k := range before {
			if before[k] != after[k] {
				return fmt.Errorf("key %q (attempts 0 to %d) moved from %v to %v: where a key goes must depend on the backends' IDs, not on their positions in the slice, and an Update of the set in force moves no key",
					key(k), attempts-1, before[k], after[k])
			}
		}
		return nil
	})
}

// orderLearned teaches a picker that one backend is slow, then gives it
// the same set in another order: a learner that keeps what it learned by
// position would hand the slow backend a fast one's estimate.
func orderLearned(newBalancer func() balancer.Balancer, bs, moved []balancer.Backend) error {
	const teach, measure = 600, 600
	b := newBalancer()
	fb := feedback(b)
	if err := update(b, bs); err != nil {
		return err
	}
	want := members(bs)
	// The slow one is the heaviest, whose fair share (4 of the 13 weights
	// in the set of 6, 185 of 600 picks) stands far above the limit below:
	// a picker that learns nothing draws it about that often before and
	// after alike, and one that hands it a fast backend's estimate after
	// the Update gives it that share back. (The lightest, at 46 of 600,
	// sat beside the limit of 50: a picker that learns nothing failed
	// about once in a hundred runs by chance.)
	slow := bs[0]
	for _, b := range bs {
		if balancer.WeightOf(b) > balancer.WeightOf(slow) {
			slow = b
		}
	}
	for i := range teach {
		got, err := b.Pick(balancer.Request{Key: key(i)})
		if err := member(got, err, want); err != nil {
			return fmt.Errorf("pick %d: %w", i, err)
		}
		lat := time.Millisecond
		if got.ID() == slow.ID() {
			lat = time.Second
		}
		fb.Done(got, balancer.Result{Latency: lat})
	}
	count := func() (int, error) {
		c := 0
		for i := range measure {
			got, err := b.Pick(balancer.Request{Key: key(teach + i)})
			if err := member(got, err, want); err != nil {
				return 0, fmt.Errorf("pick %d: %w", i, err)
			}
			if got.ID() == slow.ID() {
				c++
			}
			fb.Done(got, balancer.Result{})
		}
		return c, nil
	}
	before, after, err := aroundUpdate(b, moved, &want, count)
	if err != nil {
		return err
	}
	if limit := max(2*before, measure/(2*len(bs))); after > limit {
		return fmt.Errorf("a backend taught to be slow (1 s against 1 ms) drew %d of %d picks, then %d once the same set was given again: what a picker learns about a backend must stay with its ID, not with its position in the slice",
			before, measure, after)
	}
	return nil
}

// layer is one layer of a stack of decorators that counts requests in
// flight.
type layer struct {
	c     balancer.InFlightCounter
	depth int    // 0 for the Balancer itself
	name  string // for messages
}

// counters returns every layer of b that counts requests in flight (a
// balancer.InFlightCounter), outermost first: b itself, and each layer
// down the stack of decorators through their Unwrap, as balancer.As walks
// it. Pick and Done still go to b, so the counts read inside show whether
// every layer passes every Done on: a decorator that counts for itself
// and drops the Done of some requests has its own counts right and those
// of the picker inside wrong.
func counters(b balancer.Picker) []layer {
	var out []layer
	for p, depth := b, 0; p != nil; depth++ {
		if c, ok := p.(balancer.InFlightCounter); ok {
			name := fmt.Sprintf("the %T itself", p)
			switch {
			case depth == 1:
				name = fmt.Sprintf("the %T one layer down (Unwrap)", p)
			case depth > 1:
				name = fmt.Sprintf("the %T %d layers down (Unwrap)", p, depth)
			}
			out = append(out, layer{c, depth, name})
		}
		u, ok := p.(balancer.Unwrapper)
		if !ok {
			break
		}
		p = u.Unwrap()
	}
	return out
}

// orderCounts holds requests, gives the same set again in each way of
// agains, and compares the counts of every balancer.InFlightCounter layer
// (see counters) by ID.
func orderCounts(newBalancer func() balancer.Balancer, bs []balancer.Backend, agains []regiving) error {
	b := newBalancer()
	layers := counters(b)
	if len(layers) == 0 {
		return nil
	}
	fb := feedback(b)
	if err := update(b, bs); err != nil {
		return err
	}
	held, err := pickIn(b, members(bs), 4*len(bs), true, false)
	if err != nil {
		return err
	}
	defer func() {
		for _, h := range held {
			fb.Done(h, balancer.Result{})
		}
	}()
	want := members(bs)
	counts := func() ([]map[string]int64, error) {
		out := make([]map[string]int64, len(layers))
		for i, l := range layers {
			out[i] = make(map[string]int64, len(bs))
			for _, x := range bs {
				out[i][x.ID()] = l.c.InFlight(x.ID())
			}
		}
		return out, nil
	}
	return acrossRegivings(b, agains, &want, counts, func(before, after []map[string]int64) error {
		for i, l := range layers {
			for _, x := range bs {
				if got := after[i][x.ID()]; got != before[i][x.ID()] {
					return fmt.Errorf("with %d requests held, InFlight(%q) of %s was %d, then %d after the Update: counts must stay with the backend's ID, not with its position in the slice",
						len(held), x.ID(), l.name, before[i][x.ID()], got)
				}
			}
		}
		return nil
	})
}

// abandonedLate are abandoned Results that carry long latencies, as a
// hedge that lost or a client that left after a long wait would report,
// one of them with a refused connection in its chain as well.
var abandonedLate = []balancer.Result{
	{Latency: 5e9, Err: balancer.ErrAbandoned},
	{Latency: 30e9, Err: fmt.Errorf("balancertest: hedge lost: %w", context.Canceled)},
	{Latency: math.MaxInt64, Err: balancer.ErrAbandoned},
	{Latency: 2e9, Err: fmt.Errorf("balancertest: client went away: %w (%w)", context.Canceled, refused)},
}

// checkAbandonedNeutral: a request given up on is neither a failure nor a
// latency sample, whatever latency it carries. A backend whose every
// request is abandoned after a long wait draws at least half the picks it
// draws when its requests end unmeasured (Result{}), less a little for
// noise: a learner that took the wait as a sample, or as a failure, would
// starve it, and a passive health check that counted it as a failure
// would eject it.
//
// The backend is the one a first run, with every request measured at 1 s,
// favours most, so that a hash picker's uneven shares leave it many picks.
// Each run is of a new Balancer; the last two are compared only if they
// pick the same backends, or Balancers of the constructor pick alike
// (see perInstance).
func checkAbandonedNeutral(newBalancer func() balancer.Balancer) error {
	const n, picks = 4, 2000
	bs := backends("an", n, false)
	run := func(quiet balancer.Backend, abandon bool) (map[balancer.Backend]int, error) {
		return countPicks(newBalancer, bs, picks, func(p balancer.Backend, nth int) balancer.Result {
			switch {
			case p != quiet:
				return balancer.Result{Latency: time.Second}
			case abandon:
				return abandonedLate[nth%len(abandonedLate)]
			}
			return balancer.Result{}
		})
	}
	first, err := run(nil, false)
	if err != nil {
		return err
	}
	quiet := bs[0]
	for _, b := range bs {
		if first[b] > first[quiet] {
			quiet = b
		}
	}
	unmeasured, err := run(quiet, false)
	if err != nil {
		return err
	}
	abandoned, err := run(quiet, true)
	if err != nil {
		return err
	}
	if !sameSupport(sharesOf(unmeasured, picks), sharesOf(abandoned, picks)) {
		if per, err := perInstance(newBalancer, bs); err != nil || per {
			return err // placed per instance: nothing to compare
		}
	}
	if got, floor := abandoned[quiet], unmeasured[quiet]/2-picks/(8*n); got < floor {
		return fmt.Errorf("a backend whose every request was abandoned after a long wait drew %d of %d picks, against %d when its requests ended unmeasured (Result{}): an abandoned request is neither a failure nor a latency sample, and no reason to eject a backend (see balancer.Result)",
			got, picks, unmeasured[quiet])
	}
	return nil
}

// Sizes of checkInFlight's storm: pickers goroutines pick while one
// updater makes stormUpdates Updates, each to stormKept backends of the
// base set and stormFresh new ones, so that backends leave and come back,
// and more retire at once than a balancer.Registry keeps (the larger of
// the set and 64): idle counters are evicted while Picks hold them.
const (
	stormPickers = 3
	stormUpdates = 12
	stormKept    = 3
	stormFresh   = 32
)

// inFlightSizes are the sizes of the sets InFlight counts over; the storm
// runs over the set of 8.
var inFlightSizes = []int{1, 3, 8, 65}

// checkInFlight: every layer of the Balancer that is a
// balancer.InFlightCounter (see counters) counts exactly the requests
// picked and not yet done, by ID, in sets of 1 to 65: after picks, after
// half of their Dones (in every shape of Result), after a storm of
// concurrent Picks, Dones and Updates that evicts idle counters, with
// requests held throughout; and every count is exactly zero once every
// Pick has had its Done. A Balancer with no such layer, or whose counts
// stay zero while requests are held (a decorator around a picker that
// counts nothing), passes.
func checkInFlight(newBalancer func() balancer.Balancer) error {
	for _, n := range inFlightSizes {
		if err := inFlightIn(newBalancer, n); err != nil {
			return fmt.Errorf("in a set of %d: %w", n, err)
		}
	}
	return nil
}

// inFlightIn is checkInFlight on a new Balancer given a set of n.
func inFlightIn(newBalancer func() balancer.Balancer, n int) error {
	b := newBalancer()
	layers := counters(b)
	if len(layers) == 0 {
		return nil
	}
	fb := feedback(b)
	bs := backends("if", n, true)
	if err := update(b, bs); err != nil {
		return err
	}
	held, err := pickIn(b, members(bs), max(40, 2*n), true, false)
	if err != nil {
		return err
	}
	count := make(map[string]int64, len(bs))
	for _, x := range bs {
		count[x.ID()] = 0
	}
	for _, h := range held {
		count[h.ID()]++
	}
	layers = slices.DeleteFunc(layers, func(l layer) bool {
		for id := range count {
			if l.c.InFlight(id) != 0 {
				return false
			}
		}
		return true // counts nothing
	})
	if len(layers) == 0 {
		for _, h := range held {
			fb.Done(h, balancer.Result{})
		}
		return nil
	}
	if err := wantLayers(layers, count, fmt.Sprintf("after %d Picks without a Done", len(held))); err != nil {
		return err
	}
	for _, l := range layers {
		if got := l.c.InFlight("never.test:1"); got != 0 {
			return fmt.Errorf("%s: InFlight of an ID never in the set = %d, want 0", l.name, got)
		}
	}
	half := len(held) / 2
	for i, h := range held[:half] {
		fb.Done(h, results[i%len(results)])
		count[h.ID()]--
	}
	held = held[half:]
	if err := wantLayers(layers, count, fmt.Sprintf("after Done for %d of them, with every shape of Result", half)); err != nil {
		return err
	}
	var storm []string
	if n == 8 {
		if storm, err = inFlightStorm(b, bs); err != nil {
			return err
		}
		back := slices.Clone(bs)
		slices.Reverse(back)
		if err := update(b, back); err != nil {
			return err
		}
		if err := wantLayers(layers, count, fmt.Sprintf("after a storm of %d Updates, with %d requests held throughout", stormUpdates, len(held))); err != nil {
			return err
		}
	}
	for _, h := range held {
		fb.Done(h, balancer.Result{Latency: 1e6})
		count[h.ID()]--
	}
	for _, id := range storm {
		count[id] = 0
	}
	return wantLayers(layers, count, "once every Pick had its Done")
}

// wantLayers compares the counts of every layer with want.
func wantLayers(layers []layer, want map[string]int64, when string) error {
	for _, l := range layers {
		if err := wantCounts(l.c, want, when); err != nil {
			if len(layers) > 1 || l.depth > 0 {
				return fmt.Errorf("%s: %w", l.name, err)
			}
			return err
		}
	}
	return nil
}

// wantCounts compares a counter's counts with want, by ID.
func wantCounts(c balancer.InFlightCounter, want map[string]int64, when string) error {
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if got := c.InFlight(id); got != want[id] {
			return fmt.Errorf("%s: InFlight(%q) = %d, want %d, the requests picked and not yet done", when, id, got, want[id])
		}
	}
	return nil
}

// inFlightStorm runs checkInFlight's storm (see its constants) and returns
// the IDs of the new backends it brought in. Every request it picks is
// done when it returns; some are held across a few Updates first.
func inFlightStorm(b balancer.Balancer, bs []balancer.Backend) ([]string, error) {
	fb := feedback(b)
	r := rand.New(rand.NewPCG(13, 1))
	sets := make([][]balancer.Backend, stormUpdates)
	var ids []string
	union := members(bs)
	for u := range sets {
		set := slices.Clone(bs)
		r.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
		set = set[:stormKept]
		for i := range stormFresh {
			x := balancer.NewEndpoint(fmt.Sprintf("storm-%d-%d.test:8080", u, i), 1+i%3)
			set = append(set, x)
			ids = append(ids, x.ID())
			union[x.ID()] = x
		}
		r.Shuffle(len(set), func(i, j int) { set[i], set[j] = set[j], set[i] })
		sets[u] = set
	}
	var picked, exited, updating atomic.Int64
	updating.Store(1)
	var errs []<-chan error
	for g := range stormPickers {
		errs = append(errs, goErr(func() (err error) {
			defer exited.Add(1)
			var mine []balancer.Backend
			defer func() {
				for _, h := range mine {
					fb.Done(h, balancer.Result{Latency: 1e6})
				}
			}()
			for i := 0; i < 200 || updating.Load() > 0; i++ {
				got, err := b.Pick(balancer.Request{Key: key(g*1000 + i), Attempt: i % 2})
				if err := member(got, err, union); err != nil {
					return fmt.Errorf("storm picker %d, pick %d: %w", g, i, err)
				}
				picked.Add(1)
				if mine = append(mine, got); len(mine) > i%6 {
					for j, h := range mine {
						fb.Done(h, results[(i+j)%len(results)])
					}
					mine = mine[:0]
				}
			}
			return nil
		}))
	}
	errs = append(errs, goErr(func() error {
		defer updating.Store(0)
		for u, set := range sets {
			if err := b.Update(set); err != nil {
				return fmt.Errorf("storm update %d: %w", u, err)
			}
			for start := picked.Load(); picked.Load() < start+2*stormPickers && exited.Load() == 0; {
				time.Sleep(20 * time.Microsecond) // frees the processor for the pickers
			}
		}
		return nil
	}))
	var all []error
	for _, c := range errs {
		all = append(all, <-c)
	}
	return ids, errors.Join(all...)
}
