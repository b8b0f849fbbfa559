package sim_test

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/lbkit/lbkit/bench/sim"
	"github.com/lbkit/lbkit/catalog"
)

// A tiny scenario of one's own: two backends, one three times slower and
// serving two requests at once, six users for ten seconds, round robin
// against least connections. Least connections serves more, round robin
// keeps the lower p99; the summary picks the better worst case, here
// round robin's.
func Example() {
	bs, err := sim.ParseBackends("10ms,30ms:c=2")
	if err != nil {
		panic(err)
	}
	sc := sim.Scenario{
		Name:     "tiny",
		Backends: bs,
		Users:    6,
		Stages:   []sim.Stage{{Duration: 10 * time.Second, Target: 6}},
		Think:    20 * time.Millisecond,
	}
	rr, _ := catalog.Lookup("rr")
	lc, _ := catalog.Lookup("leastconn")
	algos := []catalog.Algorithm{rr, lc}
	rep, err := sim.Run([]sim.Scenario{sc}, algos, sim.Options{Seed: 1})
	if err != nil {
		panic(err)
	}
	if err := rep.WriteText(os.Stdout); err != nil {
		panic(err)
	}
	// Output:
	// tiny, 1 proxy: 6 users for 10s, think 20ms
	//   backends 10ms,30ms:c=2
	//   per backend (share of attempts, mean and peak in flight): 10ms/30ms
	// algorithm    RPS  mean ms  p50 ms  p95 ms  p99 ms  errors  share %  in flight  peak
	// rr         133.2     25.0    10.0    40.0    40.0       0    50/50    0.7/2.7   2/4
	// leastconn  155.8     18.4    10.0    40.0    50.0       0    63/37    1.0/1.9   3/3
	//   most throughput: leastconn, 155.8 RPS (next rr, 133.2 RPS)
	//   lowest p99: rr, 40.0 ms (next leastconn, 50.0 ms)
	//   fewest errors: all 2, 0
	//   trade-off: leastconn serves 17% more than rr but its p99 is 1.2× rr's (50.0 ms against 40.0 ms)
	//
	// summary, 1 proxy, over 1 scenario (tiny):
	//   use leastconn: at worst (tiny) a p99 1.2× the lowest; the most throughput in every scenario
	//   runner-up rr: at worst (tiny) 85% of the most throughput
	//   rule: in each scenario an algorithm scores the least of its RPS ÷ the most, √(lowest p99 ÷ its p99), (1 − its error share) ÷ (1 − the fewest), and, where backends have a capacity and one takes more than halfway from its share of it to all, (1 − that backend's share) ÷ (1 − that bound) (herding); the pick is the algorithm whose worst scenario scores best
}

// Simulate plays one run and returns its figures, here the failure
// scenario's kill under the bare picker and under the full handling.
func ExampleSimulate() {
	sc, _ := sim.Default("failure")
	lc, _ := catalog.Lookup("leastconn")
	for _, v := range []sim.Variant{sim.None, sim.Active | sim.Passive | sim.Retry} {
		r, err := sim.Simulate(sc, v, lc, 1, 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%-20s errors %6d, RPS %.0f before the kill, %.0f after\n", v, r.Errors, r.Failure.Before, r.Failure.After)
	}
	// Output:
	// none                 errors 113817, RPS 425 before the kill, 14 after
	// active+passive+retry errors      0, RPS 425 before the kill, 280 after
}

// Measured latencies, one sample a line, give each backend the empirical
// distribution the simulator draws its service times from; the summary
// then says which algorithm suits those backends.
func ExampleReadLatencies() {
	measured := `backend,latency_ms
fast,12
fast,15
fast,480
slow,95
slow,110
slow,120
`
	bs, err := sim.ReadLatencies(strings.NewReader(measured))
	if err != nil {
		panic(err)
	}
	for _, b := range bs {
		fmt.Printf("%s: %d samples, median %v\n", b.Name, len(b.Samples), b.Latency)
	}
	sc := sim.Scenario{Name: "measured", Backends: bs, Users: 20, Stages: []sim.Stage{{Duration: time.Minute, Target: 20}}, Think: 50 * time.Millisecond}
	rr, _ := catalog.Lookup("rr")
	lc, _ := catalog.Lookup("leastconn")
	rep, err := sim.Run([]sim.Scenario{sc}, []catalog.Algorithm{rr, lc}, sim.Options{Seed: 1})
	if err != nil {
		panic(err)
	}
	s := rep.Summaries()[0]
	fmt.Println("pick:", s.Standings[0].Algorithm)
	// Output:
	// fast: 3 samples, median 15ms
	// slow: 3 samples, median 110ms
	// pick: leastconn
}

// The load scenarios, and the line their verdict adds: the best p99 of
// the pickers that weigh reports or probes against leastconn's and lrt's.
// Here hetero-95 with one picker of each kind behind 10 proxies. (Not
// shortened: wrr-reported's reports count only after a 10 s blackout,
// which would be most of a short run.)
func ExampleLoadScenarios() {
	for _, sc := range sim.LoadScenarios() {
		fmt.Printf("%s: %d users, backends %s\n", sc.Name, sc.Users, sc.DescribeBackends())
	}
	hetero := sim.LoadScenarios()[3]
	lrt, _ := catalog.Lookup("lrt")
	reported := catalog.LoadAware()[0] // wrr-reported
	rep, err := sim.Run([]sim.Scenario{hetero}, []catalog.Algorithm{lrt, reported}, sim.Options{Seed: 1, Proxies: []int{10}})
	if err != nil {
		panic(err)
	}
	v := rep.Scenarios[0].Verdict()
	fmt.Println(v.Versus)
	// Output:
	// antagonist-70: 118 users, backends 50ms:c=16:nb=8@1m0s,3x50ms:c=16
	// antagonist-95: 160 users, backends 50ms:c=16:nb=8@1m0s,3x50ms:c=16
	// hetero-70: 126 users, backends 50ms:c=32,50ms:c=16,50ms:c=8,50ms:c=4
	// hetero-95: 171 users, backends 50ms:c=32,50ms:c=16,50ms:c=8,50ms:c=4
	// report-driven or probing against local: wrr-reported's p99 is 25% below lrt's (100.0 ms against 132.5 ms)
}

// The fleet scenarios, here shortened to a tenth, each run with its own
// proxies: zones sets leastconn in locality beside zone-blind leastconn,
// fleet round robin in subsets of 20 beside all-to-all, in the last line
// of their verdicts.
func ExampleFleetScenarios() {
	var scs []sim.Scenario
	for _, sc := range sim.FleetScenarios() {
		scs = append(scs, sc.Scale(0.1))
	}
	rr, _ := catalog.Lookup("rr")
	lc, _ := catalog.Lookup("leastconn")
	rep, err := sim.Run(scs, []catalog.Algorithm{rr, lc}, sim.Options{Seed: 1})
	if err != nil {
		panic(err)
	}
	for _, sr := range rep.Scenarios {
		v := sr.Verdict()
		fmt.Printf("%s, %d proxies: %s\n", sr.Scenario.Name, sr.Proxies, v.Contrast)
	}
	// Output:
	// zones, 10 proxies: leastconn with locality against without: in zone % before: 97.3 against 37.9; in zone % during: 80.4 against 34.2; max load % before: 62.1 against 64.8; max load % during: 89.2 against 93.4; p99 ms: 32.9 against 35.7
	// fleet, 100 proxies: rr with subset against without: conns/backend: 6.7 against 100.0; conns max: 7 against 100; least load: -11.6% against -3.8%; most load: +6.2% against +3.4%; p99 ms: 31.9 against 31.9
}

// The slow scenarios, and the lines their verdict adds: here the storm,
// in which every request fails whatever the proxy does, and what differs
// is the load the retries put on the backends: every attempt a request
// may make without a budget, a fifth more with lbhttp's.
func ExampleSlowScenarios() {
	for _, sc := range sim.SlowScenarios(nil) {
		fmt.Printf("%s: %v; backends %s\n", sc.Name, sc.Variants, sc.DescribeBackends())
	}
	storm := sim.SlowScenarios(nil)[1]
	leastconn, _ := catalog.Lookup("leastconn")
	rep, err := sim.Run([]sim.Scenario{storm}, []catalog.Algorithm{leastconn}, sim.Options{Seed: 1})
	if err != nil {
		panic(err)
	}
	v := rep.Scenarios[0].Verdict()
	fmt.Println(v.Variant)
	fmt.Println(v.ByVariant[1])
	// Output:
	// stall: [active+passive+retry active+passive+retry+timeout+budget active+passive+retry+timeout+hedge active+passive+retry+timeout+budget+hedge]; backends 50ms:w=6:stall=1m0s,150ms:w=3,300ms:w=2,500ms:w=1
	// storm: [none active+passive+retry active+passive+retry+timeout+budget]; backends 50ms:w=6:503=1m0s-1m30s,150ms:w=3:503=1m0s-1m30s,300ms:w=2:503=1m0s-1m30s,500ms:w=1:503=1m0s-1m30s
	// tail: [active+passive+retry active+passive+retry+timeout+budget active+passive+retry+timeout+budget+hedge]; backends 50ms:w=6:tail=1%x20,150ms:w=3:tail=1%x20,300ms:w=2:tail=1%x20,500ms:w=1:tail=1%x20
	// flaky: [none active+passive active+passive+failrate active+passive+retry active+passive+retry+timeout+budget active+passive+retry+timeout+budget+failrate]; backends 50ms:w=6:fail=30%,150ms:w=3,300ms:w=2,500ms:w=1
	// canary: [none route route+canary]; backends 4x50ms:c=16:track=stable,150ms:c=16:name=canary:track=canary
	// active+passive+retry+timeout+budget
	// load amplification during the outage, by variant (the algorithms' range): none 0.998, active+passive+retry 2.995, active+passive+retry+timeout+budget 1.208
}
