package sim

import (
	"cmp"
	"context"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/lbhttp"
)

// The simulated backends measure what lbhttp's Reporter measures, over the
// same window.
func TestReportWindow(t *testing.T) {
	assert.Equal(t, lbhttp.DefaultReportWindow, ReportWindow)
}

// A backend's meter reports what lbhttp's Reporter, with Capacity set,
// reports of the same requests at the same times: the utilisation (busy
// slots over slots, in flight over Capacity for a backend that does not
// queue) and the answers per second over its window, and the median of
// the last 64 answers' times as the latency estimate. Both are driven by
// one script of arrivals and answers, 40 s of it, on one clock.
func TestMeterMatchesReporter(t *testing.T) {
	const capacity = 16
	epoch := time.Unix(1_700_000_000, 0)
	var clock atomic.Int64 // ns since epoch, written here, read by the Reporter's goroutines
	// Each request's handler tells it has started, and waits for its
	// answer time.
	type gate struct{ entered, release chan struct{} }
	type key struct{}
	rep, err := lbhttp.NewReporter(http.HandlerFunc(func(_ http.ResponseWriter, req *http.Request) {
		g := req.Context().Value(key{}).(gate)
		close(g.entered)
		<-g.release
	}), lbhttp.ReporterConfig{
		Capacity: capacity,
		Now:      func() time.Time { return epoch.Add(time.Duration(clock.Load())) },
	})
	require.NoError(t, err)
	type call struct {
		at, from int64 // when it is answered, and when it arrived
		release  chan struct{}
		done     chan struct{}
	}
	var out []*call // in flight
	send := func(now, at int64) {
		c := &call{at: at, from: now, release: make(chan struct{}), done: make(chan struct{})}
		g := gate{entered: make(chan struct{}), release: c.release}
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req = req.WithContext(context.WithValue(req.Context(), key{}, g))
		go func() {
			defer close(c.done)
			rep.ServeHTTP(httptest.NewRecorder(), req)
		}()
		<-g.entered // it has read the clock and counted itself in
		out = append(out, c)
	}

	m := newMeter(0)
	r := rand.New(rand.NewPCG(1, 2))
	var utils []float64 // compared
	for now := int64(0); now < int64(40*time.Second); {
		// The next event: an arrival (while fewer than capacity are in
		// flight: this backend never queues) or the earliest answer.
		// Now and then a gap of over a window, which empties it.
		arrive := now + r.Int64N(int64(30*time.Millisecond))
		if r.IntN(500) == 0 {
			arrive += int64(12 * time.Second)
		}
		slices.SortFunc(out, func(a, b *call) int { return cmp.Compare(a.at, b.at) })
		if len(out) > 0 && (len(out) == capacity || out[0].at <= arrive) {
			c := out[0]
			out = out[1:]
			now = c.at
			clock.Store(now)
			m.advance(now, len(out)+1, capacity, len(out)+1)
			m.answered(now - c.from)
			close(c.release)
			<-c.done
		} else {
			now = arrive
			clock.Store(now)
			m.advance(now, len(out), capacity, len(out))
			send(now, now+int64(20*time.Millisecond)+r.Int64N(int64(200*time.Millisecond)))
		}
		if r.IntN(10) == 0 {
			m.advance(now, len(out), capacity, len(out))
			want, got := rep.Load(), m.report(now, 0, len(out))
			at := time.Duration(now)
			require.InDelta(t, want.Application, got.Application, 1e-9, "utilisation at %v", at)
			require.InDelta(t, want.RPS, got.RPS, 1e-9, "rps at %v", at)
			require.Equal(t, want.InFlight, got.InFlight, "in flight at %v", at)
			require.Equal(t, want.Latency, m.latency(), "latency estimate at %v", at)
			utils = append(utils, got.Application)
		}
	}
	for _, c := range out {
		close(c.release)
		<-c.done
	}
	// The script kept the backend from idle to busy: the comparison
	// covered both.
	require.Greater(t, len(utils), 100)
	assert.Less(t, slices.Min(utils), 0.2)
	assert.Greater(t, slices.Max(utils), 0.3)
}

// A report delayed by d is the report the backend would have sent at the
// last sample time (every 100 ms) at or before d ago, whatever happened
// since; for a time before the run, none.
func TestDelayedReport(t *testing.T) {
	const capacity, delay = 8, int64(2500 * time.Millisecond)
	fresh, late := newMeter(0), newMeter(time.Duration(delay))
	then := map[int64]balancer.Load{} // fresh's report at each sample time
	r := rand.New(rand.NewPCG(5, 6))
	busy, compared := 0, 0
	for now := int64(0); now < int64(30*time.Second); {
		next := now + r.Int64N(int64(20*time.Millisecond))
		// Fresh's report at each sample time before the next event, with
		// the state since the last.
		for b := (now/sampleEvery + 1) * sampleEvery; b <= next; b += sampleEvery {
			fresh.advance(b, busy, capacity, busy)
			then[b] = fresh.report(b, 0, busy)
		}
		now = next
		fresh.advance(now, busy, capacity, busy)
		late.advance(now, busy, capacity, busy)
		switch {
		case busy < capacity && r.IntN(2) == 0:
			busy++
		case busy > 0:
			busy--
			fresh.answered(int64(time.Millisecond))
			late.answered(int64(time.Millisecond))
		}
		got := late.report(now, delay, busy)
		if now < delay+sampleEvery {
			if now < delay {
				assert.Equal(t, balancer.Load{}, got, "no report from before the run, at %v", time.Duration(now))
			}
			continue
		}
		want, ok := then[(now-delay)/sampleEvery*sampleEvery]
		require.True(t, ok)
		require.Equal(t, want, got, "at %v", time.Duration(now))
		compared++
	}
	require.Greater(t, compared, 1000)
}
