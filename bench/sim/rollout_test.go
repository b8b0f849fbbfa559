package sim_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/bench/sim"
	"github.com/lbkit/lbkit/catalog"
)

// rolloutCase returns the slow scenario named name, cut to a tenth under
// the race detector (18 s: a run there costs about what a full one costs
// without it), and the algorithms to play it with: every algorithm, or
// raceAlgorithms under the race detector.
func rolloutCase(t *testing.T, name string) (sim.Scenario, []catalog.Algorithm) {
	t.Helper()
	sc := slow(t, name)
	if raceEnabled {
		sc = sc.Scale(0.1)
	}
	return sc, scenarioAlgorithms(t)
}

// binomial asserts that k of n draws of probability p is within four
// standard deviations of n·p, and one draw; n must be positive.
func binomial(t *testing.T, k, n int64, p float64, what string) {
	t.Helper()
	require.Positive(t, n, "%s: no draws", what)
	mean := float64(n) * p
	slack := 4*math.Sqrt(float64(n)*p*(1-p)) + 1
	assert.InDelta(t, mean, float64(k), slack, "%s: %d of %d, want %.0f ± %.0f", what, k, n, mean, slack)
}

// The flaky scenario: the first backend answers 30% of its requests with
// a fast 503. Without retries each of those is a user's error, with
// health checks and passive ejection too: passive ejection counts
// consecutive failures, which one failure in three makes only now and
// then, so round robin still sends the backend most of its share. With
// retries no user sees an error, and the requests the flaky backend took
// cost 1.3 attempts each: every failure is retried once, on a backend
// that does not fail. lbhttp's defaults (the budget) let every retry
// through.
func TestFlaky(t *testing.T) {
	sc, algos := rolloutCase(t, "flaky")
	require.Equal(t, sim.FlakyShare, sc.Backends[0].FailShare)
	ready := sim.Active | sim.Passive | sim.Retry
	for _, a := range algos {
		t.Run(a.Name, func(t *testing.T) {
			bare, err := sim.Simulate(sc, sim.None, a, 1, 1)
			require.NoError(t, err)
			retried, err := sim.Simulate(sc, ready, a, 1, 1)
			require.NoError(t, err)

			binomial(t, bare.Errors, bare.Backends[0].Sent, sim.FlakyShare, "bare picker: the flaky backend's failures are the users' errors")
			assert.Zero(t, bare.Retries)

			assert.Zero(t, retried.Errors, "every failure retried on a backend that does not fail")
			sent := retried.Backends[0].Sent
			binomial(t, retried.Retries, sent, sim.FlakyShare, "one retry per failure at the flaky backend")
			perRequest := float64(sent+retried.Retries) / float64(sent)
			t.Logf("bare: %d errors of %d attempts to it (%.1f%%); retries: 0 errors, %d retries, %.3f attempts per request it took, %.3f per user request, share %.1f%%",
				bare.Errors, bare.Backends[0].Sent, 100*float64(bare.Errors)/float64(bare.Backends[0].Sent),
				retried.Retries, perRequest, float64(retried.Attempts())/float64(retried.Requests), 100*retried.Backends[0].Share)
		})
	}
	rr := algo(t, "rr")
	health, err := sim.Simulate(sc, sim.Active|sim.Passive, rr, 1, 1)
	require.NoError(t, err)
	defaults, err := sim.Simulate(sc, ready|sim.Timeout|sim.Budget, rr, 1, 1)
	require.NoError(t, err)
	retried, err := sim.Simulate(sc, ready, rr, 1, 1)
	require.NoError(t, err)
	assert.Positive(t, health.Errors, "health alone leaves failures to the users")
	binomial(t, health.Errors, health.Backends[0].Sent, sim.FlakyShare, "health without retries: every failure at it is an error")
	assert.Greater(t, health.Backends[0].Share, 0.5/float64(len(sc.Backends)),
		"round robin under consecutive-failure ejection still sends the flaky backend over half its share")
	assert.Equal(t, retried.Requests, defaults.Requests, "the budget lets every retry through")
	assert.Equal(t, retried.Retries, defaults.Retries)
	assert.Zero(t, defaults.Errors)
	t.Logf("rr, active+passive: %d errors, the flaky backend's share %.1f%% (25%% without health)", health.Errors, 100*health.Backends[0].Share)

	// Failure-percentage ejection judges what five failures in a row
	// miss: at 30% against a threshold of 20, the backend is ejected
	// interval after interval, and round robin's errors (those left
	// without retries) and retries (with them) fall by more than half.
	// Its judgements come every 10 s, so this runs the whole scenario
	// (3 minutes) even under -race: a tenth of it is one judgement.
	sc = slow(t, "flaky")
	health, err = sim.Simulate(sc, sim.Active|sim.Passive, rr, 1, 1)
	require.NoError(t, err)
	retried, err = sim.Simulate(sc, ready, rr, 1, 1)
	require.NoError(t, err)
	rate, err := sim.Simulate(sc, sim.Active|sim.Passive|sim.FailureRate, rr, 1, 1)
	require.NoError(t, err)
	rateRetried, err := sim.Simulate(sc, ready|sim.FailureRate, rr, 1, 1)
	require.NoError(t, err)
	assert.Less(t, float64(rate.Errors), 0.5*float64(health.Errors), "failure rates eject what runs of five miss")
	assert.Less(t, rate.Backends[0].Share, 0.5*health.Backends[0].Share)
	assert.Zero(t, rateRetried.Errors)
	assert.Less(t, float64(rateRetried.Retries), 0.5*float64(retried.Retries), "fewer failures to retry")
	t.Logf("rr, active+passive+failrate: %d errors (%d without it), share %.1f%%; with retries %d retries (%d without it)",
		rate.Errors, health.Errors, 100*rate.Backends[0].Share, rateRetried.Retries, retried.Retries)
}

// The canary scenario: four backends of 50 ms and a canary three times
// slower. Deployed behind package route and sent nothing (route), the
// canary costs nothing: the figures are those of the four stable
// backends alone. Turned on (route+canary), 5% of the requests go to it
// and take three times as long: the p99 is the canary's, the p50 the
// stable backends', and the throughput what the closed loop's law gives
// for the longer mean. Without route (none) the canary is one backend of
// five, and round robin sends it a fifth.
func TestCanary(t *testing.T) {
	sc, algos := rolloutCase(t, "canary")
	canary := len(sc.Backends) - 1
	require.Equal(t, sim.CanaryTrack, sc.Backends[canary].Track)
	slow, fast := sc.Backends[canary].Latency, sc.Backends[0].Latency
	require.Equal(t, sim.CanarySlowdown*fast, slow)
	stable := sc
	stable.Backends = sc.Backends[:canary]
	// The closed loop's law: X = N/(R+Z), for R the mean of the
	// latencies, weighed by the share of requests each takes.
	mean := (1-sim.DefaultCanaryShare)*fast.Seconds() + sim.DefaultCanaryShare*slow.Seconds()
	wantRatio := (fast + sc.Think).Seconds() / (mean + sc.Think.Seconds())
	for _, a := range algos {
		t.Run(a.Name, func(t *testing.T) {
			alone, err := sim.Simulate(stable, sim.None, a, 1, 1)
			require.NoError(t, err)
			off, err := sim.Simulate(sc, sim.Route, a, 1, 1)
			require.NoError(t, err)
			on, err := sim.Simulate(sc, sim.Route|sim.Canary, a, 1, 1)
			require.NoError(t, err)

			assert.Zero(t, off.Backends[canary].Sent, "off: the canary takes nothing")
			assert.Equal(t, alone.P99, off.P99, "off: the p99 of the stable backends alone")
			within(t, off.RPS, alone.RPS, 0.01, "off: the throughput of the stable backends alone")

			if a.Name == "lrt-naive" {
				return // it herds onto one backend (see TestFeedback): queueing, not the canary, sets its figures
			}
			var attempts int64
			for _, b := range on.Backends {
				attempts += b.Sent
			}
			binomial(t, on.Backends[canary].Sent, attempts, sim.DefaultCanaryShare, "on: the canary's share of the attempts")
			tol := float64(sim.HistogramError)
			within(t, float64(on.P99)/float64(off.P99), sim.CanarySlowdown, 2*tol, "on: the p99 is the canary's")
			within(t, float64(on.Median), float64(off.Median), tol, "on: the p50 is the stable backends'")
			within(t, on.RPS/off.RPS, wantRatio, 0.01, "on: the throughput for the longer mean latency")
			t.Logf("off: p99 %v, %.1f RPS (alone %v, %.1f); on: canary share %.2f%%, p50 %v, p99 %v, %.1f RPS (%.2f%%, the law says %.2f%%)",
				off.P99, off.RPS, alone.P99, alone.RPS, 100*on.Backends[canary].Share, on.Median, on.P99, on.RPS,
				100*(on.RPS/off.RPS-1), 100*(wantRatio-1))
		})
	}
	rr := algo(t, "rr")
	pooled, err := sim.Simulate(sc, sim.None, rr, 1, 1)
	require.NoError(t, err)
	on, err := sim.Simulate(sc, sim.Route|sim.Canary, rr, 1, 1)
	require.NoError(t, err)
	assert.InDelta(t, 1/float64(len(sc.Backends)), pooled.Backends[canary].Share, 0.005, "none: round robin sends the canary its fifth")
	assert.Greater(t, pooled.P99, on.P99, "none: a fifth of the requests at the canary, which queues")
	assert.Less(t, pooled.RPS, on.RPS)
	t.Logf("rr, none: canary share %.1f%%, p99 %v, %.1f RPS; route+canary: p99 %v, %.1f RPS",
		100*pooled.Backends[canary].Share, pooled.P99, pooled.RPS, on.P99, on.RPS)
}

// Backends fail a share (fail=) and carry a track (track=) on the command
// line; Validate holds both, and the variants to their needs.
func TestFailShareAndTrack(t *testing.T) {
	bs, err := sim.ParseBackends("50ms:fail=30%,150ms:track=canary,2x50ms:fail=0.5%:track=stable")
	require.NoError(t, err)
	require.Len(t, bs, 4)
	assert.Equal(t, 0.3, bs[0].FailShare)
	assert.Equal(t, "canary", bs[1].Track)
	assert.InDelta(t, 0.005, bs[3].FailShare, 1e-12)
	assert.Equal(t, "stable", bs[3].Track)
	sc := sim.Scenario{Name: "x", Backends: bs, Users: 1, Stages: []sim.Stage{{time.Second, 1}}}
	require.NoError(t, sc.Validate())
	assert.Equal(t, "50ms:fail=30%,150ms:track=canary,2x50ms:fail=0.5%:track=stable", sc.DescribeBackends())
	for _, bad := range []string{"50ms:fail=30", "50ms:fail=x%"} {
		_, err := sim.ParseBackends(bad)
		assert.ErrorIs(t, err, sim.ErrScenario, "%q", bad)
	}
	for _, share := range []float64{-0.1, 1.5, math.NaN()} {
		s := sc
		s.Backends = []sim.Backend{{Latency: time.Millisecond, FailShare: share}}
		assert.ErrorIs(t, s.Validate(), sim.ErrScenario, "fail share %v", share)
	}
	for _, v := range []sim.Variant{sim.Canary, sim.Route | sim.Locality} {
		s := sc
		s.Variants = []sim.Variant{v}
		assert.ErrorIs(t, s.Validate(), sim.ErrScenario, "%v", v)
	}
	for _, share := range []float64{-0.1, 1} {
		s := sc
		s.CanaryShare = share
		assert.ErrorIs(t, s.Validate(), sim.ErrScenario, "canary share %v", share)
	}
	v, err := sim.ParseVariant("route+canary")
	require.NoError(t, err)
	assert.Equal(t, sim.Route|sim.Canary, v)

	// A picker whose loop the simulator turns cannot run inside route.
	s := sc
	s.Variants = []sim.Variant{sim.Route}
	_, err = sim.Run([]sim.Scenario{s}, []catalog.Algorithm{algo(t, "prequal")}, sim.Options{Seed: 1})
	assert.ErrorIs(t, err, sim.ErrScenario)
	_, err = sim.Simulate(s, sim.Route, algo(t, "prequal"), 1, 1)
	assert.ErrorIs(t, err, sim.ErrScenario)

	// The share of requests tagged for the canary is the scenario's.
	canary, ok := func() (sim.Scenario, bool) {
		for _, s := range sim.SlowScenarios(nil) {
			if s.Name == "canary" {
				return s, true
			}
		}
		return sim.Scenario{}, false
	}()
	require.True(t, ok)
	canary = canary.Scale(0.05)
	canary.CanaryShare = 0.5
	r, err := sim.Simulate(canary, sim.Route|sim.Canary, algo(t, "rr"), 1, 1)
	require.NoError(t, err)
	last := r.Backends[len(r.Backends)-1]
	var attempts int64
	for _, b := range r.Backends {
		attempts += b.Sent
	}
	binomial(t, last.Sent, attempts, 0.5, "half the requests tagged")
	t.Logf("canary share 50%%: %d of %d attempts to the canary", last.Sent, attempts)
}
