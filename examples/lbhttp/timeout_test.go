package lbhttp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/lbhttp"
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
		tr := newTestTransport(t, rec, lbhttp.Config{Base: newBase(t), IdleTimeout: idle})
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
// attempt timeout still stops the attempt at once, and that the attempt
// is abandoned, not a failure.
func TestTimeoutCallerGivesUp(t *testing.T) {
	s := stallServer(t, nil)
	rec := newRecorder(&scripted{})
	require.NoError(t, rec.Update(balancer.Endpoints(hostOf(s))))
	tr := newTestTransport(t, rec, lbhttp.Config{Base: newBase(t), AttemptTimeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, err := tr.RoundTrip(get(t, "http://svc/").WithContext(ctx))
	require.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(start), margin)
	rec.waitDone(t)
	picks, _ := rec.snapshot()
	require.Len(t, picks, 1)
	assert.True(t, picks[0].result().Abandoned())
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
