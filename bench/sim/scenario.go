package sim

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/catalog"
)

// ErrScenario is wrapped by every error about a malformed scenario,
// backend list, stage profile or variant, so that a command can tell bad
// input from a failed run with errors.Is.
var ErrScenario = errors.New("sim: bad scenario")

// Defaults of the scenarios built by Defaults, the study's.
const (
	// DefaultThink is the time a virtual user waits between an answer and
	// its next request.
	DefaultThink = 100 * time.Millisecond
	// DefaultCapacity is the number of requests a backend of the -cap
	// scenarios serves at once; the rest queue.
	DefaultCapacity = 16
	// DefaultCheckInterval is the time between two active health checks of
	// a backend by one proxy, when a Scenario leaves CheckInterval zero.
	DefaultCheckInterval = 5 * time.Second
	// DefaultKillAt is when the failure scenarios kill their first backend.
	DefaultKillAt = time.Minute
	// MaxUsers bounds the virtual users of one scenario (memory grows with
	// them).
	MaxUsers = 1_000_000
	// DefaultProbeRTT is the round trip of a probe when a Scenario leaves
	// ProbeRTT zero: an HTTP request and its answer on a local network,
	// ten times RefuseTime's bare exchange of packets.
	DefaultProbeRTT = time.Millisecond
	// MaxReportDelay bounds Scenario.ReportDelay: beyond a minute a report
	// speaks of another load than the one it is used for, and the history
	// each backend keeps for it grows with the delay.
	MaxReportDelay = time.Minute
	// MaxProxies bounds Scenario.Proxies and lbsim's -proxies: each proxy
	// holds a picker over every backend.
	MaxProxies = 10_000
	// MaxBackends bounds the backends ParseBackends returns, repeats
	// included ("300x10ms").
	MaxBackends = 10_000
	// MaxTailFactor bounds Backend.TailFactor: a tail a thousand times
	// the median is already beyond any timeout.
	MaxTailFactor = 1000
	// MaxLength bounds every time a scenario holds: its length (the sum
	// of its stages), its think time and check interval, each backend's
	// latency and the end of each outage. 10,000 hours is over a year,
	// far beyond a useful run, and small enough that no time the
	// simulator or a live run computes from them overflows.
	MaxLength = 10_000 * time.Hour
)

// Scenario is the plain description of one experiment: the backends, the
// users and their profile, and the failure handling compared. It holds no
// state of a run, so that the simulator and a live runner can both play it.
// The zero values of Think and CheckInterval are not defaults: Think zero
// means users send again at once; CheckInterval zero means
// DefaultCheckInterval.
type Scenario struct {
	// Name is short and stable: it names the scenario on the command line
	// and heads its table.
	Name string
	// Backends are the upstreams, in table order.
	Backends []Backend
	// Users is the number of virtual users at time zero. They send their
	// first requests spread evenly over one Think time.
	Users int
	// Stages is the user profile after time zero, as in k6: each stage
	// moves the number of users linearly from the previous target (Users
	// for the first) to its Target over its Duration. The scenario lasts
	// the sum of the durations.
	Stages []Stage
	// Think is the time a user waits between an answer (or an error) and
	// its next request.
	Think time.Duration
	// Variants are the kinds of failure handling compared; empty means
	// the bare picker only (None).
	Variants []Variant
	// CheckInterval is the time between two active checks of a backend,
	// for variants with Active. Zero means DefaultCheckInterval.
	CheckInterval time.Duration
	// Metrics are the figures of its own that the scenario's runs report
	// in Result.Extra, beyond the standard ones (Metrics): the tables,
	// JSON, CSV and the verdict show them after those. Empty for the
	// default scenarios.
	Metrics []Metric
	// ReportDelay is how old the load report an answer carries is: the
	// backend's state that long before the answer leaves (see "Load
	// reports and probes" in the package doc). Zero: the state as the
	// answer leaves. At most MaxReportDelay.
	ReportDelay time.Duration
	// ProbeRTT is the round trip of a probe from a probing picker
	// (lrt/prequal) to a backend and back; the backend answers halfway,
	// with its state then. Zero means DefaultProbeRTT.
	ProbeRTT time.Duration
	// Versus, when not nil, adds a line to the verdict that sets the best
	// p99 of one group of algorithms against another's (the load
	// scenarios: the pickers that weigh reports or probes against
	// leastconn and lrt).
	Versus *Versus

	// The fleet: how many proxies, where they run, what lies between
	// zones (see "Fleets" in the package doc). Zero for the default
	// scenarios.

	// Proxies, when positive, is the number of proxies Run plays the
	// scenario with, once, whatever Options.Proxies says: zones and fleet
	// are fleets of a given shape. Zero: once per entry of
	// Options.Proxies. Simulate takes the count it is given. At most
	// MaxProxies.
	Proxies int
	// ProxyZones gives each proxy a zone: proxy p runs in zone
	// ProxyZones[p mod len(ProxyZones)]. Empty: the proxies run in no
	// zone. Names must not be empty.
	ProxyZones []string
	// CrossZone is the network time added to an attempt from a proxy in
	// one zone to a backend in another (both set): the answer reaches the
	// proxy that much later, and a refusal too. The backend is not held
	// meanwhile. At most MaxLength.
	CrossZone time.Duration
	// SubsetSize is the number of backends each proxy talks to under the
	// Subset variant; zero means subset.DefaultSize (20).
	SubsetSize int
	// Contrast, when not nil, names the variant the scenario is about and
	// the one to set it against: the verdict judges Contrast.Variant's
	// runs, and adds a line comparing one algorithm's figures under both.
	Contrast *Contrast
	// ClientTimeout is how long a user waits for the outcome of a
	// request before it gives up (an error), as a load generator's client
	// does: DefaultClientTimeout in the slow scenarios. The proxy then
	// cancels the attempts under way, which their Dones report abandoned.
	// Zero: users wait for ever. At most MaxLength.
	ClientTimeout time.Duration
	// CanaryShare is the share of user requests tagged for the canary
	// under the Canary variant (Request.Route = CanaryTrack, as a header
	// set for a cohort would): zero means DefaultCanaryShare, 5%. Below 1.
	CanaryShare float64
}

// Versus names two groups of algorithms the verdict compares by their
// best p99 (Verdict.Versus). Algorithms of a group that did not run are
// left out; a group with none that ran leaves the line out.
type Versus struct {
	// Name and Against name the groups in the line, as "report-driven
	// or probing" and "local".
	Name, Against string
	// Algorithms and Baselines are the groups' algorithms.
	Algorithms, Baselines []string
}

// Contrast sets one algorithm's runs under two variants side by side in
// the verdict (Verdict.Contrast): the scenario's own figures (Metrics) and
// its p99, as "locality against active+passive+retry, leastconn: ...".
// The line is left out when either run is missing (another -algos or
// -variants).
type Contrast struct {
	// Variant is the one the scenario is about, which the verdict judges;
	// Against is the one it is compared with.
	Variant, Against Variant
	// Algorithm is the algorithm whose two runs are compared.
	Algorithm string
}

// Backend describes one simulated upstream. Its service time is Latency,
// varied by Jitter or Sigma (at most one of the two).
type Backend struct {
	// Name labels the backend in tables and charts; empty: its latency,
	// such as "50ms".
	Name string
	// Addr is the ID the pickers see; empty: "10.0.0.<n>:8080" for the
	// n-th backend. The hash pickers place backends by it.
	Addr string
	// Latency is the median time the backend takes to serve one request,
	// once it has started on it.
	Latency time.Duration
	// Jitter, when positive, draws each service time uniformly from
	// [Latency−Jitter, Latency+Jitter]. It must be below Latency.
	Jitter time.Duration
	// Sigma, when positive, draws each service time from a lognormal
	// distribution of median Latency and shape Sigma: Latency·e^(Sigma·Z),
	// Z standard normal. Its mean is Latency·e^(Sigma²/2).
	Sigma float64
	// Samples, when not empty, are measured service times (ReadLatencies,
	// ReadAccessLog): each service time is one of them drawn at random,
	// so that the backend serves as its empirical distribution says.
	// Latency should be their median, as the readers set it; Jitter and
	// Sigma must be zero. The slice is read, never written, and may be
	// shared by copies of the scenario.
	Samples []time.Duration
	// Weight is what pickers that use weights see (wrr); zero means 1.
	Weight int
	// Capacity is the number of requests served at once; the rest wait
	// in a first-come, first-served queue. Zero means unlimited.
	Capacity int
	// Down lists the times the backend is dead: connections are refused,
	// and requests in flight when it dies fail.
	Down []Outage
	// Neighbours lists the times something else on the backend's machine,
	// which the proxies cannot see, takes part of its Capacity (which
	// must be set): a noisy neighbour, a batch job, a CPU antagonist.
	Neighbours []Neighbour
	// Zone is where the backend runs, as the pickers see it
	// (balancer.Locality's Zone; package locality routes by it); ""
	// means no zone. An attempt from a proxy in another zone takes
	// Scenario.CrossZone more.
	Zone string
	// Stalls lists the times the backend accepts connections and sends
	// no answer, its health checks' included: it serves as usual, but
	// holds every answer until the stall ends, and then sends them at
	// once. An attempt given up meanwhile (a timeout, a client that went
	// away) leaves it.
	Stalls []Outage
	// Unavailable lists the times the backend answers every request,
	// health checks included, with 503 Service Unavailable after
	// UnavailableTime, without taking a slot: an overload, a bad deploy.
	// Requests it had started finish as usual.
	Unavailable []Outage
	// TailShare, when positive, is the share of the backend's service
	// times, drawn at random, that take TailFactor times as long: a
	// heavy tail (a garbage collection, a cold cache, a slow disk).
	// Below 1.
	TailShare float64
	// TailFactor is how many times longer a tail's service time is: 1
	// to 1000, and set when TailShare is.
	TailFactor float64
	// FailShare, when positive, is the share of the requests the backend
	// answers, drawn at random, with 503 Service Unavailable after
	// UnavailableTime, without taking a slot (its health checks too): a
	// bad deploy, a broken dependency on some of its requests. From 0 to
	// 1. It is a 503, the status lbhttp's DefaultRetryOn retries; a
	// backend failing with 500s would see no retry from lbhttp.
	FailShare float64
	// Track is the backend's value of the label TrackLabel ("stable",
	// "canary"; "" for none), which package route groups the backends by
	// under the Route variant.
	Track string
}

// Neighbour is a span during which a neighbour takes Takes of a backend's
// Capacity: the backend serves at most Capacity − Takes requests at once,
// and queues the rest. Requests in service when it arrives finish; the
// backend's load reports count against the capacity left (see "Load
// reports and probes" in the package doc).
type Neighbour struct {
	// At is when the neighbour arrives, in time since the scenario
	// started.
	At time.Duration
	// Until is when it leaves; zero means never.
	Until time.Duration
	// Takes is the number of request slots it takes, from 1 to
	// Capacity − 1.
	Takes int
}

// Outage is a span during which a backend is dead, in time since the
// scenario started.
type Outage struct {
	// At is when the backend dies.
	At time.Duration
	// Until is when it comes back; zero means never.
	Until time.Duration
}

// Stage is one step of a user profile: the number of users moves linearly
// to Target over Duration.
type Stage struct {
	Duration time.Duration
	Target   int
}

// Variant is a set of features wrapped around each proxy's picker: failure
// handling (health checks use package health; retries, timeouts, the
// retry budget and hedges are the caller's, as in a real proxy, and
// follow lbhttp's Transport, whose Budget and Percentile the simulator
// runs in virtual time) and the fleet's decorators (packages locality and
// subset). They stack as the decorators' docs say: subset ▶ health ▶
// locality ▶ the algorithm, one per zone; health ▶ route ▶ the algorithm,
// one per track. Ten bits are taken; sixteen leave room.
type Variant uint16

const (
	// Active adds active checks: every CheckInterval each proxy probes each
	// backend and feeds the result to its health wrapper.
	Active Variant = 1 << iota
	// Passive adds passive ejection: the health wrapper sees every Done,
	// ejects a backend at once on a refused connection and after
	// consecutive failures otherwise.
	Passive
	// Retry sends a failed attempt again at once, on another backend, as
	// lbhttp's Transport does for a GET: Attempt+1 and Avoid set to the
	// backend that failed it, up to MaxAttempts attempts in all. Every
	// failure the simulator knows is retried: a refused connection
	// (nothing was sent, so any request may go again), a request in
	// flight on a backend when it died (a reset connection: safe to send
	// again only because the users' requests are idempotent GETs; lbhttp
	// would not resend a POST), a 503 (lbhttp's RetryOn) and a timeout.
	Retry
	// Locality wraps the picker in package locality: one picker per zone
	// of the backends, the proxy's zone its Config.Zone and the users of
	// each zone's proxies its Config.Callers, so that requests stay in
	// the proxy's zone while it has capacity (Envoy's zone-aware
	// routing). Health, with Active or Passive, goes around it and hands
	// it every backend with its health.
	Locality
	// Subset wraps the picker, and health around it, in package subset,
	// deterministic mode: proxy p of M is Index p of Count M and talks to
	// Scenario.SubsetSize backends.
	Subset
	// Timeout bounds each attempt by AttemptTimeout from when it is sent
	// and each request by RequestTimeout from its first attempt, as
	// lbhttp's defaults do: an attempt still waiting then fails with
	// lbhttp.ErrAttemptTimeout (or ErrRequestTimeout), a failure of its
	// backend that health counts and lrt learns from, and it leaves the
	// backend. Without it an attempt waits for its answer, or for the
	// user to give up (Scenario.ClientTimeout).
	Timeout
	// Budget bounds retries and hedges with an lbhttp.Budget of lbhttp's
	// defaults per proxy (20% of the requests plus 10 a second, over
	// 10 s), on the virtual clock: a retry the budget refuses fails the
	// request with its last error at once. It needs Retry.
	Budget
	// Hedge sends a second attempt (Attempt+1, Avoid the first) when the
	// first has no answer after the proxy's HedgePercentile latency, kept
	// in an lbhttp.Percentile, as lbhttp's Config.HedgePercentile does:
	// the first answer wins, the other is cancelled and its Done reports
	// it abandoned. Hedges count as attempts (MaxAttempts) and spend the
	// budget. It needs Retry.
	Hedge
	// Route wraps the picker in package route, by the label TrackLabel:
	// one picker of the algorithm per track of the backends
	// (Backend.Track), requests without a Route held to StableTrack's
	// set (Config.Default), falling back to any backend when it has none
	// (Fallback Any). Health, with Active or Passive, goes around it. On
	// its own it is a canary deployed and sent nothing.
	Route
	// Canary tags a share of the user requests for the canary
	// (Scenario.CanaryShare; Request.Route = CanaryTrack), drawn at
	// random per request and kept by its retries and hedges, as a header
	// set by an edge for a cohort would be: the canary turned on. It
	// needs Route.
	Canary
	// FailureRate turns on health's failure-percentage ejection
	// (health.Config.FailureRate, Envoy's failure_percentage) with its
	// defaults but for the threshold, FailRateThreshold, so that the flaky
	// scenario's backend, failing 30%, is judged an outlier. It needs
	// Passive.
	FailureRate
	// None is the bare picker.
	None Variant = 0
)

// features are the known Variant bits, in String's order: contiguous from
// Active, so that a loop shifting a bit from Active ends past the last.
const features = Active | Passive | Retry | Locality | Subset | Timeout | Budget | Hedge | Route | Canary | FailureRate

// MaxAttempts is the number of attempts a request gets with Retry.
const MaxAttempts = 3

// Health reports whether v needs the health wrapper.
func (v Variant) Health() bool { return v&(Active|Passive) != 0 }

// String returns the features joined by '+', such as "active+passive" or
// "locality+subset", or "none".
func (v Variant) String() string {
	if v == None {
		return "none"
	}
	var parts []string
	for f := Active; f&features != 0; f <<= 1 {
		if v&f != 0 {
			parts = append(parts, f.feature())
		}
	}
	if rest := v &^ features; rest != 0 {
		parts = append(parts, fmt.Sprintf("0x%x", uint16(rest)))
	}
	return strings.Join(parts, "+")
}

// feature names a single feature.
func (v Variant) feature() string {
	switch v {
	case Active:
		return "active"
	case Passive:
		return "passive"
	case Retry:
		return "retry"
	case Locality:
		return "locality"
	case Subset:
		return "subset"
	case Timeout:
		return "timeout"
	case Budget:
		return "budget"
	case Hedge:
		return "hedge"
	case Route:
		return "route"
	case Canary:
		return "canary"
	case FailureRate:
		return "failrate"
	}
	return ""
}

// ParseVariant parses what String returns: "none", or features among
// "active", "passive", "retry", "locality", "subset", "timeout", "budget",
// "hedge", "route", "canary" and "failrate" joined by '+'.
func ParseVariant(s string) (Variant, error) {
	if s == "none" {
		return None, nil
	}
	var v Variant
next:
	for _, part := range strings.Split(s, "+") {
		for f := Active; f&features != 0; f <<= 1 {
			if part == f.feature() {
				v |= f
				continue next
			}
		}
		return 0, fmt.Errorf("%w: variant %q: want none, or active, passive, retry, locality, subset, timeout, budget, hedge, route and canary joined by '+'", ErrScenario, s)
	}
	return v, nil
}

// FailureVariants are the failure handling compared by the failure
// scenarios: the bare picker, active checks (the study's setup), plus
// passive ejection, plus retries of failed attempts on another backend.
func FailureVariants() []Variant {
	return []Variant{None, Active, Active | Passive, Active | Passive | Retry}
}

// StudyBackends returns the study's four backends: 50, 150, 300 and 500 ms
// with weights 6:3:2:1, unlimited capacity, no outage.
func StudyBackends() []Backend {
	return []Backend{
		{Latency: 50 * time.Millisecond, Weight: 6},
		{Latency: 150 * time.Millisecond, Weight: 3},
		{Latency: 300 * time.Millisecond, Weight: 2},
		{Latency: 500 * time.Millisecond, Weight: 1},
	}
}

// Defaults returns the six default scenarios over bs (nil: StudyBackends),
// each with its own copy of the backends:
//
//   - steady: 100 users for 3 minutes.
//   - burst: 10 users for 20 s, a ramp to 250 over 30 s, 250 for 40 s, a
//     ramp back to 10 over 30 s, 10 for 20 s.
//   - failure: steady, with the first backend killed at 1 minute (unless
//     some backend of bs already has an outage), compared under
//     FailureVariants with active checks every 5 s.
//   - steady-cap, burst-cap, failure-cap: the same with every backend
//     whose Capacity is zero serving DefaultCapacity requests at once.
//
// Think time is DefaultThink throughout.
func Defaults(bs []Backend) []Scenario {
	if bs == nil {
		bs = StudyBackends()
	}
	steady := []Stage{{3 * time.Minute, 100}}
	burst := []Stage{{20 * time.Second, 10}, {30 * time.Second, 250}, {40 * time.Second, 250}, {30 * time.Second, 10}, {20 * time.Second, 10}}
	var out []Scenario
	for _, capped := range []bool{false, true} {
		suffix := ""
		if capped {
			suffix = "-cap"
		}
		mk := func(name string, users int, stages []Stage, failing bool) Scenario {
			s := Scenario{Name: name + suffix, Backends: cloneBackends(bs), Users: users, Stages: stages, Think: DefaultThink}
			if capped {
				for i := range s.Backends {
					if s.Backends[i].Capacity == 0 {
						s.Backends[i].Capacity = DefaultCapacity
					}
				}
			}
			if failing {
				s.Variants = FailureVariants()
				s.CheckInterval = DefaultCheckInterval
				if !s.hasOutage() && len(s.Backends) > 0 {
					s.Backends[0].Down = []Outage{{At: DefaultKillAt}}
				}
			}
			return s
		}
		out = append(out,
			mk("steady", 100, steady, false),
			mk("burst", 10, burst, false),
			mk("failure", 100, steady, true))
	}
	return out
}

// Default returns the scenario of Defaults(nil) named name, and false
// when there is none.
func Default(name string) (Scenario, bool) {
	for _, s := range Defaults(nil) {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// Parameters of the load scenarios (LoadScenarios).
const (
	// LoadLatency is the service time of every backend of the load
	// scenarios: the study's fastest backend, fixed, as in the study.
	LoadLatency = 50 * time.Millisecond
	// NeighbourAt is when antagonist's neighbour arrives.
	NeighbourAt = time.Minute
)

// LoadScenarios returns the scenarios that ask whether the backends' own
// reports of their load, and probes, are worth their cost: each at 70%
// and at 95% of the capacity, 3 minutes long, users thinking DefaultThink.
//
//   - antagonist-70, antagonist-95: four backends serving in 50 ms, 16
//     requests at once each; from 1 minute on, a neighbour the proxies
//     cannot see takes 8 of the first one's 16 slots. The share is of
//     the 56 slots left with the neighbour there (at 95% of all 64 they
//     would be overloaded, 109%, and every picker would queue).
//   - hetero-70, hetero-95: four backends serving in 50 ms, 32, 16, 8
//     and 4 requests at once.
//
// The users are as many as would keep that share of the slots busy if
// no request queued: share × slots × (think + latency) / latency, 160 for
// antagonist-95, 171 for hetero-95. Each scenario's Versus sets the
// pickers of catalog.LoadAware against leastconn and lrt.
func LoadScenarios() []Scenario {
	var reporting []string
	for _, a := range catalog.LoadAware() {
		reporting = append(reporting, a.Name)
	}
	mk := func(name string, capacities []int, neighbour int, share float64) Scenario {
		slots := 0
		bs := make([]Backend, len(capacities))
		for i, c := range capacities {
			bs[i] = Backend{Latency: LoadLatency, Capacity: c}
			slots += c
		}
		if neighbour > 0 {
			bs[0].Neighbours = []Neighbour{{At: NeighbourAt, Takes: neighbour}}
			slots -= neighbour
		}
		users := int(math.Round(share * float64(slots) * float64(DefaultThink+LoadLatency) / float64(LoadLatency)))
		return Scenario{
			Name: fmt.Sprintf("%s-%.0f", name, 100*share), Backends: bs, Users: users,
			Stages: []Stage{{3 * time.Minute, users}}, Think: DefaultThink,
			Metrics: []Metric{ProbesMetric()},
			Versus:  &Versus{Name: "report-driven or probing", Against: "local", Algorithms: reporting, Baselines: []string{"leastconn", "lrt"}},
		}
	}
	return []Scenario{
		mk("antagonist", []int{16, 16, 16, 16}, 8, 0.70),
		mk("antagonist", []int{16, 16, 16, 16}, 8, 0.95),
		mk("hetero", []int{32, 16, 8, 4}, 0, 0.70),
		mk("hetero", []int{32, 16, 8, 4}, 0, 0.95),
	}
}

func cloneBackends(bs []Backend) []Backend {
	out := make([]Backend, len(bs))
	for i, b := range bs {
		out[i] = b
		out[i].Down = append([]Outage(nil), b.Down...)
		out[i].Neighbours = append([]Neighbour(nil), b.Neighbours...)
		out[i].Stalls = append([]Outage(nil), b.Stalls...)
		out[i].Unavailable = append([]Outage(nil), b.Unavailable...)
	}
	return out
}

func (s *Scenario) hasOutage() bool {
	for _, b := range s.Backends {
		if len(b.Down) > 0 {
			return true
		}
	}
	return false
}

// Length returns how long the scenario lasts: the sum of its stages, at
// most MaxLength in a scenario Validate accepts.
func (s *Scenario) Length() time.Duration {
	var d time.Duration
	for _, st := range s.Stages {
		d += st.Duration
	}
	return d
}

// Requests estimates the user requests one run of s simulates, to size a
// job before it starts: the users over time, each sending one request per
// think time plus the fastest backend's latency (or the ClientTimeout, if
// shorter), as if every request went there and none queued. Most runs
// simulate fewer (round robin in the steady scenario, 0.43 of it;
// lrt-naive 0.96); a dead backend that refuses at once, taking a bare
// picker's requests, can bring up to half as many more. It is zero for a
// scenario without backends.
func (s *Scenario) Requests() float64 {
	if len(s.Backends) == 0 {
		return 0
	}
	fastest := s.Backends[0].Latency
	for _, b := range s.Backends {
		fastest = min(fastest, b.Latency)
	}
	if s.ClientTimeout > 0 {
		fastest = min(fastest, s.ClientTimeout)
	}
	var userTime float64 // ∫ users dt, in user·s, for linear stages
	prev := float64(s.Users)
	for _, st := range s.Stages {
		userTime += (prev + float64(st.Target)) / 2 * st.Duration.Seconds()
		prev = float64(st.Target)
	}
	return userTime / max((s.Think+fastest).Seconds(), 1e-9)
}

// PeakUsers returns the largest number of users the profile reaches.
func (s *Scenario) PeakUsers() int {
	n := s.Users
	for _, st := range s.Stages {
		n = max(n, st.Target)
	}
	return n
}

// FirstOutage returns the earliest outage of any backend, and false if
// there is none: a span in which a backend is dead (Down), stalled
// (Stalls) or answering 503 (Unavailable); of two that start together,
// the first listed. The report compares throughput before and during it.
func (s *Scenario) FirstOutage() (Outage, bool) {
	var first Outage
	found := false
	for _, b := range s.Backends {
		for _, os := range [][]Outage{b.Down, b.Stalls, b.Unavailable} {
			for _, o := range os {
				if !found || o.At < first.At {
					first, found = o, true
				}
			}
		}
	}
	return first, found
}

// Label returns the i-th backend's name: its Name, or its latency, followed
// by "#<i+1>" when another backend has the same one.
func (s *Scenario) Label(i int) string {
	name := s.Backends[i].label()
	for j := range s.Backends {
		if j != i && s.Backends[j].label() == name {
			return fmt.Sprintf("%s#%d", name, i+1)
		}
	}
	return name
}

func (b *Backend) label() string {
	if b.Name != "" {
		return b.Name
	}
	return b.Latency.String()
}

// ID returns the i-th backend's ID as pickers see it: its Addr, or
// "10.0.0.<i+1>:8080".
func (s *Scenario) ID(i int) string {
	if s.Backends[i].Addr != "" {
		return s.Backends[i].Addr
	}
	return fmt.Sprintf("10.0.%d.%d:8080", (i+1)/256, (i+1)%256)
}

// Interval returns CheckInterval, or DefaultCheckInterval when it is zero.
func (s *Scenario) Interval() time.Duration {
	if s.CheckInterval == 0 {
		return DefaultCheckInterval
	}
	return s.CheckInterval
}

// RTT returns ProbeRTT, or DefaultProbeRTT when it is zero.
func (s *Scenario) RTT() time.Duration {
	if s.ProbeRTT == 0 {
		return DefaultProbeRTT
	}
	return s.ProbeRTT
}

// RunVariants returns Variants, or [None] when it is empty.
func (s *Scenario) RunVariants() []Variant {
	if len(s.Variants) == 0 {
		return []Variant{None}
	}
	return s.Variants
}

// Validate reports the first thing wrong with s, wrapping ErrScenario.
// Besides what each field documents, every time s holds must be at most
// MaxLength, and so must its length.
func (s *Scenario) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrScenario, s.Name, fmt.Sprintf(format, args...))
	}
	if s.Name == "" {
		return fmt.Errorf("%w: empty name", ErrScenario)
	}
	if len(s.Backends) == 0 {
		return bad("no backends")
	}
	if len(s.Stages) == 0 {
		return bad("no stages: the scenario would last no time")
	}
	var length time.Duration
	for i, st := range s.Stages {
		if st.Duration <= 0 {
			return bad("stage %d: duration %v is not positive", i+1, st.Duration)
		}
		if st.Duration > MaxLength-length { // length ≤ MaxLength: no overflow
			return bad("stage %d: the scenario lasts more than %v (MaxLength)", i+1, MaxLength)
		}
		length += st.Duration
	}
	if s.Users < 0 {
		return bad("negative users %d", s.Users)
	}
	if s.PeakUsers() == 0 {
		return bad("no users at any time")
	}
	if s.PeakUsers() > MaxUsers {
		return bad("%d users, more than %d", s.PeakUsers(), MaxUsers)
	}
	for i, st := range s.Stages {
		if st.Target < 0 {
			return bad("stage %d: negative target %d", i+1, st.Target)
		}
	}
	if s.Think < 0 || s.Think > MaxLength {
		return bad("think time %v outside [0, %v]", s.Think, MaxLength)
	}
	if s.CheckInterval < 0 || s.CheckInterval > 0 && s.CheckInterval < time.Millisecond || s.CheckInterval > MaxLength {
		return bad("check interval %v: want zero (the default) or from 1ms to %v", s.CheckInterval, MaxLength)
	}
	if s.ClientTimeout < 0 || s.ClientTimeout > MaxLength {
		return bad("client timeout %v outside [0, %v]", s.ClientTimeout, MaxLength)
	}
	for _, v := range s.Variants {
		switch {
		case v&^features != 0:
			return bad("unknown variant %v", v)
		case v&(Budget|Hedge) != 0 && v&Retry == 0:
			return bad("variant %v: budget and hedge need retry (with one attempt a request has nothing to budget or hedge)", v)
		case v&Canary != 0 && v&Route == 0:
			return bad("variant %v: canary needs route (the requests it tags go to the canary's set through package route)", v)
		case v&Route != 0 && v&Locality != 0:
			return bad("variant %v: route and locality are not simulated together", v)
		case v&FailureRate != 0 && v&Passive == 0:
			return bad("variant %v: failrate needs passive (failure rates are passive checks' results)", v)
		}
	}
	if s.ReportDelay < 0 || s.ReportDelay > MaxReportDelay {
		return bad("report delay %v outside [0, %v]", s.ReportDelay, MaxReportDelay)
	}
	if !(s.CanaryShare >= 0 && s.CanaryShare < 1) {
		return bad("canary share %v outside [0, 1)", s.CanaryShare)
	}
	if s.ProbeRTT < 0 || s.ProbeRTT > MaxLength {
		return bad("probe round trip %v outside [0, %v]", s.ProbeRTT, MaxLength)
	}
	if err := s.validateFleet(); err != nil {
		return bad("%v", err)
	}
	ids := make(map[string]bool, len(s.Backends))
	for i, b := range s.Backends {
		if ids[s.ID(i)] {
			return bad("backend %d: duplicate address %q", i+1, s.ID(i))
		}
		ids[s.ID(i)] = true
		if err := b.validate(length); err != nil {
			return bad("backend %d (%s): %v", i+1, s.Label(i), err)
		}
	}
	return nil
}

func (b *Backend) validate(length time.Duration) error {
	switch {
	case b.Latency <= 0 || b.Latency > MaxLength:
		return fmt.Errorf("latency %v outside (0, %v]", b.Latency, MaxLength)
	case b.Jitter < 0 || b.Jitter >= b.Latency:
		return fmt.Errorf("jitter %v outside [0, latency)", b.Jitter)
	case b.Sigma < 0 || math.IsNaN(b.Sigma) || b.Sigma > 4:
		return fmt.Errorf("sigma %v outside [0, 4]", b.Sigma)
	case b.Jitter > 0 && b.Sigma > 0:
		return errors.New("jitter and sigma are exclusive")
	case len(b.Samples) > 0 && (b.Jitter > 0 || b.Sigma > 0):
		return errors.New("samples exclude jitter and sigma")
	case b.Weight < 0 || b.Weight > balancer.MaxWeight:
		return fmt.Errorf("weight %d outside [0, %d]", b.Weight, balancer.MaxWeight)
	case b.Capacity < 0:
		return fmt.Errorf("negative capacity %d", b.Capacity)
	case !(b.TailShare >= 0 && b.TailShare < 1):
		return fmt.Errorf("tail share %v outside [0, 1)", b.TailShare)
	case b.TailShare > 0 && !(b.TailFactor >= 1 && b.TailFactor <= MaxTailFactor):
		return fmt.Errorf("tail factor %v outside [1, %d]", b.TailFactor, MaxTailFactor)
	case b.TailShare == 0 && b.TailFactor != 0:
		return fmt.Errorf("tail factor %v without a tail share", b.TailFactor)
	case !(b.FailShare >= 0 && b.FailShare <= 1):
		return fmt.Errorf("fail share %v outside [0, 1]", b.FailShare)
	}
	for _, d := range b.Samples {
		if d < 0 || d > MaxLength {
			return fmt.Errorf("sample %v outside [0, %v]", d, MaxLength)
		}
	}
	for _, spans := range []struct {
		os   []Outage
		what string
	}{{b.Down, "outage"}, {b.Stalls, "stall"}, {b.Unavailable, "503 span"}} {
		if err := checkSpans(len(spans.os), func(i int) (time.Duration, time.Duration) { return spans.os[i].At, spans.os[i].Until },
			length, spans.what, "starts", "ends"); err != nil {
			return err
		}
	}
	for _, n := range b.Neighbours {
		switch {
		case b.Capacity == 0:
			return errors.New("a neighbour takes part of a capacity: set one (c=)")
		case n.Takes < 1 || n.Takes >= b.Capacity:
			return fmt.Errorf("neighbour at %v takes %d slots, outside [1, %d] (the capacity less one)", n.At, n.Takes, b.Capacity-1)
		}
	}
	return checkSpans(len(b.Neighbours), func(i int) (time.Duration, time.Duration) { return b.Neighbours[i].At, b.Neighbours[i].Until },
		length, "neighbour", "arrives", "leaves")
}

// checkSpans checks n spans of time, the i-th from span(i), as outages and
// neighbours have them: each starts within the scenario's length, after
// the one before has ended, and ends after it starts, or never (the last
// only). what names a span in errors, starts and ends its two ends.
func checkSpans(n int, span func(int) (at, until time.Duration), length time.Duration, what, starts, ends string) error {
	var prev time.Duration
	for i := range n {
		at, until := span(i)
		switch {
		case at < prev || (i > 0 && at == prev):
			return fmt.Errorf("%s at %v overlaps or precedes the one before", what, at)
		case at < 0 || at >= length:
			return fmt.Errorf("%s at %v outside the scenario's %v", what, at, length)
		case until != 0 && until <= at:
			return fmt.Errorf("%s %s at %v, not after it %s at %v", what, ends, until, starts, at)
		case until > MaxLength:
			return fmt.Errorf("%s %s at %v, after %v (MaxLength); zero means never", what, ends, until, MaxLength)
		case until == 0 && i < n-1:
			return fmt.Errorf("%s at %v never %s but another follows", what, at, ends)
		}
		prev = until
	}
	return nil
}

// Scale returns a copy of s whose stage durations, outage times (stalls
// and 503 spans included) and neighbours' times are multiplied by f (rounded to the millisecond, a stage lasting at least
// one; a time too large for a Duration becomes the largest one, which
// Validate refuses): -duration uses it to shorten or stretch a profile.
func (s Scenario) Scale(f float64) Scenario {
	scale := func(d time.Duration) time.Duration {
		ms := math.Round(float64(d) * f / 1e6)
		switch {
		case !(ms < math.MaxInt64/1e6): // or NaN
			return math.MaxInt64
		case ms <= math.MinInt64/1e6:
			return math.MinInt64
		}
		return time.Duration(ms) * time.Millisecond
	}
	s.Stages = append([]Stage(nil), s.Stages...)
	for i := range s.Stages {
		s.Stages[i].Duration = max(scale(s.Stages[i].Duration), time.Millisecond)
	}
	// A span that ends still ends after it starts.
	span := func(at, until *time.Duration) {
		*at = scale(*at)
		if *until != 0 {
			*until = max(scale(*until), *at+time.Millisecond)
		}
	}
	s.Backends = cloneBackends(s.Backends)
	for i := range s.Backends {
		b := &s.Backends[i]
		for _, os := range [][]Outage{b.Down, b.Stalls, b.Unavailable} {
			for j := range os {
				span(&os[j].At, &os[j].Until)
			}
		}
		for j := range b.Neighbours {
			span(&b.Neighbours[j].At, &b.Neighbours[j].Until)
		}
	}
	return s
}

// ScaleUsers returns a copy of s whose start count and stage targets are
// multiplied by peak/PeakUsers, rounded, so that the profile peaks at
// peak users; a count that was positive stays at least 1.
func (s Scenario) ScaleUsers(peak int) Scenario {
	old := s.PeakUsers()
	if old == 0 {
		return s
	}
	scale := func(n int) int {
		if n == 0 {
			return 0
		}
		return max(1, int(math.Round(float64(n)*float64(peak)/float64(old))))
	}
	s.Users = scale(s.Users)
	s.Stages = append([]Stage(nil), s.Stages...)
	for i := range s.Stages {
		s.Stages[i].Target = scale(s.Stages[i].Target)
	}
	return s
}
