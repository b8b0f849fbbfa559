package lbhttp_test

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
)

// recorder decorates a Balancer to check the Transport's side of the
// contract: every Pick gets its own tracked Backend, so that a test can
// tell whether each pick got exactly one Done, and with what Result.
type recorder struct {
	inner balancer.Balancer

	mu    sync.Mutex
	picks []*tracked
	reqs  []balancer.Request
	stray atomic.Int32 // Done for a Backend this recorder never returned
}

type tracked struct {
	balancer.Backend
	dones atomic.Int32

	mu  sync.Mutex
	res balancer.Result
}

func newRecorder(inner balancer.Balancer) *recorder { return &recorder{inner: inner} }

func (r *recorder) Update(bs []balancer.Backend) error { return r.inner.Update(bs) }

func (r *recorder) Pick(req balancer.Request) (balancer.Backend, error) {
	b, err := r.inner.Pick(req)
	if err != nil {
		return nil, err
	}
	t := &tracked{Backend: b}
	r.mu.Lock()
	r.picks = append(r.picks, t)
	r.reqs = append(r.reqs, req)
	r.mu.Unlock()
	return t, nil
}

func (r *recorder) Done(b balancer.Backend, res balancer.Result) {
	t, ok := b.(*tracked)
	if !ok {
		r.stray.Add(1)
		return
	}
	t.mu.Lock()
	t.res = res
	t.mu.Unlock()
	t.dones.Add(1)
	if fb, ok := r.inner.(balancer.Feedback); ok {
		fb.Done(t.Backend, res)
	}
}

// snapshot returns the picks and requests so far.
func (r *recorder) snapshot() ([]*tracked, []balancer.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*tracked(nil), r.picks...), append([]balancer.Request(nil), r.reqs...)
}

// waitDone waits, at most five seconds, until every pick so far has had a
// Done (a proxy reports Done when it has read the body, which may be just
// after its client has the whole response), then asserts exactly one each.
func (r *recorder) waitDone(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		picks, _ := r.snapshot()
		missing := 0
		for _, p := range picks {
			if p.dones.Load() == 0 {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			require.Zero(t, missing, "picks without Done after 5s (of %d)", len(picks))
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	picks, _ := r.snapshot()
	for i, p := range picks {
		require.EqualValues(t, 1, p.dones.Load(), "pick %d (%s) got %d Done calls", i, p.ID(), p.dones.Load())
	}
	assert.Zero(t, r.stray.Load(), "Done for backends never picked")
}

func (p *tracked) result() balancer.Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.res
}

// scripted is a picker for unit tests: it returns its backends in order,
// the first whose ID is not req.Avoid, so a test knows which is tried first.
type scripted struct{ bs []balancer.Backend }

func (s *scripted) Update(bs []balancer.Backend) error {
	s.bs = append([]balancer.Backend(nil), bs...)
	return nil
}

func (s *scripted) Pick(req balancer.Request) (balancer.Backend, error) {
	for _, b := range s.bs {
		if b.ID() != req.Avoid {
			return b, nil
		}
	}
	if len(s.bs) > 0 {
		return s.bs[0], nil
	}
	return nil, balancer.ErrNoBackend
}

// refusedAddr returns a loopback address nothing listens on: a port that
// was just bound and released. Connecting to it is refused at once.
func refusedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// hostOf returns the host:port of an httptest server.
func hostOf(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

// roundTripFunc is a base RoundTripper made of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
