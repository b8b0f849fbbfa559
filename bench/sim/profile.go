package sim

import (
	"fmt"
	"iter"
	"math"
	"math/bits"
	"math/rand/v2"
	"time"
)

// What the simulator and a live runner (package bench/live) must agree
// on, written once: who the users are, when they come and go, how long a
// backend takes, and how a run is cut into series steps.

// UserAddr returns the client address of virtual user u (from 0), its
// affinity key: 10.1.0.1, 10.1.0.2, ..., 10.1.0.255, 10.1.1.0, ...: one
// distinct IPv4 address per user, spread over /24s so that a prefix mode
// still sees many clients.
func UserAddr(u int) string {
	return fmt.Sprintf("10.%d.%d.%d", 1+u>>16, (u>>8)&0xff, (1+u)&0xff)
}

// UserChange is one user joining or leaving a scenario's profile.
type UserChange struct {
	// At is the time since the scenario started.
	At time.Duration
	// User is the user's number, from 0.
	User int
	// Join is true when the user joins, false when it leaves.
	Join bool
}

// UserChanges returns, in time order, the users the stages add and remove
// after time zero (the Users present at time zero are not listed): as in
// k6, user k joins when a rising ramp reaches k+1 users and leaves when a
// falling one drops to k, the last to join the first to leave. A user
// that leaves finishes the request it has in flight.
func (s *Scenario) UserChanges() iter.Seq[UserChange] {
	return func(yield func(UserChange) bool) {
		var t0 time.Duration
		a := s.Users
		for _, st := range s.Stages {
			d, b := st.Duration, st.Target
			for k := a; k < b; k++ {
				if !yield(UserChange{At: t0 + mulDiv(d, k+1-a, b-a), User: k, Join: true}) {
					return
				}
			}
			for k := a - 1; k >= b; k-- {
				if !yield(UserChange{At: t0 + mulDiv(d, a-k, a-b), User: k}) {
					return
				}
			}
			t0 += d
			a = b
		}
	}
}

// FirstSend returns when user u, one of the Users present at time zero
// (0 ≤ u < Users), sends its first request: u·Think/Users, so that the
// first sends are spread evenly over one Think time.
func (s *Scenario) FirstSend(u int) time.Duration {
	if u <= 0 || s.Users <= 0 || s.Think <= 0 {
		return 0
	}
	return mulDiv(s.Think, u, s.Users)
}

// mulDiv returns d·n/m, rounded down, without overflow in the product:
// user u's first send and a ramp's join times multiply a time by up to
// MaxUsers. d and n must not be negative and m must be positive; a
// quotient too large for a Duration is the largest one.
func mulDiv(d time.Duration, n, m int) time.Duration {
	hi, lo := bits.Mul64(uint64(d), uint64(n))
	if hi >= uint64(m) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(m))
	return time.Duration(min(q, math.MaxInt64))
}

// ServiceTime draws one service time of b from r: Latency, or uniform in
// [Latency−Jitter, Latency+Jitter], or lognormal of median Latency and
// shape Sigma, or one of its Samples; then, with a tail, TailFactor times
// that for a share TailShare of the draws (one more draw from r). It is at
// least a nanosecond and at most MaxLength.
func (b *Backend) ServiceTime(r *rand.Rand) time.Duration {
	d := b.baseTime(r)
	if b.TailShare > 0 && r.Float64() < b.TailShare {
		d = time.Duration(min(float64(d)*b.TailFactor, float64(MaxLength)))
	}
	return d
}

// baseTime draws a service time without the tail.
func (b *Backend) baseTime(r *rand.Rand) time.Duration {
	l := int64(b.Latency)
	switch {
	case len(b.Samples) > 0:
		return max(b.Samples[r.IntN(len(b.Samples))], 1)
	case b.Jitter > 0:
		j := int64(b.Jitter)
		return time.Duration(l - j + r.Int64N(2*j+1))
	case b.Sigma > 0:
		d := min(float64(l)*math.Exp(b.Sigma*r.NormFloat64()), float64(MaxLength))
		return time.Duration(max(1, int64(d)))
	}
	return time.Duration(l)
}

// fixed reports whether b's service time is always its Latency.
func (b *Backend) fixed() bool {
	return b.Jitter == 0 && b.Sigma == 0 && len(b.Samples) == 0 && b.TailShare == 0
}

// SeriesStep is the step of a run's Series: the shortest of a few round
// steps that cuts length into at most 300 samples.
func SeriesStep(length time.Duration) time.Duration {
	for _, s := range []time.Duration{100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
		time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute} {
		if length <= 300*s {
			return s
		}
	}
	return length / 300
}
