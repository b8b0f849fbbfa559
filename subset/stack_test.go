package subset_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/locality"
	"github.com/lbkit/lbkit/subset"
	"github.com/lbkit/lbkit/wrr"
)

// stack is subset ▶ health ▶ locality ▶ wrr.Reported, one Reported per
// zone, with the Reporteds made kept for the test.
type stack struct {
	top   *subset.Balancer
	h     *health.Balancer
	l     *locality.Balancer
	inner []*wrr.Reported
}

func newStack(t *testing.T) *stack {
	t.Helper()
	s := &stack{}
	l, err := locality.New(func() balancer.Balancer {
		p := wrr.NewReported()
		s.inner = append(s.inner, p)
		return p
	}, locality.Config{})
	require.NoError(t, err)
	h, err := health.New(l, health.Config{})
	require.NoError(t, err)
	top, err := subset.New(h, subset.Config{Size: 4, ClientID: "c"})
	require.NoError(t, err)
	s.top, s.h, s.l = top, h, l
	bs := make([]balancer.Backend, 6)
	for i := range bs {
		zone := []string{"a", "b"}[i%2]
		bs[i] = balancer.NewEndpoint("10.0.0."+string(rune('1'+i))+":80", 1).At(balancer.Locality{Zone: zone})
	}
	require.NoError(t, top.Update(bs))
	return s
}

// waitGoroutines waits, at most 5 s, for the goroutines to come back to
// at most want, and returns the number it saw last.
func waitGoroutines(want int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= want || time.Now().After(deadline) {
			return n
		}
		time.Sleep(time.Millisecond)
	}
}

// A double Start of a stack says balancer.ErrStarted whichever layer
// notices it, and Start after Close balancer.ErrClosed, so that a caller
// can tell them with errors.Is: subset ▶ health ▶ locality ▶ wrr.Reported
// started twice from the top (health refuses), an inner layer started on
// its own and then the stack (the Reporteds refuse, through locality's
// joined errors and health's wrapping), and locality alone. Close from the
// top leaves no goroutine.
func TestStackStartTwice(t *testing.T) {
	base := runtime.NumGoroutine()

	t.Run("from the top", func(t *testing.T) {
		s := newStack(t)
		require.NoError(t, s.top.Start(context.Background()))
		require.Len(t, s.inner, 2, "a Reported per zone")
		err := s.top.Start(context.Background())
		require.ErrorIs(t, err, balancer.ErrStarted)
		t.Log(err)
		for i, p := range s.inner {
			assert.ErrorIs(t, p.Start(context.Background()), balancer.ErrStarted, "Start reached Reported %d", i)
		}
		require.NoError(t, s.top.Close())
		err = s.top.Start(context.Background())
		require.ErrorIs(t, err, balancer.ErrClosed)
		t.Log(err)
		for i, p := range s.inner {
			assert.ErrorIs(t, p.Start(context.Background()), balancer.ErrClosed, "Close reached Reported %d", i)
		}
	})
	t.Run("an inner layer first", func(t *testing.T) {
		s := newStack(t)
		require.NoError(t, s.inner[0].Start(context.Background()))
		err := s.top.Start(context.Background())
		require.ErrorIs(t, err, balancer.ErrStarted)
		t.Log(err)
		require.NoError(t, s.top.Close())
	})
	t.Run("locality", func(t *testing.T) {
		s := newStack(t)
		require.NoError(t, s.l.Start(context.Background()))
		err := s.l.Start(context.Background())
		require.ErrorIs(t, err, balancer.ErrStarted)
		t.Log(err)
		require.NoError(t, s.l.Close())
		require.ErrorIs(t, s.l.Start(context.Background()), balancer.ErrClosed)
		require.NoError(t, s.top.Close())
	})
	n := waitGoroutines(base)
	t.Logf("goroutines: %d before, %d after Close", base, n)
	assert.LessOrEqual(t, n, base)
}
