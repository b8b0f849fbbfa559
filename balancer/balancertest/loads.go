package balancertest

import (
	"fmt"
	"math"
	"slices"

	"github.com/lbkit/lbkit/balancer"
)

// loads are backends' load reports (balancer.Load) at their edges: every
// field non-negative and finite, as balancer.Load promises, and otherwise
// anything a backend may send. A picker that weighs by reports (qps over
// utilisation, a probe's latency) must neither panic, nor divide by
// zero, nor overflow into an infinity or a NaN that starves a backend.
var loads = []balancer.Load{
	{CPU: 0.5},           // a utilisation without a rate: a zero qps
	{CPU: 0.5, RPS: 0.5}, // under one request a second
	{RPS: 100, EPS: 3},   // a rate without a utilisation
	{CPU: 5e-324, RPS: 5e-324, EPS: 5e-324, Application: 5e-324}, // the smallest float64
	{CPU: 1e-300, RPS: 1e300},                                    // a tiny utilisation with a huge rate
	{CPU: 1e300, RPS: 1e-300},                                    // and the other way round
	{Application: 0.2, CPU: 3, Memory: 1, RPS: 10, EPS: 40},      // more errors than requests
	{ // the largest of everything
		CPU: math.MaxFloat64, Memory: 1, Application: math.MaxFloat64,
		RPS: math.MaxFloat64, EPS: math.MaxFloat64,
		InFlight: math.MaxFloat64, Latency: math.MaxInt64,
	},
	{InFlight: 5e-324, Latency: 1},               // a probe's fields, tiny
	{Named: extremeMetrics{}, CPU: 0.25, RPS: 4}, // named metrics, huge
}

// extremeMetrics has every named metric, at the largest float64.
type extremeMetrics struct{}

// Metric returns math.MaxFloat64 for any name.
func (extremeMetrics) Metric(string) (float64, bool) { return math.MaxFloat64, true }

// describeLoad names a Load in messages.
func describeLoad(l balancer.Load) string {
	s := fmt.Sprintf("Load{CPU: %g, Memory: %g, Application: %g, RPS: %g, EPS: %g, InFlight: %g, Latency: %v",
		l.CPU, l.Memory, l.Application, l.RPS, l.EPS, l.InFlight, l.Latency)
	if l.Named != nil {
		s += ", Named: every metric at the largest float64"
	}
	return s + "}"
}

// loadResults are the Results with loads that every check passing
// results to Done passes: each load on a success, and some on a failure
// and on an abandoned request.
var loadResults = func() []balancer.Result {
	var rs []balancer.Result
	for _, l := range loads {
		rs = append(rs, balancer.Result{Latency: 1e6, Load: l})
	}
	return append(rs,
		balancer.Result{Latency: 2e5, Err: errFailure, Load: loads[0]},
		balancer.Result{Latency: 3e9, Err: balancer.ErrAbandoned, Load: loads[7]},
	)
}()

// spreadLoads is Spread's second part: for each load of loads, a new
// Balancer given a set of 8 whose backends all report that load, with
// nothing else measured: every backend still draws first tries. A picker
// weighing by reports takes them in by the time of an Update (wrr's
// Reported rebuilds its schedule then), so the load is taught for
// supportPicks picks per backend, the set given again, reversed, and then
// the picks are counted. (A new Balancer for each load: how a picker
// moves from one load to another, one report at a time, is not this
// rule's.)
func spreadLoads(newBalancer func() balancer.Balancer) error {
	bs := backends("sl", 8, true)
	for i, x := range bs {
		bs[i] = x.(*balancer.Endpoint).At(spreadZone)
	}
	back := slices.Clone(bs)
	slices.Reverse(back)
	for _, l := range loads {
		b := newBalancer()
		if err := update(b, bs); err != nil {
			return err
		}
		res := balancer.Result{Load: l}
		if _, err := tally(b, members(bs), supportPicks*len(bs), func(balancer.Backend, int) balancer.Result { return res }); err != nil {
			return fmt.Errorf("while every backend reported %s: %w", describeLoad(l), err)
		}
		if err := update(b, back); err != nil {
			return err
		}
		if err := spreadOver(b, back, res, "a set of 8 whose backends all report "+describeLoad(l)); err != nil {
			return err
		}
	}
	return nil
}
