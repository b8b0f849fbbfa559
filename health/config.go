package health

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// Errors returned by this package. Test for them with errors.Is.
var (
	// ErrConfig reports a Config that New refuses; the message names the
	// field and the value at fault.
	// It wraps balancer.ErrBadOption, as every lbkit refusal of a
	// configuration does.
	ErrConfig = fmt.Errorf("health: invalid config: %w", balancer.ErrBadOption)
	// ErrUnknownBackend reports an ID given to Drain, Maintenance or
	// Enable that is not in the current set. It is balancer's, so that a
	// discovery source can tell it from other errors through any Admin.
	ErrUnknownBackend = balancer.ErrUnknownBackend
	// ErrProbe marks a probe that reached the backend but did not like the
	// answer: an HTTP status outside the accepted range, or a body without
	// the expected text.
	ErrProbe = errors.New("health: probe failed")
)

// Defaults for the zero fields of Config.
const (
	DefaultInterval            = 5 * time.Second
	DefaultTimeout             = time.Second
	DefaultRise                = 2
	DefaultFall                = 3
	DefaultConsecutiveFailures = 5
	DefaultBaseEjectionTime    = 30 * time.Second
	DefaultMaxEjectionTime     = 300 * time.Second
	DefaultMaxEjectedPercent   = 50
	DefaultSlowStartMinPercent = 10

	// Failure-percentage ejection (FailureRateCheck).
	DefaultFailureRateInterval      = 10 * time.Second
	DefaultFailureRateThreshold     = 85
	DefaultFailureRateRequestVolume = 50
	DefaultFailureRateMinimumHosts  = 3
)

// MinInterval is the shortest probe Interval New accepts: a shorter one is
// more likely a unit mistake (5 instead of 5*time.Second) than a wish.
const MinInterval = time.Millisecond

// Clock tells the time. The zero Config uses the real clock (time.Now);
// the scenario simulator and tests pass a virtual one.
//
// With a Clock set, nothing in this package starts a goroutine on its own:
// call Apply after events, or Start (whose applier sleeps in real time for
// the durations the Clock reports). See the package doc, "Who applies a
// change".
type Clock interface {
	Now() time.Time
}

// Config configures a Balancer. Its zero value means the documented
// defaults: passive ejection on, no active probes, no slow start. Every
// field says its default and where that default comes from.
type Config struct {
	// Active checks.

	// Probe checks one backend. nil: no active checks; a backend's
	// active state changes only through Observe. Use HTTP, TCP or Func.
	Probe Prober
	// Interval between the end of one probe of a backend and the start of
	// the next. Default 5s (the figure; HAProxy's inter defaults to
	// 2s). Must be at least MinInterval; negative is an error.
	Interval time.Duration
	// Jitter spreads probes: each wait is Interval plus a uniform random
	// offset in [-Jitter, +Jitter], so a fleet of proxies does not probe
	// in lockstep (HAProxy's spread-checks, Envoy's interval_jitter).
	// Default Interval/10. Must be below Interval. A wait longer than the
	// largest time.Duration (about 292 years) is cut to it: an Interval
	// that large means "probe once".
	Jitter time.Duration
	// Timeout bounds one probe. Default min(1s, Interval). A backend that
	// hangs costs its own probe this long, and no other backend's.
	Timeout time.Duration
	// Rise is how many consecutive passing probes bring a backend that is
	// down back up, and how many un-eject a passively ejected one.
	// Default 2 (HAProxy's rise).
	Rise int
	// Fall is how many consecutive failing probes take a backend down.
	// Default 3 (HAProxy's fall).
	Fall int
	// InitialDown makes backends start down and wait for Rise passing
	// probes (Envoy's behaviour for new hosts under active checks). Default
	// false: backends start up and are taken down by Fall failures
	// (HAProxy's behaviour). Without Probe, a backend that starts down
	// comes up only through Observe.
	InitialDown bool

	// Passive checks (outlier detection).

	// ConsecutiveFailures ejects a backend after this many failures in a
	// row reported to Done. Default 5 (Envoy's consecutive_5xx). A refused
	// connection (errors.Is(err, syscall.ECONNREFUSED)) that IsFailure
	// counts as a failure ejects at once.
	ConsecutiveFailures int
	// BaseEjectionTime is how long a first ejection lasts. The k-th
	// ejection in a row lasts k times as long, up to MaxEjectionTime; k
	// falls by one for each BaseEjectionTime a backend stays in, counted
	// from its return once it is off trial (see NoTrial). Default
	// 30s (Envoy's base_ejection_time). Any value up to the largest
	// time.Duration works: a huge one means "until the probes bring it
	// back".
	BaseEjectionTime time.Duration
	// MaxEjectionTime caps an ejection. Default the larger of 300s and
	// BaseEjectionTime (Envoy's max_ejection_time). Setting it below
	// BaseEjectionTime is an error.
	MaxEjectionTime time.Duration
	// MaxEjectedPercent caps the share of the set that passive checks may
	// keep ejected at once, in percent, 1 to 100; one backend may always
	// be ejected (Envoy's max_ejection_percent, with gRPC's and Envoy's
	// always-one rule). Default 50. Backends taken down by active probes
	// do not count and are not capped.
	MaxEjectedPercent int
	// IsFailure says which results count as failures. Default: any result
	// with a non-nil Err. It is never called for an abandoned result
	// (balancer.Result.Abandoned), which is neither a failure nor a
	// success. It runs on the request path, in Done: keep it cheap and
	// allocation-free.
	IsFailure func(balancer.Result) bool
	// NoEjection turns passive checks off: Done only passes results on.
	NoEjection bool
	// NoTrial ends the trial that follows an ejection: a backend whose
	// ejection ends (its time runs out, or Rise probes pass) is back in
	// full at once, as in Envoy's outlier detection. Default false: it
	// comes back on trial, taking one request at a time until one
	// succeeds, and a trial request that fails ejects it again at once,
	// for its next, longer ejection time (Finagle's failure accrual,
	// whose revived node takes a single probing request; a circuit
	// breaker's half-open state). A probe that passes says the backend
	// answers its health check, not that it serves requests; the trial
	// asks a request. See the package documentation.
	NoTrial bool
	// FailureRate turns on failure-percentage ejection (Envoy's
	// failure_percentage outlier detection): once per interval, a backend
	// whose share of failed requests reaches a threshold is ejected, as
	// a run of ConsecutiveFailures would eject it, under the same
	// MaxEjectedPercent cap and with the same return (ejection time,
	// trial, slow start), with ReasonFailureRate. It catches a backend
	// that fails often but never many times in a row: one request in
	// three, say. Default nil: off, as in Envoy (whose
	// enforcing_failure_percentage defaults to 0) and gRPC (whose
	// failure_percentage_ejection is off unless configured); it costs
	// every Done a map read and an atomic add. &FailureRateCheck{} turns
	// it on with the defaults. NoEjection turns it off too.
	FailureRate *FailureRateCheck

	// Recovery.

	// SlowStart is the window over which a returning backend's share of
	// requests ramps up (Envoy's slow_start_window). Default 0: off.
	SlowStart time.Duration
	// SlowStartMinPercent is the share factor a returning backend starts
	// at, in percent, 1 to 100. Default 10 (Envoy's min_weight_percent).
	SlowStartMinPercent int

	// Observability, time and randomness.

	// OnChange is called after every change of a backend's state, in
	// order, never while a lock of the Balancer is held. It may call any
	// method of the Balancer except Close. Default nil.
	OnChange func(Change)
	// Clock is the time source. nil: the real clock, and a goroutine is
	// started lazily to apply passive ejections when Start was not called.
	// A non-nil Clock means the caller drives time: see Clock.
	Clock Clock
	// Rand returns uniform random 64-bit numbers: probe jitter and slow
	// start's draws. Default math/rand/v2's Uint64. It is called from
	// Pick while a backend ramps up, so it must be safe for concurrent use.
	// A seeded source makes a simulation repeatable.
	Rand func() uint64
}

// FailureRateCheck configures failure-percentage ejection (see
// Config.FailureRate). Its zero value means the defaults, each with its
// anchor in Envoy's outlier detection.
type FailureRateCheck struct {
	// Interval is how often the share of failures is judged, over the
	// requests whose Done came since the last judgement. Default 10s
	// (Envoy's interval). Must be at least MinInterval.
	Interval time.Duration
	// Threshold is the share of failed requests, in percent, 1 to 100,
	// at or above which a backend is ejected. Default 85 (Envoy's
	// failure_percentage_threshold): a backend failing most of its
	// requests. A lower one catches more: 20 ejects a backend failing
	// one request in three, and also one failing one in five.
	Threshold int
	// RequestVolume is how many requests a backend must have finished in
	// the interval (Done, not abandoned) to be judged at all: fewer say
	// too little. Default 50 (Envoy's failure_percentage_request_volume).
	RequestVolume int
	// MinimumHosts is how many backends, eligible and with RequestVolume
	// requests in the interval, there must be for any of them to be
	// judged. Default 3, not Envoy's 5 (failure_percentage_minimum_hosts):
	// with Envoy's figure a set of four backends, a common size and the
	// one lbkit's scenarios use, would never be judged, and nothing would
	// say so. At 3, a backend ejected on its failure rate takes out at
	// most a third of the traffic that was judged, and a set of one or two
	// backends, where an ejection sends everything to what is left, is not
	// judged. Set 1 to judge any set; set 5 for Envoy's rule.
	MinimumHosts int
}

// settings is a Config with its defaults filled in and checked.
type settings struct {
	probe               Prober
	interval, jitter    time.Duration
	timeout             time.Duration
	rise, fall          int
	initialDown         bool
	consecutive         int64
	baseEject, maxEject time.Duration
	maxEjectedPercent   int
	isFailure           func(balancer.Result) bool
	anyError            bool // isFailure is the default: a failure is r.Err != nil
	passive             bool
	trial               bool
	slowStart           time.Duration
	slowStartMin        float64
	onChange            func(Change)
	clock               Clock
	rand                func() uint64
	lazyApplier         bool // Clock was nil: Done may start an applier
	rate                rateSettings
}

// rateSettings is a FailureRateCheck with its defaults filled in.
type rateSettings struct {
	on        bool // Config.FailureRate was set and passive checks are on
	interval  time.Duration
	threshold int64 // percent
	volume    int64
	minHosts  int
}

// realClock is the default Clock.
type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// validator is implemented by probers whose configuration can be wrong.
type validator interface {
	validate() error
}

// resolve checks c and fills in its defaults.
func (c Config) resolve() (settings, error) {
	bad := func(format string, args ...any) (settings, error) {
		return settings{}, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	s := settings{
		probe:       c.Probe,
		initialDown: c.InitialDown,
		passive:     !c.NoEjection,
		trial:       !c.NoTrial,
		onChange:    c.OnChange,
		clock:       c.Clock,
		rand:        c.Rand,
		isFailure:   c.IsFailure,
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"Interval", c.Interval}, {"Jitter", c.Jitter}, {"Timeout", c.Timeout},
		{"BaseEjectionTime", c.BaseEjectionTime}, {"MaxEjectionTime", c.MaxEjectionTime},
		{"SlowStart", c.SlowStart},
	} {
		if f.v < 0 {
			return bad("%s is %v, want 0 (the default) or more", f.name, f.v)
		}
	}
	for _, f := range []struct {
		name string
		v    int
	}{
		{"Rise", c.Rise}, {"Fall", c.Fall}, {"ConsecutiveFailures", c.ConsecutiveFailures},
		{"MaxEjectedPercent", c.MaxEjectedPercent}, {"SlowStartMinPercent", c.SlowStartMinPercent},
	} {
		if f.v < 0 {
			return bad("%s is %d, want 0 (the default) or more", f.name, f.v)
		}
	}

	s.interval = orDefault(c.Interval, DefaultInterval)
	if s.interval < MinInterval {
		return bad("Interval is %v, want at least %v", s.interval, MinInterval)
	}
	s.jitter = orDefault(c.Jitter, s.interval/10)
	if s.jitter >= s.interval {
		return bad("Jitter is %v, want less than Interval (%v)", s.jitter, s.interval)
	}
	s.timeout = orDefault(c.Timeout, min(DefaultTimeout, s.interval))
	s.rise = orDefault(c.Rise, DefaultRise)
	s.fall = orDefault(c.Fall, DefaultFall)
	s.consecutive = int64(orDefault(c.ConsecutiveFailures, DefaultConsecutiveFailures))
	s.baseEject = orDefault(c.BaseEjectionTime, DefaultBaseEjectionTime)
	s.maxEject = orDefault(c.MaxEjectionTime, max(DefaultMaxEjectionTime, s.baseEject))
	if s.maxEject < s.baseEject {
		return bad("MaxEjectionTime (%v) is below BaseEjectionTime (%v)", s.maxEject, s.baseEject)
	}
	s.maxEjectedPercent = orDefault(c.MaxEjectedPercent, DefaultMaxEjectedPercent)
	if s.maxEjectedPercent > 100 {
		return bad("MaxEjectedPercent is %d, want 1 to 100", s.maxEjectedPercent)
	}
	s.slowStart = c.SlowStart
	minPct := orDefault(c.SlowStartMinPercent, DefaultSlowStartMinPercent)
	if minPct > 100 {
		return bad("SlowStartMinPercent is %d, want 1 to 100", minPct)
	}
	s.slowStartMin = float64(minPct) / 100
	if c.FailureRate != nil {
		r, err := c.FailureRate.resolve()
		if err != nil {
			return bad("%v", err)
		}
		r.on = s.passive
		s.rate = r
	}
	if v, ok := c.Probe.(validator); ok {
		if err := v.validate(); err != nil {
			return bad("Probe: %v", err)
		}
	}
	if s.clock == nil {
		s.clock = realClock{}
		s.lazyApplier = true
	}
	if s.rand == nil {
		s.rand = rand.Uint64
	}
	if s.isFailure == nil {
		s.isFailure, s.anyError = anyError, true
	}
	return s, nil
}

// resolve checks c and fills in its defaults; its error names the field.
func (c FailureRateCheck) resolve() (rateSettings, error) {
	switch {
	case c.Interval < 0:
		return rateSettings{}, fmt.Errorf("FailureRate.Interval is %v, want 0 (the default) or more", c.Interval)
	case c.Threshold < 0 || c.Threshold > 100:
		return rateSettings{}, fmt.Errorf("FailureRate.Threshold is %d, want 1 to 100, or 0 for the default", c.Threshold)
	case c.RequestVolume < 0:
		return rateSettings{}, fmt.Errorf("FailureRate.RequestVolume is %d, want 0 (the default) or more", c.RequestVolume)
	case c.MinimumHosts < 0:
		return rateSettings{}, fmt.Errorf("FailureRate.MinimumHosts is %d, want 0 (the default) or more", c.MinimumHosts)
	}
	r := rateSettings{
		interval:  orDefault(c.Interval, DefaultFailureRateInterval),
		threshold: int64(orDefault(c.Threshold, DefaultFailureRateThreshold)),
		volume:    int64(orDefault(c.RequestVolume, DefaultFailureRateRequestVolume)),
		minHosts:  orDefault(c.MinimumHosts, DefaultFailureRateMinimumHosts),
	}
	if r.interval < MinInterval {
		return rateSettings{}, fmt.Errorf("FailureRate.Interval is %v, want at least %v", r.interval, MinInterval)
	}
	return r, nil
}

// anyError is the default IsFailure.
func anyError(r balancer.Result) bool { return r.Err != nil }

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
