package sim_test

import (
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/bench/sim"
	"github.com/lbkit/lbkit/catalog"
)

// fake is a result with the figures the verdict reads.
func fake(algo string, v sim.Variant, rps float64, p99 time.Duration, errs int64, shares ...float64) sim.Result {
	r := sim.Result{Algorithm: algo, Variant: v, RPS: rps, P99: p99, Mean: p99 / 2, Median: p99 / 3, P95: p99 / 2,
		Requests: int64(rps * 180), Errors: errs, Length: 3 * time.Minute}
	for _, s := range shares {
		r.Backends = append(r.Backends, sim.BackendResult{Share: s})
	}
	return r
}

// leaders returns the verdict's leads by metric name.
func leaders(v sim.Verdict) map[string][]string {
	out := map[string][]string{}
	for _, l := range v.Leads {
		out[l.Metric.Name] = l.Algorithms
	}
	return out
}

// The verdict reads the figures: who leads by throughput, p99 and errors
// (ties within 1%), and the trade-off in a line; change a figure and the
// verdict follows.
func TestVerdict(t *testing.T) {
	sc := scenario(t, "steady-cap") // capacities: herding has a bound
	ms := time.Millisecond
	sr := sim.ScenarioReport{Scenario: sc, Proxies: 1, Results: []sim.Result{
		fake("herd", sim.None, 600, 1300*ms, 0, 0.97, 0.01, 0.01, 0.01),
		fake("spread", sim.None, 450, 500*ms, 0, 0.4, 0.3, 0.2, 0.1),
		fake("even", sim.None, 300, 502*ms, 0, 0.25, 0.25, 0.25, 0.25),
	}}
	v := sr.Verdict()
	assert.Equal(t, sim.None, v.Variant)
	assert.Equal(t, map[string][]string{"rps": {"herd"}, "p99_ms": {"spread", "even"}, "errors": {"herd", "spread", "even"}}, leaders(v))
	assert.Equal(t, "herd serves 33% more than spread but its p99 is 2.6× spread's (1300.0 ms against 500.0 ms); it sends 97% of attempts to one backend (herding: above 81%)", v.TradeOff)
	assert.Equal(t, []string{
		"most throughput: herd, 600.0 RPS (next spread, 450.0 RPS)",
		"lowest p99: spread, even, 500.0 ms (next herd, 1300.0 ms)",
		"fewest errors: all 3, 0",
		"trade-off: " + v.TradeOff,
	}, v.Lines(3))

	// The spread picker now serves the most too: it leads on all counts,
	// and the trade-off says what it gains over the next.
	sr.Results[1].RPS = 700
	v = sr.Verdict()
	assert.Equal(t, []string{"spread"}, leaders(v)["rps"])
	assert.Equal(t, "spread serves 17% more than herd with a lower p99 (500.0 ms against 1300.0 ms)", v.TradeOff)

	// Errors: the one that fails fewest leads, and a throughput leader that
	// fails more says so.
	sr.Results[1].RPS, sr.Results[1].P99, sr.Results[1].Errors = 450, 1300*ms, 40
	sr.Results[0].Errors = 10
	v = sr.Verdict()
	assert.Equal(t, []string{"even"}, leaders(v)["errors"])
	assert.Equal(t, []string{"even"}, leaders(v)["p99_ms"])
	assert.Contains(t, v.TradeOff, "herd serves 100% more than even but its p99 is 2.6× even's")
}

// With several variants the verdict judges the one that fails fewest
// requests (on a tie, the one that serves most), and a line sets the
// variants' errors side by side.
func TestVerdictVariants(t *testing.T) {
	sc := scenario(t, "failure")
	sc.Variants = []sim.Variant{sim.None, sim.Active, sim.Active | sim.Retry}
	ms := time.Millisecond
	sr := sim.ScenarioReport{Scenario: sc, Proxies: 1, Results: []sim.Result{
		fake("a", sim.None, 300, 500*ms, 900), fake("b", sim.None, 200, 500*ms, 100),
		fake("a", sim.Active, 310, 500*ms, 10), fake("b", sim.Active, 320, 500*ms, 0),
		fake("a", sim.Active|sim.Retry, 300, 500*ms, 0), fake("b", sim.Active|sim.Retry, 290, 500*ms, 10),
	}}
	v := sr.Verdict()
	assert.Equal(t, sim.Active, v.Variant, "10 errors each under active and active+retry; active serves more")
	sr.Results[5].RPS = 400
	v = sr.Verdict()
	assert.Equal(t, sim.Active|sim.Retry, v.Variant, "a tie on errors goes to the variant that serves most")
	assert.Equal(t, []string{"b"}, leaders(v)["rps"])
	assert.Equal(t, "failure handling, errors of all algorithms together: none 1000, active 10, active+retry 10; judged under active+retry", v.Handling)
	sr.Results[3].RPS = 1000
	assert.Equal(t, sim.Active, sr.Verdict().Variant)
}

// The summary picks the algorithm whose worst scenario is best, not the
// one that wins most often: here one that herds leads two scenarios of
// three and falls apart in the third.
func TestSummary(t *testing.T) {
	ms := time.Millisecond
	mk := func(name string, rs ...sim.Result) sim.ScenarioReport {
		sc := scenario(t, "steady-cap") // capacities: herding has a bound
		sc.Name = name
		return sim.ScenarioReport{Scenario: sc, Proxies: 1, Results: rs}
	}
	rep := &sim.Report{Scenarios: []sim.ScenarioReport{
		mk("calm", fake("herd", sim.None, 640, 300*ms, 0, 0.97, 0.01, 0.01, 0.01), fake("steady", sim.None, 580, 300*ms, 0), fake("plain", sim.None, 420, 500*ms, 0)),
		mk("rush", fake("herd", sim.None, 830, 300*ms, 0, 0.97, 0.01, 0.01, 0.01), fake("steady", sim.None, 700, 500*ms, 0), fake("plain", sim.None, 530, 500*ms, 0)),
		mk("capped", fake("herd", sim.None, 320, 1300*ms, 0, 0.94, 0.02, 0.02, 0.02), fake("steady", sim.None, 460, 500*ms, 0), fake("plain", sim.None, 400, 550*ms, 0)),
	}}
	ss := rep.Summaries()
	require.Len(t, ss, 1)
	s := ss[0]
	assert.Equal(t, []string{"calm", "rush", "capped"}, s.Scenarios)
	var order []string
	for _, st := range s.Standings {
		order = append(order, st.Algorithm)
	}
	assert.Equal(t, []string{"steady", "plain", "herd"}, order)
	assert.Equal(t, "rush", s.Standings[0].Worst)
	assert.InDelta(t, math.Sqrt(0.6), s.Standings[0].Score, 1e-9, "rush: p99 500 against 300, weight ½")
	// The herd sends 97% to the 50 ms backend of four (50, 150, 300 and
	// 500 ms, 16 slots each: a capacity share of 0.625, a bound of
	// 81.25%), which leaves
	// the others 3% where the bound leaves them 18.75%: 0.16.
	assert.InDelta(t, 0.03/0.1875, s.Standings[2].Score, 1e-9, "herding counts")
	assert.Equal(t, []string{
		"summary, 1 proxy, over 3 scenarios (calm, rush, capped):",
		"  use steady: at worst (rush) 84% of the most throughput, a p99 1.7× the lowest; the most throughput in capped",
		"  runner-up plain: at worst (rush) 64% of the most throughput, a p99 1.7× the lowest",
		"  not herd, though it gives the most throughput in calm, rush: at worst (calm) 97% of attempts to one backend (herding: above 81%)", // calm and rush both 0.16: the first
		"  " + sim.RuleText,
	}, s.Lines())

	// Proxies apart: one summary each.
	more := rep.Scenarios[0]
	more.Proxies = 10
	rep.Scenarios = append(rep.Scenarios, more)
	ss = rep.Summaries()
	require.Len(t, ss, 2)
	assert.Equal(t, 10, ss[1].Proxies)
	assert.Equal(t, "steady", ss[1].Standings[0].Algorithm, "over calm alone the herd serves the most at the lowest p99, but herds")
}

// The verdict follows the backends: with the study's, lrt; with four
// equal backends of widely varying service time (lognormal, σ = 1), least
// connections, which needs no latency estimate to avoid the one that is
// slow right now. And every lead it names is the figure's best.
func TestVerdictFollowsBackends(t *testing.T) {
	algos := catalog.Algorithms()
	pick := func(bs []sim.Backend) (string, *sim.Report) {
		t.Helper()
		var scs []sim.Scenario
		for _, s := range sim.Defaults(bs) {
			if s.Name == "steady" || s.Name == "steady-cap" || s.Name == "burst-cap" {
				scs = append(scs, s.Scale(0.5))
			}
		}
		rep, err := sim.Run(scs, algos, sim.Options{Seed: 1})
		require.NoError(t, err)
		ss := rep.Summaries()
		require.Len(t, ss, 1)
		return ss[0].Standings[0].Algorithm, rep
	}
	study, rep := pick(nil)
	varied, err := sim.ParseBackends("100ms:s=1,100ms:s=1,100ms:s=1,100ms:s=1")
	require.NoError(t, err)
	other, rep2 := pick(varied)
	assert.Equal(t, "lrt", study)
	assert.Equal(t, "leastconn", other)

	for _, r := range []*sim.Report{rep, rep2} {
		for _, sr := range r.Scenarios {
			v := sr.Verdict()
			for _, l := range v.Leads {
				for _, res := range sr.Results {
					x, _ := l.Metric.Value(&res)
					if slices.Contains(l.Algorithms, res.Algorithm) {
						assert.InDelta(t, l.Value, x, sim.Tie*max(l.Value, x), "%s: %s leads by %s", sr.Scenario.Name, res.Algorithm, l.Metric.Name)
						continue
					}
					switch l.Metric.Better {
					case sim.Higher:
						assert.Less(t, x, l.Value, "%s: %s beats the leaders by %s", sr.Scenario.Name, res.Algorithm, l.Metric.Name)
					case sim.Lower:
						assert.Greater(t, x, l.Value, "%s: %s beats the leaders by %s", sr.Scenario.Name, res.Algorithm, l.Metric.Name)
					}
				}
			}
		}
	}
	var text strings.Builder
	require.NoError(t, rep2.WriteText(&text))
	assert.Contains(t, text.String(), "  use leastconn: ")
}

// A scenario's own figure slots in by name: a column of the table, a
// ranked line of the verdict, a key of the JSON figures and a CSV column,
// with no change to any writer. Here attempts per request, as a hedging
// scenario would report its load amplification.
func TestExtraMetric(t *testing.T) {
	sc := scenario(t, "steady")
	sc.Metrics = []sim.Metric{{Name: "attempts_per_request", Label: "att/req", Unit: "attempts", Better: sim.Lower, Leader: "least amplification", Decimals: 2}}
	ms := time.Millisecond
	a, b := fake("hedged", sim.None, 500, 300*ms, 0), fake("plain", sim.None, 400, 500*ms, 0)
	// hedged scores 1/1.2 = 0.83 by its amplification, plain √(300/500) =
	// 0.77 by its p99 (and 0.80 by its throughput).
	a.Extra = []sim.Figure{{Name: "attempts_per_request", Value: 1.2}}
	b.Extra = []sim.Figure{{Name: "attempts_per_request", Value: 1.0}}
	sr := sim.ScenarioReport{Scenario: sc, Proxies: 1, Results: []sim.Result{a, b}}
	v := sr.Verdict()
	assert.Equal(t, []string{"plain"}, leaders(v)["attempts_per_request"])
	assert.Contains(t, v.Lines(2), "least amplification: plain, 1.00 (next hedged, 1.20)")

	rep := &sim.Report{Source: "simulation", Scenarios: []sim.ScenarioReport{sr}}
	var text, js, csv strings.Builder
	require.NoError(t, rep.WriteText(&text))
	assert.Regexp(t, `errors +att/req`, text.String(), "a column after the standard ones")
	assert.Regexp(t, `\nhedged .* 1\.20\n`, text.String())
	assert.Contains(t, text.String(), "use hedged: at worst (steady) an amplification 1.2× the least", "the summary ranks by it too")
	doc := &sim.Document{Reports: []*sim.Report{rep}}
	require.NoError(t, doc.WriteJSON(&js))
	assert.Contains(t, js.String(), `"attempts_per_request": 1.2`)
	require.NoError(t, doc.WriteCSV(&csv))
	assert.Contains(t, strings.SplitN(csv.String(), "\n", 2)[0], ",attempts_per_request,")
}

// A user's three backends, as a CSV of measured latencies
// (testdata/three-backends.csv): fast answers in 20 ms; tail in 20 ms but
// 3 of its 100 samples in 400 ms (a mean of 31.4 ms); slow in 80 ms. Its
// verdict can be checked by hand from the tables, by Summary's rule:
//
//   - the herding bounds of the -cap scenarios (16 slots each): 16/20,
//     16/31.4 and 16/80 requests a millisecond are 53%, 34% and 13% of
//     the whole, so one backend herds past (1 + 0.53)/2 = 76.5%, 66.9%
//     and 56.6%; the scenarios without a capacity have no bound;
//   - lrt-naive sends about 99% of steady-cap's attempts to fast, which
//     leaves the others 1% where the bound leaves them 23.5%: it scores
//     below 0.1 there, whatever its throughput and p99, and is not the
//     pick (it was, when herding did not count);
//   - every standing is the least, over the scenarios, of RPS ÷ the
//     most, √(lowest p99 ÷ p99) and the herding ratio (no run of the
//     judged variants fails a request here, so errors weigh 1): the test
//     recomputes them from the figures and finds the same standings.
func TestVerdictThreeBackends(t *testing.T) {
	f, err := os.Open("testdata/three-backends.csv")
	require.NoError(t, err)
	defer f.Close()
	bs, err := sim.ReadLatencies(f)
	require.NoError(t, err)
	require.Len(t, bs, 3)

	// Under -race a tenth of the length, which keeps the shapes (the
	// checks below hold at either); without it, as lbsim runs them.
	scale := 1.0
	if raceEnabled {
		scale = 0.1
	}
	scs := sim.Defaults(bs)
	for i := range scs {
		scs[i] = scs[i].Scale(scale)
	}
	require.Equal(t, "steady", scs[0].Name)
	assert.Nil(t, sim.HerdBounds(&scs[0]), "no capacity, no bound")
	require.Equal(t, "steady-cap", scs[3].Name)
	bounds := sim.HerdBounds(&scs[3])
	for i, want := range []float64{(1 + 0.05/0.094347) / 2, (1 + (1/31.4)/0.094347) / 2, (1 + 0.0125/0.094347) / 2} {
		assert.InDelta(t, want, bounds[i], 1e-3, "bound of %s", bs[i].Name)
	}
	rep, err := sim.Run(scs, catalog.Algorithms(), sim.Options{Seed: 1})
	require.NoError(t, err)
	ss := rep.Summaries()
	require.Len(t, ss, 1)
	s := ss[0]

	// The rule by hand, from the tables' figures.
	worst := map[string]float64{}
	for i := range rep.Scenarios {
		sr := &rep.Scenarios[i]
		v := sr.Verdict().Variant
		var rs []sim.Result
		bestRPS, bestP99 := 0.0, time.Duration(math.MaxInt64)
		for _, r := range sr.Results {
			if r.Variant == v {
				rs = append(rs, r)
				bestRPS, bestP99 = max(bestRPS, r.RPS), min(bestP99, r.P99)
			}
		}
		b := sim.HerdBounds(&sr.Scenario)
		for _, r := range rs {
			require.Zero(t, r.Errors, "%s/%s: errors would weigh too", sr.Scenario.Name, r.Algorithm)
			score := min(r.RPS/bestRPS, math.Sqrt(float64(bestP99)/float64(r.P99)))
			for k, be := range r.Backends {
				if b != nil && be.Share > b[k] {
					score = min(score, (1-be.Share)/(1-b[k]))
				}
			}
			if score >= 1-sim.Tie {
				score = 1
			}
			if w, ok := worst[r.Algorithm]; !ok || score < w {
				worst[r.Algorithm] = score
			}
		}
	}
	for _, st := range s.Standings {
		assert.InDelta(t, worst[st.Algorithm], st.Score, 1e-9, "%s's standing by hand", st.Algorithm)
	}
	var naive sim.Standing
	for _, st := range s.Standings {
		if st.Algorithm == "lrt-naive" {
			naive = st
		}
	}
	assert.Less(t, naive.Score, 0.1, "lrt-naive herds")
	assert.Greater(t, naive.Herd, 0.95)
	assert.NotEqual(t, "lrt-naive", s.Standings[0].Algorithm)
	pick := s.Standings[0]
	lines := s.Lines()
	if pick.Herd > 0 {
		assert.Contains(t, lines[1], "of attempts to one backend", "the pick's line says it herds, as every line does")
	}
	assert.Equal(t, "  "+sim.RuleText, lines[len(lines)-1], "the rule, stated")
	t.Logf("%s", strings.Join(lines, "\n"))
}
