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
	ErrConfig = errors.New("health: invalid config")
	// ErrUnknownBackend reports an ID given to Drain, Maintenance or
	// Enable that is not in the current set.
	ErrUnknownBackend = errors.New("health: unknown backend")
	// ErrClosed is returned by Start after Close, or after the context of
	// an earlier Start was cancelled.
	ErrClosed = errors.New("health: closed")
	// ErrStarted is returned by a second Start.
	ErrStarted = errors.New("health: already started")
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
	// falls by one for each BaseEjectionTime a backend stays in. Default
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
	passive             bool
	slowStart           time.Duration
	slowStartMin        float64
	onChange            func(Change)
	clock               Clock
	rand                func() uint64
	lazyApplier         bool // Clock was nil: Done may start an applier
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
		s.isFailure = anyError
	}
	return s, nil
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
