package lbmetrics_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/prometheus/lbmetrics"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/iphash"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/rr"
)

// Each shape of Result lands in its own metric, as balancer.Result defines
// them.
func TestDoneResults(t *testing.T) {
	failure := errors.New("backend answered 503")
	tests := []struct {
		name                string
		res                 balancer.Result
		failures, abandoned float64
		samples             float64
		sumSeconds          float64
	}{
		{"success", balancer.Result{Latency: 20 * time.Millisecond}, 0, 0, 1, 0.02},
		{"failure", balancer.Result{Latency: 5 * time.Millisecond, Err: failure}, 1, 0, 1, 0.005},
		{"timeout", balancer.Result{Latency: time.Second, Err: context.DeadlineExceeded}, 1, 0, 1, 1},
		{"failure, not measured", balancer.Result{Err: failure}, 1, 0, 0, 0},
		{"abandoned", balancer.Result{Err: balancer.ErrAbandoned}, 0, 1, 0, 0},
		{"cancelled with latency", balancer.Result{Latency: time.Second, Err: fmt.Errorf("client went away: %w", context.Canceled)}, 0, 1, 0, 0},
		{"not measured", balancer.Result{}, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, b := newWrapped(t, lbmetrics.Config{}, rr.New())
			bs := balancer.Endpoints("a:1", "b:1")
			require.NoError(t, b.Update(bs))
			got := pickAvoiding(t, b, bs[1])
			require.Same(t, bs[0], got)

			before := gather(t, m).Backend("a:1")
			assert.Equal(t, 1.0, before["lbkit_picks_total"])
			assert.Equal(t, 1.0, before["lbkit_requests_in_flight"])

			b.Done(got, tt.res)
			after := gather(t, m)
			a := after.Backend("a:1")
			assert.Equal(t, 1.0, a["lbkit_picks_total"])
			assert.Equal(t, 0.0, a["lbkit_requests_in_flight"])
			assert.Equal(t, tt.failures, a["lbkit_failures_total"])
			assert.Equal(t, tt.abandoned, a["lbkit_abandoned_total"])
			assert.Equal(t, tt.samples, a["lbkit_request_duration_seconds_count"])
			assert.InDelta(t, tt.sumSeconds, a["lbkit_request_duration_seconds_sum"], 1e-12)
			// The other backend saw nothing, and has its series at zero.
			assert.Equal(t, map[string]float64{
				"lbkit_picks_total": 0, "lbkit_requests_in_flight": 0, "lbkit_failures_total": 0,
				"lbkit_abandoned_total": 0, "lbkit_request_duration_seconds_count": 0, "lbkit_request_duration_seconds_sum": 0,
			}, after.Backend("b:1"))
		})
	}
}

// In-flight counts what was picked and not yet done; picks count retries
// as picks of their own.
func TestInFlight(t *testing.T) {
	m, b := newWrapped(t, lbmetrics.Config{}, leastconn.New())
	bs := balancer.Endpoints("a:1", "b:1", "c:1")
	require.NoError(t, b.Update(bs))
	var held []balancer.Backend
	for range 30 {
		got, err := b.Pick(balancer.Request{})
		require.NoError(t, err)
		held = append(held, got)
	}
	s := gather(t, m)
	assert.Equal(t, 30.0, s.Sum("lbkit_requests_in_flight"))
	assert.Equal(t, 30.0, s.Sum("lbkit_picks_total"))
	for _, be := range bs {
		// leastconn spreads requests in flight evenly: 10 each.
		assert.Equal(t, 10.0, s.Backend(be.ID())["lbkit_requests_in_flight"], be.ID())
	}
	for i, h := range held {
		b.Done(h, balancer.Result{Latency: time.Duration(i+1) * time.Millisecond})
	}
	s = gather(t, m)
	assert.Equal(t, 0.0, s.Sum("lbkit_requests_in_flight"))
	assert.Equal(t, 30.0, s.Sum("lbkit_request_duration_seconds_count"))
	assert.InDelta(t, 0.465, s.Sum("lbkit_request_duration_seconds_sum"), 1e-9) // 1+2+...+30 ms

	// A second Done for the same pick, or a Done for a pick never made,
	// cannot take the gauge below zero.
	b.Done(bs[0], balancer.Result{})
	assert.Equal(t, 0.0, gather(t, m).Backend("a:1")["lbkit_requests_in_flight"])
}

func TestPickErrors(t *testing.T) {
	m, b := newWrapped(t, lbmetrics.Config{PickSampling: 1}, iphash.New())
	_, err := b.Pick(balancer.Request{Key: "192.0.2.1"})
	require.ErrorIs(t, err, balancer.ErrNoBackend)
	require.NoError(t, b.Update(balancer.Endpoints("a:1", "b:1")))
	_, err = b.Pick(balancer.Request{Key: "not an address"})
	require.ErrorIs(t, err, balancer.ErrBadKey)
	_, err = b.Pick(balancer.Request{Key: "also not"})
	require.ErrorIs(t, err, balancer.ErrBadKey)
	got, err := b.Pick(balancer.Request{Key: "192.0.2.1"})
	require.NoError(t, err)
	b.Done(got, balancer.Result{})

	s := gather(t, m)
	assert.Equal(t, 1.0, s[`lbkit_pick_errors_total{reason="no_backend"}`])
	assert.Equal(t, 2.0, s[`lbkit_pick_errors_total{reason="bad_key"}`])
	assert.Equal(t, 0.0, s[`lbkit_pick_errors_total{reason="other"}`])
	assert.Equal(t, 1.0, s.Sum("lbkit_picks_total"))
	// Every Pick is timed with PickSampling 1, failed ones included.
	assert.Equal(t, 4.0, s["lbkit_pick_duration_seconds_count{}"])
	assert.Greater(t, s["lbkit_pick_duration_seconds_sum{}"], 0.0)
}

// With the default sampling, about one Pick in DefaultPickSampling is
// timed; every Pick is counted.
func TestPickSampling(t *testing.T) {
	const picks = 16000
	m, b := newWrapped(t, lbmetrics.Config{}, rr.New())
	require.NoError(t, b.Update(balancer.Endpoints("a:1", "b:1")))
	for range picks {
		got, err := b.Pick(balancer.Request{})
		require.NoError(t, err)
		b.Done(got, balancer.Result{})
	}
	s := gather(t, m)
	assert.Equal(t, float64(picks), s.Sum("lbkit_picks_total"))
	// Binomial(16000, 1/8): mean 2000, standard deviation about 42; the
	// bounds are 7 deviations away.
	timed := s["lbkit_pick_duration_seconds_count{}"]
	assert.InDelta(t, picks/lbmetrics.DefaultPickSampling, timed, 300)
}

// A removed backend keeps its series while requests to it are in flight,
// and loses them at the first scrape (or Update) that finds it idle after
// an earlier one has seen it removed.
func TestRemovedBackend(t *testing.T) {
	m, b := newWrapped(t, lbmetrics.Config{}, rr.New())
	bs := balancer.Endpoints("a:1", "b:1", "c:1")
	require.NoError(t, b.Update(bs[:2]))
	held := pickAvoiding(t, b, bs[1]) // a:1, kept in flight
	require.Same(t, bs[0], held)
	done := pickAvoiding(t, b, bs[0]) // b:1, done at once
	b.Done(done, balancer.Result{Latency: time.Millisecond})

	require.NoError(t, b.Update(bs[2:])) // a and b leave, c joins
	s := gather(t, m)
	assert.Equal(t, []string{"a:1", "b:1", "c:1"}, s.Backends(), "kept for a scrape")
	assert.Equal(t, 1.0, s.Backend("a:1")["lbkit_requests_in_flight"])

	s = gather(t, m)
	assert.Equal(t, []string{"a:1", "c:1"}, s.Backends(), "b:1 drained: gone at the second scrape")

	b.Done(held, balancer.Result{Latency: 2 * time.Millisecond, Err: errors.New("late failure")})
	a := gather(t, m).Backend("a:1")
	assert.Empty(t, a, "a:1 drained after a scrape had found it removed: gone")

	// A backend that comes back after its series went starts afresh.
	require.NoError(t, b.Update(bs))
	assert.Equal(t, 0.0, gather(t, m).Backend("a:1")["lbkit_picks_total"])
}

// The late Done of a removed backend still lands in its series, and a
// backend back before its series went keeps counting.
func TestRemovedBackendCounts(t *testing.T) {
	m, b := newWrapped(t, lbmetrics.Config{}, rr.New())
	bs := balancer.Endpoints("a:1", "b:1")
	require.NoError(t, b.Update(bs))
	held := pickAvoiding(t, b, bs[1])
	require.NoError(t, b.Update(bs[1:]))
	b.Done(held, balancer.Result{Latency: time.Millisecond, Err: errors.New("boom")})
	a := gather(t, m).Backend("a:1")
	assert.Equal(t, 1.0, a["lbkit_failures_total"])
	assert.Equal(t, 0.0, a["lbkit_requests_in_flight"])

	require.NoError(t, b.Update(bs)) // back before its series were deleted
	pickAvoiding(t, b, bs[1])
	assert.Equal(t, 2.0, gather(t, m).Backend("a:1")["lbkit_picks_total"])
}

// A refused Update, by validation or by the wrapped balancer, leaves the
// previous set and series, and exports nothing for the refused backends.
func TestRefusedUpdate(t *testing.T) {
	inner := &refuser{Balancer: rr.New()}
	m, b := newWrapped(t, lbmetrics.Config{}, inner)
	bs := balancer.Endpoints("a:1", "b:1")
	require.NoError(t, b.Update(bs))

	tests := []struct {
		name string
		set  []balancer.Backend
		want error
	}{
		{"duplicate", []balancer.Backend{bs[0], balancer.NewEndpoint("a:1", 1)}, balancer.ErrDuplicateID},
		{"nil", []balancer.Backend{bs[0], nil}, balancer.ErrNilBackend},
		{"not UTF-8", []balancer.Backend{balancer.NewEndpoint("x\xff:1", 1)}, nil},
		{"refused inside", balancer.Endpoints("new:1"), errRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			inner.mu.Lock()
			inner.failing = tt.want == errRefused
			inner.mu.Unlock()
			err := b.Update(tt.set)
			require.Error(t, err)
			if tt.want != nil {
				assert.ErrorIs(t, err, tt.want)
			}
			assert.Equal(t, []string{"a:1", "b:1"}, gather(t, m).Backends())
			got, err := b.Pick(balancer.Request{})
			require.NoError(t, err)
			assert.Contains(t, []string{"a:1", "b:1"}, got.ID())
			b.Done(got, balancer.Result{})
		})
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  lbmetrics.Config
	}{
		{"namespace", lbmetrics.Config{Namespace: "lb\xffkit"}},
		{"const label backend", lbmetrics.Config{ConstLabels: prometheus.Labels{"backend": "x"}}},
		{"const label reason", lbmetrics.Config{ConstLabels: prometheus.Labels{"reason": "x"}}},
		{"const label name", lbmetrics.Config{ConstLabels: prometheus.Labels{"up\xffstream": "x"}}},
		{"const label name reserved", lbmetrics.Config{ConstLabels: prometheus.Labels{"__upstream": "x"}}},
		{"const label value", lbmetrics.Config{ConstLabels: prometheus.Labels{"upstream": "\xff"}}},
		{"latency buckets empty", lbmetrics.Config{LatencyBuckets: []float64{}}},
		{"latency buckets order", lbmetrics.Config{LatencyBuckets: []float64{0.1, 0.1}}},
		{"pick buckets NaN", lbmetrics.Config{PickBuckets: []float64{1e-6, math.NaN()}}},
		{"pick sampling", lbmetrics.Config{PickSampling: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := lbmetrics.New(tt.cfg)
			require.ErrorIs(t, err, balancer.ErrBadOption)
			assert.Nil(t, m)
			assert.Regexp(t, "^lbmetrics: ", err.Error())
		})
	}
	m, err := lbmetrics.New(lbmetrics.Config{Namespace: "api", ConstLabels: prometheus.Labels{"upstream": "orders"}})
	require.NoError(t, err)
	b, err := m.Wrap(rr.New())
	require.NoError(t, err)
	require.NoError(t, b.Update(balancer.Endpoints("a:1")))
	assert.Contains(t, gather(t, m), `api_picks_total{backend="a:1",upstream="orders"}`)
}

func TestWrapErrors(t *testing.T) {
	m, err := lbmetrics.New(lbmetrics.Config{})
	require.NoError(t, err)
	_, err = m.Wrap(nil)
	assert.Error(t, err)
	var nilPicker *rr.Picker
	_, err = m.Wrap(nilPicker)
	assert.Error(t, err)
	_, err = m.Wrap(rr.New())
	require.NoError(t, err)
	_, err = m.Wrap(rr.New())
	assert.ErrorContains(t, err, "already wraps")
}

// Two Metrics of the same names clash in one registry unless ConstLabels
// tell them apart.
func TestRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := lbmetrics.New(lbmetrics.Config{})
	require.NoError(t, err)
	b, err := lbmetrics.New(lbmetrics.Config{})
	require.NoError(t, err)
	require.NoError(t, reg.Register(a))
	var are prometheus.AlreadyRegisteredError
	assert.ErrorAs(t, reg.Register(b), &are)

	reg = prometheus.NewRegistry()
	for _, up := range []string{"orders", "users"} {
		m, err := lbmetrics.New(lbmetrics.Config{ConstLabels: prometheus.Labels{"upstream": up}})
		require.NoError(t, err)
		require.NoError(t, reg.Register(m))
	}
}

// Health changes set the state series, through HealthChanged as they
// happen and from health's View at Update and at every scrape.
func TestHealthState(t *testing.T) {
	clock := newFakeClock()
	var m *lbmetrics.Metrics
	m, err := lbmetrics.New(lbmetrics.Config{})
	require.NoError(t, err)
	h, err := health.New(rr.New(), health.Config{
		Clock: clock, ConsecutiveFailures: 2, MaxEjectedPercent: 100, OnChange: m.HealthChanged,
	})
	require.NoError(t, err)
	defer h.Close()
	b, err := m.Wrap(h)
	require.NoError(t, err)
	bs := balancer.Endpoints("a:1", "b:1", "c:1")
	require.NoError(t, b.Update(bs))

	state := func(id string) (string, map[string]float64) {
		t.Helper()
		s := gather(t, m).Backend(id)
		cur, ones := "", 0
		for _, st := range []string{"up", "ejected", "down", "draining", "maintenance"} {
			v, ok := s["lbkit_backend_state/"+st]
			require.True(t, ok, "%s has no %s series", id, st)
			if v == 1 {
				cur, ones = st, ones+1
			}
		}
		require.Equal(t, 1, ones, "%s: exactly one state at 1: %v", id, s)
		return cur, s
	}
	for _, be := range bs {
		cur, _ := state(be.ID())
		assert.Equal(t, "up", cur)
	}
	assert.Equal(t, 0.0, gather(t, m)["lbkit_health_panic{}"])

	require.NoError(t, h.Drain("b:1"))
	cur, s := state("b:1")
	assert.Equal(t, "draining", cur)
	assert.Equal(t, 1.0, s["lbkit_backend_state_changes_total/draining"])

	// Two failures in a row eject a backend once health applies them.
	eject := func(id string) {
		t.Helper()
		for range 2 {
			got := pickUntil(t, b, id)
			b.Done(got, balancer.Result{Latency: time.Millisecond, Err: errors.New("503")})
		}
		h.Apply()
	}
	eject("c:1")
	cur, s = state("c:1")
	assert.Equal(t, "ejected", cur)
	assert.Equal(t, 1.0, s["lbkit_backend_state_changes_total/ejected"])
	assert.Equal(t, 2.0, s["lbkit_failures_total"])

	// a:1 too: nothing is eligible, so health hands the picker every
	// backend not drained (panic mode).
	eject("a:1")
	cur, _ = state("a:1")
	assert.Equal(t, "ejected", cur)
	assert.Equal(t, 1.0, gather(t, m)["lbkit_health_panic{}"])

	require.NoError(t, h.Enable("b:1"))
	cur, _ = state("b:1")
	assert.Equal(t, "up", cur)
	assert.Equal(t, 0.0, gather(t, m)["lbkit_health_panic{}"])
}

// pickUntil picks until it gets the backend with the given ID, finishing
// the other picks: a bounded loop over a round robin.
func pickUntil(t testing.TB, b balancer.Balancer, id string) balancer.Backend {
	t.Helper()
	fb := b.(balancer.Feedback)
	for range 100 {
		got, err := b.Pick(balancer.Request{})
		require.NoError(t, err)
		if got.ID() == id {
			return got
		}
		fb.Done(got, balancer.Result{Latency: time.Millisecond})
	}
	t.Fatalf("%s not picked in 100 picks", id)
	return nil
}

// A backend that starts down (InitialDown) says so without any change
// being reported: its state comes from health's View.
func TestHealthInitialState(t *testing.T) {
	m, err := lbmetrics.New(lbmetrics.Config{})
	require.NoError(t, err)
	h, err := health.New(rr.New(), health.Config{Clock: newFakeClock(), InitialDown: true, OnChange: m.HealthChanged})
	require.NoError(t, err)
	defer h.Close()
	b, err := m.Wrap(h)
	require.NoError(t, err)
	require.NoError(t, b.Update(balancer.Endpoints("a:1")))
	s := gather(t, m).Backend("a:1")
	assert.Equal(t, 1.0, s["lbkit_backend_state/down"])
	assert.Equal(t, 0.0, s["lbkit_backend_state/up"])
	_, counted := s["lbkit_backend_state_changes_total/down"]
	assert.False(t, counted, "no change happened")
}

// Without health, no state series is exported.
func TestNoHealthNoState(t *testing.T) {
	m, b := newWrapped(t, lbmetrics.Config{}, rr.New())
	require.NoError(t, b.Update(balancer.Endpoints("a:1")))
	m.HealthChanged(health.Change{ID: "unknown:1", New: health.Ejected})
	s := gather(t, m)
	for k := range s {
		assert.NotContains(t, k, "backend_state")
		assert.NotContains(t, k, "health_panic")
	}
}

// Pick and Done through the decorator allocate nothing, timed or not.
func TestAllocs(t *testing.T) {
	for _, sampling := range []int{1, 0} {
		t.Run(fmt.Sprintf("sampling=%d", sampling), func(t *testing.T) {
			m, b := newWrapped(t, lbmetrics.Config{PickSampling: sampling}, leastconn.New())
			require.NoError(t, b.Update(balancer.Endpoints("a:1", "b:1", "c:1")))
			fail := errors.New("503")
			results := []balancer.Result{{Latency: time.Millisecond}, {Latency: time.Millisecond, Err: fail}, {Err: balancer.ErrAbandoned}, {}}
			// Each run makes a pick with every shape of Result, so that one
			// allocating shape shows as at least one allocation per run
			// (AllocsPerRun rounds its mean down).
			i := 0
			allocs := testing.AllocsPerRun(1000, func() {
				for _, res := range results {
					got, err := b.Pick(balancer.Request{Key: "192.0.2.1", Attempt: i % 3, Avoid: "a:1"})
					if err == nil {
						b.Done(got, res)
					}
					i++
				}
			})
			assert.Zero(t, allocs)
			assert.Equal(t, float64(i), gather(t, m).Sum("lbkit_picks_total"))
		})
	}
}

// Pick, Done, Update, scrapes and health changes all at once: no race (run
// with -race), no deadlock, and the books balance at the end.
func TestConcurrent(t *testing.T) {
	m, err := lbmetrics.New(lbmetrics.Config{PickSampling: 1})
	require.NoError(t, err)
	h, err := health.New(leastconn.New(), health.Config{OnChange: m.HealthChanged, NoEjection: true})
	require.NoError(t, err)
	defer h.Close()
	b, err := m.Wrap(h)
	require.NoError(t, err)
	all := balancer.Endpoints("a:1", "b:1", "c:1", "d:1", "e:1")
	sets := [][]balancer.Backend{all, all[:3], all[2:], all[1:4]}
	require.NoError(t, b.Update(all))

	const pickers, picks = 4, 3000
	var picked atomic.Int64
	var wg sync.WaitGroup
	for g := range pickers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range picks {
				got, err := b.Pick(balancer.Request{Attempt: i % 2})
				if err != nil {
					continue
				}
				picked.Add(1)
				b.Done(got, balancer.Result{Latency: time.Duration(g+1) * time.Millisecond})
			}
		}()
	}
	// Beside the pickers, until they finish: each of f runs in a loop of
	// its own.
	stop := make(chan struct{})
	var side sync.WaitGroup
	alongside := func(f func(i int)) {
		side.Add(1)
		go func() {
			defer side.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
					f(i)
				}
			}
		}()
	}
	alongside(func(i int) { assert.NoError(t, b.Update(sets[i%len(sets)])) })
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(m))
	alongside(func(int) {
		_, err := reg.Gather()
		assert.NoError(t, err)
	})
	alongside(func(i int) { // admin changes: HealthChanged from another goroutine
		id := all[i%len(all)].ID()
		_ = h.Drain(id) // unknown while out of the set: an error, ignored
		_ = h.Enable(id)
	})
	wg.Wait()
	close(stop)
	side.Wait()

	require.NoError(t, b.Update(all))
	s := gather(t, m)
	assert.Equal(t, 0.0, s.Sum("lbkit_requests_in_flight"))
	// The counts of backends removed and drained during the run went with
	// their series; the rest cannot exceed what was picked.
	assert.Positive(t, s.Sum("lbkit_picks_total"))
	assert.LessOrEqual(t, s.Sum("lbkit_picks_total"), float64(picked.Load()))
	for _, be := range all {
		ones := 0.0
		for k, v := range s.Backend(be.ID()) {
			if strings.HasPrefix(k, "lbkit_backend_state/") {
				ones += v
			}
		}
		assert.Equal(t, 1.0, ones, "%s: one state at 1", be.ID())
	}
}

// Close reaches a wrapped health.Balancer: its applier and probes stop.
func TestCloseReachesInner(t *testing.T) {
	m, err := lbmetrics.New(lbmetrics.Config{})
	require.NoError(t, err)
	h, err := health.New(leastconn.New(), health.Config{})
	require.NoError(t, err)
	b, err := m.Wrap(h)
	require.NoError(t, err)
	require.NoError(t, b.Close())
	assert.ErrorIs(t, h.Start(context.Background()), balancer.ErrClosed, "the inner balancer was closed")

	plain, err := lbmetrics.New(lbmetrics.Config{})
	require.NoError(t, err)
	pb, err := plain.Wrap(leastconn.New())
	require.NoError(t, err)
	assert.NoError(t, pb.Close(), "nothing to close")
}
