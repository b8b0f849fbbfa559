package balancertest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/discovery"
)

// system is an outside system in memory: a list of addresses that can
// fail.
type system struct {
	mu     sync.Mutex
	addrs  []string
	failed bool
}

func (s *system) list() ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed {
		return nil, errors.New("system: unreachable")
	}
	return append([]string(nil), s.addrs...), nil
}

// sourceFlaw names what a broken source gets wrong.
type sourceFlaw int

const (
	soundSource       sourceFlaw = iota
	srcEmptyOnFailure            // publishes an empty set when the system fails
	srcRawIDs                    // gives the target the addresses as listed
	srcRestarts                  // a second Start starts again
	srcLeaks                     // Close does not stop the poller
	srcKeepsEmpty                // never publishes an empty listing
	srcAfterClose                // its poller outlives Close
)

// poller is a source that lists the system every few milliseconds.
type poller struct {
	sys    *system
	pub    *discovery.Publisher
	target balancer.Updater
	flaw   sourceFlaw

	mu      sync.Mutex
	started bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{}
}

func (p *poller) Start(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return fmt.Errorf("poller: %w", balancer.ErrClosed)
	case p.started && p.flaw != srcRestarts:
		return fmt.Errorf("poller: %w", balancer.ErrStarted)
	}
	p.started = true
	ctx, p.cancel = context.WithCancel(ctx)
	p.done = make(chan struct{})
	if p.flaw == srcLeaks || p.flaw == srcAfterClose {
		ctx = context.Background()
	}
	go p.run(ctx, p.done)
	return nil
}

func (p *poller) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		p.once()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *poller) once() {
	addrs, err := p.sys.list()
	if err != nil {
		if p.flaw == srcEmptyOnFailure {
			_, _ = p.pub.Publish(nil)
		}
		return
	}
	if len(addrs) == 0 && p.flaw == srcKeepsEmpty {
		return
	}
	if p.flaw == srcRawIDs {
		_ = p.target.Update(balancer.Endpoints(addrs...))
		return
	}
	eps := make([]discovery.Endpoint, len(addrs))
	for i, a := range addrs {
		eps[i] = discovery.Endpoint{Addr: a}
	}
	_, _ = p.pub.Publish(eps)
}

func (p *poller) Close() error {
	p.mu.Lock()
	p.closed = true
	cancel, done := p.cancel, p.done
	p.mu.Unlock()
	if cancel != nil && p.flaw != srcLeaks && p.flaw != srcAfterClose {
		cancel()
		<-done
	}
	return nil
}

func sourceHarness(f sourceFlaw, keeps bool) balancertest.SourceHarness {
	sys := &system{}
	var made []*poller
	return balancertest.SourceHarness{
		New: func(t testing.TB, target balancer.Updater) discovery.Source {
			pub, err := discovery.New(target, discovery.Config{})
			require.NoError(t, err)
			p := &poller{sys: sys, pub: pub, target: target, flaw: f}
			made = append(made, p)
			return p
		},
		Set: func(_ testing.TB, eps []discovery.Endpoint) {
			sys.mu.Lock()
			defer sys.mu.Unlock()
			sys.addrs = sys.addrs[:0]
			for _, e := range eps {
				sys.addrs = append(sys.addrs, e.Addr)
			}
		},
		Fail:       func(testing.TB) { sys.mu.Lock(); sys.failed = true; sys.mu.Unlock() },
		Heal:       func(testing.TB) { sys.mu.Lock(); sys.failed = false; sys.mu.Unlock() },
		KeepsEmpty: keeps,
		Settle:     2 * time.Second,
	}
}

func TestRunSourceSound(t *testing.T) {
	balancertest.RunSource(t, sourceHarness(soundSource, false))
}

// Each broken source fails the check meant for it, and the error says
// what went wrong.
func TestSourceFlaws(t *testing.T) {
	for _, tc := range []struct {
		name  string
		flaw  sourceFlaw
		keeps bool
		check string
		says  string
	}{
		{"emptyOnFailure", srcEmptyOnFailure, false, "KeepsOnFailure", "empty set"},
		{"rawIDs", srcRawIDs, false, "Canonical", "127.0.0.12:8080"},
		{"restarts", srcRestarts, false, "Lifecycle", "ErrStarted"},
		{"leaks", srcLeaks, false, "Lifecycle", "goroutines left"},
		{"keepsEmpty", srcKeepsEmpty, false, "Empty", "does not say KeepsEmpty"},
		{"saysKeepsButEmpties", soundSource, true, "Empty", "says KeepsEmpty"},
		{"afterClose", srcAfterClose, false, "Closed", "after Close returned"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := balancertest.TestSource(t, sourceHarness(tc.flaw, tc.keeps))
			require.Error(t, err)
			var hit bool
			for _, line := range strings.Split(err.Error(), "\n") {
				if strings.HasPrefix(line, tc.check+":") && strings.Contains(err.Error(), tc.says) {
					hit = true
				}
			}
			assert.True(t, hit, "want %s to fail saying %q; got:\n%v", tc.check, tc.says, err)
		})
	}
}

// A harness whose Set starts a goroutine of its own the first time it is
// called, as a client of the outside system connects at its first
// request (an etcd client, a gRPC channel), does not make a sound source
// fail Lifecycle: the goroutines counted are those the source starts.
func TestRunSourceLazySet(t *testing.T) {
	h := sourceHarness(soundSource, false)
	set := h.Set
	var once sync.Once
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	h.Set = func(tb testing.TB, eps []discovery.Endpoint) {
		once.Do(func() { go func() { <-stop }() })
		set(tb, eps)
	}
	balancertest.RunSource(t, h)
}
