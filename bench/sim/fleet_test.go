package sim_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/bench/sim"
	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/rr"
)

// fleetScenario returns the fleet scenario named name.
func fleetScenario(t testing.TB, name string) sim.Scenario {
	t.Helper()
	for _, s := range sim.FleetScenarios() {
		if s.Name == name {
			return s
		}
	}
	require.FailNow(t, "no fleet scenario "+name)
	return sim.Scenario{}
}

// figure returns r's extra figure named name, failing the test if it has
// none.
func figure(t *testing.T, r *sim.Result, name string) float64 {
	t.Helper()
	i := slices.IndexFunc(r.Extra, func(f sim.Figure) bool { return f.Name == name })
	require.GreaterOrEqual(t, i, 0, "%s/%v: no figure %s in %v", r.Algorithm, r.Variant, name, r.Extra)
	return r.Extra[i].Value
}

// latencyRecorder is round robin that keeps the latency of every Done by
// backend, to see what the simulator reports to pickers.
type latencyRecorder struct {
	*rr.Picker
	latencies map[string][]time.Duration
	rates     map[string]float64 // the last report's RPS
}

func (r *latencyRecorder) Done(b balancer.Backend, res balancer.Result) {
	r.latencies[b.ID()] = append(r.latencies[b.ID()], res.Latency)
	r.rates[b.ID()] = res.Load.RPS
}

// An attempt across zones takes CrossZone more, as the user and the
// picker's Done see it, refusals included; the backend is not held
// meanwhile, so its requests in flight follow Little's law over its
// service time alone. The load report an answer carries crosses with it.
func TestCrossZone(t *testing.T) {
	ms := time.Millisecond
	sc := sim.Scenario{
		Name: "cross", Users: 20, Stages: []sim.Stage{{20 * time.Second, 20}}, Think: 100 * ms,
		Backends: []sim.Backend{
			{Latency: 10 * ms, Zone: "a"},
			{Latency: 10 * ms, Zone: "b"},
			{Latency: 10 * ms, Zone: "b", Down: []sim.Outage{{At: 0}}},
		},
		ProxyZones: []string{"a"}, CrossZone: 2 * ms, Metrics: sim.ZoneMetrics(),
	}
	rec := &latencyRecorder{latencies: map[string][]time.Duration{}, rates: map[string]float64{}}
	a := catalog.Algorithm{Name: "recorder", Reports: true, Sim: func(r func() uint64, _ func() time.Time) balancer.Balancer {
		rec.Picker = rr.New(rr.WithRand(r))
		return rec
	}}
	r, err := sim.Simulate(sc, sim.None, a, 1, 1)
	require.NoError(t, err)
	for i, want := range []time.Duration{10 * ms, 12 * ms, sim.RefuseTime + 2*ms} {
		ls := rec.latencies[sc.ID(i)]
		require.NotEmpty(t, ls, sc.Label(i))
		for _, l := range ls {
			require.Equal(t, want, l, "backend %d: the latency its Done reports", i+1)
		}
	}
	// Each live backend takes a third of the attempts: about 60 a second,
	// as the last reports say, the one from across zones too.
	for i := range 2 {
		within(t, rec.rates[sc.ID(i)], float64(r.Backends[i].Sent)/r.Length.Seconds(), 0.1, "reported rate of "+sc.Label(i))
	}
	// A third of the attempts stay in zone a, all during the outage that
	// starts at 0; a third are refused, with no retry.
	assert.InDelta(t, 100.0/3, figure(t, &r, "in_zone_during_pct"), 0.1)
	assert.InDelta(t, float64(r.Requests)/2, float64(r.Errors), float64(r.Requests)/100)
	assert.InDelta(t, 11.0, float64(r.Mean)/float64(ms), 0.1, "half the answers take 10 ms, half 12")
	for i := range 2 {
		b := r.Backends[i]
		lambda := float64(b.Sent) / r.Length.Seconds()
		within(t, b.MeanInFlight, lambda*0.010, 0.02, "L = λ·10ms at "+sc.Label(i))
	}
}

// zoneLoads returns, for each zone of sc, the load of its live backends
// over [from, to): requests in flight, time-weighted, over capacity, in
// percent, from the run's series.
func zoneLoads(sc *sim.Scenario, r *sim.Result, from, to time.Duration) map[string]float64 {
	area, slots := map[string]float64{}, map[string]float64{}
	lo, hi := int(from/r.Series.Step), int(to/r.Series.Step)
	for i, b := range sc.Backends {
		if len(b.Down) > 0 && b.Down[0].At < to {
			continue
		}
		for k := lo; k < hi; k++ {
			area[b.Zone] += r.Series.InFlight[i][k]
		}
		slots[b.Zone] += float64(b.Capacity * (hi - lo))
	}
	out := map[string]float64{}
	for z := range area {
		out[z] = 100 * area[z] / slots[z]
	}
	return out
}

// The zones scenario against issue 20's goals, leastconn inside locality
// against zone-blind leastconn (the scenario's Contrast): at least 90% of
// requests in their zone while every zone has capacity; when zone a loses
// half its backends, a spill to the others, no backend past its capacity,
// every zone as loaded as the others within 15%, and a p99 no worse than
// zone-blind leastconn's. The shares follow Envoy's arithmetic (see
// package locality): zone a's callers are 50% and its backends 14/30, so
// it keeps 14/15 of its traffic, 96.7% of all staying in zone; with 7 of
// 14 left, it keeps 7/23 ÷ 1/2 of it, 80.4% of all.
//
// The scenario runs at half its length (1 minute, the loss at 30 s) to
// keep the suite's time under -race; the full one is in docs/results.md
// ("Fleets").
func TestZones(t *testing.T) {
	sc := fleetScenario(t, "zones").Scale(0.5)
	c := sc.Contrast
	blind, err := sim.Simulate(sc, c.Against, algo(t, c.Algorithm), sc.Proxies, 1)
	require.NoError(t, err)
	zoned, err := sim.Simulate(sc, c.Variant, algo(t, c.Algorithm), sc.Proxies, 1)
	require.NoError(t, err)
	o, _ := sc.FirstOutage()
	loss, end := o.At, sc.Length()
	for _, r := range []*sim.Result{&blind, &zoned} {
		t.Logf("%v: in zone %.1f%% then %.1f%%; max load %.1f%% then %.1f%%; zones' load before %v, during %v; p99 %v, errors %d",
			r.Variant, figure(t, r, "in_zone_before_pct"), figure(t, r, "in_zone_during_pct"),
			figure(t, r, "max_load_before_pct"), figure(t, r, "max_load_during_pct"),
			zoneLoads(&sc, r, 0, loss), zoneLoads(&sc, r, loss+5*time.Second, end), r.P99, r.Errors)
	}
	before, during := figure(t, &zoned, "in_zone_before_pct"), figure(t, &zoned, "in_zone_during_pct")
	assert.GreaterOrEqual(t, before, 90.0, "in zone while every zone has capacity")
	assert.InDelta(t, 100-50.0/15, before, 2, "Envoy's share: zone a keeps 14/15")
	assert.InDelta(t, 100-50*(1-14.0/23), during, 4, "and 14/23 once it has 7 of 14")
	assert.Less(t, during, before-10, "it spills")
	assert.Less(t, figure(t, &blind, "in_zone_before_pct"), 45.0, "zone-blind: about 37% by chance")
	assert.Less(t, figure(t, &zoned, "max_load_during_pct"), 100.0, "no backend past its capacity")
	loads := zoneLoads(&sc, &zoned, loss+5*time.Second, end)
	for z, l := range loads {
		for y, m := range loads {
			assert.InEpsilon(t, m, l, 0.15, "zones %s and %s as loaded within 15%%", z, y)
		}
	}
	assert.LessOrEqual(t, zoned.P99, blind.P99, "p99 no worse than zone-blind leastconn")
}

// The fleet scenario against issue 20's goals: with subsets of 20, at
// most 10% of all-to-all's connections per backend, and every backend's
// load within ±15% of the mean. Deterministic subsets give each backend
// 20·100/300 = 6.67 proxies, 6 or 7, so round robin inside loads them
// from −10% to +5% of the mean, whatever the length. Least connections
// inside (two random choices over 20) adds the noise of its draws, which
// shrinks with the requests: −14.3% to +10.4% in lbsim's run of the
// scenario's minute, −16.7% to +12.8% over the half minute run here (to
// keep the suite's time under -race), so it is held to ±20%.
func TestFleet(t *testing.T) {
	sc := fleetScenario(t, "fleet").Scale(0.5)
	for _, tc := range []struct {
		name   string
		spread float64
	}{{"rr", 15}, {"leastconn", 20}}[:fleetPickers()] {
		t.Run(tc.name, func(t *testing.T) {
			all, err := sim.Simulate(sc, sim.None, algo(t, tc.name), sc.Proxies, 1)
			require.NoError(t, err)
			sub, err := sim.Simulate(sc, sim.Subset, algo(t, tc.name), sc.Proxies, 1)
			require.NoError(t, err)
			for _, r := range []*sim.Result{&all, &sub} {
				t.Logf("%v: connections per backend %.2f, at most %.0f; load %+.1f%% to %+.1f%% of the mean; p99 %v",
					r.Variant, figure(t, r, "conns_mean"), figure(t, r, "conns_max"),
					figure(t, r, "load_low_pct"), figure(t, r, "load_high_pct"), r.P99)
			}
			assert.GreaterOrEqual(t, figure(t, &all, "conns_mean"), 99.9, "all-to-all: every proxy reaches (nearly) every backend")
			assert.Equal(t, 100.0, figure(t, &all, "conns_max"))
			assert.InDelta(t, 20.0*100/300, figure(t, &sub, "conns_mean"), 1e-9)
			assert.LessOrEqual(t, figure(t, &sub, "conns_max"), 0.10*figure(t, &all, "conns_max"))
			assert.GreaterOrEqual(t, figure(t, &sub, "load_low_pct"), -tc.spread)
			assert.LessOrEqual(t, figure(t, &sub, "load_high_pct"), tc.spread)
		})
	}
}

// Connections are counted per proxy and backend, as a pool would open
// them; subset's deterministic mode spreads 4 proxies with subsets of 2
// over 8 backends, one each.
func TestConnections(t *testing.T) {
	sc := sim.Scenario{
		Name: "small", Users: 8, Stages: []sim.Stage{{10 * time.Second, 8}}, Think: 100 * time.Millisecond,
		Backends: slices.Repeat([]sim.Backend{{Latency: 10 * time.Millisecond}}, 8),
		Proxies:  4, SubsetSize: 2, Metrics: sim.FleetMetrics(),
	}
	for _, tc := range []struct {
		v         sim.Variant
		mean, max float64
	}{{sim.None, 4, 4}, {sim.Subset, 1, 1}} {
		r, err := sim.Simulate(sc, tc.v, algo(t, "rr"), sc.Proxies, 1)
		require.NoError(t, err)
		assert.Equal(t, tc.mean, figure(t, &r, "conns_mean"), "%v", tc.v)
		assert.Equal(t, tc.max, figure(t, &r, "conns_max"), "%v", tc.v)
		assert.InDelta(t, 0, figure(t, &r, "load_high_pct"), 5, "%v: round robin, even to a request per proxy (91 each)", tc.v)
	}
	// Without the figures asked for, none is reported.
	sc.Metrics = nil
	r, err := sim.Simulate(sc, sim.Subset, algo(t, "rr"), sc.Proxies, 1)
	require.NoError(t, err)
	assert.Nil(t, r.Extra)
}

// A scenario with a fleet of its own is played once, with its proxies,
// whatever Options.Proxies lists; the others once per entry.
func TestOwnProxies(t *testing.T) {
	own := sim.Scenario{
		Name: "own", Users: 6, Stages: []sim.Stage{{5 * time.Second, 6}}, Think: 100 * time.Millisecond,
		Backends: []sim.Backend{{Latency: 10 * time.Millisecond}}, Proxies: 3,
	}
	other := own
	other.Name, other.Proxies = "other", 0
	rep, err := sim.Run([]sim.Scenario{own, other}, []catalog.Algorithm{algo(t, "rr")}, sim.Options{Proxies: []int{1, 2}})
	require.NoError(t, err)
	var got []string
	for _, sr := range rep.Scenarios {
		got = append(got, fmt.Sprintf("%s/%d/%d", sr.Scenario.Name, sr.Proxies, sr.Results[0].Proxies))
	}
	assert.Equal(t, []string{"own/3/3", "other/1/1", "other/2/2"}, got)
}

// The verdict of a scenario with a Contrast judges its variant, whatever
// the errors, and sets the algorithm's figures under both side by side.
func TestContrast(t *testing.T) {
	sc := sim.Scenario{Name: "zones", Variants: []sim.Variant{sim.None, sim.Locality}, Metrics: sim.ZoneMetrics(),
		Contrast: &sim.Contrast{Variant: sim.Locality, Against: sim.None, Algorithm: "leastconn"}}
	ms := time.Millisecond
	mk := func(algo string, v sim.Variant, errs int64, p99 time.Duration, inZone float64) sim.Result {
		r := fake(algo, v, 500, p99, errs)
		r.Extra = []sim.Figure{{Name: "in_zone_before_pct", Value: inZone}}
		return r
	}
	sr := sim.ScenarioReport{Scenario: sc, Proxies: 10, Results: []sim.Result{
		mk("rr", sim.None, 0, 40*ms, 35), mk("leastconn", sim.None, 0, 36*ms, 38),
		mk("rr", sim.Locality, 3, 34*ms, 97), mk("leastconn", sim.Locality, 5, 33*ms, 97.3),
	}}
	v := sr.Verdict()
	assert.Equal(t, sim.Locality, v.Variant, "judged under the variant it is about, though it fails more")
	assert.Equal(t, "leastconn with locality against without: in zone % before: 97.3 against 38.0; p99 ms: 33.0 against 36.0", v.Contrast)
	assert.Equal(t, v.Contrast, v.Lines(2)[len(v.Lines(2))-1])
	assert.Contains(t, v.Handling, "variants, errors of all algorithms together: none 0, locality 8; judged under locality")

	sc.Contrast = &sim.Contrast{Variant: sim.Active | sim.Locality, Against: sim.Passive, Algorithm: "leastconn"}
	sr.Scenario = sc
	v = sr.Verdict()
	assert.Empty(t, v.Contrast, "a variant that did not run: no line")
	assert.Equal(t, sim.None, v.Variant, "and the usual rule")
}

func TestFleetValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*sim.Scenario)
	}{
		{"negative proxies", func(s *sim.Scenario) { s.Proxies = -1 }},
		{"too many proxies", func(s *sim.Scenario) { s.Proxies = sim.MaxProxies + 1 }},
		{"empty proxy zone", func(s *sim.Scenario) { s.ProxyZones = []string{"a", ""} }},
		{"negative cross-zone delay", func(s *sim.Scenario) { s.CrossZone = -1 }},
		{"cross-zone delay too long", func(s *sim.Scenario) { s.CrossZone = sim.MaxLength + 1 }},
		{"negative subset", func(s *sim.Scenario) { s.SubsetSize = -1 }},
		{"contrast without algorithm", func(s *sim.Scenario) { s.Contrast = &sim.Contrast{Variant: sim.Subset} }},
		{"contrast of unknown variant", func(s *sim.Scenario) { s.Contrast = &sim.Contrast{Variant: 1 << 12, Algorithm: "rr"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := fleetScenario(t, "zones")
			require.NoError(t, s.Validate())
			tc.edit(&s)
			require.ErrorIs(t, s.Validate(), sim.ErrScenario)
			_, err := sim.Run([]sim.Scenario{s}, []catalog.Algorithm{algo(t, "rr")}, sim.Options{})
			require.ErrorIs(t, err, sim.ErrScenario)
		})
	}
	_, err := sim.Simulate(fleetScenario(t, "fleet"), sim.None, algo(t, "rr"), sim.MaxProxies+1, 1)
	require.ErrorIs(t, err, sim.ErrScenario, "too many proxies")
	_, err = sim.Run([]sim.Scenario{fleetScenario(t, "fleet")}, []catalog.Algorithm{algo(t, "rr")}, sim.Options{Proxies: []int{sim.MaxProxies + 1}})
	require.ErrorIs(t, err, sim.ErrScenario, "too many proxies")
}

// ParseBackends reads zones and repeats, and DescribeBackends writes them
// back, alike neighbours as one.
func TestParseFleetBackends(t *testing.T) {
	bs, err := sim.ParseBackends("2x10ms:c=4:zone=a,10ms:zone=b:down=1m,3x20ms")
	require.NoError(t, err)
	a := sim.Backend{Latency: 10 * time.Millisecond, Capacity: 4, Zone: "a"}
	b := sim.Backend{Latency: 10 * time.Millisecond, Zone: "b", Down: []sim.Outage{{At: time.Minute}}}
	c := sim.Backend{Latency: 20 * time.Millisecond}
	assert.Equal(t, []sim.Backend{a, a, b, c, c, c}, bs)
	sc := sim.Scenario{Backends: bs}
	assert.Equal(t, "2x10ms:c=4:zone=a,10ms:down=1m0s:zone=b,3x20ms", sc.DescribeBackends())
	again, err := sim.ParseBackends(sc.DescribeBackends())
	require.NoError(t, err)
	assert.Equal(t, bs, again)
	for _, s := range sim.FleetScenarios() {
		again, err := sim.ParseBackends(s.DescribeBackends())
		require.NoError(t, err, s.Name)
		assert.Equal(t, s.Backends, again, s.Name)
	}
	bs[0].Down = append(bs[0].Down, sim.Outage{At: time.Second})
	assert.Empty(t, bs[1].Down, "repeats share nothing")
	for _, bad := range []string{"0x10ms", "x10ms", "3x", "10001x10ms", "5000x10ms,5001x10ms", "2x10ms:zone"} {
		_, err := sim.ParseBackends(bad)
		assert.ErrorIs(t, err, sim.ErrScenario, "%q", bad)
	}
	_, err = sim.ParseBackends(strings.Repeat("10ms,", sim.MaxBackends) + "10ms")
	assert.ErrorIs(t, err, sim.ErrScenario, "one more than MaxBackends")
}

// Locality and subset print and parse as the other features.
func TestFleetVariants(t *testing.T) {
	for _, v := range []sim.Variant{sim.Locality, sim.Subset, sim.Active | sim.Passive | sim.Retry | sim.Locality, sim.Locality | sim.Subset} {
		got, err := sim.ParseVariant(v.String())
		require.NoError(t, err)
		assert.Equal(t, v, got)
	}
	assert.Equal(t, "active+passive+retry+locality", (sim.Active | sim.Passive | sim.Retry | sim.Locality).String())
	assert.False(t, sim.Locality.Health())
	_, err := sim.ParseVariant("zones")
	assert.ErrorIs(t, err, sim.ErrScenario)
}

// The zones scenario's own figures, the fleet's fields and the contrast
// reach the JSON and the CSV, with no change to the writers' layout.
func TestFleetExport(t *testing.T) {
	sc := fleetScenario(t, "zones").Scale(0.05)
	rep, err := sim.Run([]sim.Scenario{sc}, []catalog.Algorithm{algo(t, "leastconn")}, sim.Options{Seed: 1})
	require.NoError(t, err)
	doc := &sim.Document{Reports: []*sim.Report{rep}}
	var js, csv strings.Builder
	require.NoError(t, doc.WriteJSON(&js))
	var got struct {
		Reports []struct {
			Scenarios []struct {
				Proxies     int      `json:"proxies"`
				ProxyZones  []string `json:"proxy_zones"`
				CrossZoneMS float64  `json:"cross_zone_ms"`
				Backends    []struct {
					Zone string `json:"zone"`
				} `json:"backends"`
				Results []struct {
					Figures map[string]*float64 `json:"figures"`
				} `json:"results"`
				Verdict struct {
					Contrast string `json:"contrast"`
				} `json:"verdict"`
			} `json:"scenarios"`
		} `json:"reports"`
	}
	require.NoError(t, json.Unmarshal([]byte(js.String()), &got))
	s := got.Reports[0].Scenarios[0]
	assert.Equal(t, 10, s.Proxies)
	assert.Equal(t, sc.ProxyZones, s.ProxyZones)
	assert.Equal(t, 2.0, s.CrossZoneMS)
	assert.Equal(t, "a", s.Backends[0].Zone)
	assert.Equal(t, "c", s.Backends[len(s.Backends)-1].Zone)
	r := &rep.Scenarios[0].Results[1]
	require.NotNil(t, s.Results[1].Figures["in_zone_before_pct"])
	assert.Equal(t, figure(t, r, "in_zone_before_pct"), *s.Results[1].Figures["in_zone_before_pct"])
	assert.Equal(t, rep.Scenarios[0].Verdict().Contrast, s.Verdict.Contrast)
	assert.Contains(t, s.Verdict.Contrast, "leastconn with locality against without: in zone % before: ")

	require.NoError(t, doc.WriteCSV(&csv))
	header := strings.SplitN(csv.String(), "\n", 2)[0]
	for _, m := range sim.ZoneMetrics() {
		assert.Contains(t, header, ","+m.Name+",")
	}
}

// A picker that runs a loop the simulator turns (prequal's probes,
// wrr-reported's weights) cannot be turned inside locality, one per zone:
// Run refuses it before any run starts, Simulate when it builds it;
// without locality it runs.
func TestLocalityLoops(t *testing.T) {
	sc := fleetScenario(t, "zones").Scale(0.05)
	for _, a := range catalog.LoadAware() {
		t.Run(a.Name, func(t *testing.T) {
			_, err := sim.Simulate(sc, sim.Active|sim.Passive|sim.Retry|sim.Locality, a, sc.Proxies, 1)
			if a.Name == "leastconn-reports" {
				require.NoError(t, err, "reports reach it through Done, which locality passes on")
				return
			}
			require.ErrorIs(t, err, sim.ErrScenario)
			assert.ErrorContains(t, err, "zones: "+a.Name+" runs a loop of its own")
			_, err = sim.Run([]sim.Scenario{sc}, []catalog.Algorithm{algo(t, "rr"), a}, sim.Options{})
			require.ErrorIs(t, err, sim.ErrScenario)
			_, err = sim.Simulate(sc, sim.Active|sim.Passive|sim.Retry, a, sc.Proxies, 1)
			require.NoError(t, err)
		})
	}
}

// fleetPickers is how many of TestFleet's pickers inside the subsets run:
// both without -race, round robin alone under it (one picker is enough to
// run the code under the race detector; .ci/test runs both without it).
func fleetPickers() int {
	if raceEnabled {
		return 1
	}
	return 2
}
