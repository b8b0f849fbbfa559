package lbmetrics_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/prometheus/internal/scrape"
	"github.com/lbkit/lbkit/examples/prometheus/lbmetrics"
)

// gather collects m through a pedantic registry, which also checks that
// every series matches a described metric.
func gather(t testing.TB, m *lbmetrics.Metrics) scrape.Values {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	v, err := scrape.Gather(reg)
	require.NoError(t, err)
	return v
}

// newWrapped returns a Metrics with cfg and its decorator around inner.
func newWrapped(t testing.TB, cfg lbmetrics.Config, inner balancer.Balancer) (*lbmetrics.Metrics, *lbmetrics.Balancer) {
	t.Helper()
	m, err := lbmetrics.New(cfg)
	require.NoError(t, err)
	b, err := m.Wrap(inner)
	require.NoError(t, err)
	return m, b
}

// pickAvoiding picks with Avoid set to the other of a set of two, which
// every picker honours: a way to pick a given backend of two.
func pickAvoiding(t testing.TB, b balancer.Picker, other balancer.Backend) balancer.Backend {
	t.Helper()
	got, err := b.Pick(balancer.Request{Avoid: other.ID()})
	require.NoError(t, err)
	return got
}

// refuser is a Balancer whose Update refuses every set once failing is set.
type refuser struct {
	balancer.Balancer
	mu      sync.Mutex
	failing bool
}

var errRefused = errors.New("refuser: refused")

func (r *refuser) Update(bs []balancer.Backend) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failing {
		return errRefused
	}
	return r.Balancer.Update(bs)
}

// fakeClock is a health.Clock that moves only when told.
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
