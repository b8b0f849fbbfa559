package sim_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/bench/sim"
	"github.com/lbkit/lbkit/catalog"
)

// scenarioAlgorithms returns the algorithms a test that runs scenarios
// over every algorithm runs: all of them without the race detector, and
// under it one of each family (raceAlgorithms), which keeps the package's
// tests under -race to about a third of their time. .ci/test runs this
// package without -race too, so every algorithm is still held to every
// such test on every CI run.
func scenarioAlgorithms(t testing.TB) []catalog.Algorithm {
	t.Helper()
	if !raceEnabled {
		return catalog.Algorithms()
	}
	var as []catalog.Algorithm
	for _, name := range raceAlgorithms {
		as = append(as, algo(t, name))
	}
	return as
}

// raceAlgorithms are the families under -race: one that keeps no state
// (rr), one that counts in flight (leastconn), and one that reads the
// clock and learns latencies (lrt): each drives a different part of the
// simulator and of lbhttp's decorators.
var raceAlgorithms = []string{"rr", "leastconn", "lrt"}

// algo returns the configuration named name from catalog.Algorithms.
func algo(t testing.TB, name string) catalog.Algorithm {
	t.Helper()
	a, ok := catalog.Lookup(name)
	for _, l := range catalog.LoadAware() {
		if l.Name == name {
			a, ok = l, true
		}
	}
	require.True(t, ok, "no algorithm %q", name)
	return a
}

// scenario returns the default scenario named name.
func scenario(t testing.TB, name string) sim.Scenario {
	t.Helper()
	s, ok := sim.Default(name)
	require.True(t, ok, "no scenario %q", name)
	return s
}

func within(t *testing.T, got, want, tol float64, what string) {
	t.Helper()
	assert.InDelta(t, want, got, tol*want, "%s: got %.4g, want %.4g ± %.0f%%", what, got, want, 100*tol)
}

// TestLittlesLaw checks the simulator against queueing theory in the
// steady scenario. A closed loop of N users who think Z between requests
// has throughput X = N/(R+Z), R being the mean response time, whatever
// the picker; round robin over backends with fixed delays and unlimited
// capacity gives R = the mean of the delays; and each backend holds on
// average L = λ·W requests (Little's law), λ its arrival rate and W its
// delay.
func TestLittlesLaw(t *testing.T) {
	sc := scenario(t, "steady")
	n := float64(sc.Users)
	z := sc.Think.Seconds()
	for _, a := range scenarioAlgorithms(t) {
		t.Run(a.Name, func(t *testing.T) {
			sc := sc
			if a.Name != "rr" {
				sc = sc.Scale(0.5) // the law holds as well over 90 s; the suite runs faster
			}
			r, err := sim.Simulate(sc, sim.None, a, 1, 1)
			require.NoError(t, err)
			require.Zero(t, r.Errors)
			within(t, r.RPS, n/(r.Mean.Seconds()+z), 0.02, "X = N/(R+Z)")
			var sent int64
			for _, b := range r.Backends {
				sent += b.Sent
			}
			for i, b := range r.Backends {
				lambda := float64(b.Sent) / r.Length.Seconds()
				w := sc.Backends[i].Latency.Seconds()
				if lambda*w > 0.5 { // too few requests to compare
					within(t, b.MeanInFlight, lambda*w, 0.02, "L = λW at "+sc.Label(i))
				}
			}
			if a.Name == "rr" {
				var mean time.Duration
				for _, b := range sc.Backends {
					mean += b.Latency
				}
				mean /= time.Duration(len(sc.Backends))
				within(t, r.Mean.Seconds(), mean.Seconds(), 0.02, "R = mean of delays")
				within(t, r.RPS, n/(mean.Seconds()+z), 0.02, "X = N/(mean delay + Z)")
				for i, b := range r.Backends {
					within(t, b.Share, 0.25, 0.02, "share of "+sc.Label(i))
				}
			}
		})
	}
}

// Little's law with queues: with capacity-limited backends, the requests
// at the backends, queued ones included, average X·R (no time is spent
// anywhere else, so every request in flight is at a backend), whatever
// the picker; rr queues most (its 500 ms backend gets a quarter of the
// requests and serves 32/s). A saturated backend serves exactly its
// capacity over its latency. TestLittlesLaw's backends never queue, so
// only this test holds the queue's accounting to the law.
func TestLittlesLawQueues(t *testing.T) {
	sc := scenario(t, "steady-cap").Scale(0.5)
	for _, name := range []string{"rr", "wrr", "leastconn", "lrt-naive", "maglev"} {
		t.Run(name, func(t *testing.T) {
			r, err := sim.Simulate(sc, sim.None, algo(t, name), 1, 1)
			require.NoError(t, err)
			require.Zero(t, r.Errors)
			var in float64
			for _, b := range r.Backends {
				in += b.MeanInFlight
			}
			within(t, in, r.RPS*r.Mean.Seconds(), 0.02, "Σ L = X·R, queues included")
			within(t, r.RPS, float64(sc.Users)/(r.Mean.Seconds()+sc.Think.Seconds()), 0.02, "X = N/(R+Z)")
		})
	}
	// One saturated backend: 10 users who think 100 ms ask 50 requests/s
	// of a backend that serves 2 at once in 100 ms, 20/s. It serves back
	// to back, X = c/L; the users wait R = N/X − Z = 400 ms; L = X·R = 8
	// are at the backend, 2 in service and 6 queued.
	one := sim.Scenario{
		Name:     "saturated",
		Backends: []sim.Backend{{Latency: 100 * time.Millisecond, Capacity: 2}},
		Users:    10,
		Stages:   []sim.Stage{{Duration: time.Minute, Target: 10}},
		Think:    100 * time.Millisecond,
	}
	r, err := sim.Simulate(one, sim.None, algo(t, "rr"), 1, 1)
	require.NoError(t, err)
	within(t, r.RPS, 20, 0.01, "X = c/L")
	within(t, r.Mean.Seconds(), 0.4, 0.01, "R = N/X − Z")
	within(t, r.Backends[0].MeanInFlight, 8, 0.01, "L = X·R")
	assert.Equal(t, 10, r.Backends[0].PeakInFlight, "every user at the backend at once, at the start")
}

// The pickers that learn from Done behave as they promise only if every
// attempt's Done reaches them: least connections evens out the requests
// in flight; least response time sends most to the fastest backend;
// bounded loads keep each backend under ⌈c·N/n⌉ requests. A simulator
// that never called Done would leave the first two picking like round
// robin and the third bounding picks, not requests in flight (each check
// fails then; TestLittlesLaw does not).
func TestFeedback(t *testing.T) {
	sc := scenario(t, "steady").Scale(0.5)
	run := func(name string) sim.Result {
		t.Helper()
		r, err := sim.Simulate(sc, sim.None, algo(t, name), 1, 1)
		require.NoError(t, err)
		return r
	}
	rr, lc, lrt := run("rr"), run("leastconn"), run("lrt")

	lo, hi := math.Inf(1), 0.0
	for _, b := range lc.Backends {
		lo, hi = min(lo, b.MeanInFlight), max(hi, b.MeanInFlight)
	}
	assert.Less(t, hi/lo, 1.5, "leastconn evens out requests in flight: %.2f to %.2f (rr: %.2f to %.2f)",
		lo, hi, rr.Backends[0].MeanInFlight, rr.Backends[3].MeanInFlight)

	assert.Greater(t, lrt.Backends[0].Share, rr.Backends[0].Share+0.3, "lrt sends most to the fastest backend")

	for _, name := range []string{"steady", "steady-cap"} {
		sc := scenario(t, name).Scale(0.5)
		r, err := sim.Simulate(sc, sim.None, algo(t, "ring-bounded"), 1, 1)
		require.NoError(t, err)
		// At most N−1 others in flight when a user picks: no backend takes
		// one while it holds ⌈1.25·N/n⌉.
		bound := int(math.Ceil(1.25 * float64(sc.Users) / float64(len(sc.Backends))))
		for i, b := range r.Backends {
			assert.LessOrEqual(t, b.PeakInFlight, bound, "%s: ring-bounded's peak at %s", name, sc.Label(i))
		}
	}
}

// SetLatencies gives the mean and the nearest-rank percentiles: the
// smallest value with at least p of the values at or below it.
func TestPercentiles(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // unsorted: SetLatencies sorts
	}
	for _, tc := range []struct {
		name                string
		in                  []time.Duration
		mean, p50, p95, p99 time.Duration
	}{
		{"1 to 100", ms(hundred...), 50500 * time.Microsecond, 50 * time.Millisecond, 95 * time.Millisecond, 99 * time.Millisecond},
		{"1 to 10", ms(10, 9, 8, 7, 6, 5, 4, 3, 2, 1), 5500 * time.Microsecond, 5 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond},
		{"1 to 20", ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20), 10500 * time.Microsecond, 10 * time.Millisecond, 19 * time.Millisecond, 20 * time.Millisecond},
		{"one", ms(7), 7 * time.Millisecond, 7 * time.Millisecond, 7 * time.Millisecond, 7 * time.Millisecond},
		{"two", ms(3, 1), 2 * time.Millisecond, 1 * time.Millisecond, 3 * time.Millisecond, 3 * time.Millisecond},
		{"none", nil, 0, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := sim.Result{Mean: 1, Median: 1, P95: 1, P99: 1}
			r.SetLatencies(tc.in)
			assert.Equal(t, []time.Duration{tc.mean, tc.p50, tc.p95, tc.p99}, []time.Duration{r.Mean, r.Median, r.P95, r.P99})
		})
	}
}

// A single backend serving one request at a time is a FIFO queue: with N
// users and no think time it serves back to back, X = 1/L, and each user
// waits for all N, R = N·L.
func TestQueue(t *testing.T) {
	sc := sim.Scenario{
		Name:     "queue",
		Backends: []sim.Backend{{Latency: 100 * time.Millisecond, Capacity: 1}},
		Users:    5,
		Stages:   []sim.Stage{{Duration: time.Minute, Target: 5}},
	}
	r, err := sim.Simulate(sc, sim.None, algo(t, "rr"), 1, 1)
	require.NoError(t, err)
	within(t, r.RPS, 10, 0.01, "X")
	within(t, r.Median.Seconds(), 0.5, 0.001, "median R")
	within(t, r.Backends[0].MeanInFlight, 5, 0.01, "in flight")
	assert.Equal(t, 5, r.Backends[0].PeakInFlight)
}

// Service-time distributions have the mean they are documented to have.
func TestDistributions(t *testing.T) {
	l := 100 * time.Millisecond
	for _, tc := range []struct {
		name string
		b    sim.Backend
		mean float64 // seconds
	}{
		{"fixed", sim.Backend{Latency: l}, 0.1},
		{"jitter", sim.Backend{Latency: l, Jitter: 50 * time.Millisecond}, 0.1},
		{"lognormal", sim.Backend{Latency: l, Sigma: 0.5}, 0.1 * math.Exp(0.125)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := sim.Scenario{Name: tc.name, Backends: []sim.Backend{tc.b}, Users: 200,
				Stages: []sim.Stage{{Duration: time.Minute, Target: 200}}, Think: 50 * time.Millisecond}
			r, err := sim.Simulate(sc, sim.None, algo(t, "rr"), 1, 7)
			require.NoError(t, err)
			within(t, r.Mean.Seconds(), tc.mean, 0.02, "mean service time")
			if tc.name == "fixed" {
				assert.Equal(t, l, r.P99)
			} else {
				assert.Greater(t, r.P99, r.Median, "a distribution has a tail")
			}
		})
	}
}

func TestDeterministic(t *testing.T) {
	// Any length shows whether the workers change the tables; under -race,
	// where this is the test that runs the simulator on several
	// goroutines, a shorter one keeps it to seconds.
	f := 1.0
	if raceEnabled {
		f = 0.4
	}
	scs := []sim.Scenario{scenario(t, "burst").Scale(0.05 * f), scenario(t, "failure-cap").Scale(0.05 * f), sim.SlowScenarios(nil)[0].Scale(0.2 * f)}
	scs[0].Backends[1].Sigma = 0.5                                         // draws from the seeded source too
	scs[2].Backends[1].TailShare, scs[2].Backends[1].TailFactor = 0.05, 20 // and the hedges have work
	// The algorithms that draw random numbers or read the clock, and one
	// that does neither.
	algos := []catalog.Algorithm{algo(t, "rr"), algo(t, "leastconn"), algo(t, "lrt"), algo(t, "ring-bounded")}
	run := func(seed uint64, workers int) (string, string) {
		rep, err := sim.Run(scs, algos, sim.Options{Seed: seed, Proxies: []int{1, 3}, Workers: workers})
		require.NoError(t, err)
		var text, html bytes.Buffer
		require.NoError(t, rep.WriteText(&text))
		require.NoError(t, rep.WriteHTML(&html))
		return text.String(), html.String()
	}
	text1, html1 := run(42, 1)
	text2, html2 := run(42, 4)
	assert.Equal(t, text1, text2, "same seed, same tables, whatever the number of workers")
	assert.Equal(t, html1, html2)
	text3, _ := run(43, 2)
	assert.NotEqual(t, text1, text3, "the seed matters")
}

// Every algorithm appears in every default scenario, under each of its
// variants, and serves requests there.
func TestEveryAlgorithmEveryScenario(t *testing.T) {
	var scs []sim.Scenario
	for _, s := range sim.Defaults(nil) {
		scs = append(scs, s.Scale(0.05))
	}
	algos := catalog.Algorithms()
	rep, err := sim.Run(scs, algos, sim.Options{Seed: 1})
	require.NoError(t, err)
	require.Len(t, rep.Scenarios, 6)
	for _, sr := range rep.Scenarios {
		vs := sr.Scenario.RunVariants()
		require.Len(t, sr.Results, len(vs)*len(algos), sr.Scenario.Name)
		for i, r := range sr.Results {
			assert.Equal(t, vs[i/len(algos)], r.Variant)
			assert.Equal(t, algos[i%len(algos)].Name, r.Algorithm)
			assert.Positive(t, r.Requests, "%s/%v/%s", sr.Scenario.Name, r.Variant, r.Algorithm)
		}
	}
	assert.Len(t, rep.Scenarios[2].Scenario.RunVariants(), 4, "failure compares four variants")
}

// The failure scenario: without health checks, leastconn and lrt turn the
// dead backend, which fails fast, into a black hole; active checks and
// passive ejection stop the refusals but not the failures of the requests
// in flight on the backend when it died; retries (of refused and of reset
// attempts, as lbhttp retries a GET) save those too, so no user request
// fails.
func TestFailure(t *testing.T) {
	sc := scenario(t, "failure").Scale(0.5) // the kill at 30 s
	for _, a := range scenarioAlgorithms(t) {
		t.Run(a.Name, func(t *testing.T) {
			bare, err := sim.Simulate(sc, sim.None, a, 1, 1)
			require.NoError(t, err)
			passive, err := sim.Simulate(sc, sim.Active|sim.Passive, a, 1, 1)
			require.NoError(t, err)
			best, err := sim.Simulate(sc, sim.Active|sim.Passive|sim.Retry, a, 1, 1)
			require.NoError(t, err)
			require.NotNil(t, best.Failure)

			// Without retries, every request in flight at the kill fails,
			// and so does every refused attempt. (The hash pickers pin
			// few users to the dead backend; at the kill none of them may
			// be waiting for it.)
			pinned := a.Name == "iphash" || a.Name == "ring" || a.Name == "maglev"
			dead := passive.Backends[0]
			if !pinned {
				assert.Positive(t, dead.Reset, "requests were in flight on the backend when it died")
			}
			assert.LessOrEqual(t, dead.Reset, int64(dead.PeakInFlight))
			assert.Equal(t, dead.Reset+dead.Refused, passive.Errors, "without retries each failed attempt is a failed request")
			assert.Zero(t, passive.Retries)

			// With retries, each of those attempts is sent once more, to a
			// live backend.
			dead = best.Backends[0]
			if !pinned {
				assert.Positive(t, dead.Reset)
			}
			assert.Zero(t, best.Errors, "every failed attempt was retried on a live backend")
			assert.Equal(t, dead.Reset+dead.Refused, best.Retries, "one retry per failed attempt")
			for i, b := range best.Backends[1:] {
				assert.Zero(t, b.Refused+b.Reset, "backend %d never failed", i+2)
			}
			assert.Positive(t, best.Failure.Before)
			if a.Name == "leastconn" || a.Name == "lrt" {
				assert.Greater(t, bare.Errors, 1000+passive.Errors, "a fast-failing backend is a black hole")
				assert.Less(t, bare.Failure.Change(), -0.5)
			}
			t.Logf("errors none %d, active+passive %d (in flight at the kill %d), active+passive+retry %d; RPS %.1f → %.1f",
				bare.Errors, passive.Errors, passive.Backends[0].Reset, best.Errors, best.Failure.Before, best.Failure.After)
		})
	}
}

// A backend that comes back is used again, and errors happen only while
// it is dead (plus the think time of the users it failed).
func TestRevive(t *testing.T) {
	sc := sim.Scenario{
		Name: "revive",
		Backends: []sim.Backend{
			{Latency: 20 * time.Millisecond, Down: []sim.Outage{{At: 10 * time.Second, Until: 20 * time.Second}}},
			{Latency: 20 * time.Millisecond},
		},
		Users:  10,
		Stages: []sim.Stage{{Duration: 30 * time.Second, Target: 10}},
		Think:  80 * time.Millisecond,
	}
	r, err := sim.Simulate(sc, sim.None, algo(t, "rr"), 1, 1)
	require.NoError(t, err)
	s := r.Series
	for k := range s.Errors {
		start := time.Duration(k) * s.Step
		if start < 10*time.Second || start >= 21*time.Second {
			assert.Zero(t, s.Errors[k], "errors at %v", start)
		}
		if start >= 21*time.Second {
			assert.Positive(t, s.InFlight[0][k], "back in use at %v", start)
		}
	}
	assert.Positive(t, r.Errors)
	assert.Equal(t, r.Errors, r.Backends[0].Refused+r.Backends[0].Reset)
	// Before: each user's cycle is 20 ms of service and 80 of thought.
	// During: every other attempt is refused at once and followed by a
	// thought too, so two cycles bring one success.
	within(t, r.Failure.Before, 10/0.1, 0.02, "X before")
	within(t, r.Failure.After, 10/(0.1+sim.RefuseTime.Seconds()+0.08), 0.02, "X while one of two is dead")
}

// The user count follows the stage profile: the burst scenario at the
// end of each stage.
func TestProfile(t *testing.T) {
	sc := scenario(t, "burst")
	r, err := sim.Simulate(sc, sim.None, algo(t, "rr"), 1, 1)
	require.NoError(t, err)
	s := r.Series
	at := func(d time.Duration) int { return s.Users[int(d/s.Step)-1] }
	assert.Equal(t, 10, at(20*time.Second))
	assert.Equal(t, 130, at(35*time.Second), "half way up the ramp")
	assert.Equal(t, 250, at(50*time.Second))
	assert.Equal(t, 250, at(90*time.Second))
	assert.Equal(t, 10, at(120*time.Second))
	assert.Equal(t, 10, at(140*time.Second))
	assert.Equal(t, 250, slices.Max(s.Users))
}

// Every user has an address of its own that parses: iphash rejects a key
// that does not (user 255 once had "10.1.0.256").
func TestUserAddr(t *testing.T) {
	seen := make(map[string]int)
	for u := range 70_000 {
		a := sim.UserAddr(u)
		_, err := netip.ParseAddr(a)
		require.NoError(t, err, "user %d", u)
		prev, dup := seen[a]
		require.False(t, dup, "users %d and %d share %s", prev, u, a)
		seen[a] = u
	}
	assert.Equal(t, "10.1.0.1", sim.UserAddr(0))
	assert.Equal(t, "10.1.0.0", sim.UserAddr(255))
	assert.Equal(t, "10.1.1.1", sim.UserAddr(256))

	sc := scenario(t, "steady").ScaleUsers(300)
	r, err := sim.Simulate(sc.Scale(0.05), sim.None, algo(t, "iphash"), 1, 1)
	require.NoError(t, err)
	assert.Zero(t, r.Errors, "iphash serves 300 users")
}

// UserChanges lists the burst profile's joins and leaves in time order.
func TestUserChanges(t *testing.T) {
	sc := scenario(t, "burst")
	var joins, leaves int
	var last time.Duration
	for c := range sc.UserChanges() {
		require.GreaterOrEqual(t, c.At, last)
		last = c.At
		if c.Join {
			joins++
		} else {
			leaves++
		}
	}
	assert.Equal(t, 240, joins, "10 → 250")
	assert.Equal(t, 240, leaves, "250 → 10")
	assert.Equal(t, 120*time.Second, last, "the last leaves at the end of the ramp down")
	n := 0
	for range sc.UserChanges() {
		n++
		if n == 3 {
			break // the iterator stops when asked
		}
	}
	assert.Equal(t, 3, n)
}

// With M proxies, each picker sees a slice of the users; closed-loop
// throughput still obeys X = N/(R+Z).
func TestProxies(t *testing.T) {
	sc := scenario(t, "steady-cap").Scale(0.25)
	for _, name := range []string{"leastconn", "lrt"} {
		one, err := sim.Simulate(sc, sim.None, algo(t, name), 1, 1)
		require.NoError(t, err)
		ten, err := sim.Simulate(sc, sim.None, algo(t, name), 10, 1)
		require.NoError(t, err)
		assert.Equal(t, 10, ten.Proxies)
		within(t, ten.RPS, float64(sc.Users)/(ten.Mean.Seconds()+sc.Think.Seconds()), 0.02, name+" X = N/(R+Z)")
		assert.NotEqual(t, one.Backends, ten.Backends, name+": a partial view changes the spread")
	}
}

// The event loop allocates nothing per event: a run of some 50,000
// events allocates a bounded handful of times, mostly at set-up.
func TestRunAllocations(t *testing.T) {
	sc := scenario(t, "steady").Scale(0.5)
	for _, name := range []string{"rr", "leastconn", "lrt", "maglev"} {
		allocs := testing.AllocsPerRun(1, func() {
			_, err := sim.Simulate(sc, sim.None, algo(t, name), 1, 1)
			require.NoError(t, err)
		})
		t.Logf("%s: %v allocations", name, allocs)
		assert.Less(t, allocs, 500.0, "%s: %v allocations for ~50k events", name, allocs)
	}
	// And with everything the slow scenarios add: a stall, timeouts, the
	// users' give-ups, the budget and hedges.
	stall := sim.SlowScenarios(nil)[0].Scale(0.5)
	for _, name := range []string{"rr", "lrt"} {
		allocs := testing.AllocsPerRun(1, func() {
			r, err := sim.Simulate(stall, sim.Active|sim.Passive|sim.Retry|sim.Timeout|sim.Budget|sim.Hedge, algo(t, name), 1, 1)
			require.NoError(t, err)
			require.Positive(t, r.Retries)
		})
		t.Logf("stall, %s: %v allocations", name, allocs)
		assert.Less(t, allocs, 500.0, "stall, %s: %v allocations", name, allocs)
	}
}

// Run's workers end before it returns, and Progress counts every run.
func TestRunGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	sc := scenario(t, "failure").Scale(0.02)
	var calls []int
	runs := 4 * len(catalog.Algorithms())
	rep, err := sim.Run([]sim.Scenario{sc}, catalog.Algorithms(), sim.Options{Workers: 3, Progress: func(done, total int, run string) {
		assert.Equal(t, runs, total)
		assert.Contains(t, run, "failure/")
		calls = append(calls, done)
	}})
	require.NoError(t, err)
	require.Len(t, rep.Scenarios[0].Results, runs)
	assert.Len(t, calls, runs)
	assert.True(t, slices.IsSorted(calls))
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), before, "a worker outlived Run")

	bad := sc
	bad.Backends = nil
	_, err = sim.Run([]sim.Scenario{sc, bad}, catalog.Algorithms(), sim.Options{})
	require.ErrorIs(t, err, sim.ErrScenario)
	assert.LessOrEqual(t, runtime.NumGoroutine(), before, "a refused Run starts nothing")
}

func TestValidate(t *testing.T) {
	good := func() sim.Scenario { return scenario(t, "failure") }
	for _, tc := range []struct {
		name string
		edit func(*sim.Scenario)
	}{
		{"no name", func(s *sim.Scenario) { s.Name = "" }},
		{"no backends", func(s *sim.Scenario) { s.Backends = nil }},
		{"no stages", func(s *sim.Scenario) { s.Stages = nil }},
		{"no users", func(s *sim.Scenario) { s.Users, s.Stages = 0, []sim.Stage{{time.Second, 0}} }},
		{"too many users", func(s *sim.Scenario) { s.Users = sim.MaxUsers + 1 }},
		{"negative users", func(s *sim.Scenario) { s.Users = -1 }},
		{"zero stage", func(s *sim.Scenario) { s.Stages[0].Duration = 0 }},
		{"negative target", func(s *sim.Scenario) { s.Stages = append(s.Stages, sim.Stage{time.Second, -1}) }},
		{"negative think", func(s *sim.Scenario) { s.Think = -1 }},
		{"negative interval", func(s *sim.Scenario) { s.CheckInterval = -1 }},
		{"tiny interval", func(s *sim.Scenario) { s.CheckInterval = time.Microsecond }},
		{"bad variant", func(s *sim.Scenario) { s.Variants = []sim.Variant{1 << 12} }},
		{"budget without retry", func(s *sim.Scenario) { s.Variants = []sim.Variant{sim.Active | sim.Timeout | sim.Budget} }},
		{"hedge without retry", func(s *sim.Scenario) { s.Variants = []sim.Variant{sim.Hedge} }},
		{"negative client timeout", func(s *sim.Scenario) { s.ClientTimeout = -1 }},
		{"client timeout too long", func(s *sim.Scenario) { s.ClientTimeout = sim.MaxLength + 1 }},
		{"negative tail", func(s *sim.Scenario) { s.Backends[1].TailShare, s.Backends[1].TailFactor = -0.01, 20 }},
		{"tail of all", func(s *sim.Scenario) { s.Backends[1].TailShare, s.Backends[1].TailFactor = 1, 20 }},
		{"tail NaN", func(s *sim.Scenario) { s.Backends[1].TailShare, s.Backends[1].TailFactor = math.NaN(), 20 }},
		{"tail without factor", func(s *sim.Scenario) { s.Backends[1].TailShare = 0.01 }},
		{"tail factor too big", func(s *sim.Scenario) { s.Backends[1].TailShare, s.Backends[1].TailFactor = 0.01, 1e6 }},
		{"factor without tail", func(s *sim.Scenario) { s.Backends[1].TailFactor = 20 }},
		{"stall after the end", func(s *sim.Scenario) { s.Backends[1].Stalls = []sim.Outage{{At: time.Hour}} }},
		{"stalls overlap", func(s *sim.Scenario) {
			s.Backends[1].Stalls = []sim.Outage{{At: time.Second, Until: 3 * time.Second}, {At: 2 * time.Second}}
		}},
		{"503 span ends first", func(s *sim.Scenario) {
			s.Backends[1].Unavailable = []sim.Outage{{At: 2 * time.Second, Until: time.Second}}
		}},
		{"zero latency", func(s *sim.Scenario) { s.Backends[1].Latency = 0 }},
		{"jitter too big", func(s *sim.Scenario) { s.Backends[1].Jitter = s.Backends[1].Latency }},
		{"jitter and sigma", func(s *sim.Scenario) { s.Backends[1].Jitter, s.Backends[1].Sigma = 1, 0.1 }},
		{"sigma NaN", func(s *sim.Scenario) { s.Backends[1].Sigma = math.NaN() }},
		{"negative weight", func(s *sim.Scenario) { s.Backends[1].Weight = -1 }},
		{"negative capacity", func(s *sim.Scenario) { s.Backends[1].Capacity = -1 }},
		{"duplicate address", func(s *sim.Scenario) { s.Backends[1].Addr = s.ID(0) }},
		{"outage after the end", func(s *sim.Scenario) { s.Backends[1].Down = []sim.Outage{{At: time.Hour}} }},
		{"outage ends first", func(s *sim.Scenario) { s.Backends[1].Down = []sim.Outage{{At: 2 * time.Second, Until: time.Second}} }},
		{"outages overlap", func(s *sim.Scenario) {
			s.Backends[1].Down = []sim.Outage{{At: time.Second, Until: 3 * time.Second}, {At: 2 * time.Second}}
		}},
		{"endless outage then another", func(s *sim.Scenario) {
			s.Backends[1].Down = []sim.Outage{{At: time.Second}, {At: 2 * time.Second}}
		}},
		{"neighbour without capacity", func(s *sim.Scenario) { s.Backends[1].Neighbours = []sim.Neighbour{{At: time.Second, Takes: 1}} }},
		{"neighbour takes all", func(s *sim.Scenario) {
			s.Backends[1].Capacity, s.Backends[1].Neighbours = 4, []sim.Neighbour{{At: time.Second, Takes: 4}}
		}},
		{"neighbour takes nothing", func(s *sim.Scenario) {
			s.Backends[1].Capacity, s.Backends[1].Neighbours = 4, []sim.Neighbour{{At: time.Second}}
		}},
		{"neighbour after the end", func(s *sim.Scenario) {
			s.Backends[1].Capacity, s.Backends[1].Neighbours = 4, []sim.Neighbour{{At: time.Hour, Takes: 1}}
		}},
		{"neighbours overlap", func(s *sim.Scenario) {
			s.Backends[1].Capacity = 4
			s.Backends[1].Neighbours = []sim.Neighbour{{At: time.Second, Until: 3 * time.Second, Takes: 1}, {At: 2 * time.Second, Takes: 2}}
		}},
		{"negative report delay", func(s *sim.Scenario) { s.ReportDelay = -1 }},
		{"report delay too long", func(s *sim.Scenario) { s.ReportDelay = sim.MaxReportDelay + 1 }},
		{"negative probe round trip", func(s *sim.Scenario) { s.ProbeRTT = -1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good()
			require.NoError(t, s.Validate())
			tc.edit(&s)
			err := s.Validate()
			require.ErrorIs(t, err, sim.ErrScenario)
			_, err = sim.Simulate(s, sim.None, algo(t, "rr"), 1, 1)
			require.ErrorIs(t, err, sim.ErrScenario)
			_, err = sim.Run([]sim.Scenario{s}, catalog.Algorithms(), sim.Options{})
			require.ErrorIs(t, err, sim.ErrScenario)
		})
	}
	_, err := sim.Simulate(good(), sim.None, algo(t, "rr"), 0, 1)
	require.ErrorIs(t, err, sim.ErrScenario, "zero proxies")
	_, err = sim.Run([]sim.Scenario{good()}, nil, sim.Options{})
	require.ErrorIs(t, err, sim.ErrScenario, "no algorithms")
}

func TestParseBackends(t *testing.T) {
	bs, err := sim.ParseBackends("50ms:w=6:c=8, 150ms:j=10ms:name=mid,300ms:s=0.5:down=1m-1m30s:down=2m")
	require.NoError(t, err)
	assert.Equal(t, []sim.Backend{
		{Latency: 50 * time.Millisecond, Weight: 6, Capacity: 8},
		{Latency: 150 * time.Millisecond, Jitter: 10 * time.Millisecond, Name: "mid"},
		{Latency: 300 * time.Millisecond, Sigma: 0.5, Down: []sim.Outage{{time.Minute, 90 * time.Second}, {At: 2 * time.Minute}}},
	}, bs)
	sc := sim.Scenario{Backends: bs}
	again, err := sim.ParseBackends(sc.DescribeBackends())
	require.NoError(t, err)
	assert.Equal(t, bs, again, "DescribeBackends prints what ParseBackends reads")

	bs, err = sim.ParseBackends("50ms:stall=1m:stall=2m-2m30s,150ms:503=1m-1m30s:tail=1%x20,300ms:tail=7%x2.5")
	require.NoError(t, err)
	assert.Equal(t, []sim.Backend{
		{Latency: 50 * time.Millisecond, Stalls: []sim.Outage{{At: time.Minute}, {2 * time.Minute, 150 * time.Second}}},
		{Latency: 150 * time.Millisecond, Unavailable: []sim.Outage{{time.Minute, 90 * time.Second}}, TailShare: 0.01, TailFactor: 20},
		{Latency: 300 * time.Millisecond, TailShare: 0.07, TailFactor: 2.5},
	}, bs)
	sc = sim.Scenario{Backends: bs}
	again, err = sim.ParseBackends(sc.DescribeBackends())
	require.NoError(t, err)
	assert.Equal(t, bs, again, "DescribeBackends prints stalls, 503s and tails as ParseBackends reads them")

	bs, err = sim.ParseBackends("50ms:c=16:nb=8@1m,50ms:c=4:nb=1@10s-20s:nb=3@30s")
	require.NoError(t, err)
	assert.Equal(t, []sim.Backend{
		{Latency: 50 * time.Millisecond, Capacity: 16, Neighbours: []sim.Neighbour{{At: time.Minute, Takes: 8}}},
		{Latency: 50 * time.Millisecond, Capacity: 4, Neighbours: []sim.Neighbour{{10 * time.Second, 20 * time.Second, 1}, {At: 30 * time.Second, Takes: 3}}},
	}, bs)
	sc = sim.Scenario{Backends: bs}
	again, err = sim.ParseBackends(sc.DescribeBackends())
	require.NoError(t, err)
	assert.Equal(t, bs, again, "DescribeBackends prints neighbours as ParseBackends reads them")

	for _, bad := range []string{"", "fast", "50ms:w", "50ms:w=x", "50ms:c=1.5", "50ms:q=1", "50ms:down=soon", "50ms:down=1m-x", "50ms:s=x", "50ms,,",
		"50ms:c=4:nb=2", "50ms:c=4:nb=x@1m", "50ms:c=4:nb=2@soon", "50ms:c=4:nb=2@1m-x",
		"50ms:stall=soon", "50ms:503=1m-x", "50ms:tail=1", "50ms:tail=x%x20", "50ms:tail=1%xy"} {
		_, err := sim.ParseBackends(bad)
		assert.ErrorIs(t, err, sim.ErrScenario, "%q", bad)
	}
}

func TestParseStages(t *testing.T) {
	for _, tc := range []struct {
		spec   string
		users  int
		stages []sim.Stage
	}{
		{"3m:100", 100, []sim.Stage{{3 * time.Minute, 100}}},
		{"0,1m:100,2m:100", 0, []sim.Stage{{time.Minute, 100}, {2 * time.Minute, 100}}},
		{"10, 30s:250", 10, []sim.Stage{{30 * time.Second, 250}}},
	} {
		users, stages, err := sim.ParseStages(tc.spec)
		require.NoError(t, err, tc.spec)
		assert.Equal(t, tc.users, users, tc.spec)
		assert.Equal(t, tc.stages, stages, tc.spec)
	}
	for _, bad := range []string{"", "10", "3m", "x:10", "3m:x", "3m:10,", "10,20", "-5,1s:10"} {
		_, _, err := sim.ParseStages(bad)
		assert.ErrorIs(t, err, sim.ErrScenario, "%q", bad)
	}
}

func TestVariant(t *testing.T) {
	vs := append(sim.FailureVariants(), sim.Retry, sim.Passive|sim.Retry, sim.Retry|sim.Hedge)
	for _, sc := range sim.SlowScenarios(nil) {
		vs = append(vs, sc.Variants...)
	}
	for _, v := range vs {
		got, err := sim.ParseVariant(v.String())
		require.NoError(t, err)
		assert.Equal(t, v, got)
	}
	assert.Equal(t, "active+passive+retry", (sim.Retry | sim.Active | sim.Passive).String())
	assert.Equal(t, "retry+timeout+budget+hedge", (sim.Hedge | sim.Budget | sim.Timeout | sim.Retry).String())
	assert.Equal(t, "active+0x1000", (sim.Active | 1<<12).String())
	assert.True(t, sim.Passive.Health())
	assert.False(t, sim.Retry.Health())
	for _, bad := range []string{"", "all", "active+", "active+none"} {
		_, err := sim.ParseVariant(bad)
		assert.ErrorIs(t, err, sim.ErrScenario, "%q", bad)
	}
}

func TestScale(t *testing.T) {
	s := scenario(t, "failure").Scale(0.5)
	assert.Equal(t, 90*time.Second, s.Length())
	assert.Equal(t, 30*time.Second, s.Backends[0].Down[0].At)
	assert.Equal(t, time.Minute, scenario(t, "failure").Backends[0].Down[0].At, "the original is untouched")

	b := scenario(t, "burst").ScaleUsers(50)
	assert.Equal(t, 50, b.PeakUsers())
	assert.Equal(t, 2, b.Users)
}

// BenchmarkSimulate measures the simulator's time per request: the
// steady scenario for three kinds of picker, and with 100,000 users (for
// 10 s, 2.9 million requests) for round robin, where the event queue's
// size shows.
func BenchmarkSimulate(b *testing.B) {
	for _, tc := range []struct {
		name  string
		users int
	}{{"rr", 100}, {"leastconn", 100}, {"lrt", 100}, {"rr", 100_000}, {"wrr-reported", 100}, {"prequal", 100}} {
		b.Run(fmt.Sprintf("algo=%s/users=%d", tc.name, tc.users), func(b *testing.B) {
			sc := scenario(b, "steady")
			if tc.users != sc.Users {
				sc = sc.ScaleUsers(tc.users).Scale(float64(10*time.Second) / float64(sc.Length()))
			}
			a := algo(b, tc.name)
			b.ReportAllocs()
			var requests int64
			for b.Loop() {
				r, err := sim.Simulate(sc, sim.None, a, 1, 1)
				if err != nil {
					b.Fatal(err)
				}
				requests += r.Requests
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(requests), "ns/request")
		})
	}
}

// A Comparison matches results by scenario, proxies, variant and
// algorithm, and prints both figures with the ratio live/sim; a report
// from elsewhere names its source first.
func TestComparison(t *testing.T) {
	sc := scenario(t, "failure").Scale(0.05)
	// A variant whose name makes the table wider than 120 columns: it is
	// printed whole, not split as a table with per-backend columns.
	sc.Variants = []sim.Variant{sim.None, sim.Active | sim.Passive | sim.Retry | sim.Timeout | sim.Budget | sim.Hedge}
	algos := []catalog.Algorithm{algo(t, "rr"), algo(t, "leastconn")}
	simRep, err := sim.Run([]sim.Scenario{sc}, algos, sim.Options{Seed: 1})
	require.NoError(t, err)
	other, err := sim.Run([]sim.Scenario{sc}, algos[1:], sim.Options{Seed: 2})
	require.NoError(t, err)
	other.Source = "elsewhere"
	// A result the simulation lacks.
	extra := other.Scenarios[0].Results[0]
	extra.Algorithm = "maglev"
	other.Scenarios[0].Results = append(other.Scenarios[0].Results, extra)

	var text, md bytes.Buffer
	c := sim.Comparison{Sim: simRep, Live: other}
	require.NoError(t, c.WriteText(&text))
	require.NoError(t, c.WriteMarkdown(&md))
	t.Log("\n" + text.String())
	lines := strings.Split(text.String(), "\n")
	require.GreaterOrEqual(t, len(lines), 5)
	assert.Equal(t, "failure, 1 proxy: simulated vs live (ratio = live/sim)", lines[0])
	assert.Regexp(t, `^variant +algorithm +RPS sim +RPS live +ratio +mean ms sim +mean ms live +ratio +errors sim +errors live$`, lines[1])

	s, o := simRep.Scenarios[0].Results[1], other.Scenarios[0].Results[0] // leastconn, none
	fields := strings.Fields(lines[2])
	assert.Equal(t, []string{"none", "leastconn",
		strconv.FormatFloat(s.RPS, 'f', 1, 64), strconv.FormatFloat(o.RPS, 'f', 1, 64), strconv.FormatFloat(o.RPS/s.RPS, 'f', 2, 64),
		strconv.FormatFloat(s.Mean.Seconds()*1000, 'f', 1, 64), strconv.FormatFloat(o.Mean.Seconds()*1000, 'f', 1, 64),
		strconv.FormatFloat(float64(o.Mean)/float64(s.Mean), 'f', 2, 64),
		strconv.FormatInt(s.Errors, 10), strconv.FormatInt(o.Errors, 10)}, fields)
	assert.Contains(t, lines[4], "maglev", "rows follow the live report")
	assert.Len(t, strings.Fields(lines[4]), 5, "no simulated figures, no ratios, for a result the simulation lacks")
	assert.Contains(t, md.String(), "| variant | algorithm | RPS sim | RPS live | ratio |")

	var page, plain bytes.Buffer
	require.NoError(t, c.WriteHTML(&page))
	require.NoError(t, other.WriteHTML(&plain))
	assert.Contains(t, page.String(), "<h3>Simulated vs live</h3>")
	assert.Contains(t, page.String(), `<th class="n">RPS sim</th><th class="n">RPS live</th>`)
	assert.Contains(t, page.String(), "<td>leastconn</td><td class=\"n\">"+strconv.FormatFloat(s.RPS, 'f', 1, 64)+"</td>",
		"the side-by-side row opens with the simulated RPS")
	assert.NotContains(t, plain.String(), "Simulated vs live", "a report alone has no comparison")
	assert.Equal(t, strings.Count(plain.String(), "<svg"), strings.Count(page.String(), "<svg"), "the same charts")

	var rep bytes.Buffer
	require.NoError(t, other.WriteText(&rep))
	assert.True(t, strings.HasPrefix(rep.String(), "source: elsewhere\n\nfailure, 1 proxy:"), rep.String())
	rep.Reset()
	require.NoError(t, other.WriteMarkdown(&rep))
	assert.True(t, strings.HasPrefix(rep.String(), "Source: elsewhere.\n\n### failure"), rep.String())
}

// Validate bounds every time a scenario holds (MaxLength), so that no time
// the simulator computes overflows, with a message that says which.
func TestValidateLimits(t *testing.T) {
	good := func() sim.Scenario { return scenario(t, "steady") }
	for _, tc := range []struct {
		name string
		edit func(*sim.Scenario)
		want string
	}{
		{"stage too long", func(s *sim.Scenario) { s.Stages[0].Duration = sim.MaxLength + 1 }, "lasts more than 10000h"},
		{"stages too long together", func(s *sim.Scenario) {
			s.Stages = []sim.Stage{{sim.MaxLength / 2, 10}, {sim.MaxLength / 2, 10}, {time.Second, 10}}
		}, "lasts more than 10000h"},
		{"stages that overflow", func(s *sim.Scenario) {
			s.Stages = []sim.Stage{{2_000_000 * time.Hour, 10}, {2_000_000 * time.Hour, 10}}
		}, "lasts more than 10000h"},
		{"think too long", func(s *sim.Scenario) { s.Think = sim.MaxLength + 1 }, "think time"},
		{"interval too long", func(s *sim.Scenario) { s.CheckInterval = sim.MaxLength + 1 }, "check interval"},
		{"latency too long", func(s *sim.Scenario) { s.Backends[2].Latency = sim.MaxLength + 1 }, "latency"},
		{"outage ends too late", func(s *sim.Scenario) {
			s.Backends[2].Down = []sim.Outage{{At: time.Minute, Until: sim.MaxLength + 1}}
		}, "outage ends"},
		{"scale that overflows", func(s *sim.Scenario) { *s = s.Scale(1e15) }, "lasts more than 10000h"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := good()
			tc.edit(&s)
			err := s.Validate()
			require.ErrorIs(t, err, sim.ErrScenario)
			assert.Contains(t, err.Error(), tc.want)
			_, err = sim.Simulate(s, sim.None, algo(t, "rr"), 1, 1)
			require.ErrorIs(t, err, sim.ErrScenario)
		})
	}
	s := good()
	s.Stages[0].Duration, s.Think, s.CheckInterval = sim.MaxLength, sim.MaxLength, sim.MaxLength
	s.Backends[3].Latency, s.Backends[3].Down = sim.MaxLength, []sim.Outage{{At: time.Minute, Until: sim.MaxLength}}
	require.NoError(t, s.Validate(), "MaxLength itself is allowed")
}

// noPanic runs f and fails t, rather than the whole test binary, if it
// panics.
func noPanic(t *testing.T, f func()) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("panic: %v", p)
		}
	}()
	f()
}

// Scenarios that pass Validate run, whatever their values: user u's
// first send, u·Think/Users, and a ramp's join times, d·k/n, are computed
// without overflow (each once wrapped round to a negative time and the
// simulator panicked), and a lognormal draw far above its median is
// capped rather than wrapped round to a tiny one.
func TestNoOverflow(t *testing.T) {
	rr := algo(t, "rr")
	t.Run("first sends", func(t *testing.T) {
		// lbsim -scenarios steady -algos rr -think 3000h -users 1000
		sc := scenario(t, "steady").ScaleUsers(1000)
		sc.Think = 3000 * time.Hour
		require.NoError(t, sc.Validate())
		assert.Equal(t, 3*time.Hour, sc.FirstSend(1))
		assert.Equal(t, 2997*time.Hour, sc.FirstSend(999))
		noPanic(t, func() {
			r, err := sim.Simulate(sc, sim.None, rr, 1, 1)
			require.NoError(t, err)
			assert.Equal(t, int64(1), r.Requests, "only user 0 sends within 3 minutes")
		})
	})
	t.Run("ramp", func(t *testing.T) {
		sc := sim.Scenario{Name: "ramp", Backends: []sim.Backend{{Latency: 50 * time.Millisecond}},
			Stages: []sim.Stage{{9000 * time.Hour, 10_000}}, Think: sim.MaxLength}
		require.NoError(t, sc.Validate())
		var last time.Duration
		for c := range sc.UserChanges() {
			require.GreaterOrEqual(t, c.At, last, "user %d", c.User)
			last = c.At
		}
		assert.Equal(t, 9000*time.Hour, last)
		noPanic(t, func() {
			r, err := sim.Simulate(sc, sim.None, rr, 1, 1)
			require.NoError(t, err)
			assert.Equal(t, int64(9_999), r.Requests, "every user but the last, who joins at the end, sends once")
		})
	})
	t.Run("lognormal", func(t *testing.T) {
		b := sim.Backend{Latency: sim.MaxLength, Sigma: 4}
		r := rand.New(rand.NewPCG(1, 2))
		above := 0
		for range 10_000 {
			d := b.ServiceTime(r)
			require.GreaterOrEqual(t, d, time.Duration(float64(b.Latency)*math.Exp(-4*6)), "a draw wrapped round")
			require.LessOrEqual(t, d, sim.MaxLength)
			if d >= b.Latency {
				above++
			}
		}
		assert.InDelta(t, 5000, above, 300, "half the draws at or above the median")
	})
}

// FuzzSimulate holds the promise that no Scenario value makes the
// simulator panic: Validate refuses it, or Simulate plays it. Scenarios
// too big to play in a moment are only validated.
func FuzzSimulate(f *testing.F) {
	h := int64(time.Hour)
	// users, target, two stages, think, latency, jitter, sigma, capacity,
	// outage, check interval, variant, proxies, the outage's kind (dead,
	// stalled, 503), a tail share (×20) and the client timeout
	ms := int64(time.Millisecond)
	f.Add(100, 100, int64(3*time.Minute), int64(0), 3000*h, 50*ms, int64(0), 0.0, 0, int64(0), int64(0), int64(0), uint8(0), 1, uint8(0), 0.0, int64(0))
	f.Add(10, 10, 2_000_000*h, 2_000_000*h, 100*ms, 50*ms, int64(0), 0.0, 0, int64(0), int64(0), int64(0), uint8(0), 1, uint8(0), 0.0, int64(0))
	f.Add(0, 10_000, 9000*h, int64(time.Second), int64(sim.MaxLength), ms, int64(0), 4.0, 1, int64(time.Second), int64(2*time.Second), int64(time.Second), uint8(7), 3, uint8(0), 0.0, int64(0))
	f.Add(5, 1, int64(time.Second), int64(time.Second), int64(0), 10*ms, 9*ms, 0.0, 2, 500*ms, int64(0), ms, uint8(3), 2, uint8(0), 0.0, int64(0))
	f.Add(20, 20, int64(20*time.Second), int64(0), 10*ms, 10*ms, int64(0), 0.0, 2, int64(5*time.Second), int64(12*time.Second), int64(time.Second), uint8(0x3f), 2, uint8(1), 0.05, int64(3*time.Second))
	f.Add(20, 20, int64(20*time.Second), int64(0), 10*ms, 10*ms, int64(0), 0.0, 0, int64(5*time.Second), int64(8*time.Second), int64(time.Second), uint8(0x1f), 1, uint8(2), 0.0, int64(0))
	f.Fuzz(func(t *testing.T, users, target int, d1, d2, think, latency, jitter int64, sigma float64, capacity int,
		at, until, interval int64, v uint8, proxies int, kind uint8, tail float64, client int64) {
		sc := sim.Scenario{
			Name:          "fuzz",
			Backends:      []sim.Backend{{Latency: time.Duration(latency), Jitter: time.Duration(jitter), Sigma: sigma, Capacity: capacity}, {Latency: time.Duration(latency)}},
			Users:         users,
			Stages:        []sim.Stage{{time.Duration(d1), target}},
			Think:         time.Duration(think),
			CheckInterval: time.Duration(interval),
			Variants:      []sim.Variant{sim.Variant(v)},
			ClientTimeout: time.Duration(client),
		}
		if d2 != 0 {
			sc.Stages = append(sc.Stages, sim.Stage{time.Duration(d2), users})
		}
		if at != 0 || until != 0 {
			o := []sim.Outage{{At: time.Duration(at), Until: time.Duration(until)}}
			switch b := &sc.Backends[0]; kind % 3 {
			case 0:
				b.Down = o
			case 1:
				b.Stalls = o
			case 2:
				b.Unavailable = o
			}
		}
		if tail != 0 {
			sc.Backends[1].TailShare, sc.Backends[1].TailFactor = tail, 20
		}
		if sc.Validate() != nil || proxies < 1 || proxies > 16 {
			return
		}
		// The work: each user's requests, the health ticks and probes.
		length := sc.Length().Seconds()
		wait := sc.Backends[0].Latency
		if sc.ClientTimeout > 0 {
			wait = min(wait, sc.ClientTimeout) // users who give up sooner send more
		}
		cycle := max(sc.Think.Seconds()+wait.Seconds(), 1e-9)
		work := float64(sc.PeakUsers())*(length/cycle+1) + float64(proxies)*length/sc.Interval().Seconds()*3 + length*10*float64(proxies)
		if work > 2e5 {
			return
		}
		_, err := sim.Simulate(sc, sim.Variant(v), algo(t, "leastconn"), proxies, 1)
		require.NoError(t, err)
	})
}

// RunContext stops when its context ends: between runs (no other starts)
// and within one (a run of some 5 million requests stops at once), and
// leaves no worker behind; a context that ends after the last run changes
// nothing.
func TestRunContext(t *testing.T) {
	before := runtime.NumGoroutine()
	short := scenario(t, "steady").Scale(0.05)
	algos := []catalog.Algorithm{algo(t, "rr"), algo(t, "leastconn"), algo(t, "lrt")}

	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	_, err := sim.RunContext(ctx, []sim.Scenario{short}, algos, sim.Options{Workers: 1, Proxies: []int{1, 2, 3},
		Progress: func(int, int, string) { calls++; cancel() }})
	require.ErrorIs(t, err, context.Canceled)
	assert.Less(t, calls, 9, "runs were left out")

	long := scenario(t, "steady")
	long = long.Scale(float64(5*time.Hour) / float64(long.Length()))
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = sim.RunContext(ctx, []sim.Scenario{long}, algos[:1], sim.Options{})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 5*time.Second, "the run stopped long before its end")

	done, cancel := context.WithCancel(context.Background())
	rep, err := sim.RunContext(done, []sim.Scenario{short}, algos, sim.Options{
		Progress: func(n, total int, _ string) {
			if n == total {
				cancel()
			}
		}})
	require.NoError(t, err, "every run was played")
	require.Len(t, rep.Scenarios[0].Results, 3)
	cancel()

	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), before, "a worker outlived RunContext")
}
