package sim_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/bench/sim"
	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/lbhttp"
)

// slow returns the slow scenario named name.
func slow(t testing.TB, name string) sim.Scenario {
	t.Helper()
	for _, s := range sim.SlowScenarios(nil) {
		if s.Name == name {
			return s
		}
	}
	require.FailNow(t, "no slow scenario", name)
	return sim.Scenario{}
}

// extra returns the figure of SlowMetrics named name in r, failing the
// test without it.
func extra(t *testing.T, r sim.Result, name string) float64 {
	t.Helper()
	for _, m := range sim.SlowMetrics() {
		if m.Name == name {
			v, ok := m.Value(&r)
			require.True(t, ok, "no %s in %v", name, r.Extra)
			return v
		}
	}
	require.FailNow(t, "no such metric", name)
	return 0
}

// sentBetween counts the attempts sent to backend b in the series steps
// that start in [from, to).
func sentBetween(r sim.Result, b int, from, to time.Duration) float64 {
	step := r.Series.Step
	var n float64
	for k, rps := range r.Series.RPS[b] {
		if at := time.Duration(k) * step; at >= from && at < to {
			n += rps * step.Seconds()
		}
	}
	return n
}

// ready is lbhttp before it had timeouts: health both ways and retries.
const ready = sim.Active | sim.Passive | sim.Retry

// The stall scenario: the 50 ms backend accepts and never answers from
// 1 minute on. Without timeouts the users it holds wait until they give
// up (a minute: DefaultClientTimeout), an error each. With lbhttp's
// timeouts no user waits longer than one attempt timeout and the answer
// of a live backend, and none fails: the attempt that timed out is sent
// once more, elsewhere, and five timeouts eject the backend, so that it
// holds each user at most about once. The budget changes nothing here:
// retries are few. Hedges without the budget shorten the waits and fail
// nothing either. (With the budget they may: see docs/results.md, "Slow
// backends", and lbhttp's doc, "Timeouts, the budget and hedging in the
// simulator".)
func TestStall(t *testing.T) {
	sc := slow(t, "stall")
	at := sc.Backends[0].Stalls[0].At
	slowest := sc.Backends[len(sc.Backends)-1].Latency
	for _, a := range scenarioAlgorithms(t) {
		t.Run(a.Name, func(t *testing.T) {
			hang, err := sim.Simulate(sc, ready, a, 1, 1)
			require.NoError(t, err)
			timeout, err := sim.Simulate(sc, ready|sim.Timeout, a, 1, 1)
			require.NoError(t, err)
			budget, err := sim.Simulate(sc, ready|sim.Timeout|sim.Budget, a, 1, 1)
			require.NoError(t, err)
			hedged, err := sim.Simulate(sc, ready|sim.Timeout|sim.Hedge, a, 1, 1)
			require.NoError(t, err)

			assert.Equal(t, sim.DefaultClientTimeout.Seconds(), extra(t, hang, "max_wait_s"), "held until the user gave up")
			assert.Positive(t, hang.Errors, "the users held gave up")
			assert.LessOrEqual(t, hang.Errors, int64(sc.Users), "each user is held once: by then checks have taken the backend out")
			assert.Zero(t, hang.Retries, "nothing failed that a retry could save")

			assert.Zero(t, timeout.Errors, "every attempt that timed out was retried on a live backend")
			wait := time.Duration(extra(t, timeout, "max_wait_s") * float64(time.Second))
			assert.LessOrEqual(t, wait, lbhttp.DefaultAttemptTimeout+slowest+time.Millisecond, "one timeout, then a live backend's answer")
			assert.Greater(t, wait, lbhttp.DefaultAttemptTimeout, "some user waited out a timeout")
			// Every attempt the stalled backend held timed out and was
			// retried: those it was serving when it stalled (at most its
			// peak in flight just before) and those sent to it since, but
			// those still waiting when the run ended.
			stalled := sentBetween(timeout, 0, at, sc.Length())
			serving := float64(timeout.Series.PeakInFlight[0][int(at/timeout.Series.Step)-1])
			assert.LessOrEqual(t, float64(timeout.Retries), stalled+serving)
			assert.GreaterOrEqual(t, float64(timeout.Retries), stalled-sentBetween(timeout, 0, sc.Length()-lbhttp.DefaultAttemptTimeout, sc.Length()))
			assert.LessOrEqual(t, stalled, 1.5*float64(sc.Users), "ejected after a few timeouts")

			assert.Equal(t, timeout.Requests, budget.Requests, "the budget let every retry through")
			assert.Equal(t, timeout.Retries, budget.Retries)

			assert.Zero(t, hedged.Errors, "a hedge, or the retry after a timeout, reached a live backend")
			assert.LessOrEqual(t, time.Duration(extra(t, hedged, "max_wait_s")*float64(time.Second)), lbhttp.DefaultAttemptTimeout+slowest+time.Millisecond)
			t.Logf("no timeouts: %d errors, RPS during %.1f; timeouts: %d retries, %.0f attempts to the stalled backend (%.0f in flight at most before), longest wait %v, RPS during %.1f",
				hang.Errors, hang.Failure.After, timeout.Retries, stalled, serving, wait, timeout.Failure.After)
		})
	}
}

// The storm scenario: every backend answers 503 in a millisecond for 30
// s. Every request fails whatever the variant; what differs is the load.
// The bare picker sends one attempt a request, retries send three (the
// whole of MaxAttempts), and the budget bounds them as it promises: in
// any window (10 s) its retries are at most 20% of the requests that
// started in it plus 10 a second, so that over the storm they are at
// most 20% of its requests and of those of the window before it, plus 10
// a second over both (stormBound). Once the backends recover, no request
// fails.
func TestStorm(t *testing.T) {
	sc := slow(t, "storm")
	storm := sc.Backends[0].Unavailable[0]
	for _, a := range scenarioAlgorithms(t) {
		t.Run(a.Name, func(t *testing.T) {
			var during [3]float64
			for i, v := range []sim.Variant{sim.None, ready, ready | sim.Timeout | sim.Budget} {
				r, err := sim.Simulate(sc, v, a, 1, 1)
				require.NoError(t, err)
				during[i] = extra(t, r, "attempts_per_request_during")
				for k, e := range r.Series.Errors {
					if at := time.Duration(k) * r.Series.Step; at > storm.Until {
						require.Zero(t, e, "%v: errors at %v, after the storm", v, at)
					}
				}
				assert.Positive(t, r.Failure.Before)
			}
			assert.InDelta(t, 1, during[0], 0.01, "the bare picker: an attempt a request")
			assert.InDelta(t, sim.MaxAttempts, during[1], 0.01, "retries: every attempt a request may make")
			// The requests that ended during the storm: its few successes
			// and every error (none fell outside it, as checked above).
			r, err := sim.Simulate(sc, ready|sim.Timeout|sim.Budget, a, 1, 1)
			require.NoError(t, err)
			length := (storm.Until - storm.At).Seconds()
			ended := r.Failure.After*length + float64(r.Errors)
			bound := stormBound(ended, r.Failure.Before*min(lbhttp.DefaultBudgetWindow, storm.At).Seconds(), length)
			assert.LessOrEqual(t, during[2]*ended, bound)
			assert.Greater(t, during[2], 1+lbhttp.DefaultBudgetRatio, "the budget is spent")
			t.Logf("attempts per request during the storm: none %.3f, retries %.3f, with the budget %.3f (bound %.3f)",
				during[0], during[1], during[2], bound/ended)
		})
	}
}

// stormBound is the most attempts lbhttp's default budget lets through in
// a storm of length seconds in which ended requests ended, each sent once
// and retried while the budget allows: 20% of those and of the requests
// before the storm in the window that reaches back before it, plus 10 a
// second over the storm and that window.
func stormBound(ended, before, length float64) float64 {
	return ended + lbhttp.DefaultBudgetRatio*(ended+before) + lbhttp.DefaultBudgetMinPerSecond*(length+lbhttp.DefaultBudgetWindow.Seconds())
}

// The tail scenario: 1% of each backend's requests take 20 times as long.
// Timeouts cut the tails beyond AttemptTimeout (the 300 and 500 ms
// backends' 6 and 10 s) to a timeout and a retry; hedging at the 95th
// percentile cuts the 99.9th percentile at least threefold, for at most
// 10% more attempts.
func TestTail(t *testing.T) {
	sc := slow(t, "tail")
	for _, a := range scenarioAlgorithms(t) {
		t.Run(a.Name, func(t *testing.T) {
			bare, err := sim.Simulate(sc, ready, a, 1, 1)
			require.NoError(t, err)
			timeout, err := sim.Simulate(sc, ready|sim.Timeout|sim.Budget, a, 1, 1)
			require.NoError(t, err)
			hedge, err := sim.Simulate(sc, ready|sim.Timeout|sim.Budget|sim.Hedge, a, 1, 1)
			require.NoError(t, err)
			for _, r := range []sim.Result{bare, timeout, hedge} {
				assert.Zero(t, r.Errors, "%v", r.Variant)
			}
			assert.Zero(t, bare.Retries)
			if p := extra(t, bare, "p999_ms"); p > lbhttp.DefaultAttemptTimeout.Seconds()*1000 {
				assert.Less(t, extra(t, timeout, "p999_ms"), p, "the timeouts cut the tail beyond them")
			}
			p999, hedged := extra(t, timeout, "p999_ms"), extra(t, hedge, "p999_ms")
			assert.GreaterOrEqual(t, p999/hedged, 3.0, "hedging cuts the p99.9 threefold: %.1f → %.1f ms", p999, hedged)
			load, hedgedLoad := extra(t, timeout, "attempts_per_request"), extra(t, hedge, "attempts_per_request")
			assert.LessOrEqual(t, hedgedLoad, 1.10*load, "for at most 10%% more attempts")
			t.Logf("p99 %v → %v, p99.9 %.1f → %.1f ms (%.1f×), attempts per request %.3f → %.3f; without timeouts p99.9 %.1f ms",
				timeout.P99, hedge.P99, p999, hedged, p999/hedged, load, hedgedLoad, extra(t, bare, "p999_ms"))
		})
	}
}

// counting wraps a picker and counts its Picks and Dones, the abandoned
// Dones and the failed ones apart.
type counting struct {
	balancer.Balancer
	picks, dones, abandoned, failed int
}

func (c *counting) Pick(req balancer.Request) (balancer.Backend, error) {
	b, err := c.Balancer.Pick(req)
	if err == nil {
		c.picks++
	}
	return b, err
}

func (c *counting) Done(b balancer.Backend, r balancer.Result) {
	c.dones++
	switch {
	case r.Abandoned():
		c.abandoned++
	case r.Err != nil:
		c.failed++
	}
	if fb, ok := c.Balancer.(balancer.Feedback); ok {
		fb.Done(b, r)
	}
}

// countingAlgo returns a's picker wrapped in c (one proxy).
func countingAlgo(a catalog.Algorithm, c *counting) catalog.Algorithm {
	return catalog.Algorithm{Name: a.Name, Sim: func(r func() uint64, now func() time.Time) balancer.Balancer {
		c.Balancer = a.Sim(r, now)
		return c
	}}
}

// A hedge goes out when the first attempt has waited the 95th percentile
// of the proxy's latencies, to the other backend, and the first answer
// wins: two backends answer in 10 ms, the first of them 2% of the time in
// a second, so that once the percentile has its hundred samples every
// slow attempt is hedged after about 10.5 ms (the sketch's bucket above
// 10 ms) and answered 10 ms later. Each hedge is an attempt and a pick,
// and the attempt it beats is reported abandoned, so that every pick gets
// its Done (leastconn's counts stay true).
func TestHedge(t *testing.T) {
	ms := time.Millisecond
	sc := sim.Scenario{Name: "hedge", Backends: []sim.Backend{{Latency: 10 * ms, TailShare: 0.02, TailFactor: 100}, {Latency: 10 * ms}},
		Users: 20, Stages: []sim.Stage{{time.Minute, 20}}, Think: 40 * ms, Metrics: sim.SlowMetrics()}
	for _, name := range []string{"rr", "leastconn"} {
		t.Run(name, func(t *testing.T) {
			var c counting
			r, err := sim.Simulate(sc, sim.Retry|sim.Timeout|sim.Budget|sim.Hedge, countingAlgo(algo(t, name), &c), 1, 1)
			require.NoError(t, err)
			var plain counting
			bare, err := sim.Simulate(sc, sim.Retry|sim.Timeout|sim.Budget, countingAlgo(algo(t, name), &plain), 1, 1)
			require.NoError(t, err)

			assert.Zero(t, r.Errors)
			assert.Zero(t, c.failed, "no attempt failed")
			assert.LessOrEqual(t, extra(t, r, "p999_ms"), 25.0, "the slow attempts were beaten by hedges")
			assert.GreaterOrEqual(t, extra(t, bare, "p999_ms"), 1000.0, "without hedges the tail shows")
			// The hedges are the tails: 2% of the first backend's attempts
			// (the hedges go to the other).
			tails := 0.02 * float64(r.Backends[0].Sent)
			assert.InDelta(t, tails, float64(r.Retries), 0.25*tails, "a hedge for each slow attempt")
			unfinished := r.Attempts() - (r.Requests + r.Retries)
			assert.True(t, unfinished >= 0 && unfinished <= int64(sc.Users), "each hedge one attempt more, but those of requests the run cut: %d", unfinished)
			assert.Equal(t, c.picks, int(r.Attempts()), "a pick for every attempt")
			assert.LessOrEqual(t, c.picks-c.dones, 2*sc.Users, "a Done for every pick but those in flight at the end")
			assert.InDelta(t, float64(r.Retries), float64(c.abandoned), float64(sc.Users), "the attempts the hedges beat, reported abandoned")
			assert.Zero(t, plain.abandoned)
			t.Logf("%d hedges for %.0f tails expected, %d abandoned; p99.9 %.1f ms, without hedges %.1f ms",
				r.Retries, tails, c.abandoned, extra(t, r, "p999_ms"), extra(t, bare, "p999_ms"))
		})
	}
}
