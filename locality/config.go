package locality

import (
	"fmt"
	"maps"
	"math/rand/v2"

	"github.com/lbkit/lbkit/balancer"
)

// Errors returned by this package. Test for them with errors.Is.
var (
	// ErrConfig reports a Config (or a caller count given to SetCallers)
	// that is refused; the message names the field and the value at fault.
	// It wraps balancer.ErrBadOption, as every lbkit refusal of a
	// configuration does.
	ErrConfig = fmt.Errorf("locality: invalid config: %w", balancer.ErrBadOption)
)

// Defaults for the zero fields of Config.
const (
	// DefaultMinSize is Envoy's min_cluster_size for zone-aware routing.
	DefaultMinSize = 6
	// DefaultOverprovisioning is Envoy's overprovisioning factor, 1.4, in
	// percent: a level keeps all its traffic while at least 1/1.4 = 71.4%
	// of it is healthy.
	DefaultOverprovisioning = 140
	// DefaultPanicPercent is Envoy's healthy_panic_threshold.
	DefaultPanicPercent = 50
)

// MaxOverprovisioning bounds Config.Overprovisioning, in percent.
const MaxOverprovisioning = 1000

// Config configures a Balancer. Its zero value means the documented
// defaults: priority levels with Envoy's overprovisioning factor and
// panic threshold, and no zone-aware routing (Zone is empty). Every field
// says its default and where it comes from.
type Config struct {
	// Zone-aware routing.

	// Zone is the caller's own zone, as the backends' balancer.Locality
	// names zones ("us-east-1a"). Default "": no zone-aware routing; each
	// level's traffic is spread over its zones in proportion to their
	// healthy weight, as if zones did not exist.
	Zone string
	// Callers counts the callers (proxies, client processes) in each zone,
	// Envoy's "originating cluster": zone-aware routing keeps in the local
	// zone the share of traffic that the local zone's backends can take
	// at the same load as every other zone's. Default nil: callers are
	// taken to be spread as each level's backends are, by weight, healthy
	// or not (each zone provisioned for its own callers). Counts must not
	// be negative, and must not all be 0. SetCallers changes them later.
	Callers map[string]int
	// MinSize is the number of healthy backends a level needs for
	// zone-aware routing; a smaller level is routed as if Zone were "".
	// Default 6 (Envoy's min_cluster_size). Negative is an error.
	MinSize int

	// Priority levels.

	// Overprovisioning is the overprovisioning factor in percent, 100 to
	// 1000: a level whose healthy share, times the factor, falls below
	// 100% sends the rest of its traffic to the next level. Default 140
	// (Envoy's 1.4): level 0 keeps everything while 71.4% or more of it
	// is healthy. SetOverprovisioning changes it later.
	Overprovisioning int
	// PanicPercent is the healthy share, in percent (1 to 100), below
	// which a level panics when the levels together cannot take all the
	// traffic: its traffic then goes to all of its backends, healthy or
	// not, rather than overloading the few healthy ones (Envoy's
	// healthy_panic_threshold). Default 50.
	PanicPercent int
	// NoPanic turns the per-level panic off: a level below PanicPercent
	// keeps sending to its healthy backends only. When no backend of any
	// level is healthy, the first level still takes every request, on
	// all of its backends, as health's own panic mode does.
	NoPanic bool

	// Randomness.

	// Rand returns uniform random 64-bit numbers: the draw of level and
	// zone for a request without a Key (a request with a Key draws from
	// the Key's hash, the same in every process). Default math/rand/v2's
	// Uint64. Called from Pick: it must be safe for concurrent use. A
	// seeded source makes a simulation repeatable.
	Rand func() uint64
}

// settings is a Config with its defaults filled in and checked.
type settings struct {
	zone     string
	callers  map[string]int // nil: spread as the backends
	minSize  int
	overprov float64 // the factor: 1.4
	// overprovPercent is Config's factor resolved, in percent, which
	// SetOverprovisioning(0) goes back to.
	overprovPercent int
	panicFrac       float64 // 0.5
	noPanic         bool
	rand            func() uint64
}

func (c Config) resolve() (settings, error) {
	bad := func(format string, args ...any) (settings, error) {
		return settings{}, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	s := settings{zone: c.Zone, minSize: c.MinSize, noPanic: c.NoPanic, rand: c.Rand}
	if c.MinSize < 0 {
		return bad("MinSize is %d, want 0 (the default, %d) or more", c.MinSize, DefaultMinSize)
	}
	if s.minSize == 0 {
		s.minSize = DefaultMinSize
	}
	op := c.Overprovisioning
	if op == 0 {
		op = DefaultOverprovisioning
	}
	if op < 100 || op > MaxOverprovisioning {
		return bad("Overprovisioning is %d, want 0 (the default, %d) or 100 to %d", c.Overprovisioning, DefaultOverprovisioning, MaxOverprovisioning)
	}
	s.overprov = float64(op) / 100
	s.overprovPercent = op
	pp := c.PanicPercent
	if pp == 0 {
		pp = DefaultPanicPercent
	}
	if pp < 1 || pp > 100 {
		return bad("PanicPercent is %d, want 0 (the default, %d) or 1 to 100", c.PanicPercent, DefaultPanicPercent)
	}
	s.panicFrac = float64(pp) / 100
	callers, err := checkCallers(c.Callers)
	if err != nil {
		return settings{}, err
	}
	s.callers = callers
	if s.rand == nil {
		s.rand = rand.Uint64
	}
	return s, nil
}

// checkCallers validates caller counts and returns a copy, or nil for nil.
func checkCallers(m map[string]int) (map[string]int, error) {
	if m == nil {
		return nil, nil
	}
	total := 0
	for z, n := range m {
		if n < 0 {
			return nil, fmt.Errorf("%w: Callers[%q] is %d, want 0 or more", ErrConfig, z, n)
		}
		if n > 1<<40 {
			return nil, fmt.Errorf("%w: Callers[%q] is %d, want at most 2^40", ErrConfig, z, n)
		}
		total += n
	}
	if total == 0 {
		return nil, fmt.Errorf("%w: Callers counts no caller in any zone; pass nil to spread callers as the backends", ErrConfig)
	}
	return maps.Clone(m), nil
}
