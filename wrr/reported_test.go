package wrr_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/wrr"
)

// The kit's Results carry load reports (balancer.Load at its edges: a
// zero rps, the smallest and the largest float64); with no blackout, they
// reach the schedule at the kit's next Update, so that Spread sees what
// the weights made of them.
func TestReportedConformance(t *testing.T) {
	t.Run("default", func(t *testing.T) {
		balancertest.Run(t, func() balancer.Balancer { return wrr.NewReported() })
	})
	t.Run("blackout=0", func(t *testing.T) {
		balancertest.Run(t, func() balancer.Balancer { return wrr.NewReported(wrr.WithBlackout(0)) })
	})
}

// clock is a clock the test moves; the tests drive Reported from one
// goroutine.
type clock struct{ now time.Time }

func newClock() *clock { return &clock{now: time.Unix(1_700_000_000, 0)} }

func (c *clock) Now() time.Time { return c.now }

func (c *clock) Advance(d time.Duration) { c.now = c.now.Add(d) }

// newDriven returns a Reported on the test's clock, started so that no
// lazy loop runs (the test calls Refresh), with a fixed start.
func newDriven(t *testing.T, c *clock, opts ...wrr.ReportedOption) *wrr.Reported {
	t.Helper()
	opts = append([]wrr.ReportedOption{wrr.WithClock(c.Now), wrr.WithRand(func() uint64 { return 0 }),
		wrr.WithWeightPeriod(time.Hour)}, opts...)
	p := wrr.NewReported(opts...)
	require.NoError(t, p.Start(context.Background()))
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func report(p *wrr.Reported, b balancer.Backend, l balancer.Load) {
	p.Done(b, balancer.Result{Latency: time.Millisecond, Load: l})
}

// sequence returns the IDs of the next n picks, joined by spaces.
func sequence(t *testing.T, p balancer.Picker, n int) string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		b, err := p.Pick(balancer.Request{})
		require.NoError(t, err)
		ids[i] = b.ID()
	}
	return strings.Join(ids, " ")
}

// counts returns how many of the next n picks went to each ID.
func counts(t *testing.T, p balancer.Picker, n int) map[string]int {
	t.Helper()
	c := map[string]int{}
	for range n {
		b, err := p.Pick(balancer.Request{})
		require.NoError(t, err)
		c[b.ID()]++
	}
	return c
}

// A58's formula, its blackout, and nginx's smooth sequence for the
// weights it gives: reports worth 5:1:1 pick a a b a c a a.
func TestReportedWeightsAfterBlackout(t *testing.T) {
	c := newClock()
	p := newDriven(t, c)
	bs := balancer.Endpoints("a", "b", "c")
	require.NoError(t, p.Update(bs))
	send := func() {
		report(p, bs[0], balancer.Load{RPS: 100, Application: 0.2})          // 500
		report(p, bs[1], balancer.Load{RPS: 100, CPU: 0.5, EPS: 50})         // 100 / (0.5 + 0.5) = 100
		report(p, bs[2], balancer.Load{RPS: 50, CPU: 0.9, Application: 0.5}) // application wins: 100
	}
	send()
	p.Refresh()
	assert.Equal(t, "a b c a b c", sequence(t, p, 6), "in the blackout every backend weighs the same")
	_, ok := p.Weight("a")
	assert.False(t, ok)

	c.Advance(wrr.DefaultBlackout)
	send()
	p.Refresh()
	for id, want := range map[string]float64{"a": 500, "b": 100, "c": 100} {
		w, ok := p.Weight(id)
		assert.True(t, ok, id)
		assert.InDelta(t, want, w, 1e-9, id)
	}
	assert.Equal(t, 7, p.Period())
	period := sequence(t, p, 7)
	assert.Equal(t, 5, strings.Count(period, "a"))
	// The smooth sequence up to rotation: a's turns are spread.
	assert.Contains(t, period+" "+period, "a a b a c a a")
}

// A report older than the expiry puts the backend back at the mean, and
// it serves a new blackout when reports resume.
func TestReportedExpiry(t *testing.T) {
	c := newClock()
	p := newDriven(t, c, wrr.WithBlackout(time.Second), wrr.WithReportExpiry(time.Minute))
	bs := balancer.Endpoints("a", "b")
	require.NoError(t, p.Update(bs))
	report(p, bs[0], balancer.Load{RPS: 40, CPU: 0.1})
	report(p, bs[1], balancer.Load{RPS: 10, CPU: 0.1})
	c.Advance(time.Second)
	report(p, bs[0], balancer.Load{RPS: 40, CPU: 0.1})
	report(p, bs[1], balancer.Load{RPS: 10, CPU: 0.1})
	p.Refresh()
	assert.Equal(t, map[string]int{"a": 320, "b": 80}, counts(t, p, 400))

	// b keeps reporting, a falls silent: after the expiry a has no
	// weight of its own, and with one usable weight left, picks go round
	// robin.
	c.Advance(30 * time.Second)
	report(p, bs[1], balancer.Load{RPS: 10, CPU: 0.1})
	c.Advance(31 * time.Second)
	p.Refresh()
	_, ok := p.Weight("a")
	assert.False(t, ok)
	assert.Equal(t, map[string]int{"a": 100, "b": 100}, counts(t, p, 200))

	// a reports again: its weight waits for a new blackout.
	report(p, bs[0], balancer.Load{RPS: 40, CPU: 0.1})
	p.Refresh()
	_, ok = p.Weight("a")
	assert.False(t, ok, "the blackout starts again")
	c.Advance(time.Second)
	report(p, bs[0], balancer.Load{RPS: 40, CPU: 0.1})
	report(p, bs[1], balancer.Load{RPS: 10, CPU: 0.1})
	p.Refresh()
	assert.Equal(t, map[string]int{"a": 320, "b": 80}, counts(t, p, 400))
}

// A backend without a usable weight weighs the mean of the others; one
// that leaves and comes back serves its blackout again.
func TestReportedMeanAndRejoin(t *testing.T) {
	c := newClock()
	p := newDriven(t, c, wrr.WithBlackout(time.Second))
	bs := balancer.Endpoints("a", "b", "c")
	require.NoError(t, p.Update(bs))
	for range 2 {
		report(p, bs[0], balancer.Load{RPS: 40, CPU: 0.1}) // 400
		report(p, bs[1], balancer.Load{RPS: 20, CPU: 0.1}) // 200
		c.Advance(time.Second)
	}
	p.Refresh()
	assert.Equal(t, map[string]int{"a": 1000, "b": 500, "c": 750}, counts(t, p, 2250), "c weighs the mean, 300")

	require.NoError(t, p.Update(bs[1:]))
	require.NoError(t, p.Update(bs))
	_, ok := p.Weight("a")
	assert.False(t, ok, "back from an absence: a new blackout")
	report(p, bs[0], balancer.Load{RPS: 40, CPU: 0.1})
	c.Advance(time.Second)
	_, ok = p.Weight("a")
	assert.True(t, ok)
	_, ok = p.Weight("b")
	assert.True(t, ok, "b stayed: no blackout")
}

// Reports A58 cannot use are ignored: no rps, no utilisation, a backend
// not in the set, a Result without a report, and figures no parser gives
// (negative, NaN, infinite, a weight below the smallest normal float).
func TestReportedIgnores(t *testing.T) {
	c := newClock()
	p := newDriven(t, c, wrr.WithBlackout(0))
	bs := balancer.Endpoints("a", "b")
	require.NoError(t, p.Update(bs))
	report(p, bs[0], balancer.Load{CPU: 0.5})
	report(p, bs[0], balancer.Load{RPS: 100, CPU: 0.5, EPS: -49}) // 100 / (0.5 - 0.49)
	report(p, bs[0], balancer.Load{RPS: 100, CPU: 0.5, EPS: math.NaN()})
	report(p, bs[0], balancer.Load{RPS: math.Inf(1), CPU: 0.5})
	report(p, bs[0], balancer.Load{RPS: 100, CPU: math.Inf(1)})
	report(p, bs[0], balancer.Load{RPS: 1e-320, CPU: 1})
	report(p, bs[1], balancer.Load{RPS: 10, Memory: 0.5})
	report(p, balancer.NewEndpoint("x", 1), balancer.Load{RPS: 10, CPU: 0.5})
	p.Done(bs[0], balancer.Result{})
	p.Done(nil, balancer.Result{Load: balancer.Load{RPS: 1, CPU: 1}})
	p.Refresh()
	for _, id := range []string{"a", "b", "x"} {
		_, ok := p.Weight(id)
		assert.False(t, ok, id)
	}
	assert.Equal(t, 2, p.Period())
}

func TestReportedErrorPenalty(t *testing.T) {
	for _, tt := range []struct {
		penalty float64
		want    float64
	}{{0, 100}, {1, 50}, {3, 25}} {
		c := newClock()
		p := newDriven(t, c, wrr.WithBlackout(0), wrr.WithErrorPenalty(tt.penalty))
		bs := balancer.Endpoints("a")
		require.NoError(t, p.Update(bs))
		report(p, bs[0], balancer.Load{RPS: 50, CPU: 0.5, EPS: 25}) // error rate 0.5
		w, ok := p.Weight("a")
		assert.True(t, ok)
		assert.InDelta(t, tt.want, w, 1e-9, "penalty %v", tt.penalty)
	}
}

// Without Start, reports start a loop that recomputes the weights every
// period, on the real clock, and that stops once reports expire.
func TestReportedLazyLoop(t *testing.T) {
	p := wrr.NewReported(wrr.WithBlackout(0), wrr.WithWeightPeriod(wrr.MinWeightPeriod),
		wrr.WithReportExpiry(time.Second))
	defer p.Close()
	bs := balancer.Endpoints("a", "b")
	require.NoError(t, p.Update(bs))
	report(p, bs[0], balancer.Load{RPS: 40, CPU: 0.1})
	report(p, bs[1], balancer.Load{RPS: 10, CPU: 0.1})
	require.Eventually(t, func() bool { return p.Period() == 5 }, 10*time.Second, 10*time.Millisecond,
		"weights 4:1 scheduled without Start or Refresh")
	require.Eventually(t, func() bool { return p.Period() == 2 }, 10*time.Second, 10*time.Millisecond,
		"expired weights put out of use by the lazy loop's last turn")
}

func TestReportedLifecycle(t *testing.T) {
	p := wrr.NewReported()
	require.NoError(t, p.Start(context.Background()))
	assert.ErrorIs(t, p.Start(context.Background()), balancer.ErrStarted)
	require.NoError(t, p.Close())
	require.NoError(t, p.Close())
	assert.ErrorIs(t, p.Start(context.Background()), balancer.ErrClosed)
	// Still a picker after Close.
	require.NoError(t, p.Update(balancer.Endpoints("a")))
	b, err := p.Pick(balancer.Request{})
	require.NoError(t, err)
	assert.Equal(t, "a", b.ID())
}

// Done with a report allocates nothing and takes no lock (there is none
// on its path to take); Pick is Picker's.
func TestReportedDoneAllocs(t *testing.T) {
	p := newDriven(t, newClock())
	bs := balancer.Endpoints("a", "b")
	require.NoError(t, p.Update(bs))
	res := balancer.Result{Latency: time.Millisecond, Load: balancer.Load{RPS: 10, CPU: 0.5, EPS: 1}}
	allocs := testing.AllocsPerRun(1000, func() {
		b, _ := p.Pick(balancer.Request{})
		p.Done(b, res)
	})
	assert.Zero(t, allocs)
}

// shares returns each ID's share of the next n picks.
func shares(t *testing.T, p balancer.Picker, n int) map[string]float64 {
	t.Helper()
	s := map[string]float64{}
	for id, k := range counts(t, p, n) {
		s[id] = float64(k) / float64(n)
	}
	return s
}

// One report of a near-zero utilisation among four backends: the weight
// it gives (qps/0.0001, 5000 times the others') is bounded at 10 times
// the mean of the others, so its backend takes 10/13 of the picks, not
// nearly all of them. A report of a huge utilisation only makes its own
// backend small, down to the floor of a hundredth of the mean.
func TestReportedExtremeReportBounded(t *testing.T) {
	for _, tt := range []struct {
		name string
		load balancer.Load
		want float64 // a's share
	}{
		{"tiny utilisation", balancer.Load{RPS: 100, CPU: 0.0001}, 10.0 / 13},
		{"huge rate", balancer.Load{RPS: 1e300, CPU: 0.5}, 10.0 / 13},
		{"huge utilisation", balancer.Load{RPS: 100, CPU: 1e300}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newClock()
			p := newDriven(t, c, wrr.WithBlackout(0))
			bs := balancer.Endpoints("a", "b", "c", "d")
			require.NoError(t, p.Update(bs))
			report(p, bs[0], tt.load)
			for _, b := range bs[1:] {
				report(p, b, balancer.Load{RPS: 100, CPU: 0.5})
			}
			p.Refresh()
			s := shares(t, p, 100*p.Period())
			assert.InDelta(t, tt.want, s["a"], 0.01, "a's share: %v", s)
			assert.LessOrEqual(t, s["a"], 10.0/13+0.001, "the bound's share")
			assert.InDelta(t, s["b"], s["c"], 0.001, "the others share alike: %v", s)
			assert.InDelta(t, s["b"], s["d"], 0.001, "the others share alike: %v", s)
		})
	}
}

// Weights near the largest float keep their order and proportions: the
// scaling divides before it multiplies, and sums nothing that could
// overflow.
func TestReportedHugeWeightsKeepOrder(t *testing.T) {
	for _, scale := range []float64{1, 1e200, 1e305, 4e307} {
		c := newClock()
		p := newDriven(t, c, wrr.WithBlackout(0))
		bs := balancer.Endpoints("a", "b", "c", "d")
		require.NoError(t, p.Update(bs))
		for i, b := range bs {
			report(p, b, balancer.Load{RPS: float64(i+1) * scale, CPU: 1}) // weights 1:2:3:4
		}
		p.Refresh()
		s := shares(t, p, 10*p.Period())
		for i, id := range []string{"a", "b", "c", "d"} {
			assert.InDelta(t, float64(i+1)/10, s[id], 0.002, "scale %g: %s's share: %v", scale, id, s)
		}
	}
}
