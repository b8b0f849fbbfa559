package health_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/rr"
)

// Fall (3 by default) failing probes in a row take a backend down; Rise
// (2) passing ones bring it back. Fewer change nothing.
func TestProbeFallAndRise(t *testing.T) {
	r := newRig(t, nil, health.Config{}, 3)
	r.probe(1, 2, errFail)
	assert.Equal(t, r.without(), r.spy.current(), "two failures are below Fall")
	r.probe(1, 1, errFail)
	assert.Equal(t, r.without(1), r.spy.current(), "the third takes it down")
	st := r.state(1)
	assert.Equal(t, health.Down, st.State)
	assert.Equal(t, health.ReasonProbe, st.Reason)
	assert.False(t, st.ProbeUp)
	assert.Equal(t, errFail, st.LastProbeErr)

	r.probe(1, 1, nil)
	assert.Equal(t, r.without(1), r.spy.current(), "one pass is below Rise")
	r.probe(1, 1, nil)
	assert.Equal(t, r.without(), r.spy.current(), "the second brings it back")

	changes := r.rec.all()
	require.Len(t, changes, 2)
	assert.Equal(t, health.Change{ID: r.bs[1].ID(), Old: health.Up, New: health.Down, Reason: health.ReasonProbe,
		Err: errFail, At: r.clock.Now()}, changes[0])
	assert.Equal(t, health.Change{ID: r.bs[1].ID(), Old: health.Down, New: health.Up, Reason: health.ReasonProbe,
		At: r.clock.Now()}, changes[1])
}

// Results alternating around the thresholds change nothing.
func TestProbeFlappingBelowThresholds(t *testing.T) {
	r := newRig(t, nil, health.Config{Rise: 3, Fall: 3}, 2)
	for range 50 {
		r.probe(0, 2, errFail)
		r.probe(0, 1, nil)
	}
	r.probe(0, 3, errFail)
	for range 50 {
		r.probe(0, 2, nil)
		r.probe(0, 1, errFail)
	}
	changes := r.rec.all()
	require.Len(t, changes, 1, "only the three failures in a row changed anything: %v", changes)
	assert.Equal(t, health.Down, changes[0].New)
	assert.Equal(t, 2, r.spy.updates())
}

// With InitialDown, backends wait for Rise passing probes. While none has
// passed, panic mode hands the inner picker all of them.
func TestInitialDown(t *testing.T) {
	r := newRig(t, nil, health.Config{InitialDown: true}, 3)
	v := r.h.View()
	assert.True(t, v.Panic)
	assert.Equal(t, health.Down, v.Backends[0].State)
	assert.Equal(t, r.without(), r.spy.current())
	r.probe(2, 2, nil)
	assert.Equal(t, []string{r.bs[2].ID()}, r.spy.current())
	assert.False(t, r.h.View().Panic)
}

// Probes that pass Rise times end a passive ejection early.
func TestProbesEndEjection(t *testing.T) {
	r := newRig(t, nil, health.Config{}, 3)
	r.fail(0, 1, errRefused)
	require.Equal(t, health.Ejected, r.state(0).State)
	r.probe(0, 1, nil)
	r.probe(0, 1, errFail) // breaks the run
	r.probe(0, 1, nil)
	assert.Equal(t, health.Ejected, r.state(0).State)
	r.probe(0, 1, nil)
	assert.Equal(t, health.Up, r.state(0).State)
	assert.Equal(t, health.ReasonProbe, r.state(0).Reason)
	assert.Equal(t, r.without(), r.spy.current())
}

// Observe for an unknown ID does nothing.
func TestObserveUnknown(t *testing.T) {
	r := newRig(t, nil, health.Config{Fall: 1}, 2)
	r.h.Observe("nobody.test:1", errFail)
	r.h.Observe("", errFail)
	r.h.Apply()
	assert.Empty(t, r.rec.all())
}

// A real server that starts failing its health check is taken down after
// Fall probes and comes back after Rise, with Start driving the probes.
func TestHTTPServerFailsAndRecovers(t *testing.T) {
	var failing atomic.Bool
	var served, failed atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if failing.Load() {
			failed.Add(1)
			http.Error(w, "sick", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer srv.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer other.Close()

	var mu sync.Mutex
	var downAt int64 = -1
	var changes []health.Change
	inner := newSpy(rr.New())
	h, err := health.New(inner, health.Config{
		Probe:    health.HTTP(health.HTTPCheck{Path: "/healthz", BodyContains: "ok"}),
		Interval: 10 * time.Millisecond,
		// Not the default min(1s, Interval): on a loaded machine a probe
		// on loopback can take more than 10 ms, and would fail.
		Timeout: time.Second,
		OnChange: func(c health.Change) {
			mu.Lock()
			defer mu.Unlock()
			if c.New == health.Down {
				downAt = failed.Load()
			}
			changes = append(changes, c)
		},
	})
	require.NoError(t, err)
	defer h.Close()
	bs := balancer.Endpoints(srv.Listener.Addr().String(), other.Listener.Addr().String())
	require.NoError(t, h.Update(bs))
	require.NoError(t, h.Start(context.Background()))

	eventually(t, func() bool { return served.Load() >= 3 }, "the server was never probed")
	failing.Store(true)
	eventually(t, func() bool { return h.View().Backends[0].State == health.Down }, "never taken down")
	assert.Equal(t, []string{bs[1].ID()}, inner.current())
	mu.Lock()
	// Fall failing probes were served before the change. More may have
	// been by the time the applier reported it, a probe every 10 ms, on a
	// loaded machine: no upper bound here (TestProbeFallAndRise holds the
	// count exactly, in virtual time).
	assert.GreaterOrEqual(t, downAt, int64(3))
	t.Logf("failing probes served when the change was reported: %d", downAt)
	mu.Unlock()
	require.ErrorIs(t, h.View().Backends[0].LastProbeErr, health.ErrProbe)

	failing.Store(false)
	eventually(t, func() bool { return h.View().Backends[0].State == health.Up }, "never back")
	assert.Equal(t, []string{bs[0].ID(), bs[1].ID()}, inner.current())
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, changes, 2)
	assert.Equal(t, health.Down, changes[0].New)
	assert.ErrorIs(t, changes[0].Err, health.ErrProbe)
	assert.Equal(t, health.Up, changes[1].New)
}

// A closed listener refuses the connection: the first refused request
// takes the backend out, through the applier Start runs and through the
// one started lazily when Start was not called.
func TestClosedListenerEjectsOnFirstRefused(t *testing.T) {
	for _, start := range []bool{true, false} {
		name := map[bool]string{true: "Start", false: "lazy"}[start]
		t.Run(name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			dead := ln.Addr().String()
			require.NoError(t, ln.Close())
			live := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			defer live.Close()

			inner := newSpy(rr.New())
			h, err := health.New(inner, health.Config{})
			require.NoError(t, err)
			defer h.Close()
			require.NoError(t, h.Update(balancer.Endpoints(dead, live.Listener.Addr().String())))
			if start {
				require.NoError(t, h.Start(context.Background()))
			}
			client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
			refused := 0
			for i := 0; i < 100 && refused == 0; i++ {
				b, err := h.Pick(balancer.Request{})
				require.NoError(t, err)
				t0 := time.Now()
				resp, err := client.Get("http://" + b.ID() + "/")
				if err == nil {
					resp.Body.Close()
				} else {
					require.ErrorIs(t, err, syscallECONNREFUSED(), "a closed port on loopback refuses")
					refused++
				}
				h.Done(b, balancer.Result{Latency: time.Since(t0), Err: err})
			}
			require.Equal(t, 1, refused)
			eventually(t, func() bool { return len(inner.current()) == 1 }, "the refused backend stayed in the set")
			assert.Equal(t, []string{live.Listener.Addr().String()}, inner.current())
			assert.Equal(t, health.ReasonRefused, h.View().Backends[0].Reason)
		})
	}
}

// A backend whose probe hangs costs its own timeout: the others are
// probed on time meanwhile. Backend A accepts connections and never
// answers; B is probed three times while A's first probe still hangs.
func TestHangingBackendDoesNotDelayOthers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var conns sync.WaitGroup
	hold := make(chan struct{})
	defer func() { ln.Close(); close(hold); conns.Wait() }()
	conns.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				<-hold // read nothing, answer nothing
				c.Close()
			})
		}
	})
	var bProbes atomic.Int64
	b := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { bProbes.Add(1) }))
	defer b.Close()

	var aReturned atomic.Bool
	httpProbe := health.HTTP(health.HTTPCheck{})
	aAddr := ln.Addr().String()
	h, err := health.New(rr.New(), health.Config{
		Probe: health.Func(func(ctx context.Context, be balancer.Backend) error {
			err := httpProbe.Probe(ctx, be)
			if be.ID() == aAddr {
				aReturned.Store(true)
			}
			return err
		}),
		Interval: 5 * time.Millisecond,
		Timeout:  time.Minute,
	})
	require.NoError(t, err)
	require.NoError(t, h.Update(balancer.Endpoints(aAddr, b.Listener.Addr().String())))
	require.NoError(t, h.Start(context.Background()))
	eventually(t, func() bool { return bProbes.Load() >= 3 }, "B was not probed while A hung")
	assert.False(t, aReturned.Load(), "A's probe cannot have returned: it has a minute")

	// Close cancels the hanging probe and waits for it.
	closed := make(chan struct{})
	go func() { _ = h.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return: the hanging probe was not cancelled")
	}
}

// A set change starts probing new backends and stops probing removed ones;
// maintenance pauses probes; Close stops everything, and no goroutine
// outlives it (synctest fails the test if one does).
func TestProbersFollowTheSet(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		count := map[string]int{}
		h, err := health.New(rr.New(), health.Config{
			Probe: health.Func(func(_ context.Context, b balancer.Backend) error {
				mu.Lock()
				count[b.ID()]++
				mu.Unlock()
				return nil
			}),
			Interval: time.Second,
			Jitter:   100 * time.Millisecond,
		})
		require.NoError(t, err)
		counts := func() map[string]int {
			mu.Lock()
			defer mu.Unlock()
			c := map[string]int{}
			for k, v := range count {
				c[k] = v
			}
			return c
		}
		a, b, c := "a.test:1", "b.test:1", "c.test:1"
		require.NoError(t, h.Update(balancer.Endpoints(a, b)))
		require.NoError(t, h.Start(context.Background()))
		time.Sleep(10*time.Second + 500*time.Millisecond)
		synctest.Wait()
		got := counts()
		// A probe at once, then one every 0.9 to 1.1 s.
		for _, id := range []string{a, b} {
			assert.GreaterOrEqual(t, got[id], 10, id)
			assert.LessOrEqual(t, got[id], 12, id)
		}

		require.NoError(t, h.Update(balancer.Endpoints(b, c)))
		require.NoError(t, h.Maintenance(b))
		time.Sleep(10 * time.Second)
		synctest.Wait()
		after := counts()
		assert.Equal(t, got[a], after[a], "a was removed: no more probes")
		assert.Equal(t, got[b], after[b], "b is in maintenance: no probes")
		assert.GreaterOrEqual(t, after[c], 9, "c was added: probed")

		require.NoError(t, h.Enable(b))
		time.Sleep(5 * time.Second)
		synctest.Wait()
		assert.Greater(t, counts()[b], after[b], "b probed again after Enable")

		require.NoError(t, h.Close())
		final := counts()
		time.Sleep(time.Minute)
		synctest.Wait()
		assert.Equal(t, final, counts(), "nothing probes after Close")
	})
}

// Cancelling Start's context stops the probers and the applier, as Close
// does; Start cannot be called twice, nor after Close.
func TestStartContextAndErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var probes atomic.Int64
		h, err := health.New(rr.New(), health.Config{
			Probe:    health.Func(func(context.Context, balancer.Backend) error { probes.Add(1); return nil }),
			Interval: time.Second,
		})
		require.NoError(t, err)
		require.NoError(t, h.Update(balancer.Endpoints("a.test:1")))
		ctx, cancel := context.WithCancel(context.Background())
		require.NoError(t, h.Start(ctx))
		assert.ErrorIs(t, h.Start(ctx), balancer.ErrStarted)
		time.Sleep(3500 * time.Millisecond)
		cancel()
		synctest.Wait()
		n := probes.Load()
		time.Sleep(time.Minute)
		synctest.Wait()
		assert.Equal(t, n, probes.Load(), "no probe after the context ended")
		assert.ErrorIs(t, h.Start(context.Background()), balancer.ErrClosed)
		require.NoError(t, h.Close())
		require.NoError(t, h.Close(), "Close is idempotent")
	})
}

// No goroutine outlives Close: probers (real HTTP probes on loopback),
// the applier Start runs, and the one a refused Done starts lazily.
func TestNoGoroutineSurvivesClose(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()
	before := runtime.NumGoroutine()

	for _, start := range []bool{true, false} {
		h, err := health.New(rr.New(), health.Config{
			Probe:    health.HTTP(health.HTTPCheck{}),
			Interval: 2 * time.Millisecond,
		})
		require.NoError(t, err)
		bs := balancer.Endpoints(srv.Listener.Addr().String(), "127.0.0.1:1", "[::1]:1")
		require.NoError(t, h.Update(bs))
		if start {
			require.NoError(t, h.Start(context.Background()))
			time.Sleep(20 * time.Millisecond)
		}
		h.Done(bs[1], balancer.Result{Err: errRefused}) // starts the lazy applier without Start
		require.NoError(t, h.Close())
	}
	// HTTP connections close asynchronously on the server side; give them
	// time, bounded.
	eventually(t, func() bool { return runtime.NumGoroutine() <= before },
		"%d goroutines before, %d after Close", before, runtime.NumGoroutine())
}

// Without Start and without Close, the lazily started applier returns by
// itself once nothing is pending or scheduled.
func TestLazyApplierStepsDown(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		inner := newSpy(rr.New())
		h, err := health.New(inner, health.Config{BaseEjectionTime: 2 * time.Second})
		require.NoError(t, err)
		bs := balancer.Endpoints("a.test:1", "b.test:1")
		require.NoError(t, h.Update(bs))
		h.Done(bs[0], balancer.Result{Err: errRefused})
		synctest.Wait()
		assert.Equal(t, []string{"b.test:1"}, inner.current(), "applied without Start")
		time.Sleep(2 * time.Second)
		synctest.Wait()
		assert.Equal(t, []string{"a.test:1", "b.test:1"}, inner.current(), "the ejection ended on time")
		// After a second with nothing to do, the lazy applier returns:
		// synctest.Test fails if a goroutine of the bubble is still blocked
		// when this function returns.
		time.Sleep(time.Second)
		synctest.Wait()
	})
}

func syscallECONNREFUSED() error { return errRefusedTarget }

var errRefusedTarget = errors.Unwrap(errors.Unwrap(errRefused))

// A ramp begun by Update or Enable runs to its end with the real clock,
// with Start and without it: the applier is woken, or started lazily,
// for the ramp's steps. (Without Start, only Done and Observe started the
// lazy applier, and a ramp begun by Update or Enable stayed at its first
// step for good.) Without Start, the lazy applier returns by itself once
// the ramps have ended: synctest fails the test if it does not.
func TestRampWithRealClock(t *testing.T) {
	for _, start := range []bool{true, false} {
		t.Run(map[bool]string{true: "Start", false: "lazy"}[start], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				h, err := health.New(rr.New(), health.Config{SlowStart: 10 * time.Second})
				require.NoError(t, err)
				if start {
					require.NoError(t, h.Start(context.Background()))
					defer h.Close()
					synctest.Wait() // the applier waits, with nothing due
				}
				bs := balancer.Endpoints("a.test:1", "b.test:1", "c.test:1")
				require.NoError(t, h.Update(bs[:2]))
				require.NoError(t, h.Update(bs)) // c is added: it ramps
				require.NoError(t, h.Drain("a.test:1"))
				require.NoError(t, h.Enable("a.test:1")) // a returns: it ramps
				ramps := func() []float64 {
					var f []float64
					for _, st := range h.View().Backends {
						f = append(f, st.Ramp)
					}
					return f
				}
				assert.Equal(t, []float64{0.1, 1, 0.1}, ramps())
				time.Sleep(5 * time.Second)
				synctest.Wait()
				r := ramps()
				assert.InDelta(t, 0.55, r[0], 0.05, "halfway")
				assert.InDelta(t, 0.55, r[2], 0.05, "halfway")
				time.Sleep(5 * time.Second)
				synctest.Wait()
				assert.Equal(t, []float64{1, 1, 1}, ramps(), "the window has passed")
				time.Sleep(2 * lazyLinger)
				synctest.Wait()
			})
		})
	}
}

// lazyLinger is how long the lazy applier waits with nothing to do before
// it returns (health's unexported constant).
const lazyLinger = time.Second
