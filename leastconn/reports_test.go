package leastconn_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/leastconn"
)

// reportModes are the report-weighing configurations every report test
// goes through.
var reportModes = []struct {
	name string
	opts []leastconn.Option
}{
	{"reports", []leastconn.Option{leastconn.WithReports()}},
	{"reports/choices=3", []leastconn.Option{leastconn.WithReports(), leastconn.WithChoices(3)}},
	{"reports/scan", []leastconn.Option{leastconn.WithReports(), leastconn.WithScan()}},
	{"reports/metric", []leastconn.Option{leastconn.WithReportMetric("q")}},
}

func TestReportsConformance(t *testing.T) {
	for _, m := range reportModes {
		t.Run(m.name, func(t *testing.T) {
			balancertest.Run(t, func() balancer.Balancer { return leastconn.New(m.opts...) })
		})
	}
}

// metrics is a report's named metrics, for WithReportMetric.
type metrics map[string]float64

func (m metrics) Metric(name string) (float64, bool) {
	v, ok := m[name]
	return v, ok
}

// loadOf is a report of utilisation u, in the form mode reads.
func loadOf(metric bool, u float64) balancer.Load {
	if metric {
		return balancer.Load{Named: metrics{"q": u}}
	}
	return balancer.Load{Application: u}
}

// tell passes a report for b through a Pick-less Done: it takes one
// request off b's count, so it follows a Pick of b made for it.
func tell(t *testing.T, p *leastconn.Picker, b balancer.Backend, l balancer.Load) {
	t.Helper()
	before := p.InFlight(b.ID())
	p.Done(b, balancer.Result{Latency: time.Millisecond, Load: l})
	require.Equal(t, max(before-1, 0), p.InFlight(b.ID()))
}

// With reports, held requests split so that utilisation × (in flight + 1)
// evens out: a backend reporting three times the utilisation of another
// holds about a third as many of this picker's requests.
func TestReportsWeighUtilisation(t *testing.T) {
	for _, m := range reportModes {
		t.Run(m.name, func(t *testing.T) {
			bs := named("r", 2)
			p := newPicker(t, bs, m.opts...)
			metric := m.name == "reports/metric"
			tell(t, p, bs[0], loadOf(metric, 0.9))
			tell(t, p, bs[1], loadOf(metric, 0.3))
			held := hold(t, p, 40, balancer.Request{})
			a, b := float64(p.InFlight(bs[0].ID())), float64(p.InFlight(bs[1].ID()))
			assert.InDelta(t, 0.9*(a+1), 0.3*(b+1), 0.9, "in flight %v and %v", a, b)
			for _, x := range held {
				p.Done(x, balancer.Result{})
			}
		})
	}
}

// In a larger set, two choices on reports send fewer requests to the
// backends that report more load, held requests included.
func TestReportsLargerSet(t *testing.T) {
	bs := named("l", 32)
	p := newPicker(t, bs, leastconn.WithReports())
	for i, b := range bs {
		u := 0.2
		if i%4 == 0 {
			u = 0.8 // a quarter of the set reports four times the load
		}
		tell(t, p, b, balancer.Load{CPU: u})
	}
	held := hold(t, p, 320, balancer.Request{})
	var busy, idle float64
	for i, b := range bs {
		if i%4 == 0 {
			busy += float64(p.InFlight(b.ID()))
		} else {
			idle += float64(p.InFlight(b.ID()))
		}
	}
	perBusy, perIdle := busy/8, idle/24
	assert.Less(t, perBusy, perIdle/2, "per backend, %v held on the busy ones, %v on the others", perBusy, perIdle)
	for _, x := range held {
		p.Done(x, balancer.Result{})
	}
}

// A backend without a report, or whose report has expired, is compared by
// its in-flight count: the pair falls back to leastconn's rule.
func TestReportsFallBackToInFlight(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	bs := named("f", 2)
	p := newPicker(t, bs, leastconn.WithReports(), leastconn.WithClock(clock), leastconn.WithReportExpiry(time.Second))
	tell(t, p, bs[0], balancer.Load{Application: 0.01}) // nearly idle, by its report
	_, ok := p.Utilization(bs[1].ID())
	require.False(t, ok)
	held := hold(t, p, 20, balancer.Request{})
	assert.EqualValues(t, 10, p.InFlight(bs[0].ID()), "in-flight counts decide: an even split")
	for _, x := range held {
		p.Done(x, balancer.Result{})
	}

	// Both report: b's 0.5 against a's 0.01, 50 to 1 and counted as 10 to
	// 1, sends a ten times b's requests (in flight + 1): 19 and 1.
	tell(t, p, bs[1], balancer.Load{Application: 0.5})
	held = hold(t, p, 20, balancer.Request{})
	assert.EqualValues(t, 19, p.InFlight(bs[0].ID()))
	for _, x := range held {
		p.Done(x, balancer.Result{})
	}

	// b reports again two seconds later: a's report has expired, and the
	// pair is compared by in-flight counts again.
	now = now.Add(2 * time.Second)
	b, err := p.Pick(balancer.Request{Avoid: bs[0].ID()})
	require.NoError(t, err)
	tell(t, p, b, balancer.Load{Application: 0.5})
	_, ok = p.Utilization(bs[0].ID())
	assert.False(t, ok, "expired")
	held = hold(t, p, 20, balancer.Request{})
	assert.EqualValues(t, 10, p.InFlight(bs[0].ID()))
	for _, x := range held {
		p.Done(x, balancer.Result{})
	}
}

// Reports that say nothing of utilisation are no reports: none at all, a
// zero, a negative or missing named metric, an infinity.
func TestReportsIgnored(t *testing.T) {
	bs := named("i", 2)
	p := newPicker(t, bs, leastconn.WithReportMetric("q"))
	for _, l := range []balancer.Load{
		{}, {Application: 0.5}, {Named: metrics{"other": 1}}, {Named: metrics{"q": 0}},
		{Named: metrics{"q": -1}}, {Named: metrics{"q": math.Inf(1)}}, {Named: metrics{"q": math.NaN()}},
	} {
		tell(t, p, bs[0], l)
		_, ok := p.Utilization(bs[0].ID())
		assert.False(t, ok, "%+v", l)
	}
	q := leastconn.New()
	require.NoError(t, q.Update(bs))
	q.Done(bs[0], balancer.Result{Load: balancer.Load{Application: 0.5}})
	_, ok := q.Utilization(bs[0].ID())
	assert.False(t, ok, "without WithReports, reports are not read")
}

// Pick and Done allocate nothing with reports either.
func TestReportsAllocs(t *testing.T) {
	for _, m := range reportModes {
		for _, n := range []int{2, 3, 64} {
			t.Run(fmt.Sprintf("%s/n=%d", m.name, n), func(t *testing.T) {
				bs := named("a", n)
				p := leastconn.New(m.opts...)
				require.NoError(t, p.Update(bs))
				res := balancer.Result{Latency: time.Millisecond, Load: loadOf(m.name == "reports/metric", 0.4)}
				i := 0
				allocs := testing.AllocsPerRun(2000, func() {
					b, err := p.Pick(balancer.Request{Avoid: bs[i%n].ID()})
					i++
					if err == nil {
						p.Done(b, res)
					}
				})
				assert.Zero(t, allocs)
			})
		}
	}
}

// One extreme report among four backends takes no more than the bound
// allows: a pair's reported utilisations are compared at most 10 to 1, so
// a backend reporting 0.0001 beside three at 0.5 (5000 to 1) holds at
// most about ten times the requests of the others, 10/13 of those held,
// and one reporting 1e300 (or the largest float) still gets about a tenth
// of theirs.
func TestReportsExtremeBounded(t *testing.T) {
	for _, m := range reportModes {
		for _, tt := range []struct {
			name     string
			u        float64
			min, max float64 // the bounds of a's share of the held requests
		}{
			{"tiny", 0.0001, 0.3, 10.0/13 + 0.03},
			{"huge", 1e300, 0.015, 1.0/31 + 0.02},
			{"largest float", math.MaxFloat64, 0.015, 1.0/31 + 0.02},
		} {
			t.Run(m.name+"/"+tt.name, func(t *testing.T) {
				bs := named("x", 4)
				p := newPicker(t, bs, m.opts...)
				metric := m.name == "reports/metric"
				tell(t, p, bs[0], loadOf(metric, tt.u))
				for _, b := range bs[1:] {
					tell(t, p, b, loadOf(metric, 0.5))
				}
				const n = 400
				held := hold(t, p, n, balancer.Request{})
				counts := make([]int64, len(bs))
				for i, b := range bs {
					counts[i] = p.InFlight(b.ID())
				}
				share := float64(counts[0]) / n
				t.Logf("held %v: a's share %.3f", counts, share)
				assert.GreaterOrEqual(t, share, tt.min, "a's share of %d held: %v", n, counts)
				assert.LessOrEqual(t, share, tt.max, "a's share of %d held: %v", n, counts)
				for _, x := range held {
					p.Done(x, balancer.Result{})
				}
			})
		}
	}
}

// A backend whose last report is stale beside its rivals' fresh ones is
// not starved by it until it expires: it gets no new report while it
// draws no request. Every backend reports 0.5 for a while, then 0.1, one
// request at a time, 10 ms of clock apart: under strict comparison of
// reports, the first backend to lose its turn kept its 0.5 for the whole
// 8 s and drew none of the 800 picks (two choices), or one backend drew
// all of them (scan). A report more than a tenth of the expiry older than
// its rival's weighs nothing, and the pair compares requests in flight.
func TestReportsStaleNotStarved(t *testing.T) {
	for _, m := range reportModes {
		t.Run(m.name, func(t *testing.T) {
			now := time.Unix(1_700_000_000, 0)
			p := leastconn.New(append(m.opts, leastconn.WithClock(func() time.Time { return now }))...)
			set := balancer.Endpoints("a:80", "b:80", "c:80", "d:80", "e:80", "f:80", "g:80", "h:80")
			require.NoError(t, p.Update(set))
			metric := m.name == "reports/metric"
			round := func(u float64) map[string]int {
				got := map[string]int{}
				for range 800 {
					b, err := p.Pick(balancer.Request{})
					require.NoError(t, err)
					got[b.ID()]++
					now = now.Add(10 * time.Millisecond)
					p.Done(b, balancer.Result{Latency: time.Millisecond, Load: loadOf(metric, u)})
				}
				return got
			}
			round(0.5)
			got := round(0.1)
			t.Logf("picks after the reports fell: %v", got)
			for _, b := range set {
				assert.Greater(t, got[b.ID()], 800/8/4, "%s drew too few of 800 picks", b.ID())
			}
		})
	}
}
