package lbhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/lbhttp"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/rr"
)

// midStall is a backend that sends its headers, and with part="part" the
// first 100 bytes of a body of 1,000 it declares, then nothing until the
// request ends or the test does. It counts the requests it got.
func midStall(t *testing.T, part bool, n *atomic.Int64) *httptest.Server {
	t.Helper()
	quit := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if part {
			w.Header().Set("Content-Length", "1000")
			_, _ = w.Write(make([]byte, 100))
		} else {
			w.WriteHeader(http.StatusOK)
		}
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-quit:
		}
	}))
	t.Cleanup(func() { close(quit); s.Close() })
	return s
}

// TestHoldStall is issue 24's test of a backend that stalls after its
// headers: beside a healthy backend, under health's passive checks, with
// NewProxy's defaults but for an attempt timeout of 1 s (the idle timeout
// stays 60 s), 50 clients send GETs back to back for 2 s. The stalled
// backend sends its headers and then nothing, or its headers and the
// first tenth of its body. Since the Transport holds the start of a
// response to a GET within the attempt timeout, each stall is an attempt
// that fails and is tried again on the healthy backend: no GET fails,
// and none waits longer than MaxAttempts attempt timeouts and a second.
// (Before, the clients the stalled backend caught waited for the idle
// timeout: here, for their own timeout of 6 s.)
func TestHoldStall(t *testing.T) {
	const (
		clients  = 50
		timeout  = time.Second
		runFor   = 2 * time.Second
		attempts = lbhttp.DefaultMaxAttempts
		bound    = attempts*timeout + time.Second
	)
	for _, part := range []bool{false, true} {
		for _, algo := range []struct {
			name string
			new  func() balancer.Balancer
		}{
			{"rr", func() balancer.Balancer { return rr.New() }},
			{"leastconn", func() balancer.Balancer { return leastconn.New() }},
		} {
			t.Run(fmt.Sprintf("part=%v/algo=%s", part, algo.name), func(t *testing.T) {
				var hits atomic.Int64
				bad := midStall(t, part, &hits)
				good := startBackends(t, 1, 0)[0]
				h, err := health.New(algo.new(), health.Config{})
				require.NoError(t, err)
				require.NoError(t, h.Update(balancer.Endpoints(hostOf(bad), hostOf(good.srv))))
				require.NoError(t, h.Start(t.Context()))
				t.Cleanup(func() { _ = h.Close() })
				proxy := startProxy(t, h, lbhttp.Config{AttemptTimeout: timeout, ErrorLog: quietLog()})

				var mu sync.Mutex
				var failures []string
				var requests, failed atomic.Int64
				var longest atomic.Int64
				var wg sync.WaitGroup
				begin := time.Now()
				for c := range clients {
					hc := clientFrom(t, fmt.Sprintf("127.0.0.%d", 10+c))
					hc.Timeout = bound + margin
					wg.Go(func() {
						for i := 0; i < 1000 && time.Since(begin) < runFor; i++ {
							start := time.Now()
							resp, err := hc.Get(proxy.URL)
							if err == nil {
								var body []byte
								body, err = io.ReadAll(resp.Body)
								_ = resp.Body.Close()
								if err == nil && (resp.StatusCode != http.StatusOK || string(body) != good.name) {
									err = fmt.Errorf("status %d, body %q", resp.StatusCode, body)
								}
							}
							took := time.Since(start)
							for {
								old := longest.Load()
								if int64(took) <= old || longest.CompareAndSwap(old, int64(took)) {
									break
								}
							}
							requests.Add(1)
							if err != nil {
								failed.Add(1)
								mu.Lock()
								if len(failures) < 5 {
									failures = append(failures, fmt.Sprintf("after %v: %v", took.Round(time.Millisecond), err))
								}
								mu.Unlock()
							}
						}
					})
				}
				wg.Wait()
				t.Logf("%d requests, %d failed, longest wait %v; %d reached the stalled backend",
					requests.Load(), failed.Load(), time.Duration(longest.Load()).Round(time.Millisecond), hits.Load())
				assert.Positive(t, hits.Load(), "the stalled backend got no request")
				assert.Zero(t, failed.Load(), "GETs failed: %q", failures)
				assert.LessOrEqual(t, time.Duration(longest.Load()), bound, "a client waited longer than attempts × attempt timeout + 1 s")
			})
		}
	}
}

// TestHoldBody checks that a held response reaches the reader whole and
// unchanged, for bodies shorter than the hold, as long, and longer, with
// a Content-Length and without one (chunked), and that each attempt gets
// one Done, a success.
func TestHoldBody(t *testing.T) {
	const hold = 1000
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", strconv.Itoa(n))
		}
		for i := range n {
			_, _ = w.Write([]byte{byte(i % 251)})
			if i%300 == 0 {
				w.(http.Flusher).Flush() // arrives in pieces
			}
		}
	}))
	t.Cleanup(s.Close)
	for _, n := range []int{1, hold - 1, hold, hold + 1, 5 * hold} {
		for _, chunked := range []bool{false, true} {
			t.Run(fmt.Sprintf("n=%d/chunked=%v", n, chunked), func(t *testing.T) {
				rec := newRecorder(&scripted{})
				require.NoError(t, rec.Update(balancer.Endpoints(hostOf(s))))
				tr := newTestTransport(t, rec, lbhttp.Config{Base: newBase(t), HoldBytes: hold})
				u := fmt.Sprintf("http://svc/?n=%d", n)
				if chunked {
					u += "&chunked=1"
				}
				resp, err := tr.RoundTrip(get(t, u))
				require.NoError(t, err)
				body, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				require.NoError(t, resp.Body.Close())
				require.Len(t, body, n)
				for i, c := range body {
					if c != byte(i%251) {
						t.Fatalf("byte %d is %d, want %d", i, c, i%251)
					}
				}
				rec.waitDone(t)
				picks, _ := rec.snapshot()
				require.Len(t, picks, 1)
				r := picks[0].result()
				assert.NoError(t, r.Err)
				assert.True(t, r.Sample(), "a whole body is a latency sample: %+v", r)
			})
		}
	}
	t.Run("read after close", func(t *testing.T) {
		rec := newRecorder(&scripted{})
		require.NoError(t, rec.Update(balancer.Endpoints(hostOf(s))))
		tr := newTestTransport(t, rec, lbhttp.Config{Base: newBase(t), HoldBytes: hold})
		resp, err := tr.RoundTrip(get(t, "http://svc/?n=500"))
		require.NoError(t, err)
		buf := make([]byte, 100)
		_, err = io.ReadFull(resp.Body, buf)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		_, err = resp.Body.Read(buf)
		assert.ErrorIs(t, err, http.ErrBodyReadAfterClose, "the held part is not read after Close")
		rec.waitDone(t)
		picks, _ := rec.snapshot()
		assert.True(t, picks[0].result().Abandoned(), "closed before its end: abandoned")
	})
}

// TestHoldWhen checks which responses are held: the backend sends its
// headers and the first 100 bytes of 1,000, and only then looks whether
// RoundTrip has returned. A held response has not (the Transport waits
// for the rest, which the backend sends 50 ms later); a response that is
// not held has, and the backend waits for that before it sends the rest
// (2 s at most: were the response held after all, RoundTrip returns then,
// and the test sees the backend's note).
func TestHoldWhen(t *testing.T) {
	var returned atomic.Bool
	var sawHeld, sawReturned atomic.Int32
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if ct := q.Get("ct"); ct != "" {
			w.Header().Set("Content-Type", ct)
		}
		if q.Get("accel") != "" {
			w.Header().Set("X-Accel-Buffering", "no")
		}
		w.Header().Set("Content-Length", "1000")
		if code, _ := strconv.Atoi(q.Get("status")); code != 0 {
			w.WriteHeader(code)
		}
		_, _ = w.Write(make([]byte, 100))
		w.(http.Flusher).Flush()
		deadline := time.Now().Add(50 * time.Millisecond)
		if q.Get("held") == "" {
			deadline = time.Now().Add(2 * time.Second)
		}
		for !returned.Load() && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if returned.Load() {
			sawReturned.Add(1)
		} else {
			sawHeld.Add(1)
		}
		_, _ = w.Write(make([]byte, 900))
	}))
	t.Cleanup(s.Close)
	tests := []struct {
		name   string
		method string
		query  string
		accept string
		cfg    lbhttp.Config
		held   bool
	}{
		{name: "GET", method: "GET", held: true},
		{name: "PUT", method: "PUT", held: true},
		{name: "POST", method: "POST"},
		{name: "HoldBytes negative", method: "GET", cfg: lbhttp.Config{HoldBytes: -1}},
		{name: "no header timeout", method: "GET", cfg: lbhttp.Config{AttemptTimeout: -1, RequestTimeout: -1}},
		{name: "text/event-stream", method: "GET", query: "ct=text/event-stream%3B+charset=utf-8"},
		{name: "X-Accel-Buffering: no", method: "GET", query: "accel=1"},
		{name: "Accept: text/event-stream", method: "GET", accept: "text/html, Text/Event-Stream"},
		{name: "a 503 RetryOn retries", method: "GET", query: "status=503", cfg: lbhttp.Config{MaxAttempts: 1}},
		{name: "a 500", method: "GET", query: "status=500", held: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			returned.Store(false)
			sawHeld.Store(0)
			sawReturned.Store(0)
			rec := newRecorder(&scripted{})
			require.NoError(t, rec.Update(balancer.Endpoints(hostOf(s))))
			cfg := tt.cfg
			cfg.Base = newBase(t)
			tr := newTestTransport(t, rec, cfg)
			q := tt.query
			if tt.held {
				q += "&held=1"
			}
			req, err := http.NewRequest(tt.method, "http://svc/?"+q, http.NoBody)
			require.NoError(t, err)
			if tt.accept != "" {
				req.Header.Set("Accept", tt.accept)
			}
			resp, err := tr.RoundTrip(req)
			returned.Store(true)
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			_ = resp.Body.Close()
			assert.Len(t, body, 1000)
			if tt.held {
				assert.EqualValues(t, 1, sawHeld.Load(), "held: RoundTrip had not returned when the backend sent the rest")
			} else {
				assert.EqualValues(t, 1, sawReturned.Load(), "not held: RoundTrip returned before the backend sent the rest")
			}
			rec.waitDone(t)
		})
	}
}

// TestHoldBroken checks that a backend that breaks off inside the held
// part (it sends its headers and a tenth of the body it declares, then
// closes the connection) fails the attempt, a failure of that backend,
// and that a GET then goes to the next backend; without the hold the
// caller gets the broken body.
func TestHoldBroken(t *testing.T) {
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		_, _ = w.Write(make([]byte, 100))
		w.(http.Flusher).Flush()
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	t.Cleanup(broken.Close)
	live := okServer(t)
	for _, hold := range []int{0, -1} {
		t.Run(fmt.Sprintf("HoldBytes=%d", hold), func(t *testing.T) {
			rec := newRecorder(&scripted{})
			require.NoError(t, rec.Update(balancer.Endpoints(hostOf(broken), hostOf(live))))
			tr := newTestTransport(t, rec, lbhttp.Config{Base: newBase(t), HoldBytes: hold})
			resp, err := tr.RoundTrip(get(t, "http://svc/"))
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			rec.waitDone(t)
			picks, _ := rec.snapshot()
			first := picks[0].result()
			assert.Error(t, first.Err, "the broken body is a failure of its backend")
			assert.False(t, first.Abandoned())
			if hold == 0 {
				require.NoError(t, err)
				assert.Equal(t, "ok", string(body), "tried again on the live backend")
				assert.Len(t, picks, 2)
			} else {
				assert.ErrorIs(t, err, io.ErrUnexpectedEOF, "not held: the caller gets the broken body")
				assert.Len(t, picks, 1)
			}
		})
	}
}

// TestHoldBeyond checks that a stall past the held part is the caller's:
// the response comes, its body fails at IdleTimeout, and nothing is
// tried again.
func TestHoldBeyond(t *testing.T) {
	const hold, idle = 1000, 100 * time.Millisecond
	quit := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(make([]byte, 1500))
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-quit:
		}
	}))
	t.Cleanup(func() { close(quit); s.Close() })
	rec := newRecorder(&scripted{})
	require.NoError(t, rec.Update(balancer.Endpoints(hostOf(s), hostOf(okServer(t)))))
	tr := newTestTransport(t, rec, lbhttp.Config{Base: newBase(t), HoldBytes: hold, IdleTimeout: idle})
	resp, err := tr.RoundTrip(get(t, "http://svc/"))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.ErrorIs(t, err, lbhttp.ErrIdleTimeout)
	assert.Len(t, body, 1500)
	rec.waitDone(t)
	picks, _ := rec.snapshot()
	require.Len(t, picks, 1, "a body past the hold is not sent again")
	assert.ErrorIs(t, picks[0].result().Err, lbhttp.ErrIdleTimeout)
}

// TestHoldConfig checks that NewTransport refuses a HoldBytes above
// MaxHoldBytes, naming it.
func TestHoldConfig(t *testing.T) {
	_, err := lbhttp.NewTransport(&scripted{}, lbhttp.Config{HoldBytes: lbhttp.MaxHoldBytes + 1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "HoldBytes")
	_, err = lbhttp.NewTransport(&scripted{}, lbhttp.Config{HoldBytes: lbhttp.MaxHoldBytes})
	assert.NoError(t, err)
}

// TestTrialStalledDataPath is issue 24's test of a backend whose health
// check passes while its requests stall: its /healthz answers at once,
// every other request gets its headers and then nothing. Beside a healthy
// backend, under health with probes every 50 ms (Rise 2) and an ejection
// of 200 ms at first, and an attempt timeout of 300 ms, 20 clients send
// GETs for 3 s. Its timeouts eject it; its probes bring it back early,
// each time on trial: one request, whose stall ejects it again. So after
// its first ejection it is picked no more often than it had trials (with
// Config.NoTrial, as before, each return caught a round of requests until
// five had failed), and no GET fails: each stall is retried.
func TestTrialStalledDataPath(t *testing.T) {
	const (
		clients = 20
		runFor  = 3 * time.Second
	)
	for _, algo := range []struct {
		name string
		new  func() balancer.Balancer
	}{
		{"rr", func() balancer.Balancer { return rr.New() }},
		{"leastconn", func() balancer.Balancer { return leastconn.New() }},
	} {
		t.Run("algo="+algo.name, func(t *testing.T) {
			var hits atomic.Int32
			quit := make(chan struct{})
			bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/healthz" {
					return
				}
				hits.Add(1)
				w.WriteHeader(http.StatusOK)
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
				case <-quit:
				}
			}))
			t.Cleanup(func() { close(quit); bad.Close() })
			good := startBackends(t, 1, 0)[0]
			w := &watched{id: hostOf(bad)}
			var ejections, returns atomic.Int32
			h, err := health.New(algo.new(), health.Config{
				Probe:    health.HTTP(health.HTTPCheck{Path: "/healthz"}),
				Interval: 50 * time.Millisecond,
				// A probe timeout far above the answers of /healthz: under
				// -race on a loaded machine the default (the Interval)
				// took the healthy backend down, and panic mode handed
				// the inner picker both.
				Timeout:          2 * time.Second,
				BaseEjectionTime: 200 * time.Millisecond,
				MaxEjectionTime:  10 * time.Second,
				OnChange: func(c health.Change) {
					if c.ID != hostOf(bad) {
						return
					}
					switch c.New {
					case health.Ejected:
						now := time.Now()
						w.ejected.CompareAndSwap(nil, &now)
						ejections.Add(1)
					case health.Up:
						returns.Add(1)
					}
				},
			})
			require.NoError(t, err)
			w.Balancer = h
			require.NoError(t, h.Update(balancer.Endpoints(hostOf(bad), hostOf(good.srv))))
			require.NoError(t, h.Start(t.Context()))
			t.Cleanup(func() { _ = h.Close() })
			proxy := startProxy(t, w, lbhttp.Config{AttemptTimeout: 300 * time.Millisecond, ErrorLog: quietLog()})

			var failed atomic.Int64
			var requests atomic.Int64
			var wg sync.WaitGroup
			begin := time.Now()
			for c := range clients {
				hc := clientFrom(t, fmt.Sprintf("127.0.0.%d", 10+c))
				wg.Go(func() {
					for i := 0; i < 10000 && time.Since(begin) < runFor; i++ {
						resp, err := hc.Get(proxy.URL)
						if err == nil {
							_, err = io.Copy(io.Discard, resp.Body)
							_ = resp.Body.Close()
							if err == nil && resp.StatusCode != http.StatusOK {
								err = fmt.Errorf("status %d", resp.StatusCode)
							}
						}
						requests.Add(1)
						if err != nil {
							failed.Add(1)
						}
					}
				})
			}
			wg.Wait()
			// Stop the probes before counting: a return after this is not
			// one the clients could see.
			require.NoError(t, h.Close())
			at := w.ejected.Load()
			require.NotNil(t, at, "the stalled backend was never ejected")
			after := int(w.late.Load())
			t.Logf("%s: %d requests, %d failed; the stalled backend got %d, %d picked after its first ejection, %.0f ms in; %d ejections, %d returns",
				algo.name, requests.Load(), failed.Load(), hits.Load(), after, at.Sub(begin).Seconds()*1000, ejections.Load(), returns.Load())
			assert.Zero(t, failed.Load(), "GETs failed")
			assert.Positive(t, returns.Load(), "the probes never brought it back")
			assert.LessOrEqual(t, after, int(returns.Load()), "more picks of it after its first ejection than it had trials")
		})
	}
}
