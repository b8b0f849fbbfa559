package proxycmd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/health"
)

// TestRun checks Run's exit statuses and what it prints for each.
func TestRun(t *testing.T) {
	b := backend(t, "b")
	tests := []struct {
		name    string
		args    []string
		options func(cancel func()) func(Config) (Options, error)
		code    int
		want    []string // in stderr
		exact   string   // all of stderr, when set
	}{
		{name: "bad flag", args: []string{"-backends", "a:1", "-max-attempts", "0"}, code: ExitUsage,
			exact: "myproxy: -max-attempts: 0 is below 1\nRun myproxy -h for the flags.\n"},
		{name: "dns interval too short", args: []string{"-dns", "localhost:9", "-dns-interval", "1ns"}, code: ExitUsage,
			exact: "myproxy: -dns-interval: 1ns is below the minimum of 1s\nRun myproxy -h for the flags.\n"},
		{name: "help", args: []string{"-h"}, code: ExitOK, want: []string{"Usage: myproxy", "-trusted-proxies"}},
		{name: "options fail", args: []string{"-backends", "a:1"}, code: ExitError, want: []string{"level=ERROR", "myproxy: boom"},
			options: func(func()) func(Config) (Options, error) {
				return func(Config) (Options, error) { return Options{}, errors.New("boom") }
			}},
		{name: "listen fails", args: []string{"-backends", "127.0.0.1:1", "-listen", "127.0.0.1:99999"}, code: ExitError,
			want: []string{"myproxy: listen tcp", "invalid port"}},
		{name: "served and stopped", args: []string{"-backends", hostOf(b), "-listen", "127.0.0.1:0"}, code: ExitOK,
			want: []string{"level=INFO msg=listening algo=leastconn backends=1 proxy=127.0.0.1:"},
			options: func(cancel func()) func(Config) (Options, error) {
				return func(Config) (Options, error) { cancel(); return Options{}, nil } // stop at once
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var options func(Config) (Options, error)
			if tt.options != nil {
				options = tt.options(cancel)
			}
			var stderr bytes.Buffer
			assert.Equal(t, tt.code, NewFlags("myproxy").Run(ctx, tt.args, &stderr, options))
			for _, want := range tt.want {
				assert.Contains(t, stderr.String(), want)
			}
			if tt.exact != "" {
				assert.Equal(t, tt.exact, stderr.String())
			}
			if tt.code != ExitError {
				assert.NotContains(t, stderr.String(), "level=ERROR")
			}
		})
	}
}

// recorder is a decorator as lbmetrics' is: it passes every call on to the
// health.Balancer, counting picks and Dones and keeping the last set.
type recorder struct {
	inner        *health.Balancer
	picks, dones atomic.Int64
	set          atomic.Pointer[[]string] // the IDs of the last Update
}

var (
	_ balancer.Balancer = (*recorder)(nil)
	_ balancer.Feedback = (*recorder)(nil)
)

func (r *recorder) Pick(req balancer.Request) (balancer.Backend, error) {
	r.picks.Add(1)
	return r.inner.Pick(req)
}

func (r *recorder) Done(b balancer.Backend, res balancer.Result) {
	r.dones.Add(1)
	r.inner.Done(b, res)
}

func (r *recorder) Update(bs []balancer.Backend) error {
	ids := make([]string, len(bs))
	for i, b := range bs {
		ids[i] = b.ID()
	}
	r.set.Store(&ids)
	return r.inner.Update(bs)
}

// wrapInto is an Options.Wrap that puts a recorder, stored in *rec, around
// health.
func wrapInto(rec **recorder) func(*health.Balancer) (balancer.Balancer, error) {
	return func(h *health.Balancer) (balancer.Balancer, error) {
		*rec = &recorder{inner: h}
		return *rec, nil
	}
}

// TestServeOptions runs Serve with every Option: a decorator around health
// that must be given the backends and see every pick and Done, an OnChange
// hook that must hear of the backend ejected for refusing a connection, and
// an extra server, served beside the proxy and stopped with it. Nothing
// Serve started may outlive it.
func TestServeOptions(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	live := backend(t, "live")
	dead := backend(t, "dead")
	dead.Close() // its port now refuses connections
	c, err := NewFlags("p").Parse([]string{"-listen", "127.0.0.1:0", "-backends", hostOf(live) + "," + hostOf(dead), "-algo", "rr"}, io.Discard)
	require.NoError(t, err)

	var rec *recorder
	changes := make(chan health.Change, 16)
	admin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "admin page") })
	addrs, stop := startServe(t, c, Options{
		OnChange: func(ch health.Change) {
			select {
			case changes <- ch:
			default:
			}
		},
		Wrap:    wrapInto(&rec),
		Servers: []Server{{Name: "admin", Addr: "127.0.0.1:0", Handler: admin}},
	})

	require.Len(t, addrs, 2, "the proxy's address and the admin server's")
	assert.Equal(t, []string{hostOf(live), hostOf(dead)}, *rec.set.Load(), "the backends went to the decorator's Update")
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	assert.Equal(t, "admin page", get(t, client, "http://"+addrs[1]+"/"))

	// With round robin over two backends, one of the first two requests
	// goes to the dead one first: refused, retried on the live one, and
	// the dead one ejected at once.
	const n = 10
	for range n {
		assert.Equal(t, "live", get(t, client, "http://"+addrs[0]+"/"))
	}
	select {
	case ch := <-changes:
		assert.Equal(t, hostOf(dead), ch.ID)
		assert.Equal(t, health.Ejected, ch.New)
		assert.Equal(t, health.ReasonRefused, ch.Reason)
	case <-time.After(5 * time.Second):
		t.Fatal("OnChange heard of no change within 5s")
	}
	// Done comes when the proxy has copied the body, an instant after the
	// client may have read it.
	deadline := time.Now().Add(5 * time.Second)
	for rec.dones.Load() < rec.picks.Load() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	assert.Greater(t, rec.picks.Load(), int64(n), "every pick went through the decorator, the refused one too")
	assert.Equal(t, rec.picks.Load(), rec.dones.Load(), "every Done went through the decorator")

	stop()
	_, err = client.Get("http://" + addrs[1] + "/")
	assert.Error(t, err, "the admin server stopped with the proxy")
	client.CloseIdleConnections()
	live.Close()
	noGoroutineLeft(t, goroutines)
}

// TestServeDNSUpdatesWrap checks that with -dns the resolved addresses go to
// the decorator's Update, not to the health.Balancer inside it.
func TestServeDNSUpdatesWrap(t *testing.T) {
	b := backend(t, "resolved")
	_, port, _ := strings.Cut(hostOf(b), ":")
	c, err := NewFlags("p").Parse([]string{"-listen", "127.0.0.1:0", "-dns", "localhost:" + port}, io.Discard)
	require.NoError(t, err)
	var rec *recorder
	_, stop := startServe(t, c, Options{Wrap: wrapInto(&rec)})
	defer stop()
	assert.Contains(t, *rec.set.Load(), "127.0.0.1:"+port)
}

// starter is a recorder with Start and Close that pass them on, counting,
// as a decorator does (balancer's doc, "Decorators").
type starter struct {
	*recorder
	starts, closes atomic.Int64
}

func (s *starter) Start(ctx context.Context) error {
	s.starts.Add(1)
	return s.inner.Start(ctx)
}

func (s *starter) Close() error {
	s.closes.Add(1)
	return s.inner.Close()
}

// TestServeStartsAndClosesWrap checks that a decorator's Start and Close
// are called, once each, and that health is started whether the decorator
// passes Start on (starter) or not (recorder): in both cases a second
// Start of health finds it started, and after the proxy stops, closed.
func TestServeStartsAndClosesWrap(t *testing.T) {
	b := backend(t, "one")
	c, err := NewFlags("p").Parse([]string{"-listen", "127.0.0.1:0", "-backends", hostOf(b)}, io.Discard)
	require.NoError(t, err)
	for _, passesOn := range []bool{true, false} {
		t.Run(fmt.Sprintf("passes on=%v", passesOn), func(t *testing.T) {
			var (
				st *starter
				h  *health.Balancer
			)
			_, stop := startServe(t, c, Options{Wrap: func(hb *health.Balancer) (balancer.Balancer, error) {
				h = hb
				if passesOn {
					st = &starter{recorder: &recorder{inner: hb}}
					return st, nil
				}
				return &recorder{inner: hb}, nil
			}})
			assert.ErrorIs(t, h.Start(context.Background()), balancer.ErrStarted, "health was started")
			if passesOn {
				assert.Equal(t, int64(1), st.starts.Load())
			}
			stop()
			assert.ErrorIs(t, h.Start(context.Background()), balancer.ErrClosed, "health was closed")
			if passesOn {
				assert.Equal(t, int64(1), st.closes.Load())
			}
		})
	}
}

// TestServeEveryAlgorithm serves a request through the proxy with each
// algorithm of catalog.Algorithms().
func TestServeEveryAlgorithm(t *testing.T) {
	b1, b2 := backend(t, "one"), backend(t, "two")
	for _, a := range catalog.Algorithms() {
		t.Run(a.Name, func(t *testing.T) {
			c, err := NewFlags("p").Parse([]string{"-listen", "127.0.0.1:0", "-backends", hostOf(b1) + "," + hostOf(b2), "-algo", a.Name}, io.Discard)
			require.NoError(t, err)
			addrs, stop := startServe(t, c, Options{})
			defer stop()
			client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
			defer client.CloseIdleConnections()
			assert.Contains(t, []string{"one", "two"}, get(t, client, "http://"+addrs[0]+"/"))
		})
	}
}

// TestServeTimeouts checks that the timeout and hedging flags reach the
// proxy: a backend that never answers costs a client -attempt-timeout per
// attempt, then a 504; with -hedge-after, a request to it is answered by
// the other backend long before its attempt timeout.
func TestServeTimeouts(t *testing.T) {
	quit := make(chan struct{})
	stalled := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-quit:
		}
	}))
	defer stalled.Close()
	defer close(quit)
	live := backend(t, "live")
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()

	c, err := NewFlags("p").Parse([]string{"-listen", "127.0.0.1:0", "-backends", hostOf(stalled), "-attempt-timeout", "100ms", "-max-attempts", "2"}, io.Discard)
	require.NoError(t, err)
	addrs, stop := startServe(t, c, Options{})
	start := time.Now()
	resp, err := client.Get("http://" + addrs[0] + "/")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusGatewayTimeout, resp.StatusCode)
	assert.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond, "two attempts of 100ms")
	assert.Less(t, time.Since(start), 5*time.Second)
	stop()

	// rr's first pick is random: whichever comes first, the answer is
	// the live backend's, well before the stalled one's attempt timeout.
	c, err = NewFlags("p").Parse([]string{"-listen", "127.0.0.1:0", "-backends", hostOf(stalled) + "," + hostOf(live), "-algo", "rr",
		"-attempt-timeout", "5s", "-hedge-after", "20ms"}, io.Discard)
	require.NoError(t, err)
	addrs, stop = startServe(t, c, Options{})
	defer stop()
	for range 4 {
		start := time.Now()
		assert.Equal(t, "live", get(t, client, "http://"+addrs[0]+"/"))
		assert.Less(t, time.Since(start), 4*time.Second, "hedged, not timed out")
	}
}

// TestServeH2C checks that -h2c sends to the backends over HTTP/2
// without TLS.
func TestServeH2C(t *testing.T) {
	h2 := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Proto) }))
	h2.Config.Protocols = new(http.Protocols)
	h2.Config.Protocols.SetHTTP1(true)
	h2.Config.Protocols.SetUnencryptedHTTP2(true)
	h2.Start()
	defer h2.Close()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	for _, tt := range []struct {
		flags []string
		want  string
	}{{nil, "HTTP/1.1"}, {[]string{"-h2c"}, "HTTP/2.0"}} {
		c, err := NewFlags("p").Parse(append([]string{"-listen", "127.0.0.1:0", "-backends", hostOf(h2)}, tt.flags...), io.Discard)
		require.NoError(t, err)
		addrs, stop := startServe(t, c, Options{})
		assert.Equal(t, tt.want, get(t, client, "http://"+addrs[0]+"/"), "%v", tt.flags)
		stop()
	}
}

// TestServeSticky checks that -sticky-cookie pins a client to one of
// three backends by a cookie of that name, and that without it the
// requests spread.
func TestServeSticky(t *testing.T) {
	var backends []string
	for i := range 3 {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "b%d", i) }))
		defer s.Close()
		backends = append(backends, hostOf(s))
	}
	for _, tt := range []struct {
		flags  []string
		pinned bool
	}{{nil, false}, {[]string{"-sticky-cookie", "srv"}, true}} {
		c, err := NewFlags("p").Parse(append([]string{"-listen", "127.0.0.1:0", "-algo", "rr", "-backends", strings.Join(backends, ",")}, tt.flags...), io.Discard)
		require.NoError(t, err)
		addrs, stop := startServe(t, c, Options{})
		jar, err := cookiejar.New(nil)
		require.NoError(t, err)
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}, Jar: jar}
		seen := map[string]bool{}
		for range 9 {
			seen[get(t, client, "http://"+addrs[0]+"/")] = true
		}
		u, _ := url.Parse("http://" + addrs[0] + "/")
		if tt.pinned {
			assert.Len(t, seen, 1, "%v", seen)
			require.Len(t, jar.Cookies(u), 1)
			assert.Equal(t, "srv", jar.Cookies(u)[0].Name)
		} else {
			assert.Len(t, seen, 3, "rr spreads: %v", seen)
			assert.Empty(t, jar.Cookies(u))
		}
		client.CloseIdleConnections()
		stop()
	}
}

// TestServeFails checks that Serve returns an error, serving nothing,
// listening on nothing and leaving no goroutine behind, when a server's
// address cannot be listened on or Wrap fails.
func TestServeFails(t *testing.T) {
	goroutines := runtime.NumGoroutine()
	// A port that was free a moment ago, for the proxy.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	free := ln.Addr().String()
	require.NoError(t, ln.Close())

	c, err := NewFlags("p").Parse([]string{"-listen", free, "-backends", "127.0.0.1:1"}, io.Discard)
	require.NoError(t, err)
	wrapped := func(b balancer.Balancer, err error) func(*health.Balancer) (balancer.Balancer, error) {
		return func(*health.Balancer) (balancer.Balancer, error) { return b, err }
	}
	tests := []struct {
		name string
		o    Options
		want string
	}{
		{"bad extra address", Options{Servers: []Server{{Name: "admin", Addr: "127.0.0.1:99999", Handler: http.NotFoundHandler()}}}, "invalid port"},
		{"taken extra address", Options{Servers: []Server{{Name: "admin", Addr: free, Handler: http.NotFoundHandler()}}}, "address already in use"},
		{"wrap fails", Options{Wrap: wrapped(nil, errors.New("boom"))}, "boom"},
		{"wrap returns nil", Options{Wrap: wrapped(nil, nil)}, "proxycmd: Options.Wrap returned no balancer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Start(t.Context(), c, slog.New(slog.DiscardHandler), tt.o)
			require.Error(t, err)
			assert.Nil(t, p)
			assert.Contains(t, err.Error(), tt.want)
			ln, err := net.Listen("tcp", free)
			require.NoError(t, err, "the proxy's listener was closed")
			ln.Close()
		})
	}
	err = Serve(t.Context(), Config{}, slog.New(slog.DiscardHandler), Options{})
	assert.EqualError(t, err, "proxycmd: Config.Algorithm has no New")
	noGoroutineLeft(t, goroutines)
}

// startServe Starts c with o until the returned stop is called, and
// returns the addresses served on; stop checks that everything stops,
// without error, within 15 seconds.
func startServe(t *testing.T, c Config, o Options) (addrs []string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	p, err := Start(ctx, c, slog.New(slog.NewTextHandler(t.Output(), nil)), o)
	if err != nil {
		cancel()
		t.Fatalf("Start: %v", err)
	}
	return p.Addrs, func() {
		cancel()
		timeout := time.NewTimer(15 * time.Second)
		defer timeout.Stop()
		select {
		case <-timeout.C:
			t.Error("the proxy did not stop within 15s of its context ending")
		case <-p.Done():
			assert.NoError(t, p.Wait())
		}
	}
}

// backend answers every request with its name.
func backend(t *testing.T, name string) *httptest.Server {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, name) }))
	t.Cleanup(s.Close)
	return s
}

func hostOf(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

// get returns the body of a GET of url, which must answer 200.
func get(t *testing.T, client *http.Client, url string) string {
	t.Helper()
	resp, err := client.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	return string(body)
}

// noGoroutineLeft waits up to 5s for the goroutine count to fall back to
// before, and fails with every stack if it does not.
func noGoroutineLeft(t *testing.T, before int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			stacks := make([]byte, 1<<20)
			stacks = stacks[:runtime.Stack(stacks, true)]
			t.Errorf("%d goroutines left, %d before:\n%s", runtime.NumGoroutine(), before, stacks)
			return
		}
	}
}

// TestChecksRunDuringDrain checks that the health checks go on while the
// requests in flight drain after the context ends (a draining proxy must
// still eject a backend that dies), until the proxy stops.
func TestChecksRunDuringDrain(t *testing.T) {
	var probes atomic.Int32
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	b := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			probes.Add(1)
			return
		}
		entered <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
		}
		io.WriteString(w, "slow")
	}))
	defer b.Close()
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	c, err := NewFlags("p").Parse([]string{"-listen", "127.0.0.1:0", "-backends", hostOf(b),
		"-health-path", "/healthz", "-health-interval", "10ms"}, io.Discard)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	p, err := Start(ctx, c, slog.New(slog.NewTextHandler(t.Output(), nil)), Options{})
	require.NoError(t, err)

	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	answer := make(chan string, 1)
	go func() {
		resp, err := client.Get("http://" + p.Addrs[0] + "/slow")
		if err != nil {
			answer <- err.Error()
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answer <- string(body)
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the backend")
	}

	cancel() // the drain begins; the request is still in flight
	atCancel := probes.Load()
	deadline := time.Now().Add(5 * time.Second)
	for probes.Load() < atCancel+5 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	assert.GreaterOrEqual(t, probes.Load(), atCancel+5, "probes during the drain (%d at its start)", atCancel)
	select {
	case <-p.Done():
		t.Fatal("the proxy stopped with a request in flight")
	default:
	}

	close(release)
	released = true
	assert.Equal(t, "slow", <-answer, "the request in flight finished")
	select {
	case <-p.Done():
		require.NoError(t, p.Wait())
	case <-time.After(15 * time.Second):
		t.Fatal("the proxy did not stop once the drain ended")
	}
}
