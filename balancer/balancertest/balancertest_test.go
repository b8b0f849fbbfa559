package balancertest_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"math/rand/v2"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
)

// flaw is one way to break the reference picker.
type flaw int

const (
	sound               flaw = iota
	keepsRemoved             // Update adds to the set instead of replacing it
	allocates                // Pick returns a fresh copy of the backend
	ignoresEmpty             // Update with an empty set keeps the old one
	skipsValidate            // Update accepts anything
	retainsSlice             // Update keeps the caller's slice
	ignoresAvoid             // Pick never steps past Request.Avoid
	panicsOnUnknown          // Done panics for a backend it does not know
	nilWithoutError          // Pick returns (nil, nil) on an empty set
	wrapsNoBackend           // Pick wraps ErrNoBackend
	copiesBackend            // Pick returns a copy made at Update, with the same ID
	removedOnRetry           // retries may return a backend of the previous set
	rarelyRemoved            // one pick in 10,000 returns a backend of the previous set
	avoidSmallOnly           // Avoid is honoured in sets of up to 8 only
	avoidFirstRetryOnly      // Avoid is ignored from Attempt 2 on
	panicsOnNegative         // a negative Attempt indexes out of range
	sortsInPlace             // Update sorts the caller's slice
	retainsLarge             // Update keeps the caller's slice when it is large
	blocksPick               // Pick takes a read lock that Update holds
	validatesUnlocked        // Update validates before taking its mutex
	rereadsWeight            // Update reads weights again after validating
	derefsNil                // Done dereferences a nil *Endpoint
	floodsAbandoned          // learns latency 0 from abandoned or zero Results
	allocatesHalf            // Pick allocates on every other call
	allocatesOnRetry         // Pick allocates from Attempt 2 on
	allocatesOnFailure       // Done allocates for a failed request
	panicsConcurrently       // Pick panics in a set of 17 (only the Concurrent check has one)
	nilConcurrently          // Pick returns (nil, nil) in a set of 17
	hashes                   // sound, but a hash picker: the key's home, then Attempt steps on
	hashIgnoresAttempt       // a hash picker whose every attempt goes home
	hashRepeats              // a hash picker whose attempts alternate between two backends
	hashPerProcess           // a hash picker whose retry order differs from one instance to the next
)

// ref is a small correct picker (round robin, or lowest last latency for
// floodsAbandoned, with in-flight counting) that a flaw can break in one
// place.
type ref struct {
	flaw flaw
	salt int          // for hashPerProcess: differs between instances
	mu   sync.RWMutex // writers; and readers too, for blocksPick
	cur  atomic.Pointer[refSnap]
	next atomic.Uint64
	reg  balancer.Registry[refState]
}

type refState struct {
	balancer.InFlight
	last atomic.Int64 // the last latency Done saw, for floodsAbandoned
}

type refSnap struct {
	bs     []balancer.Backend
	copies []balancer.Backend // for copiesBackend
	states balancer.States[refState]
	prev   *refSnap // for removedOnRetry and rarelyRemoved
}

// keep makes x escape to the heap, safely from any goroutine, so that a
// flawed picker's allocations are real.
func keep(x any) {
	sinkMu.Lock()
	sink = x
	sinkMu.Unlock()
}

var (
	sinkMu sync.Mutex
	sink   any
)

func newRef(f flaw) func() balancer.Balancer {
	var made atomic.Int64
	return func() balancer.Balancer {
		r := &ref{flaw: f, salt: int(made.Add(1))}
		r.cur.Store(&refSnap{})
		return r
	}
}

func (r *ref) Update(bs []balancer.Backend) error {
	if r.flaw == validatesUnlocked {
		if err := balancer.Validate(bs); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.flaw != skipsValidate && r.flaw != validatesUnlocked {
		if err := balancer.Validate(bs); err != nil {
			return err
		}
	}
	if r.flaw == ignoresEmpty && len(bs) == 0 {
		return nil
	}
	next := append([]balancer.Backend(nil), bs...)
	switch r.flaw {
	case keepsRemoved:
		seen := map[string]bool{}
		for _, b := range bs {
			seen[b.ID()] = true
		}
		for _, b := range r.cur.Load().bs {
			if !seen[b.ID()] {
				next = append(next, b)
			}
		}
	case retainsSlice:
		next = bs
	case retainsLarge:
		if len(bs) > 32 {
			next = bs
		}
	case sortsInPlace:
		slices.SortFunc(bs, func(a, b balancer.Backend) int { return strings.Compare(a.ID(), b.ID()) })
	case rereadsWeight:
		for _, b := range bs {
			keep(make([]byte, balancer.WeightOf(b))) // panics on a negative weight
		}
	case skipsValidate:
		// Keep only what Registry can hold, so the flaw is the lack of
		// validation and not a crash.
		next = next[:0:0]
		for _, b := range bs {
			if b != nil && b.ID() != "" {
				next = append(next, b)
			}
		}
	}
	prev := *r.cur.Load() // a copy: the published one is immutable
	prev.prev = nil       // keep one generation only
	s := &refSnap{bs: next, states: r.reg.Sync(next), prev: &prev}
	for _, b := range next {
		s.copies = append(s.copies, balancer.NewEndpoint(b.ID(), 1))
	}
	r.cur.Store(s)
	return nil
}

func (r *ref) Pick(req balancer.Request) (balancer.Backend, error) {
	if r.flaw == blocksPick {
		r.mu.RLock()
		defer r.mu.RUnlock()
	}
	s := r.cur.Load()
	n := len(s.bs)
	switch {
	case n == 0 && r.flaw == nilWithoutError:
		return nil, nil
	case n == 0 && r.flaw == wrapsNoBackend:
		return nil, fmt.Errorf("ref: %w", balancer.ErrNoBackend)
	case n == 0:
		return nil, balancer.ErrNoBackend
	case n == 17 && r.flaw == panicsConcurrently:
		panic("ref: seventeen")
	case n == 17 && r.flaw == nilConcurrently:
		return nil, nil
	}
	i := int((r.next.Add(1) - 1) % uint64(n))
	switch r.flaw {
	case hashes, hashIgnoresAttempt, hashRepeats, hashPerProcess:
		i = r.hashIndex(req, n)
	}
	if r.flaw == panicsOnNegative && req.Attempt < 0 {
		i = (i + req.Attempt) % n // negative for most negative attempts
	}
	if r.flaw == floodsAbandoned {
		for j := range s.bs {
			if s.states.At(j).last.Load() < s.states.At(i).last.Load() {
				i = j
			}
		}
	}
	avoid := r.flaw != ignoresAvoid &&
		!(r.flaw == avoidSmallOnly && n > 8) &&
		!(r.flaw == avoidFirstRetryOnly && req.Attempt >= 2)
	if avoid && s.bs[i].ID() == req.Avoid {
		i = (i + 1) % n
	}
	if p := s.prev; p != nil && len(p.bs) > 0 {
		if (r.flaw == removedOnRetry && req.Attempt > 0 && req.Avoid != "") ||
			(r.flaw == rarelyRemoved && rand.IntN(10000) == 0) {
			return p.bs[i%len(p.bs)], nil
		}
	}
	switch {
	case r.flaw == allocatesHalf && r.next.Load()%2 == 0,
		r.flaw == allocatesOnRetry && req.Attempt >= 2:
		keep(new([32]byte))
	}
	s.states.At(i).Inc()
	switch r.flaw {
	case allocates:
		return balancer.NewEndpoint(s.bs[i].ID(), 1), nil
	case copiesBackend:
		return s.copies[i], nil
	}
	return s.bs[i], nil
}

// hashIndex is the hash pickers' choice: the key's home, FNV-1a mod n, and
// for Attempt a the a-th backend after it, as the flaw allows.
func (r *ref) hashIndex(req balancer.Request, n int) int {
	h := uint64(14695981039346656037)
	for i := 0; i < len(req.Key); i++ {
		h = (h ^ uint64(req.Key[i])) * 1099511628211
	}
	home := int(h % uint64(n))
	a := max(req.Attempt, 0) % n
	switch r.flaw {
	case hashIgnoresAttempt:
		a = 0
	case hashRepeats:
		a %= 2
	case hashPerProcess:
		if a > 0 { // the same home, but retries stepped by a salt
			a = a * (1 + r.salt%2) % n
		}
	}
	return (home + a) % n
}

func (r *ref) Done(b balancer.Backend, res balancer.Result) {
	if r.flaw == derefsNil {
		if e, ok := b.(*balancer.Endpoint); ok {
			keep(*e)
		}
	}
	if r.flaw == allocatesOnFailure && res.Err != nil {
		keep(res.Err.Error() + "!")
	}
	st := r.cur.Load().states.Lookup(b)
	if st == nil {
		if r.flaw == panicsOnUnknown {
			panic("unknown backend")
		}
		return
	}
	st.Dec()
	if r.flaw == floodsAbandoned {
		st.last.Store(int64(res.Latency))
	}
}

func TestKitPassesSoundPicker(t *testing.T) {
	balancertest.Run(t, newRef(sound))
}

// A sound hash picker passes too, the Retries check included: it is the
// picker that check is for.
func TestKitPassesSoundHashPicker(t *testing.T) {
	balancertest.Run(t, newRef(hashes))
}

// failedChecks returns the names of the checks an error from Test reports.
func failedChecks(err error) []string {
	var failed []string
	names := balancertest.CheckNames()
	for _, line := range strings.Split(err.Error(), "\n") {
		if name, _, ok := strings.Cut(line, ": "); ok && slices.Contains(names, name) {
			failed = append(failed, name)
		}
	}
	return failed
}

// TestKitCatchesFlaws proves each check can fail: a picker broken in one way
// fails the check for that rule, and names it.
func TestKitCatchesFlaws(t *testing.T) {
	tests := []struct {
		flaw flaw
		name string
		want string // the check that must fail
	}{
		{keepsRemoved, "keeps removed backends", "Removed"},
		{allocates, "allocates per pick", "Allocs"},
		{ignoresEmpty, "ignores an empty set", "Empty"},
		{skipsValidate, "skips validation", "InvalidUpdate"},
		{retainsSlice, "retains the caller's slice", "Slice"},
		{ignoresAvoid, "ignores Avoid", "Avoid"},
		{panicsOnUnknown, "panics on an unknown Done", "DoneUnknown"},
		{nilWithoutError, "returns nil without an error", "Empty"},
		{wrapsNoBackend, "wraps ErrNoBackend", "Empty"},
		{copiesBackend, "returns copies with the same ID", "InSet"},
		{removedOnRetry, "returns removed backends on retries", "Removed"},
		{avoidSmallOnly, "honours Avoid in small sets only", "Avoid"},
		{avoidFirstRetryOnly, "ignores Avoid from attempt 2", "Avoid"},
		{panicsOnNegative, "panics on a negative attempt", "Attempt"},
		{sortsInPlace, "sorts the caller's slice", "Slice"},
		{retainsLarge, "retains large slices", "Slice"},
		{blocksPick, "Pick waits for Update", "NeverBlocks"},
		{validatesUnlocked, "validates outside the mutex", "Serialised"},
		{rereadsWeight, "reads weights twice", "WeightsOnce"},
		{derefsNil, "dereferences a nil Endpoint in Done", "DoneUnknown"},
		{floodsAbandoned, "learns from abandoned requests", "Abandoned"},
		{allocatesHalf, "allocates on every other pick", "Allocs"},
		{allocatesOnRetry, "allocates on retries", "Allocs"},
		{allocatesOnFailure, "allocates in Done for failures", "Allocs"},
		{panicsConcurrently, "panics in a goroutine of the kit", "Concurrent"},
		{nilConcurrently, "returns nil, nil in a goroutine of the kit", "Concurrent"},
		{hashIgnoresAttempt, "a hash picker whose retries all go home", "Retries"},
		{hashRepeats, "a hash picker whose retries repeat a backend", "Retries"},
		{hashPerProcess, "a hash picker whose retry order differs between instances", "Retries"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := balancertest.Test(newRef(tt.flaw))
			require.Error(t, err)
			assert.Contains(t, failedChecks(err), tt.want, "error: %v", err)
		})
	}
}

// A picker that returns a removed backend once in 10,000 picks is caught in
// most runs: the Removed check makes enough picks to see it 19 times in 20.
func TestKitCatchesRareFlaw(t *testing.T) {
	const runs = 10
	caught := 0
	for range runs {
		if balancertest.RunCheck("Removed", newRef(rarelyRemoved)) != nil {
			caught++
		}
	}
	// Expected 9.5 of 10; fewer than 7 has a chance of about 10⁻³.
	assert.GreaterOrEqual(t, caught, 7, "caught in %d runs of %d", caught, runs)
}

// A panic inside a picker fails the check with the panic's message instead
// of crashing the test binary, in the kit's own goroutine or in those it
// starts.
func TestKitReportsPanics(t *testing.T) {
	err := balancertest.Test(newRef(panicsOnUnknown))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "panic: unknown backend")

	err = balancertest.RunCheck("Concurrent", newRef(panicsConcurrently))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "panic: ref: seventeen")
	assert.Contains(t, err.Error(), "goroutine", "the stack is reported")
}

func TestKitErrorIsJoined(t *testing.T) {
	err := balancertest.Test(newRef(ignoresEmpty))
	require.Error(t, err)
	var joined interface{ Unwrap() []error }
	require.True(t, errors.As(err, &joined), "Test should join one error per failed check")
	assert.NotEmpty(t, joined.Unwrap())
}
