package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `usage:
  lbload backends -listen host:port,...      serve HTTP backends that answer "ok"
  lbload proxy -listen host:port -backends host:port,... [-tuned]   a bare ReverseProxy, in turn
  lbload run -url URL [-n N] [-c C] [-warmup W] [-pid name=PID ...] [-label L] [-tsv FILE]
  lbload report FILE                         the lines -tsv appended, as a table of ratios`

// run is the command; it returns the exit status: 2 for bad usage, 1 for
// a failure or a run with errors.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "backends":
		err = serveBackends(ctx, args[1:], stderr)
	case "proxy":
		err = serveProxy(ctx, args[1:], stderr)
	case "run":
		err = runLoad(ctx, args[1:], stdout, stderr)
	case "report":
		err = report(args[1:], stdout)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stdout, usage)
		return 0
	default:
		err = usageError{fmt.Errorf("unknown command %q", args[0])}
	}
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "lbload: %v\n%s\n", err, usage)
		return 2
	default:
		fmt.Fprintf(stderr, "lbload: %v\n", err)
		return 1
	}
}

// usageError marks an error in the command line.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// serveBackends serves "ok" on every address of -listen until ctx ends.
func serveBackends(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flags("backends")
	listen := fs.String("listen", "", "addresses to serve on, comma-separated")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *listen == "" {
		return usageError{errors.New("backends: -listen is required")}
	}
	ok := []byte("ok")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "2")
		_, _ = w.Write(ok)
	})
	var servers []*http.Server
	errc := make(chan error, 8)
	for addr := range strings.SplitSeq(*listen, ",") {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, s := range servers {
				s.Close()
			}
			return err
		}
		s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		// HTTP/1, and HTTP/2 without TLS for a client that starts with
		// it (prior knowledge): for a proxy sending h2c.
		s.Protocols = new(http.Protocols)
		s.Protocols.SetHTTP1(true)
		s.Protocols.SetUnencryptedHTTP2(true)
		servers = append(servers, s)
		go func() { errc <- s.Serve(ln) }()
		fmt.Fprintf(stderr, "lbload: backend on %s\n", ln.Addr())
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		fmt.Fprintf(stderr, "lbload: %v\n", err)
	}
	for _, s := range servers {
		s.Close()
	}
	return nil
}

// pids is the repeatable -pid flag: name=PID.
type pids []namedPID

type namedPID struct {
	name string
	pid  int
}

func (p *pids) String() string { return fmt.Sprint(*p) }

func (p *pids) Set(s string) error {
	name, num, ok := strings.Cut(s, "=")
	if !ok {
		name, num = "pid"+s, s
	}
	pid, err := strconv.Atoi(num)
	if err != nil || pid <= 0 {
		return fmt.Errorf("-pid %q: want name=PID with a positive PID", s)
	}
	*p = append(*p, namedPID{name, pid})
	return nil
}

// result is what one run measured.
type result struct {
	requests, errors int
	elapsed          time.Duration
	p50, p99         time.Duration
	firstErr         error
}

func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flags("run")
	url := fs.String("url", "", "URL to GET")
	n := fs.Int("n", 100000, "requests to measure")
	c := fs.Int("c", 64, "concurrent connections (one worker each)")
	warmup := fs.Int("warmup", 5000, "requests sent before measuring, not counted")
	label := fs.String("label", "", "label of this run in -tsv's file (default: the URL)")
	tsv := fs.String("tsv", "", "append one line per -pid to this file")
	var ps pids
	fs.Var(&ps, "pid", "name=PID of a process whose CPU time to measure (repeatable)")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	switch {
	case *url == "":
		return usageError{errors.New("run: -url is required")}
	case *n <= 0 || *c <= 0 || *warmup < 0:
		return usageError{fmt.Errorf("run: -n %d and -c %d must be positive, -warmup %d not negative", *n, *c, *warmup)}
	case *c > *n:
		return usageError{fmt.Errorf("run: -c %d is more than -n %d", *c, *n)}
	}
	if *label == "" {
		*label = *url
	}
	tr := &http.Transport{
		MaxIdleConnsPerHost: *c,
		MaxConnsPerHost:     *c,
		DisableCompression:  true,
		Proxy:               nil,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	if *warmup > 0 {
		if w := load(ctx, client, *url, *warmup, min(*c, *warmup)); w.errors > 0 {
			return fmt.Errorf("warm-up: %d of %d requests failed, the first with: %v", w.errors, w.requests, w.firstErr)
		}
	}
	before, err := sample(ps)
	if err != nil {
		return err
	}
	res := load(ctx, client, *url, *n, *c)
	after, err := sample(ps)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	secs := res.elapsed.Seconds()
	fmt.Fprintf(stdout, "%s: %d requests, %d connections, %.2f s: %.0f requests/s, p50 %s, p99 %s, %d errors\n",
		*label, res.requests, *c, secs, float64(res.requests)/secs, res.p50, res.p99, res.errors)
	var lines []string
	for i, p := range ps {
		d := after[i].sub(before[i])
		per := float64(d.user+d.sys) / float64(time.Microsecond) / float64(res.requests)
		fmt.Fprintf(stdout, "  %s (pid %d): %.1f µs CPU per request (user %.1f s, system %.1f s)\n",
			p.name, p.pid, per, d.user.Seconds(), d.sys.Seconds())
		lines = append(lines, strings.Join([]string{
			*label, p.name, strconv.Itoa(res.requests), strconv.Itoa(*c),
			fmt.Sprintf("%.3f", secs), fmt.Sprintf("%.1f", float64(res.requests)/secs),
			fmt.Sprintf("%.3f", res.p50.Seconds()*1e3), fmt.Sprintf("%.3f", res.p99.Seconds()*1e3),
			fmt.Sprintf("%.2f", per), fmt.Sprintf("%.3f", d.user.Seconds()), fmt.Sprintf("%.3f", d.sys.Seconds()),
			strconv.Itoa(res.errors),
		}, "\t"))
	}
	if *tsv != "" {
		f, err := os.OpenFile(*tsv, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		for _, l := range lines {
			fmt.Fprintln(f, l)
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	if res.errors > 0 {
		return fmt.Errorf("%d of %d requests failed, the first with: %v", res.errors, res.requests, res.firstErr)
	}
	return nil
}

// load sends n GETs of url from c workers and reads each body to its end.
func load(ctx context.Context, client *http.Client, url string, n, c int) result {
	var (
		next     atomic.Int64
		errs     atomic.Int64
		firstErr atomic.Pointer[error]
		wg       sync.WaitGroup
	)
	lat := make([][]time.Duration, c)
	start := time.Now()
	for w := range c {
		lat[w] = make([]time.Duration, 0, n/c+1)
		wg.Go(func() {
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				t0 := time.Now()
				err := get(ctx, client, url)
				lat[w] = append(lat[w], time.Since(t0))
				if err != nil {
					errs.Add(1)
					firstErr.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	r := result{elapsed: time.Since(start), errors: int(errs.Load())}
	all := slices.Concat(lat...)
	r.requests = len(all)
	slices.Sort(all)
	if len(all) > 0 {
		r.p50 = all[(len(all)-1)*50/100]
		r.p99 = all[(len(all)-1)*99/100]
	}
	if e := firstErr.Load(); e != nil {
		r.firstErr = *e
	}
	return r
}

func get(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %s", resp.Status)
	}
	return err
}

// sample reads the CPU time of each process tree of ps.
func sample(ps pids) ([]cpuTimes, error) {
	ts := make([]cpuTimes, len(ps))
	for i, p := range ps {
		t, err := processTreeCPU(p.pid)
		if err != nil {
			return nil, err
		}
		ts[i] = t
	}
	return ts, nil
}

// cpuTimes is user and system CPU time.
type cpuTimes struct{ user, sys time.Duration }

func (a cpuTimes) sub(b cpuTimes) cpuTimes { return cpuTimes{a.user - b.user, a.sys - b.sys} }

// clockTick is the unit of /proc/PID/stat's times: USER_HZ, 100 on Linux
// for every architecture's user ABI.
const clockTick = 10 * time.Millisecond

// processTreeCPU returns the CPU time of pid and of every process
// descended from it, read from /proc.
func processTreeCPU(pid int) (cpuTimes, error) {
	parents, err := parentsOf()
	if err != nil {
		return cpuTimes{}, err
	}
	tree := []int{pid}
	for i := 0; i < len(tree); i++ {
		for child, parent := range parents {
			if parent == tree[i] {
				tree = append(tree, child)
			}
		}
	}
	var sum cpuTimes
	for i, p := range tree {
		st, err := readStat(p)
		if err != nil {
			if i == 0 {
				return cpuTimes{}, fmt.Errorf("process %d: %w", pid, err)
			}
			continue // a descendant that has just exited
		}
		sum.user += st.user
		sum.sys += st.sys
	}
	return sum, nil
}

// parentsOf maps every process in /proc to its parent.
func parentsOf() (map[int]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	m := make(map[int]int, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, err := readStat(pid); err == nil {
			m[pid] = st.ppid
		}
	}
	return m, nil
}

type stat struct {
	ppid      int
	user, sys time.Duration
}

// readStat reads a process's parent and its own CPU time (all threads)
// from /proc/PID/stat.
func readStat(pid int) (stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return stat{}, err
	}
	return parseStat(string(b))
}

// parseStat parses a /proc/PID/stat line. The command name, field 2, is in
// parentheses and may hold spaces and parentheses itself, so the fields
// are counted from the last ')'.
func parseStat(s string) (stat, error) {
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return stat{}, errors.New("malformed /proc stat line")
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state): ppid is field 4, utime 14, stime 15.
	if len(f) < 13 {
		return stat{}, errors.New("short /proc stat line")
	}
	ppid, err1 := strconv.Atoi(f[1])
	ut, err2 := strconv.ParseInt(f[11], 10, 64)
	st, err3 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return stat{}, fmt.Errorf("malformed /proc stat line: %w", err)
	}
	return stat{ppid: ppid, user: time.Duration(ut) * clockTick, sys: time.Duration(st) * clockTick}, nil
}

// report prints the lines run -tsv appended as a table: one row per
// label and process, the median of its runs, with its CPU per request and
// requests per second also as a ratio of the first row's. When every row
// has as many runs as the first (rounds that ran each in turn), a ratio is
// the median of the rounds' ratios, each run set beside the first row's
// run of the same round, which the machine's load in that round touched
// alike; otherwise it is the ratio of the medians.
func report(args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return usageError{errors.New("report: want one file")}
	}
	f, err := os.Open(args[0])
	if err != nil {
		return err
	}
	defer f.Close()
	groups, err := readRuns(f, args[0])
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "run\tprocess\truns\trequests/s\t×first\tp50 ms\tp99 ms\tCPU µs/req\t×first\terrors")
	first := groups[0]
	paired := true
	for _, g := range groups {
		paired = paired && len(g.raw) == len(first.raw)
	}
	// ratio is g's figure j (0: rps, 3: cpu) as a ratio of the first's.
	ratio := func(g group, j int, med float64) float64 {
		if !paired {
			return med / [4]float64{first.rps, first.p50, first.p99, first.cpu}[j]
		}
		xs := make([]float64, len(g.raw))
		for i := range g.raw {
			xs[i] = g.raw[i][j] / first.raw[i][j]
		}
		return median(xs)
	}
	for _, g := range groups {
		fmt.Fprintf(w, "%s\t%s\t%d\t%.0f\t%.2f\t%.2f\t%.2f\t%.1f\t%.2f\t%d\n",
			g.label, g.name, g.runs, g.rps, ratio(g, 0, g.rps), g.p50, g.p99, g.cpu, ratio(g, 3, g.cpu), g.errs)
	}
	return w.Flush()
}

// group is the median of the runs of one label and process.
type group struct {
	label, name        string
	runs, errs         int
	rps, p50, p99, cpu float64
	raw                [][4]float64 // each run's rps, p50, p99 and cpu, in order
}

// median returns the median of xs, which it sorts.
func median(xs []float64) float64 {
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

// readRuns reads -tsv lines and groups them by label and process, in the
// order each first appears, each figure the median of the group's runs.
func readRuns(r io.Reader, name string) ([]group, error) {
	type key struct{ label, name string }
	var order []key
	runs := map[key][][4]float64{}
	errs := map[key]int{}
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		t := strings.Split(sc.Text(), "\t")
		if len(t) != 12 {
			return nil, fmt.Errorf("%s:%d: want 12 tab-separated fields, got %d", name, line, len(t))
		}
		var v [4]float64
		for i, col := range []int{5, 6, 7, 8} { // rps, p50, p99, cpu
			x, err := strconv.ParseFloat(t[col], 64)
			if err != nil || x <= 0 {
				return nil, fmt.Errorf("%s:%d: field %d: %q is not a positive number", name, line, col+1, t[col])
			}
			v[i] = x
		}
		e, err := strconv.Atoi(t[11])
		if err != nil {
			return nil, fmt.Errorf("%s:%d: field 12: %w", name, line, err)
		}
		k := key{t[0], t[1]}
		if _, ok := runs[k]; !ok {
			order = append(order, k)
		}
		runs[k] = append(runs[k], v)
		errs[k] += e
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(order) == 0 {
		return nil, fmt.Errorf("%s: no runs", name)
	}
	groups := make([]group, len(order))
	for i, k := range order {
		rs := runs[k]
		med := func(j int) float64 {
			xs := make([]float64, len(rs))
			for i, r := range rs {
				xs[i] = r[j]
			}
			return median(xs)
		}
		groups[i] = group{label: k.label, name: k.name, runs: len(rs), errs: errs[k],
			rps: med(0), p50: med(1), p99: med(2), cpu: med(3), raw: rs}
	}
	return groups, nil
}
