package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lbkit/lbkit/bench"
	"github.com/lbkit/lbkit/bench/live"
	"github.com/lbkit/lbkit/bench/sim"
)

func main() {
	// An interrupt stops the simulation, or a live run cleanly (servers
	// shut), then exit 1.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is the parsed command line.
type config struct {
	scenarios []sim.Scenario
	algos     []bench.Algorithm
	opt       sim.Options
	markdown  bool
	html      string
	live      bool    // play live, beside the simulation
	scale     float64 // live time scale
}

// run is the command: it returns the exit status, 2 for bad flags or a
// malformed profile, 1 when the report cannot be written, a live run
// fails, or the simulation or a live run is interrupted (ctx ends).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
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
	line := progressLine(stderr)
	cfg.opt.Progress = func(done, total int, run string) {
		line(fmt.Sprintf("lbsim: %d/%d %s", done, total, run))
	}
	rep, err := sim.RunContext(ctx, cfg.scenarios, cfg.algos, cfg.opt)
	line("")
	if err != nil {
		return failed(ctx, stderr, "", err)
	}
	fmt.Fprintf(stderr, "lbsim: %s in %v\n", plural(runs(rep), "run", "runs"), time.Since(start).Round(time.Millisecond))
	var comparison *sim.Comparison
	if cfg.live {
		liveRep, err := playLive(ctx, cfg, rep, line, stderr)
		if err != nil {
			return failed(ctx, stderr, "live: ", err)
		}
		comparison = &sim.Comparison{Sim: rep, Live: liveRep}
		rep = liveRep
	}
	if cfg.markdown {
		err = rep.WriteMarkdown(stdout)
	} else {
		err = rep.WriteText(stdout)
	}
	if err == nil && comparison != nil {
		if _, err = io.WriteString(stdout, "\n"); err == nil {
			if cfg.markdown {
				err = comparison.WriteMarkdown(stdout)
			} else {
				err = comparison.WriteText(stdout)
			}
		}
	}
	if err == nil && cfg.html != "" {
		if comparison != nil {
			err = writeHTML(cfg.html, comparison.WriteHTML)
		} else {
			err = writeHTML(cfg.html, rep.WriteHTML)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "lbsim: %v\n", err)
		return 1
	}
	return 0
}

// progressLine returns a func that rewrites one line on w; "" clears it.
func progressLine(w io.Writer) func(string) {
	last := 0
	return func(line string) {
		if line == "" {
			if last > 0 {
				fmt.Fprintf(w, "\r%*s\r", last, "")
			}
			last = 0
			return
		}
		fmt.Fprintf(w, "\r%-*s", last, line)
		last = len(line)
	}
}

// failed reports err on stderr and returns the exit status: 2 for bad
// input, 1 otherwise; when ctx has ended (an interrupt), it says that the
// run was stopped and why.
func failed(ctx context.Context, stderr io.Writer, what string, err error) int {
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "lbsim: stopped: %v\n", context.Cause(ctx))
		return 1
	}
	fmt.Fprintf(stderr, "lbsim: %s%v\n", what, err)
	if errors.Is(err, sim.ErrScenario) {
		return 2
	}
	return 1
}

// playLive plays the runs of the simulated report rep live, one at a
// time, with a progress line.
func playLive(ctx context.Context, cfg *config, rep *sim.Report, line func(string), stderr io.Writer) (*sim.Report, error) {
	var wall time.Duration
	peak := 0.0
	for _, sr := range rep.Scenarios {
		wall += time.Duration(float64(sr.Scenario.Length())*cfg.scale) * time.Duration(len(sr.Results))
		peak = max(peak, peakRate(&sr.Scenario, cfg.scale))
	}
	fmt.Fprintf(stderr, "lbsim: live: %s, one at a time, about %v; up to %.0f requests/s of real time\n",
		plural(runs(rep), "run", "runs"), wall.Round(time.Second), peak)
	if os.Getenv("GOGC") == "" {
		// The proxy's garbage is most of the live run's CPU cost after
		// the system calls; collecting less often keeps the load
		// generator off the critical path (see package bench/live).
		debug.SetGCPercent(liveGCPercent)
	}
	start := time.Now()
	liveRep, err := live.Run(ctx, cfg.scenarios, cfg.algos, live.Options{
		Scale:   cfg.scale,
		Seed:    cfg.opt.Seed,
		Proxies: cfg.opt.Proxies,
		Progress: func(p live.Progress) {
			line(fmt.Sprintf("lbsim: live %d/%d %s %.1fs/%.1fs", p.Done+1, p.Runs, p.Run, p.Elapsed.Seconds(), p.Length.Seconds()))
		},
	})
	line("")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "lbsim: %s in %v\n", plural(runs(liveRep), "live run", "live runs"), time.Since(start).Round(time.Second))
	return liveRep, nil
}

// liveGCPercent is the GOGC of a live run, unless the environment sets
// one: on a busy 2-core machine it brought round robin's live/simulated
// mean latency at scale 0.1 from 1.18-1.20 down to 1.06-1.11, for a peak
// RSS of 57 MB (see package bench/live).
const liveGCPercent = 400

// peakRate bounds the requests per second of real time a scenario asks of
// the live rig at scale f: its peak users, each cycling through the think
// time and the fastest backend's latency, as when an algorithm sends
// nearly everything there (lrt-naive).
func peakRate(sc *sim.Scenario, f float64) float64 {
	fastest := sc.Backends[0].Latency
	for _, b := range sc.Backends {
		fastest = min(fastest, b.Latency)
	}
	return float64(sc.PeakUsers()) / ((sc.Think + fastest).Seconds() * f)
}

// runs counts the runs of a report.
func runs(rep *sim.Report) int {
	n := 0
	for _, s := range rep.Scenarios {
		n += len(s.Results)
	}
	return n
}

// writeHTML creates the file at path and writes a page into it with write.
func writeHTML(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
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
			"(default 50ms:w=6,150ms:w=3,300ms:w=2,500ms:w=1; -cap scenarios give backends without c= a capacity of "+strconv.Itoa(sim.DefaultCapacity)+")\n"+
			"down= applies in every scenario run, so each outage must start within every scenario's length (burst lasts 2m20s;\n"+
			"choose with -scenarios); the failure scenarios kill the first backend at 1m unless one has down=")
		stages   = fs.String("stages", "", "user profile for every scenario: [START,]DURATION:TARGET,..., k6-style linear ramps, e.g. 0,30s:100,2m:100")
		proxies  = fs.String("proxies", "1", "numbers of independent balancers the users are split over, comma-separated, e.g. 1,10")
		markdown = fs.Bool("markdown", false, "print Markdown tables")
		html     = fs.String("html", "", "also write a self-contained HTML report with charts to this file (with -live: the live run's, and simulated vs live)")
		liveMode = fs.Bool("live", false, "play the scenarios for real, through lbhttp's reverse proxy to HTTP backends on 127.0.0.1,\n"+
			"one run at a time, and print the live tables and a simulated-vs-live table (-html then charts the live run)")
		scale = fs.Float64("scale", live.DefaultScale, fmt.Sprintf("with -live: multiply every duration by this, in (0, %d]; figures are converted back", live.MaxScale))
	)
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: lbsim [flags]

lbsim plays load scenarios in virtual time against every lbkit algorithm and prints a table per scenario.

  lbsim                                  every default scenario, in seconds
  lbsim -scenarios steady -proxies 1,10  one scenario, one balancer and a fleet of ten
  lbsim -backends 20ms:c=4,80ms:c=4      your own backends
  lbsim -live -scenarios steady          the same for real: lbhttp's reverse proxy, HTTP backends and clients
                                         on 127.0.0.1, every duration ×0.1 (-scale), 18 s per algorithm;
                                         then simulated vs live side by side

flags:`)
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

	cfg := &config{opt: sim.Options{Seed: *seed}, markdown: *markdown, html: *html, live: *liveMode, scale: *scale}
	if set["scale"] && !cfg.live {
		return nil, errors.New("-scale: only with -live")
	}
	if !(cfg.scale > 0 && cfg.scale <= live.MaxScale) {
		return nil, fmt.Errorf("-scale: %v is not in (0, %d]", cfg.scale, live.MaxScale)
	}
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
	case *duration > sim.MaxLength:
		return nil, fmt.Errorf("-duration: %v is more than %v", *duration, sim.MaxLength)
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
		s.Think = *think
		s.CheckInterval = *interval
		if vs != nil {
			s.Variants = vs
		}
		// Check the profile as given: scaling would repair a bad one
		// (Scale makes a stage last at least 1ms, ScaleUsers keeps a count
		// at least 1).
		if err := s.Validate(); err != nil {
			return nil, err
		}
		if *duration > 0 {
			s = s.Scale(float64(*duration) / float64(s.Length()))
		}
		if set["users"] {
			s = s.ScaleUsers(*users)
		}
		if err := s.Validate(); err != nil {
			return nil, err
		}
		if cfg.live && s.PeakUsers() > live.MaxUsers {
			return nil, fmt.Errorf("-live: %s peaks at %d users, more than the %d a live run plays", s.Name, s.PeakUsers(), live.MaxUsers)
		}
		cfg.scenarios = append(cfg.scenarios, s)
	}
	if cfg.live {
		// Refuse what the live run would refuse (an interval too short once
		// scaled, say) now, not after the simulation.
		if err := live.Check(cfg.scenarios, cfg.algos, live.Options{Scale: cfg.scale, Proxies: cfg.opt.Proxies}); err != nil {
			return nil, fmt.Errorf("-live: %w", err)
		}
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

// plural returns "1 run" or "n runs".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
