package lbhttp_test

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/lbhttp"
)

// stalled is a backend that accepts requests and stalls: before its
// headers (kind "headers"), or after its headers and a first line of body
// (kind "body"). It notes when each request arrived, and from which
// client (X-Forwarded-For, as the proxy sets it).
type stalled struct {
	srv  *httptest.Server
	mu   sync.Mutex
	hits []time.Time
	from map[string]int
}

func newStalled(t *testing.T, kind string) *stalled {
	t.Helper()
	s := &stalled{from: map[string]int{}}
	quit := make(chan struct{})
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.hits = append(s.hits, time.Now())
		s.from[r.Header.Get("X-Forwarded-For")]++
		s.mu.Unlock()
		if kind == "body" {
			_, _ = io.WriteString(w, "first line\n")
			w.(http.Flusher).Flush()
		}
		select {
		case <-r.Context().Done():
		case <-quit:
		}
	}))
	t.Cleanup(func() { close(quit); s.srv.Close() })
	return s
}

// arrivals returns when each request arrived, and the most requests one
// client sent.
func (s *stalled) arrivals() ([]time.Time, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	most := 0
	for _, n := range s.from {
		most = max(most, n)
	}
	return slices.Clone(s.hits), most
}

// watched passes picks and Dones to a health.Balancer, and counts the
// picks of one backend that began after its ejection had been applied
// (health calls OnChange once the inner picker has the new set): there
// must be none.
type watched struct {
	*health.Balancer
	id      string
	ejected atomic.Pointer[time.Time]
	failed  atomic.Pointer[time.Time] // the backend's first failure, as Done reported it
	late    atomic.Int32

	mu      sync.Mutex
	healthy []string // the failures charged to the other backends
	stalled []string // those of them that are idle timeouts
}

func (w *watched) Done(b balancer.Backend, r balancer.Result) {
	switch {
	case r.Err == nil || b == nil || r.Abandoned():
	case b.ID() == w.id:
		now := time.Now()
		w.failed.CompareAndSwap(nil, &now)
	default:
		f := fmt.Sprintf("%s %s after %v: %v", time.Now().Format("15:04:05.000"), b.ID(), r.Latency.Round(time.Millisecond), r.Err)
		w.mu.Lock()
		w.healthy = append(w.healthy, f)
		if errors.Is(r.Err, lbhttp.ErrIdleTimeout) {
			w.stalled = append(w.stalled, f)
		}
		w.mu.Unlock()
	}
	w.Balancer.Done(b, r)
}

// healthyFailures returns the failures charged to the backends other
// than the stalled one, and those of them that are idle timeouts.
func (w *watched) healthyFailures() (all, idle []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.healthy), slices.Clone(w.stalled)
}

func (w *watched) Pick(r balancer.Request) (balancer.Backend, error) {
	began := time.Now()
	b, err := w.Balancer.Pick(r)
	if at := w.ejected.Load(); err == nil && b.ID() == w.id && at != nil && began.After(*at) {
		w.late.Add(1)
	}
	return b, err
}

// proxyLog keeps what a ReverseProxy logs, for a failure to show.
type proxyLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *proxyLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, time.Now().Format("15:04:05.000 ")+strings.TrimSpace(string(p)))
	return len(p), nil
}

// others returns the lines that do not name the backend with this ID:
// those of the stalled backend's bodies, which end with its idle
// timeouts, are left out, and a healthy backend's failure is kept.
func (l *proxyLog) others(id string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if !strings.Contains(line, "(backend "+id+")") {
			out = append(out, line)
		}
	}
	return out
}

// call is one client request of the stall test.
type call struct {
	start time.Time
	took  time.Duration
	err   error
}

// TestStall is issue 16's test of the timeouts: four loopback backends,
// one of which accepts every request and stalls it, before its headers or
// in the middle of its body; health's passive checks only (no probes);
// 50 clients, each from its own address, sending GETs back to back for
// 1.2 s; an attempt timeout and an idle timeout of 400 ms (short enough
// for the test, long enough that a healthy backend's answer, 1 ms, does
// not reach it on a busy machine under -race).
// For every algorithm:
//
//   - no client waits longer than the attempt timeout times MaxAttempts
//     (3), plus a margin for a busy machine;
//   - health ejects the stalled backend, its timeouts counting as the
//     failures passive ejection counts, and no Pick that begins after
//     the ejection returns it (lrt, which takes each timeout as a latency
//     sample, may stop picking it before the fifth failure: then it need
//     not be ejected). Least connections sends it no second round: it
//     counts the stalled requests in flight until they time out, and
//     after the first of them fails it gets only the few requests that
//     replace the failures before the fifth (0 to 4 in the runs; a
//     second round would be as many as the first, 12 to 15);
//   - no healthy backend's body times out;
//   - once it is ejected, no client request fails. A stall before the
//     headers fails none at all (each is tried again elsewhere), nor does
//     one in the body by default: the stall comes inside the start of the
//     body the Transport holds (Config.HoldBytes), and the attempt fails
//     as a stall before the headers would. With the hold off (kind
//     body-unheld, for rr and leastconn only) a stall in the body fails
//     the requests that were streaming from it, and only those, since a
//     body half sent cannot be sent again.
//
// Run with -v for each algorithm's figures.
func TestStall(t *testing.T) {
	const (
		clients  = 50
		timeout  = 400 * time.Millisecond
		runFor   = 1200 * time.Millisecond
		attempts = lbhttp.DefaultMaxAttempts
	)
	for _, kind := range []string{"headers", "body", "body-unheld"} {
		for _, algo := range catalog.Algorithms() {
			if kind == "body-unheld" && algo.Name != "rr" && algo.Name != "leastconn" {
				continue
			}
			t.Run("stall="+kind+"/algo="+algo.Name, func(t *testing.T) {
				hold := 0
				if kind == "body-unheld" {
					hold = -1
				}
				bad := newStalled(t, strings.TrimSuffix(kind, "-unheld"))
				set := []balancer.Backend{balancer.NewEndpoint(hostOf(bad.srv), 1)}
				for _, b := range startBackends(t, 3, time.Millisecond) {
					set = append(set, balancer.NewEndpoint(hostOf(b.srv), 1))
				}
				w := &watched{id: hostOf(bad.srv)}
				var changes atomic.Int32
				h, err := health.New(algo.New(), health.Config{OnChange: func(c health.Change) {
					if c.ID == w.id && c.New == health.Ejected {
						now := time.Now()
						w.ejected.CompareAndSwap(nil, &now)
						changes.Add(1)
					}
				}})
				require.NoError(t, err)
				w.Balancer = h
				require.NoError(t, h.Start(t.Context()))
				t.Cleanup(func() { _ = h.Close() })
				require.NoError(t, h.Update(set))
				rp, err := lbhttp.NewProxy(w, lbhttp.Config{AttemptTimeout: timeout, IdleTimeout: timeout, HoldBytes: hold, ErrorLog: quietLog()})
				require.NoError(t, err)
				plog := &proxyLog{}
				rp.ErrorLog = log.New(plog, "", 0) // the stalled bodies' idle timeouts, and anything else
				proxy := httptest.NewServer(rp)
				t.Cleanup(func() {
					proxy.Close()
					rp.Transport.(*lbhttp.Transport).CloseIdleConnections()
				})

				var mu sync.Mutex
				var calls []call
				var wg sync.WaitGroup
				var begin time.Time
				ready := make(chan struct{}) // every client's first request goes at once
				for c := range clients {
					hc := clientFrom(t, fmt.Sprintf("127.0.0.%d", 10+c))
					wg.Go(func() {
						<-ready
						for i := 0; i < 1000 && time.Since(begin) < runFor; i++ {
							cl := call{start: time.Now()}
							resp, err := hc.Get(proxy.URL)
							if err == nil {
								_, err = io.Copy(io.Discard, resp.Body)
								_ = resp.Body.Close()
								if err == nil && resp.StatusCode != http.StatusOK {
									err = fmt.Errorf("status %d", resp.StatusCode)
								}
							}
							cl.took, cl.err = time.Since(cl.start), err
							mu.Lock()
							calls = append(calls, cl)
							mu.Unlock()
						}
					})
				}
				begin = time.Now()
				close(ready)
				wg.Wait()

				arrivals, most := bad.arrivals()
				if len(arrivals) < health.DefaultConsecutiveFailures {
					// lrt learns from the first timeouts and may stop
					// sending there before passive ejection has its five
					// failures in a row: fine, as long as it did stop.
					require.True(t, algo.Name == "lrt" || algo.Name == "lrt-naive", "%s sent the stalled backend only %d requests", algo.Name, len(arrivals))
					t.Logf("%-13s %d requests reached the stalled backend; the picker kept away from it after that", algo.Name, len(arrivals))
					return
				}
				// The last timeouts may have come back just before the
				// clients stopped: give the ejection time to be applied.
				require.Eventually(t, func() bool { return w.ejected.Load() != nil }, margin, time.Millisecond,
					"the stalled backend got %d requests and was never ejected", len(arrivals))
				at := w.ejected.Load()
				var longest time.Duration
				before, after := 0, 0 // failures of requests started before and after the ejection
				for _, cl := range calls {
					longest = max(longest, cl.took)
					switch {
					case cl.err == nil:
					case cl.start.Before(*at):
						before++
					default:
						after++
						t.Errorf("a request started %v after the ejection failed: %v; what else the ReverseProxy logged: %q", cl.start.Sub(*at), cl.err, plog.others(w.id))
					}
				}
				// A healthy backend writes its headers and its body at
				// once: an idle timeout of its body is a timer that
				// condemned what had arrived. (An attempt timeout can be
				// the machine's own slowness: backends, proxy and
				// clients share this process, and under -race with two
				// busy loops beside, a few of the first requests take
				// longer than 400 ms.)
				healthy, idle := w.healthyFailures()
				assert.Empty(t, idle, "healthy backends' bodies timed out; every failure charged to them: %q; what else the ReverseProxy logged: %q", healthy, plog.others(w.id))
				late := w.late.Load()
				second := 0 // requests that reached the stalled backend after its first failure
				for _, a := range arrivals {
					if a.After(*w.failed.Load()) {
						second++
					}
				}
				t.Logf("%-13s %5d requests, longest wait %v; %d reached the stalled backend (at most %d from one client), ejected %v in (%d ejections); %d failed before, %d after; %d picked after the ejection; %d reached it after its first failure",
					algo.Name, len(calls), longest.Round(time.Millisecond), len(arrivals), most, at.Sub(begin).Round(time.Millisecond), changes.Load(), before, after, late, second)
				assert.LessOrEqual(t, longest, attempts*timeout+margin, "a client waited longer than the attempt timeout × attempts")
				assert.Zero(t, late, "the stalled backend was picked after its ejection: a second round")
				if algo.Name == "leastconn" || algo.Name == "leastconn-p2c" {
					// A second round would be as large as the first.
					assert.Less(t, second, len(arrivals)-second, "least connections sent the stalled backend a second round")
				}
				if kind != "body-unheld" {
					assert.Zero(t, before, "a stall before the headers, or inside the held start of the body, is retried: no request fails")
				} else {
					assert.LessOrEqual(t, before, len(arrivals), "only the requests streaming from the stalled backend fail")
				}
			})
		}
	}
}
