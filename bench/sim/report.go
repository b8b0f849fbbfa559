package sim

import (
	"math"
	"slices"
	"time"
)

// Report is what one invocation measured: for each scenario and number of
// proxies, every variant × algorithm. It is plain data, filled by the
// simulator (Run) and meant to be filled the same way by a live runner, so
// that both print through the same writers.
type Report struct {
	// Seed is the seed the runs were derived from.
	Seed uint64
	// Source says where the figures come from: "simulation" for Run;
	// for a live run (package bench/live), how it was played and how its
	// figures were converted. WriteText and WriteMarkdown print it first
	// unless it is "simulation".
	Source string
	// Scenarios holds one entry per scenario and number of proxies, in
	// the order run.
	Scenarios []ScenarioReport
}

// ScenarioReport is one scenario played with a given number of proxies.
type ScenarioReport struct {
	Scenario Scenario
	// Proxies is the number of independent picker instances the users
	// were split over.
	Proxies int
	// Results are in variant-major order: for each of
	// Scenario.RunVariants(), every algorithm.
	Results []Result
}

// Result is what one algorithm, under one variant, measured in one
// scenario.
//
// A user request is what a virtual user sends and waits for; with Retry it
// may take several attempts, each a pick and a Done. Latency is a user
// request's, from its first attempt to its answer, queueing and retries
// included; only successful requests have one.
type Result struct {
	Algorithm string
	Variant   Variant
	Proxies   int
	// Length is the time measured over: the scenario's length.
	Length time.Duration
	// Requests counts user requests answered with success.
	Requests int64
	// Errors counts user requests that failed: refused, or failed by a
	// backend dying while serving them, with no retry left; or no backend
	// to pick.
	Errors int64
	// Retries counts attempts beyond each request's first.
	Retries int64
	// Probes counts the probes probing pickers sent (lrt/prequal), every
	// proxy's together.
	Probes int64
	// RPS is Requests per second of Length: successful throughput.
	RPS float64
	// Latency of successful requests: mean and nearest-rank percentiles.
	Mean, Median, P95, P99 time.Duration
	// Backends has one entry per scenario backend, in order.
	Backends []BackendResult
	// Failure compares throughput before and after the scenario's first
	// outage; nil when it has none.
	Failure *FailureResult
	// Series is the run over time, for charts.
	Series Series
	// Extra holds the figures a scenario reports beyond the fields above,
	// by the names of its Scenario.Metrics; nil for the default
	// scenarios.
	Extra []Figure
}

// SetLatencies sets Mean, Median, P95 and P99 from the latencies of the
// successful requests, which it sorts in place: the mean and nearest-rank
// percentiles. With no latency they are zero.
func (r *Result) SetLatencies(ls []time.Duration) {
	r.Mean, r.Median, r.P95, r.P99 = 0, 0, 0, 0
	if len(ls) == 0 {
		return
	}
	slices.Sort(ls)
	var sum time.Duration
	for _, l := range ls {
		sum += l
	}
	r.Mean = sum / time.Duration(len(ls))
	r.Median, r.P95, r.P99 = rank(ls, 0.50), rank(ls, 0.95), rank(ls, 0.99)
}

// SetHistogram sets Mean, Median, P95 and P99 from a histogram of the
// latencies of the successful requests: the exact mean and the
// nearest-rank percentiles within HistogramError.
func (r *Result) SetHistogram(h *Histogram) {
	r.Mean, r.Median, r.P95, r.P99 = h.Mean(), h.Quantile(0.50), h.Quantile(0.95), h.Quantile(0.99)
}

// rank returns the nearest-rank p-quantile of sorted xs.
func rank(xs []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(xs)))) - 1
	return xs[max(i, 0)]
}

// BackendResult is one backend's view of a run.
type BackendResult struct {
	// Sent counts attempts the pickers sent to the backend, refused ones
	// included.
	Sent int64
	// Share is Sent over all attempts.
	Share float64
	// Refused counts attempts refused because it was dead.
	Refused int64
	// Reset counts attempts that failed because it died while they were
	// in service or queued at it.
	Reset int64
	// MeanInFlight is the time-weighted mean of requests at the backend,
	// queued ones included; PeakInFlight its maximum.
	MeanInFlight float64
	PeakInFlight int
}

// FailureResult compares successful throughput before an outage and
// during it.
type FailureResult struct {
	// Outage is the first outage of the scenario.
	Outage Outage
	// Before is RPS over [0, Outage.At); After over [Outage.At,
	// Outage.Until), or to the end when the backend does not come back.
	Before, After float64
}

// Change returns After/Before − 1: −0.25 means a quarter of the throughput
// was lost. It is zero when Before is.
func (f *FailureResult) Change() float64 {
	if f.Before == 0 {
		return 0
	}
	return f.After/f.Before - 1
}

// Series is a run sampled every Step, for charts: entry k covers
// [k·Step, (k+1)·Step).
type Series struct {
	Step time.Duration
	// Users is the number of active users at the end of each step.
	Users []int
	// InFlight[b][k] is the time-weighted mean of requests at backend b;
	// PeakInFlight[b][k] their maximum within the step (the largest is
	// BackendResult.PeakInFlight). PeakInFlight may be nil in a report
	// from elsewhere.
	InFlight     [][]float64
	PeakInFlight [][]int
	// RPS[b][k] is the attempts sent to backend b, per second.
	RPS [][]float64
	// Errors[k] is the failed user requests per second.
	Errors []float64
}
