package live

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/bench/sim"
	"github.com/lbkit/lbkit/catalog"
)

// Scale bounds and default.
const (
	// DefaultScale is the time scale when Options.Scale is zero: a
	// 3-minute scenario takes 18 s, a 50 ms backend answers in 5 ms.
	DefaultScale = 0.1
	// MaxScale bounds Options.Scale: ten times slower than the scenario.
	MaxScale = 10
	// MaxUsers bounds a live scenario's users: each holds a connection to
	// its proxy and, through it, up to one to a backend, four file
	// descriptors in this process; 2,000 users need 8,000.
	MaxUsers = 2000
)

// Options tunes Run and Play. The zero value runs at DefaultScale, seed 0,
// one proxy, without progress reports.
type Options struct {
	// Scale multiplies every duration of a scenario (service times, jitter
	// and measured samples, think time, stages, outages, check interval,
	// and health's ejection times) for the live run; the figures reported are divided
	// back (latencies ÷ Scale, rates × Scale). Zero means DefaultScale; it
	// must be in (0, MaxScale].
	Scale float64
	// Seed seeds the backends' service-time draws (jitter, lognormal).
	// The pickers use their own default randomness, as in a service.
	Seed uint64
	// Proxies lists the numbers of independent proxies, each with its own
	// picker, to split the users over (user u goes to proxy u mod M); Run
	// plays each scenario once per entry. Empty means [1]. Play ignores it.
	Proxies []int
	// Progress, if not nil, is called about five times a second while a
	// run plays, and once at its end, from Run's goroutine.
	Progress func(Progress)
}

// Progress says how far Run or Play has come.
type Progress struct {
	// Run names the run playing: "scenario/variant/algorithm".
	Run string
	// Done is the number of runs finished before it, Runs the number Run
	// plays in all (1 for Play).
	Done, Runs int
	// Elapsed is the real time the run has played, Length the real time
	// it lasts: the scenario's length times the scale.
	Elapsed, Length time.Duration
}

// Source returns the Report.Source of a live run at scale f: what the
// figures are and how they were converted.
func Source(f float64) string {
	s := strconv.FormatFloat(f, 'g', -1, 64)
	return "live, through lbhttp.NewProxy (httputil.ReverseProxy) to HTTP backends on 127.0.0.1, every duration ×" + s +
		"; figures converted back to the scenario's time base (latencies ÷" + s + ", rates ×" + s +
		"); latencies are the clients' (proxy and loopback included)"
}

// Run plays every scenario live, for each number of proxies, under each
// of its variants, with every algorithm, one run at a time, and returns
// the Report, in the order and shape sim.Run returns for the same
// arguments. It validates everything before it starts; errors about bad
// input wrap sim.ErrScenario. When ctx ends, Run stops the run playing,
// shuts it down and returns ctx's error.
func Run(ctx context.Context, scenarios []sim.Scenario, algos []catalog.Algorithm, opt Options) (*sim.Report, error) {
	if err := Check(scenarios, algos, opt); err != nil {
		return nil, err
	}
	f, _ := opt.scale()
	proxies := opt.Proxies
	if len(proxies) == 0 {
		proxies = []int{1}
	}
	runs := 0
	for range proxies {
		for _, sc := range scenarios {
			runs += len(sc.RunVariants()) * len(algos)
		}
	}
	rep := &sim.Report{Seed: opt.Seed, Source: Source(f)}
	done := 0
	for _, m := range proxies {
		for _, sc := range scenarios {
			sr := sim.ScenarioReport{Scenario: sc, Proxies: m}
			sr.Scenario.Metrics = append(slices.Clone(sc.Metrics), RigMetrics()...)
			for _, v := range sc.RunVariants() {
				for _, a := range algos {
					r, err := play(ctx, sc, v, a, m, f, opt.Seed, func(p Progress) {
						if opt.Progress != nil {
							p.Done, p.Runs = done, runs
							opt.Progress(p)
						}
					})
					if err != nil {
						return nil, err
					}
					sr.Results = append(sr.Results, r)
					done++
				}
			}
			rep.Scenarios = append(rep.Scenarios, sr)
		}
	}
	return rep, nil
}

// Check returns the error Run would return for these arguments before it
// starts anything, or nil: a scale outside (0, MaxScale], a number of
// proxies below 1, no algorithm or one without a New constructor, one of
// catalog.LoadAware (the live backends send no load reports and answer no
// probes), a scenario that Validate refuses as given or once scaled, with
// more than MaxUsers users, or with a backend's neighbour (Neighbours). Errors about bad input wrap sim.ErrScenario. A
// program that simulates first (lbsim -live) calls it before, so that
// bad input is refused at once.
func Check(scenarios []sim.Scenario, algos []catalog.Algorithm, opt Options) error {
	f, err := opt.scale()
	if err != nil {
		return err
	}
	for _, m := range opt.Proxies {
		if m < 1 {
			return fmt.Errorf("%w: %d proxies, want at least 1", sim.ErrScenario, m)
		}
	}
	if len(algos) == 0 {
		return fmt.Errorf("%w: no algorithms", sim.ErrScenario)
	}
	for _, a := range algos {
		if a.New == nil {
			return fmt.Errorf("live: algorithm %q has no New constructor", a.Name)
		}
		if slices.ContainsFunc(catalog.LoadAware(), func(l catalog.Algorithm) bool { return l.Name == a.Name }) {
			return fmt.Errorf("%w: live: %s weighs load reports or probes, which the live backends do not send or answer", sim.ErrScenario, a.Name)
		}
	}
	for _, sc := range scenarios {
		for i, b := range sc.Backends {
			if len(b.Neighbours) > 0 {
				return fmt.Errorf("%w: live: %s: backend %d (%s) has a neighbour, which only the simulator plays", sim.ErrScenario, sc.Name, i+1, sc.Label(i))
			}
		}
		if _, err := scaleScenario(sc, f); err != nil {
			return err
		}
	}
	return nil
}

// Play plays one scenario live under one variant with one algorithm, its
// users split over the given number of proxies, and returns what it
// measured in the scenario's own time base. It returns when the scenario
// is over and every server, client and goroutine it started has stopped,
// or earlier with ctx's error when ctx ends.
func Play(ctx context.Context, sc sim.Scenario, v sim.Variant, a catalog.Algorithm, proxies int, opt Options) (sim.Result, error) {
	f, err := opt.scale()
	if err != nil {
		return sim.Result{}, err
	}
	if proxies < 1 {
		return sim.Result{}, fmt.Errorf("%w: %d proxies, want at least 1", sim.ErrScenario, proxies)
	}
	return play(ctx, sc, v, a, proxies, f, opt.Seed, func(p Progress) {
		if opt.Progress != nil {
			p.Runs = 1
			opt.Progress(p)
		}
	})
}

func (o Options) scale() (float64, error) {
	f := o.Scale
	if f == 0 {
		f = DefaultScale
	}
	if !(f > 0 && f <= MaxScale) {
		return 0, fmt.Errorf("%w: scale %v outside (0, %d]", sim.ErrScenario, o.Scale, MaxScale)
	}
	return f, nil
}

// scaleScenario returns sc with every duration multiplied by f, rounded to
// the microsecond, and checks it.
func scaleScenario(sc sim.Scenario, f float64) (sim.Scenario, error) {
	if err := sc.Validate(); err != nil {
		return sc, err
	}
	if sc.PeakUsers() > MaxUsers {
		return sc, fmt.Errorf("%w: %s: %d users, more than the %d a live run plays", sim.ErrScenario, sc.Name, sc.PeakUsers(), MaxUsers)
	}
	if fleet := sc.Proxies > 0 || len(sc.ProxyZones) > 0 || sc.CrossZone > 0 ||
		slices.ContainsFunc(sc.RunVariants(), func(v sim.Variant) bool { return v&(sim.Locality|sim.Subset) != 0 }); fleet {
		return sc, fmt.Errorf("%w: %s: zones, fleets of proxies and the locality and subset variants are simulated only", sim.ErrScenario, sc.Name)
	}
	if slices.ContainsFunc(sc.Backends, func(b sim.Backend) bool { return b.FailShare > 0 || b.Track != "" }) ||
		slices.ContainsFunc(sc.RunVariants(), func(v sim.Variant) bool { return v&(sim.Route|sim.Canary) != 0 }) {
		return sc, fmt.Errorf("%w: %s: a share of failures (fail=), tracks and the route and canary variants are simulated only", sim.ErrScenario, sc.Name)
	}
	scale := func(d time.Duration) time.Duration {
		return time.Duration(math.Round(float64(d)*f/1e3)) * time.Microsecond
	}
	out := sc
	out.Think = scale(sc.Think)
	out.CheckInterval = scale(sc.Interval())
	out.ClientTimeout = scale(sc.ClientTimeout)
	out.Stages = slices.Clone(sc.Stages)
	for i := range out.Stages {
		out.Stages[i].Duration = max(scale(sc.Stages[i].Duration), time.Microsecond)
	}
	out.Backends = slices.Clone(sc.Backends)
	for i := range out.Backends {
		b := &out.Backends[i]
		b.Latency = max(scale(b.Latency), time.Microsecond)
		b.Jitter = min(scale(b.Jitter), b.Latency-1)
		if len(b.Samples) > 0 {
			samples := make([]time.Duration, len(b.Samples))
			for k, d := range b.Samples {
				samples[k] = scale(d)
			}
			b.Samples = samples
		}
		for _, os := range []*[]sim.Outage{&b.Down, &b.Stalls, &b.Unavailable} {
			*os = slices.Clone(*os)
			for j := range *os {
				o := &(*os)[j]
				o.At = scale(o.At)
				if o.Until != 0 {
					o.Until = max(scale(o.Until), o.At+time.Microsecond)
				}
			}
		}
	}
	if err := out.Validate(); err != nil {
		return out, fmt.Errorf("%w (at scale %v)", err, f)
	}
	return out, nil
}

// run is one live run: its backends, proxies and users. Its fields are
// set by play and setUp on the run's goroutine before the users start,
// and only read after, but for the atomics and what each type guards.
type run struct {
	orig   sim.Scenario // as given, for the report
	sc     sim.Scenario // scaled
	scale  float64
	length int64   // real ns
	step   float64 // real ns per series step
	steps  int
	// The first outage, [at, until) in real ns, for the throughput before
	// and during it.
	window    [2]int64
	hasWindow bool
	ctx       context.Context // ends when the run is over: users and health checks stop
	cancel    context.CancelFunc
	start     time.Time // when the users started; set by play before it starts them
	epoch     time.Time // when the run was set up: the algorithms' clocks start here

	backends []*backend
	byID     map[string]*backend // by the ID pickers see
	dialer   net.Dialer
	proxies  []*proxy
	users    []*user

	stepErrs   []atomic.Int32 // failed user requests per series step
	sentDuring atomic.Int64   // attempts picked during the first outage

	wg     sync.WaitGroup // user goroutines
	closed bool           // close has run; the run's goroutine only
}

// play is Play with the scale checked; progress gets Run, Elapsed and
// Length.
func play(ctx context.Context, orig sim.Scenario, v sim.Variant, a catalog.Algorithm, proxies int, f float64, seed uint64, progress func(Progress)) (sim.Result, error) {
	sc, err := scaleScenario(orig, f)
	if err != nil {
		return sim.Result{}, err
	}
	if a.New == nil {
		return sim.Result{}, fmt.Errorf("live: algorithm %q has no New constructor", a.Name)
	}
	r := &run{orig: orig, sc: sc, scale: f, length: int64(sc.Length())}
	r.step = float64(sim.SeriesStep(orig.Length())) * f
	r.steps = int(math.Ceil(float64(orig.Length()) / float64(sim.SeriesStep(orig.Length()))))
	if o, ok := sc.FirstOutage(); ok {
		r.hasWindow = true
		r.window = [2]int64{int64(o.At), r.length}
		if o.Until != 0 {
			r.window[1] = min(int64(o.Until), r.length)
		}
	}
	r.ctx, r.cancel = context.WithCancel(ctx)
	r.epoch = time.Now()
	defer r.close()
	if err := r.setUp(v, a, proxies, seed); err != nil {
		return sim.Result{}, err
	}
	name := fmt.Sprintf("%s/%v/%s", orig.Name, v, a.Name)
	if err := r.play(func(elapsed time.Duration) {
		progress(Progress{Run: name, Elapsed: elapsed, Length: time.Duration(r.length)})
	}); err != nil {
		return sim.Result{}, err
	}
	r.close()
	return r.result(a.Name, v, proxies), nil
}

// setUp starts the backends, the proxies and the users' goroutines, which
// wait for their first send.
func (r *run) setUp(v sim.Variant, a catalog.Algorithm, proxies int, seed uint64) error {
	r.byID = make(map[string]*backend, len(r.sc.Backends))
	r.stepErrs = make([]atomic.Int32, r.steps)
	for i, spec := range r.sc.Backends {
		b := &backend{r: r, index: i, spec: spec, rng: rand.New(rand.NewPCG(seed, uint64(i))), stepSent: make([]atomic.Int32, r.steps)}
		if spec.Capacity > 0 {
			b.sem = make(chan struct{}, spec.Capacity)
		}
		if err := b.start(); err != nil {
			return err
		}
		r.backends = append(r.backends, b)
		r.byID[r.sc.ID(i)] = b
	}
	for range proxies {
		p, err := r.startProxy(a, v)
		if err != nil {
			return err
		}
		r.proxies = append(r.proxies, p)
	}
	r.users = make([]*user, r.sc.PeakUsers())
	for u := range r.users {
		r.users[u] = newUser(sim.UserAddr(u), r.proxies[u%proxies], r.sc.ClientTimeout)
	}
	return nil
}

// endpoints is the set every proxy's picker is given: the simulator's IDs
// and, for an algorithm that uses them, the scenario's weights.
func (r *run) endpoints(a catalog.Algorithm) []balancer.Backend {
	bs := make([]balancer.Backend, len(r.sc.Backends))
	for i, spec := range r.sc.Backends {
		w := 1
		if a.Weighted && spec.Weight > 0 {
			w = spec.Weight
		}
		bs[i] = balancer.NewEndpoint(r.sc.ID(i), w)
	}
	return bs
}

// scaled returns d times the run's scale.
func (r *run) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * r.scale)
}

// now is the algorithms' clock: it starts at the real time the run was
// set up and runs 1/scale times as fast, in the scenario's time. Safe for
// concurrent use.
func (r *run) now() time.Time {
	return r.epoch.Add(time.Duration(float64(time.Since(r.epoch)) / r.scale))
}

// elapsed returns the real time since the run started, in nanoseconds.
func (r *run) elapsed() int64 { return int64(time.Since(r.start)) }

// stepOf returns the series step of a real time since the start, clamped
// to the series.
func (r *run) stepOf(t int64) int {
	return min(max(int(float64(t)/r.step), 0), r.steps-1)
}

// timed is something the run's clock does at a real time: a user joins or
// leaves, a backend changes (dies, comes back, stalls...).
type timed struct {
	at     time.Duration
	user   int // -1 for a backend's event
	join   bool
	index  int // the backend
	change change
}

// change is what happens to a backend at a timed event.
type change uint8

const (
	revive change = iota // it listens again
	kill                 // it closes its listener and its connections
	stall                // it holds every answer
	resume               // it sends the answers it held, and answers again
	storm                // it answers 503
	calm                 // it answers as usual again
)

// timeline returns what happens when, in time order, within the
// scenario: as in the simulator, an event at or after its end (a revive
// after it, a user leaving as it ends) is left out, so that the run ends
// with the scenario.
func (r *run) timeline() []timed {
	var out []timed
	add := func(e timed) {
		if int64(e.at) < r.length {
			out = append(out, e)
		}
	}
	for i, b := range r.sc.Backends {
		for _, spans := range []struct {
			os          []sim.Outage
			start, stop change
		}{{b.Down, kill, revive}, {b.Stalls, stall, resume}, {b.Unavailable, storm, calm}} {
			for _, o := range spans.os {
				add(timed{at: o.At, user: -1, index: i, change: spans.start})
				if o.Until != 0 {
					add(timed{at: o.Until, user: -1, index: i, change: spans.stop})
				}
			}
		}
	}
	for c := range r.sc.UserChanges() {
		add(timed{at: c.At, user: c.User, join: c.Join})
	}
	slices.SortStableFunc(out, func(a, b timed) int { return cmp.Compare(a.at, b.at) })
	return out
}

// progressEvery is how often Progress is called while a run plays.
const progressEvery = 200 * time.Millisecond

// play starts the users and plays the timeline until the scenario's end
// or the context's.
func (r *run) play(progress func(time.Duration)) error {
	events := r.timeline()
	r.start = time.Now()
	for u, us := range r.users {
		var first time.Duration = -1 // waits to join
		if u < r.sc.Users {
			first = r.sc.FirstSend(u)
			us.active.Store(true)
		}
		r.wg.Go(func() { r.loop(us, first) })
	}
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	timer := time.NewTimer(time.Hour) // reset below
	defer timer.Stop()
	next := 0
	for {
		due := time.Duration(r.length)
		if next < len(events) {
			due = events[next].at
		}
		timer.Reset(time.Until(r.start.Add(due)))
		select {
		case <-r.ctx.Done():
			return r.ctx.Err()
		case <-tick.C:
			timer.Stop()
			progress(time.Since(r.start))
			continue
		case <-timer.C:
		}
		if next == len(events) {
			progress(time.Duration(r.length))
			return nil
		}
		for ; next < len(events) && events[next].at <= time.Since(r.start); next++ {
			if err := r.do(events[next]); err != nil {
				return err
			}
		}
	}
}

// do applies one timed event.
func (r *run) do(e timed) error {
	switch {
	case e.user >= 0 && e.join:
		u := r.users[e.user]
		u.active.Store(true)
		select {
		case u.wake <- struct{}{}:
		default: // a wake-up is already pending
		}
	case e.user >= 0:
		r.users[e.user].active.Store(false)
	default:
		return r.backends[e.index].apply(e.change)
	}
	return nil
}

// close stops everything the run started and waits for it, in order:
// users, proxies (servers, health checks, idle connections), backends.
// It is safe to call twice.
func (r *run) close() {
	if r.closed {
		return
	}
	r.closed = true
	r.cancel()
	r.wg.Wait()
	for _, p := range r.proxies {
		p.close()
	}
	for _, b := range r.backends {
		b.close()
	}
	for _, u := range r.users {
		u.client.CloseIdleConnections()
	}
}
