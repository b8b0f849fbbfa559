package lbhttp_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/lbhttp"
	"github.com/lbkit/lbkit/route"
	"github.com/lbkit/lbkit/wrr"
)

// fleet is backends on loopback labelled version=v1 (stable, weight 19
// each) and version=v2 (the canary, weight 3): with three stable ones the
// canary's weight is 3/60, 5%.
type fleet struct {
	stable, canary []*backend
	eps            []balancer.Backend
	byAddr         map[string]*backend
}

func startFleet(t *testing.T, stable, canary int) *fleet {
	t.Helper()
	f := &fleet{byAddr: map[string]*backend{}}
	f.stable = startBackends(t, stable, 0)
	f.canary = startBackends(t, canary, 0)
	for i, b := range f.canary {
		b.name = fmt.Sprintf("canary%d", i)
	}
	add := func(bs []*backend, version string, w int) {
		for _, b := range bs {
			f.eps = append(f.eps, balancer.NewEndpoint(hostOf(b.srv), w).WithLabels(map[string]string{"version": version}))
			f.byAddr[hostOf(b.srv)] = b
		}
	}
	add(f.stable, "v1", 19)
	add(f.canary, "v2", 3)
	return f
}

// routed is health ▶ route ▶ a wrr per version, with f's backends.
func routed(t *testing.T, f *fleet, cfg route.Config) *health.Balancer {
	t.Helper()
	cfg.Label = "version"
	if cfg.Rand == nil {
		// Seeded, behind a mutex: Rand is called from every request.
		var mu sync.Mutex
		src := rand.New(rand.NewPCG(27, 1))
		cfg.Rand = func() uint64 {
			mu.Lock()
			defer mu.Unlock()
			return src.Uint64()
		}
	}
	r, err := route.New(func() balancer.Balancer { return wrr.New() }, cfg)
	require.NoError(t, err)
	h, err := health.New(r, health.Config{})
	require.NoError(t, err)
	require.NoError(t, h.Update(f.eps))
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// send makes n GETs through the proxy at u with the given header (none
// when name is ""), from 8 goroutines, and counts the answers by backend
// name; failed requests are counted under "error".
func send(t *testing.T, u string, n int, name, value string) map[string]int {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	defer client.CloseIdleConnections()
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	jobs := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			for range jobs {
				req, _ := http.NewRequest("GET", u, nil)
				if name != "" {
					req.Header.Set(name, value)
				}
				who := "error"
				resp, err := client.Do(req)
				if err == nil {
					body, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode == 200 {
						who = string(body)
					} else {
						who = fmt.Sprintf("status %d", resp.StatusCode)
					}
				}
				mu.Lock()
				got[who]++
				mu.Unlock()
			}
		})
	}
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	return got
}

func canaryShare(got map[string]int) (canary, total int) {
	for who, n := range got {
		total += n
		if strings.HasPrefix(who, "canary") {
			canary += n
		}
	}
	return canary, total
}

// TestRouteCanary is issue 27.1 through the real proxy on loopback: a 5%
// canary by weight for requests without the header, the whole canary set
// for requests that ask for it by header, the stable set for those that
// ask for v1; and, with the canary drained and then dead, requests asking
// for it fall back by route's policy (Any, and DefaultSet) without one
// failing.
func TestRouteCanary(t *testing.T) {
	f := startFleet(t, 3, 1)
	h := routed(t, f, route.Config{})
	proxy := startProxy(t, h, lbhttp.Config{RouteHeader: "X-Canary"})

	t.Run("by weight", func(t *testing.T) {
		got := send(t, proxy.URL, 2000, "", "")
		canary, total := canaryShare(got)
		require.Equal(t, 2000, total)
		assert.Zero(t, got["error"])
		t.Logf("canary by weight: %d of %d: %v", canary, total, got)
		// 5% of 2000 is 100 (σ ≈ 10); an equal share per backend would
		// be 500, per set 1000.
		assert.InDelta(t, 100, canary, 40, "%v", got)
	})
	t.Run("by header", func(t *testing.T) {
		got := send(t, proxy.URL, 300, "X-Canary", "v2")
		assert.Equal(t, map[string]int{"canary0": 300}, got)
		got = send(t, proxy.URL, 300, "x-canary", "v1")
		canary, total := canaryShare(got)
		assert.Equal(t, 300, total)
		assert.Zero(t, canary, "%v", got)
		assert.Zero(t, got["error"])
	})
	t.Run("drained", func(t *testing.T) {
		require.NoError(t, h.Drain(hostOf(f.canary[0].srv)))
		got := send(t, proxy.URL, 300, "X-Canary", "v2")
		canary, total := canaryShare(got)
		assert.Equal(t, 300, total)
		assert.Zero(t, canary, "%v", got)
		assert.Zero(t, got["error"], "%v", got)
		require.NoError(t, h.Enable(hostOf(f.canary[0].srv)))
		assert.Equal(t, map[string]int{"canary0": 50}, send(t, proxy.URL, 50, "X-Canary", "v2"))
	})
	t.Run("dead", func(t *testing.T) {
		f.canary[0].kill()
		// The first requests are refused and retried on another backend
		// (a refused connection always is), and the refusal ejects the
		// canary: none fails.
		got := send(t, proxy.URL, 300, "X-Canary", "v2")
		canary, total := canaryShare(got)
		assert.Equal(t, 300, total)
		assert.Zero(t, canary, "%v", got)
		assert.Zero(t, got["error"], "%v", got)
	})
}

// TestRouteFallbackDefault: with Default v1 and Fallback DefaultSet, a
// request without the header goes to v1 only, and one asking for a dead
// canary falls back to v1, none failing.
func TestRouteFallbackDefault(t *testing.T) {
	f := startFleet(t, 2, 2)
	h := routed(t, f, route.Config{Default: "v1", Fallback: route.DefaultSet})
	proxy := startProxy(t, h, lbhttp.Config{RouteHeader: "X-Canary"})
	got := send(t, proxy.URL, 200, "", "")
	canary, _ := canaryShare(got)
	assert.Zero(t, canary, "%v", got)
	got = send(t, proxy.URL, 200, "X-Canary", "v2")
	canary, _ = canaryShare(got)
	assert.Equal(t, 200, canary, "%v", got)
	for _, b := range f.canary {
		b.kill()
	}
	got = send(t, proxy.URL, 300, "X-Canary", "v2")
	canary, total := canaryShare(got)
	assert.Equal(t, 300, total)
	assert.Zero(t, canary, "%v", got)
	assert.Zero(t, got["error"], "%v", got)
}

// A Transport used as a client's takes the route from WithRoute, which
// goes before the header; without RouteHeader a header sets nothing.
func TestWithRoute(t *testing.T) {
	f := startFleet(t, 2, 1)
	h := routed(t, f, route.Config{Default: "v1"})
	for _, tt := range []struct {
		name, header, ctxRoute string
		withCtx                bool
		routeHeader            string
		canary                 bool
	}{
		{name: "context", ctxRoute: "v2", withCtx: true, canary: true},
		{name: "context before header", header: "v2", ctxRoute: "v1", withCtx: true, routeHeader: "X-Canary"},
		{name: "header", header: "v2", routeHeader: "X-Canary", canary: true},
		{name: "header without RouteHeader", header: "v2"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr, err := lbhttp.NewTransport(h, lbhttp.Config{RouteHeader: tt.routeHeader})
			require.NoError(t, err)
			defer tr.CloseIdleConnections()
			client := &http.Client{Transport: tr}
			for range 20 {
				ctx := context.Background()
				if tt.withCtx {
					ctx = lbhttp.WithRoute(ctx, tt.ctxRoute)
				}
				req, _ := http.NewRequestWithContext(ctx, "GET", "http://svc/", nil)
				if tt.header != "" {
					req.Header.Set("X-Canary", tt.header)
				}
				resp, err := client.Do(req)
				require.NoError(t, err)
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				assert.Equal(t, tt.canary, strings.HasPrefix(string(body), "canary"), string(body))
			}
		})
	}
	r, ok := lbhttp.RouteFrom(lbhttp.WithRoute(context.Background(), "v2"))
	assert.True(t, ok)
	assert.Equal(t, "v2", r)
	_, ok = lbhttp.RouteFrom(context.Background())
	assert.False(t, ok)
}

func TestRouteHeaderRefused(t *testing.T) {
	for _, name := range []string{"X Canary", "X-Canary:", "Ä"} {
		_, err := lbhttp.NewTransport(&scripted{}, lbhttp.Config{RouteHeader: name})
		assert.ErrorIs(t, err, balancer.ErrBadOption, name)
	}
}

// Reading the route costs nothing: a Transport's RoundTrip allocates as
// much with RouteHeader on and the header present as without it, and the
// picker sees the Route.
func TestRouteAllocs(t *testing.T) {
	var seen string
	p := &routeSpy{seen: &seen}
	require.NoError(t, p.Update(balancer.Endpoints("10.0.0.1:80")))
	measure := func(cfg lbhttp.Config, header string) float64 {
		cfg.Base = fixedBase(200, "")
		tr := newTestTransport(t, p, cfg)
		req := httptest.NewRequest("GET", "http://svc/", nil)
		if header != "" {
			req.Header.Set("X-Canary", header)
		}
		return testing.AllocsPerRun(200, func() {
			resp, err := tr.RoundTrip(req)
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	off := measure(lbhttp.Config{}, "")
	assert.Empty(t, seen)
	on := measure(lbhttp.Config{RouteHeader: "X-Canary"}, "v2")
	assert.Equal(t, "v2", seen)
	skipCountUnderRace(t, on-off)
	assert.Equal(t, off, on)
}

// routeSpy is a scripted picker that keeps the last Route it was asked.
type routeSpy struct {
	scripted
	seen *string
}

func (s *routeSpy) Pick(req balancer.Request) (balancer.Backend, error) {
	*s.seen = req.Route
	return s.scripted.Pick(req)
}
