package lbhttp

import (
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// Percentile keeps a running estimate of one percentile of a stream of
// latencies, such as the 95th percentile of the time backends take to
// answer, which is when "The Tail at Scale" (Dean and Barroso, 2013)
// advises sending a hedged request. The Transport keeps one for
// Config.HedgePercentile; a simulator can feed one directly.
//
//	p95, _ := lbhttp.NewPercentile(95)
//	p95.Observe(elapsed) // for each answer
//	if d, ok := p95.Value(); ok { ... } // false until PercentileMinSamples
//
// It is a histogram of log-linear buckets, eight to each doubling from
// about 16 µs (every latency below that shares the first sixteen buckets,
// a microsecond wide), so that an estimate is at most an eighth above the
// true percentile; Value reports a bucket's upper edge, erring long. The
// estimate follows a change of latency: once the histogram holds
// percentileWindow samples, every count is halved, so that old samples
// weigh half as much as new ones after each such window. No clock is
// involved: the window is counted in samples.
//
// Cost: Observe is two atomic adds, and every percentileRefresh samples
// a pass over the buckets (about 300 of them, a few hundred nanoseconds)
// that updates the estimate Value returns; Value is one atomic load.
// Neither allocates or takes a lock. Counts halved while another
// goroutine adds to them may lose that add: an estimate does not need
// every sample. A Percentile is safe for concurrent use and must not be
// copied.
type Percentile struct {
	// Immutable after NewPercentile.
	q float64 // the percentile, as a fraction: 0.95

	// Atomic.
	seen   atomic.Uint64 // samples ever observed: the refresh cadence
	value  atomic.Int64  // the estimate in nanoseconds; 0 until enough samples
	counts [percentileBuckets]atomic.Uint64
}

// PercentileMinSamples is how many samples a Percentile needs before
// Value reports an estimate.
const PercentileMinSamples = 100

const (
	// percentileRefresh is how often, in samples, the estimate is
	// recomputed.
	percentileRefresh = 32
	// percentileWindow is the number of samples held above which every
	// count is halved.
	percentileWindow = 2048
	// percentileShift turns nanoseconds into the histogram's unit, 1024
	// ns, about a microsecond.
	percentileShift = 10
	// percentileBuckets covers latencies up to 2^40 units (13 days).
	percentileBuckets = 16 + 36*8
)

// NewPercentile returns a Percentile estimating the p-th percentile, p
// strictly between 0 and 100, or an error for any other p.
func NewPercentile(p float64) (*Percentile, error) {
	if !(p > 0 && p < 100) {
		return nil, fmt.Errorf("lbhttp: %w: percentile %v is not between 0 and 100", balancer.ErrBadOption, p)
	}
	return &Percentile{q: p / 100}, nil
}

// Observe adds one latency to the stream. A negative one counts as 0.
func (p *Percentile) Observe(d time.Duration) {
	p.counts[bucketOf(d)].Add(1)
	if n := p.seen.Add(1); n%percentileRefresh == 0 {
		p.refresh()
	}
}

// Value returns the estimate, and false until the Percentile has seen
// PercentileMinSamples latencies.
func (p *Percentile) Value() (time.Duration, bool) {
	v := p.value.Load()
	return time.Duration(v), v > 0
}

// refresh recomputes the estimate from the counts, and halves them once
// they hold more than the window.
func (p *Percentile) refresh() {
	var total uint64
	for i := range p.counts {
		total += p.counts[i].Load()
	}
	if p.seen.Load() >= PercentileMinSamples && total > 0 {
		// The smallest bucket whose cumulative count reaches q × total.
		want := uint64(math.Ceil(p.q * float64(total)))
		var cum uint64
		for i := range p.counts {
			cum += p.counts[i].Load()
			if cum >= want {
				p.value.Store(int64(upperEdge(i)))
				break
			}
		}
	}
	if total > percentileWindow {
		for i := range p.counts {
			c := &p.counts[i]
			for {
				v := c.Load()
				if v == 0 || c.CompareAndSwap(v, v/2) {
					break
				}
			}
		}
	}
}

// bucketOf returns the bucket of d: buckets 0 to 15 hold 0 to 15 units
// one unit apart; above, each doubling of the unit count is cut into 8
// buckets.
func bucketOf(d time.Duration) int {
	v := uint64(max(d, 0)) >> percentileShift
	if v < 16 {
		return int(v)
	}
	l := bits.Len64(v)  // 5 or more
	top := v >> (l - 4) // 8 to 15: the leading four bits
	i := 16 + (l-5)*8 + int(top-8)
	return min(i, percentileBuckets-1)
}

// upperEdge returns the end of bucket i: the least duration of bucket
// i+1.
func upperEdge(i int) time.Duration {
	if i < 16 {
		return time.Duration(i+1) << percentileShift
	}
	l := (i-16)/8 + 5
	top := uint64((i-16)%8 + 8)
	return time.Duration((top + 1) << (l - 4) << percentileShift)
}
