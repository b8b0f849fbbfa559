package lbhttp_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/lbhttp"
)

// exact returns the p-th percentile of xs, the smallest value with at
// least p% of them at or below it.
func exact(xs []time.Duration, p float64) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.999999) - 1
	return s[max(i, 0)]
}

// TestPercentile checks the estimate against the exact percentile of the
// same samples: never below it, at most an eighth above it (one bucket),
// for latency shapes a hedge delay meets.
func TestPercentile(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name string
		p    float64
		draw func() time.Duration
	}{
		{"uniform 10-20ms, p95", 95, func() time.Duration {
			return 10*time.Millisecond + time.Duration(rng.Int64N(int64(10*time.Millisecond)))
		}},
		{"1% at 20x, p95", 95, func() time.Duration {
			d := 5*time.Millisecond + time.Duration(rng.Int64N(int64(time.Millisecond)))
			if rng.IntN(100) == 0 {
				d *= 20
			}
			return d
		}},
		{"1% at 20x, p99.5", 99.5, func() time.Duration {
			d := 5*time.Millisecond + time.Duration(rng.Int64N(int64(time.Millisecond)))
			if rng.IntN(100) == 0 {
				d *= 20
			}
			return d
		}},
		{"exponential, mean 50ms, p50", 50, func() time.Duration {
			return time.Duration(rng.ExpFloat64() * float64(50*time.Millisecond))
		}},
		{"microseconds, p90", 90, func() time.Duration {
			return time.Duration(rng.Int64N(int64(40 * time.Microsecond)))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := lbhttp.NewPercentile(tt.p)
			require.NoError(t, err)
			xs := make([]time.Duration, 1500) // within one window: no halving yet
			for i := range xs {
				xs[i] = tt.draw()
				p.Observe(xs[i])
			}
			got, ok := p.Value()
			require.True(t, ok)
			want := exact(xs, tt.p)
			t.Logf("estimate %v, exact %v (%+.1f%%)", got, want, 100*(float64(got)/float64(want)-1))
			assert.GreaterOrEqual(t, got, want)
			assert.LessOrEqual(t, float64(got), 1.125*float64(want)+float64(time.Microsecond))
		})
	}
}

// TestPercentileFollows checks that the estimate follows a change of
// latency: after ten windows' worth at a new level, old samples weigh
// too little to matter.
func TestPercentileFollows(t *testing.T) {
	p, err := lbhttp.NewPercentile(95)
	require.NoError(t, err)
	for range 5000 {
		p.Observe(100 * time.Millisecond)
	}
	before, _ := p.Value()
	for range 20000 {
		p.Observe(10 * time.Millisecond)
	}
	after, _ := p.Value()
	assert.InDelta(t, 100*time.Millisecond, before, float64(13*time.Millisecond))
	assert.InDelta(t, 10*time.Millisecond, after, float64(1300*time.Microsecond))
}

// TestPercentileMinSamples checks that no estimate is reported before
// PercentileMinSamples latencies.
func TestPercentileMinSamples(t *testing.T) {
	p, err := lbhttp.NewPercentile(95)
	require.NoError(t, err)
	for range lbhttp.PercentileMinSamples - 1 {
		p.Observe(time.Millisecond)
	}
	_, ok := p.Value()
	assert.False(t, ok)
	for range 32 {
		p.Observe(time.Millisecond)
	}
	d, ok := p.Value()
	assert.True(t, ok)
	assert.InDelta(t, time.Millisecond, d, float64(130*time.Microsecond))
}

func TestNewPercentileErrors(t *testing.T) {
	for _, p := range []float64{0, -1, 100, 101, math.NaN()} {
		_, err := lbhttp.NewPercentile(p)
		assert.ErrorIs(t, err, balancer.ErrBadOption, "p %v", p)
	}
}

// TestPercentileConcurrent feeds one Percentile from 8 goroutines under
// -race: the estimate stays in range while counts are halved under them.
func TestPercentileConcurrent(t *testing.T) {
	p, err := lbhttp.NewPercentile(90)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 5000 {
				p.Observe(time.Duration(1+(i*8+w)%100) * time.Millisecond) // uniform 1..100ms
			}
		})
	}
	wg.Wait()
	d, ok := p.Value()
	require.True(t, ok)
	assert.InDelta(t, 90*time.Millisecond, d, float64(12*time.Millisecond))
}

func TestPercentileAllocs(t *testing.T) {
	p, err := lbhttp.NewPercentile(95)
	require.NoError(t, err)
	i := 0
	assert.Zero(t, testing.AllocsPerRun(5000, func() {
		i++
		p.Observe(time.Duration(i%1000) * time.Microsecond)
		p.Value()
	}))
}

func BenchmarkPercentile(b *testing.B) {
	p, err := lbhttp.NewPercentile(95)
	require.NoError(b, err)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		p.Observe(time.Duration(i%1000) * time.Microsecond)
	}
}
