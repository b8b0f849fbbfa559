// Command lbsim answers "which algorithm for my backends?" in seconds: it
// plays load scenarios in virtual time against every lbkit algorithm and
// prints a table per scenario.
//
//	go run ./bench/cmd/lbsim                                   # every default scenario
//	go run ./bench/cmd/lbsim -scenarios steady -proxies 1,10   # a fleet of 10 balancers
//	go run ./bench/cmd/lbsim -backends 20ms:c=4,20ms:c=4,80ms:c=4 -users 60
//	go run ./bench/cmd/lbsim -html report.html                 # tables and charts
//
// See package github.com/lbkit/lbkit/bench/sim for the model, and -help for
// the flags. Bad flags exit with status 2.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lbkit/lbkit/bench"
	"github.com/lbkit/lbkit/bench/sim"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is the parsed command line.
type config struct {
	scenarios []sim.Scenario
	algos     []bench.Algorithm
	opt       sim.Options
	markdown  bool
	html      string
}

// run is the command: it returns the exit status, 2 for bad flags or a
// malformed profile, 1 when the report cannot be written.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "lbsim: %v\n", err)
		fmt.Fprintln(stderr, "run 'lbsim -help' for the flags")
		return 2
	}
	start := time.Now()
	last := 0
	cfg.opt.Progress = func(done, total int, run string) {
		line := fmt.Sprintf("lbsim: %d/%d %s", done, total, run)
		fmt.Fprintf(stderr, "\r%-*s", last, line)
		last = len(line)
	}
	rep, err := sim.Run(cfg.scenarios, cfg.algos, cfg.opt)
	if last > 0 {
		fmt.Fprintf(stderr, "\r%*s\r", last, "")
	}
	if err != nil {
		fmt.Fprintf(stderr, "lbsim: %v\n", err)
		if errors.Is(err, sim.ErrScenario) {
			return 2
		}
		return 1
	}
	runs := 0
	for _, s := range rep.Scenarios {
		runs += len(s.Results)
	}
	fmt.Fprintf(stderr, "lbsim: %d runs in %v\n", runs, time.Since(start).Round(time.Millisecond))
	if cfg.markdown {
		err = rep.WriteMarkdown(stdout)
	} else {
		err = rep.WriteText(stdout)
	}
	if err == nil && cfg.html != "" {
		err = writeHTML(cfg.html, rep)
	}
	if err != nil {
		fmt.Fprintf(stderr, "lbsim: %v\n", err)
		return 1
	}
	return 0
}

func writeHTML(path string, rep *sim.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := rep.WriteHTML(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// parse turns the command line into the scenarios to run.
func parse(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("lbsim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenarioName := func(s sim.Scenario) string { return s.Name }
	algoName := func(a bench.Algorithm) string { return a.Name }
	algos := bench.Algorithms()
	var (
		scenarios = fs.String("scenarios", "", "scenarios to run, comma-separated: "+nameList(sim.Defaults(nil), scenarioName)+" (default all)")
		algoList  = fs.String("algos", "", "algorithms, comma-separated: "+nameList(algos, algoName)+" (default all)")
		variants  = fs.String("variants", "", "failure handling for every scenario, comma-separated: none, or active, passive, retry joined by '+'\n(default: none; the failure scenarios compare none,active,active+passive,active+passive+retry)")
		seed      = fs.Uint64("seed", 1, "seed: the same seed prints the same tables")
		duration  = fs.Duration("duration", 0, "stretch or shrink each scenario to last this long, outage times included (default: as defined, 3m and 2m20s)")
		users     = fs.Int("users", 0, "scale each profile so that it peaks at this many users (default: as defined, 100 or 250)")
		think     = fs.Duration("think", sim.DefaultThink, "time a user waits between an answer and its next request")
		interval  = fs.Duration("interval", sim.DefaultCheckInterval, "time between active health checks")
		backends  = fs.String("backends", "", "the backends, comma-separated: LATENCY[:w=WEIGHT][:c=CAPACITY][:j=JITTER|:s=SIGMA][:down=AT[-UNTIL]]...[:name=NAME]\n"+
			"e.g. 50ms:w=6,150ms:w=3:c=8,300ms:j=50ms,500ms:s=0.5:down=1m-2m; weights are used by wrr only\n"+
			"(default 50ms:w=6,150ms:w=3,300ms:w=2,500ms:w=1; -cap scenarios give backends without c= a capacity of 8;\n"+
			"failure scenarios kill the first backend at 1m unless one has down=)")
		stages   = fs.String("stages", "", "user profile for every scenario: [START,]DURATION:TARGET,..., k6-style linear ramps, e.g. 0,30s:100,2m:100")
		proxies  = fs.String("proxies", "1", "numbers of independent balancers the users are split over, comma-separated, e.g. 1,10")
		markdown = fs.Bool("markdown", false, "print Markdown tables")
		html     = fs.String("html", "", "also write a self-contained HTML report with charts to this file")
	)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: lbsim [flags]\n\nlbsim plays load scenarios in virtual time against every lbkit algorithm and prints a table per scenario.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	cfg := &config{opt: sim.Options{Seed: *seed}, markdown: *markdown, html: *html}
	var bs []sim.Backend
	if *backends != "" {
		var err error
		if bs, err = sim.ParseBackends(*backends); err != nil {
			return nil, err
		}
	}
	all := sim.Defaults(bs)
	picked, err := choose(*scenarios, all, scenarioName, "scenario")
	if err != nil {
		return nil, err
	}
	if cfg.algos, err = choose(*algoList, algos, algoName, "algorithm"); err != nil {
		return nil, err
	}
	var vs []sim.Variant
	if *variants != "" {
		for _, s := range strings.Split(*variants, ",") {
			v, err := sim.ParseVariant(strings.TrimSpace(s))
			if err != nil {
				return nil, err
			}
			vs = append(vs, v)
		}
	}
	for _, s := range strings.Split(*proxies, ",") {
		m, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || m < 1 || m > 10_000 {
			return nil, fmt.Errorf("-proxies: %q is not a number from 1 to 10000", s)
		}
		cfg.opt.Proxies = append(cfg.opt.Proxies, m)
	}
	switch {
	case *duration < 0:
		return nil, fmt.Errorf("-duration: %v is negative", *duration)
	case set["users"] && (*users < 1 || *users > sim.MaxUsers):
		return nil, fmt.Errorf("-users: %d is not from 1 to %d", *users, sim.MaxUsers)
	case *think < 0:
		return nil, fmt.Errorf("-think: %v is negative", *think)
	case *interval <= 0:
		return nil, fmt.Errorf("-interval: %v is not positive", *interval)
	}
	for _, s := range picked {
		if *stages != "" {
			if s.Users, s.Stages, err = sim.ParseStages(*stages); err != nil {
				return nil, err
			}
		}
		if *duration > 0 {
			s = s.Scale(float64(*duration) / float64(s.Length()))
		}
		if set["users"] {
			s = s.ScaleUsers(*users)
		}
		s.Think = *think
		s.CheckInterval = *interval
		if vs != nil {
			s.Variants = vs
		}
		if err := s.Validate(); err != nil {
			return nil, err
		}
		cfg.scenarios = append(cfg.scenarios, s)
	}
	return cfg, nil
}

// choose returns the items of all named in list (comma-separated, in list
// order), or all of them when list is empty.
func choose[T any](list string, all []T, name func(T) string, what string) ([]T, error) {
	if list == "" {
		return all, nil
	}
	var out []T
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		i := slices.IndexFunc(all, func(t T) bool { return name(t) == n })
		if i < 0 {
			return nil, fmt.Errorf("unknown %s %q (want one of %s)", what, n, nameList(all, name))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// nameList joins the names of all with commas.
func nameList[T any](all []T, name func(T) string) string {
	out := make([]string, len(all))
	for i, t := range all {
		out[i] = name(t)
	}
	return strings.Join(out, ", ")
}
