package balancertest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/discovery"
)

// SourceHarness drives a discovery source and the outside system it reads
// (a DNS resolver, an API server, an xDS control plane, etcd), for
// RunSource. Set, Fail and Heal act on the outside system only; the check
// watches what reaches the target.
type SourceHarness struct {
	// New returns a source that feeds target from the harness's outside
	// system, not started. The system lists no endpoint yet, or it lists
	// what the last Set gave it.
	New func(t testing.TB, target balancer.Updater) discovery.Source
	// Set makes the outside system list eps, as its own records (a DNS
	// answer, EndpointSlices, a ClusterLoadAssignment, keys). Only Addr is
	// set: every endpoint is healthy, of weight 1. The addresses are IP
	// addresses, all on port 8080 (so that a DNS answer can list them),
	// some of them spelled as no canonical ID is (an IPv4-mapped IPv6
	// address), which the source must spell canonically.
	Set func(t testing.TB, eps []discovery.Endpoint)
	// Fail makes the outside system fail, as it fails in production: the
	// server stopped or unreachable, or answering errors. Heal ends it;
	// the system then lists what it listed before Fail unless Set changes
	// it.
	Fail, Heal func(t testing.TB)
	// KeepsEmpty says that the source keeps its last set when the system
	// lists nothing (lbhttp's Refresher: an empty DNS answer is often
	// transient). Otherwise an empty listing must reach the target.
	KeepsEmpty bool
	// Settle is how long a change may take to reach the target: the
	// source's poll interval or watch latency, with room for a loaded
	// machine. Zero: 10 s. The check waits at most this for each change,
	// and watches a failure for a quarter of it.
	Settle time.Duration
}

// sourceChecks are the rules of package discovery, in the order RunSource
// reports them.
var sourceChecks = []struct {
	name string
	run  func(testing.TB, SourceHarness) error
}{
	{"Lifecycle", checkSourceLifecycle},
	{"Canonical", checkSourceCanonical},
	{"KeepsOnFailure", checkSourceKeepsOnFailure},
	{"Empty", checkSourceEmpty},
	{"Closed", checkSourceClosed},
}

// RunSource checks a discovery source against the rules every lbkit source
// follows (package discovery), each as a subtest:
//
//   - Lifecycle: Start succeeds once; a second Start returns an error
//     wrapping balancer.ErrStarted; Close returns nil, twice; Start after
//     Close returns one wrapping balancer.ErrClosed; once Close has
//     returned, no goroutine the source started is left.
//   - Canonical: the set the system lists reaches the target, every ID
//     spelled as balancer.CanonicalAddr spells it (an IPv4-mapped address
//     as its IPv4 address).
//   - KeepsOnFailure: while the system fails, the target keeps the last
//     good set: no Update with another set, and never an empty one; once
//     it heals, a new set reaches the target.
//   - Empty: a system that lists nothing empties the target, or, for a
//     source that says KeepsEmpty, leaves it as it was; a source is never
//     to publish an empty set it was not told to.
//   - Closed: once Close has returned, nothing reaches the target, and
//     the target keeps its last set.
//
// Each check makes a source of its own with h.New and closes it. The
// target the checks give is a recorder of every Update and UpdateHealth
// call, which fails a check if a call is refused by validation.
func RunSource(t *testing.T, h SourceHarness) {
	t.Helper()
	for _, c := range sourceChecks {
		t.Run(c.name, func(t *testing.T) {
			if err := c.run(t, h); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestSource runs the checks of RunSource in order and returns their
// failures joined, each starting with the check's name, or nil: for use
// outside a *testing.T of its own, or to check that a broken source
// fails. tb receives the harness's own failures.
func TestSource(tb testing.TB, h SourceHarness) error {
	var errs []error
	for _, c := range sourceChecks {
		if err := c.run(tb, h); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
		}
	}
	return errors.Join(errs...)
}

// sourceTarget records what a source gives it. It is an Updater only, so
// that the Publisher a source uses hands it the set and nothing else.
type sourceTarget struct {
	mu      sync.Mutex
	sets    [][]string // every set taken, as IDs in the order given
	invalid []error    // Updates that validation refused
	changed chan struct{}
}

func newSourceTarget() *sourceTarget { return &sourceTarget{changed: make(chan struct{}, 1)} }

func (s *sourceTarget) Update(bs []balancer.Backend) error {
	set, err := balancer.NewSet(bs)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.invalid = append(s.invalid, err)
		return fmt.Errorf("balancertest: %w", err)
	}
	s.sets = append(s.sets, slices.Clone(set.IDs))
	select {
	case s.changed <- struct{}{}:
	default:
	}
	return nil
}

// state returns the number of sets taken, the last one (sorted), and the
// validation errors.
func (s *sourceTarget) state() (int, []string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var last []string
	if n := len(s.sets); n > 0 {
		last = slices.Sorted(slices.Values(s.sets[n-1]))
	}
	return len(s.sets), last, errors.Join(s.invalid...)
}

// waitFor waits up to d for the target's last set to be want (sorted).
func (s *sourceTarget) waitFor(want []string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		n, last, bad := s.state()
		if bad != nil {
			return fmt.Errorf("the source gave an invalid set: %w", bad)
		}
		if n > 0 && slices.Equal(last, want) {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			if n == 0 {
				return fmt.Errorf("no set reached the target within %v; want %v", d, want)
			}
			return fmt.Errorf("the target has %v after %v; want %v", last, d, want)
		}
		select {
		case <-s.changed:
		case <-time.After(min(left, 20*time.Millisecond)):
		}
	}
}

func (h SourceHarness) settle() time.Duration {
	if h.Settle > 0 {
		return h.Settle
	}
	return 10 * time.Second
}

// The sets the checks list: IP addresses, a mapped one among them.
var (
	sourceSetA     = []discovery.Endpoint{{Addr: "127.0.0.11:8080"}, {Addr: "[::ffff:127.0.0.12]:8080"}, {Addr: "[::1]:8080"}}
	sourceSetAIDs  = []string{"127.0.0.11:8080", "127.0.0.12:8080", "[::1]:8080"}
	sourceSetB     = []discovery.Endpoint{{Addr: "127.0.0.11:8080"}, {Addr: "127.0.0.13:8080"}}
	sourceSetBIDs  = []string{"127.0.0.11:8080", "127.0.0.13:8080"}
	sourceStartCtx = context.Background
)

// startSource makes a source over a fresh target and starts it, with set
// listed first.
func startSource(tb testing.TB, h SourceHarness, set []discovery.Endpoint) (discovery.Source, *sourceTarget, error) {
	h.Set(tb, set)
	target := newSourceTarget()
	src := h.New(tb, target)
	if src == nil {
		return nil, nil, errors.New("the harness's New returned a nil source")
	}
	if err := src.Start(sourceStartCtx()); err != nil {
		_ = src.Close()
		return nil, nil, fmt.Errorf("start: %w", err)
	}
	return src, target, nil
}

func checkSourceLifecycle(tb testing.TB, h SourceHarness) error {
	// Count after Set: what the harness starts to drive its system (a
	// client connecting at its first request) is not the source's.
	h.Set(tb, sourceSetA)
	before := goroutineIDs()
	src := h.New(tb, newSourceTarget())
	if src == nil {
		return errors.New("the harness's New returned a nil source")
	}
	var errs []error
	if err := src.Start(sourceStartCtx()); err != nil {
		errs = append(errs, fmt.Errorf("first Start: %w", err))
	}
	if err := src.Start(sourceStartCtx()); !errors.Is(err, balancer.ErrStarted) {
		errs = append(errs, fmt.Errorf("second Start returned %v, want an error wrapping balancer.ErrStarted", err))
	}
	if err := src.Close(); err != nil {
		errs = append(errs, fmt.Errorf("Close: %w", err))
	}
	if err := src.Close(); err != nil {
		errs = append(errs, fmt.Errorf("second Close: %v, want nil", err))
	}
	if err := src.Start(sourceStartCtx()); !errors.Is(err, balancer.ErrClosed) {
		errs = append(errs, fmt.Errorf("Start after Close returned %v, want an error wrapping balancer.ErrClosed", err))
	}
	// Goroutines are told apart by ID, not counted: others' (a server's
	// of another test, winding down) come and go meanwhile. Those begun
	// since New are given a while to end: a server's goroutine for the
	// source's connection ends once the server sees it close.
	if left := goroutinesSince(before, h.settle()); left != "" {
		errs = append(errs, fmt.Errorf("goroutines left after Close, begun since New:\n%s", left))
	}
	return errors.Join(errs...)
}

// goroutineIDs returns the IDs of the goroutines running now.
func goroutineIDs() map[string]bool {
	ids := map[string]bool{}
	for _, g := range goroutineStacks() {
		ids[g.id] = true
	}
	return ids
}

type goroutineStack struct{ id, stack string }

// goroutineStacks returns every goroutine's ID and stack, from
// runtime.Stack's "goroutine N [state]:" blocks.
func goroutineStacks() []goroutineStack {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []goroutineStack
	for _, block := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(block, "\n")
		rest, ok := strings.CutPrefix(head, "goroutine ")
		if !ok {
			continue
		}
		id, _, _ := strings.Cut(rest, " ")
		out = append(out, goroutineStack{id, block})
	}
	return out
}

// goroutinesSince waits up to d for every goroutine not in before (the
// calling one aside) to end, and returns "" if they do, else their stacks.
func goroutinesSince(before map[string]bool, d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		var left []string
		for _, g := range goroutineStacks() {
			if !before[g.id] && !strings.Contains(g.stack, "balancertest.goroutineStacks") {
				left = append(left, g.stack)
			}
		}
		if len(left) == 0 {
			return ""
		}
		if time.Now().After(deadline) {
			return strings.Join(left, "\n\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func checkSourceCanonical(tb testing.TB, h SourceHarness) error {
	src, target, err := startSource(tb, h, sourceSetA)
	if err != nil {
		return err
	}
	defer src.Close()
	return target.waitFor(sourceSetAIDs, h.settle())
}

func checkSourceKeepsOnFailure(tb testing.TB, h SourceHarness) error {
	src, target, err := startSource(tb, h, sourceSetA)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := target.waitFor(sourceSetAIDs, h.settle()); err != nil {
		return fmt.Errorf("before the failure: %w", err)
	}
	h.Fail(tb)
	deadline := time.Now().Add(h.settle() / 4)
	for time.Now().Before(deadline) {
		if err := sameSince(target, sourceSetAIDs); err != nil {
			h.Heal(tb)
			return fmt.Errorf("while the system failed: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.Heal(tb)
	h.Set(tb, sourceSetB)
	if err := target.waitFor(sourceSetBIDs, h.settle()); err != nil {
		return fmt.Errorf("after the system healed and listed a new set: %w", err)
	}
	return nil
}

// sameSince reports an error if any set the target took differs from
// want (sorted).
func sameSince(target *sourceTarget, want []string) error {
	target.mu.Lock()
	defer target.mu.Unlock()
	for _, s := range target.sets {
		got := slices.Sorted(slices.Values(s))
		if len(got) == 0 {
			return errors.New("the target was given an empty set")
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("the target was given %v; want it to keep %v", got, want)
		}
	}
	return nil
}

func checkSourceEmpty(tb testing.TB, h SourceHarness) error {
	src, target, err := startSource(tb, h, sourceSetB)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := target.waitFor(sourceSetBIDs, h.settle()); err != nil {
		return fmt.Errorf("before the set was emptied: %w", err)
	}
	h.Set(tb, nil)
	if !h.KeepsEmpty {
		if err := target.waitFor(nil, h.settle()); err != nil {
			return fmt.Errorf("the system lists nothing, and the source does not say KeepsEmpty: %w", err)
		}
		return nil
	}
	time.Sleep(h.settle() / 4)
	if err := sameSince(target, sourceSetBIDs); err != nil {
		return fmt.Errorf("the system lists nothing, and the source says KeepsEmpty: %w", err)
	}
	return nil
}

func checkSourceClosed(tb testing.TB, h SourceHarness) error {
	src, target, err := startSource(tb, h, sourceSetA)
	if err != nil {
		return err
	}
	if err := target.waitFor(sourceSetAIDs, h.settle()); err != nil {
		_ = src.Close()
		return err
	}
	if err := src.Close(); err != nil {
		return fmt.Errorf("Close: %w", err)
	}
	n, _, _ := target.state()
	h.Set(tb, sourceSetB)
	time.Sleep(h.settle() / 4)
	m, last, _ := target.state()
	if m != n {
		return fmt.Errorf("%d set(s) reached the target after Close returned (the last %v)", m-n, last)
	}
	if !slices.Equal(last, sourceSetAIDs) {
		return fmt.Errorf("after Close the target has %v; want the last set, %v", last, sourceSetAIDs)
	}
	return nil
}
