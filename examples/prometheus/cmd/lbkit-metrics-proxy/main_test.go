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

	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/examples/prometheus/internal/scrape"
	"github.com/lbkit/lbkit/examples/proxy/proxycmd"
)

// TestBadFlags checks that a mistake, in examples/proxy's flags or in
// -metrics-listen, gets one line on stderr naming the flag and exit status
// 2. proxycmd's TestParseErrors checks every message of the shared flags.
func TestBadFlags(t *testing.T) {
	tests := map[string]struct {
		args []string
		want string
	}{
		"no backends":    {nil, "-backends or -dns is required"},
		"unknown flag":   {[]string{"-backend", "a:1"}, "flag provided but not defined: -backend"},
		"zero weight":    {[]string{"-backends", "a:1=0"}, `-backends: "a:1=0": weight "0" is not a whole number from 1 to 1000000`},
		"bad trusted":    {[]string{"-backends", "a:1", "-trusted-proxies", "10.0.0.0/8,corp"}, `-trusted-proxies: "corp" is neither an address nor a CIDR prefix`},
		"metrics no arg": {[]string{"-backends", "a:1", "-metrics-listen"}, "flag needs an argument: -metrics-listen"},
	}
	for name, tt := range tests {
		var stderr bytes.Buffer
		require.Equal(t, proxycmd.ExitUsage, run(t.Context(), tt.args, &stderr), name)
		line, rest, _ := strings.Cut(stderr.String(), "\n")
		assert.Equal(t, "lbkit-metrics-proxy: "+tt.want, line, "%s: one message, not the usage", name)
		assert.Equal(t, "Run lbkit-metrics-proxy -h for the flags.\n", rest, name)
	}
}

// TestHelp checks that -h lists examples/proxy's flags and this one's.
func TestHelp(t *testing.T) {
	var usage bytes.Buffer
	require.Equal(t, proxycmd.ExitOK, run(t.Context(), []string{"-h"}, &usage))
	for _, want := range []string{"Usage: lbkit-metrics-proxy", "-backends", "-metrics-listen address", `(default "127.0.0.1:9464")`} {
		assert.Contains(t, usage.String(), want)
	}
}

// TestEveryAlgorithmAccepted checks that every algorithm of the bench
// parses, and gets its metrics and its algo label.
func TestEveryAlgorithmAccepted(t *testing.T) {
	for _, a := range catalog.Algorithms() {
		f, metricsListen := flags()
		c, err := f.Parse([]string{"-backends", "127.0.0.1:1=2,127.0.0.1:2", "-algo", a.Name, "-metrics-listen", ":1"}, io.Discard)
		require.NoError(t, err, a.Name)
		assert.Equal(t, a.Name, c.Algorithm.Name)
		assert.Len(t, c.Backends, 2)
		assert.Equal(t, ":1", *metricsListen)
		o, err := options(c, *metricsListen)
		require.NoError(t, err, a.Name)
		assert.Equal(t, ":1", o.Servers[0].Addr)
	}
}

// TestListenFails checks that a -metrics-listen address that cannot be
// listened on stops the command with status 1 and the reason logged.
func TestListenFails(t *testing.T) {
	var log bytes.Buffer
	code := run(t.Context(), []string{"-backends", "127.0.0.1:1", "-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:99999"}, &log)
	require.Equal(t, proxycmd.ExitError, code, log.String())
	assert.Regexp(t, `level=ERROR msg="lbkit-metrics-proxy: listen tcp: .*invalid port"`, log.String())
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

	f, metricsListen := flags()
	c, err := f.Parse([]string{
		"-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0", "-algo", "rr",
		"-backends", strings.Join([]string{id["fast"], id["slow"], id["failing"], id["doomed"]}, ","),
	}, io.Discard)
	require.NoError(t, err)
	o, err := options(c, *metricsListen)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	p, err := proxycmd.Start(ctx, c, slog.New(slog.NewTextHandler(t.Output(), nil)), o)
	require.NoError(t, err)
	at := struct{ proxy, metrics string }{p.Addrs[0], p.Addrs[1]}

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

	// Stop: the proxy stops, and every goroutine it, the backends and the
	// client started ends.
	cancel()
	select {
	case <-p.Done():
		require.NoError(t, p.Wait())
	case <-time.After(15 * time.Second):
		t.Fatal("the proxy did not stop within 15s of its context ending")
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
