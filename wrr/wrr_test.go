package wrr_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/rr"
	"github.com/lbkit/lbkit/wrr"
)

func TestConformance(t *testing.T) {
	balancertest.Run(t, func() balancer.Balancer { return wrr.New() })
}

// The conformance kit again, with a schedule so small that every weighted
// set in it is scaled.
func TestConformanceScaled(t *testing.T) {
	balancertest.Run(t, func() balancer.Balancer { return wrr.New(wrr.WithMaxSchedule(1)) })
}

// weighted returns endpoints named a, b, c, ... with the given weights.
func weighted(ws ...int) []balancer.Backend {
	bs := make([]balancer.Backend, len(ws))
	for i, w := range ws {
		bs[i] = balancer.NewEndpoint(name(i), w)
	}
	return bs
}

// name returns a, b, ..., z, then b26, b27, ...
func name(i int) string {
	if i < 26 {
		return string(rune('a' + i))
	}
	return fmt.Sprint("b", i)
}

func start(x uint64) wrr.Option { return wrr.WithRand(func() uint64 { return x }) }

// picks returns the IDs of the next n picks, joined by spaces.
func picks(t *testing.T, p balancer.Picker, n int, req balancer.Request) string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		b, err := p.Pick(req)
		require.NoError(t, err)
		ids[i] = b.ID()
	}
	return strings.Join(ids, " ")
}

func TestSequence(t *testing.T) {
	tests := []struct {
		name    string
		start   uint64
		weights []int
		want    string
	}{
		// nginx's own example (ngx_http_upstream_round_robin.c): two periods.
		{"5,1,1", 0, []int{5, 1, 1}, "a a b a c a a a a b a c a a"},
		// The same, entered three turns in.
		{"5,1,1 from 3", 3, []int{5, 1, 1}, "a c a a a a b"},
		// Only the ratio counts: 10,2,2 is 5,1,1.
		{"10,2,2", 0, []int{10, 2, 2}, "a a b a c a a"},
		// Ties go to the first backend, as in nginx.
		{"1,1,5", 0, []int{1, 1, 5}, "c c a c b c c"},
		{"2,1", 0, []int{2, 1}, "a b a a b a"},
		{"4,3,2", 0, []int{4, 3, 2}, "a b c a b a c b a"},
		{"equal", 0, []int{3, 3, 3}, "a b c a b c"},
		{"one", 5, []int{7}, "a a a"},
		// The whole 64-bit start counts: 2⁴⁰+1 ≡ 3 (mod 7).
		{"large start", 1<<40 + 1, []int{5, 1, 1}, "a c a a a a b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := wrr.New(start(tt.start))
			require.NoError(t, p.Update(weighted(tt.weights...)))
			assert.Equal(t, tt.want, picks(t, p, strings.Count(tt.want, " ")+1, balancer.Request{}))
		})
	}
}

// With equal weights wrr is rr: the same sequence from the same start,
// including the step past Request.Avoid and past 2³² picks.
func TestEqualWeightsAreRoundRobin(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 64, 1000} {
		for _, w := range []int{1, 5} {
			for _, s := range []uint64{0, 12345, 1<<32 - 3} {
				t.Run(fmt.Sprintf("n=%d/weight=%d/start=%d", n, w, s), func(t *testing.T) {
					ws := make([]int, n)
					for i := range ws {
						ws[i] = w
					}
					bs := weighted(ws...)
					a := wrr.New(start(s))
					b := rr.New(rr.WithRand(func() uint64 { return s }))
					require.NoError(t, a.Update(bs))
					require.NoError(t, b.Update(bs))
					req := balancer.Request{}
					for i := range 3 * n {
						if i%5 == 4 {
							req.Avoid = name(i % n) // sometimes the one whose turn it is
						}
						x, err := a.Pick(req)
						require.NoError(t, err)
						y, err := b.Pick(req)
						require.NoError(t, err)
						require.Equal(t, y.ID(), x.ID(), "pick %d, avoiding %q", i, req.Avoid)
					}
				})
			}
		}
	}
}

// shareErrors picks m times and returns, for each backend, how far its share
// of picks is from its weight share, relative to the latter.
func shareErrors(t *testing.T, p balancer.Picker, bs []balancer.Backend, m int) []float64 {
	t.Helper()
	counts := map[string]int{}
	for range m {
		b, err := p.Pick(balancer.Request{})
		require.NoError(t, err)
		counts[b.ID()]++
	}
	total := 0
	for _, b := range bs {
		total += balancer.WeightOf(b)
	}
	errs := make([]float64, len(bs))
	for i, b := range bs {
		want := float64(balancer.WeightOf(b)) / float64(total)
		errs[i] = math.Abs(float64(counts[b.ID()])/float64(m)-want) / want
	}
	return errs
}

// Over a long run that is not a whole number of periods, every backend's
// share is within 1% of its weight share.
func TestShares(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, n := range []int{2, 5, 16, 64} {
		t.Run(fmt.Sprint("n=", n), func(t *testing.T) {
			ws := make([]int, n)
			total := 0
			for i := range ws {
				ws[i] = 1 + r.IntN(100)
				total += ws[i]
			}
			bs := weighted(ws...)
			p := wrr.New(wrr.WithRand(r.Uint64))
			require.NoError(t, p.Update(bs))
			// Enough that the lightest backend (weight 1 at worst) is due
			// 300 picks, plus part of a period.
			m := 300*total + r.IntN(total)
			for i, e := range shareErrors(t, p, bs, m) {
				assert.Less(t, e, 0.01, "backend %d of %v", i, ws)
			}
		})
	}
}

// An Update mid-stream: the turn carries on, picks leave the removed
// backends at once, and shares follow the new weights.
func TestUpdateMidStream(t *testing.T) {
	p := wrr.New(start(0))
	require.NoError(t, p.Update(weighted(5, 1, 1)))
	assert.Equal(t, "a a b", picks(t, p, 3, balancer.Request{}))

	// The counter is at 3: in the equal-weight set of four, that is d.
	require.NoError(t, p.Update(weighted(1, 1, 1, 1)))
	assert.Equal(t, "d a b", picks(t, p, 3, balancer.Request{}))

	// Reweighted, with a removed and e added, in another order.
	next := []balancer.Backend{
		balancer.NewEndpoint("e", 1), balancer.NewEndpoint("b", 30),
		balancer.NewEndpoint("c", 20), balancer.NewEndpoint("d", 49),
	}
	require.NoError(t, p.Update(next))
	errs := shareErrors(t, p, next, 100*100+37)
	for i, e := range errs {
		assert.Less(t, e, 0.01, "backend %s", next[i].ID())
	}
}

func TestAvoid(t *testing.T) {
	tests := []struct {
		name    string
		weights []int
		avoid   string
	}{
		{"light", []int{5, 1, 1}, "b"},
		{"heavy", []int{5, 1, 1}, "a"},
		// a's runs are hundreds of slots long.
		{"heavy, long runs", []int{1000, 1, 1}, "a"},
		{"two", []int{3, 1}, "a"},
		{"unknown", []int{2, 1}, "zz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := wrr.New(start(0))
			bs := weighted(tt.weights...)
			require.NoError(t, p.Update(bs))
			total := 0
			for _, w := range tt.weights {
				total += w
			}
			counts := map[string]int{}
			for range 2 * total {
				b, err := p.Pick(balancer.Request{Avoid: tt.avoid})
				require.NoError(t, err)
				counts[b.ID()]++
			}
			assert.Zero(t, counts[tt.avoid], "picked the backend to avoid: %v", counts)
			assert.Len(t, counts, len(bs)-strings.Count(strings.Join(idsOf(bs), " "), tt.avoid),
				"every other backend is picked: %v", counts)
		})
	}
	t.Run("next turn", func(t *testing.T) {
		// A pick that avoids the backend whose turn it is gets the next
		// turn's backend, without taking that turn from the next request.
		ws := []int{5, 3, 1, 1}
		plain, avoiding := wrr.New(start(0)), wrr.New(start(0))
		require.NoError(t, plain.Update(weighted(ws...)))
		require.NoError(t, avoiding.Update(weighted(ws...)))
		turns := strings.Fields(picks(t, plain, 21, balancer.Request{}))
		for i, turn := range turns[:20] {
			want := turn
			if turn == "c" {
				want = turns[i+1] // c's runs are one long (5,3,1,1 has no c c)
			}
			b, err := avoiding.Pick(balancer.Request{Avoid: "c"})
			require.NoError(t, err)
			assert.Equal(t, want, b.ID(), "pick %d", i)
		}
	})
	t.Run("only one", func(t *testing.T) {
		p := wrr.New()
		require.NoError(t, p.Update(weighted(3)))
		assert.Equal(t, "a a", picks(t, p, 2, balancer.Request{Avoid: "a"}))
	})
}

func idsOf(bs []balancer.Backend) []string {
	ids := make([]string, len(bs))
	for i, b := range bs {
		ids[i] = b.ID()
	}
	return ids
}

func TestWithMaxSchedule(t *testing.T) {
	tests := []struct {
		name    string
		slots   int
		weights []int
		want    string // one period
	}{
		{"large enough", 7, []int{5, 1, 1}, "a a b a c a a"},
		// 10 slots for 1000:1: the 1 is held to one slot, the 1000 gets 9,
		// and b's turn comes when its current weight ties a's, at step 6.
		{"scaled", 10, []int{1000, 1}, "a a a a a b a a a a"},
		// Below twice the set size, the capacity is twice the set size.
		{"raised to 2n", 1, []int{2, 1}, "a b a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := wrr.New(start(0), wrr.WithMaxSchedule(tt.slots))
			require.NoError(t, p.Update(weighted(tt.weights...)))
			assert.Equal(t, tt.want, picks(t, p, strings.Count(tt.want, " ")+1, balancer.Request{}))
		})
	}
}

func TestRandomStart(t *testing.T) {
	const proxies = 400
	first := map[string]int{}
	for range proxies {
		p := wrr.New()
		require.NoError(t, p.Update(weighted(1, 1, 1, 1)))
		b, err := p.Pick(balancer.Request{})
		require.NoError(t, err)
		first[b.ID()]++
	}
	// Each backend expects 100 first picks; 50 is over seven standard
	// deviations away, so this fails only if the start is not random.
	for _, id := range []string{"a", "b", "c", "d"} {
		assert.Greater(t, first[id], 50, "first picks: %v", first)
	}
}

func TestUpdateErrors(t *testing.T) {
	p := wrr.New()
	good := weighted(2, 1)
	require.NoError(t, p.Update(good))
	tests := []struct {
		name string
		set  []balancer.Backend
		want error
		msg  string
	}{
		{"duplicate", balancer.Endpoints("x:1", "y:1", "x:1"), balancer.ErrDuplicateID, `wrr: update: balancer: duplicate backend ID "x:1" at positions 0 and 2`},
		{"nil", []balancer.Backend{good[0], nil}, balancer.ErrNilBackend, "wrr: update: balancer: nil backend at position 1"},
		{"zero weight", weighted(1, 0), balancer.ErrBadWeight, `wrr: update: balancer: weight out of range: "b" at position 1 has weight 0, want 1 to 1000000`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := p.Update(tt.set)
			require.Error(t, err)
			assert.True(t, errors.Is(err, tt.want))
			assert.EqualError(t, err, tt.msg)
			// One period of the previous set, 2,1, from wherever it is.
			period := strings.Fields(picks(t, p, 3, balancer.Request{}))
			slices.Sort(period)
			assert.Equal(t, []string{"a", "a", "b"}, period, "the previous set stays")
		})
	}
}

func TestMaxWeights(t *testing.T) {
	// 1000 backends at the largest weight but one at 1: scaled, and no
	// backend starved.
	ws := make([]int, 1000)
	for i := range ws {
		ws[i] = balancer.MaxWeight
	}
	ws[0] = 1
	p := wrr.New()
	require.NoError(t, p.Update(weighted(ws...)))
	seen := map[string]bool{}
	for range wrr.DefaultMaxSchedule {
		b, err := p.Pick(balancer.Request{})
		require.NoError(t, err)
		seen[b.ID()] = true
	}
	assert.Len(t, seen, 1000)
}

func TestPickAllocs(t *testing.T) {
	p := wrr.New()
	bs := weighted(1000, 5, 3, 1)
	require.NoError(t, p.Update(bs))
	for _, req := range []balancer.Request{{}, {Key: "192.0.2.1", Attempt: 1}, {Avoid: "a"}, {Avoid: "b"}} {
		assert.Zero(t, testing.AllocsPerRun(1000, func() { _, _ = p.Pick(req) }), "%+v", req)
	}
}

// Picks race with updates (run with -race); every pick is in a set that was
// published, and once the updates stop the shares are the last set's.
func TestConcurrentPickUpdate(t *testing.T) {
	sets := [][]balancer.Backend{weighted(5, 1, 1), weighted(1, 2, 3, 4, 5), weighted(7)}
	union := map[string]bool{}
	for _, s := range sets {
		for _, b := range s {
			union[b.ID()] = true
		}
	}
	p := wrr.New()
	require.NoError(t, p.Update(sets[0]))
	var wg sync.WaitGroup
	errc := make(chan error, 5)
	for range 4 {
		wg.Go(func() {
			for range 20000 {
				b, err := p.Pick(balancer.Request{Avoid: "a"})
				if err != nil || !union[b.ID()] {
					errc <- fmt.Errorf("pick: %v, %v", b, err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 300 {
			if err := p.Update(sets[i%len(sets)]); err != nil {
				errc <- err
				return
			}
		}
	})
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	last := weighted(1, 2, 3, 4, 5)
	require.NoError(t, p.Update(last))
	for i, e := range shareErrors(t, p, last, 15*100) {
		assert.Less(t, e, 0.01, "backend %d", i)
	}
}
