package route_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/route"
	"github.com/lbkit/lbkit/rr"
	"github.com/lbkit/lbkit/wrr"
)

// labelled returns n backends: the first canary ones labelled
// track=canary, the others track=stable, each of weight w.
func labelled(n, canary, w int) []balancer.Backend {
	bs := make([]balancer.Backend, n)
	for i := range bs {
		track := "stable"
		if i < canary {
			track = "canary"
		}
		bs[i] = balancer.NewEndpoint(fmt.Sprintf("10.0.%d.%d:80", i/250, i%250+1), w).WithLabels(map[string]string{"track": track})
	}
	return bs
}

func trackOf(b balancer.Backend) string { return balancer.LabelOf(b, "track") }

func newRoute(t testing.TB, inner func() balancer.Balancer, cfg route.Config) *route.Balancer {
	t.Helper()
	if cfg.Label == "" {
		cfg.Label = "track"
	}
	lb, err := route.New(inner, cfg)
	require.NoError(t, err)
	return lb
}

func seeded(seed uint64) func() uint64 { return rand.New(rand.NewPCG(seed, 1)).Uint64 }

// The pickers inside keep every contract of package balancer with the
// kit's backends spread over three label values by the hash of their IDs,
// so that picks, retries and Avoid cross sets: one algorithm of each
// family that counts, learns or hashes (the kit runs on every algorithm
// on its own in package bench, and route adds the same routing around
// each); and rr with the kit's backends as they are, without labels (one
// set: the decorator must be transparent).
func TestConformance(t *testing.T) {
	spread := func(a catalog.Algorithm) func() balancer.Balancer {
		return func() balancer.Balancer {
			lb := newRoute(t, a.New, route.Config{})
			route.SetLabel(lb, func(b balancer.Backend) string {
				return []string{"a", "b", "c"}[xxhash.Sum64String(b.ID())%3]
			})
			return lb
		}
	}
	for _, name := range []string{"rr", "wrr", "leastconn", "ring-bounded", "lrt"} {
		a, ok := catalog.Lookup(name)
		require.True(t, ok, name)
		t.Run(name+"/spread", func(t *testing.T) { balancertest.Run(t, spread(a)) })
	}
	t.Run("rr/flat", func(t *testing.T) {
		balancertest.Run(t, func() balancer.Balancer {
			return newRoute(t, func() balancer.Balancer { return rr.New() }, route.Config{})
		})
	})
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  route.Config
	}{
		{"no label", route.Config{}},
		{"unknown fallback", route.Config{Label: "x", Fallback: 9}},
		{"default set without a default", route.Config{Label: "x", Fallback: route.DefaultSet}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := route.New(func() balancer.Balancer { return rr.New() }, tc.cfg)
			assert.ErrorIs(t, err, route.ErrConfig)
		})
	}
	_, err := route.New(nil, route.Config{Label: "x"})
	assert.ErrorIs(t, err, route.ErrConfig)
	_, err = route.New(func() balancer.Balancer { return nil }, route.Config{Label: "x"})
	assert.ErrorIs(t, err, route.ErrConfig)
}

// A 5% canary by weight: one canary of weight 5 beside 19 stable
// backends of weight 5, requests without a Route: the canary takes its
// weight's share. By header (Route "canary"): all of them.
func TestCanaryByWeightAndRoute(t *testing.T) {
	lb := newRoute(t, func() balancer.Balancer { return wrr.New() }, route.Config{Rand: seeded(1)})
	require.NoError(t, lb.Update(labelled(20, 1, 5)))
	const n = 40_000
	canary := 0
	for range n {
		b, err := lb.Pick(balancer.Request{})
		require.NoError(t, err)
		if trackOf(b) == "canary" {
			canary++
		}
	}
	share := float64(canary) / n
	t.Logf("canary share without a Route: %.4f (weight share 0.05)", share)
	assert.InDelta(t, 0.05, share, 0.006)

	for range 1000 {
		b, err := lb.Pick(balancer.Request{Route: "canary"})
		require.NoError(t, err)
		require.Equal(t, "canary", trackOf(b))
		b, err = lb.Pick(balancer.Request{Route: "stable"})
		require.NoError(t, err)
		require.Equal(t, "stable", trackOf(b))
	}

	// With a Default, requests without a Route stay on stable.
	lb = newRoute(t, func() balancer.Balancer { return wrr.New() }, route.Config{Default: "stable"})
	require.NoError(t, lb.Update(labelled(20, 1, 5)))
	for range 2000 {
		b, err := lb.Pick(balancer.Request{})
		require.NoError(t, err)
		require.Equal(t, "stable", trackOf(b))
	}
}

// The canary set drained, then dead: its requests fall back by policy,
// and none fails under Any and DefaultSet; Fail answers ErrNoBackend.
func TestFallback(t *testing.T) {
	for _, tc := range []struct {
		fallback route.Fallback
		want     string // the track requests for canary reach, "" for none
	}{
		{route.Any, "any"},
		{route.DefaultSet, "stable"},
		{route.Fail, ""},
	} {
		t.Run(tc.fallback.String(), func(t *testing.T) {
			inner := newRoute(t, func() balancer.Balancer { return leastconn.New() }, route.Config{Default: "stable", Fallback: tc.fallback})
			lb, err := health.New(inner, health.Config{})
			require.NoError(t, err)
			defer lb.Close()
			set := labelled(6, 2, 1)
			require.NoError(t, lb.Update(set))
			canaries := []string{set[0].ID(), set[1].ID()}

			pick := func() (balancer.Backend, error) {
				b, err := lb.Pick(balancer.Request{Route: "canary"})
				if err == nil {
					lb.Done(b, balancer.Result{Latency: time.Millisecond})
				}
				return b, err
			}
			b, err := pick()
			require.NoError(t, err)
			require.Equal(t, "canary", trackOf(b), "the canary set serves while it has backends")

			// Drain the canaries: their requests fall back.
			for _, id := range canaries {
				require.NoError(t, lb.Drain(id))
			}
			failed := 0
			for range 500 {
				b, err := pick()
				switch {
				case tc.want == "":
					require.ErrorIs(t, err, balancer.ErrNoBackend)
					failed++
				case err != nil:
					t.Fatalf("a canary request failed during the fallback: %v", err)
				default:
					assert.Equal(t, "stable", trackOf(b), "drained canaries get no request")
				}
			}
			if tc.want == "" {
				assert.Equal(t, 500, failed)
			}

			// Back, then gone from the set (dead and removed by discovery).
			for _, id := range canaries {
				require.NoError(t, lb.Enable(id))
			}
			b, err = pick()
			require.NoError(t, err)
			assert.Equal(t, "canary", trackOf(b))
			require.NoError(t, lb.Update(set[2:]))
			for range 200 {
				b, err := pick()
				if tc.want == "" {
					require.ErrorIs(t, err, balancer.ErrNoBackend)
					continue
				}
				require.NoError(t, err)
				assert.Equal(t, "stable", trackOf(b))
			}
		})
	}
}

// A route to a value no backend has falls back as an empty set does.
func TestUnknownRoute(t *testing.T) {
	lb := newRoute(t, func() balancer.Balancer { return rr.New() }, route.Config{})
	require.NoError(t, lb.Update(labelled(4, 1, 1)))
	b, err := lb.Pick(balancer.Request{Route: "blue"})
	require.NoError(t, err)
	assert.NotNil(t, b)

	lb = newRoute(t, func() balancer.Balancer { return rr.New() }, route.Config{Fallback: route.Fail})
	require.NoError(t, lb.Update(labelled(4, 1, 1)))
	_, err = lb.Pick(balancer.Request{Route: "blue"})
	assert.ErrorIs(t, err, balancer.ErrNoBackend)
}

// A backend relabelled while requests to it are in flight: their Dones
// reach the picker that counted them, and both pickers' counts end at 0.
func TestMovedBackendAccounting(t *testing.T) {
	lb := newRoute(t, func() balancer.Balancer { return leastconn.New() }, route.Config{})
	set := labelled(4, 2, 1)
	require.NoError(t, lb.Update(set))
	var inflight []balancer.Backend
	for range 20 {
		b, err := lb.Pick(balancer.Request{Route: "canary"})
		require.NoError(t, err)
		inflight = append(inflight, b)
	}
	moved := set[0].ID()
	require.Positive(t, lb.InFlight(moved))

	// set[0] becomes stable.
	next := append([]balancer.Backend{balancer.NewEndpoint(moved, 1).WithLabels(map[string]string{"track": "stable"})}, set[1:]...)
	require.NoError(t, lb.Update(next))
	for range 10 { // new requests to it, counted by stable's picker
		b, err := lb.Pick(balancer.Request{Route: "stable"})
		require.NoError(t, err)
		inflight = append(inflight, b)
	}
	for _, b := range inflight {
		lb.Done(b, balancer.Result{Latency: time.Millisecond})
	}
	for _, b := range next {
		assert.Zero(t, lb.InFlight(b.ID()), b.ID())
	}
	// And the next Update forgets the move.
	require.NoError(t, lb.Update(next))
	assert.Zero(t, lb.InFlight(moved))
}

// Pick and Done allocate nothing, routed or not.
func TestAllocs(t *testing.T) {
	lb := newRoute(t, func() balancer.Balancer { return leastconn.New() }, route.Config{})
	require.NoError(t, lb.Update(labelled(100, 10, 1)))
	for _, req := range []balancer.Request{{}, {Route: "canary"}, {Route: "nope"}, {Route: "stable", Avoid: "10.0.0.20:80"}} {
		allocs := testing.AllocsPerRun(1000, func() {
			b, err := lb.Pick(req)
			if err == nil {
				lb.Done(b, balancer.Result{Latency: time.Millisecond})
			}
		})
		assert.Zero(t, allocs, "%+v", req)
	}
}

// Updates of the labels race with picks: every pick is a backend of the
// set in force and no count drifts.
func TestConcurrentRelabel(t *testing.T) {
	lb := newRoute(t, func() balancer.Balancer { return leastconn.New() }, route.Config{})
	a, b := labelled(8, 4, 1), labelled(8, 0, 1)
	require.NoError(t, lb.Update(a))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				be, err := lb.Pick(balancer.Request{Route: "canary"})
				if err == nil {
					lb.Done(be, balancer.Result{Latency: time.Microsecond})
				}
			}
		}()
	}
	for i := range 200 {
		if i%2 == 0 {
			require.NoError(t, lb.Update(b))
		} else {
			require.NoError(t, lb.Update(a))
		}
	}
	close(stop)
	wg.Wait()
	require.NoError(t, lb.Update(a))
	require.NoError(t, lb.Update(a))
	for _, be := range a {
		assert.Zero(t, lb.InFlight(be.ID()), be.ID())
	}
}

func TestSets(t *testing.T) {
	lb := newRoute(t, func() balancer.Balancer { return rr.New() }, route.Config{})
	require.NoError(t, lb.Update(labelled(5, 2, 1)))
	assert.Equal(t, map[string]int{"canary": 2, "stable": 3}, lb.Sets())
}

// Start and Close follow balancer.Lifecycle's rules and reach every
// picker inside, those made after Close included.
func TestLifecycle(t *testing.T) {
	var made []*wrr.Reported
	lb := newRoute(t, func() balancer.Balancer {
		p := wrr.NewReported()
		made = append(made, p)
		return p
	}, route.Config{})
	require.NoError(t, lb.Update(labelled(4, 1, 1)))
	require.NoError(t, lb.Start(context.Background()))
	assert.ErrorIs(t, lb.Start(context.Background()), balancer.ErrStarted)
	require.NoError(t, lb.Close())
	require.NoError(t, lb.Close())
	assert.ErrorIs(t, lb.Start(context.Background()), balancer.ErrClosed)
	// A new label value after Close: its picker is closed as it is made.
	require.NoError(t, lb.Update(append(labelled(4, 1, 1), balancer.NewEndpoint("10.9.9.9:80", 1).WithLabels(map[string]string{"track": "blue"}))))
	for _, p := range made {
		assert.ErrorIs(t, p.Start(context.Background()), balancer.ErrClosed, "every picker inside is closed")
	}
}
