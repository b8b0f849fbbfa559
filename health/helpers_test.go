package health_test

import (
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/rr"
)

// fakeClock is a Clock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// spy wraps an inner picker and records every set health hands it. It can
// park the next Update until released, or make Updates fail.
type spy struct {
	balancer.Balancer

	mu      sync.Mutex
	sets    [][]string
	park    chan struct{} // if set, the next Update closes parked and waits for park to close
	parked  chan struct{}
	failure error // if set, Update fails with it
}

func newSpy(inner balancer.Balancer) *spy { return &spy{Balancer: inner} }

func (s *spy) Update(bs []balancer.Backend) error {
	s.mu.Lock()
	park, parked, failure := s.park, s.parked, s.failure
	s.park = nil
	s.mu.Unlock()
	if park != nil {
		close(parked)
		<-park
	}
	if failure != nil {
		return failure
	}
	if err := s.Balancer.Update(bs); err != nil {
		return err
	}
	ids := make([]string, len(bs))
	for i, b := range bs {
		ids[i] = b.ID()
	}
	s.mu.Lock()
	s.sets = append(s.sets, ids)
	s.mu.Unlock()
	return nil
}

func (s *spy) Done(b balancer.Backend, r balancer.Result) {
	if fb, ok := s.Balancer.(balancer.Feedback); ok {
		fb.Done(b, r)
	}
}

// current returns the IDs of the set last handed over.
func (s *spy) current() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.sets) == 0 {
		return nil
	}
	return s.sets[len(s.sets)-1]
}

// updates returns how many Updates the inner picker took.
func (s *spy) updates() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sets)
}

// parkNext makes the next Update wait; it returns a channel closed when it
// parks and a func that releases it.
func (s *spy) parkNext() (parked <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	park := make(chan struct{})
	s.park, s.parked = park, make(chan struct{})
	return s.parked, func() { close(park) }
}

// recorder collects the changes given to OnChange.
type recorder struct {
	mu      sync.Mutex
	changes []health.Change
}

func (r *recorder) add(c health.Change) {
	r.mu.Lock()
	r.changes = append(r.changes, c)
	r.mu.Unlock()
}

func (r *recorder) all() []health.Change {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.changes)
}

// ids returns n backend addresses on the documentation network.
func ids(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("192.0.2.%d:80", i+1)
	}
	return s
}

// rig is a Balancer over a spied inner picker, driven by a fake clock.
type rig struct {
	h     *health.Balancer
	spy   *spy
	clock *fakeClock
	rec   *recorder
	bs    []balancer.Backend
}

// newRig wraps inner (rr if nil) with cfg, a fake clock and a recorder, and
// gives it n backends.
func newRig(t *testing.T, inner balancer.Balancer, cfg health.Config, n int) *rig {
	t.Helper()
	if inner == nil {
		inner = rr.New(rr.WithRand(func() uint64 { return 0 }))
	}
	r := &rig{spy: newSpy(inner), clock: newFakeClock(), rec: &recorder{}}
	if cfg.Clock == nil {
		cfg.Clock = r.clock
	}
	if cfg.OnChange == nil {
		cfg.OnChange = r.rec.add
	}
	h, err := health.New(r.spy, cfg)
	require.NoError(t, err)
	r.h = h
	t.Cleanup(func() { _ = h.Close() })
	r.bs = balancer.Endpoints(ids(n)...)
	require.NoError(t, h.Update(r.bs))
	return r
}

// fail reports k failed requests to backend i, applying after each.
func (r *rig) fail(i, k int, err error) {
	for range k {
		r.h.Done(r.bs[i], balancer.Result{Latency: time.Millisecond, Err: err})
		r.h.Apply()
	}
}

// probe feeds k probe results for backend i, applying after each.
func (r *rig) probe(i, k int, err error) {
	for range k {
		r.h.Observe(r.bs[i].ID(), err)
		r.h.Apply()
	}
}

// state returns backend i's status.
func (r *rig) state(i int) health.Status {
	return r.h.View().Backends[i]
}

// without returns the IDs of r.bs except those at the given indices.
func (r *rig) without(skip ...int) []string {
	var s []string
	for i, b := range r.bs {
		if !slices.Contains(skip, i) {
			s = append(s, b.ID())
		}
	}
	return s
}

var (
	errFail = errors.New("test: 503 service unavailable")
	// errRefused is what a dial to a closed port returns on Linux.
	errRefused = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
)

// eventually polls cond every few milliseconds for up to 10 s: long
// enough for a loaded machine, and a loop that ends by itself.
func eventually(t *testing.T, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 10s: "+msg, args...)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
