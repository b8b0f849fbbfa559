package health_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/rr"
)

// lifecycle is an inner picker with background work of its own: it
// counts its Starts and Closes, and fails its Start with startErr.
type lifecycle struct {
	balancer.Balancer
	starts, closes atomic.Int64
	ctx            atomic.Pointer[context.Context]
	startErr       error
}

func (l *lifecycle) Start(ctx context.Context) error {
	l.starts.Add(1)
	l.ctx.Store(&ctx)
	return l.startErr
}

func (l *lifecycle) Close() error {
	l.closes.Add(1)
	return nil
}

// TestDecoratorLifecycle checks that health is transparent, as balancer's
// doc says every decorator is: its Start starts the inner picker with the
// same context, its Close closes it once however often Close is called,
// an inner Start's error is returned, and Unwrap leads to the inner
// picker, so balancer.As finds it.
func TestDecoratorLifecycle(t *testing.T) {
	t.Run("start and close", func(t *testing.T) {
		inner := &lifecycle{Balancer: rr.New()}
		h, err := health.New(inner, health.Config{})
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		require.NoError(t, h.Start(ctx))
		assert.Equal(t, int64(1), inner.starts.Load(), "Start reaches the inner picker")
		assert.Equal(t, ctx, *inner.ctx.Load(), "with Start's context")
		assert.ErrorIs(t, h.Start(ctx), balancer.ErrStarted)
		assert.Equal(t, int64(1), inner.starts.Load(), "a refused Start does not reach it")

		require.NoError(t, h.Close())
		require.NoError(t, h.Close())
		assert.Equal(t, int64(1), inner.closes.Load(), "Close reaches the inner picker once")
		assert.ErrorIs(t, h.Start(ctx), balancer.ErrClosed)
		assert.Equal(t, int64(1), inner.starts.Load(), "Start after Close does not reach it")
	})
	t.Run("close without start", func(t *testing.T) {
		inner := &lifecycle{Balancer: rr.New()}
		h, err := health.New(inner, health.Config{})
		require.NoError(t, err)
		require.NoError(t, h.Close())
		assert.Zero(t, inner.starts.Load())
		assert.Equal(t, int64(1), inner.closes.Load())
	})
	t.Run("inner start fails", func(t *testing.T) {
		errBoom := errors.New("boom")
		inner := &lifecycle{Balancer: rr.New(), startErr: errBoom}
		h, err := health.New(inner, health.Config{})
		require.NoError(t, err)
		err = h.Start(context.Background())
		require.ErrorIs(t, err, errBoom)
		assert.EqualError(t, err, "health: start: the inner picker: boom")
		require.NoError(t, h.Close())
		assert.Equal(t, int64(1), inner.closes.Load())
	})
	t.Run("unwrap", func(t *testing.T) {
		inner := &lifecycle{Balancer: rr.New()}
		h, err := health.New(inner, health.Config{})
		require.NoError(t, err)
		defer h.Close()
		assert.Same(t, inner, h.Unwrap())
		got, ok := balancer.As[*lifecycle](h)
		require.True(t, ok)
		assert.Same(t, inner, got)
		self, ok := balancer.As[*health.Balancer](h)
		require.True(t, ok)
		assert.Same(t, h, self)
		_, ok = balancer.As[*rr.Picker](h)
		assert.False(t, ok, "rr is embedded in lifecycle, not a layer: lifecycle has no Unwrap")
	})
	t.Run("nothing to start or close", func(t *testing.T) {
		h, err := health.New(rr.New(), health.Config{})
		require.NoError(t, err)
		require.NoError(t, h.Start(context.Background()))
		require.NoError(t, h.Close())
	})
}
