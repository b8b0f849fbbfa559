package balancertest

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"testing"

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
	{"NoRetain", checkNoRetain},
	{"Avoid", checkAvoid},
	{"DoneUnknown", checkDoneUnknown},
	{"Allocs", checkAllocs},
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

func runCheck(c check, newBalancer func() balancer.Balancer) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
		if err != nil {
			err = fmt.Errorf("%s: %w", c.name, err)
		}
	}()
	return c.run(newBalancer)
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

// ids returns the IDs of bs as a set.
func ids(bs []balancer.Backend) map[string]bool {
	m := make(map[string]bool, len(bs))
	for _, b := range bs {
		m[b.ID()] = true
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

// pickIn makes n picks with varied keys and attempts, calling Done after each
// unless keep is set (then the picked backends are returned, in flight), and
// fails on the first pick that errs or falls outside want.
func pickIn(b balancer.Balancer, want map[string]bool, n int, keep bool) ([]balancer.Backend, error) {
	fb := feedback(b)
	ks := keys(n)
	var held []balancer.Backend
	for i := range n {
		got, err := b.Pick(balancer.Request{Key: ks[i], Attempt: i % 3})
		if err != nil {
			return held, fmt.Errorf("pick %d (key %q): unexpected error: %w", i, ks[i], err)
		}
		if got == nil {
			return held, fmt.Errorf("pick %d (key %q): nil backend with nil error", i, ks[i])
		}
		if !want[got.ID()] {
			return held, fmt.Errorf("pick %d (key %q): got %q, which is not in the current set", i, ks[i], got.ID())
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
		return fmt.Errorf("Update of a valid set of %d: %w", len(bs), err)
	}
	return nil
}

func wantNoBackend(b balancer.Balancer, when string) error {
	for i, req := range []balancer.Request{{}, {Key: key(0)}, {Key: key(1), Attempt: 2, Avoid: "x"}} {
		got, err := b.Pick(req)
		if !errors.Is(err, balancer.ErrNoBackend) {
			return fmt.Errorf("%s: pick %d: got (%v, %v), want ErrNoBackend", when, i, got, err)
		}
		if got != nil {
			return fmt.Errorf("%s: pick %d: got backend %q with ErrNoBackend, want nil", when, i, got.ID())
		}
	}
	return nil
}

// checkEmpty: a new Balancer, and one given an empty set, answer ErrNoBackend.
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

// checkInSet: every pick is in the current set, for sizes and weights.
func checkInSet(newBalancer func() balancer.Balancer) error {
	for _, n := range []int{1, 2, 3, 5, 8, 64} {
		for _, weighted := range []bool{false, true} {
			b := newBalancer()
			bs := backends("s", n, weighted)
			if err := update(b, bs); err != nil {
				return err
			}
			want := ids(bs)
			// Some requests stay in flight while others finish, as in a proxy.
			held, err := pickIn(b, want, 200, true)
			if err != nil {
				return fmt.Errorf("n=%d weighted=%v: %w", n, weighted, err)
			}
			if _, err := pickIn(b, want, 1000, false); err != nil {
				return fmt.Errorf("n=%d weighted=%v: %w", n, weighted, err)
			}
			fb := feedback(b)
			for _, h := range held {
				fb.Done(h, balancer.Result{Latency: 2e6})
			}
		}
	}
	return nil
}

// checkRemoved: once Update returns, a removed backend is never picked, even
// with requests to it still in flight.
func checkRemoved(newBalancer func() balancer.Balancer) error {
	b := newBalancer()
	fb := feedback(b)
	a := backends("a", 8, true)
	if err := update(b, a); err != nil {
		return err
	}
	held, err := pickIn(b, ids(a), 100, true)
	if err != nil {
		return fmt.Errorf("set A: %w", err)
	}
	// B keeps four of A and adds three; C shares nothing with A or B.
	bSet := append(append([]balancer.Backend{}, a[2:6]...), backends("b", 3, false)...)
	cSet := backends("c", 5, true)
	steps := []struct {
		name string
		set  []balancer.Backend
	}{{"B (half of A removed)", bSet}, {"C (disjoint)", cSet}, {"A again", a}, {"one of A", a[7:]}}
	for i, st := range steps {
		if err := update(b, st.set); err != nil {
			return err
		}
		if _, err := pickIn(b, ids(st.set), 1000, false); err != nil {
			return fmt.Errorf("after Update to %s: %w", st.name, err)
		}
		if i == 0 {
			// Requests picked from A finish now, some on removed backends.
			for _, h := range held {
				fb.Done(h, balancer.Result{Latency: 1e6})
			}
			if _, err := pickIn(b, ids(st.set), 1000, false); err != nil {
				return fmt.Errorf("after Done for A's requests: %w", err)
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
	}
	b := newBalancer()
	if err := update(b, good); err != nil {
		return err
	}
	want := ids(good)
	for _, c := range cases {
		err := b.Update(c.set)
		if err == nil {
			return fmt.Errorf("%s: Update returned nil, want an error wrapping %v", c.name, c.want)
		}
		if !errors.Is(err, c.want) {
			return fmt.Errorf("%s: Update returned %q, want an error wrapping %v", c.name, err, c.want)
		}
		if _, err := pickIn(b, want, 200, false); err != nil {
			return fmt.Errorf("after the refused %s update, the previous set must stay: %w", c.name, err)
		}
	}
	return nil
}

// checkNoRetain: Update copies the caller's slice.
func checkNoRetain(newBalancer func() balancer.Balancer) error {
	b := newBalancer()
	bs := backends("r", 6, false)
	want := ids(bs)
	if err := update(b, bs); err != nil {
		return err
	}
	for i := range bs {
		bs[i] = balancer.NewEndpoint(fmt.Sprintf("intruder-%d.test:1", i), 1)
	}
	if _, err := pickIn(b, want, 500, false); err != nil {
		return fmt.Errorf("after the caller overwrote the slice it passed to Update: %w", err)
	}
	return nil
}

// checkAvoid: a retry that names a backend to avoid gets another one, when
// there is another one.
func checkAvoid(newBalancer func() balancer.Balancer) error {
	ks := keys(100)
	for _, n := range []int{2, 3, 8} {
		b := newBalancer()
		fb := feedback(b)
		bs := backends("v", n, true)
		if err := update(b, bs); err != nil {
			return err
		}
		for _, avoid := range bs {
			for i, k := range ks {
				req := balancer.Request{Key: k, Attempt: i % 2, Avoid: avoid.ID()}
				got, err := b.Pick(req)
				if err != nil {
					return fmt.Errorf("n=%d: %+v: %w", n, req, err)
				}
				if got.ID() == avoid.ID() {
					return fmt.Errorf("n=%d: %+v: got the backend to avoid", n, req)
				}
				fb.Done(got, balancer.Result{Latency: 1e6})
			}
		}
	}
	b := newBalancer()
	one := backends("only", 1, false)
	if err := update(b, one); err != nil {
		return err
	}
	got, err := b.Pick(balancer.Request{Key: key(0), Avoid: one[0].ID()})
	if err != nil || got == nil || got.ID() != one[0].ID() {
		return fmt.Errorf("set of one, avoiding it: got (%v, %v), want the only backend", got, err)
	}
	return nil
}

// checkDoneUnknown: Done for nil, unknown or removed backends, with or
// without an error, is harmless.
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
	fail := errors.New("balancertest: simulated failure")
	for i := range 1000 {
		fb.Done(nil, balancer.Result{})
		fb.Done(stranger, balancer.Result{Latency: 1e6, Err: fail})
		fb.Done(old[i%len(old)], balancer.Result{Latency: 1e6})
		fb.Done(stranger, balancer.Result{Latency: 1e3})
	}
	if _, err := pickIn(b, ids(cur), 1000, false); err != nil {
		return fmt.Errorf("after Done for nil, unknown and removed backends: %w", err)
	}
	return nil
}

// checkAllocs: Pick and Done allocate nothing, in every request shape.
func checkAllocs(newBalancer func() balancer.Balancer) error {
	b := newBalancer()
	fb := feedback(b)
	bs := backends("m", 16, true)
	if err := update(b, bs); err != nil {
		return err
	}
	ks := keys(64)
	fail := errors.New("balancertest: simulated failure")
	shapes := []struct {
		name string
		req  func(i int) balancer.Request
		res  balancer.Result
	}{
		{"empty request", func(int) balancer.Request { return balancer.Request{} }, balancer.Result{Latency: 1e6}},
		{"keyed", func(i int) balancer.Request { return balancer.Request{Key: ks[i%len(ks)]} }, balancer.Result{Latency: 2e6}},
		{"retry", func(i int) balancer.Request {
			return balancer.Request{Key: ks[i%len(ks)], Attempt: 1 + i%2, Avoid: bs[i%len(bs)].ID()}
		}, balancer.Result{Latency: 3e6}},
		{"failed", func(i int) balancer.Request { return balancer.Request{Key: ks[i%len(ks)]} }, balancer.Result{Latency: 1e5, Err: fail}},
	}
	for _, sh := range shapes {
		var perr error
		i := 0
		allocs := testing.AllocsPerRun(1000, func() {
			got, err := b.Pick(sh.req(i))
			i++
			if err != nil {
				perr = err
				return
			}
			fb.Done(got, sh.res)
		})
		if perr != nil {
			return fmt.Errorf("%s: %w", sh.name, perr)
		}
		if allocs != 0 {
			return fmt.Errorf("%s: Pick+Done allocated %.2f times per call, want 0", sh.name, allocs)
		}
	}
	return nil
}

// checkConcurrent: Pick and Done race with Update. Run it under -race; it
// also fails on any pick outside every set ever published.
func checkConcurrent(newBalancer func() balancer.Balancer) error {
	b := newBalancer()
	fb := feedback(b)
	sets := [][]balancer.Backend{backends("x", 5, true), backends("y", 9, false), backends("x", 3, false)}
	union := map[string]bool{}
	for _, s := range sets {
		for id := range ids(s) {
			union[id] = true
		}
	}
	if err := update(b, sets[0]); err != nil {
		return err
	}
	const pickers, picks, updates = 4, 3000, 60
	ks := keys(256)
	errc := make(chan error, pickers+1)
	var wg sync.WaitGroup
	for g := range pickers {
		wg.Go(func() {
			for i := range picks {
				got, err := b.Pick(balancer.Request{Key: ks[(g*picks+i)%len(ks)], Attempt: i % 2})
				if err != nil {
					errc <- fmt.Errorf("picker %d, pick %d: %w", g, i, err)
					return
				}
				if !union[got.ID()] {
					errc <- fmt.Errorf("picker %d, pick %d: got %q, never in any set", g, i, got.ID())
					return
				}
				fb.Done(got, balancer.Result{Latency: 1e6})
			}
		})
	}
	wg.Go(func() {
		for i := range updates {
			if err := b.Update(sets[i%len(sets)]); err != nil {
				errc <- fmt.Errorf("update %d: %w", i, err)
				return
			}
			// A refused update in between must not disturb anything.
			if err := b.Update([]balancer.Backend{nil}); err == nil {
				errc <- fmt.Errorf("update %d: a set holding nil was accepted", i)
				return
			}
		}
	})
	wg.Wait()
	close(errc)
	return <-errc
}
