package sim

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/lbhttp"
)

// Parameters of the slow scenarios (SlowScenarios) and of the variants
// that bound slow backends (Timeout, Budget, Hedge).
const (
	// UnavailableTime is how long a backend answering 503 takes to answer
	// (Backend.Unavailable): a backend that refuses work at once.
	UnavailableTime = time.Millisecond
	// DefaultClientTimeout is the users' ClientTimeout in the slow
	// scenarios: k6's default request timeout.
	DefaultClientTimeout = time.Minute
	// HedgePercentile is the percentile of each proxy's recent latencies
	// after which Hedge sends a hedge, as lbhttp's
	// Config.HedgePercentile: 95, as "The Tail at Scale" advises.
	HedgePercentile = 95
	// StormLength is how long the storm scenario's backends answer 503.
	StormLength = 30 * time.Second
	// TailShare and TailFactor are the tail scenario's: 1% of each
	// backend's service times 20 times as long.
	TailShare  = 0.01
	TailFactor = 20
	// FlakyShare is the flaky scenario's Backend.FailShare: 30% of the
	// first backend's requests answered 503 fast, one in three or so,
	// which ejection after consecutive failures rarely catches.
	FlakyShare = 0.30
	// FailRateThreshold is the failure percentage at which the FailureRate
	// variant ejects: 20, below the flaky backend's 30. Envoy's default,
	// 85 (health.DefaultFailureRateThreshold), is meant for backends that
	// fail nearly everything, and would leave it in.
	FailRateThreshold = 20
	// DefaultCanaryShare is the share of requests the Canary variant
	// tags for the canary when Scenario.CanaryShare is zero: 5%, a
	// first step of a progressive rollout.
	DefaultCanaryShare = 0.05
	// CanarySlowdown is how many times the canary scenario's canary
	// takes over the backend it is a new version of.
	CanarySlowdown = 3
	// TrackLabel is the label package route groups the backends by
	// under the Route variant (Backend.Track); StableTrack and
	// CanaryTrack are its values in the canary scenario.
	TrackLabel  = "track"
	StableTrack = "stable"
	CanaryTrack = "canary"
)

// SlowScenarios returns the scenarios of backends that fail slowly or
// answer errors fast, over bs (nil: StudyBackends), each with its own copy
// of the backends: 100 users for 3 minutes who think DefaultThink and give
// up after DefaultClientTimeout, active checks every 5 s, and the
// variants each is about, from active+passive+retry (lbhttp before it had
// timeouts) and active+passive+retry+timeout+budget (its defaults since).
//
//   - stall: the first backend accepts connections and never answers
//     from 1 minute on (unless some backend of bs already stalls); under
//     those two, and with hedging without the budget and with it.
//   - storm: every backend answers 503 in UnavailableTime from 1 minute
//     for StormLength, then recovers (unless some backend of bs already
//     answers 503 at some time); under the bare picker and those two.
//   - tail: each backend without a tail of its own takes TailFactor (20)
//     times its service time for TailShare (1%) of its requests; under
//     those two, and with hedging.
//   - flaky: the first backend answers FlakyShare (30%) of its requests,
//     and of its health checks, with a 503 in UnavailableTime (unless
//     some backend of bs already fails a share: fail=); under the bare
//     picker, active+passive (health without retries: passive ejection
//     counts consecutive failures, which one failure in three seldom
//     makes) and those two. Its Contrast sets lbhttp's defaults against
//     active+passive.
//   - canary: the backends of bs (nil: CanaryBackends, four alike)
//     tracked StableTrack, and a canary (CanaryTrack), a copy of the
//     first CanarySlowdown (3) times slower (unless some backend of bs
//     already has a Track); under the bare picker (the canary joins the
//     pool, no routing), Route (deployed, sent nothing: the canary off)
//     and Route+Canary (DefaultCanaryShare, 5%, of requests sent to it:
//     on). Its Contrast sets the canary on against off.
//
// Their tables add the attempts per user request (the load amplification;
// during the outage too), the longest wait and the 99.9th percentile
// (SlowMetrics). Each has a Contrast, so that its verdict judges the
// variant it is about, lbhttp's defaults (with hedging, in the tail), and
// ends with lrt's figures under it and under the variant without it:
// under the storm, where every request fails whatever the proxy does, the
// fewest failed requests would otherwise pick plain retries, whose
// requests fail three times as slowly and so leave their users fewer to
// send.
func SlowScenarios(bs []Backend) []Scenario {
	canaried := canaryBackends(bs)
	if bs == nil {
		bs = StudyBackends()
	}
	ready := Active | Passive | Retry
	defaults := ready | Timeout | Budget
	mk := func(name string, variants []Variant, about, against Variant, edit func([]Backend)) Scenario {
		s := Scenario{Name: name, Backends: cloneBackends(bs), Users: 100, Stages: []Stage{{3 * time.Minute, 100}},
			Think: DefaultThink, CheckInterval: DefaultCheckInterval, ClientTimeout: DefaultClientTimeout,
			Variants: variants, Metrics: SlowMetrics(),
			Contrast: &Contrast{Variant: about, Against: against, Algorithm: "lrt"}}
		edit(s.Backends)
		return s
	}
	return []Scenario{
		mk("stall", []Variant{ready, defaults, ready | Timeout | Hedge, defaults | Hedge}, defaults, ready, func(bs []Backend) {
			if !slices.ContainsFunc(bs, func(b Backend) bool { return len(b.Stalls) > 0 }) && len(bs) > 0 {
				bs[0].Stalls = []Outage{{At: DefaultKillAt}}
			}
		}),
		mk("storm", []Variant{None, ready, defaults}, defaults, ready, func(bs []Backend) {
			if slices.ContainsFunc(bs, func(b Backend) bool { return len(b.Unavailable) > 0 }) {
				return
			}
			for i := range bs {
				bs[i].Unavailable = []Outage{{At: DefaultKillAt, Until: DefaultKillAt + StormLength}}
			}
		}),
		mk("tail", []Variant{ready, defaults, defaults | Hedge}, defaults|Hedge, defaults, func(bs []Backend) {
			for i := range bs {
				if bs[i].TailShare == 0 {
					bs[i].TailShare, bs[i].TailFactor = TailShare, TailFactor
				}
			}
		}),
		// flaky sets failure-percentage ejection (FailureRate) beside
		// passive ejection's five failures in a row.
		mk("flaky", []Variant{None, Active | Passive, Active | Passive | FailureRate, ready, defaults, defaults | FailureRate}, defaults, Active|Passive, func(bs []Backend) {
			if !slices.ContainsFunc(bs, func(b Backend) bool { return b.FailShare > 0 }) && len(bs) > 0 {
				bs[0].FailShare = FlakyShare
			}
		}),
		func() Scenario {
			s := mk("canary", []Variant{None, Route, Route | Canary}, Route|Canary, Route, func([]Backend) {})
			s.Backends = canaried
			return s
		}(),
	}
}

// CanaryBackends returns the canary scenario's stable backends when
// SlowScenarios is given none: four serving in LoadLatency (50 ms),
// DefaultCapacity (16) at once, alike, so that what the canary costs is
// not mixed with what the study's unequal backends cost.
func CanaryBackends() []Backend {
	bs := make([]Backend, 4)
	for i := range bs {
		bs[i] = Backend{Latency: LoadLatency, Capacity: DefaultCapacity}
	}
	return bs
}

// canaryBackends returns the canary scenario's backends over bs (nil:
// CanaryBackends): a copy of bs as given if one of them has a Track;
// otherwise bs tracked StableTrack and, last, a copy of the first named
// "canary", tracked CanaryTrack, CanarySlowdown times slower, without its
// outages.
func canaryBackends(bs []Backend) []Backend {
	if bs == nil {
		bs = CanaryBackends()
	}
	out := cloneBackends(bs)
	if len(out) == 0 || slices.ContainsFunc(out, func(b Backend) bool { return b.Track != "" }) {
		return out
	}
	for i := range out {
		out[i].Track = StableTrack
	}
	c := out[0]
	c.Name, c.Addr, c.Track = CanaryTrack, "", CanaryTrack
	c.Latency *= CanarySlowdown
	c.Jitter *= CanarySlowdown
	c.Down, c.Stalls, c.Unavailable, c.Neighbours = nil, nil, nil, nil
	if len(c.Samples) > 0 {
		c.Samples = make([]time.Duration, len(out[0].Samples))
		for i, d := range out[0].Samples {
			c.Samples[i] = d * CanarySlowdown
		}
	}
	return append(out, c)
}

// canaryShare returns CanaryShare, or DefaultCanaryShare when it is zero.
func (s *Scenario) canaryShare() float64 {
	if s.CanaryShare == 0 {
		return DefaultCanaryShare
	}
	return s.CanaryShare
}

// Names of the slow scenarios' own figures (SlowMetrics).
const (
	attemptsName       = "attempts_per_request"
	attemptsDuringName = "attempts_per_request_during"
	maxWaitName        = "max_wait_s"
	p999Name           = "p999_ms"
)

// SlowMetrics are the figures the slow scenarios add to the standard
// ones: the attempts sent per user request that ended (the load
// amplification of retries and hedges), over the run and during the first
// outage; the longest a user request waited for its outcome, success or
// error; and the 99.9th percentile latency of successful requests. The
// verdict ranks by attempts per request and the 99.9th percentile, and
// sets the variants' figures side by side.
func SlowMetrics() []Metric {
	return []Metric{
		{Name: attemptsName, Label: "att/req", Unit: "attempts", Better: Lower, Leader: "lowest load amplification", Decimals: 3,
			byVariant: true, phrase: "load amplification (attempts per request)",
			value: func(r *Result) (float64, bool) {
				if n := r.Requests + r.Errors; n > 0 {
					return float64(r.Attempts()) / float64(n), true
				}
				return 0, false
			}},
		{Name: attemptsDuringName, Label: "att/req during", Unit: "attempts", Better: Lower, Decimals: 3,
			byVariant: true, phrase: "load amplification during the outage"},
		{Name: maxWaitName, Label: "max wait s", Unit: "s", Better: Lower, Decimals: 2,
			byVariant: true, phrase: "the longest wait"},
		{Name: p999Name, Label: "p99.9 ms", Unit: "ms", Better: Lower, Leader: "lowest p99.9", Decimals: 1},
	}
}

// SlowFigures returns the figures of SlowMetrics that sc lists in its
// Metrics and that a run of it has, from what the run measured: the
// longest wait of a user request for its outcome, the 99.9th percentile
// latency of the successful ones, and the attempts sent and the user
// requests that ended during sc's first outage (left out without one, or
// when none ended). The simulator and a live run (package bench/live)
// both fill Result.Extra with it. (Attempts per request over the run
// needs no figure: Result holds what it is computed from.)
func SlowFigures(sc *Scenario, maxWait, p999 time.Duration, sentDuring, endedDuring int64) []Figure {
	var out []Figure
	for _, m := range sc.Metrics {
		switch m.Name {
		case attemptsDuringName:
			if _, ok := sc.FirstOutage(); ok && endedDuring > 0 {
				out = append(out, Figure{m.Name, float64(sentDuring) / float64(endedDuring)})
			}
		case maxWaitName:
			out = append(out, Figure{m.Name, maxWait.Seconds()})
		case p999Name:
			out = append(out, Figure{m.Name, millis(p999)})
		}
	}
	return out
}

// slowTimes holds what a run needs to bound slow backends: the timeouts
// in virtual nanoseconds (zero when off), the queue's lanes for their
// events, and the pickers' epoch, for the budget's clock.
type slowTimes struct {
	attempt, request, client            int64
	timeoutLane, giveUpLane, answerLane int
	epoch                               time.Time
}

// hedgeToken marks the tokens of a user's hedge (engine.hedges): the
// events of an attempt name the user and the token, and the token says
// which of its two attempts.
const hedgeToken = 1 << 31

// ticket names one attempt of a user at a backend: in its queue, or held
// by a stall.
type ticket struct {
	user  int32
	token uint32
}

// errLost is the Result.Err of an attempt that another attempt of the
// same request beat, as lbhttp reports it: abandoned, since a race lost
// says nothing of the backend.
var errLost = fmt.Errorf("sim: another attempt answered first: %w", balancer.ErrAbandoned)

// errGaveUp is the Result.Err of an attempt whose user gave up on the
// request (Scenario.ClientTimeout): abandoned, as lbhttp reports a
// request its caller cancelled.
var errGaveUp = fmt.Errorf("sim: the user gave up: %w", balancer.ErrAbandoned)

// initSlow prepares what the variant and the scenario ask of the run to
// bound slow backends: timeouts, budgets and percentile sketches, hedges,
// and the backends' stalls and 503 spans.
func (e *engine) initSlow(epoch time.Time) error {
	e.slow = slowTimes{epoch: epoch, client: int64(e.sc.ClientTimeout), timeoutLane: -1, giveUpLane: -1, answerLane: -1}
	if e.variant&Timeout != 0 {
		e.slow.attempt, e.slow.request = int64(lbhttp.DefaultAttemptTimeout), int64(lbhttp.DefaultRequestTimeout)
		e.slow.timeoutLane = e.q.addLane()
	}
	if e.slow.client > 0 {
		e.slow.giveUpLane = e.q.addLane()
	}
	for p := range e.proxies {
		px := &e.proxies[p]
		var err error
		if e.variant&Budget != 0 {
			if px.budget, err = lbhttp.NewBudget(lbhttp.BudgetConfig{}); err != nil {
				return fmt.Errorf("sim: budget: %w", err)
			}
		}
		if e.variant&Hedge != 0 {
			if px.sketch, err = lbhttp.NewPercentile(HedgePercentile); err != nil {
				return fmt.Errorf("sim: hedge: %w", err)
			}
		}
	}
	if e.variant&Hedge != 0 {
		e.hedges = make([]try, len(e.users))
		for u := range e.hedges {
			e.hedges[u] = try{token: hedgeToken, backend: -1}
		}
	}
	length := e.end
	for i := range e.servers {
		s := &e.servers[i]
		id := e.sc.ID(i)
		spec := &s.spec
		if len(spec.Stalls) > 0 {
			s.hung = fmt.Errorf("sim: health check of %s: %w", id, errProbeTimeout)
		}
		if len(spec.Unavailable) > 0 || spec.FailShare > 0 {
			s.unavail = &lbhttp.StatusError{Code: 503}
			if e.slow.answerLane < 0 {
				e.slow.answerLane = e.q.addLane()
			}
		}
		for _, spans := range []struct {
			os   []Outage
			kind uint8
		}{{spec.Stalls, evStall}, {spec.Unavailable, evStorm}} {
			for _, o := range spans.os {
				e.q.push(int64(o.At), spans.kind, int32(i), 1)
				if o.Until != 0 && int64(o.Until) < length {
					e.q.push(int64(o.Until), spans.kind, int32(i), 0)
				}
			}
		}
	}
	return nil
}

// errProbeTimeout is why a stalled backend fails its health checks.
var errProbeTimeout = errors.New("probe timed out")

// wall returns the virtual time on the pickers' clocks.
func (e *engine) wall() time.Time { return e.slow.epoch.Add(time.Duration(e.now)) }

// next gives t a new token, void for the events of its last attempt.
func (t *try) next() { t.token = (t.token+1)&^hedgeToken | t.token&hedgeToken }

// inFlight reports whether t is under way.
func (t *try) inFlight() bool { return t.state != idle }

// tryOf returns user u's attempt that token names, or nil if that attempt
// has been succeeded by another.
func (e *engine) tryOf(u int32, token uint32) *try {
	t := &e.users[u].try
	if token&hedgeToken != 0 {
		t = &e.hedges[u]
	}
	if t.token != token {
		return nil
	}
	return t
}

// tries returns user u's attempt and its hedge (nil without Hedge).
func (e *engine) tries(u int32) [2]*try {
	var h *try
	if e.hedges != nil {
		h = &e.hedges[u]
	}
	return [2]*try{&e.users[u].try, h}
}

// request starts user u's request at the proxy: the budget counts it, the
// deadline is set, and the user will give up after its ClientTimeout.
func (e *engine) request(u int32) {
	us := &e.users[u]
	us.hedged = false
	if e.slow.request > 0 {
		us.deadline = e.now + e.slow.request
	}
	if b := e.proxies[us.proxy].budget; b != nil {
		b.Request(e.wall())
	}
	if e.slow.client > 0 {
		e.q.pushLane(e.slow.giveUpLane, e.now+e.slow.client, evGiveUp, u, 0)
	}
}

// again reports whether user us's request may be sent again now, as
// lbhttp's Transport decides: retries are on, an attempt is left, the
// deadline has not passed, and the budget allows it (which then counts
// it).
func (e *engine) again(us *user) bool {
	switch {
	case e.variant&Retry == 0 || us.attempt+1 >= MaxAttempts:
		return false
	case us.deadline != 0 && e.now >= us.deadline:
		return false
	}
	b := e.proxies[us.proxy].budget
	return b == nil || b.Retry(e.wall())
}

// armTimeout schedules the end of user u's attempt t, just sent, at
// AttemptTimeout, or at the request's deadline if that is sooner.
func (e *engine) armTimeout(u int32, t *try) {
	if e.slow.attempt == 0 {
		return
	}
	d := e.slow.attempt
	if left := e.users[u].deadline - e.now; left < d {
		d = max(left, 1)
	}
	e.q.pushLane(e.slow.timeoutLane, e.now+d, evTimeout, u, t.token)
}

// timedOut ends user u's attempt token if it is still under way: a
// failure of its backend, which it leaves.
func (e *engine) timedOut(u int32, token uint32) {
	t := e.tryOf(u, token)
	if t == nil || !t.inFlight() {
		return
	}
	us := &e.users[u]
	err := lbhttp.ErrAttemptTimeout
	if t.sentAt+e.slow.attempt > us.deadline {
		err = lbhttp.ErrRequestTimeout
	}
	e.leave(t)
	e.observe(us, t)
	e.done(us, t, balancer.Result{Latency: time.Duration(e.now - t.sentAt), Err: err})
	e.apply()
	e.retryOrFail(u)
}

// giveUp is user u giving up on its request after its ClientTimeout, if
// the request it started then still waits: its attempts leave their
// backends, reported abandoned, and the request fails.
func (e *engine) giveUp(u int32) {
	us := &e.users[u]
	if !us.pending || e.now-us.start != e.slow.client {
		return // answered, or failed, in time
	}
	for _, t := range e.tries(u) {
		if t != nil && t.inFlight() {
			e.leave(t)
			e.done(us, t, e.abandoned(t, errGaveUp))
		}
	}
	e.fail(u)
}

// abandoned is the Result of attempt t ended by err before its answer: an
// abandonment, unless it had waited AttemptTimeout or more, which makes it
// as slow as a timeout, and lbhttp reports it so.
func (e *engine) abandoned(t *try, err error) balancer.Result {
	if d := e.now - t.sentAt; e.slow.attempt > 0 && d >= e.slow.attempt {
		return balancer.Result{Latency: time.Duration(d), Err: lbhttp.ErrAttemptTimeout}
	}
	return balancer.Result{Err: err}
}

// leave takes attempt t out of its backend before its answer: out of the
// queue (its ticket there is skipped), or out of service, which frees its
// slot for the next. A backend whose handler sees the client's connection
// close stops work on it, as a Go handler that honours its request's
// context does.
func (e *engine) leave(t *try) {
	s := &e.servers[t.backend]
	switch t.state {
	case atServer:
		e.release(s)
	case queued:
		s.account(e.now, e.step)
		s.inflight--
	}
}

// observe feeds user us's proxy's hedge sketch the time attempt t waited,
// for an answer that could be used, or one still waiting when it timed
// out or lost the race, as lbhttp's Transport does.
func (e *engine) observe(us *user, t *try) {
	if sk := e.proxies[us.proxy].sketch; sk != nil {
		sk.Observe(time.Duration(e.now - t.sentAt))
	}
}

// armHedge schedules a hedge of user u's attempt just sent, if the variant
// hedges, an attempt is left for it, the proxy's sketch has a delay, and
// the delay ends before the request's deadline.
func (e *engine) armHedge(u int32) {
	if e.hedges == nil {
		return
	}
	us := &e.users[u]
	if us.attempt+1 >= MaxAttempts || !us.inFlight() {
		return
	}
	d, ok := e.proxies[us.proxy].sketch.Value()
	if !ok || (us.deadline != 0 && e.now+int64(d) >= us.deadline) {
		return
	}
	e.q.push(e.now+int64(d), evHedge, u, us.token)
}

// hedge sends user u's hedge, if its attempt token still waits: to another
// backend, if the budget allows. A backend picked and not sent to is
// reported abandoned, as lbhttp reports it.
func (e *engine) hedge(u int32, token uint32) {
	us := &e.users[u]
	if us.token != token || !us.inFlight() || (us.deadline != 0 && e.now >= us.deadline) {
		return
	}
	px := &e.proxies[us.proxy]
	b, err := px.bal.Pick(balancer.Request{Key: us.key, Route: us.route, Attempt: int(us.attempt) + 1, Avoid: e.eps[us.backend].id})
	if err != nil {
		return
	}
	ep := b.(*endpoint)
	if ep.index == us.backend || (px.budget != nil && !px.budget.Retry(e.wall())) {
		if px.fb != nil {
			px.fb.Done(b, balancer.Result{Err: balancer.ErrAbandoned})
		}
		return
	}
	us.attempt++
	us.hedged = true
	e.retries++
	e.sendTo(u, &e.hedges[u], ep)
}

// cancelOther ends the other attempt of user u's request, if one is under
// way, once won has answered: it lost the race, and its Done says so.
func (e *engine) cancelOther(u int32, won *try) {
	if e.hedges == nil {
		return
	}
	us := &e.users[u]
	o := &us.try
	if won == o {
		o = &e.hedges[u]
	}
	if !o.inFlight() {
		return
	}
	e.leave(o)
	e.observe(us, o)
	e.done(us, o, e.abandoned(o, errLost))
}

// setStall starts or ends a stall of backend i. At its end the answers it
// held leave at once, in the order they were ready.
func (e *engine) setStall(i int32, on bool) {
	s := &e.servers[i]
	s.stalled = on
	if on {
		return
	}
	held := s.held
	for _, h := range held {
		e.finish(h.user, h.token) // skips the attempts that left meanwhile
	}
	s.held = held[:0]
}

// unavailable is a 503 answer to user u's attempt token.
func (e *engine) unavailable(u int32, token uint32) {
	t := e.tryOf(u, token)
	if t == nil || t.state != answering {
		return
	}
	e.done(&e.users[u], t, balancer.Result{Latency: UnavailableTime, Err: e.servers[t.backend].unavail})
	e.apply()
	e.retryOrFail(u)
}
