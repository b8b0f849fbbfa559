package lbhttp_test

import (
	"math"
	"math/big"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/lbhttp"
)

// t0 is a fixed start for budgets driven in virtual time.
var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// spend asks b for retries at now until it refuses, at most limit times,
// and returns how many it allowed.
func spend(b *lbhttp.Budget, now time.Time, limit int) int {
	n := 0
	for n < limit && b.Retry(now) {
		n++
	}
	return n
}

// TestBudget checks the budget's arithmetic in virtual time: Ratio of the
// window's requests plus MinPerSecond × Window, and deposits that leave
// with the window.
func TestBudget(t *testing.T) {
	tests := []struct {
		name     string
		cfg      lbhttp.BudgetConfig
		requests int
		want     int // retries allowed right after them
	}{
		{"defaults, no traffic: the minimum", lbhttp.BudgetConfig{}, 0, 100},
		{"defaults, 1000 requests", lbhttp.BudgetConfig{}, 1000, 300},
		{"half, 2 a second over 1s", lbhttp.BudgetConfig{Ratio: 0.5, MinPerSecond: 2, Window: time.Second}, 100, 52},
		{"a tenth, 1 a second over 1s", lbhttp.BudgetConfig{Ratio: 0.1, MinPerSecond: 1, Window: time.Second}, 55, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := lbhttp.NewBudget(tt.cfg)
			require.NoError(t, err)
			for range tt.requests {
				b.Request(t0)
			}
			assert.Equal(t, tt.want, spend(b, t0, 10*tt.want+10))
			assert.False(t, b.Retry(t0), "spent")
			for range 10 {
				b.Request(t0)
			}
			ratio := tt.cfg.Ratio
			if ratio == 0 {
				ratio = lbhttp.DefaultBudgetRatio
			}
			assert.Equal(t, int(math.Floor(10*ratio+1e-9)), spend(b, t0, 100), "ten more requests earn their share")
		})
	}
}

// TestBudgetWindow checks that requests and retries leave the count as
// the window slides past them: a burst of retries spends the budget, and
// a window later it is whole again.
func TestBudgetWindow(t *testing.T) {
	b, err := lbhttp.NewBudget(lbhttp.BudgetConfig{Ratio: 0.2, MinPerSecond: 1, Window: 10 * time.Second})
	require.NoError(t, err)
	for range 100 {
		b.Request(t0)
	}
	assert.Equal(t, 30, spend(b, t0, 1000), "20 earned + 10 minimum")
	// Five seconds on: the same slots, still spent.
	assert.Zero(t, spend(b, t0.Add(5*time.Second), 1000))
	// Ten seconds on, the requests and the retries have left: the
	// minimum alone.
	assert.Equal(t, 10, spend(b, t0.Add(10*time.Second), 1000))
	// A clock far behind the slots the window holds is refused, not
	// counted in the present.
	assert.False(t, b.Retry(t0.Add(-time.Hour)))
}

// TestBudgetAnyTime drives the window of TestBudgetWindow from clocks
// that start anywhere a time.Time can: the zero Time (a virtual clock's
// start), just before 1970 (the window crosses it), now, and years
// beyond the int64 nanoseconds of UnixNano, and windows down to 10 ns,
// whose slots are a nanosecond.
func TestBudgetAnyTime(t *testing.T) {
	for _, start := range []time.Time{
		{}, time.Unix(-5, 0), time.Unix(-1, 999_999_999), t0,
		time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		for _, window := range []time.Duration{10 * time.Second, 10 * time.Nanosecond} {
			t.Run(start.Format(time.RFC3339Nano)+"/"+window.String(), func(t *testing.T) {
				b, err := lbhttp.NewBudget(lbhttp.BudgetConfig{Ratio: 0.2, MinPerSecond: 1e-12, Window: window})
				require.NoError(t, err)
				for range 100 {
					b.Request(start)
				}
				assert.Equal(t, 20, spend(b, start, 1000), "20 earned")
				assert.Zero(t, spend(b, start.Add(window/2), 1000), "half a window on: still spent")
				for range 50 {
					b.Request(start.Add(window / 2))
				}
				assert.Equal(t, 10, spend(b, start.Add(window/2), 1000), "50 more requests earn 10")
				// A window on, the first 100 and their 20 have left: the 50
				// earned 10 and spent them, 100 more earn 20.
				assert.Zero(t, spend(b, start.Add(window), 1000), "a window on")
				for range 100 {
					b.Request(start.Add(window))
				}
				assert.Equal(t, 20, spend(b, start.Add(window), 1000), "a window on, 100 more requests")
				assert.False(t, b.Retry(start.Add(-time.Hour)), "a clock far behind")
			})
		}
	}
}

// TestBudgetEpoch checks the slot numbers against ⌊t/w⌋ in math/big, in
// nanoseconds since 1970, for times over the whole range of time.Time
// and widths from a nanosecond to a year, where the quotient fits in
// int64.
func TestBudgetEpoch(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	times := []time.Time{{}, time.Unix(0, 0), time.Unix(-1, 0), time.Unix(0, -1), time.Unix(-1, 999_999_999), t0,
		time.Unix(math.MinInt64/4, 0), time.Unix(math.MaxInt64/4, 999_999_999)}
	for range 2000 {
		times = append(times, time.Unix(int64(r.Uint64())>>int(r.IntN(64)), r.Int64N(1e9)))
	}
	widths := []int64{1, 3, 7, 1e3, 999_999_937, 1e9, 7e9 + 3, 365 * 24 * 3600 * 1e9}
	checked := 0
	for _, tm := range times {
		ns := new(big.Int).Mul(big.NewInt(tm.Unix()), big.NewInt(1e9))
		ns.Add(ns, big.NewInt(int64(tm.Nanosecond())))
		for _, w := range widths {
			want := new(big.Int)
			want.Div(ns, big.NewInt(w)) // Euclidean: the floor, for w > 0
			if !want.IsInt64() {
				continue // epochOf keeps it modulo 2⁶⁴
			}
			checked++
			if got := lbhttp.EpochOf(tm, w); got != want.Int64() {
				t.Fatalf("epochOf(%v, %d) = %d, want %d", tm, w, got, want.Int64())
			}
		}
	}
	assert.Greater(t, checked, 10_000)
}

// TestBudgetConcurrent has 8 goroutines send requests and ask for
// retries at random-ish times in one window: the retries allowed never
// exceed the bound, and do reach it when asked for enough.
func TestBudgetConcurrent(t *testing.T) {
	b, err := lbhttp.NewBudget(lbhttp.BudgetConfig{Ratio: 0.2, MinPerSecond: 5, Window: time.Second})
	require.NoError(t, err)
	const workers, each = 8, 2000
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				now := t0.Add(time.Duration(i*workers+w) * 40 * time.Microsecond) // within 0.64s
				b.Request(now)
				if b.Retry(now) {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	bound := int64(0.2*workers*each + 5)
	assert.LessOrEqual(t, allowed.Load(), bound)
	assert.GreaterOrEqual(t, allowed.Load(), bound-int64(workers), "every goroutine asked for a retry per request")
	t.Logf("%d requests, %d retries allowed, bound %d", workers*each, allowed.Load(), bound)
}

func TestNewBudgetErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  lbhttp.BudgetConfig
		want string
	}{
		{"negative ratio", lbhttp.BudgetConfig{Ratio: -0.1}, "lbhttp: balancer: bad option: budget Ratio -0.1 is not a share of 0 or more"},
		{"NaN ratio", lbhttp.BudgetConfig{Ratio: math.NaN()}, "lbhttp: balancer: bad option: budget Ratio NaN is not a share of 0 or more"},
		{"negative minimum", lbhttp.BudgetConfig{MinPerSecond: -1}, "lbhttp: balancer: bad option: budget MinPerSecond -1 is not a rate of 0 or more"},
		{"infinite minimum", lbhttp.BudgetConfig{MinPerSecond: math.Inf(1)}, "lbhttp: balancer: bad option: budget MinPerSecond +Inf is not a rate of 0 or more"},
		{"negative window", lbhttp.BudgetConfig{Window: -time.Second}, "lbhttp: balancer: bad option: budget Window -1s is negative or shorter than 10ns"},
		{"tiny window", lbhttp.BudgetConfig{Window: 5}, "lbhttp: balancer: bad option: budget Window 5ns is negative or shorter than 10ns"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := lbhttp.NewBudget(tt.cfg)
			assert.Nil(t, b)
			assert.EqualError(t, err, tt.want)
			assert.ErrorIs(t, err, balancer.ErrBadOption)
		})
	}
}

// TestBudgetAllocs checks that neither method allocates.
func TestBudgetAllocs(t *testing.T) {
	b, err := lbhttp.NewBudget(lbhttp.BudgetConfig{})
	require.NoError(t, err)
	now := t0
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Millisecond) // crosses slots
		b.Request(now)
		b.Retry(now)
	}))
}

func BenchmarkBudget(b *testing.B) {
	bu, err := lbhttp.NewBudget(lbhttp.BudgetConfig{})
	require.NoError(b, err)
	b.Run("op=request", func(b *testing.B) {
		now := time.Now()
		b.ReportAllocs()
		for b.Loop() {
			bu.Request(now)
		}
	})
	b.Run("op=request/parallel", func(b *testing.B) {
		now := time.Now()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				bu.Request(now)
			}
		})
	})
	b.Run("op=retry", func(b *testing.B) {
		now := time.Now()
		b.ReportAllocs()
		for b.Loop() {
			bu.Retry(now)
		}
	})
}
