package lbhttp_test

import (
	"fmt"
	"io"
	"log/slog"
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
	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/lbhttp"
	"github.com/lbkit/lbkit/rr"
)

// statusServer answers every request with code at once, counting them.
func statusServer(t *testing.T, code int, n *atomic.Int64) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(code)
		_, _ = io.WriteString(w, http.StatusText(code))
	}))
	t.Cleanup(s.Close)
	return s
}

// TestRetryOn checks which answers are tried again on another backend: a
// 503 to a request that may be sent twice, within MaxAttempts and the
// budget; anything else goes to the caller as it came.
func TestRetryOn(t *testing.T) {
	var n503, nOK atomic.Int64
	unavailable := statusServer(t, http.StatusServiceUnavailable, &n503)
	live := statusServer(t, http.StatusOK, &nOK)
	noBudget, err := lbhttp.NewBudget(lbhttp.BudgetConfig{Ratio: 1e-9, MinPerSecond: 1e-9, Window: time.Second})
	require.NoError(t, err)
	tests := []struct {
		name     string
		method   string
		backends []string
		cfg      lbhttp.Config
		status   int
		picks    int
	}{
		{"GET 503 then live", "GET", []string{hostOf(unavailable), hostOf(live)}, lbhttp.Config{}, 200, 2},
		{"POST 503 not retried", "POST", []string{hostOf(unavailable), hostOf(live)}, lbhttp.Config{}, 503, 1},
		{"GET 503 everywhere: the last one", "GET", []string{hostOf(unavailable), hostOf(unavailable), hostOf(unavailable)}, lbhttp.Config{}, 503, 3},
		{"RetryOn says no", "GET", []string{hostOf(unavailable), hostOf(live)}, lbhttp.Config{RetryOn: func(*http.Response) bool { return false }}, 503, 1},
		{"budget spent", "GET", []string{hostOf(unavailable), hostOf(live)}, lbhttp.Config{Budget: noBudget}, 503, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(&scripted{})
			require.NoError(t, rec.Update(balancer.Endpoints(tt.backends...)))
			tt.cfg.Base = newBase(t)
			tr := newTestTransport(t, rec, tt.cfg)
			req, err := http.NewRequest(tt.method, "http://svc/", strings.NewReader("x"))
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			assert.Equal(t, tt.status, resp.StatusCode)
			rec.waitDone(t)
			picks, _ := rec.snapshot()
			require.Len(t, picks, tt.picks)
			var se *lbhttp.StatusError
			require.ErrorAs(t, picks[0].result().Err, &se, "a retried 503 is still a failure of its backend")
			assert.Equal(t, 503, se.Code)
		})
	}
}

// quietLog drops a proxy's error log: a test that fails requests on
// purpose would fill its own log.
func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// countingBase counts the attempts a Transport hands to the base: for
// backends that refuse, the only place a receipt can be counted.
func countingBase(t *testing.T, n *atomic.Int64) http.RoundTripper {
	base := newBase(t)
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		n.Add(1)
		return base.RoundTrip(r)
	})
}

// load sends clients × each GETs through the proxy at url, each client
// from its own loopback address, and returns how many got a transport
// error, and the statuses of the others.
func load(t *testing.T, url string, clients, each int) (errs int, status map[int]int) {
	t.Helper()
	var mu sync.Mutex
	status = map[int]int{}
	var wg sync.WaitGroup
	for c := range clients {
		hc := clientFrom(t, fmt.Sprintf("127.0.0.%d", 10+c))
		wg.Go(func() {
			for range each {
				resp, err := hc.Get(url)
				mu.Lock()
				if err != nil {
					errs++
				} else {
					status[resp.StatusCode]++
				}
				mu.Unlock()
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
			}
		})
	}
	wg.Wait()
	return errs, status
}

// TestBudgetStorm is issue 16's test of the budget: every backend answers
// 503 at once, or every backend refuses, under 50 clients. Without a
// budget every request costs MaxAttempts (3) receipts; with one (the
// default share, 20%; a minimum of 1 a second over a one-minute window,
// so that the whole test runs inside one window), the receipts are at
// most (1 + 0.2) × requests + 60.
func TestBudgetStorm(t *testing.T) {
	const clients, each = 50, 20
	const requests = clients * each
	for _, kind := range []string{"503", "refused"} {
		for _, budgeted := range []bool{true, false} {
			t.Run(fmt.Sprintf("backends=%s/budget=%v", kind, budgeted), func(t *testing.T) {
				var receipts atomic.Int64
				cfg := lbhttp.Config{}
				var set []balancer.Backend
				for range 4 {
					if kind == "503" {
						set = append(set, balancer.NewEndpoint(hostOf(statusServer(t, 503, &receipts)), 1))
					} else {
						set = append(set, balancer.NewEndpoint(refusedAddr(t), 1))
					}
				}
				if kind == "refused" {
					cfg.Base = countingBase(t, &receipts)
				}
				if budgeted {
					b, err := lbhttp.NewBudget(lbhttp.BudgetConfig{MinPerSecond: 1, Window: time.Minute})
					require.NoError(t, err)
					cfg.Budget = b
				} else {
					cfg.NoBudget = true
				}
				p := rr.New()
				require.NoError(t, p.Update(set))
				cfg.ErrorLog = quietLog()
				proxy := startProxy(t, p, cfg)
				start := time.Now()
				errs, status := load(t, proxy.URL, clients, each)
				t.Logf("%d requests in %v: %d receipts (%.2f per request), statuses %v, transport errors %d",
					requests, time.Since(start).Round(time.Millisecond), receipts.Load(), float64(receipts.Load())/requests, status, errs)
				assert.Zero(t, errs)
				want := map[string]int{"503": 503, "refused": 502}[kind]
				assert.Equal(t, map[int]int{want: requests}, status)
				if budgeted {
					assert.LessOrEqual(t, receipts.Load(), int64(1.2*requests+60))
				} else {
					assert.EqualValues(t, 3*requests, receipts.Load(), "every request tried three backends")
				}
			})
		}
	}
}

// TestBudgetOneDead is the other half: with the default budget and one
// backend of four refusing from the start, health's passive ejection
// takes it out and the budget's share covers the retries meanwhile: no
// client request fails, for every algorithm.
func TestBudgetOneDead(t *testing.T) {
	const clients, each = 50, 10
	for _, algo := range catalog.Algorithms() {
		t.Run("algo="+algo.Name, func(t *testing.T) {
			var served, attempts atomic.Int64
			set := []balancer.Backend{balancer.NewEndpoint(refusedAddr(t), 1)}
			for range 3 {
				set = append(set, balancer.NewEndpoint(hostOf(statusServer(t, 200, &served)), 1))
			}
			h, err := health.New(algo.New(), health.Config{})
			require.NoError(t, err)
			require.NoError(t, h.Start(t.Context()))
			t.Cleanup(func() { _ = h.Close() })
			require.NoError(t, h.Update(set))
			proxy := startProxy(t, h, lbhttp.Config{Base: countingBase(t, &attempts), ErrorLog: quietLog()})
			errs, status := load(t, proxy.URL, clients, each)
			t.Logf("%s: %d requests, %d attempts, statuses %v", algo.Name, clients*each, attempts.Load(), status)
			assert.Zero(t, errs)
			assert.Equal(t, map[int]int{200: clients * each}, status)
		})
	}
}
