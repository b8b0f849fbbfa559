package balancertest

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
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
	{"HealthLevels", checkHealthLevels},
	{"NewValues", checkNewValues},
	{"Order", checkOrder},
	{"Spread", checkSpread},
	{"Avoid", checkAvoid},
	{"Attempt", checkAttempt},
	{"Retries", checkRetries},
	{"HashKeys", checkHashKeys},
	{"DoneUnknown", checkDoneUnknown},
	{"Results", checkResults},
	{"Abandoned", checkAbandoned},
	{"AbandonedNeutral", checkAbandonedNeutral},
	{"WeightsOnce", checkWeightsOnce},
	{"NeverBlocks", checkNeverBlocks},
	{"Serialised", checkSerialised},
	{"PublishOrder", checkPublishOrder},
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

// checkTimeout bounds one check. The slowest are those that make the most
// Updates of a Balancer whose Update is costly (the package doc, "Cost");
// a check still running after a minute is stuck in the picker (an endless
// loop, a deadlock), and is reported as such rather than left to hang the
// test binary.
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
