package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/lbhttp"
)

// RefuseTime is how long a connection to a dead backend takes to be
// refused: a round trip on a local network.
const RefuseTime = 100 * time.Microsecond

// tickEvery is how often health wrappers apply time-based transitions
// (ejections ending, slow-start steps) besides after each failure and
// probe.
const tickEvery = 100 * time.Millisecond

// endpoint is the Backend the pickers are given: an ID, a weight, a
// locality, and the index of the simulated backend, so that a pick is
// mapped back without a map lookup.
type endpoint struct {
	id     string
	weight int
	index  int32
	loc    balancer.Locality
	labels map[string]string // TrackLabel: its Track; nil without one
}

var (
	_ balancer.Backend  = (*endpoint)(nil)
	_ balancer.Weighter = (*endpoint)(nil)
	_ balancer.Labeler  = (*endpoint)(nil)
)

// Labels returns the backend's labels: TrackLabel, its scenario backend's
// Track, when it has one.
func (e *endpoint) Labels() map[string]string { return e.labels }

func (e *endpoint) ID() string  { return e.id }
func (e *endpoint) Weight() int { return e.weight }

// server is one simulated backend during a run.
type server struct {
	spec     Backend
	alive    bool
	capacity int      // requests served at once now: spec.Capacity less a neighbour's; 0 unlimited
	busy     int      // requests in service
	waiting  []ticket // attempts queued, first come first served, from head; some may have left (see leave)
	head     int
	inflight int // busy + queued
	refused  error
	reset    error
	lane     int    // the queue's lane for its answers when its service time is fixed; −1 otherwise
	meter    *meter // what it measures of itself for its reports and probe answers; nil unless a picker uses them
	zone     int32  // its zone's number, −1 for none
	// A stall and a storm of 503s (Backend.Stalls, Unavailable): the
	// answers held while stalled, and the errors.
	stalled, unavailable bool
	held                 []ticket
	hung, unavail        error

	// Measured.
	sent, refusals, resets int64
	peak                   int
	area                   int64   // ∫ inflight dt, in request·ns
	last                   int64   // when inflight last changed
	stepArea               []int64 // area per series step
	stepPeak               []int32 // the most in flight in each step
	stepSent               []int32
	spanArea               [2]int64 // area before the first outage and during it
	spans                  [3]int64 // their bounds
}

// proxy is one picker instance with its failure handling.
type proxy struct {
	bal       balancer.Balancer
	fb        balancer.Feedback // nil when the picker learns nothing
	health    healthWrapper     // nil without health checks
	prober    prober            // nil unless the picker probes
	send      func(balancer.Backend)
	refresher refresher          // nil unless the picker recomputes weights
	budget    *lbhttp.Budget     // nil without Budget
	sketch    *lbhttp.Percentile // the hedge delay's; nil without Hedge
}

// attempt states.
const (
	idle      uint8 = iota // none in flight: the user thinks, or is stopped
	atServer               // in service at backend
	refusing               // its connection attempt will be refused
	returning              // its answer is crossing zones back to its proxy
	queued                 // queued at backend
	answering              // backend will answer 503 (Backend.Unavailable)
)

// try is one attempt in flight: a user's, or its hedge (engine.hedges).
// Its token names it in the events that concern it; a hedge's has
// hedgeToken set.
type try struct {
	sentAt  int64 // when it was sent
	token   uint32
	backend int32
	state   uint8
}

// user is one closed-loop virtual user.
type user struct {
	key      string // its client address: the affinity key
	route    string // its current request's Request.Route (Canary), kept by its retries and hedges
	start    int64  // when its current request's first attempt was sent
	deadline int64  // when the request times out (Timeout); 0 for never
	try             // its current attempt
	proxy    int32
	attempt  int32 // the number of the last attempt sent, from 0, hedges counted
	active   bool  // the profile wants it
	running  bool  // it has a send or a request pending
	pending  bool  // it waits for the outcome of a request
	hedged   bool  // its current round of attempts sent a hedge
}

// engine is one run: a scenario, a variant, an algorithm, a number of
// proxies and a seed.
type engine struct {
	sc                                 *Scenario
	variant                            Variant
	now                                int64
	end                                int64
	think                              int64
	step                               int64
	q                                  queue
	thinkLane, profileLane, refuseLane int // the queue's lanes for the sends, the users' joins and leaves, and refusals
	rng                                *rand.Rand
	servers                            []server
	proxies                            []proxy
	users                              []user
	eps                                []*endpoint
	delay, rtt                         int64 // the report delay and the probe round trip
	probeLane, answerLane              int
	calls                              []probeCall // probes under way, reused through freeCalls
	freeCalls                          []int32
	proxyZone                          []int32         // each proxy's zone's number, −1 for none
	cross                              int64           // Scenario.CrossZone
	crossLane                          int             // the queue's lane for answers crossing zones
	carried                            []balancer.Load // per attempt (carriedAt): the report its answer carries across zones; nil without reports or zones
	hedges                             []try           // each user's hedge; nil without Hedge
	slow                               slowTimes

	// Measured.
	latency           Histogram       // of successful user requests
	exact             []time.Duration // every latency too, when not nil: for tests of the histogram
	ok, errs, retries int64
	okBefore, okAfter int64
	errsAfter         int64    // failed user requests during the outage compared
	sentAfter         int64    // attempts sent during it
	maxWait           int64    // the longest a user request waited for its outcome
	probes            int64    // sent
	window            [2]int64 // the outage compared, [at, until)
	hasWindow         bool
	stepErrs          []int32
	stepUsers         []int
	closed            int // steps whose users are recorded
	activeUsers       int
	local, remote     [2]int64 // attempts that stayed in their proxy's zone and that left it, per span (see span)
	connected         []uint64 // bit p·⌈n/64⌉·64+i: proxy p sent backend i an attempt; nil unless the scenario asks
}

// Simulate plays one scenario under one variant with one algorithm, its
// users split over the given number of proxies, and returns what it
// measured. Runs with the same arguments return the same Result.
func Simulate(sc Scenario, v Variant, a catalog.Algorithm, proxies int, seed uint64) (Result, error) {
	return simulate(context.Background(), sc, v, a, proxies, seed)
}

// simulate is Simulate, stopped with ctx's error when ctx ends.
func simulate(ctx context.Context, sc Scenario, v Variant, a catalog.Algorithm, proxies int, seed uint64) (Result, error) {
	if err := sc.Validate(); err != nil {
		return Result{}, err
	}
	if proxies < 1 || proxies > MaxProxies {
		return Result{}, fmt.Errorf("%w: %d proxies, want 1 to %d", ErrScenario, proxies, MaxProxies)
	}
	if a.Sim == nil {
		return Result{}, fmt.Errorf("sim: algorithm %q has no Sim constructor", a.Name)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	e, err := newEngine(&sc, v, a, proxies, seed)
	if err != nil {
		return Result{}, err
	}
	if !e.run(ctx.Done()) {
		return Result{}, ctx.Err()
	}
	return e.result(a.Name, proxies), nil
}

// checkEvery is how many events run plays between two looks at its stop
// channel: about a millisecond's worth.
const checkEvery = 1024

func newEngine(sc *Scenario, v Variant, a catalog.Algorithm, proxies int, seed uint64) (*engine, error) {
	length := int64(sc.Length())
	peak := sc.PeakUsers()
	e := &engine{
		sc:      sc,
		variant: v,
		end:     length,
		think:   int64(sc.Think),
		step:    int64(SeriesStep(sc.Length())),
		rng:     rand.New(rand.NewPCG(seed, 1)),
		servers: make([]server, len(sc.Backends)),
		proxies: make([]proxy, proxies),
		users:   make([]user, peak),
		eps:     make([]*endpoint, len(sc.Backends)),
		delay:   int64(sc.ReportDelay),
		rtt:     int64(sc.RTT()),
		cross:   int64(sc.CrossZone),
	}
	var backendZone []int32
	e.proxyZone, backendZone = zoneIndex(sc, proxies)
	if sc.tracksConns() {
		e.connected = make([]uint64, proxies*((len(sc.Backends)+63)/64))
	}
	// Most events go to lanes, which keep them in time order as they
	// come: the sends (the first ones are in time order, and every later
	// one is a think time ahead), the profile's changes, the refusals and
	// the answers of backends with a fixed service time, one lane per
	// distinct time. The heap holds the rest.
	e.q.heap = make([]event, 0, 64+4*len(sc.Backends)+2*proxies)
	e.thinkLane, e.profileLane, e.refuseLane = e.q.addLane(), e.q.addLane(), e.q.addLane()
	e.q.reserve(e.thinkLane, sc.Users)
	fixed := map[time.Duration]int{}
	steps := int((length + e.step - 1) / e.step)
	e.stepErrs = make([]int32, steps)
	e.stepUsers = make([]int, steps)
	if o, ok := sc.FirstOutage(); ok {
		e.hasWindow = true
		e.window = [2]int64{int64(o.At), length}
		if o.Until != 0 {
			e.window[1] = min(int64(o.Until), length)
		}
	}

	bs := make([]balancer.Backend, len(sc.Backends))
	for i := range sc.Backends {
		spec := sc.Backends[i]
		s := &e.servers[i]
		s.spec = spec
		s.alive = true
		s.capacity = spec.Capacity
		id := sc.ID(i)
		s.refused = fmt.Errorf("sim: dial %s: connect: %w", id, syscall.ECONNREFUSED)
		s.reset = fmt.Errorf("sim: read %s: %w", id, syscall.ECONNRESET)
		s.stepArea = make([]int64, steps)
		s.stepPeak = make([]int32, steps)
		s.stepSent = make([]int32, steps)
		s.lane = -1
		s.zone = backendZone[i]
		s.spans = e.spans()
		if spec.fixed() {
			l, ok := fixed[spec.Latency]
			if !ok {
				l = e.q.addLane()
				fixed[spec.Latency] = l
			}
			s.lane = l
		}
		w := 1
		if a.Weighted && spec.Weight > 0 {
			w = spec.Weight
		}
		e.eps[i] = &endpoint{id: id, weight: w, index: int32(i), loc: balancer.Locality{Zone: spec.Zone}}
		if spec.Track != "" {
			e.eps[i].labels = map[string]string{TrackLabel: spec.Track}
		}
		bs[i] = e.eps[i]
		for _, o := range spec.Down {
			e.q.push(int64(o.At), evKill, int32(i), 0)
			if o.Until != 0 && int64(o.Until) < length {
				e.q.push(int64(o.Until), evRevive, int32(i), 0)
			}
		}
		for _, n := range spec.Neighbours {
			e.q.push(int64(n.At), evCapacity, int32(i), uint32(spec.Capacity-n.Takes))
			if n.Until != 0 && int64(n.Until) < length {
				e.q.push(int64(n.Until), evCapacity, int32(i), uint32(spec.Capacity))
			}
		}
	}

	// Virtual time zero reads as 2025-01-01 on the pickers' clocks.
	epoch := time.Date(2025, time.January, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return epoch.Add(time.Duration(e.now)) }
	if e.cross > 0 {
		e.crossLane = e.q.addLane()
	}
	callers := sc.callers(proxies)
	for p := range e.proxies {
		src := rand.New(rand.NewPCG(seed, uint64(2+p)))
		// The decorators stack as their docs say: subset ▶ health ▶
		// locality ▶ the algorithm.
		inner, err := e.picker(p, a, callers, src.Uint64, clock)
		if err != nil {
			return nil, err
		}
		px := &e.proxies[p]
		px.bal = inner
		if v.Health() {
			h, err := newHealth(inner, v, sc.Interval(), clock, src.Uint64)
			if err != nil {
				return nil, err
			}
			px.bal, px.health = h, h
		}
		if px.bal, err = e.subset(p, a, px.bal); err != nil {
			return nil, err
		}
		px.fb, _ = px.bal.(balancer.Feedback)
		// The picker's background work, driven in virtual time: its
		// probes, its weights.
		if pr, ok := inner.(prober); ok {
			px.prober = pr
			px.send = func(b balancer.Backend) { e.sendProbe(int32(p), b) }
		}
		px.refresher, _ = inner.(refresher)
		if err := px.bal.Update(bs); err != nil {
			return nil, fmt.Errorf("sim: %s: update: %w", a.Name, err)
		}
		if v&Active != 0 {
			// Each proxy checks on its own phase, as a fleet started at
			// different times would.
			e.q.push(e.rng.Int64N(int64(sc.Interval())), evProbe, int32(p), 0)
		}
	}
	if err := e.initSlow(epoch); err != nil {
		return nil, err
	}
	if v.Health() {
		e.q.push(int64(tickEvery), evTick, 0, 0)
	}
	if e.proxies[0].prober != nil {
		e.probeLane, e.answerLane = e.q.addLane(), e.q.addLane()
		e.q.push(probeTick, evStep, 0, 0)
	}
	if a.Reports || e.proxies[0].prober != nil {
		// The backends measure themselves only for pickers that use it:
		// it costs the others time for nothing.
		for i := range e.servers {
			e.servers[i].meter = newMeter(sc.ReportDelay)
		}
		if e.cross > 0 {
			e.carried = make([]balancer.Load, len(e.users)+len(e.hedges))
		}
	}
	if e.proxies[0].refresher != nil {
		e.q.push(refreshEvery, evRefresh, 0, 0)
	}

	for u := range e.users {
		// Client addresses 10.1.0.1, 10.1.0.2, ...: distinct for iphash,
		// spread over /24s so that a prefix mode still sees many clients.
		e.users[u] = user{
			key:   UserAddr(u),
			proxy: int32(u % proxies),
			try:   try{backend: -1},
		}
	}
	e.scheduleProfile()
	return e, nil
}

// scheduleProfile schedules the first sends of the users present at time
// zero, spread over one think time, and the users the stages add and
// remove: user k joins when a rising ramp reaches k+1 users and leaves when
// a falling one drops to k, the last to join first to leave.
func (e *engine) scheduleProfile() {
	n := e.sc.Users
	for u := range n {
		e.users[u].active, e.users[u].running = true, true
		e.q.pushLane(e.thinkLane, int64(e.sc.FirstSend(u)), evSend, int32(u), 0)
	}
	e.activeUsers = n
	for c := range e.sc.UserChanges() {
		kind := evOff
		if c.Join {
			kind = evOn
		}
		e.q.pushLane(e.profileLane, int64(c.At), kind, int32(c.User), 0)
	}
}

// run plays the events until the end and returns true, or returns false
// soon after stop is closed (a nil stop never is).
func (e *engine) run(stop <-chan struct{}) bool {
	for n := 1; e.q.len() > 0; n++ {
		if n%checkEvery == 0 {
			select {
			case <-stop:
				return false
			default:
			}
		}
		ev := e.q.pop()
		if ev.at >= e.end {
			break
		}
		e.advanceUsers(ev.at)
		e.now = ev.at
		switch ev.kind {
		case evSend:
			e.send(ev.arg)
		case evFinish:
			e.finish(ev.arg, ev.token)
		case evAnswer:
			if t := e.tryOf(ev.arg, ev.token); t != nil && t.state == returning {
				var load balancer.Load
				if e.carried != nil {
					load = e.carried[e.carriedAt(ev.arg, t)]
				}
				e.answer(ev.arg, t, load)
			}
		case evRefused:
			e.refused(ev.arg, ev.token)
		case evOn:
			e.on(ev.arg)
		case evOff:
			e.users[ev.arg].active = false
			e.activeUsers--
		case evKill:
			e.kill(ev.arg)
		case evRevive:
			e.servers[ev.arg].alive = true
		case evProbe:
			e.probe(ev.arg)
		case evTick:
			e.apply()
			e.q.push(e.now+int64(tickEvery), evTick, 0, 0)
		case evCapacity:
			e.setCapacity(ev.arg, int(ev.token))
		case evStep:
			e.stepProbers()
		case evProbeArrive:
			e.probeArrives(ev.arg)
		case evProbeAnswer:
			e.probeAnswers(ev.arg)
		case evRefresh:
			e.refreshWeights()
		case evTimeout:
			e.timedOut(ev.arg, ev.token)
		case evGiveUp:
			e.giveUp(ev.arg)
		case evHedge:
			e.hedge(ev.arg, ev.token)
		case evUnavailable:
			e.unavailable(ev.arg, ev.token)
		case evStall:
			e.setStall(ev.arg, ev.token != 0)
		case evStorm:
			e.servers[ev.arg].unavailable = ev.token != 0
		}
	}
	for ; e.closed < len(e.stepUsers); e.closed++ {
		e.stepUsers[e.closed] = e.activeUsers
	}
	e.now = e.end
	for i := range e.servers {
		e.servers[i].account(e.end, e.step)
	}
	return true
}

// advanceUsers records the active users at the end of every step that
// closes before t; events at a step's very end count in it.
func (e *engine) advanceUsers(t int64) {
	for ; e.closed < len(e.stepUsers) && int64(e.closed+1)*e.step < t; e.closed++ {
		e.stepUsers[e.closed] = e.activeUsers
	}
}

func (e *engine) on(u int32) {
	us := &e.users[u]
	us.active = true
	e.activeUsers++
	if !us.running {
		us.running = true
		e.q.push(e.now, evSend, u, 0)
	}
}

// send starts a new request for user u, if the profile still wants it.
func (e *engine) send(u int32) {
	us := &e.users[u]
	if !us.active {
		us.running = false
		return
	}
	us.start = e.now
	us.attempt = 0
	us.pending = true
	us.route = ""
	if e.variant&Canary != 0 && e.rng.Float64() < e.sc.canaryShare() {
		us.route = CanaryTrack
	}
	e.request(u)
	e.attempt(u, balancer.Request{Key: us.key, Route: us.route})
}

// attempt picks a backend for user u's request and sends it there.
func (e *engine) attempt(u int32, req balancer.Request) {
	us := &e.users[u]
	b, err := e.proxies[us.proxy].bal.Pick(req)
	if err != nil {
		e.fail(u)
		return
	}
	e.sendTo(u, &us.try, b.(*endpoint))
	e.armHedge(u)
}

// sendTo sends user u's attempt t to ep's backend.
func (e *engine) sendTo(u int32, t *try, ep *endpoint) {
	s := &e.servers[ep.index]
	s.sent++
	s.stepSent[e.now/e.step]++
	e.track(e.users[u].proxy, ep.index)
	if e.span() == 1 {
		e.sentAfter++
	}
	t.backend = ep.index
	t.sentAt = e.now
	t.next()
	e.armTimeout(u, t)
	switch {
	case !s.alive:
		t.state = refusing
		e.q.pushLane(e.refuseLane, e.now+int64(RefuseTime)+e.crossDelay(u, t), evRefused, u, t.token)
		return
	case (s.unavailable || s.spec.FailShare > 0 && e.rng.Float64() < s.spec.FailShare) && !s.stalled:
		t.state = answering
		e.q.pushLane(e.slow.answerLane, e.now+int64(UnavailableTime)+e.crossDelay(u, t), evUnavailable, u, t.token)
		return
	}
	s.account(e.now, e.step)
	s.inflight++
	s.peak = max(s.peak, s.inflight)
	if k := e.now / e.step; k < int64(len(s.stepPeak)) {
		s.stepPeak[k] = max(s.stepPeak[k], int32(s.inflight))
	}
	if s.hasSlot() {
		t.state = atServer
		s.busy++
		e.q.pushLane(s.lane, e.now+e.serviceTime(s), evFinish, u, t.token)
		return
	}
	t.state = queued
	s.waiting = append(s.waiting, ticket{u, t.token})
}

// serviceTime draws one service time of s, at least a nanosecond.
func (e *engine) serviceTime(s *server) int64 {
	return int64(s.spec.ServiceTime(e.rng))
}

// finish is a backend's answer to user u's attempt, unless the backend is
// stalled: then it holds the answer.
func (e *engine) finish(u int32, token uint32) {
	t := e.tryOf(u, token)
	if t == nil || t.state != atServer {
		return // the attempt failed when its backend died, or left it
	}
	s := &e.servers[t.backend]
	if s.stalled {
		s.held = append(s.held, ticket{u, token})
		return
	}
	e.release(s)
	// The answer carries the backend's report, and joins the backend's
	// figures (its latency estimate, its rate) once it has left.
	var load balancer.Load
	if s.meter != nil {
		load = s.meter.report(e.now, e.delay, s.inflight)
		s.meter.answered(e.now - t.sentAt)
	}
	if d := e.crossDelay(u, t); d > 0 {
		// The backend is free; the answer reaches the proxy d later.
		t.state = returning
		if e.carried != nil {
			e.carried[e.carriedAt(u, t)] = load
		}
		e.q.pushLane(e.crossLane, e.now+d, evAnswer, u, t.token)
		return
	}
	e.answer(u, t, load)
}

// answer is the answer to user u's attempt t, with the backend's report,
// reaching its proxy: the request's success. The other attempt, if one is
// under way, has lost.
func (e *engine) answer(u int32, t *try, load balancer.Load) {
	us := &e.users[u]
	e.done(us, t, balancer.Result{Latency: time.Duration(e.now - t.sentAt), Load: load})
	e.observe(us, t)
	e.cancelOther(u, t)
	e.latency.Record(time.Duration(e.now - us.start))
	if e.exact != nil {
		e.exact = append(e.exact, time.Duration(e.now-us.start))
	}
	e.ok++
	if e.hasWindow {
		if e.now < e.window[0] {
			e.okBefore++
		} else if e.now < e.window[1] {
			e.okAfter++
		}
	}
	e.rest(u)
}

// hasSlot reports whether s can start serving one more request now.
func (s *server) hasSlot() bool { return s.capacity == 0 || s.busy < s.capacity }

// release frees the slot of a request s served, which has been answered
// or has left, and starts the first one queued if a slot is free then (a
// neighbour may have taken it).
func (e *engine) release(s *server) {
	s.account(e.now, e.step)
	s.inflight--
	s.busy--
	if s.head < len(s.waiting) && s.hasSlot() {
		e.startNext(s)
	}
}

// startNext starts serving the first request queued at s that is still
// there.
func (e *engine) startNext(s *server) {
	for s.head < len(s.waiting) {
		next := s.waiting[s.head]
		s.head++
		if s.head == len(s.waiting) {
			s.waiting, s.head = s.waiting[:0], 0
		}
		if t := e.tryOf(next.user, next.token); t != nil && t.state == queued {
			t.state = atServer
			s.busy++
			e.q.pushLane(s.lane, e.now+e.serviceTime(s), evFinish, next.user, next.token)
			return
		}
	}
}

// refused ends user u's attempt on a dead backend, and retries it on
// another when the variant says so.
func (e *engine) refused(u int32, token uint32) {
	us := &e.users[u]
	t := e.tryOf(u, token)
	if t == nil || t.state != refusing {
		return
	}
	s := &e.servers[t.backend]
	s.refusals++
	e.done(us, t, balancer.Result{Latency: time.Duration(e.now - t.sentAt), Err: s.refused})
	e.apply()
	e.retryOrFail(u)
}

// kill makes backend i dead: the requests at it fail, in user order, and
// are retried on another backend when the variant says so.
func (e *engine) kill(i int32) {
	s := &e.servers[i]
	if !s.alive {
		return
	}
	s.alive = false
	s.account(e.now, e.step)
	for u := range e.users {
		us := &e.users[u]
		for _, t := range e.tries(int32(u)) {
			if t == nil || (t.state != atServer && t.state != queued) || t.backend != i {
				continue
			}
			t.next() // its pending answer, if any, is void
			s.resets++
			e.done(us, t, balancer.Result{Latency: time.Duration(e.now - t.sentAt), Err: s.reset})
			// A retry goes elsewhere (Avoid), or is refused here: s is no
			// longer alive, so nothing joins its queue during this loop.
			e.retryOrFail(int32(u))
		}
	}
	s.inflight, s.busy = 0, 0
	s.waiting, s.head = s.waiting[:0], 0
	s.held = s.held[:0]
	e.apply()
}

// retryOrFail is what follows an attempt of user u that failed, once its
// Done has reported it: if another attempt of the request (a hedge) is
// still in flight, that one decides; otherwise the request is sent again,
// to another backend than the one that failed it last, if the variant
// retries and attempts are left (and the deadline and the budget allow);
// else it fails.
func (e *engine) retryOrFail(u int32) {
	us := &e.users[u]
	failed := us.backend
	if e.hedges != nil {
		h := &e.hedges[u]
		if us.inFlight() || h.inFlight() {
			return // the other attempt decides
		}
		if us.hedged {
			failed = h.backend // as lbhttp: the hedge's error is the round's
		}
		us.hedged = false
	}
	if e.again(us) {
		us.attempt++
		e.retries++
		e.attempt(u, balancer.Request{Key: us.key, Route: us.route, Attempt: int(us.attempt), Avoid: e.eps[failed].id})
		return
	}
	e.fail(u)
}

// done reports the end of user us's attempt t to its proxy's picker.
func (e *engine) done(us *user, t *try, r balancer.Result) {
	t.state = idle
	if fb := e.proxies[us.proxy].fb; fb != nil {
		// The very value Pick returned: pickers return what Update gave.
		fb.Done(e.eps[t.backend], r)
	}
}

// fail ends user u's request with an error; it thinks and sends again.
func (e *engine) fail(u int32) {
	e.errs++
	e.stepErrs[e.now/e.step]++
	if e.span() == 1 {
		e.errsAfter++
	}
	e.rest(u)
}

// rest ends user u's request and schedules its next one after its think
// time.
func (e *engine) rest(u int32) {
	us := &e.users[u]
	if us.pending {
		us.pending = false
		e.maxWait = max(e.maxWait, e.now-us.start)
	}
	us.state = idle
	us.backend = -1
	e.q.pushLane(e.thinkLane, e.now+e.think, evSend, u, 0)
}

// probe is one round of active checks by proxy p: a live backend passes,
// a dead one fails with a refused connection, a stalled one with a
// timeout and one answering 503 with that, as does one failing a share
// of its requests for that share of its checks.
func (e *engine) probe(p int32) {
	h := e.proxies[p].health
	for i := range e.servers {
		s := &e.servers[i]
		var err error
		switch {
		case !s.alive:
			err = s.refused
		case s.stalled:
			err = s.hung
		case s.unavailable || s.spec.FailShare > 0 && e.rng.Float64() < s.spec.FailShare:
			err = s.unavail
		}
		h.Observe(e.eps[i].id, err)
	}
	h.Apply()
	e.q.push(e.now+int64(e.sc.Interval()), evProbe, p, 0)
}

// apply lets every health wrapper apply what is pending.
func (e *engine) apply() {
	for _, p := range e.proxies {
		if p.health != nil {
			p.health.Apply()
		}
	}
}

// account adds the in-flight area since the last change, split over the
// series steps it spans, and brings the backend's meter up to now.
func (s *server) account(now, step int64) {
	if s.meter != nil {
		s.meter.advance(now, s.busy, s.capacity, s.inflight)
	}
	if s.inflight > 0 {
		n := int64(s.inflight)
		s.area += n * (now - s.last)
		s.addSpans(n, now)
		for t := s.last; t < now; {
			k := t / step
			next := min((k+1)*step, now)
			if k < int64(len(s.stepArea)) {
				s.stepArea[k] += n * (next - t)
				s.stepPeak[k] = max(s.stepPeak[k], int32(n))
			}
			t = next
		}
	}
	s.last = now
}

func (e *engine) result(algo string, proxies int) Result {
	r := Result{
		Algorithm: algo,
		Variant:   e.variant,
		Proxies:   proxies,
		Length:    time.Duration(e.end),
		Requests:  e.ok,
		Errors:    e.errs,
		Retries:   e.retries,
		Probes:    e.probes,
		RPS:       float64(e.ok) / time.Duration(e.end).Seconds(),
		Backends:  make([]BackendResult, len(e.servers)),
	}
	r.SetHistogram(&e.latency)
	r.Extra = append(e.extras(), SlowFigures(e.sc, time.Duration(e.maxWait), e.latency.Quantile(0.999), e.sentAfter, e.okAfter+e.errsAfter)...)
	var sent int64
	for i := range e.servers {
		sent += e.servers[i].sent
	}
	steps := len(e.stepErrs)
	r.Series = Series{
		Step:         time.Duration(e.step),
		Users:        e.stepUsers,
		InFlight:     make([][]float64, len(e.servers)),
		PeakInFlight: make([][]int, len(e.servers)),
		RPS:          make([][]float64, len(e.servers)),
		Errors:       make([]float64, steps),
	}
	perSec := float64(time.Second) / float64(e.step)
	for k, n := range e.stepErrs {
		r.Series.Errors[k] = float64(n) * perSec
	}
	for i := range e.servers {
		s := &e.servers[i]
		b := BackendResult{
			Sent:         s.sent,
			Refused:      s.refusals,
			Reset:        s.resets,
			MeanInFlight: float64(s.area) / float64(e.end),
			PeakInFlight: s.peak,
		}
		if sent > 0 {
			b.Share = float64(s.sent) / float64(sent)
		}
		r.Backends[i] = b
		in := make([]float64, steps)
		rps := make([]float64, steps)
		for k := range steps {
			span := min(int64(k+1)*e.step, e.end) - int64(k)*e.step
			in[k] = float64(s.stepArea[k]) / float64(span)
			rps[k] = float64(s.stepSent[k]) * float64(time.Second) / float64(span)
		}
		r.Series.InFlight[i], r.Series.RPS[i] = in, rps
		peak := make([]int, steps)
		for k, n := range s.stepPeak {
			peak[k] = int(n)
		}
		r.Series.PeakInFlight[i] = peak
	}
	if e.hasWindow {
		o, _ := e.sc.FirstOutage()
		f := &FailureResult{Outage: o}
		if e.window[0] > 0 {
			f.Before = float64(e.okBefore) / time.Duration(e.window[0]).Seconds()
		}
		if d := e.window[1] - e.window[0]; d > 0 {
			f.After = float64(e.okAfter) / time.Duration(d).Seconds()
		}
		r.Failure = f
	}
	return r
}
