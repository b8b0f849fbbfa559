package balancertest

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync/atomic"

	"github.com/lbkit/lbkit/balancer"
)

// nilEndpoint is a nil pointer typed as a Backend.
var nilEndpoint *balancer.Endpoint

// checkInvalidUpdate: a bad set is refused with the right error and the
// previous set stays in use.
func checkInvalidUpdate(newBalancer func() balancer.Balancer) error {
	good := backends("g", 4, true)
	dup := balancer.NewEndpoint(good[1].ID(), 1)
	fresh := balancer.NewEndpoint("fresh.test:8080", 1)
	cases := []struct {
		name string
		set  []balancer.Backend
		want error
	}{
		{"nil backend", []balancer.Backend{fresh, nil}, balancer.ErrNilBackend},
		{"nil pointer", []balancer.Backend{fresh, nilEndpoint}, balancer.ErrNilBackend},
		{"empty ID", []balancer.Backend{fresh, balancer.NewEndpoint("", 1)}, balancer.ErrEmptyID},
		{"duplicate ID", []balancer.Backend{fresh, good[1], dup}, balancer.ErrDuplicateID},
		{"negative weight", []balancer.Backend{fresh, balancer.NewEndpoint("neg.test:1", -3)}, balancer.ErrBadWeight},
		{"zero weight", []balancer.Backend{fresh, balancer.NewEndpoint("zero.test:1", 0)}, balancer.ErrBadWeight},
		{"weight too large", []balancer.Backend{fresh, balancer.NewEndpoint("big.test:1", balancer.MaxWeight+1)}, balancer.ErrBadWeight},
		{"negative priority", []balancer.Backend{fresh, balancer.NewEndpoint("low.test:1", 1).At(balancer.Locality{Priority: -1})}, balancer.ErrBadLocality},
		{"priority too large", []balancer.Backend{fresh, balancer.NewEndpoint("high.test:1", 1).At(balancer.Locality{Priority: balancer.MaxPriority + 1})}, balancer.ErrBadLocality},
	}
	b := newBalancer()
	if err := update(b, good); err != nil {
		return err
	}
	want := members(good)
	for _, c := range cases {
		err := b.Update(c.set)
		if err == nil {
			return fmt.Errorf("%s: Update returned nil, want an error wrapping %v", c.name, c.want)
		}
		if !errors.Is(err, c.want) {
			return fmt.Errorf("%s: Update returned %q, want an error wrapping %v", c.name, err, c.want)
		}
		if _, err := pickIn(b, want, 200, false, false); err != nil {
			return fmt.Errorf("after the refused %s update, the previous set must stay: %w", c.name, err)
		}
	}
	return nil
}

// checkSlice: Update neither modifies the caller's slice (no sorting or
// filtering in place) nor keeps it, at every size.
func checkSlice(newBalancer func() balancer.Balancer) error {
	for _, n := range sizes {
		b := newBalancer()
		bs := backends("r", n, true)
		// A shuffled order, so that a picker sorting in place would move
		// something.
		r := rand.New(rand.NewPCG(uint64(n), 7))
		r.Shuffle(len(bs), func(i, j int) { bs[i], bs[j] = bs[j], bs[i] })
		before := slices.Clone(bs)
		want := members(bs)
		if err := update(b, bs); err != nil {
			return err
		}
		for i := range bs {
			if bs[i] != before[i] {
				return fmt.Errorf("n=%d: Update changed the caller's slice at %d (%q, was %q): it must work on a copy", n, i, bs[i].ID(), before[i].ID())
			}
		}
		for i := range bs {
			bs[i] = balancer.NewEndpoint(fmt.Sprintf("intruder-%d.test:1", i), 1)
		}
		if _, err := pickIn(b, want, 300, false, n > 1); err != nil {
			return fmt.Errorf("n=%d: after the caller overwrote the slice it passed to Update: %w", n, err)
		}
	}
	return nil
}

// fickle is a Backend whose weight is valid on its first call and then
// changes, as a weight another goroutine rewrites might.
type fickle struct {
	id    string
	later int
	calls atomic.Int64
}

func (f *fickle) ID() string { return f.id }

// Weight returns 2, then f.later.
func (f *fickle) Weight() int {
	if f.calls.Add(1) == 1 {
		return 2
	}
	return f.later
}

// weightBudget is the most an Update may allocate, in bytes, whatever a
// fickle weight says afterwards.
const weightBudget = 256 << 20

// weightSizes are the sizes of the sets WeightsOnce gives, either side of
// 8, 16 and 64 and up to 256: a picker may read weights anew only where
// it treats a large set apart (a table, a faster path).
var weightSizes = []int{5, 8, 17, 64, 256}

// checkWeightsOnce: a weight is read once per Update: Backends whose weight
// is valid when validated and zero, negative or huge afterwards, first,
// in the middle and last of sets of 5 to 256, must not make Update or
// Pick panic, divide by zero or allocate without bound.
func checkWeightsOnce(newBalancer func() balancer.Balancer) error {
	for _, n := range weightSizes {
		b := newBalancer()
		prev := backends("wp", 3, true)
		if err := update(b, prev); err != nil {
			return err
		}
		for u, later := range []int{0, -1, -1 << 40, 50 * balancer.MaxWeight, math.MaxInt} {
			next := backends(fmt.Sprintf("wn%d", u), n, true)
			for _, at := range []int{0, n / 2, n - 1} {
				next[at] = &fickle{id: fmt.Sprintf("fickle-%d-%d.test:1", u, at), later: later}
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			panicked, uerr := updateRecovered(b, next)
			runtime.ReadMemStats(&after)
			if panicked != nil {
				return fmt.Errorf("weight 2 then %d, in a set of %d: Update panicked: %v: read each weight once, validate it and use that value", later, n, panicked)
			}
			if d := after.TotalAlloc - before.TotalAlloc; d > weightBudget {
				return fmt.Errorf("weight 2 then %d: Update of %d backends allocated %d MiB: read each weight once, validate it and use that value", later, n, d>>20)
			}
			want := members(next)
			if uerr != nil {
				want = members(prev) // refused: the previous set stays
			}
			if _, err := pickIn(b, want, 300, false, true); err != nil {
				return fmt.Errorf("weight 2 then %d, in a set of %d (Update returned %v): %w", later, n, uerr, err)
			}
			if uerr == nil {
				prev = next
			}
		}
	}
	return nil
}
