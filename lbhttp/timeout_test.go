package lbhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/lbhttp"
)

// stallServer accepts requests and never answers them, until the request
// ends or the test does. It counts the requests it got in n if not nil.
func stallServer(t *testing.T, n *atomic.Int64) *httptest.Server {
	t.Helper()
	quit := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n != nil {
			n.Add(1)
		}
		select {
		case <-r.Context().Done():
		case <-quit:
		}
	}))
	t.Cleanup(func() { close(quit); s.Close() })
	return s
}

// stallBodyServer sends its headers and the first line of a body at once,
// then nothing more until the request ends or the test does.
func stallBodyServer(t *testing.T, n *atomic.Int64) *httptest.Server {
	t.Helper()
	quit := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n != nil {
			n.Add(1)
		}
		_, _ = io.WriteString(w, "first line\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-quit:
		}
	}))
	t.Cleanup(func() { close(quit); s.Close() })
	return s
}

// okServer answers "ok" at once.
func okServer(t *testing.T) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(s.Close)
	return s
}

// newBase returns a base transport closed with the test.
func newBase(t *testing.T) *http.Transport {
	t.Helper()
	b := lbhttp.NewBase()
	t.Cleanup(b.CloseIdleConnections)
	return b
}

// margin is what a timing assertion allows on top of the timeouts it
// checks: a busy machine's scheduling, far more than the test needs.
const margin = 2 * time.Second

// TestAttemptTimeout checks that an attempt whose backend never answers
// ends at AttemptTimeout as a failure of that backend (not abandoned, with
// the latency), that an idempotent request goes on to the next backend and
// a POST does not, and what the caller sees.
func TestAttemptTimeout(t *testing.T) {
	const timeout = 100 * time.Millisecond
	stalled, live := stallServer(t, nil), okServer(t)
	tests := []struct {
		method string
		picks  int
	}{
		{"GET", 2},
		{"POST", 1},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			rec := newRecorder(&scripted{})
			require.NoError(t, rec.Update(balancer.Endpoints(hostOf(stalled), hostOf(live))))
			tr := newTestTransport(t, rec, lbhttp.Config{Base: newBase(t), AttemptTimeout: timeout})
			req, err := http.NewRequest(tt.method, "http://svc/", strings.NewReader("body"))
			require.NoError(t, err)
			start := time.Now()
			resp, err := tr.RoundTrip(req)
			took := time.Since(start)
			if tt.method == "GET" {
				require.NoError(t, err)
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				assert.Equal(t, "ok", string(body))
			} else {
				require.ErrorIs(t, err, lbhttp.ErrAttemptTimeout)
				assert.ErrorIs(t, err, context.DeadlineExceeded, "a timeout is a deadline")
				var ne interface{ Timeout() bool }
				require.ErrorAs(t, err, &ne)
				assert.True(t, ne.Timeout())
			}
			assert.GreaterOrEqual(t, took, timeout)
			assert.Less(t, took, timeout+margin)
			rec.waitDone(t)
			picks, _ := rec.snapshot()
			require.Len(t, picks, tt.picks)
			r := picks[0].result()
			assert.ErrorIs(t, r.Err, lbhttp.ErrAttemptTimeout)
			assert.False(t, r.Abandoned(), "a timeout is the backend's failure")
			assert.GreaterOrEqual(t, r.Latency, timeout, "and a latency sample")
		})
	}
}

// TestRequestTimeout checks that RequestTimeout bounds a request over its
// attempts: with every backend stalled, the second attempt is cut short
// when it passes, and no third starts.
func TestRequestTimeout(t *testing.T) {
	s1, s2, s3 := stallServer(t, nil), stallServer(t, nil), stallServer(t, nil)
	rec := newRecorder(&scripted{})
	require.NoError(t, rec.Update(balancer.Endpoints(hostOf(s1), hostOf(s2), hostOf(s3))))
	tr := newTestTransport(t, rec, lbhttp.Config{Base: newBase(t), AttemptTimeout: 200 * time.Millisecond, RequestTimeout: 300 * time.Millisecond})
	start := time.Now()
	_, err := tr.RoundTrip(get(t, "http://svc/"))
	took := time.Since(start)
	require.ErrorIs(t, err, lbhttp.ErrRequestTimeout)
	assert.GreaterOrEqual(t, took, 300*time.Millisecond)
	assert.Less(t, took, 300*time.Millisecond+margin)
	rec.waitDone(t)
	picks, _ := rec.snapshot()
	require.Len(t, picks, 2, "no attempt starts after the request timeout")
	assert.ErrorIs(t, picks[0].result().Err, lbhttp.ErrAttemptTimeout)
	assert.ErrorIs(t, picks[1].result().Err, lbhttp.ErrRequestTimeout)
	assert.False(t, picks[1].result().Abandoned())
}

// TestIdleTimeout checks that a body whose backend stops sending fails
// with ErrIdleTimeout once a read has waited IdleTimeout, and reports a
// failure of the backend; and that a reader who is slow to read again is
// not cut off: only time waiting in Read counts.
func TestIdleTimeout(t *testing.T) {
	const idle = 100 * time.Millisecond
	t.Run("backend stalls", func(t *testing.T) {
		s := stallBodyServer(t, nil)
		rec := newRecorder(&scripted{})
		require.NoError(t, rec.Update(balancer.Endpoints(hostOf(s))))
		// Not held: the stall comes once the body is the caller's.
		tr := newTestTransport(t, rec, lbhttp.Config{Base: newBase(t), IdleTimeout: idle, HoldBytes: -1})
		resp, err := tr.RoundTrip(get(t, "http://svc/"))
		require.NoError(t, err)
		defer resp.Body.Close()
		buf := make([]byte, 64)
		n, err := resp.Body.Read(buf)
		require.NoError(t, err)
		assert.Equal(t, "first line\n", string(buf[:n]))
		start := time.Now()
		_, err = io.ReadAll(resp.Body)
		took := time.Since(start)
		require.ErrorIs(t, err, lbhttp.ErrIdleTimeout)
		assert.Contains(t, err.Error(), "(backend "+hostOf(s)+")", "the reader's error names the backend")
		assert.GreaterOrEqual(t, took, idle)
		assert.Less(t, took, idle+margin)
		rec.waitDone(t)
		picks, _ := rec.snapshot()
		r := picks[0].result()
		assert.ErrorIs(t, r.Err, lbhttp.ErrIdleTimeout)
		assert.False(t, r.Abandoned())
		assert.Positive(t, r.Latency)
	})
	t.Run("slow reader", func(t *testing.T) {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, strings.Repeat("x", 1000))
		}))
		defer s.Close()
		rec := newRecorder(&scripted{})
		require.NoError(t, rec.Update(balancer.Endpoints(hostOf(s))))
		tr := newTestTransport(t, rec, lbhttp.Config{Base: newBase(t), IdleTimeout: idle})
		resp, err := tr.RoundTrip(get(t, "http://svc/"))
		require.NoError(t, err)
		buf := make([]byte, 10)
		_, err = io.ReadFull(resp.Body, buf)
		require.NoError(t, err)
		time.Sleep(3 * idle) // the reader's own pause, not the backend's
		rest, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		assert.Len(t, rest, 990)
		_ = resp.Body.Close()
		rec.waitDone(t)
		picks, _ := rec.snapshot()
		assert.NoError(t, picks[0].result().Err)
	})
}

// TestTimeoutCallerGivesUp checks that a caller who gives up before the
// attempt timeout, on the way or before RoundTrip, still stops the
// attempt at once, and that the attempt is abandoned, not a failure.
func TestTimeoutCallerGivesUp(t *testing.T) {
	s := stallServer(t, nil)
	for _, after := range []time.Duration{50 * time.Millisecond, 0} {
		t.Run(fmt.Sprintf("after=%v", after), func(t *testing.T) {
			rec := newRecorder(&scripted{})
			require.NoError(t, rec.Update(balancer.Endpoints(hostOf(s))))
			tr := newTestTransport(t, rec, lbhttp.Config{Base: newBase(t), AttemptTimeout: time.Minute})
			ctx, cancel := context.WithCancel(context.Background())
			if after > 0 {
				time.AfterFunc(after, cancel)
			} else {
				cancel()
			}
			start := time.Now()
			_, err := tr.RoundTrip(get(t, "http://svc/").WithContext(ctx))
			require.ErrorIs(t, err, context.Canceled)
			assert.Less(t, time.Since(start), margin)
			rec.waitDone(t)
			picks, _ := rec.snapshot()
			require.Len(t, picks, 1)
			assert.True(t, picks[0].result().Abandoned())
		})
	}
}

// TestTimeoutBaseIgnoresCancel checks a base transport that does not heed
// the context: its late response to an attempt that timed out is closed
// unread and the attempt stays a timeout.
func TestTimeoutBaseIgnoresCancel(t *testing.T) {
	var bodies []*fakeBody
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		time.Sleep(150 * time.Millisecond)
		b := &fakeBody{r: strings.NewReader("late")}
		bodies = append(bodies, b)
		return &http.Response{StatusCode: 200, Body: b, Request: r}, nil
	})
	rec := newRecorder(&scripted{})
	require.NoError(t, rec.Update(balancer.Endpoints("a:1", "b:1")))
	tr := newTestTransport(t, rec, lbhttp.Config{Base: base, AttemptTimeout: 30 * time.Millisecond, MaxAttempts: 2})
	_, err := tr.RoundTrip(get(t, "http://svc/"))
	require.ErrorIs(t, err, lbhttp.ErrAttemptTimeout)
	rec.waitDone(t)
	picks, _ := rec.snapshot()
	require.Len(t, picks, 2)
	for i, p := range picks {
		assert.ErrorIs(t, p.result().Err, lbhttp.ErrAttemptTimeout, "pick %d", i)
		assert.True(t, bodies[i].closed.Load(), "late body %d closed", i)
	}
}

// TestTimeoutsOff checks that negative timeouts turn them off: the
// caller's own deadline is then the only bound, a failure as before.
func TestTimeoutsOff(t *testing.T) {
	s := stallServer(t, nil)
	rec := newRecorder(&scripted{})
	require.NoError(t, rec.Update(balancer.Endpoints(hostOf(s))))
	tr := newTestTransport(t, rec, lbhttp.Config{Base: newBase(t), AttemptTimeout: -1, RequestTimeout: -1, IdleTimeout: -1})
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	_, err := tr.RoundTrip(get(t, "http://svc/").WithContext(ctx))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.False(t, errors.Is(err, lbhttp.ErrAttemptTimeout))
	rec.waitDone(t)
	picks, _ := rec.snapshot()
	require.Len(t, picks, 1)
	assert.ErrorIs(t, picks[0].result().Err, context.DeadlineExceeded)
}

// TestProxyTimeout checks what a proxy's client sees when the only
// backend stalls: 504 Gateway Timeout after the attempt timeout, for
// each of its attempts on the one backend there is.
func TestProxyTimeout(t *testing.T) {
	var hits atomic.Int64
	s := stallServer(t, &hits)
	rec := newRecorder(&scripted{})
	require.NoError(t, rec.Update(balancer.Endpoints(hostOf(s))))
	proxy := startProxy(t, rec, lbhttp.Config{AttemptTimeout: 100 * time.Millisecond, MaxAttempts: 2})
	start := time.Now()
	resp, err := http.Get(proxy.URL)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusGatewayTimeout, resp.StatusCode)
	assert.Less(t, time.Since(start), 2*100*time.Millisecond+margin)
	rec.waitDone(t)
	assert.EqualValues(t, 2, hits.Load())
}

// TestTimeoutCallerCancelRace sends requests from 8 clients to a backend
// answering in 0 to 2 ms, cancelling half of them at 0 to 3 ms, through a
// Transport (whose guards register with the request's context at once)
// and through NewProxy's (whose guards register once an attempt has run
// a while: here 1 ms, around the backend's answers). The guards' reuse
// after their linker fired, or raced with a release, must never end
// another request: every request not cancelled succeeds, every cancelled
// one ends within the margin, and each pick gets one Done. Run it under
// -race.
func TestTimeoutCallerCancelRace(t *testing.T) {
	var n atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d := time.Duration(n.Add(1)%9) * 250 * time.Microsecond
		select {
		case <-time.After(d):
			_, _ = io.WriteString(w, "ok")
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(s.Close)
	for _, proxied := range []bool{false, true} {
		t.Run(fmt.Sprintf("proxied=%v", proxied), func(t *testing.T) {
			rec := newRecorder(&scripted{})
			require.NoError(t, rec.Update(balancer.Endpoints(hostOf(s))))
			cfg := lbhttp.Config{Base: newBase(t), MaxAttempts: 1}
			tr := newTestTransport(t, rec, cfg)
			if proxied {
				proxy, err := lbhttp.NewProxy(rec, cfg)
				require.NoError(t, err)
				tr = proxy.Transport.(*lbhttp.Transport)
				lbhttp.SetLinkAfter(tr, time.Millisecond)
			}
			const clients, each = 8, 40
			var failed, slow atomic.Int64
			var wg sync.WaitGroup
			for c := range clients {
				wg.Go(func() {
					for i := range each {
						ctx, cancel := context.WithCancel(context.Background())
						cancelled := (c+i)%2 == 0
						if cancelled {
							time.AfterFunc(time.Duration((c*each+i)%13)*250*time.Microsecond, cancel)
						}
						start := time.Now()
						resp, err := tr.RoundTrip(get(t, "http://svc/").WithContext(ctx))
						if err == nil {
							_, err = io.ReadAll(resp.Body)
							_ = resp.Body.Close()
						}
						if time.Since(start) > margin {
							slow.Add(1)
						}
						if err != nil && !cancelled {
							failed.Add(1)
						}
						cancel()
					}
				})
			}
			wg.Wait()
			assert.Zero(t, failed.Load(), "requests never cancelled that failed")
			assert.Zero(t, slow.Load(), "requests that took longer than the margin")
			rec.waitDone(t)
			picks, _ := rec.snapshot()
			assert.Len(t, picks, clients*each)
		})
	}
}

// TestProxyClientGone checks what becomes of a proxied attempt whose
// client leaves while the backend has not answered: it is cancelled, and
// reported abandoned, once it has run 100 ms (the wait before a proxied
// attempt registers with the request's context), not at the attempt
// timeout.
func TestProxyClientGone(t *testing.T) {
	got, ended := make(chan time.Time, 1), make(chan time.Time, 1)
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- time.Now()
		<-r.Context().Done()
		ended <- time.Now()
	}))
	t.Cleanup(s.Close)
	rec := newRecorder(&scripted{})
	require.NoError(t, rec.Update(balancer.Endpoints(hostOf(s))))
	proxy := startProxy(t, rec, lbhttp.Config{AttemptTimeout: time.Minute})
	// The client leaves once the backend has the request: a deadline of
	// its own could pass before the request got there on a busy machine,
	// and the test would wait for it for ever.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", proxy.URL, nil)
	require.NoError(t, err)
	errc := make(chan error, 1)
	go func() {
		_, err := http.DefaultClient.Do(req)
		errc <- err
	}()
	var start time.Time
	select {
	case start = <-got:
	case <-time.After(margin):
		t.Fatal("the backend never got the request")
	}
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
	select {
	case end := <-ended:
		assert.GreaterOrEqual(t, end.Sub(start), 90*time.Millisecond, "a proxied attempt registers after 100 ms")
		assert.Less(t, end.Sub(start), 100*time.Millisecond+margin)
	case <-time.After(100*time.Millisecond + margin):
		t.Fatal("the backend's request was not cancelled")
	}
	rec.waitDone(t)
	picks, _ := rec.snapshot()
	require.Len(t, picks, 1)
	assert.True(t, picks[0].result().Abandoned())
}
