package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"runtime"
	"sync"

	"github.com/lbkit/lbkit/catalog"
)

// Options tunes Run. The zero value runs with seed 0, one proxy, one
// worker per CPU and no progress report.
type Options struct {
	// Seed makes the runs repeatable: the same seed gives the same Report.
	Seed uint64
	// Proxies lists the numbers of independent picker instances to split
	// the users over; each scenario is played once per entry, but for one
	// with Scenario.Proxies set, played once with those. Empty means [1].
	Proxies []int
	// Workers is the number of runs played at once; zero means
	// runtime.GOMAXPROCS(0), or fewer when so many runs of the largest
	// scenario would hold more than MemoryBudget together (RunBytes each).
	// The Report does not depend on it.
	Workers int
	// Progress, if not nil, is called after each run with the number of
	// runs done, the total and the run just done ("steady/none/rr"), from
	// one goroutine at a time.
	Progress func(done, total int, run string)
}

// simulation is the Source of the Reports Run returns.
const simulation = "simulation"

// Run plays every scenario, for each number of proxies, under each of its
// variants, with every algorithm, and returns the Report. It validates all
// scenarios before it starts; errors wrap ErrScenario for bad input. It is
// RunContext with a context that never ends.
func Run(scenarios []Scenario, algos []catalog.Algorithm, opt Options) (*Report, error) {
	return RunContext(context.Background(), scenarios, algos, opt)
}

// RunContext is Run, stopped early when ctx ends: no other run starts, the
// runs under way stop within a few thousand events (milliseconds), and,
// once every worker has ended, it returns ctx's error and no Report
// (lbsim's Ctrl-C). A ctx that ends after the last run changes nothing.
func RunContext(ctx context.Context, scenarios []Scenario, algos []catalog.Algorithm, opt Options) (*Report, error) {
	proxies := opt.Proxies
	if len(proxies) == 0 {
		proxies = []int{1}
	}
	for _, m := range proxies {
		if m < 1 || m > MaxProxies {
			return nil, fmt.Errorf("%w: %d proxies, want 1 to %d", ErrScenario, m, MaxProxies)
		}
	}
	if len(algos) == 0 {
		return nil, fmt.Errorf("%w: no algorithms", ErrScenario)
	}
	for i := range scenarios {
		if err := scenarios[i].Validate(); err != nil {
			return nil, err
		}
		if err := checkLoops(&scenarios[i], algos); err != nil {
			return nil, err
		}
	}

	type job struct {
		report, result int
		sc             Scenario
		v              Variant
		a              catalog.Algorithm
		proxies        int
		seed           uint64
	}
	rep := &Report{Seed: opt.Seed, Source: simulation}
	var jobs []job
	for k, m := range proxies {
		for _, sc := range scenarios {
			n := m
			if sc.Proxies > 0 {
				if k > 0 {
					continue // a fleet of its own is played once
				}
				n = sc.Proxies
			}
			sr := ScenarioReport{Scenario: sc, Proxies: n}
			seed := jobSeed(opt.Seed, sc.Name, n)
			for _, v := range sc.RunVariants() {
				for _, a := range algos {
					jobs = append(jobs, job{len(rep.Scenarios), len(sr.Results), sc, v, a, n, seed})
					sr.Results = append(sr.Results, Result{})
				}
			}
			rep.Scenarios = append(rep.Scenarios, sr)
		}
	}

	workers := opt.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
		for i := range scenarios {
			workers = min(workers, max(1, int(MemoryBudget/scenarios[i].RunBytes())))
		}
	}
	next := make(chan job)
	type outcome struct {
		j   job
		r   Result
		err error
	}
	out := make(chan outcome)
	var wg sync.WaitGroup
	for range min(workers, len(jobs)) {
		wg.Go(func() {
			for j := range next {
				r, err := simulate(ctx, j.sc, j.v, j.a, j.proxies, j.seed)
				out <- outcome{j, r, err}
			}
		})
	}
	go func() {
		defer close(next)
		for _, j := range jobs {
			select {
			case next <- j:
			case <-ctx.Done():
				return
			}
		}
	}()
	go func() {
		wg.Wait()
		close(out)
	}()
	var first error
	done := 0
	for o := range out {
		done++
		if o.err != nil {
			if first == nil {
				first = o.err
			}
			continue
		}
		rep.Scenarios[o.j.report].Results[o.j.result] = o.r
		if opt.Progress != nil {
			opt.Progress(done, len(jobs), fmt.Sprintf("%s/%v/%s", o.j.sc.Name, o.j.v, o.j.a.Name))
		}
	}
	if first != nil {
		return nil, first
	}
	if done < len(jobs) {
		return nil, ctx.Err() // runs were left out: ctx ended
	}
	return rep, nil
}

// MemoryBudget bounds what the runs Run plays at once hold together,
// when Options.Workers is zero: 1 GiB, four runs of a million users.
const MemoryBudget = 1 << 30

// RunBytes estimates the memory one run of s holds: 256 bytes per user at
// its peak (its state and key, its pending event, room for the event
// queue's lanes to double, and the garbage collector's headroom: two runs
// of the steady scenario with a million users peaked at 404 MB of RSS
// together) and a megabyte for the rest. A run holds nothing per request:
// latencies go to a Histogram, series have at most 300 steps.
func (s *Scenario) RunBytes() int64 {
	return 256*int64(s.PeakUsers()) + 1<<20
}

// jobSeed derives the seed of one scenario's runs from the seed given, so
// that a scenario's figures do not depend on which others are run, and
// every variant and algorithm of it meets the same random draws as far as
// their choices let them.
func jobSeed(seed uint64, scenario string, proxies int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%d", seed, scenario, proxies)
	return h.Sum64()
}
