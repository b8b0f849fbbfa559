package balancer_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
)

// settle waits, at most 5 s, for the number of goroutines to come back
// to at most want, and returns what it saw last.
func settle(want int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(time.Millisecond)
	}
}

// The rules of Lifecycle, one by one, with no goroutine left behind.
func TestLifecycle(t *testing.T) {
	base := runtime.NumGoroutine()
	loop := func(runs *atomic.Int32) func(context.Context) {
		return func(ctx context.Context) {
			runs.Add(1)
			<-ctx.Done()
		}
	}

	t.Run("double start", func(t *testing.T) {
		var l balancer.Lifecycle
		var runs atomic.Int32
		require.NoError(t, l.Start(context.Background(), loop(&runs)))
		err := l.Start(context.Background(), loop(&runs))
		assert.ErrorIs(t, err, balancer.ErrStarted)
		assert.True(t, l.Started())
		assert.False(t, l.Closed())
		l.Close()
		assert.Equal(t, int32(1), runs.Load(), "one run")
		assert.ErrorIs(t, l.Start(context.Background(), loop(&runs)), balancer.ErrClosed, "after Close")
	})
	t.Run("start after close", func(t *testing.T) {
		var l balancer.Lifecycle
		var runs atomic.Int32
		l.Close() // before Start
		assert.True(t, l.Closed())
		assert.ErrorIs(t, l.Start(context.Background(), loop(&runs)), balancer.ErrClosed)
		assert.False(t, l.Started())
		l.Close()
		assert.Zero(t, runs.Load(), "nothing ran")
	})
	t.Run("close twice and concurrently", func(t *testing.T) {
		var l balancer.Lifecycle
		var runs atomic.Int32
		require.NoError(t, l.Start(context.Background(), loop(&runs)))
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(l.Close)
		}
		wg.Wait()
		l.Close()
	})
	t.Run("close waits for run", func(t *testing.T) {
		var l balancer.Lifecycle
		var ended atomic.Bool
		require.NoError(t, l.Start(context.Background(), func(ctx context.Context) {
			<-ctx.Done()
			time.Sleep(20 * time.Millisecond)
			ended.Store(true)
		}))
		l.Close()
		assert.True(t, ended.Load(), "run had returned when Close did")
	})
	t.Run("ctx ends run", func(t *testing.T) {
		var l balancer.Lifecycle
		ctx, cancel := context.WithCancel(context.Background())
		ended := make(chan struct{})
		require.NoError(t, l.Start(ctx, func(ctx context.Context) {
			<-ctx.Done()
			close(ended)
		}))
		cancel()
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			t.Fatal("run did not end with ctx")
		}
		assert.ErrorIs(t, l.Start(context.Background(), nil), balancer.ErrStarted, "started once, even though run returned")
		l.Close()
	})
	t.Run("run returns early", func(t *testing.T) {
		var l balancer.Lifecycle
		require.NoError(t, l.Start(context.Background(), func(context.Context) {}))
		l.Close()
		var nilRun balancer.Lifecycle
		require.NoError(t, nilRun.Start(context.Background(), nil))
		nilRun.Close()
	})
	t.Run("start and close race", func(t *testing.T) {
		for range 100 {
			var l balancer.Lifecycle
			var runs atomic.Int32
			var wg sync.WaitGroup
			var started atomic.Int32
			for range 3 {
				wg.Go(func() {
					if l.Start(context.Background(), loop(&runs)) == nil {
						started.Add(1)
					}
				})
			}
			wg.Go(l.Close)
			wg.Wait()
			l.Close()
			assert.LessOrEqual(t, started.Load(), int32(1), "one Start at most")
			assert.Equal(t, started.Load(), runs.Load(), "a Start that succeeded ran, and Close waited for it")
		}
	})
	assert.LessOrEqual(t, settle(base), base, "goroutines left: %d before, after Close", base)
}

// 1000 Lifecycles started and closed leave no goroutine.
func TestLifecycleNoLeak(t *testing.T) {
	base := runtime.NumGoroutine()
	ls := make([]balancer.Lifecycle, 1000)
	for i := range ls {
		require.NoError(t, ls[i].Start(context.Background(), func(ctx context.Context) { <-ctx.Done() }))
	}
	// At least the 1000 runs: a goroutine of an earlier test counted in
	// base may have ended since.
	assert.GreaterOrEqual(t, runtime.NumGoroutine(), 1000, "every run is running")
	for i := range ls {
		ls[i].Close()
	}
	n := settle(base)
	t.Logf("goroutines: %d before, %d with 1000 started, %d after Close", base, base+1000, n)
	assert.LessOrEqual(t, n, base)
}

type starterPicker struct {
	core
	start, close error
	starts       int
}

func (p *starterPicker) Start(context.Context) error { p.starts++; return p.start }
func (p *starterPicker) Close() error                { return p.close }

// StartInner and CloseInner pass the inner picker's error as it is, and
// do nothing for one without Start or Close.
func TestStartInner(t *testing.T) {
	boom := errors.New("boom")
	p := &starterPicker{start: boom, close: balancer.ErrClosed}
	assert.Same(t, boom, balancer.StartInner(context.Background(), p))
	assert.Equal(t, 1, p.starts)
	assert.Same(t, balancer.ErrClosed, balancer.CloseInner(p))
	assert.NoError(t, balancer.StartInner(context.Background(), core{}))
	assert.NoError(t, balancer.CloseInner(core{}))
}
