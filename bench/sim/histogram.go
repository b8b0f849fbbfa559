package sim

import (
	"math"
	"math/bits"
	"time"
)

// Histogram geometry: durations below 2^subBits ns are counted exactly;
// above, each power of two [2^e, 2^(e+1)) is cut into 2^subBits buckets
// of equal width 2^(e−subBits), at most 1/256 of any value in them.
const (
	subBits    = 8
	subBuckets = 1 << subBits
	// chunks: one for the exact values below 2^subBits, one per power of
	// two from 2^subBits to 2^62.
	chunks = 64 - subBits
)

// HistogramError is the bound on the relative error of a Histogram's
// quantiles: a quantile it returns differs from the exact nearest-rank
// one by less than this fraction of the exact value (1/256, under 0.4%),
// and not at all for durations below 256 ns or when the values in the
// bucket of the quantile are all equal.
const HistogramError = 1.0 / subBuckets

// Histogram counts durations in log-linear buckets, so that the
// percentiles of millions of requests take a few kilobytes rather than 8
// bytes a request: the simulator records every successful request's
// latency in one and reads the percentiles of Result from it. Each bucket
// keeps the smallest and largest value it has seen, so a quantile is
// interpolated between them by rank: exact when a bucket holds one
// distinct value (fixed service times), within HistogramError otherwise.
// The mean is exact (a 128-bit sum).
//
// Record costs a few nanoseconds and allocates only the first time a
// value falls in a new power of two (6 KB, at most 57 times). The zero
// value is an empty histogram. A Histogram is not safe for concurrent use.
type Histogram struct {
	n            uint64
	sumHi, sumLo uint64 // Σ values, 128 bits
	chunk        [chunks]*histChunk
}

// histChunk is one power of two's buckets.
type histChunk struct {
	count    [subBuckets]uint64
	min, max [subBuckets]int64
}

// bucket returns the chunk and bucket of v ≥ 0.
func bucket(v int64) (c, b int) {
	if v < subBuckets {
		return 0, int(v)
	}
	e := bits.Len64(uint64(v)) - 1 // v in [2^e, 2^(e+1)), e ≥ subBits
	return e - subBits + 1, int(v>>(e-subBits)) & (subBuckets - 1)
}

// Record adds one duration; a negative one counts as zero.
func (h *Histogram) Record(d time.Duration) {
	v := max(int64(d), 0)
	c, b := bucket(v)
	ch := h.chunk[c]
	if ch == nil {
		ch = new(histChunk)
		h.chunk[c] = ch
	}
	if ch.count[b] == 0 || v < ch.min[b] {
		ch.min[b] = v
	}
	if v > ch.max[b] {
		ch.max[b] = v
	}
	ch.count[b]++
	h.n++
	var carry uint64
	h.sumLo, carry = bits.Add64(h.sumLo, uint64(v), 0)
	h.sumHi += carry
}

// Count returns the number of durations recorded.
func (h *Histogram) Count() int64 { return int64(h.n) }

// Mean returns the exact mean of the durations recorded, rounded down;
// zero when there are none.
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	// The sum is below n·2^63, so sumHi < n and the quotient fits.
	q, _ := bits.Div64(h.sumHi, h.sumLo, h.n)
	return time.Duration(q)
}

// Quantile returns the nearest-rank p-quantile, p in [0, 1]: the
// smallest recorded value with at least a fraction p of the values at or
// below it, within HistogramError. It is zero when nothing was recorded.
func (h *Histogram) Quantile(p float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(1) // the rank-th smallest value, from 1
	if r := math.Ceil(p * float64(h.n)); r > 1 {
		rank = min(uint64(r), h.n)
	}
	var before uint64
	for _, ch := range h.chunk {
		if ch == nil {
			continue
		}
		for b, n := range ch.count {
			if before+n < rank {
				before += n
				continue
			}
			// The value sought is the i-th of the n in this bucket, which
			// all lie in [min, max]: interpolate by rank.
			i := rank - before - 1
			lo, hi := ch.min[b], ch.max[b]
			if n == 1 || lo == hi {
				return time.Duration(lo)
			}
			return time.Duration(lo + int64(math.Round(float64(hi-lo)*float64(i)/float64(n-1))))
		}
	}
	return 0 // not reached: the counts add up to n
}
