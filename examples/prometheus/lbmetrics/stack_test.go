package lbmetrics_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/prometheus/lbmetrics"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/rr"
)

// lifecycle is an innermost picker with background work of its own: it
// counts its Starts and Closes.
type lifecycle struct {
	balancer.Balancer
	starts, closes atomic.Int64
}

func (l *lifecycle) Start(context.Context) error { l.starts.Add(1); return nil }
func (l *lifecycle) Close() error                { l.closes.Add(1); return nil }

// TestStacking checks that the decorators are transparent in both
// stackings, metrics around health and health around metrics: Start and
// Close on the outermost layer reach every layer down to the innermost
// picker (once), and health's admin methods and the metrics decorator are
// found from the top with balancer.As.
func TestStacking(t *testing.T) {
	type stack struct {
		top     balancer.Balancer
		h       *health.Balancer
		mb      *lbmetrics.Balancer
		m       *lbmetrics.Metrics
		inner   *lifecycle
		metered bool // the metrics see health's states
	}
	build := map[string]func(t *testing.T) stack{
		"metrics(health(picker))": func(t *testing.T) stack {
			m, err := lbmetrics.New(lbmetrics.Config{})
			require.NoError(t, err)
			inner := &lifecycle{Balancer: rr.New()}
			h, err := health.New(inner, health.Config{OnChange: m.HealthChanged})
			require.NoError(t, err)
			mb, err := m.Wrap(h)
			require.NoError(t, err)
			return stack{top: mb, h: h, mb: mb, m: m, inner: inner, metered: true}
		},
		"health(metrics(picker))": func(t *testing.T) stack {
			m, err := lbmetrics.New(lbmetrics.Config{})
			require.NoError(t, err)
			inner := &lifecycle{Balancer: rr.New()}
			mb, err := m.Wrap(inner)
			require.NoError(t, err)
			h, err := health.New(mb, health.Config{})
			require.NoError(t, err)
			return stack{top: h, h: h, mb: mb, m: m, inner: inner}
		},
	}
	for name, build := range build {
		t.Run(name, func(t *testing.T) {
			s := build(t)
			require.NoError(t, s.top.Update(balancer.Endpoints("a:1", "b:1")))

			starter, ok := s.top.(balancer.Starter)
			require.True(t, ok, "the top has Start")
			require.NoError(t, starter.Start(context.Background()))
			assert.Equal(t, int64(1), s.inner.starts.Load(), "Start reached the innermost picker")
			assert.ErrorIs(t, s.h.Start(context.Background()), balancer.ErrStarted, "Start reached health")

			h, ok := balancer.As[*health.Balancer](s.top)
			require.True(t, ok)
			assert.Same(t, s.h, h)
			mb, ok := balancer.As[*lbmetrics.Balancer](s.top)
			require.True(t, ok)
			assert.Same(t, s.mb, mb)
			inner, ok := balancer.As[*lifecycle](s.top)
			require.True(t, ok)
			assert.Same(t, s.inner, inner)

			// An admin method found from the top takes effect: b:1 drains.
			require.NoError(t, h.Drain("b:1"))
			for range 10 {
				got, err := s.top.Pick(balancer.Request{})
				require.NoError(t, err)
				assert.Equal(t, "a:1", got.ID())
				s.top.(balancer.Feedback).Done(got, balancer.Result{})
			}
			if s.metered {
				assert.Equal(t, 1.0, gather(t, s.m).Backend("b:1")["lbkit_backend_state/draining"])
			}
			require.NoError(t, h.Enable("b:1"))

			closer, ok := s.top.(interface{ Close() error })
			require.True(t, ok, "the top has Close")
			require.NoError(t, closer.Close())
			require.NoError(t, closer.Close())
			assert.Equal(t, int64(1), s.inner.closes.Load(), "Close reached the innermost picker, once")
			assert.ErrorIs(t, s.h.Start(context.Background()), balancer.ErrClosed, "Close reached health")
		})
	}
}

// TestStartReachesInner checks the decorator's Start alone: it starts a
// wrapped health.Balancer, and is harmless around a picker without Start.
func TestStartReachesInner(t *testing.T) {
	m, err := lbmetrics.New(lbmetrics.Config{})
	require.NoError(t, err)
	h, err := health.New(rr.New(), health.Config{})
	require.NoError(t, err)
	b, err := m.Wrap(h)
	require.NoError(t, err)
	defer b.Close()
	require.NoError(t, b.Start(context.Background()))
	assert.ErrorIs(t, h.Start(context.Background()), balancer.ErrStarted, "the inner balancer was started")
	assert.ErrorIs(t, b.Start(context.Background()), balancer.ErrStarted, "its error comes back as it is")

	plain, err := lbmetrics.New(lbmetrics.Config{})
	require.NoError(t, err)
	p := rr.New()
	pb, err := plain.Wrap(p)
	require.NoError(t, err)
	assert.NoError(t, pb.Start(context.Background()), "nothing to start")
	assert.Same(t, p, pb.Unwrap())
}

// thin is a decorator that passes everything on and has Unwrap.
type thin struct{ balancer.Balancer }

func (d thin) Unwrap() balancer.Picker { return d.Balancer }

// TestHealthStateThroughLayers checks that the state series come from a
// health.Balancer anywhere inside the wrapped balancer, found through
// Unwrap, not only one wrapped directly: a backend that starts down says
// so with another decorator between the two.
func TestHealthStateThroughLayers(t *testing.T) {
	m, err := lbmetrics.New(lbmetrics.Config{})
	require.NoError(t, err)
	h, err := health.New(rr.New(), health.Config{Clock: newFakeClock(), InitialDown: true})
	require.NoError(t, err)
	defer h.Close()
	b, err := m.Wrap(thin{h})
	require.NoError(t, err)
	require.NoError(t, b.Update(balancer.Endpoints("a:1")))
	s := gather(t, m).Backend("a:1")
	assert.Equal(t, 1.0, s["lbkit_backend_state/down"], "%v", s)
	assert.Equal(t, 0.0, s["lbkit_backend_state/up"], "%v", s)
}
