package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/catalog"
)

// exactQuantile is the nearest-rank p-quantile of sorted xs.
func exactQuantile(xs []time.Duration, p float64) time.Duration {
	return xs[max(int(math.Ceil(p*float64(len(xs))))-1, 0)]
}

// quantiles are the ranks checked: the table's and others, the ends
// included.
var quantiles = []float64{0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 1}

// checkHistogram records xs and checks every quantile against the exact
// nearest-rank value, within HistogramError of it, and the mean exactly.
func checkHistogram(t *testing.T, xs []time.Duration) {
	t.Helper()
	var h Histogram
	var sum float64
	for _, x := range xs {
		h.Record(x)
		sum += float64(x)
	}
	sorted := slices.Sorted(slices.Values(xs))
	require.Equal(t, int64(len(xs)), h.Count())
	assert.InDelta(t, sum/float64(len(xs)), float64(h.Mean()), 1+1e-12*sum/float64(len(xs)), "mean")
	worst := 0.0
	for _, p := range quantiles {
		want, got := exactQuantile(sorted, p), h.Quantile(p)
		if want == 0 {
			assert.Zero(t, got, "p%v", 100*p)
			continue
		}
		rel := math.Abs(float64(got-want)) / float64(want)
		worst = max(worst, rel)
		assert.Less(t, rel, HistogramError, "p%v: got %v, exact %v", 100*p, got, want)
		if want < 256 {
			assert.Equal(t, want, got, "p%v: exact below 256 ns", 100*p)
		}
	}
	t.Logf("%d values: worst relative error %.5f%% (bound %.3f%%)", len(xs), 100*worst, 100*HistogramError)
}

// The histogram's quantiles are within HistogramError of the exact
// nearest-rank ones, on distributions with and without a tail, and exact
// where a bucket holds one distinct value.
func TestHistogram(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	gen := func(n int, f func() float64) []time.Duration {
		xs := make([]time.Duration, n)
		for i := range xs {
			xs[i] = time.Duration(max(f(), 0))
		}
		return xs
	}
	ms := float64(time.Millisecond)
	for _, tc := range []struct {
		name string
		xs   []time.Duration
	}{
		{"uniform 40-60ms", gen(100_000, func() float64 { return 40*ms + 20*ms*r.Float64() })},
		{"lognormal median 50ms sigma 1", gen(100_000, func() float64 { return 50 * ms * math.Exp(r.NormFloat64()) })},
		{"exponential mean 1ms", gen(50_000, func() float64 { return ms * r.ExpFloat64() })},
		{"mixture with a 20x tail", gen(100_000, func() float64 {
			if r.IntN(100) == 0 {
				return 1000*ms + ms*r.Float64()
			}
			return 50*ms + ms*r.Float64()
		})},
		{"nanoseconds", gen(10_000, func() float64 { return float64(r.IntN(1000)) })},
		{"few values", gen(7, func() float64 { return 100 * ms * r.Float64() })},
		{"one", []time.Duration{42 * time.Millisecond}},
		{"wide", gen(10_000, func() float64 { return math.Exp(r.Float64() * 40) })},
	} {
		t.Run(tc.name, func(t *testing.T) { checkHistogram(t, tc.xs) })
	}

	t.Run("fixed service times are exact", func(t *testing.T) {
		var h Histogram
		for i := range 1000 {
			h.Record([]time.Duration{50 * time.Millisecond, 150 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond}[i%4])
		}
		assert.Equal(t, []time.Duration{150 * time.Millisecond, 500 * time.Millisecond, 500 * time.Millisecond, 250 * time.Millisecond},
			[]time.Duration{h.Quantile(0.5), h.Quantile(0.95), h.Quantile(0.99), h.Mean()})
	})
	t.Run("empty", func(t *testing.T) {
		var h Histogram
		assert.Zero(t, h.Quantile(0.5))
		assert.Zero(t, h.Mean())
	})
	t.Run("extremes", func(t *testing.T) {
		var h Histogram
		h.Record(-5)
		h.Record(math.MaxInt64)
		assert.Equal(t, time.Duration(0), h.Quantile(0.5), "a negative value counts as zero")
		assert.Equal(t, time.Duration(math.MaxInt64), h.Quantile(1))
		assert.Equal(t, time.Duration(math.MaxInt64/2), h.Mean(), "the sum does not overflow")
	})
}

// The simulator's percentiles are the histogram's: within HistogramError
// of the exact nearest-rank percentiles of every latency of the run, here
// collected beside the histogram, on small runs of every kind of service
// time, queueing and retries included.
func TestSimulatedPercentiles(t *testing.T) {
	bs, err := ParseBackends("50ms:s=0.8:c=4,150ms:j=100ms:c=8,300ms,500ms:s=0.3:down=20s-30s")
	require.NoError(t, err)
	sc := Scenario{Name: "mixed", Backends: bs, Users: 60, Stages: []Stage{{40 * time.Second, 60}}, Think: 100 * time.Millisecond}
	for _, name := range []string{"rr", "leastconn", "lrt"} {
		t.Run(name, func(t *testing.T) {
			a, _ := catalog.Lookup(name)
			e, err := newEngine(&sc, Active|Passive|Retry, a, 1, 1)
			require.NoError(t, err)
			e.exact = []time.Duration{}
			require.True(t, e.run(nil))
			r := e.result(a.Name, 1)
			require.Positive(t, len(e.exact))
			exact := Result{}
			exact.SetLatencies(e.exact)
			t.Logf("%d requests; histogram p50 %v p95 %v p99 %v, exact %v %v %v", len(e.exact), r.Median, r.P95, r.P99, exact.Median, exact.P95, exact.P99)
			assert.Equal(t, exact.Mean, r.Mean, "the mean is exact")
			for _, pair := range [][2]time.Duration{{r.Median, exact.Median}, {r.P95, exact.P95}, {r.P99, exact.P99}} {
				assert.Less(t, math.Abs(float64(pair[0]-pair[1]))/float64(pair[1]), HistogramError, "%v against %v", pair[0], pair[1])
			}
			checkHistogram(t, e.exact)
		})
	}
}
