package lbhttp_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/lbhttp"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/lrt/prequal"
	"github.com/lbkit/lbkit/wrr"
)

// reporting starts a loopback backend that answers in about 2 ms behind a
// Reporter, and counts what it serves.
func reporting(t *testing.T, cfg lbhttp.ReporterConfig) (*httptest.Server, *atomic.Int64) {
	return reportingAfter(t, 2*time.Millisecond, cfg)
}

// reportingAfter is reporting for a backend that answers after d.
func reportingAfter(t *testing.T, d time.Duration, cfg lbhttp.ReporterConfig) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var served atomic.Int64
	rep, err := lbhttp.NewReporter(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		time.Sleep(d)
		served.Add(1)
		_, _ = io.WriteString(w, "ok")
	}), cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(rep)
	t.Cleanup(srv.Close)
	return srv, &served
}

// drive sends requests through a Transport over p from workers
// goroutines, closed loop, for warm then measure; it returns each
// backend's share of the requests served during measure.
func drive(t *testing.T, p balancer.Balancer, srvs []*httptest.Server, served []*atomic.Int64, warm, measure time.Duration) []float64 {
	t.Helper()
	addrs := make([]string, len(srvs))
	for i, s := range srvs {
		addrs[i] = hostOf(s)
	}
	require.NoError(t, p.Update(balancer.Endpoints(addrs...)))
	tr, err := lbhttp.NewTransport(p, lbhttp.Config{})
	require.NoError(t, err)
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 5 * time.Second}

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for ctx.Err() == nil {
				resp, err := client.Get("http://svc/")
				if err != nil {
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	}
	time.Sleep(warm)
	before := make([]int64, len(served))
	for i, s := range served {
		before[i] = s.Load()
	}
	time.Sleep(measure)
	shares := make([]float64, len(served))
	var total float64
	for i, s := range served {
		shares[i] = float64(s.Load() - before[i])
		total += shares[i]
	}
	cancel()
	wg.Wait()
	require.Greater(t, total, 50.0, "too few requests to judge")
	for i := range shares {
		shares[i] /= total
	}
	return shares
}

// A backend that reports higher utilisation for the same work gets less
// traffic, in proportion, through real HTTP on loopback.
//
// wrr's Reported: three backends answer alike, but the third says it can
// hold one request where the others hold four (Reporter's Capacity), so
// for the same requests in flight it reports four times the utilisation.
// A58's weight, qps / utilisation, is then capacity / latency: 4:4:1, and
// the third should get 1/9 of the requests.
//
// leastconn's WithReports: the third reports 90% utilisation whatever it
// serves (a neighbour takes its CPU), the others 30%. Utilisation × (in
// flight + 1) makes it win a pair only when the other holds three or more
// requests, so it gets well under a third of the traffic. The test holds
// both with -race and two CPU-bound busy loops beside.
func TestLoopbackReportsShiftTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for about six seconds")
	}
	t.Run("wrr-reported", func(t *testing.T) {
		window := lbhttp.ReporterConfig{Window: 500 * time.Millisecond}
		var srvs []*httptest.Server
		var served []*atomic.Int64
		for _, c := range []int{4, 4, 1} {
			cfg := window
			cfg.Capacity = c
			s, n := reporting(t, cfg)
			srvs, served = append(srvs, s), append(served, n)
		}
		p := wrr.NewReported(wrr.WithBlackout(300*time.Millisecond), wrr.WithWeightPeriod(wrr.MinWeightPeriod))
		require.NoError(t, p.Start(context.Background()))
		defer p.Close()
		shares := drive(t, p, srvs, served, 1500*time.Millisecond, 1500*time.Millisecond)
		t.Logf("shares %.3f; weights %v", shares, weights(p, srvs))
		assert.InDelta(t, 1.0/9, shares[2], 0.06, "the third backend's share")
		assert.InDelta(t, shares[0], shares[1], 0.15, "the two alike")
		assert.Greater(t, shares[0], 2*shares[2])
	})
	t.Run("leastconn-reports", func(t *testing.T) {
		var srvs []*httptest.Server
		var served []*atomic.Int64
		for _, u := range []float64{0.3, 0.3, 0.9} {
			s, n := reporting(t, lbhttp.ReporterConfig{Utilization: func() float64 { return u }})
			srvs, served = append(srvs, s), append(served, n)
		}
		shares := drive(t, leastconn.New(leastconn.WithReports()), srvs, served, 500*time.Millisecond, 1500*time.Millisecond)
		t.Logf("shares %.3f", shares)
		assert.Less(t, shares[2], 0.2, "the third backend's share")
		assert.Greater(t, shares[2], 0.0, "it is still tried")
		assert.Greater(t, shares[0], 2*shares[2])
		assert.InDelta(t, shares[0], shares[1], 0.15, "the two alike")
	})
}

// Prequal over real probes: lbhttp's Prober asks each backend's Reporter
// for its requests in flight and latency, and the backend that answers in
// 2 ms gets most requests. With two backends the 0.84 quantile of two RIFs
// is the lower one, so the rule is "the fewer in flight, as last probed":
// the fast backend, which empties its queue 25 times as fast; the test
// holds, with -race and two busy loops beside, that it gets most of the
// requests.
func TestLoopbackPrequal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for about two seconds")
	}
	fast, nf := reportingAfter(t, 2*time.Millisecond, lbhttp.ReporterConfig{})
	slow, ns := reportingAfter(t, 50*time.Millisecond, lbhttp.ReporterConfig{})
	pr, err := lbhttp.NewProber(lbhttp.ProberConfig{})
	require.NoError(t, err)
	p := prequal.New(pr.Probe)
	require.NoError(t, p.Start(context.Background()))
	defer p.Close()
	shares := drive(t, p, []*httptest.Server{fast, slow}, []*atomic.Int64{nf, ns}, 500*time.Millisecond, 1500*time.Millisecond)
	st := p.Stats()
	t.Logf("shares %.3f; probes sent %d, failed %d", shares, st.Sent, st.Failed)
	assert.Greater(t, shares[0], 0.6, "the fast backend's share")
	assert.Greater(t, st.Sent, uint64(0))
}

func weights(p *wrr.Reported, srvs []*httptest.Server) []float64 {
	ws := make([]float64, len(srvs))
	for i, s := range srvs {
		ws[i], _ = p.Weight(hostOf(s))
	}
	return ws
}
