package consistent

import (
	"fmt"
	"math"

	"github.com/lbkit/lbkit/balancer"
)

// Defaults and limits of the options.
const (
	defaultVnodes      = 150
	defaultMaxRingSize = 1 << 20
	maxRingSizeLimit   = 1 << 24 // 16M points, about 300 MB: past any useful ring

	// factorScale is the fixed-point scale of the bounded-load factor: c is
	// kept in ten-thousandths so that capacities are computed in exact
	// integers (1.1 × 10 / 11 is 1, not the float 1.0000000000000002 whose
	// ceiling is 2).
	factorScale = 10_000
	maxFactor   = 100 // beyond this, bounded loads never bind in practice

	defaultTableSize = 65537   // prime; the Maglev paper's small table
	maxTableSize     = 5000011 // prime; Envoy's limit for its Maglev table
	slotsPerBackend  = 10      // a table needs at least this many slots per backend
)

// RingOption configures a Ring. Pass options to NewRing.
type RingOption interface {
	applyRing(*ringConfig)
}

// MaglevOption configures a Maglev. Pass options to NewMaglev.
type MaglevOption interface {
	applyMaglev(*maglevConfig)
}

type ringConfig struct {
	vnodes  int    // points per unit of weight
	maxSize int    // cap on the total number of points
	factor  uint64 // bounded-load factor c in ten-thousandths; 0 means unbounded
	err     error  // the first invalid option, which Update reports
}

type maglevConfig struct {
	size uint64 // table size, prime
	err  error  // the first invalid option, which Update reports
}

type ringOptionFunc func(*ringConfig)

func (f ringOptionFunc) applyRing(c *ringConfig) { f(c) }

type maglevOptionFunc func(*maglevConfig)

func (f maglevOptionFunc) applyMaglev(c *maglevConfig) { f(c) }

// invalid records the first invalid option (balancer.BadOption). Options
// cannot fail where they are written, and must not panic, so the error
// waits for Update, which returns it every time: the Ring or Maglev stays
// empty and Pick returns balancer.ErrNoBackend.
func invalid(err *error, option string, value any, want string) {
	if *err == nil {
		*err = balancer.BadOption(option, value, want)
	}
}

// WithVnodes sets the number of virtual nodes (points on the ring) per unit
// of weight. The default is 150: the key shares of 64 backends then range
// from 0.81 to 1.17 of the mean (TestRingBalance), a spread that shrinks as
// 1/√n for n points. More points even out the shares, at the cost of memory
// (about 20 bytes per point) and Update time; the total is capped by
// WithMaxRingSize. n must be in [1, 2²⁴]; otherwise Update returns an
// error.
func WithVnodes(n int) RingOption {
	return ringOptionFunc(func(c *ringConfig) {
		if countOK(c, "WithVnodes", n) {
			c.vnodes = n
		}
	})
}

// WithMaxRingSize caps the number of points on the ring. The default is
// 2²⁰ (1,048,576 points, about 20 MB with the lookup index), which the
// default 150 points per unit of weight reach only when the weights of the
// set add up to more than 6990. Past the cap every backend's points are
// scaled down in proportion to its weight, keeping at least one each, as
// Envoy's ring_hash does with max_ring_size. n must be in [1, 2²⁴];
// otherwise Update returns an error.
func WithMaxRingSize(n int) RingOption {
	return ringOptionFunc(func(c *ringConfig) {
		if countOK(c, "WithMaxRingSize", n) {
			c.maxSize = n
		}
	})
}

// countOK reports whether n, given to the option named, is a count of
// points in [1, 2²⁴], and records the error if not.
func countOK(c *ringConfig, option string, n int) bool {
	if n < 1 || n > maxRingSizeLimit {
		invalid(&c.err, option, n, fmt.Sprintf("1 to %d", maxRingSizeLimit))
		return false
	}
	return true
}

// WithBoundedLoad turns on consistent hashing with bounded loads (Mirrokni,
// Thorup and Zadimoghaddam, 2018; HAProxy's hash-balance-factor): no
// backend takes a request while it has ⌈c·(m+1)·w/W⌉ or more in flight,
// where m is the number of requests in flight on the Ring, w the backend's
// weight and W the set's total weight (⌈c·(m+1)/n⌉ for equal weights). A
// key whose backend is full goes to the next distinct backend clockwise
// that is not. c = 1.25 is a common choice: no backend holds more than 25%
// above the average (give or take Picks racing for the same backend; see
// the package doc), and keys move only while their backend is full.
//
// The Ring then counts requests in flight, so call Done once for every
// backend Pick returned. Without this option there is no bound and Done
// does nothing.
//
// c is taken to four decimal places and must be above 1 and at most 100;
// otherwise Update returns an error.
func WithBoundedLoad(c float64) RingOption {
	return ringOptionFunc(func(cfg *ringConfig) {
		// Written so that NaN fails too.
		if !(c > 1 && c <= maxFactor) || math.Round(c*factorScale) <= factorScale {
			invalid(&cfg.err, "WithBoundedLoad", c, fmt.Sprintf("a factor above 1 and at most %d", maxFactor))
			return
		}
		cfg.factor = uint64(math.Round(c * factorScale))
	})
}

// WithTableSize sets the number of slots in the Maglev lookup table. The
// default is 65537. m must be a prime no larger than 5000011, and Update
// refuses a set of more than m/10 backends. Each backend gets ⌊M/n⌋ or
// ⌈M/n⌉ slots (for equal weights), so its share of keys is within n/M of the
// mean, and a larger table also moves fewer keys when the set changes, at 4
// bytes per slot for lookups (8 with the retry data). The Maglev paper
// suggests M > 100·n; primes near powers of ten are 65537, 655373 and
// 5000011.
func WithTableSize(m int) MaglevOption {
	return maglevOptionFunc(func(c *maglevConfig) {
		if m < 2 || m > maxTableSize || !isPrime(uint64(m)) {
			invalid(&c.err, "WithTableSize", m, fmt.Sprintf("a prime no larger than %d", maxTableSize))
			return
		}
		c.size = uint64(m)
	})
}

// isPrime reports whether m is prime, by trial division: m is at most
// maxTableSize, so this takes at most about 1100 divisions.
func isPrime(m uint64) bool {
	if m < 2 {
		return false
	}
	for d := uint64(2); d*d <= m; d++ {
		if m%d == 0 {
			return false
		}
	}
	return true
}
