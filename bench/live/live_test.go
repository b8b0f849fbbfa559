package live_test

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/bench/live"
	"github.com/lbkit/lbkit/bench/sim"
	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/lbhttp"
)

// algo returns the configuration named name from catalog.Algorithms.
func algo(t testing.TB, name string) catalog.Algorithm {
	t.Helper()
	a, ok := catalog.Lookup(name)
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

// noLeak fails t if goroutines started after before outlive a grace
// period: every server, client and checker must have stopped.
func noLeak(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// TestAgreement plays a short steady scenario live, for round robin and
// least connections at the same time, and checks that the simulation
// predicts what they do. The rig's own cost (the proxy, loopback, the
// clients, timers that fire late, the machine's scheduling) adds to every
// live request, a millisecond or two of real time on an idle machine and
// tens of milliseconds on a loaded one, and the simulation has none of it:
// on a busy machine least connections' live RPS falls well short of the
// simulation's, which no fixed bound on the live/simulated ratio can both
// allow and still mean something. So round robin, played at the same
// moment, measures the rig, and least connections is checked against a
// simulation that includes what round robin measured:
//
//   - The rig's latency is round robin's live mean minus its simulated
//     one; its think time is what round robin's live cycle (users / RPS)
//     has beyond the cycle simulated with that latency. Least connections
//     is simulated again with the rig's latency added to every backend and
//     its think time to the users', and its live RPS and mean must be
//     within 15% of that simulation's, both ways. Round robin agrees with
//     it by construction, so it is not checked there.
//   - On the side the rig cannot push (more RPS, less latency than the
//     plain simulation), both stay within 15% of the plain simulation:
//     the model is never pessimistic by more than that. On the other side
//     there is no bound of the plain simulation's: on a loaded machine
//     round robin's live mean can reach several times it, while least
//     connections stays close to the simulation with the rig.
//
// The overhead is added, not multiplied: dividing least connections'
// live/simulated ratio by round robin's leaves a bias that grows with the
// load, since its requests are shorter and the same milliseconds weigh
// more on them. Playing both at once makes load that comes and goes weigh
// on both alike. bench/live's doc ("Agreement with the simulator") says
// more. The scale (0.5: backends answer in 25 to 250 ms,
// users think 50 ms) keeps the overhead small against the latencies; 20
// users per algorithm keep the rate low (about 110 requests/s of real time
// each).
func TestAgreement(t *testing.T) {
	sc := scenario(t, "steady").ScaleUsers(20)
	sc = sc.Scale(float64(10*time.Second) / float64(sc.Length()))
	const scale = 0.5
	algos := []catalog.Algorithm{algo(t, "rr"), algo(t, "leastconn")} // rr first: the yardstick
	want := make([]sim.Result, len(algos))
	got := make([]sim.Result, len(algos))
	errs := make([]error, len(algos))
	var wg sync.WaitGroup
	for i, a := range algos {
		var err error
		want[i], err = sim.Simulate(sc, sim.None, a, 1, 1)
		require.NoError(t, err)
		wg.Go(func() {
			got[i], errs[i] = live.Play(context.Background(), sc, sim.None, a, 1, live.Options{Scale: scale, Seed: 1})
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, algos[i].Name)
	}

	// The rig's overhead, measured by round robin: what it adds to a
	// request's latency, and what it adds to a user's cycle beyond that
	// (think timers that fire late), in the scenario's time base.
	rig := func(latency, think time.Duration) sim.Scenario {
		s := sc
		s.Think += think
		s.Backends = slices.Clone(sc.Backends)
		for i := range s.Backends {
			s.Backends[i].Latency += latency
		}
		return s
	}
	cycle := func(r sim.Result) time.Duration {
		return time.Duration(float64(sc.Users) / r.RPS * float64(time.Second))
	}
	latency := max(got[0].Mean-want[0].Mean, 0)
	rrLatency, err := sim.Simulate(rig(latency, 0), sim.None, algos[0], 1, 1)
	require.NoError(t, err)
	think := max(cycle(got[0])-cycle(rrLatency), 0)
	withRig := rig(latency, think)
	t.Logf("the rig's overhead, from round robin: %v of latency, %v of think time, in the scenario's time base",
		latency.Round(time.Millisecond), think.Round(time.Millisecond))

	for i, a := range algos {
		t.Run(a.Name, func(t *testing.T) {
			w, g := want[i], got[i]
			wr, err := sim.Simulate(withRig, sim.None, a, 1, 1)
			require.NoError(t, err)
			rps, mean := g.RPS/w.RPS, float64(g.Mean)/float64(w.Mean)
			rpsRig, meanRig := g.RPS/wr.RPS, float64(g.Mean)/float64(wr.Mean)
			t.Logf("RPS sim %.1f, with the rig %.1f, live %.1f (×%.3f, ×%.3f); mean sim %v, with the rig %v, live %v (×%.3f, ×%.3f); shares sim %s, with the rig %s, live %s",
				w.RPS, wr.RPS, g.RPS, rps, rpsRig, w.Mean, wr.Mean, g.Mean.Round(time.Microsecond), mean, meanRig,
				shares(w), shares(wr), shares(g))
			assert.Zero(t, g.Errors)
			assert.LessOrEqual(t, rps, 1.15, "live RPS / simulated RPS")
			assert.GreaterOrEqual(t, mean, 0.85, "live mean / simulated mean")
			if i == 0 {
				return // the yardstick: it agrees with the simulation with the rig by construction
			}
			assert.InDelta(t, 1, rpsRig, 0.15, "live RPS / RPS simulated with the rig's overhead")
			assert.InDelta(t, 1, meanRig, 0.15, "live mean / mean simulated with the rig's overhead")
		})
	}
}

// shares formats a result's share of attempts per backend, in percent.
func shares(r sim.Result) string {
	parts := make([]string, len(r.Backends))
	for i, b := range r.Backends {
		parts[i] = strconv.FormatFloat(100*b.Share, 'f', 0, 64)
	}
	return strings.Join(parts, "/")
}

// TestFailure kills a backend for real: its listener closes and its
// connections break. The bare picker fails the requests in flight there
// and every later one sent there; passive ejection with retries (lbhttp
// resends a GET that was refused or broke off, on another backend) loses
// none. Everything started is shut down afterwards.
func TestFailure(t *testing.T) {
	before := runtime.NumGoroutine()
	sc := scenario(t, "failure").ScaleUsers(20)
	sc = sc.Scale(float64(6*time.Second) / float64(sc.Length())) // the kill at 2 s
	opt := live.Options{Scale: 0.5, Seed: 1}
	bare, err := live.Play(context.Background(), sc, sim.None, algo(t, "rr"), 1, opt)
	require.NoError(t, err)
	best, err := live.Play(context.Background(), sc, sim.Active|sim.Passive|sim.Retry, algo(t, "rr"), 2, opt)
	require.NoError(t, err)
	t.Logf("none: errors %d, refused %d, reset %d; active+passive+retry: errors %d, retries %d, refused %d, reset %d",
		bare.Errors, bare.Backends[0].Refused, bare.Backends[0].Reset, best.Errors, best.Retries, best.Backends[0].Refused, best.Backends[0].Reset)

	// The proxy counts an attempt as it fails, a user counts a request only
	// if it finished before the run's end (as the simulation does): at the
	// end, a few attempts may have failed whose requests are not counted,
	// at most one per user. In the simulation the two are equal.
	within := func(t *testing.T, attempts, requests int64, msg string) {
		t.Helper()
		assert.GreaterOrEqual(t, attempts, requests, msg)
		assert.LessOrEqual(t, attempts-requests, int64(sc.Users), msg)
	}
	dead := bare.Backends[0]
	assert.Positive(t, dead.Refused, "the dead backend refuses connections")
	within(t, dead.Refused+dead.Reset, bare.Errors, "without retries each failed attempt is a failed request")
	assert.Zero(t, bare.Retries)
	require.NotNil(t, bare.Failure)
	// Round robin sends every fourth request to the dead backend: about a
	// quarter of the requests after the kill fail, whatever the machine's
	// load (which moves the throughput before and after alike, and which
	// a comparison of the two, After < 0.9 × Before, did not survive on a
	// loaded machine: 42.75 against 42.3).
	after := (sc.Length() - bare.Failure.Outage.At).Seconds()
	failedShare := float64(bare.Errors) / (float64(bare.Errors) + bare.Failure.After*after)
	t.Logf("none: %.0f%% of the requests after the kill failed", 100*failedShare)
	assert.InDelta(t, 0.25, failedShare, 0.1, "a quarter of the requests after the kill fail")

	assert.Equal(t, 2, best.Proxies)
	assert.Zero(t, best.Errors, "every failed attempt was retried on a live backend")
	assert.Positive(t, best.Retries)
	within(t, best.Backends[0].Refused+best.Backends[0].Reset, best.Retries, "one retry per failed attempt")
	for i, b := range best.Backends[1:] {
		assert.Zero(t, b.Refused+b.Reset, "backend %d never failed", i+2)
	}
	// After the kill, health ejects the dead backend: no attempt reaches
	// it in the last second.
	s := best.Series
	for k := len(s.RPS[0]) - int(time.Second/s.Step); k < len(s.RPS[0]); k++ {
		assert.Zero(t, s.RPS[0][k], "attempts at the dead backend in step %d", k)
	}
	noLeak(t, before)
}

// A backend revived on its address serves again: attempts reach it after
// the outage and errors happen only during it. On a loaded machine the
// kill and the revive may come a little late, and a user refused just
// before the revive counts its error as the answer comes back, so the
// check after the outage starts half a second of the scenario (a quarter
// of real time, five series steps) after the revive.
func TestRevive(t *testing.T) {
	sc := sim.Scenario{
		Name: "revive",
		Backends: []sim.Backend{
			{Latency: 40 * time.Millisecond, Down: []sim.Outage{{At: 2 * time.Second, Until: 4 * time.Second}}},
			{Latency: 40 * time.Millisecond},
		},
		Users:  6,
		Stages: []sim.Stage{{Duration: 6 * time.Second, Target: 6}},
		Think:  60 * time.Millisecond,
	}
	r, err := live.Play(context.Background(), sc, sim.None, algo(t, "rr"), 1, live.Options{Scale: 0.5})
	require.NoError(t, err)
	const settle = 500 * time.Millisecond
	s := r.Series
	var during, after float64
	for k := range s.Errors {
		start := time.Duration(k) * s.Step
		switch {
		case start < 2*time.Second:
			assert.Zero(t, s.Errors[k], "errors at %v, before the outage", start)
		case start >= 4*time.Second+settle:
			assert.Zero(t, s.Errors[k], "errors at %v, after it", start)
			after += s.RPS[0][k]
		default:
			during += s.Errors[k]
		}
	}
	assert.Positive(t, during, "errors during the outage")
	assert.Positive(t, after, "attempts at the revived backend")
	assert.Positive(t, r.Backends[0].Refused)
}

// A run ends with its scenario even when an outage would end later: the
// revive after the end is not played (the simulator skips it too), so the
// users stop on time and the attempts match the simulation's.
func TestEndsOnTime(t *testing.T) {
	sc := sim.Scenario{
		Name: "past",
		Backends: []sim.Backend{
			{Latency: 20 * time.Millisecond, Down: []sim.Outage{{At: time.Second, Until: 20 * time.Second}}},
			{Latency: 20 * time.Millisecond},
		},
		Users:  4,
		Stages: []sim.Stage{{Duration: 2 * time.Second, Target: 4}},
		Think:  80 * time.Millisecond,
	}
	a := algo(t, "rr")
	start := time.Now()
	got, err := live.Play(context.Background(), sc, sim.None, a, 1, live.Options{Scale: 0.5})
	require.NoError(t, err)
	took := time.Since(start)
	want, err := sim.Simulate(sc, sim.None, a, 1, 1)
	require.NoError(t, err)
	sent := func(r sim.Result) (n int64) {
		for _, b := range r.Backends {
			n += b.Sent
		}
		return n
	}
	t.Logf("%v of real time for 1s; attempts live %d, simulated %d", took, sent(got), sent(want))
	assert.Less(t, took, 5*time.Second, "the run lasts 1s, not until the outage's end (10s)")
	assert.LessOrEqual(t, sent(got), sent(want)*3/2, "attempts after the end are not counted")
	last := len(want.Series.RPS[1]) - 1
	assert.LessOrEqual(t, got.Series.RPS[1][last], 2*want.Series.RPS[1][last], "the last step holds its own attempts only")
}

// A backend serving one request at a time queues the rest first come,
// first served: with N users and no think time it serves back to back.
// What the model promises, whatever the machine's load: it never serves
// faster than X = 1/L, so the users wait at least R = N/X = N·L on
// average, but for the first requests, sent at once (the rig's overhead
// only lowers X and adds to R: the bounds on that side allow 30 to 40%); every request waits for about the same N−1 others, so
// the latencies are tight (random order would put the p95 near three
// times the median); and the backend never holds more than the N users'
// requests, nearly all the time.
func TestQueue(t *testing.T) {
	sc := sim.Scenario{
		Name:     "queue",
		Backends: []sim.Backend{{Latency: 100 * time.Millisecond, Capacity: 1}},
		Users:    5,
		Stages:   []sim.Stage{{Duration: 8 * time.Second, Target: 5}},
	}
	r, err := live.Play(context.Background(), sc, sim.None, algo(t, "rr"), 1, live.Options{Scale: 0.5})
	require.NoError(t, err)
	b := r.Backends[0]
	t.Logf("RPS %.2f, mean %v, p50 %v, p95 %v, p99 %v, in flight %.2f, peak %d", r.RPS, r.Mean, r.Median, r.P95, r.P99,
		b.MeanInFlight, b.PeakInFlight)
	assert.LessOrEqual(t, r.RPS, 10.2, "X ≤ 1/L")
	assert.GreaterOrEqual(t, r.RPS, 7.0, "back to back, give or take the rig")
	assert.GreaterOrEqual(t, r.Mean.Seconds(), 0.45, "R ≥ N·L but for the first round's, 0.1 to 0.5 s: 0.487 in all")
	assert.LessOrEqual(t, r.Mean.Seconds(), 0.7, "R = N·L, give or take the rig")
	assert.LessOrEqual(t, r.P95.Seconds(), 1.5*r.Median.Seconds(), "first come, first served: no request overtakes")
	assert.LessOrEqual(t, b.MeanInFlight, 5.01)
	assert.GreaterOrEqual(t, b.MeanInFlight, 4.0, "the users are at the backend nearly all the time")
	assert.LessOrEqual(t, b.PeakInFlight, 5, "one request per user")
	assert.GreaterOrEqual(t, b.PeakInFlight, 4)
}

// At a large scale a cycle of the loaded calibration run outlasts a
// second (steady's at scale 5: 0.75 s): a second's run then serves three
// quarters of the peak rate whatever the rig does, and lbsim warned that
// the rig fell short at every scale above 4. Calibrate plays four cycles
// and sets what the rig served beside what the simulation of that same
// run serves: a rig that keeps up (20 users asking 27 requests/s) reads
// as one.
func TestCalibrateLargeScale(t *testing.T) {
	sc := scenario(t, "steady").ScaleUsers(20)
	const scale = 5
	o, err := live.Calibrate(context.Background(), []sim.Scenario{sc}, scale)
	require.NoError(t, err)
	t.Log(o)
	assert.Positive(t, o.Asked)
	assert.GreaterOrEqual(t, o.Served, 0.9*o.Asked, "the rig serves what the run asks")
	warning, err := o.Trust(scale, live.Fastest([]sim.Scenario{sc}))
	require.NoError(t, err)
	assert.NotContains(t, warning, "the rig served")
}

// Run plays in sim.Run's order and shape, reports progress, and when its
// context ends it stops at once and leaves nothing running.
func TestRun(t *testing.T) {
	before := runtime.NumGoroutine()
	sc := scenario(t, "burst").ScaleUsers(12)
	sc = sc.Scale(float64(2*time.Second) / float64(sc.Length()))
	algos := []catalog.Algorithm{algo(t, "rr"), algo(t, "iphash")}
	var calls []live.Progress
	rep, err := live.Run(context.Background(), []sim.Scenario{sc}, algos, live.Options{Scale: 1, Proxies: []int{1, 2},
		Progress: func(p live.Progress) { calls = append(calls, p) }})
	require.NoError(t, err)
	require.Len(t, rep.Scenarios, 2)
	assert.Contains(t, rep.Source, "live")
	for i, sr := range rep.Scenarios {
		assert.Equal(t, []int{1, 2}[i], sr.Proxies)
		require.Len(t, sr.Results, 2)
		for j, r := range sr.Results {
			assert.Equal(t, algos[j].Name, r.Algorithm)
			assert.Equal(t, sr.Proxies, r.Proxies)
			assert.Positive(t, r.Requests)
			assert.Equal(t, 12, slices.Max(r.Series.Users), "the profile peaks at 12 users")
		}
	}
	require.NotEmpty(t, calls)
	last := calls[len(calls)-1]
	assert.Equal(t, live.Progress{Run: "burst/none/iphash", Done: 3, Runs: 4, Elapsed: sc.Length(), Length: sc.Length()}, last)
	for _, p := range calls {
		assert.LessOrEqual(t, p.Elapsed, p.Length+time.Second)
	}
	noLeak(t, before)

	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	_, err = live.Run(ctx, []sim.Scenario{scenario(t, "steady")}, algos, live.Options{Scale: 1,
		Progress: func(live.Progress) { cancel() }})
	require.ErrorIs(t, err, context.Canceled)
	assert.Less(t, time.Since(start), 30*time.Second, "stopped long before the 3 minutes")
	noLeak(t, before)
}

// Bad input is refused before anything starts.
func TestBadInput(t *testing.T) {
	before := runtime.NumGoroutine()
	good := scenario(t, "failure")
	rr := []catalog.Algorithm{algo(t, "rr")}
	for _, tc := range []struct {
		name  string
		sc    sim.Scenario
		algos []catalog.Algorithm
		opt   live.Options
	}{
		{"negative scale", good, rr, live.Options{Scale: -1}},
		{"scale too large", good, rr, live.Options{Scale: 11}},
		{"zero proxies", good, rr, live.Options{Proxies: []int{1, 0}}},
		{"no algorithms", good, nil, live.Options{}},
		{"bad scenario", sim.Scenario{Name: "empty"}, rr, live.Options{}},
		{"interval too short once scaled", good, rr, live.Options{Scale: 1e-4}},
		{"too many users", good.ScaleUsers(live.MaxUsers + 1), rr, live.Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, live.Check([]sim.Scenario{tc.sc}, tc.algos, tc.opt), sim.ErrScenario)
			_, err := live.Run(context.Background(), []sim.Scenario{tc.sc}, tc.algos, tc.opt)
			require.ErrorIs(t, err, sim.ErrScenario)
		})
	}
	require.NoError(t, live.Check([]sim.Scenario{good}, rr, live.Options{}))
	_, err := live.Play(context.Background(), good, sim.None, rr[0], 0, live.Options{})
	require.ErrorIs(t, err, sim.ErrScenario)
	// Nothing started: no goroutine beyond those there before (the
	// subtests' own take a moment to exit, hence the wait noLeak allows).
	noLeak(t, before)
}

// BenchmarkRig measures what the whole live rig (users, proxy, backends
// in one process) serves when nothing else holds it back: the steady
// profile's 100 users, no think time, four backends that answer in 1 µs,
// at scale 1, for 3 s per iteration. Compare its req/s with the rate a
// scenario asks at a given scale (lbsim -live prints it).
func BenchmarkRig(b *testing.B) {
	bs, err := sim.ParseBackends("1us,1us,1us,1us")
	require.NoError(b, err)
	sc := sim.Scenario{Name: "rig", Backends: bs, Users: 100, Stages: []sim.Stage{{Duration: 3 * time.Second, Target: 100}}}
	for _, name := range []string{"rr", "leastconn"} {
		b.Run("algo="+name, func(b *testing.B) {
			var requests int64
			var latency time.Duration
			for b.Loop() {
				r, err := live.Play(context.Background(), sc, sim.None, algo(b, name), 1, live.Options{Scale: 1})
				require.NoError(b, err)
				require.Zero(b, r.Errors)
				requests += r.Requests
				latency += r.Mean * time.Duration(r.Requests)
			}
			b.ReportMetric(float64(requests)/b.Elapsed().Seconds(), "req/s")
			b.ReportMetric(float64(latency.Microseconds())/float64(requests), "µs/req-latency")
		})
	}
}

// slowScenario returns the slow scenario named name with 20 users, cut
// to last length.
func slowScenario(t *testing.T, name string, length time.Duration) sim.Scenario {
	t.Helper()
	for _, s := range sim.SlowScenarios(nil) {
		if s.Name == name {
			s = s.ScaleUsers(20)
			return s.Scale(float64(length) / float64(s.Length()))
		}
	}
	require.FailNow(t, "no slow scenario", name)
	return sim.Scenario{}
}

// playBoth plays sc under two variants at the same time, so that the load
// of the machine weighs on both alike, and returns both results.
func playBoth(t *testing.T, sc sim.Scenario, a, b sim.Variant, algo catalog.Algorithm, scale float64) (sim.Result, sim.Result) {
	t.Helper()
	var rs [2]sim.Result
	var errs [2]error
	var wg sync.WaitGroup
	for i, v := range []sim.Variant{a, b} {
		wg.Go(func() {
			rs[i], errs[i] = live.Play(context.Background(), sc, v, algo, 1, live.Options{Scale: scale, Seed: 1})
		})
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	return rs[0], rs[1]
}

// figure returns r's figure named name (one of sim.SlowFigures), failing
// t without it.
func figure(t *testing.T, r sim.Result, name string) float64 {
	t.Helper()
	i := slices.IndexFunc(r.Extra, func(f sim.Figure) bool { return f.Name == name })
	require.GreaterOrEqual(t, i, 0, "no %s in %v", name, r.Extra)
	return r.Extra[i].Value
}

// TestStall stalls a backend for real: it accepts connections, reads the
// requests and answers none, its health checks included. Through a proxy
// without timeouts the users it holds wait to the end of the run; through
// one with lbhttp's timeouts (scaled: 2.5 s of real time per attempt) no
// user waits much longer than one timeout and a live backend's answer, no
// request fails, and the throughput during the stall is measurably higher.
// Both proxies play at once: the machine's load weighs on both.
func TestStall(t *testing.T) {
	before := runtime.NumGoroutine()
	const ready = sim.Active | sim.Passive | sim.Retry
	sc := slowScenario(t, "stall", 15*time.Second) // stalls at 5 s
	hang, timeout := playBoth(t, sc, ready, ready|sim.Timeout, algo(t, "rr"), 0.5)
	t.Logf("without timeouts: RPS %.1f → %.1f, %d errors, longest wait %.2f s; with: RPS %.1f → %.1f, %d errors, %d retries, longest wait %.2f s",
		hang.Failure.Before, hang.Failure.After, hang.Errors, figure(t, hang, "max_wait_s"),
		timeout.Failure.Before, timeout.Failure.After, timeout.Errors, timeout.Retries, figure(t, timeout, "max_wait_s"))

	assert.Zero(t, timeout.Errors, "every attempt that timed out was retried on a live backend")
	assert.Positive(t, timeout.Retries)
	wait := figure(t, timeout, "max_wait_s")
	assert.Greater(t, wait, 5.0, "some user waited out a timeout (5 s of the scenario)")
	assert.Less(t, wait, 10.0, "and no user two")
	assert.Zero(t, timeout.Backends[0].Reset, "a timeout is not a broken connection")
	assert.Greater(t, timeout.Failure.After, 1.2*hang.Failure.After, "users held by the stall send nothing more")
	noLeak(t, before)
}

// TestStorm makes every backend answer 503 for a while, for real. Retries
// without a budget send each request's every attempt, three; lbhttp's
// budget (its window and minimum scaled) lets through at most what it
// promises: over the storm, 20% of its requests and of those of the
// window before it, plus 10 a second over both (in the scenario's time).
// No request fails once the storm is over.
func TestStorm(t *testing.T) {
	before := runtime.NumGoroutine()
	const ready = sim.Active | sim.Passive | sim.Retry
	sc := slowScenario(t, "storm", 10*time.Second) // 503s from 3.3 to 5 s
	storm := sc.Backends[0].Unavailable[0]
	free, budget := playBoth(t, sc, ready, ready|sim.Timeout|sim.Budget, algo(t, "leastconn"), 0.5)
	open, bounded := figure(t, free, "attempts_per_request_during"), figure(t, budget, "attempts_per_request_during")
	t.Logf("attempts per request during the storm: retries %.2f, with the budget %.2f; errors %d and %d", open, bounded, free.Errors, budget.Errors)
	assert.Greater(t, open, 2.5, "retries send (nearly) every attempt a request may make")
	length := (storm.Until - storm.At).Seconds()
	ended := budget.Failure.After*length + float64(budget.Errors) // at most: an error after the storm would count
	window := lbhttp.DefaultBudgetWindow.Seconds()
	bound := ended + lbhttp.DefaultBudgetRatio*(ended+budget.Failure.Before*min(window, storm.At.Seconds())) +
		lbhttp.DefaultBudgetMinPerSecond*(length+window)
	t.Logf("the budget's promise: %.2f attempts a request at most", bound/ended)
	// The bound is reckoned from the run's throughput figures (the storm's
	// mean rate times its length, the rate before it times the window),
	// not from the requests the budget itself counted, whose window edges
	// fall between the figures' samples: 5% covers that reckoning, as a
	// cold CI run beside the compiler showed (2.06 attempts a request
	// against a reckoned 2.04). Retries without the budget send about 2.9,
	// 40% over, which this still fails.
	assert.LessOrEqual(t, bounded*ended, 1.05*bound, "what the budget promises")
	assert.Greater(t, bounded, 1.0, "and it lets some through")
	for _, r := range []sim.Result{free, budget} {
		assert.Positive(t, r.Errors, "every request fails during the storm")
		for k, e := range r.Series.Errors {
			// Half a second of the scenario after it, as in TestRevive: a
			// change played late on a loaded machine.
			if at := time.Duration(k) * r.Series.Step; at > storm.Until+500*time.Millisecond {
				assert.Zero(t, e, "%v: errors at %v, after the storm", r.Variant, at)
			}
		}
	}
	noLeak(t, before)
}
