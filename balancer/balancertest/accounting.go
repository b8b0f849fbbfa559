package balancertest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
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

// sameSupport reports whether two spreads of picks, from two Balancers of
// one constructor given the same set and the same requests, pick the same
// backends at all. A check that compares one Balancer with another can
// judge only a picker that places backends alike in every instance: one
// that serves each instance its own subset (a subset decorator drawing a
// random salt, as gRFC A68's random subsetting does) picks backends in
// one instance that another never picks, and such a check then skips the
// comparison. What those checks look for (weights kept, abandoned
// requests taken for slow ones) changes how often a backend is picked,
// never whether it is picked at all: every weight is at least 1, and a
// learner must pick a backend once to learn anything of it.
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

// checkNewValues: an Update that keeps every ID but brings new Backend
// values and new weights takes them: picks return the new values, and each
// backend draws the share a new Balancer given the same set gives it
// (where the two pick the same backends; see sameSupport).
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
			continue // placed per instance: nothing to compare; the values were checked
		}
		for _, x := range st.set {
			id := x.ID()
			if math.Abs(got[id]-want[id]) > shareTolerance {
				return fmt.Errorf("after an Update to %s, %s drew %.0f%% of %d picks, against %.0f%% from a new Balancer given the same set: Update must take the new weights, not keep those of the IDs it knew",
					st.name, id, 100*got[id], sharePicks, 100*want[id])
			}
		}
	}
	return nil
}

// checkOrder: state is keyed by ID, not by position in the slice: the
// same set given again in another order moves nothing. Keys keep their
// backends and retry sequences (for a picker with key affinity), a
// backend taught to be slow does not draw more picks, and the counts of
// requests in flight stay with their IDs (for a balancer.InFlightCounter).
func checkOrder(newBalancer func() balancer.Balancer) error {
	const n = 6
	bs := backends("o", n, true)
	moved := slices.Clone(bs)
	slices.Reverse(moved)
	if err := orderKeys(newBalancer, bs, moved); err != nil {
		return err
	}
	if err := orderLearned(newBalancer, bs, moved); err != nil {
		return err
	}
	return orderCounts(newBalancer, bs, moved)
}

// aroundUpdate returns what measure sees before and after b's Update to
// set.
func aroundUpdate[T any](b balancer.Balancer, set []balancer.Backend, measure func() (T, error)) (before, after T, err error) {
	if before, err = measure(); err != nil {
		return before, after, err
	}
	if err = update(b, set); err != nil {
		return before, after, err
	}
	after, err = measure()
	return before, after, err
}

// orderKeys compares the first three attempts of 64 keys before and after
// the reordering, for a picker with key affinity: every key's first tries
// agree, three in a row, and keys have different homes (as Retries finds).
func orderKeys(newBalancer func() balancer.Balancer, bs, moved []balancer.Backend) error {
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
	before, after, err := aroundUpdate(b, moved, walk)
	if err != nil {
		return err
	}
	for k := range before {
		if before[k] != after[k] {
			return fmt.Errorf("the same set given again in reverse order moved key %q (attempts 0 to %d) from %v to %v: where a key goes must depend on the backends' IDs, not on their positions in the slice",
				key(k), attempts-1, before[k], after[k])
		}
	}
	return nil
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
	slow := bs[0]
	for i := range teach {
		got, err := b.Pick(balancer.Request{Key: key(i)})
		if err := member(got, err, want); err != nil {
			return fmt.Errorf("pick %d: %w", i, err)
		}
		lat := time.Millisecond
		if got == slow {
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
			if got == slow {
				c++
			}
			fb.Done(got, balancer.Result{})
		}
		return c, nil
	}
	before, after, err := aroundUpdate(b, moved, count)
	if err != nil {
		return err
	}
	if limit := max(2*before, measure/(2*len(bs))); after > limit {
		return fmt.Errorf("a backend taught to be slow (1 s against 1 ms) drew %d of %d picks, then %d once the same set was given again in reverse order: what a picker learns about a backend must stay with its ID, not with its position in the slice",
			before, measure, after)
	}
	return nil
}

// counterOf returns the first layer of b that counts requests in flight
// (a balancer.InFlightCounter), found as balancer.As finds a layer: b
// itself, else down the stack of decorators through their Unwrap. Pick
// and Done still go to b, so the counts read inside show whether every
// layer passes every Done on.
func counterOf(b balancer.Picker) (balancer.InFlightCounter, bool) {
	return balancer.As[balancer.InFlightCounter](b)
}

// orderCounts holds requests, gives the same set in another order, and
// compares the counts of a balancer.InFlightCounter (see counterOf) by ID.
func orderCounts(newBalancer func() balancer.Balancer, bs, moved []balancer.Backend) error {
	b := newBalancer()
	c, ok := counterOf(b)
	if !ok {
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
	before := make(map[string]int64, len(bs))
	for _, x := range bs {
		before[x.ID()] = c.InFlight(x.ID())
	}
	if err := update(b, moved); err != nil {
		return err
	}
	for _, x := range bs {
		if got := c.InFlight(x.ID()); got != before[x.ID()] {
			return fmt.Errorf("with %d requests held, InFlight(%q) was %d, then %d once the same set was given again in reverse order: counts must stay with the backend's ID, not with its position in the slice",
				len(held), x.ID(), before[x.ID()], got)
		}
	}
	return nil
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
// pick the same backends (see sameSupport).
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
		return nil // placed per instance: nothing to compare
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

// checkInFlight: a balancer.InFlightCounter (the Balancer, or a layer
// inside it; see counterOf) counts exactly the requests
// picked and not yet done, by ID: after picks, after some of their Dones
// (in every shape of Result), after a storm of concurrent Picks, Dones and
// Updates that evicts idle counters, with requests held throughout; and
// every count is exactly zero once every Pick has had its Done. A
// Balancer that is not an InFlightCounter, or whose counts stay zero while
// requests are held (a decorator around a picker that counts nothing),
// passes.
func checkInFlight(newBalancer func() balancer.Balancer) error {
	b := newBalancer()
	c, ok := counterOf(b)
	if !ok {
		return nil
	}
	fb := feedback(b)
	bs := backends("if", 8, true)
	if err := update(b, bs); err != nil {
		return err
	}
	held, err := pickIn(b, members(bs), 40, true, false)
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
	counting := false
	for id := range count {
		counting = counting || c.InFlight(id) != 0
	}
	if !counting {
		for _, h := range held {
			fb.Done(h, balancer.Result{})
		}
		return nil // counts nothing
	}
	if err := wantCounts(c, count, fmt.Sprintf("after %d Picks without a Done", len(held))); err != nil {
		return err
	}
	if got := c.InFlight("never.test:1"); got != 0 {
		return fmt.Errorf("InFlight of an ID never in the set = %d, want 0", got)
	}
	for i, h := range held[:20] {
		fb.Done(h, results[i%len(results)])
		count[h.ID()]--
	}
	held = held[20:]
	if err := wantCounts(c, count, "after Done for 20 of them, with every shape of Result"); err != nil {
		return err
	}
	storm, err := inFlightStorm(b, bs)
	if err != nil {
		return err
	}
	back := slices.Clone(bs)
	slices.Reverse(back)
	if err := update(b, back); err != nil {
		return err
	}
	if err := wantCounts(c, count, fmt.Sprintf("after a storm of %d Updates, with %d requests held throughout", stormUpdates, len(held))); err != nil {
		return err
	}
	for _, h := range held {
		fb.Done(h, balancer.Result{Latency: 1e6})
		count[h.ID()]--
	}
	for _, id := range storm {
		count[id] = 0
	}
	return wantCounts(c, count, "once every Pick had its Done")
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
