package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lbkit/lbkit/bench/live"
	"github.com/lbkit/lbkit/bench/sim"
	"github.com/lbkit/lbkit/catalog"
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
	algos     []catalog.Algorithm
	opt       sim.Options
	markdown  bool
	html      string
	json, csv string            // files to write the figures to, or ""
	live      bool              // play live, beside the simulation
	scale     float64           // live time scale
	warning   string            // what the live rig's calibration warned of
	command   []string          // the command line, for -json
	flags     map[string]string // every flag's value, for -json
}

// defaultMaxRequests is -max-requests' default: about 2 billion simulated
// requests, minutes of work at the cost per request BenchmarkSimulate
// measures (checkWork's estimate takes 0.1 to 0.3 µs a request per core),
// with memory bounded whatever the number.
const defaultMaxRequests = 2e9

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
	if cfg.live {
		// Measure the rig before anything else, and refuse a scale at
		// which it cannot measure.
		fmt.Fprintf(stderr, "lbsim: live: measuring the rig's own overhead at scale %v (2 s or more)\n", cfg.scale)
		o, err := live.Calibrate(ctx, cfg.scenarios, cfg.scale)
		if err != nil {
			return failed(ctx, stderr, "live: ", err)
		}
		fmt.Fprintf(stderr, "lbsim: live: %v\n", o)
		warning, err := o.Trust(cfg.scale, live.Fastest(cfg.scenarios))
		if err != nil {
			return failed(ctx, stderr, "-live: ", err)
		}
		if warning != "" {
			fmt.Fprintf(stderr, "lbsim: live: warning: %s\n", warning)
			cfg.warning = warning
		}
	}
	start := time.Now()
	line := newProgress(stderr)
	cfg.opt.Progress = func(done, total int, run string) {
		line.show(fmt.Sprintf("lbsim: %d/%d %s", done, total, run))
	}
	rep, err := sim.RunContext(ctx, cfg.scenarios, cfg.algos, cfg.opt)
	line.clear()
	if err != nil {
		return failed(ctx, stderr, "", err)
	}
	fmt.Fprintf(stderr, "lbsim: %s in %v\n", plural(runs(rep), "run", "runs"), time.Since(start).Round(time.Millisecond))
	doc := &sim.Document{Command: cfg.command, Flags: cfg.flags, Reports: []*sim.Report{rep}}
	var comparison *sim.Comparison
	if cfg.live {
		liveRep, err := playLive(ctx, cfg, rep, line, stderr)
		if err != nil {
			return failed(ctx, stderr, "live: ", err)
		}
		if cfg.warning != "" {
			liveRep.Source += "; warning: " + cfg.warning
		}
		comparison = &sim.Comparison{Sim: rep, Live: liveRep}
		doc.Reports = append(doc.Reports, liveRep)
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
			err = writeFile(cfg.html, comparison.WriteHTML)
		} else {
			err = writeFile(cfg.html, rep.WriteHTML)
		}
	}
	if err == nil && cfg.json != "" {
		err = writeFile(cfg.json, doc.WriteJSON)
	}
	if err == nil && cfg.csv != "" {
		err = writeFile(cfg.csv, doc.WriteCSV)
	}
	if err != nil {
		fmt.Fprintf(stderr, "lbsim: %v\n", err)
		return 1
	}
	return 0
}

// progress reports how far lbsim has come on stderr: on a terminal, one
// line redrawn in place; elsewhere (a file, a pipe, CI's log), a plain
// line now and then, never a carriage return.
type progress struct {
	w     io.Writer
	tty   bool
	every time.Duration // between two plain lines
	now   func() time.Time
	last  time.Time // when the last plain line was written
	width int       // of the line drawn on the terminal
}

// plainEvery is how often progress writes a plain line when stderr is
// not a terminal.
const plainEvery = 10 * time.Second

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, tty: isTerminal(w), every: plainEvery, now: time.Now}
	p.last = p.now()
	return p
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// show redraws the line on a terminal, or writes it as a line of its own
// if plainEvery has passed since the last.
func (p *progress) show(line string) {
	if p.tty {
		fmt.Fprintf(p.w, "\r%-*s", p.width, line)
		p.width = utf8.RuneCountInString(line)
		return
	}
	if now := p.now(); now.Sub(p.last) >= p.every {
		fmt.Fprintln(p.w, line)
		p.last = now
	}
}

// clear erases the line drawn on a terminal.
func (p *progress) clear() {
	if p.tty && p.width > 0 {
		fmt.Fprintf(p.w, "\r%*s\r", p.width, "")
	}
	p.width = 0
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
func playLive(ctx context.Context, cfg *config, rep *sim.Report, line *progress, stderr io.Writer) (*sim.Report, error) {
	var wall time.Duration
	peak := 0.0
	for _, sr := range rep.Scenarios {
		wall += time.Duration(float64(sr.Scenario.Length())*cfg.scale) * time.Duration(len(sr.Results))
		peak = max(peak, live.PeakRate(&sr.Scenario, cfg.scale))
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
			line.show(fmt.Sprintf("lbsim: live %d/%d %s %.1fs/%.1fs", p.Done+1, p.Runs, p.Run, p.Elapsed.Seconds(), p.Length.Seconds()))
		},
	})
	line.clear()
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(stderr, "lbsim: %s in %v\n", plural(runs(liveRep), "live run", "live runs"), time.Since(start).Round(time.Second))
	return liveRep, nil
}

// liveGCPercent is the GOGC of a live run, unless the environment sets
// one: fewer collections keep the collector's pauses out of the rig's
// overhead, for a larger heap goal (see package bench/live, "The load
// generator").
const liveGCPercent = 400

// runs counts the runs of a report.
func runs(rep *sim.Report) int {
	n := 0
	for _, s := range rep.Scenarios {
		n += len(s.Results)
	}
	return n
}

// writeFile creates the file at path and writes into it with write.
func writeFile(path string, write func(io.Writer) error) error {
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
	algoName := func(a catalog.Algorithm) string { return a.Name }
	algos := append(catalog.Algorithms(), catalog.LoadAware()...)
	var (
		scenarios = fs.String("scenarios", "", "scenarios to run, comma-separated: "+nameList(sim.Defaults(nil), scenarioName)+" (default: these six);\n"+
			"or the load scenarios, whose backends report their load: "+nameList(sim.LoadScenarios(), scenarioName)+"\n"+
			"(antagonist and hetero name both of theirs); or the fleet scenarios, each with proxies and backends of its own: "+nameList(sim.FleetScenarios(), scenarioName)+";\n"+
			"or the slow scenarios, a backend that stalls, a storm of 503s, heavy tails, which compare timeouts, the retry budget and hedging,\n"+
			"a backend failing 30% of its requests (flaky) and a canary 3× slower (canary): "+
			nameList(sim.SlowScenarios(nil), scenarioName))
		algoList = fs.String("algos", "", "algorithms, comma-separated: "+nameList(algos, algoName)+"\n"+
			"(default: all but "+nameList(catalog.LoadAware(), algoName)+", which weigh load reports and probes; all with a load scenario)")
		variants = fs.String("variants", "", "failure handling and decorators for every scenario, comma-separated: none, or active, passive, retry,\n"+
			"locality, subset, timeout, budget, hedge, route, canary, failrate joined by '+' (budget and hedge need retry, canary route,\n"+
			"failrate passive)\n"+
			"(default: none; the failure scenarios compare none,active,active+passive,active+passive+retry; zones active+passive+retry\n"+
			"with and without locality; fleet none,subset; the slow scenarios active+passive+retry with timeout, budget and hedge,\n"+
			"flaky also none, active+passive and each with failrate, canary none,route,route+canary)")
		seed     = fs.Uint64("seed", 1, "seed: the same seed prints the same tables")
		duration = fs.Duration("duration", 0, "stretch or shrink each scenario to last this long, outage times included (default: as defined, 3m and 2m20s)")
		users    = fs.Int("users", 0, "scale each profile so that it peaks at this many users (default: as defined, 100 or 250; 118 to 171 in the load scenarios)")
		think    = fs.Duration("think", sim.DefaultThink, "time a user waits between an answer and its next request")
		interval = fs.Duration("interval", sim.DefaultCheckInterval, "time between active health checks")
		backends = fs.String("backends", "", "the backends, comma-separated: LATENCY[:w=WEIGHT][:c=CAPACITY][:j=JITTER|:s=SIGMA][:down=AT[-UNTIL]]...[:nb=TAKES@AT[-UNTIL]]...\n"+
			"[:stall=AT[-UNTIL]]...[:503=AT[-UNTIL]]...[:tail=SHARE%xFACTOR][:fail=SHARE%][:name=NAME][:zone=ZONE][:track=TRACK],\n"+
			"each optionally preceded by Nx for N alike (300x10ms:c=4);\n"+
			"e.g. 50ms:w=6,150ms:w=3:c=8,300ms:j=50ms,500ms:s=0.5:down=1m-2m; weights are used by wrr only;\n"+
			"nb= is a neighbour the proxies cannot see, taking TAKES of the backend's c= slots from AT (until UNTIL);\n"+
			"stall= accepts and never answers, 503= answers 503 in 1ms, tail=1%x20 makes 1% of service times 20 times as long,\n"+
			"fail=30% answers 30% of requests 503 in 1ms, track=canary labels it for the route variant\n"+
			"(default 50ms:w=6,150ms:w=3,300ms:w=2,500ms:w=1; -cap scenarios give backends without c= a capacity of "+strconv.Itoa(sim.DefaultCapacity)+")\n"+
			"down= applies in every scenario run, so each outage must start within every scenario's length (burst lasts 2m20s;\n"+
			"choose with -scenarios); the failure scenarios kill the first backend at 1m unless one has down=")
		backendsFile = fs.String("backends-file", "", "the backends from measured latencies: a CSV of backend,latency_ms, one sample a line,\n"+
			"or, with -log-format, an nginx access log; each backend's service times are drawn from its samples")
		logFormat = fs.String("log-format", "", "with -backends-file: the nginx log_format string that wrote the access log;\n"+
			"it must include $upstream_addr and $upstream_response_time")
		reportDelay = fs.Duration("report-delay", 0, "how old the load report an answer carries is: the backend's state that long before (at most "+sim.MaxReportDelay.String()+")")
		probeRTT    = fs.Duration("probe-rtt", sim.DefaultProbeRTT, "round trip of a probe from a probing picker (prequal) to a backend and back")
		stages      = fs.String("stages", "", "user profile for every scenario: [START,]DURATION:TARGET,..., k6-style linear ramps, e.g. 0,30s:100,2m:100")
		proxies     = fs.String("proxies", "1", "numbers of independent balancers the users are split over, comma-separated, e.g. 1,10 (zones and fleet keep their own)")
		markdown    = fs.Bool("markdown", false, "print Markdown tables")
		html        = fs.String("html", "", "also write a self-contained HTML report with charts to this file (with -live: the live run's, and simulated vs live)")
		jsonFile    = fs.String("json", "", "also write every figure of every run, the series, the verdicts and the flags to this file as JSON (with -live: both runs)")
		csvFile     = fs.String("csv", "", "also write the figures of the tables to this file as CSV: a row per run, then one per backend (with -live: both runs)")
		maxReq      = fs.Float64("max-requests", defaultMaxRequests, "refuse to start when the runs asked for would simulate more requests than this (an estimate; memory stays bounded,\n"+
			"but time grows with requests: about 0.1 to 0.3 µs each per core)")
		liveMode = fs.Bool("live", false, "play the scenarios for real, through lbhttp's reverse proxy to HTTP backends on 127.0.0.1,\n"+
			"one run at a time, and print the live tables and a simulated-vs-live table (-html then charts the live run)")
		scale = fs.Float64("scale", live.DefaultScale, fmt.Sprintf("with -live: multiply every duration by this, in (0, %d]; figures are converted back", live.MaxScale))
	)
	fs.Usage = func() {
		fmt.Fprintln(stderr, `usage: lbsim [flags]

lbsim plays load scenarios in virtual time against every lbkit algorithm, prints a table per scenario with
its verdict, and ends with the algorithm to use for these backends, why, and the runner-up.

  lbsim                                  every default scenario, in seconds
  lbsim -scenarios steady -proxies 1,10  one scenario, one balancer and a fleet of ten
  lbsim -backends 20ms:c=4,80ms:c=4      your own backends
  lbsim -backends-file latencies.csv     your measured latencies (backend,latency_ms), or an nginx log with -log-format
  lbsim -json out.json -csv out.csv      every figure, for other tools
  lbsim -scenarios stall,storm,tail      a stalled backend, a storm of 503s, heavy tails: timeouts, budget, hedging
  lbsim -scenarios flaky,canary          a backend failing 30% of requests; a 5% canary 3× slower: their cost
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

	cfg := &config{opt: sim.Options{Seed: *seed}, markdown: *markdown, html: *html, json: *jsonFile, csv: *csvFile,
		live: *liveMode, scale: *scale, command: append([]string{"lbsim"}, args...), flags: map[string]string{}}
	fs.VisitAll(func(f *flag.Flag) { cfg.flags[f.Name] = f.Value.String() })
	if set["scale"] && !cfg.live {
		return nil, errors.New("-scale: only with -live")
	}
	if !(cfg.scale > 0 && cfg.scale <= live.MaxScale) {
		return nil, fmt.Errorf("-scale: %v is not in (0, %d]", cfg.scale, live.MaxScale)
	}
	var bs []sim.Backend
	switch {
	case *backends != "" && *backendsFile != "":
		return nil, errors.New("-backends and -backends-file: give one")
	case *logFormat != "" && *backendsFile == "":
		return nil, errors.New("-log-format: only with -backends-file")
	case *backends != "":
		var err error
		if bs, err = sim.ParseBackends(*backends); err != nil {
			return nil, err
		}
	case *backendsFile != "":
		var err error
		if bs, err = readBackends(*backendsFile, *logFormat); err != nil {
			return nil, err
		}
	}
	defaults, load, slow := sim.Defaults(bs), sim.LoadScenarios(), sim.SlowScenarios(bs)
	var picked []sim.Scenario
	if *scenarios == "" {
		picked = defaults
	} else {
		var err error
		all := append(append(append(defaults, load...), sim.FleetScenarios()...), slow...)
		if picked, err = choose(groups(*scenarios, load), all, scenarioName, "scenario"); err != nil {
			return nil, err
		}
	}
	for _, s := range picked {
		if bs != nil && s.Proxies > 0 {
			return nil, fmt.Errorf("-scenarios %s: it has backends and proxies of its own; -backends and -backends-file do not apply", s.Name)
		}
	}
	loaded := false // a load scenario was asked for
	for _, s := range picked {
		if slices.ContainsFunc(load, func(l sim.Scenario) bool { return l.Name == s.Name }) {
			loaded = true
		}
	}
	// The pickers that weigh reports and probes run where the backends'
	// reports are the point, unless named.
	defaultAlgos := catalog.Algorithms()
	if loaded {
		defaultAlgos = algos
	}
	var err error
	if *algoList == "" {
		cfg.algos = defaultAlgos
	} else if cfg.algos, err = choose(*algoList, algos, algoName, "algorithm"); err != nil {
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
		if bs != nil && s.Versus != nil {
			// A load scenario's backends are its own unless given: then
			// they replace them, users unchanged.
			s.Backends = slices.Clone(bs)
		}
		if *stages != "" {
			if s.Users, s.Stages, err = sim.ParseStages(*stages); err != nil {
				return nil, err
			}
		}
		s.Think = *think
		s.CheckInterval = *interval
		s.ReportDelay = *reportDelay
		s.ProbeRTT = *probeRTT
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
	if !(*maxReq > 0) {
		return nil, fmt.Errorf("-max-requests: %v is not positive", *maxReq)
	}
	if err := checkWork(cfg, *maxReq); err != nil {
		return nil, err
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

// readBackends reads the backends of -backends-file: a CSV of latencies,
// or an nginx access log when format is given.
func readBackends(path, format string) ([]sim.Backend, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("-backends-file: %w", err)
	}
	defer f.Close()
	var bs []sim.Backend
	if format != "" {
		bs, err = sim.ReadAccessLog(f, format)
	} else {
		r := bufio.NewReader(f)
		// The first line, to tell a log given without -log-format from a
		// CSV with a bad line: a CSV line has one comma.
		head, _ := r.Peek(4096)
		first, _, _ := bytes.Cut(head, []byte("\n"))
		if bs, err = sim.ReadLatencies(r); err != nil && bytes.Count(first, []byte(",")) != 1 {
			err = fmt.Errorf("%w; for an nginx access log, give the log_format that wrote it with -log-format", err)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("-backends-file %s: %w", path, err)
	}
	return bs, nil
}

// checkWork refuses, before anything starts, runs that would simulate
// more than limit requests (Scenario.Requests, an estimate): memory stays
// bounded whatever the number (sim.Scenario.RunBytes), but time does not.
func checkWork(cfg *config, limit float64) error {
	var total float64
	runs, peak := 0, 0
	for k := range cfg.opt.Proxies {
		for i := range cfg.scenarios {
			sc := &cfg.scenarios[i]
			if sc.Proxies > 0 && k > 0 {
				continue // played once, with proxies of its own
			}
			n := len(sc.RunVariants()) * len(cfg.algos)
			runs += n
			total += float64(n) * sc.Requests()
			peak = max(peak, sc.PeakUsers())
		}
	}
	if total <= limit {
		return nil
	}
	cores := float64(runtime.GOMAXPROCS(0))
	return fmt.Errorf("refusing to start: %s would simulate up to %.3g requests (%d users at the peak), "+
		"about %v to %v of work on %d cores at 0.1 to 0.3 µs a request; -max-requests is %.3g. "+
		"Ask for less (-scenarios, -algos, fewer -proxies, a shorter -duration) or raise -max-requests",
		plural(runs, "run", "runs"), total, peak,
		(time.Duration(total*0.1e3/cores) * time.Nanosecond).Round(time.Second),
		(time.Duration(total*0.3e3/cores) * time.Nanosecond).Round(time.Second), int(cores), limit)
}

// groups replaces in list (comma-separated) each name that is no load
// scenario's but the prefix of some, as "hetero" is of hetero-70 and
// hetero-95, by their names.
func groups(list string, load []sim.Scenario) string {
	var out []string
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		var members []string
		for _, s := range load {
			if s.Name == n {
				members = nil
				break
			}
			if strings.HasPrefix(s.Name, n+"-") {
				members = append(members, s.Name)
			}
		}
		if len(members) == 0 {
			members = []string{n}
		}
		out = append(out, members...)
	}
	return strings.Join(out, ",")
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
