package lbhttp_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/iphash"
	"github.com/lbkit/lbkit/lbhttp"
)

// backend is one loopback server that answers with its name after a short
// pause, so that requests are in flight when it is killed.
type backend struct {
	name string
	srv  *httptest.Server
	hits atomic.Int64
}

func startBackends(t *testing.T, n int, pause time.Duration) []*backend {
	t.Helper()
	bs := make([]*backend, n)
	for i := range bs {
		b := &backend{name: fmt.Sprintf("b%d", i)}
		b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b.hits.Add(1)
			time.Sleep(pause)
			w.Header().Set("X-Backend", b.name)
			w.Header().Set("X-Seen-XFF", r.Header.Get("X-Forwarded-For"))
			_, _ = io.WriteString(w, b.name)
		}))
		t.Cleanup(b.srv.Close)
		bs[i] = b
	}
	return bs
}

// kill closes the backend's listener, so new connections are refused, and
// every connection it has, idle or busy.
func (b *backend) kill() {
	_ = b.srv.Listener.Close()
	b.srv.CloseClientConnections()
}

// testLog sends the proxy's error log to the test's.
func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// startProxy serves NewProxy(p, cfg) on loopback.
func startProxy(t *testing.T, p balancer.Picker, cfg lbhttp.Config) *httptest.Server {
	t.Helper()
	if cfg.ErrorLog == nil {
		cfg.ErrorLog = testLog(t)
	}
	proxy, err := lbhttp.NewProxy(p, cfg)
	require.NoError(t, err)
	s := httptest.NewServer(proxy)
	t.Cleanup(func() {
		s.Close()
		proxy.Transport.(*lbhttp.Transport).CloseIdleConnections()
	})
	return s
}

// clientFrom returns an HTTP client whose connections come from the given
// loopback address, so that the proxy sees a distinct client IP.
func clientFrom(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 4}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// outcome is one client request.
type outcome struct {
	client  int
	backend string
	phase   int // 0: finished before the kill began; 1: started after it ended; 2: overlapped it
	err     error
}

// TestKillBackend is the end-to-end failover test of issue 10: four
// loopback backends behind the real ReverseProxy, sixteen clients (each
// from its own 127.0.0.x address) sending GETs concurrently, and one
// backend's listener and connections closed a third of the way through.
// For every algorithm: no client request fails, every pick gets exactly
// one Done, and nothing is served by the dead backend afterwards (without
// health, with the retry budget off: see killTest). For the
// hash pickers (iphash, ring, maglev), the clients of the live backends
// keep their backend and only the dead backend's clients move, each to one
// new backend. Run with -v for the figures.
func TestKillBackend(t *testing.T) {
	for _, algo := range catalog.Algorithms() {
		t.Run("algo="+algo.Name+"/health=off", func(t *testing.T) {
			killTest(t, algo, nil)
		})
	}
}

// TestKillBackendHealth is TestKillBackend with the picker wrapped in
// health (passive checks only, Start running): the dead backend's first
// refused connection ejects it, and the algorithm is Updated with the
// three others. Still no client request fails. Consistent hashing (ring,
// maglev) keeps the live backends' clients in place across that Update;
// iphash, hashing modulo the set's size, moves most of them (logged, not
// asserted: that is iphash's documented behaviour).
func TestKillBackendHealth(t *testing.T) {
	for _, algo := range catalog.Algorithms() {
		t.Run("algo="+algo.Name+"/health=passive", func(t *testing.T) {
			killTest(t, algo, func(inner balancer.Balancer) balancer.Balancer {
				h, err := health.New(inner, health.Config{})
				require.NoError(t, err)
				require.NoError(t, h.Start(t.Context()))
				t.Cleanup(func() { _ = h.Close() })
				return h
			})
		})
	}
}

// killTest runs the kill scenario for algo, its picker wrapped by wrap if
// not nil.
func killTest(t *testing.T, algo catalog.Algorithm, wrap func(balancer.Balancer) balancer.Balancer) {
	const (
		clients  = 16
		perUser  = 30
		total    = clients * perUser
		killAt   = total / 3
		pauseDur = time.Millisecond
	)
	{
		{
			bs := startBackends(t, 4, pauseDur)
			byHost := map[string]*backend{}
			var set []balancer.Backend
			for i, b := range bs {
				byHost[hostOf(b.srv)] = b
				w := 1
				if algo.Weighted {
					w = 4 - i
				}
				set = append(set, balancer.NewEndpoint(hostOf(b.srv), w))
			}
			picker := algo.New()
			if wrap != nil {
				picker = wrap(picker)
			}
			rec := newRecorder(picker)
			require.NoError(t, rec.Update(set))
			// Without health, the dead backend's refusals are retried
			// for as long as it stays in the set, and leastconn, to
			// which a refusing backend looks idle, sends it most
			// requests: more retries than the default budget allows
			// (20% of requests plus 10 a second), so some fail once it
			// is spent. That is the budget doing
			// its job; this test measures failover itself, and turns
			// the budget off without health. With health, as the ready
			// proxy runs, the default budget stays on.
			proxy := startProxy(t, rec, lbhttp.Config{NoBudget: wrap == nil})

			var (
				done     atomic.Int64
				killOnce sync.Once
				killNow  = make(chan struct{})
				killed   = make(chan struct{})
				started  atomic.Bool // the kill has begun
				victim   atomic.Pointer[backend]
				mu       sync.Mutex
				results  []outcome
				wg       sync.WaitGroup
			)
			go func() {
				<-killNow
				started.Store(true)
				victim.Load().kill()
				close(killed)
			}()
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					hc := clientFrom(t, fmt.Sprintf("127.0.0.%d", 10+c))
					for range perUser {
						before := isClosed(killed)
						o := outcome{client: c}
						resp, err := hc.Get(proxy.URL + "/")
						if err == nil {
							var body []byte
							body, err = io.ReadAll(resp.Body)
							_ = resp.Body.Close()
							o.backend = string(body)
							if err == nil && resp.StatusCode != http.StatusOK {
								err = fmt.Errorf("status %d: %s", resp.StatusCode, body)
							}
						}
						o.err = err
						switch {
						case before:
							o.phase = 1
						case !started.Load():
							o.phase = 0
						default:
							o.phase = 2
						}
						if c == 0 && victim.Load() == nil && err == nil {
							// The victim is client 0's first backend, so that
							// the hash pickers' test has a client to move.
							for _, b := range bs {
								if b.name == o.backend {
									victim.Store(b)
								}
							}
						}
						mu.Lock()
						results = append(results, o)
						mu.Unlock()
						if done.Add(1) >= killAt && victim.Load() != nil {
							killOnce.Do(func() { close(killNow) })
						}
					}
				}()
			}
			wg.Wait()
			killOnce.Do(func() { close(killNow) }) // in case the threshold was never met
			<-killed
			rec.waitDone(t)

			dead := victim.Load().name
			failures := 0
			share := map[string][2]int{}
			for _, o := range results {
				if o.err != nil {
					failures++
					t.Errorf("client %d: %v", o.client, o.err)
					continue
				}
				s := share[o.backend]
				if o.phase == 0 {
					s[0]++
				} else if o.phase == 1 {
					s[1]++
					assert.NotEqual(t, dead, o.backend, "served by the dead backend after the kill")
				}
				share[o.backend] = s
			}
			picks, _ := rec.snapshot()
			refused, broken := 0, 0 // failed attempts: connection refused, or cut mid-request
			for _, p := range picks {
				err := p.result().Err
				switch {
				case err == nil:
				case errors.Is(err, syscall.ECONNREFUSED):
					refused++
				default:
					broken++
				}
				if err != nil {
					assert.Equal(t, dead, byHost[p.ID()].name, "a live backend failed: %v", err)
				}
			}
			before, after := 0, 0
			for _, s := range share {
				before += s[0]
				after += s[1]
			}
			var line strings.Builder
			for _, b := range bs {
				s := share[b.name]
				fmt.Fprintf(&line, " %s %4.1f%%→%4.1f%%", b.name, pct(s[0], before), pct(s[1], after))
			}
			t.Logf("%-12s requests %d, failed %d, picks %d, failed attempts on %s %d refused + %d cut; share before→after:%s",
				algo.Name, len(results), failures, len(picks), dead, refused, broken, line.String())
			assert.Len(t, results, total)
			assert.Zero(t, failures)
			assert.Positive(t, after, "requests after the kill")

			switch {
			case wrap == nil && (algo.Name == "iphash" || algo.Name == "ring" || algo.Name == "maglev"):
				checkOnlyDeadClientsMove(t, results, dead, true, nil)
			case algo.Name == "ring":
				checkOnlyDeadClientsMove(t, results, dead, false, nil)
			case algo.Name == "maglev":
				// Health Updates Maglev with the three live backends, and
				// Maglev's rebuilt table hands a few slots between backends
				// that stayed (consistent's TestDisruption): a live client
				// may move, but only to the backend a fresh Maglev over
				// the same three gives its key.
				checkOnlyDeadClientsMove(t, results, dead, false, shrunkHomes(t, algo, set, byHost, dead, clients))
			case algo.Name == "iphash":
				logMoves(t, results, dead)
			}
		}
	}
}

func pct(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return 100 * float64(n) / float64(of)
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// homes returns, per client, the backends that answered it before the
// kill (index 0) and after it (index 1).
func homes(results []outcome) map[int][2]map[string]bool {
	homes := map[int][2]map[string]bool{}
	for _, o := range results {
		if o.err != nil || o.phase == 2 {
			continue
		}
		h, ok := homes[o.client]
		if !ok {
			h = [2]map[string]bool{{}, {}}
			homes[o.client] = h
		}
		h[o.phase][o.backend] = true
	}
	return homes
}

// shrunkHomes returns, per client, the backend that a fresh picker of
// algo, Updated with set less the dead backend, gives the client's key
// (its address: lbhttp's default key is ClientIP).
func shrunkHomes(t *testing.T, algo catalog.Algorithm, set []balancer.Backend, byHost map[string]*backend, dead string, clients int) map[int]string {
	t.Helper()
	var live []balancer.Backend
	for _, b := range set {
		if byHost[b.ID()].name != dead {
			live = append(live, b)
		}
	}
	p := algo.New()
	require.NoError(t, p.Update(live))
	homes := make(map[int]string, clients)
	for c := range clients {
		b, err := p.Pick(balancer.Request{Key: fmt.Sprintf("127.0.0.%d", 10+c)})
		require.NoError(t, err)
		homes[c] = byHost[b.ID()].name
	}
	return homes
}

// checkOnlyDeadClientsMove checks affinity across the kill: each client
// had one backend before, and has the same one after unless it was the
// dead one. With oneAfter, a dead backend's client also has a single new
// backend after the kill (with health, its early requests may reach the
// retry target, its later ones the backend the smaller set gives it).
// With shrunk (see shrunkHomes), a live backend's client may also reach
// shrunk[client] after the kill, and no other backend.
func checkOnlyDeadClientsMove(t *testing.T, results []outcome, dead string, oneAfter bool, shrunk map[int]string) {
	t.Helper()
	hs := homes(results)
	deadClients, moved := 0, 0
	for c, h := range hs {
		require.Len(t, h[0], 1, "client %d had several backends before the kill: %v", c, h[0])
		if len(h[1]) == 0 {
			continue // this client finished before the kill
		}
		was := keys(h[0])[0]
		if was == dead {
			deadClients++
			assert.NotContains(t, h[1], dead)
			if oneAfter {
				assert.Len(t, h[1], 1, "client %d of the dead backend went to several: %v", c, h[1])
			}
			continue
		}
		if to, ok := shrunk[c]; ok && to != was {
			moved++
			for b := range h[1] {
				assert.Contains(t, []string{was, to}, b, "client %d moved from a live backend %s to %v, not to %s", c, was, keys(h[1]), to)
			}
			continue
		}
		assert.Equal(t, []string{was}, keys(h[1]), "client %d moved from a live backend", c)
	}
	assert.Positive(t, deadClients, "no client of the dead backend sent after the kill")
	t.Logf("affinity: %d clients, the %d on the dead backend moved, %d of the others handed on by the smaller set, the rest stayed", len(hs), deadClients, moved)
}

// logMoves logs how many clients of live backends changed backend.
func logMoves(t *testing.T, results []outcome, dead string) {
	moved, live := 0, 0
	for _, h := range homes(results) {
		if len(h[1]) == 0 || h[0][dead] {
			continue
		}
		live++
		if !maps.Equal(h[0], h[1]) {
			moved++
		}
	}
	t.Logf("affinity: %d of %d clients of live backends moved when the set shrank", moved, live)
}

func keys(m map[string]bool) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// TestSpoofedForwardedFor checks that an untrusted client cannot choose
// its backend by writing X-Forwarded-For, and that a trusted proxy can
// pass its client's address on.
func TestSpoofedForwardedFor(t *testing.T) {
	bs := startBackends(t, 4, 0)
	var set []balancer.Backend
	for _, b := range bs {
		set = append(set, balancer.NewEndpoint(hostOf(b.srv), 1))
	}
	p := iphash.New()
	require.NoError(t, p.Update(set))
	trustedPeer := "127.0.0.200"
	proxy := startProxy(t, p, lbhttp.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix(trustedPeer + "/32")}})

	send := func(hc *http.Client, xff string) (backend, seenXFF string) {
		req, err := http.NewRequest("GET", proxy.URL, nil)
		require.NoError(t, err)
		if xff != "" {
			req.Header.Set("X-Forwarded-For", xff)
		}
		resp, err := hc.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return resp.Header.Get("X-Backend"), resp.Header.Get("X-Seen-XFF")
	}

	client := "127.0.0.11"
	hc := clientFrom(t, client)
	home, seen := send(hc, "")
	assert.Equal(t, client, seen)
	for i := range 32 {
		spoof := fmt.Sprintf("198.51.100.%d", i)
		got, seen := send(hc, spoof)
		assert.Equal(t, home, got, "a spoofed X-Forwarded-For %s moved the client", spoof)
		assert.Equal(t, client, seen, "the spoofed hop was forwarded to the backend")
	}

	// Through the trusted proxy, the client's own address is its key.
	via := clientFrom(t, trustedPeer)
	got, seen := send(via, client)
	assert.Equal(t, home, got)
	assert.Equal(t, client+", "+trustedPeer, seen)
	// And the trusted proxy's header does decide: 32 clients behind it
	// spread over more than one backend.
	spread := map[string]bool{}
	for i := range 32 {
		got, _ := send(via, fmt.Sprintf("198.51.100.%d", i))
		spread[got] = true
	}
	assert.Greater(t, len(spread), 1)
}

// TestStreamDoneOnce checks, through the real proxy, that a streamed
// response counts as in flight until its end (no Done while it streams),
// and that a client abandoning it mid-stream gets exactly one Done, an
// abandoned one.
func TestStreamDoneOnce(t *testing.T) {
	handlerDone := make(chan struct{})
	stream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(handlerDone)
		// A stream says so: a Transport does not hold its start.
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		for i := 0; i < 400; i++ { // at most 2s
			if _, err := fmt.Fprintf(w, "line %d\n", i); err != nil {
				return
			}
			fl.Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}))
	defer stream.Close()
	rec := newRecorder(&scripted{})
	require.NoError(t, rec.Update(balancer.Endpoints(hostOf(stream))))
	proxy := startProxy(t, rec, lbhttp.Config{})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", proxy.URL, nil)
	require.NoError(t, err)
	hc := clientFrom(t, "127.0.0.12")
	resp, err := hc.Do(req)
	require.NoError(t, err)
	br := bufio.NewReader(resp.Body)
	for i := range 3 {
		line, err := readLine(br)
		require.NoError(t, err)
		assert.Equal(t, fmt.Sprintf("line %d", i), line)
	}
	picks, _ := rec.snapshot()
	require.Len(t, picks, 1)
	assert.Zero(t, picks[0].dones.Load(), "Done while the body is still streaming")

	cancel()
	_ = resp.Body.Close()
	select {
	case <-handlerDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the backend kept streaming after the client left")
	}
	rec.waitDone(t)
	r := picks[0].result()
	assert.True(t, r.Abandoned(), "an abandoned stream is not a failure: %+v", r)
}

// TestProxyPOST checks the retry rules through the real proxy, whose
// outgoing request body is the client's, readable once: a POST whose first
// backend refuses the connection reaches the second whole; a POST whose
// backend dropped the connection after reading it is not sent again.
func TestProxyPOST(t *testing.T) {
	var got atomic.Value
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.Store(string(b))
		_, _ = io.WriteString(w, "ok")
	}))
	defer live.Close()
	var drops atomic.Int32
	drop := dropServer(t, &drops)

	tests := []struct {
		name   string
		first  string // the backend tried first; live is second
		status int
		got    string // the body live received
		picks  int
	}{
		{"refused first", refusedAddr(t), http.StatusOK, "pay 10", 2},
		{"dropped after send", hostOf(drop), http.StatusBadGateway, "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got.Store("")
			drops.Store(0)
			rec := newRecorder(&scripted{})
			require.NoError(t, rec.Update(balancer.Endpoints(tt.first, hostOf(live))))
			proxy := startProxy(t, rec, lbhttp.Config{})
			resp, err := http.Post(proxy.URL, "text/plain", strings.NewReader("pay 10"))
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			assert.Equal(t, tt.status, resp.StatusCode)
			assert.Equal(t, tt.got, got.Load(), "what the live backend received")
			if tt.first == hostOf(drop) {
				assert.EqualValues(t, 1, drops.Load())
			}
			rec.waitDone(t)
			picks, _ := rec.snapshot()
			assert.Len(t, picks, tt.picks)
		})
	}
}

// TestProxyErrors checks what a client sees when nothing can answer: an
// empty set is a 503 saying so; backends that all refuse give a 502 after
// MaxAttempts tries, at once.
func TestProxyErrors(t *testing.T) {
	t.Run("empty set", func(t *testing.T) {
		proxy := startProxy(t, &scripted{}, lbhttp.Config{})
		resp, err := http.Get(proxy.URL)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
		assert.Equal(t, "no backend available\n", string(body))
	})
	t.Run("all refuse", func(t *testing.T) {
		rec := newRecorder(&scripted{})
		require.NoError(t, rec.Update(balancer.Endpoints(refusedAddr(t), refusedAddr(t), refusedAddr(t), refusedAddr(t))))
		proxy := startProxy(t, rec, lbhttp.Config{})
		resp, err := http.Get(proxy.URL)
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
		rec.waitDone(t)
		picks, _ := rec.snapshot()
		assert.Len(t, picks, lbhttp.DefaultMaxAttempts)
	})
}

func TestNewProxyErrors(t *testing.T) {
	_, err := lbhttp.NewProxy(nil, lbhttp.Config{})
	assert.EqualError(t, err, "lbhttp: nil picker")
}
