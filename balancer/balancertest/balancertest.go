package balancertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// A check is one rule of the contract. It gets a constructor rather than a
// Balancer so that every check starts from a fresh one.
type check struct {
	name string
	run  func(newBalancer func() balancer.Balancer) error
}

// checks is the whole contract, in the order Run reports it.
var checks = []check{
	{"Empty", checkEmpty},
	{"InSet", checkInSet},
	{"Removed", checkRemoved},
	{"InvalidUpdate", checkInvalidUpdate},
	{"Slice", checkSlice},
	{"HealthUpdate", checkHealthUpdate},
	{"NewValues", checkNewValues},
	{"Order", checkOrder},
	{"Avoid", checkAvoid},
	{"Attempt", checkAttempt},
	{"Retries", checkRetries},
	{"DoneUnknown", checkDoneUnknown},
	{"Results", checkResults},
	{"Abandoned", checkAbandoned},
	{"AbandonedNeutral", checkAbandonedNeutral},
	{"WeightsOnce", checkWeightsOnce},
	{"NeverBlocks", checkNeverBlocks},
	{"Serialised", checkSerialised},
	{"Allocs", checkAllocs},
	{"InFlight", checkInFlight},
	{"Concurrent", checkConcurrent},
}

// Test checks the Balancers made by newBalancer against the contracts of
// package balancer. Each check starts from a new Balancer. Test returns nil
// if all pass, or an error joining one error per failed check, each starting
// with the check's name. A panic in the Balancer fails its check and is
// reported with its stack, rather than ending the test binary.
//
// The concurrency check can only find races when the test runs with -race.
func Test(newBalancer func() balancer.Balancer) error {
	var errs []error
	for _, c := range checks {
		if err := runCheck(c, newBalancer); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Run runs each check of Test as a subtest of t, named after the check, so
// that a failure says which rule was broken and -run can select one.
func Run(t *testing.T, newBalancer func() balancer.Balancer) {
	t.Helper()
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			if err := runCheck(c, newBalancer); err != nil {
				t.Error(err)
			}
		})
	}
}

// checkTimeout bounds one check. The slowest, Maglev's Concurrent, Removed
// and Avoid (two dozen Updates, each building a 65,537-slot table), take
// a few seconds each under -race on a loaded machine (the package doc
// gives the figures); a check still running after a minute is stuck in
// the picker (an endless loop, a deadlock), and is reported as such rather
// than left to hang the test binary.
const checkTimeout = time.Minute

// runCheck runs one check in a goroutine of its own, so that a panic in
// it or a picker that never returns fails the check and not the binary.
//
// A Balancer that implements io.Closer (health.Balancer does) is closed
// when the check that made it ends, so that background work it started
// (a health check applying an ejection) does not run on into the next
// check, whose allocation count is of the whole process.
func runCheck(c check, newBalancer func() balancer.Balancer) error {
	var (
		mu   sync.Mutex
		made []balancer.Balancer
	)
	tracked := func() balancer.Balancer {
		b := newBalancer()
		mu.Lock()
		made = append(made, b)
		mu.Unlock()
		return b
	}
	var err error
	select {
	case err = <-goErr(func() error { return c.run(tracked) }):
		mu.Lock()
		for _, b := range made {
			if cl, ok := b.(io.Closer); ok {
				if cerr := cl.Close(); cerr != nil && err == nil {
					err = fmt.Errorf("close after the check: %w", cerr)
				}
			}
		}
		mu.Unlock()
	case <-time.After(checkTimeout):
		err = fmt.Errorf("did not finish in %v: a Pick, Done or Update never returned (an endless loop or a deadlock?)", checkTimeout)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", c.name, err)
	}
	return nil
}

// backends returns n endpoints named by prefix, with weights cycling 1..4 if
// weighted, else all 1.
func backends(prefix string, n int, weighted bool) []balancer.Backend {
	bs := make([]balancer.Backend, n)
	for i := range bs {
		w := 1
		if weighted {
			w = 1 + i%4
		}
		bs[i] = balancer.NewEndpoint(fmt.Sprintf("%s-%d.test:8080", prefix, i), w)
	}
	return bs
}

// key returns the i-th affinity key. Keys are client addresses in every form
// iphash accepts, which every other picker takes as plain strings.
func key(i int) string {
	switch i % 4 {
	case 0:
		return fmt.Sprintf("192.0.2.%d", i%256)
	case 1:
		return fmt.Sprintf("198.51.%d.%d:%d", (i/256)%256, i%256, 1024+i%60000)
	case 2:
		return fmt.Sprintf("[2001:db8::%x]:443", i)
	default:
		return fmt.Sprintf("2001:db8:%x::1", i)
	}
}

// keys returns n keys, made ahead so that building them is not measured.
func keys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = key(i)
	}
	return ks
}

// members maps the IDs of bs to the very Backend values, so that a pick can
// be checked to be one of them and not a copy with the same ID.
func members(bs ...[]balancer.Backend) map[string]balancer.Backend {
	m := map[string]balancer.Backend{}
	for _, set := range bs {
		for _, b := range set {
			m[b.ID()] = b
		}
	}
	return m
}

// feedback returns b's Feedback, or a no-op if it has none.
func feedback(b balancer.Balancer) balancer.Feedback {
	if fb, ok := b.(balancer.Feedback); ok {
		return fb
	}
	return nopFeedback{}
}

type nopFeedback struct{}

// Done does nothing.
func (nopFeedback) Done(balancer.Backend, balancer.Result) {}

// member checks one pick against the set it must come from.
func member(got balancer.Backend, err error, want map[string]balancer.Backend) error {
	if err != nil {
		return fmt.Errorf("unexpected error: %w", err)
	}
	if got == nil {
		return errors.New("nil backend with nil error")
	}
	id := got.ID()
	w, ok := want[id]
	if !ok {
		return fmt.Errorf("got %q, which is not in the current set", id)
	}
	if got != w {
		return fmt.Errorf("got a %T with ID %q that is not the Backend value given to Update: Pick must return the caller's own values, not copies or wrappers", got, id)
	}
	return nil
}

// pickIn makes n picks with varied keys, attempts and (if retries) Avoid,
// calling Done after each unless keep is set (then the picked backends are
// returned, in flight), and fails on the first pick that errs or falls
// outside want.
func pickIn(b balancer.Balancer, want map[string]balancer.Backend, n int, keep, retries bool) ([]balancer.Backend, error) {
	fb := feedback(b)
	var avoid []string
	if retries {
		for id := range want {
			avoid = append(avoid, id)
		}
		slices.Sort(avoid)
		avoid = append(avoid, "removed-or-unknown.test:1")
	}
	var held []balancer.Backend
	for i := range n {
		req := balancer.Request{Key: key(i), Attempt: i % 3}
		if retries {
			req.Attempt = 1 + i%4
			req.Avoid = avoid[i%len(avoid)]
		}
		got, err := b.Pick(req)
		if err := member(got, err, want); err != nil {
			return held, fmt.Errorf("pick %d %+v: %w", i, req, err)
		}
		if keep {
			held = append(held, got)
		} else {
			fb.Done(got, balancer.Result{Latency: 1e6})
		}
	}
	return held, nil
}

func update(b balancer.Balancer, bs []balancer.Backend) error {
	if err := b.Update(bs); err != nil {
		return fmt.Errorf("update of a valid set of %d: %w", len(bs), err)
	}
	return nil
}

func wantNoBackend(b balancer.Balancer, when string) error {
	for i, req := range []balancer.Request{{}, {Key: key(0)}, {Key: key(1), Attempt: 2, Avoid: "x"}} {
		got, err := b.Pick(req)
		if err != balancer.ErrNoBackend { //nolint:errorlint // the contract: the sentinel itself
			if errors.Is(err, balancer.ErrNoBackend) {
				return fmt.Errorf("%s: pick %d: got %q, a wrapped copy of ErrNoBackend: return balancer.ErrNoBackend itself, which costs no allocation", when, i, err)
			}
			return fmt.Errorf("%s: pick %d: got (%v, %v), want ErrNoBackend", when, i, got, err)
		}
		if got != nil {
			return fmt.Errorf("%s: pick %d: got backend %q with ErrNoBackend, want nil", when, i, got.ID())
		}
	}
	return nil
}

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
// appearing only after a dozen Updates shows. Few are large: building a
// Maglev table of 256 backends takes a third of a second under -race.
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

// checkAvoid: a retry that names a backend to avoid gets another one, when
// there is another one, at every size and attempt, through a run of Updates
// over sets of 1 to 256 backends on one Balancer; a set of one gives its
// only backend.
func checkAvoid(newBalancer func() balancer.Balancer) error {
	ks := keys(40)
	attempts := []int{0, 1, 2, 3, 7}
	b := newBalancer()
	fb := feedback(b)
	for u, bs := range churn("v", runSizes, 12) {
		if err := update(b, bs); err != nil {
			return err
		}
		n := len(bs)
		want := members(bs)
		// Every backend of small sets; eight spread over larger ones.
		step := max(1, n/8)
		for a := 0; a < n; a += step {
			avoid := bs[a].ID()
			for i, k := range ks {
				req := balancer.Request{Key: k, Attempt: attempts[i%len(attempts)], Avoid: avoid}
				got, err := b.Pick(req)
				if err := member(got, err, want); err != nil {
					return fmt.Errorf("after Update %d of %d, n=%d: %+v: %w", u+1, len(runSizes), n, req, err)
				}
				if n > 1 && got.ID() == avoid {
					return fmt.Errorf("after Update %d of %d, n=%d: %+v: got the backend to avoid", u+1, len(runSizes), n, req)
				}
				fb.Done(got, balancer.Result{Latency: 1e6})
			}
		}
	}
	return nil
}

// checkAttempt: Attempt may be any int, negative or huge, without a panic
// or a pick outside the set.
func checkAttempt(newBalancer func() balancer.Balancer) error {
	attempts := []int{-1, -2, -1000, math.MinInt, math.MinInt + 1, 1 << 20, 1 << 40, math.MaxInt - 1, math.MaxInt}
	for _, n := range []int{1, 2, 3, 8, 64} {
		b := newBalancer()
		fb := feedback(b)
		bs := backends("t", n, true)
		if err := update(b, bs); err != nil {
			return err
		}
		want := members(bs)
		for i, attempt := range attempts {
			for _, avoid := range []string{"", bs[i%n].ID()} {
				req := balancer.Request{Key: key(i), Attempt: attempt, Avoid: avoid}
				got, err := b.Pick(req)
				if err := member(got, err, want); err != nil {
					return fmt.Errorf("n=%d: %+v: %w", n, req, err)
				}
				if n > 1 && got.ID() == avoid {
					return fmt.Errorf("n=%d: %+v: got the backend to avoid", n, req)
				}
				fb.Done(got, balancer.Result{Latency: 1e6})
			}
		}
	}
	return nil
}

// checkRetries: a picker with key affinity (each key has a home it returns
// on every first try, and different keys have different homes) walks a
// retry sequence as balancer.Request's Attempt says: Attempts 0 to n−1 of
// one key reach the key's home and then every other backend, once each,
// and a second Balancer given the same set walks the same sequence (the
// same one in every process). A picker without key affinity ignores
// Attempt, and the check passes it without looking further.
func checkRetries(newBalancer func() balancer.Balancer) error {
	const nkeys, tries = 16, 4
	for _, n := range []int{3, 8, 64} {
		bs := backends("r", n, false)
		sequences := func() ([][]string, error) {
			b := newBalancer()
			fb := feedback(b)
			if err := update(b, bs); err != nil {
				return nil, err
			}
			pick := func(k, attempt int) (string, error) {
				got, err := b.Pick(balancer.Request{Key: key(k), Attempt: attempt})
				if err != nil {
					return "", err
				}
				if got == nil {
					return "", fmt.Errorf("n=%d: key %q attempt %d: nil backend without an error", n, key(k), attempt)
				}
				fb.Done(got, balancer.Result{Latency: 1e6})
				return got.ID(), nil
			}
			homes := map[string]bool{}
			for k := range nkeys {
				home, err := pick(k, 0)
				if err != nil {
					return nil, err
				}
				for range tries - 1 {
					again, err := pick(k, 0)
					if err != nil {
						return nil, err
					}
					if again != home {
						return nil, nil // no affinity: Attempt is not for this picker
					}
				}
				homes[home] = true
			}
			if len(homes) < 2 {
				return nil, nil // one backend for every key: no key affinity
			}
			seqs := make([][]string, nkeys)
			for k := range nkeys {
				for a := range n {
					id, err := pick(k, a)
					if err != nil {
						return nil, err
					}
					seqs[k] = append(seqs[k], id)
				}
			}
			return seqs, nil
		}
		first, err := sequences()
		if err != nil || first == nil {
			return err
		}
		for k, seq := range first {
			seen := map[string]int{}
			for a, id := range seq {
				if prev, ok := seen[id]; ok {
					return fmt.Errorf("n=%d: key %q: attempts %d and %d both reach %s; attempts 0 to n−1 must reach n different backends",
						n, key(k), prev, a, id)
				}
				seen[id] = a
			}
		}
		second, err := sequences()
		if err != nil {
			return err
		}
		if second == nil {
			return fmt.Errorf("n=%d: a second Balancer with the same set shows no key affinity, the first did", n)
		}
		for k := range first {
			if !slices.Equal(first[k], second[k]) {
				return fmt.Errorf("n=%d: key %q: two Balancers with the same set walk different retry sequences: %v and %v",
					n, key(k), first[k], second[k])
			}
		}
	}
	return nil
}

// errFailure is a failure of no particular kind, a 5xx say.
var errFailure = errors.New("balancertest: simulated failure")

// refused is the error net.Dial returns for a refused connection, which
// health's passive check ejects on at once.
var refused error = &net.OpError{
	Op: "dial", Net: "tcp",
	Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9},
	Err:  os.NewSyscallError("connect", syscall.ECONNREFUSED),
}

// results are the shapes of Result a caller passes to Done (see
// balancer.Result), the first a success: success, failure, slow, timeouts,
// abandoned, unmeasured, a refused connection, and latencies a clock that
// stepped back or a request that never ended would give: negative, and
// as far either way as a time.Duration goes.
var results = []balancer.Result{
	{Latency: 1e6},
	{Latency: 2e5, Err: errFailure},
	{Latency: 5e9},
	{Latency: 1e9, Err: context.DeadlineExceeded},
	{Err: balancer.ErrAbandoned},
	{Latency: 3e6, Err: fmt.Errorf("balancertest: client went away: %w", context.Canceled)},
	{},
	{Latency: 4e5, Err: refused},
	{Latency: 30e9, Err: &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}},
	{Latency: -5e6},
	{Latency: -1e6, Err: errFailure},
	{Latency: math.MinInt64},
	{Latency: math.MaxInt64},
	{Latency: math.MaxInt64, Err: context.DeadlineExceeded},
	{Latency: math.MaxInt64, Err: balancer.ErrAbandoned},
}

// describe names a Result in messages.
func describe(r balancer.Result) string {
	return fmt.Sprintf("Result{Latency: %v, Err: %v}", r.Latency, r.Err)
}

// checkDoneUnknown: Done for nil, a nil pointer, unknown or removed
// backends, with every shape of result, is harmless.
func checkDoneUnknown(newBalancer func() balancer.Balancer) error {
	b := newBalancer()
	fb := feedback(b)
	old := backends("old", 3, false)
	if err := update(b, old); err != nil {
		return err
	}
	cur := backends("cur", 4, false)
	if err := update(b, cur); err != nil {
		return err
	}
	stranger := balancer.NewEndpoint("stranger.test:1", 1)
	for i := range 1000 {
		r := results[i%len(results)]
		fb.Done(nil, r)
		fb.Done(nilEndpoint, r)
		fb.Done(stranger, r)
		fb.Done(old[i%len(old)], r)
	}
	if _, err := pickIn(b, members(cur), 1000, false, false); err != nil {
		return fmt.Errorf("after Done for nil, unknown and removed backends: %w", err)
	}
	return nil
}

// countPicks gives a new Balancer the set bs and returns what tally
// counts on it.
func countPicks(newBalancer func() balancer.Balancer, bs []balancer.Backend, picks int, result func(p balancer.Backend, nth int) balancer.Result) (map[balancer.Backend]int, error) {
	b := newBalancer()
	if err := update(b, bs); err != nil {
		return nil, err
	}
	return tally(b, members(bs), picks, result)
}

// tally makes picks picks with the keys key(0), key(1), ..., each checked
// against want and followed by Done with the Result that result gives for
// the backend picked and the number of times it has been picked so far,
// and returns how often each backend was picked.
func tally(b balancer.Balancer, want map[string]balancer.Backend, picks int, result func(p balancer.Backend, nth int) balancer.Result) (map[balancer.Backend]int, error) {
	fb := feedback(b)
	count := map[balancer.Backend]int{}
	for i := range picks {
		p, err := b.Pick(balancer.Request{Key: key(i)})
		if err := member(p, err, want); err != nil {
			return nil, fmt.Errorf("pick %d: %w", i, err)
		}
		count[p]++
		fb.Done(p, result(p, count[p]))
	}
	return count, nil
}

// checkAbandoned: a Result that carries no measurement (abandoned, or
// zero) teaches nothing: a backend whose every request is abandoned or
// unmeasured must not look fast and draw the traffic of four.
//
// A first run, with every request measured, finds the backend the picker
// favours least (a hash picker's share is uneven by design); a second run
// makes the same requests of a fresh picker and abandons every request to
// that backend. Its share may grow to twice a fair share, or twice its
// first share, no more. The two runs are compared only if they pick the
// same backends (see sameSupport).
func checkAbandoned(newBalancer func() balancer.Balancer) error {
	const n, picks = 4, 2000
	bs := backends("ab", n, false)
	unmeasured := []balancer.Result{{Err: balancer.ErrAbandoned}, {}, {Err: context.Canceled}}
	run := func(quiet balancer.Backend) (map[balancer.Backend]int, error) {
		return countPicks(newBalancer, bs, picks, func(p balancer.Backend, nth int) balancer.Result {
			if p == quiet {
				return unmeasured[nth%len(unmeasured)]
			}
			return balancer.Result{Latency: 20e6}
		})
	}
	first, err := run(nil)
	if err != nil {
		return err
	}
	quiet := bs[0]
	for _, b := range bs {
		if first[b] < first[quiet] {
			quiet = b
		}
	}
	second, err := run(quiet)
	if err != nil {
		return err
	}
	if !sameSupport(sharesOf(first, picks), sharesOf(second, picks)) {
		return nil // placed per instance: nothing to compare
	}
	if got, limit := second[quiet], max(2*picks/n, 2*first[quiet]); got > limit {
		return fmt.Errorf("a backend whose requests were all abandoned or unmeasured got %d of %d picks, against %d when they were measured: abandoned and zero Results must not count as fast answers", got, picks, first[quiet])
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

// weightBudget is the most an Update of a few backends may allocate, in
// bytes, whatever a fickle weight says afterwards.
const weightBudget = 256 << 20

// checkWeightsOnce: a weight is read once per Update: a Backend whose weight
// is valid when validated and zero, negative or huge afterwards must not
// make Update or Pick panic, divide by zero or allocate without bound.
func checkWeightsOnce(newBalancer func() balancer.Balancer) error {
	for _, later := range []int{0, -1, -1 << 40, 50 * balancer.MaxWeight, math.MaxInt} {
		b := newBalancer()
		prev := backends("wp", 3, true)
		if err := update(b, prev); err != nil {
			return err
		}
		f := &fickle{id: "fickle.test:1", later: later}
		next := append(backends("wn", 4, true), f)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		uerr := b.Update(next)
		runtime.ReadMemStats(&after)
		if d := after.TotalAlloc - before.TotalAlloc; d > weightBudget {
			return fmt.Errorf("weight 2 then %d: Update of 5 backends allocated %d MiB: read each weight once, validate it and use that value", later, d>>20)
		}
		want := members(next)
		if uerr != nil {
			want = members(prev) // refused: the previous set stays
		}
		if _, err := pickIn(b, want, 300, false, true); err != nil {
			return fmt.Errorf("weight 2 then %d (Update returned %v): %w", later, uerr, err)
		}
	}
	return nil
}

// gate is a Backend whose ID and Weight methods park on their n-th call,
// counted across both, until released: a way to stop an Update half-way.
type gate struct {
	id      string
	parkAt  int64
	calls   atomic.Int64
	parked  chan struct{} // closed when a call parks
	release chan struct{} // closed to let it go on
}

func newGate(id string, parkAt int64) *gate {
	return &gate{id: id, parkAt: parkAt, parked: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) visit() {
	if g.calls.Add(1) == g.parkAt {
		close(g.parked)
		<-g.release
	}
}

func (g *gate) ID() string  { g.visit(); return g.id }
func (g *gate) Weight() int { g.visit(); return 1 }

// blockedFor is how long a check waits for a call that must not block
// before it calls it blocked. It only bounds the wait for a verdict: a
// correct picker answers in microseconds, and a slow machine can only make
// a broken one look correct, never the reverse.
const blockedFor = 2 * time.Second

// goErr runs f in a goroutine, turning a panic into an error, and returns
// the channel its result arrives on.
func goErr(f func() error) <-chan error {
	c := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				c <- fmt.Errorf("panic: %v\n%s", r, debug.Stack())
			}
		}()
		c <- f()
	}()
	return c
}

// parkUpdate starts Update(set) in a goroutine and waits for g to park. It
// reports false if the Update finished first (it never made g's parkAt-th
// call), with its error.
func parkUpdate(b balancer.Balancer, set []balancer.Backend, g *gate) (<-chan error, bool, error) {
	done := goErr(func() error { return b.Update(set) })
	select {
	case <-g.parked:
		return done, true, nil
	case err := <-done:
		return nil, false, err
	}
}

// finish releases g and waits for the Update parked on it.
func finish(g *gate, done <-chan error) error {
	close(g.release)
	select {
	case err := <-done:
		return err
	case <-time.After(blockedFor):
		return errors.New("an Update did not return after its backend was released")
	}
}

// pickBound is how long the fastest of parkedPicks Picks made while an
// Update is parked may take. A sound Pick takes microseconds, even under
// -race; a loaded machine can stretch some of eight Picks made back to
// back, not all of them, while a Pick that waits on a running Update takes
// at least its wait every time. So a Pick that waits for Update for a few
// milliseconds or more fails, where before only one that never returned
// (blockedFor) did.
const (
	pickBound   = 2 * time.Millisecond
	parkedPicks = 8
)

// checkNeverBlocks: Pick returns, fast, while an Update is stopped
// half-way, at each of the calls it makes to a backend's ID or Weight: of
// parkedPicks Picks made then, the fastest takes under pickBound.
func checkNeverBlocks(newBalancer func() balancer.Balancer) error {
	b := newBalancer()
	fb := feedback(b)
	old := backends("nb", 3, true)
	if err := update(b, old); err != nil {
		return err
	}
	for n := int64(1); n <= 16; n++ {
		g := newGate("gate.test:1", n)
		next := append(backends("nbn", 2, false), g)
		done, parked, err := parkUpdate(b, next, g)
		if !parked {
			if err != nil {
				return fmt.Errorf("update of a valid set: %w", err)
			}
			return nil // Update makes fewer than n calls: all tried
		}
		var fastest time.Duration
		pick := goErr(func() error {
			fastest = time.Duration(math.MaxInt64)
			for i := range parkedPicks {
				start := time.Now()
				got, err := b.Pick(balancer.Request{Key: key(int(n) + i)})
				fastest = min(fastest, time.Since(start))
				if err := member(got, err, members(old, next)); err != nil {
					return err
				}
				fb.Done(got, balancer.Result{Latency: 1e6})
			}
			return nil
		})
		select {
		case err := <-pick:
			if err != nil {
				_ = finish(g, done)
				return fmt.Errorf("pick while an Update was parked in call %d to a backend's ID or Weight: %w", n, err)
			}
			if fastest >= pickBound {
				_ = finish(g, done)
				return fmt.Errorf("the fastest of %d Picks made while an Update was parked in call %d to a backend's ID or Weight took %v, want under %v: Pick must not wait for Update", parkedPicks, n, fastest, pickBound)
			}
		case <-time.After(blockedFor):
			ferr := finish(g, done)
			<-pick
			return fmt.Errorf("pick blocked for %v while an Update was parked in call %d to a backend's ID or Weight (it returned once the Update went on; %v): Pick must never wait for Update", blockedFor, n, ferr)
		}
		if err := finish(g, done); err != nil {
			return err
		}
		if err := update(b, old); err != nil {
			return err
		}
	}
	return nil
}

// checkSerialised: calls to Update are serialised, validation included:
// an Update called while another is running waits for it, and the set in
// place at the end is the one of the call that started, and finished,
// last. A second Update must not overtake a first stopped half-way.
func checkSerialised(newBalancer func() balancer.Balancer) error {
	b := newBalancer()
	if err := update(b, backends("s0", 3, true)); err != nil {
		return err
	}
	g := newGate("first.test:1", 1)
	first := append(backends("s1", 3, false), g)
	second := backends("s2", 4, true)
	done1, parked, err := parkUpdate(b, first, g)
	if !parked {
		return fmt.Errorf("update of a valid set of %d never read a backend's ID or Weight (error %v)", len(first), err)
	}
	done2 := goErr(func() error { return b.Update(second) })
	select {
	case err := <-done2:
		if ferr := finish(g, done1); ferr != nil {
			return ferr
		}
		return fmt.Errorf("an Update returned (error %v) while an earlier one was still running, parked in its first call to a backend's ID: take the writers' mutex before validating, so that a slow Update that started first cannot overwrite a newer set", err)
	case <-time.After(blockedFor / 10):
		// Waiting, as it should.
	}
	if err := finish(g, done1); err != nil {
		return fmt.Errorf("first Update: %w", err)
	}
	select {
	case err := <-done2:
		if err != nil {
			return fmt.Errorf("second Update: %w", err)
		}
	case <-time.After(blockedFor):
		return errors.New("the second Update did not return after the first finished")
	}
	if _, err := pickIn(b, members(second), 500, false, true); err != nil {
		return fmt.Errorf("after two Updates, the second waiting for the first: the second's set must be in place: %w", err)
	}
	return nil
}

// checkConcurrent: Pick and Done race with Updates from two goroutines. Run
// it under -race; it also fails on any pick outside every set ever
// published, and a panic in any goroutine fails the check rather than the
// test binary. Each updater waits, after each Update, until the pickers
// have picked a few times, so that every set is picked from while the
// other updater may be replacing it.
func checkConcurrent(newBalancer func() balancer.Balancer) error {
	b := newBalancer()
	fb := feedback(b)
	x := backends("x", 5, true)
	sets := [][]balancer.Backend{x, backends("y", 9, false), x[1:4], backends("z", 17, true)}
	union := members(sets...)
	var avoid []string // read by the pickers, never given to Update
	for _, set := range sets {
		avoid = append(avoid, set[0].ID())
	}
	if err := update(b, slices.Clone(sets[0])); err != nil {
		return err
	}
	const pickers, updaters, picks, updates = 4, 2, 2000, 12
	ks := keys(256)
	var picked, exited, updating atomic.Int64
	updating.Store(updaters)
	var errs []<-chan error
	for g := range pickers {
		errs = append(errs, goErr(func() error {
			defer exited.Add(1)
			for i := 0; i < picks || updating.Load() > 0; i++ {
				req := balancer.Request{Key: ks[(g*picks+i)%len(ks)], Attempt: i % 3}
				if i%5 == 0 {
					req.Avoid = avoid[i%len(avoid)]
				}
				got, err := b.Pick(req)
				if err := member(got, err, union); err != nil {
					return fmt.Errorf("picker %d, pick %d: %w", g, i, err)
				}
				fb.Done(got, results[i%len(results)])
				picked.Add(1)
			}
			return nil
		}))
	}
	for u := range updaters {
		errs = append(errs, goErr(func() error {
			defer updating.Add(-1)
			for i := range updates {
				// A copy each time: a picker that sorts the slice in place
				// (a flaw the Slice check reports) must not race the kit.
				if err := b.Update(slices.Clone(sets[(u+i)%len(sets)])); err != nil {
					return fmt.Errorf("updater %d, update %d: %w", u, i, err)
				}
				for start := picked.Load(); picked.Load() < start+pickers && exited.Load() == 0; {
					time.Sleep(20 * time.Microsecond) // frees the processor for the pickers
				}
				// A refused update in between must not disturb anything.
				if err := b.Update([]balancer.Backend{nil}); err == nil {
					return fmt.Errorf("updater %d, update %d: a set holding nil was accepted", u, i)
				}
			}
			return nil
		}))
	}
	var all []error
	for _, c := range errs {
		all = append(all, <-c)
	}
	return errors.Join(all...)
}
