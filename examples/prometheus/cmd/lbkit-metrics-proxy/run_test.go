package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/bench"
	"github.com/lbkit/lbkit/examples/prometheus/internal/scrape"
)

func TestBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no backends", nil, "-backends is required"},
		{"unknown flag", []string{"-backend", "a:1"}, "flag provided but not defined: -backend"},
		{"stray argument", []string{"-backends", "a:1", "extra"}, `unexpected argument "extra"`},
		{"backend without port", []string{"-backends", "10.0.0.1"}, `-backends: "10.0.0.1" is not host:port`},
		{"empty item", []string{"-backends", "a:1,,b:2"}, `-backends: "" is not host:port`},
		{"bad weight", []string{"-backends", "a:1=x"}, `-backends: "a:1=x": weight "x" is not a whole number`},
		{"zero weight", []string{"-backends", "a:1=0"}, "-backends: balancer: weight out of range"},
		{"duplicate", []string{"-backends", "a:1,a:1"}, "-backends: balancer: duplicate backend ID"},
		{"unknown algo", []string{"-backends", "a:1", "-algo", "random"}, `-algo: unknown algorithm "random"; one of rr, wrr, leastconn`},
		{"bad trusted", []string{"-backends", "a:1", "-trusted-proxies", "10.0.0.0/8,corp"}, `-trusted-proxies: "corp" is not a CIDR prefix`},
		{"bad health path", []string{"-backends", "a:1", "-health-path", "healthz"}, `-health-path: "healthz" does not start with /`},
		{"bad health interval", []string{"-backends", "a:1", "-health-interval", "0s"}, "-health-interval: 0s is below the minimum"},
		{"bad attempts", []string{"-backends", "a:1", "-max-attempts", "0"}, "-max-attempts: 0 is below 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := run(t.Context(), tt.args, &stderr)
			assert.Equal(t, exitUsage, code)
			assert.Contains(t, stderr.String(), tt.want)
			assert.True(t, strings.HasPrefix(stderr.String(), "lbkit-metrics-proxy: "), "one message, not the usage: %q", stderr.String())
		})
	}
}

func TestHelp(t *testing.T) {
	var stderr bytes.Buffer
	assert.Equal(t, exitOK, run(t.Context(), []string{"-h"}, &stderr))
	assert.Contains(t, stderr.String(), "Usage: lbkit-metrics-proxy")
	assert.Contains(t, stderr.String(), "-metrics-listen")
}

func TestEveryAlgorithmAccepted(t *testing.T) {
	for _, a := range bench.Algorithms() {
		c, err := parse([]string{"-backends", "127.0.0.1:1=2,127.0.0.1:2", "-algo", a.Name}, io.Discard)
		require.NoError(t, err, a.Name)
		assert.Equal(t, a.Name, c.algo.Name)
		assert.Len(t, c.backends, 2)
	}
}

func TestListenFails(t *testing.T) {
	var stderr bytes.Buffer
	code := run(t.Context(), []string{"-backends", "127.0.0.1:1", "-metrics-listen", "127.0.0.1:99999"}, &stderr)
	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr.String(), "invalid port")
}

// TestMetricsEndToEnd runs the proxy on loopback in front of four real
// backends (two healthy, one answering 500, one killed half-way), sends
// real traffic through it, and scrapes /metrics over HTTP: the figures
// must account for every request.
func TestMetricsEndToEnd(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	ok := func(delay time.Duration) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(delay)
			io.WriteString(w, "ok")
		})
	}
	fast, slow := httptest.NewServer(ok(0)), httptest.NewServer(ok(2*time.Millisecond))
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "overloaded", http.StatusInternalServerError)
	}))
	doomed := httptest.NewServer(ok(0))
	backends := map[string]string{ // backend ID -> name
		hostOf(fast): "fast", hostOf(slow): "slow", hostOf(failing): "failing", hostOf(doomed): "doomed",
	}
	id := map[string]string{}
	for k, v := range backends {
		id[v] = k
	}

	c, err := parse([]string{
		"-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0", "-algo", "rr",
		"-backends", strings.Join([]string{id["fast"], id["slow"], id["failing"], id["doomed"]}, ","),
	}, io.Discard)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	listening := make(chan addrs, 1)
	served := make(chan error, 1)
	go func() { served <- serve(ctx, c, slog.New(slog.NewTextHandler(t.Output(), nil)), listening) }()
	var at addrs
	select {
	case at = <-listening:
	case err := <-served:
		t.Fatalf("serve returned before listening: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not listen within 10s")
	}

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	metrics := func() scrape.Values {
		t.Helper()
		resp, err := client.Get("http://" + at.metrics + "/metrics")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		v, err := scrape.Parse(resp.Body)
		require.NoError(t, err)
		return v
	}
	// until scrapes until cond holds, for up to 5s: Done runs when the
	// proxy has finished the response body, an instant after the client
	// may have read it, and health applies ejections on its own goroutine.
	until := func(what string, cond func(scrape.Values) bool) scrape.Values {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			v := metrics()
			if cond(v) {
				return v
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 5s; last scrape: %v", what, v)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// traffic sends n GETs through the proxy from 4 clients and returns
	// the count of each status seen.
	traffic := func(n int) map[int]int {
		t.Helper()
		var mu sync.Mutex
		statuses := map[int]int{}
		jobs := make(chan int)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range jobs {
					resp, err := client.Get("http://" + at.proxy + "/")
					code := -1 // a transport error
					if err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						code = resp.StatusCode
					}
					mu.Lock()
					statuses[code]++
					mu.Unlock()
				}
			}()
		}
		for i := range n {
			jobs <- i
		}
		close(jobs)
		wg.Wait()
		return statuses
	}
	inFlightZero := func(v scrape.Values) bool { return v.Sum("lbkit_requests_in_flight") == 0 }

	// Phase 1: all four up; the failing one answers 500 until health
	// ejects it after 5 failures in a row.
	const phase1 = 80
	st1 := traffic(phase1)
	v := until("in flight back to 0", inFlightZero)
	t.Logf("phase 1: client saw %v", st1)
	assert.Equal(t, phase1, st1[200]+st1[500], "every request got an answer")
	assert.GreaterOrEqual(t, st1[500], 5, "the failing backend answered until ejected")
	assert.Equal(t, float64(phase1), v.Sum("lbkit_picks_total"), "no retries: one pick per request")
	for name, bid := range id {
		b := v.Backend(bid)
		t.Logf("phase 1: %-7s picks %3.0f  failures %3.0f  latency samples %3.0f", name, b["lbkit_picks_total"], b["lbkit_failures_total"], b["lbkit_request_duration_seconds_count"])
		assert.Equal(t, b["lbkit_picks_total"], b["lbkit_request_duration_seconds_count"], "%s: one latency sample per request", name)
		assert.Zero(t, b["lbkit_abandoned_total"], name)
		if name != "failing" {
			assert.Zero(t, b["lbkit_failures_total"], name)
			assert.Positive(t, b["lbkit_picks_total"], name)
		}
	}
	assert.Equal(t, float64(st1[500]), v.Backend(id["failing"])["lbkit_failures_total"], "each 500 is a failure of the failing backend")
	assert.Greater(t, v.Backend(id["slow"])["lbkit_request_duration_seconds_sum"], v.Backend(id["fast"])["lbkit_request_duration_seconds_sum"], "2ms per request adds up")
	assert.Positive(t, v.Sum("lbkit_pick_duration_seconds_count"))
	v = until("failing backend ejected", func(v scrape.Values) bool {
		return v.Backend(id["failing"])["lbkit_backend_state/ejected"] == 1
	})
	assert.Equal(t, 1.0, v.Backend(id["failing"])["lbkit_backend_state_changes_total/ejected"])
	assert.Equal(t, 1.0, v.Backend(id["fast"])["lbkit_backend_state/up"])
	assert.Equal(t, 0.0, v.Sum("lbkit_health_panic"))
	assert.Equal(t, "rr", algoLabel(v), "the algo constant label")

	// Phase 2: the doomed backend's listener and connections close. Its
	// refused connections are retried elsewhere: the client sees no
	// error, and each refused attempt is one more pick.
	doomed.Close()
	const phase2 = 40
	st2 := traffic(phase2)
	v = until("in flight back to 0", inFlightZero)
	t.Logf("phase 2: client saw %v", st2)
	assert.Equal(t, map[int]int{200: phase2}, st2, "the failing backend stays ejected; the dead one is retried elsewhere")
	doomedFailures := v.Backend(id["doomed"])["lbkit_failures_total"]
	assert.GreaterOrEqual(t, doomedFailures, 1.0, "the dead backend was tried")
	assert.Equal(t, float64(phase1+phase2)+doomedFailures, v.Sum("lbkit_picks_total"), "a pick per request, plus one per retry")
	for name, bid := range id {
		b := v.Backend(bid)
		t.Logf("phase 2: %-7s picks %3.0f  failures %3.0f  latency samples %3.0f", name, b["lbkit_picks_total"], b["lbkit_failures_total"], b["lbkit_request_duration_seconds_count"])
	}
	v = until("dead backend ejected", func(v scrape.Values) bool {
		return v.Backend(id["doomed"])["lbkit_backend_state/ejected"] == 1
	})
	assert.Equal(t, 1.0, v.Backend(id["doomed"])["lbkit_backend_state_changes_total/ejected"])

	// Stop: serve returns, and every goroutine it, the backends and the
	// client started ends.
	cancel()
	select {
	case err := <-served:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not return within 15s of its context ending")
	}
	client.CloseIdleConnections()
	for _, s := range []*httptest.Server{fast, slow, failing} {
		s.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > goroutines && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines left, %d before:\n%s", n, goroutines, buf[:runtime.Stack(buf, true)])
	}
}

// algoLabel returns the algo label of lbkit_picks_total, which the proxy
// sets on every series.
func algoLabel(v scrape.Values) string {
	for k := range v {
		if strings.HasPrefix(k, "lbkit_picks_total{") {
			if _, rest, ok := strings.Cut(k, `algo="`); ok {
				a, _, _ := strings.Cut(rest, `"`)
				return a
			}
		}
	}
	return ""
}

func hostOf(s *httptest.Server) string {
	return strings.TrimPrefix(s.URL, "http://")
}
