package lbhttp_test

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/lbhttp"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func serve(h http.Handler, method, path string) *http.Response {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Result()
}

func reportIn(t *testing.T, resp *http.Response) balancer.Load {
	t.Helper()
	l, err := lbhttp.LoadOf(resp.Header)
	require.NoError(t, err)
	return l
}

// The report's figures, on a clock the test drives: ten requests of
// 100 ms each, one in five a 503, over the first second.
func TestReporterFigures(t *testing.T) {
	clock := newFakeClock()
	n := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		clock.Advance(100 * time.Millisecond)
		n++
		if n%5 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	rep, err := lbhttp.NewReporter(h, lbhttp.ReporterConfig{Capacity: 2, Now: clock.Now})
	require.NoError(t, err)
	var last *http.Response
	for range 10 {
		last = serve(rep, "GET", "/work")
	}
	// The last response's report was made when its status was written,
	// before its own request ended: 9 done in 1 s.
	l := reportIn(t, last)
	assert.InDelta(t, 9.0, l.RPS, 1e-9)
	assert.InDelta(t, 1.0, l.EPS, 1e-9)
	assert.InDelta(t, 0.5, l.Application, 1e-9, "1 request in flight on average, of 2")
	assert.Zero(t, l.InFlight, "in-flight counts go to probes only")

	now := rep.Load()
	assert.InDelta(t, 10.0, now.RPS, 1e-9)
	assert.InDelta(t, 2.0, now.EPS, 1e-9)
	assert.Equal(t, 100*time.Millisecond, now.Latency)

	// 8.5 idle seconds later the same ten requests are spread over the
	// window so far, 9.5 s. Half a second more and the first second's
	// slot leaves the window: what is left is the tenth request, which
	// ended on the next slot's first instant, in the nine slots before
	// the one just begun.
	clock.Advance(8500 * time.Millisecond)
	l = rep.Load()
	assert.InDelta(t, 10/9.5, l.RPS, 1e-9)
	assert.InDelta(t, 1/9.5/2, l.Application, 1e-9)
	clock.Advance(500 * time.Millisecond)
	l = rep.Load()
	assert.InDelta(t, 1/9.0, l.RPS, 1e-9)
	assert.InDelta(t, 1/9.0, l.EPS, 1e-9, "the tenth was a 503")
	assert.Zero(t, l.Application)
	clock.Advance(time.Hour)
	assert.Zero(t, rep.Load().RPS)
}

func TestReporterUtilizationFunc(t *testing.T) {
	for _, tt := range []struct {
		name string
		u    float64
		want float64
	}{{"value", 0.75, 0.75}, {"negative", -1, 0}, {"above one", 3, 3}} {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := lbhttp.NewReporter(http.NotFoundHandler(), lbhttp.ReporterConfig{
				Capacity: 1, Utilization: func() float64 { return tt.u },
			})
			require.NoError(t, err)
			assert.InDelta(t, tt.want, rep.Load().Application, 1e-12)
		})
	}
}

// The header is set however the handler ends its response, and in the
// configured format.
func TestReporterHeaderEveryWay(t *testing.T) {
	handlers := map[string]http.HandlerFunc{
		"nothing":     func(http.ResponseWriter, *http.Request) {},
		"write":       func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "x") },
		"flush":       func(w http.ResponseWriter, _ *http.Request) { w.(http.Flusher).Flush() },
		"status":      func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) },
		"informative": func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusEarlyHints); w.WriteHeader(201) },
	}
	for name, h := range handlers {
		for _, f := range []lbhttp.Format{lbhttp.FormatText, lbhttp.FormatJSON} {
			t.Run(name+"/"+f.String(), func(t *testing.T) {
				rep, err := lbhttp.NewReporter(h, lbhttp.ReporterConfig{Utilization: func() float64 { return 0.5 }, Format: f})
				require.NoError(t, err)
				srv := httptest.NewServer(rep)
				defer srv.Close()
				resp, err := srv.Client().Get(srv.URL)
				require.NoError(t, err)
				_, _ = io.Copy(io.Discard, resp.Body)
				require.NoError(t, resp.Body.Close())
				v := resp.Header.Get(lbhttp.LoadHeader)
				assert.True(t, strings.HasPrefix(v, f.String()+" "), v)
				assert.Equal(t, 0.5, reportIn(t, resp).Application)
			})
		}
	}
}

// A backend with nothing to say sends no header.
func TestReporterSilentWhenEmpty(t *testing.T) {
	rep, err := lbhttp.NewReporter(http.NotFoundHandler(), lbhttp.ReporterConfig{Now: newFakeClock().Now})
	require.NoError(t, err)
	assert.Empty(t, serve(rep, "GET", "/").Header.Values(lbhttp.LoadHeader))
}

// A panicking handler is counted as a finished error, and its request
// leaves the in-flight count.
func TestReporterPanic(t *testing.T) {
	rep, err := lbhttp.NewReporter(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }),
		lbhttp.ReporterConfig{})
	require.NoError(t, err)
	assert.Panics(t, func() { serve(rep, "GET", "/") })
	l := rep.Load()
	assert.Zero(t, l.InFlight)
	assert.Greater(t, l.EPS, 0.0)
}

// Probes are answered by the Reporter: the requests in flight (not the
// probe) and the latency estimate, and are not counted as requests.
func TestReporterProbe(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 3)
	h := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		started <- struct{}{}
		<-release
	})
	rep, err := lbhttp.NewReporter(h, lbhttp.ReporterConfig{})
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { serve(rep, "GET", "/slow") })
	}
	for range 3 {
		<-started
	}
	resp := serve(rep, "GET", lbhttp.DefaultProbePath)
	assert.Equal(t, http.StatusNoContent, resp.StatusCode)
	assert.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	assert.Equal(t, 3.0, reportIn(t, resp).InFlight)
	close(release)
	wg.Wait()

	l := reportIn(t, serve(rep, "HEAD", lbhttp.DefaultProbePath))
	assert.Zero(t, l.InFlight)
	rif, ok := l.Metric(balancer.MetricInFlight)
	assert.True(t, ok, "an idle backend names rif 0")
	assert.Zero(t, rif)
	assert.Greater(t, l.Latency, time.Duration(0))
	// A POST to the probe path is the application's.
	assert.Equal(t, http.StatusOK, serve(rep, "POST", lbhttp.DefaultProbePath).StatusCode)
}

func TestNewReporterRefuses(t *testing.T) {
	h := http.NotFoundHandler()
	for name, c := range map[string]struct {
		h   http.Handler
		cfg lbhttp.ReporterConfig
	}{
		"nil handler":       {nil, lbhttp.ReporterConfig{}},
		"negative capacity": {h, lbhttp.ReporterConfig{Capacity: -1}},
		"negative window":   {h, lbhttp.ReporterConfig{Window: -time.Second}},
		"tiny window":       {h, lbhttp.ReporterConfig{Window: time.Millisecond}},
		"format":            {h, lbhttp.ReporterConfig{Format: 7}},
		"probe path":        {h, lbhttp.ReporterConfig{ProbePath: "probe"}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := lbhttp.NewReporter(c.h, c.cfg)
			assert.ErrorContains(t, err, "lbhttp: reporter: ")
			if c.h != nil {
				assert.ErrorIs(t, err, balancer.ErrBadOption)
			}
		})
	}
	for name, cfg := range map[string]lbhttp.ProberConfig{
		"scheme": {Scheme: "ftp"},
		"path":   {Path: "probe"},
	} {
		t.Run("prober "+name, func(t *testing.T) {
			_, err := lbhttp.NewProber(cfg)
			assert.ErrorIs(t, err, balancer.ErrBadOption)
			assert.ErrorContains(t, err, "lbhttp: prober: ")
		})
	}
}

func TestProber(t *testing.T) {
	rep, err := lbhttp.NewReporter(http.NotFoundHandler(), lbhttp.ReporterConfig{})
	require.NoError(t, err)
	withReporter := httptest.NewServer(rep)
	defer withReporter.Close()
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	}))
	defer plain.Close()
	failing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
	}))
	defer failing.Close()

	pr, err := lbhttp.NewProber(lbhttp.ProberConfig{})
	require.NoError(t, err)
	ctx := context.Background()
	l, err := pr.Probe(ctx, balancer.NewEndpoint(hostOf(withReporter), 1))
	require.NoError(t, err)
	assert.Zero(t, l.InFlight)

	_, err = pr.Probe(ctx, balancer.NewEndpoint(hostOf(plain), 1))
	assert.ErrorIs(t, err, balancer.ErrBadLoad, "no report is not an idle backend")
	_, err = pr.Probe(ctx, balancer.NewEndpoint(hostOf(failing), 1))
	assert.ErrorContains(t, err, "status 500")
	_, err = pr.Probe(ctx, balancer.NewEndpoint(refusedAddr(t), 1))
	assert.Error(t, err)

	for _, cfg := range []lbhttp.ProberConfig{{Scheme: "ftp"}, {Path: "x"}} {
		_, err := lbhttp.NewProber(cfg)
		assert.ErrorContains(t, err, "lbhttp: prober: ")
	}
}

// The Transport hands the backend's report to Done, for a response with
// a body (at its end) and for one without.
func TestTransportPassesLoad(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
	}{{"body", 200, "hello"}, {"no body", 204, ""}, {"failure", 503, "busy"}} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := lbhttp.NewReporter(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}), lbhttp.ReporterConfig{Utilization: func() float64 { return 0.625 }})
			require.NoError(t, err)
			srv := httptest.NewServer(rep)
			defer srv.Close()
			rec := newRecorder(&scripted{})
			require.NoError(t, rec.Update(balancer.Endpoints(hostOf(srv))))
			tr := newTestTransport(t, rec, lbhttp.Config{})
			defer tr.CloseIdleConnections()
			resp, err := tr.RoundTrip(get(t, "http://svc/"))
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			require.NoError(t, resp.Body.Close())
			rec.waitDone(t)
			picks, _ := rec.snapshot()
			assert.Equal(t, 0.625, picks[0].result().Load.Application)
		})
	}
}

// A response without a report costs the attempt nothing more: the
// Transport's one allocation per attempt stays one.
func TestTransportLoadAllocs(t *testing.T) {
	got := testing.AllocsPerRun(200, cannedRequest(t, canned{cfg: lbhttp.Config{}}))
	skipCountUnderRace(t, got)
	assert.Equal(t, 1.0, got)
}

// A handler that asserts http.Hijacker gets the connection through the
// Reporter, and the request leaves the in-flight count when it returns.
func TestReporterHijack(t *testing.T) {
	rep, err := lbhttp.NewReporter(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hj, ok := w.(http.Hijacker)
		if !ok {
			t.Error("not a Hijacker")
			return
		}
		conn, buf, err := hj.Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
		_ = buf.Flush()
	}), lbhttp.ReporterConfig{})
	require.NoError(t, err)
	var serverLog syncBuffer
	srv := httptest.NewUnstartedServer(rep)
	srv.Config.ErrorLog = log.New(&serverLog, "", 0)
	srv.Start()
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	assert.Equal(t, "hi", string(body))
	assert.Empty(t, resp.Header.Values(lbhttp.LoadHeader), "a hijacked response carries no report")
	assert.Eventually(t, func() bool { return rep.Load().InFlight == 0 }, 5*time.Second, time.Millisecond)
	// Once the handler has the connection, the Reporter writes nothing
	// more to it: net/http would log the attempt.
	assert.Empty(t, serverLog.String(), "server log")

	// Where hijacking is not supported, the error says so.
	rec := httptest.NewRecorder()
	rep2, err := lbhttp.NewReporter(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _, err := w.(http.Hijacker).Hijack()
		assert.Error(t, err)
	}), lbhttp.ReporterConfig{})
	require.NoError(t, err)
	rep2.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
}

// syncBuffer is a bytes.Buffer safe for a server's goroutines to write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
