package lbhttp_test

import (
	"bufio"
	"io"
	"net"
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

// upgradeHeader returns a header asking for (or, on a response, switching
// to) protocol; an empty protocol gives an empty header.
func upgradeHeader(protocol string) http.Header {
	h := http.Header{}
	if protocol != "" {
		h.Set("Connection", "Upgrade")
		h.Set("Upgrade", protocol)
	}
	return h
}

// fakeConn is a 101 response body: writable, and it remembers being closed.
type fakeConn struct {
	rwc
	closed atomic.Int32
}

func (c *fakeConn) Close() error { c.closed.Add(1); return nil }

// readOnly is a 101 response body that cannot be written.
type readOnly struct{ fakeBody }

// TestUpgradeRefused checks that a 101 Switching Protocols that
// ReverseProxy would not carry (to a protocol the request did not ask
// for, a protocol name that is not printable, a body that cannot be
// written) is a failed attempt: the body is closed, Done reports an
// error, and RoundTrip returns it; and that a 101 to the protocol asked
// for, in any case, is handed over writable, with Done at Close.
func TestUpgradeRefused(t *testing.T) {
	tests := []struct {
		name         string
		asked, given string // the request's and the response's Upgrade
		readOnly     bool
		ok           bool
	}{
		{"asked for none", "", "evil", false, false},
		{"no Upgrade on either side", "", "", false, false},
		{"another protocol", "websocket", "evil", false, false},
		{"not printable", "web\x01socket", "web\x01socket", false, false},
		{"body not writable", "websocket", "websocket", true, false},
		{"the protocol asked for", "websocket", "websocket", false, true},
		{"the protocol asked for, other case", "websocket", "WebSocket", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(&scripted{})
			require.NoError(t, rec.Update(balancer.Endpoints("a:1")))
			conn := &fakeConn{}
			ro := &readOnly{fakeBody{r: strings.NewReader("")}}
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp := &http.Response{StatusCode: http.StatusSwitchingProtocols, Header: upgradeHeader(tt.given), Body: conn, Request: r}
				if tt.readOnly {
					resp.Body = ro
				}
				return resp, nil
			})
			tr := newTestTransport(t, rec, lbhttp.Config{Base: base, MaxAttempts: 1})
			req := get(t, "http://svc/ws")
			req.Header = upgradeHeader(tt.asked)
			resp, err := tr.RoundTrip(req)
			if tt.ok {
				require.NoError(t, err)
				w, ok := resp.Body.(io.ReadWriteCloser)
				require.True(t, ok, "a 101 body must be an io.ReadWriteCloser")
				picks, _ := rec.snapshot()
				assert.Zero(t, picks[0].dones.Load(), "Done before the session ended")
				require.NoError(t, w.Close())
				rec.waitDone(t)
				assert.Equal(t, balancer.Result{}, picks[0].result())
				assert.EqualValues(t, 1, conn.closed.Load())
				return
			}
			require.Error(t, err)
			assert.Nil(t, resp)
			assert.Contains(t, err.Error(), "lbhttp: ")
			rec.waitDone(t)
			picks, _ := rec.snapshot()
			require.Len(t, picks, 1)
			res := picks[0].result()
			assert.Equal(t, err, res.Err, "Done gets the error the caller gets")
			assert.False(t, res.Abandoned(), "the backend broke the protocol: a failure")
			if tt.readOnly {
				assert.True(t, ro.closed.Load(), "the refused body is closed")
			} else {
				assert.EqualValues(t, 1, conn.closed.Load(), "the refused body is closed")
			}
		})
	}
}

// rawBackend answers the first request on each connection with a canned
// answer, then echoes what it reads until the connection closes. It counts
// the connections it accepted and those the other side has closed.
type rawBackend struct {
	ln               net.Listener
	accepted, closed atomic.Int32
	wg               sync.WaitGroup
	mu               sync.Mutex
	conns            []net.Conn
}

func startRawBackend(t *testing.T, answer string) *rawBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &rawBackend{ln: ln}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.accepted.Add(1)
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
			b.wg.Add(1)
			go func() {
				defer b.wg.Done()
				defer b.closed.Add(1)
				defer c.Close()
				br := bufio.NewReader(c)
				if _, err := http.ReadRequest(br); err != nil {
					return
				}
				if _, err := io.WriteString(c, answer); err != nil {
					return
				}
				_, _ = io.Copy(c, br) // until the proxy closes its end
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			_ = c.Close()
		}
		b.mu.Unlock()
		b.wg.Wait()
	})
	return b
}

// waitClosed waits, at most five seconds, until the proxy has closed every
// connection the backend accepted.
func (b *rawBackend) waitClosed(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for b.closed.Load() < b.accepted.Load() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	assert.Positive(t, b.accepted.Load())
	assert.Equal(t, b.accepted.Load(), b.closed.Load(), "backend connections left open by the proxy")
}

// switchingBackend starts a rawBackend answering 101 Switching Protocols
// to protocol, and a recorder whose set is that backend.
func switchingBackend(t *testing.T, protocol string) (*rawBackend, *recorder) {
	t.Helper()
	be := startRawBackend(t, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+protocol+"\r\n\r\n")
	rec := newRecorder(&scripted{})
	require.NoError(t, rec.Update(balancer.Endpoints(be.ln.Addr().String())))
	return be, rec
}

// TestProxyUpgradeMismatch sends a plain GET through the real proxy to a
// backend that answers 101 Switching Protocols to a protocol nobody asked
// for. ReverseProxy refuses to switch and drops the response without
// closing it; the Transport must have refused it first: the client gets
// 502, every pick gets one Done, a failure, and the backend's connections
// are closed.
func TestProxyUpgradeMismatch(t *testing.T) {
	be, rec := switchingBackend(t, "evil")
	proxy := startProxy(t, rec, lbhttp.Config{})
	for range 3 {
		assert.Equal(t, http.StatusBadGateway, statusOf(t, get(t, proxy.URL)))
	}
	rec.waitDone(t)
	picks, _ := rec.snapshot()
	for _, p := range picks {
		r := p.result()
		assert.Error(t, r.Err)
		assert.False(t, r.Abandoned())
	}
	be.waitClosed(t)
}

// statusOf sends req with http.DefaultClient, reads and closes the body,
// and returns the status.
func statusOf(t *testing.T, req *http.Request) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// hideHijack hides the Hijacker of the ResponseWriter, as a middleware
// whose wrapper implements neither Hijack nor Unwrap does.
type hideHijack struct{ http.Handler }

func (h hideHijack) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.Handler.ServeHTTP(struct{ http.ResponseWriter }{w}, r)
}

// TestProxyUpgradeNoHijack is a WebSocket upgrade the backend accepts
// through a proxy whose ResponseWriter cannot be hijacked. ReverseProxy
// answers 502 and returns without closing the backend's connection; the
// end of the request's context must close it: one Done, Result{}, and the
// backend's connection closed.
func TestProxyUpgradeNoHijack(t *testing.T) {
	be, rec := switchingBackend(t, "websocket")
	proxy, err := lbhttp.NewProxy(rec, lbhttp.Config{ErrorLog: testLog(t)})
	require.NoError(t, err)
	front := httptest.NewServer(hideHijack{proxy})
	t.Cleanup(func() {
		front.Close()
		proxy.Transport.(*lbhttp.Transport).CloseIdleConnections()
	})
	req := get(t, front.URL)
	req.Header = upgradeHeader("websocket")
	assert.Equal(t, http.StatusBadGateway, statusOf(t, req))
	rec.waitDone(t)
	picks, _ := rec.snapshot()
	require.Len(t, picks, 1)
	assert.Equal(t, balancer.Result{}, picks[0].result())
	be.waitClosed(t)
}

// TestProxyUpgrade is a WebSocket-like session through the real proxy:
// the backend switches, echoes, and the session's end gives one Done,
// Result{}, and closes the backend's connection.
func TestProxyUpgrade(t *testing.T) {
	be, rec := switchingBackend(t, "websocket")
	proxy := startProxy(t, rec, lbhttp.Config{})
	c, err := net.DialTimeout("tcp", strings.TrimPrefix(proxy.URL, "http://"), 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = io.WriteString(c, "GET /ws HTTP/1.1\r\nHost: svc\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	_, err = io.WriteString(c, "ping\n")
	require.NoError(t, err)
	line, err := readLine(br)
	require.NoError(t, err)
	assert.Equal(t, "ping", line)
	picks, _ := rec.snapshot()
	require.Len(t, picks, 1)
	assert.Zero(t, picks[0].dones.Load(), "Done during the session")
	require.NoError(t, c.Close())
	rec.waitDone(t)
	assert.Equal(t, balancer.Result{}, picks[0].result())
	be.waitClosed(t)
}
