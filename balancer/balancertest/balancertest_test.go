package balancertest_test

import (
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
)

// flaw is one way to break the reference picker.
type flaw int

const (
	sound           flaw = iota
	keepsRemoved         // Update adds to the set instead of replacing it
	allocates            // Pick returns a fresh copy of the backend
	ignoresEmpty         // Update with an empty set keeps the old one
	skipsValidate        // Update accepts anything
	retainsSlice         // Update keeps the caller's slice
	ignoresAvoid         // Pick never steps past Request.Avoid
	panicsOnUnknown      // Done panics for a backend it does not know
	nilWithoutError      // Pick returns (nil, nil) on an empty set
)

// ref is a small correct picker (round robin with in-flight counting) that a
// flaw can break in one place.
type ref struct {
	flaw flaw
	mu   sync.Mutex
	cur  atomic.Pointer[refSnap]
	next atomic.Uint64
	reg  balancer.Registry[balancer.InFlight]
}

type refSnap struct {
	bs     []balancer.Backend
	states balancer.States[balancer.InFlight]
}

func newRef(f flaw) func() balancer.Balancer {
	return func() balancer.Balancer {
		r := &ref{flaw: f}
		r.cur.Store(&refSnap{})
		return r
	}
}

func (r *ref) Update(bs []balancer.Backend) error {
	if r.flaw != skipsValidate {
		if err := balancer.Validate(bs); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
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
	}
	if r.flaw == skipsValidate {
		// Keep only what Registry can hold, so the flaw is the lack of
		// validation and not a crash.
		next = next[:0:0]
		for _, b := range bs {
			if b != nil && b.ID() != "" {
				next = append(next, b)
			}
		}
	}
	r.cur.Store(&refSnap{bs: next, states: r.reg.Sync(next)})
	return nil
}

func (r *ref) Pick(req balancer.Request) (balancer.Backend, error) {
	s := r.cur.Load()
	if len(s.bs) == 0 {
		if r.flaw == nilWithoutError {
			return nil, nil
		}
		return nil, balancer.ErrNoBackend
	}
	i := int((r.next.Add(1) - 1) % uint64(len(s.bs)))
	if r.flaw != ignoresAvoid && s.bs[i].ID() == req.Avoid {
		i = (i + 1) % len(s.bs)
	}
	s.states.At(i).Inc()
	if r.flaw == allocates {
		return balancer.NewEndpoint(s.bs[i].ID(), 1), nil
	}
	return s.bs[i], nil
}

func (r *ref) Done(b balancer.Backend, _ balancer.Result) {
	st := r.cur.Load().states.Lookup(b)
	if st == nil {
		if r.flaw == panicsOnUnknown {
			panic("unknown backend")
		}
		return
	}
	st.Dec()
}

func TestKitPassesSoundPicker(t *testing.T) {
	balancertest.Run(t, newRef(sound))
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
		{retainsSlice, "retains the caller's slice", "NoRetain"},
		{ignoresAvoid, "ignores Avoid", "Avoid"},
		{panicsOnUnknown, "panics on an unknown Done", "DoneUnknown"},
		{nilWithoutError, "returns nil without an error", "Empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := balancertest.Test(newRef(tt.flaw))
			require.Error(t, err)
			var failed []string
			for _, line := range strings.Split(err.Error(), "\n") {
				if name, _, ok := strings.Cut(line, ": "); ok && !strings.HasPrefix(line, "\t") && !strings.Contains(name, " ") {
					failed = append(failed, name)
				}
			}
			assert.Contains(t, failed, tt.want, "error: %v", err)
		})
	}
}

// A panic inside a picker fails the check with the panic's message instead
// of crashing the test binary.
func TestKitReportsPanics(t *testing.T) {
	err := balancertest.Test(newRef(panicsOnUnknown))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "panic: unknown backend")
}

func TestKitErrorIsJoined(t *testing.T) {
	err := balancertest.Test(newRef(ignoresEmpty))
	require.Error(t, err)
	var joined interface{ Unwrap() []error }
	require.True(t, errors.As(err, &joined), "Test should join one error per failed check")
	assert.NotEmpty(t, joined.Unwrap())
}
