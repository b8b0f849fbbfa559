package lrt

import (
	"math"
	"sync/atomic"

	"github.com/lbkit/lbkit/balancer"
)

// state is what the picker knows about one backend, kept by a
// balancer.Registry so that it outlives the snapshots that point to it.
//
// est and the in-flight counter, the two words Pick reads, share the first
// cache line; the struct is padded to two lines (128 bytes, a size class the
// allocator aligns to 128) so that no other backend's state shares them.
// Safe for concurrent use; must not be copied.
type state struct {
	// est is the latency estimate and the time it was last set, packed into
	// one word (see pack) so that Pick reads both without a lock and Done
	// replaces both with one compare-and-swap. Zero until Update sets it.
	est atomic.Uint64
	// ok is the success-only estimate and the count of consecutive errors
	// (see packOK), which Done uses to size an error's penalty. Written by
	// Done only, with a plain store after est's CAS: two Dones racing on one
	// backend may lose one error count or one success sample, which shifts
	// a penalty by one step and nothing else.
	ok       atomic.Uint64
	inflight balancer.InFlight // its Busy is the state's: see Busy
	// gen is the Picker's update count when this backend was last in a
	// published set, so that Update can tell those that stay from those
	// that come back. Guarded by the Picker's mu.
	gen uint64
	_   [128 - 16 - 64 - 8]byte
}

// Busy reports whether requests to the backend are in flight. The
// Registry keeps the state of a removed backend while it is busy, so that
// the Dones of its requests still find the counter they raised, even after
// many other backends have come and gone (balancer.Busy).
func (s *state) Busy() bool { return s.inflight.Busy() }

// Seal seals the in-flight counter of an idle state the Registry evicts,
// so that a Pick still holding the state from an older snapshot does not
// count a request on it that no Done would find (balancer.Sealer).
func (s *state) Seal() bool { return s.inflight.Seal() }

var (
	_ balancer.Busy   = (*state)(nil)
	_ balancer.Sealer = (*state)(nil)
)

// An est word holds, in its high 32 bits, the estimate in nanoseconds as a
// float32 whose sign bit is set while the estimate is provisional (the
// initial estimate of a backend not yet measured; see Update), and in its
// low 32 bits the time of the last update, in ticks (see config.shift).
//
// float32 keeps 24 significant bits: one part in 16 million, fine enough
// that the smallest step the EWMA takes at ten thousand responses a second
// (one part in 100,000 of the difference) is not rounded away. 32 bits of
// ticks wrap after 2³² ticks, 26 days at the default tick; see age and
// stale for how estimates that old are read.
const provisional = 1 << 63

func pack(est float64, stamp uint32, prov bool) uint64 {
	w := uint64(math.Float32bits(float32(est)))<<32 | uint64(stamp)
	if prov {
		w |= provisional
	}
	return w
}

// value returns the estimate of an est word, in nanoseconds, provisional or
// not.
func value(w uint64) float64 {
	return float64(math.Float32frombits(uint32(w>>32) &^ (1 << 31)))
}

func stamp(w uint64) uint32 { return uint32(w) }

// measured reports whether an est word holds a measurement: set, and not
// provisional.
func measured(w uint64) bool { return w != 0 && w&provisional == 0 }

// An ok word holds the success-only estimate (float32 nanoseconds, with
// the sign bit set while it is a guess taken from a provisional estimate)
// and, in its low 32 bits, the number of failures since the last success.
func packOK(base float64, guess bool, errs uint32) uint64 {
	return pack(base, errs, guess)
}

func unpackOK(w uint64) (base float64, guess bool, errs uint32) {
	return value(w), !measured(w), stamp(w)
}

// age returns how many ticks have passed from then to now. The subtraction
// wraps, so ages are right up to 2³² − 2³⁰ ticks (19 days at the default
// tick; the estimate has decayed to nothing long before). A stamp up to
// 2³⁰ ticks ahead of now, from a clock that stepped back or a Done that
// raced ahead of this one, counts as now.
func age(now, then uint32) uint32 {
	d := now - then
	if d > math.MaxUint32-1<<30 {
		return 0
	}
	return d
}

// mix is the peak-sensitive, time-weighted moving average (Finagle's
// PeakEwma): a sample above the estimate replaces it at once; one below
// pulls it down by the weight 1−w that the time since the last update
// earned, w = e^(−Δt/τ). Weighting by time rather than by count makes the
// estimate forget at the same pace whatever the request rate: after τ of
// steady samples x, the gap to x has shrunk by a factor e.
//
// Worked example (τ = 10 s): estimate 100 ms; a 300 ms response sets it to
// 300 ms; a 100 ms response 1 s later gives w = e^(−0.1) = 0.905 and
// 300·0.905 + 100·0.095 = 281 ms; a 50 ms response 1 ms after that has
// earned 1−w = 0.0001 of the gap only, and leaves 280.94 ms.
func mix(est, x, w float64) float64 {
	if x > est {
		return x
	}
	return est*w + x*(1-w)
}

// observe records one finished request at time now (in ticks): its latency
// rtt in nanoseconds, and whether it failed.
//
// A success is a sample of its latency. A failure is a sample of
// penalty(k)·max(rtt, base), where base is the success-only estimate and k
// the number of consecutive failures, so that a fast failure never looks
// fast, repeated failures push the backend away quickly, and a steady
// trickle of isolated errors raises the estimate by one factor without
// compounding (it is measured from base, which errors do not touch).
//
// The first Done after a provisional estimate replaces it outright rather
// than mixing with it: the provisional value was a guess.
func (s *state) observe(now uint32, rtt float64, failed bool, c *config) {
	base, guess, errs := unpackOK(s.ok.Load())
	for {
		old := s.est.Load()
		w := c.decay(age(now, stamp(old)))
		b, g := base, guess
		if b == 0 && g {
			// Nothing learned yet (a zero word reads as a guess of 0):
			// size penalties from the estimate we have, the
			// provisional one usually, until a success replaces it.
			b = value(old)
		}
		x, n := rtt, uint32(0)
		switch {
		case failed:
			n = min(errs+1, uint32(len(c.penalty)-1))
			x = c.penalty[n] * max(rtt, b)
		case g:
			b, g = rtt, false
		default:
			b = mix(b, rtt, w)
		}
		est := x
		if measured(old) {
			est = mix(value(old), x, w)
		}
		// Stamp with the later of now and the old stamp: a clock that
		// stepped back (or a Done that lost a race to a later one) must
		// not make this backend's estimate look older than it is, which
		// Pick would read as extra decay.
		at := now
		if age(now, stamp(old)) == 0 {
			at = stamp(old)
		}
		if s.est.CompareAndSwap(old, pack(min(est, maxEstimate), at, false)) {
			s.ok.Store(packOK(min(b, maxEstimate), g, n))
			return
		}
	}
}

// maxEstimate caps estimates at 2⁴³ ns (about 2 h 26 min), far below
// float32's range, so that costs (estimate × in-flight) stay finite and
// comparable.
const maxEstimate = float64(1 << 43)

// decayed returns the estimate of w as read at now: e^(−age/τ) of the stored
// value, so that a backend nobody has sent to for a while looks faster and
// gets tried again. After τ idle it is 37% of what it was, after 3τ 5%.
func (c *config) decayed(w uint64, now uint32) float64 {
	return value(w) * c.decay(age(now, stamp(w)))
}

// decay returns e^(−ticks·tick/τ).
func (c *config) decay(ticks uint32) float64 {
	return expNeg(float64(ticks) * c.perTick)
}

// expNeg returns e^(−x) for x ≥ 0. Below x = 1/16, which at the default τ
// is any age under 0.6 s and so nearly every call in a busy service, it
// uses the Taylor polynomial to the cube, whose relative error is below
// x⁴/24 < 7·10⁻⁷ and which costs a few multiplications, inlined; math.Exp
// costs several times that. Beyond, it calls math.Exp.
func expNeg(x float64) float64 {
	if x < 1.0/16 {
		return 1 - x*(1-x*(0.5-x*(1.0/6)))
	}
	return expFar(x)
}

// expFar is expNeg's slow path, kept out of line so that expNeg stays
// within the compiler's inlining budget.
//
//go:noinline
func expFar(x float64) float64 { return math.Exp(-x) }

// cheaper reports whether cost cb, stamped sb, is lower than ca, stamped
// sa, when both are decayed to the same moment.
//
// Both would be multiplied by e^(−(now−stamp)/τ) for a common now, so now
// cancels and only the gap between the stamps counts: the older one is
// decayed by e^(−gap/τ) relative to the newer. Pick therefore needs no
// clock, and the exponent is never positive, so nothing overflows. The
// gap is read as a signed 32-bit tick count: right for stamps less than
// 2³¹ ticks (13 days at the default tick) apart.
//
// Which of the two is older is a coin toss in P2C, so a branch on it would
// be mispredicted half the time; the multipliers are selected as integer
// bits instead, which the compiler turns into conditional moves.
func (c *config) cheaper(ca float64, sa uint32, cb float64, sb uint32) bool {
	g := float64(int32(sa-sb)) * c.perTick // > 0: b is older
	one, d := math.Float64bits(1), math.Float64bits(expNeg(math.Abs(g)))
	ma, mb := one, d
	if g < 0 {
		ma, mb = d, one
	}
	return cb*math.Float64frombits(mb) < ca*math.Float64frombits(ma)
}
