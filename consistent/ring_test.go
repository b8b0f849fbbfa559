package consistent_test

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/consistent"
)

// keyShares gives p the set bs and counts how many of k keys map to each
// backend.
func keyShares(t *testing.T, p balancer.Balancer, bs []balancer.Backend, k int) map[string]int {
	t.Helper()
	require.NoError(t, p.Update(bs))
	return shares(assign(t, p, keys(k)))
}

// shares counts how many of ids fall on each ID.
func shares(ids []string) map[string]int {
	m := map[string]int{}
	for _, id := range ids {
		m[id]++
	}
	return m
}

// The bar: 64 backends of weight 1 at the default 150 points each,
// 1M keys, peak-to-mean at most 1.25. (Measured: 1.174; the low end 0.814.)
func TestRingBalance(t *testing.T) {
	const n, k = 64, 1_000_000
	count := keyShares(t, consistent.NewRing(), balancer.Endpoints(addrs(n)...), k)
	require.Len(t, count, n)
	mean := float64(k) / n
	peak := float64(slices.Max(slices.Collect(mapValues(count)))) / mean
	low := float64(slices.Min(slices.Collect(mapValues(count)))) / mean
	t.Logf("ring, %d backends, %d keys: peak/mean %.3f, min/mean %.3f", n, k, peak, low)
	assert.LessOrEqual(t, peak, 1.25)
	assert.GreaterOrEqual(t, low, 0.75)
}

func mapValues(m map[string]int) func(func(int) bool) {
	return func(yield func(int) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// Key shares follow weights: every backend within 15% of its weighted
// share, on the plain ring and on a capped one.
func TestRingWeights(t *testing.T) {
	bs := make([]balancer.Backend, 16)
	total := 0
	for i := range bs {
		w := 1 + i%4
		bs[i] = balancer.NewEndpoint(addrs(16)[i], w)
		total += w
	}
	const k = 200_000
	for _, tt := range []struct {
		name string
		r    *consistent.Ring
	}{
		{"default", consistent.NewRing()},
		// 16 backends of total weight 40 want 6000 points; the cap
		// scales them to 3000, 75 per unit of weight.
		{"capped", consistent.NewRing(consistent.WithMaxRingSize(3000))},
	} {
		t.Run(tt.name, func(t *testing.T) {
			count := keyShares(t, tt.r, bs, k)
			tol := 0.15
			if tt.name == "capped" {
				tol = 0.25 // half the points
			}
			for _, b := range bs {
				want := float64(k) * float64(balancer.WeightOf(b)) / float64(total)
				assert.InEpsilon(t, want, float64(count[b.ID()]), tol, "%s, weight %d", b.ID(), balancer.WeightOf(b))
			}
		})
	}
}

// remap compares two assignments of the same keys: how many keys moved,
// and how many of those were not on the backend that left (0 if none left).
func remap(before, after []string, left string) (moved, others int) {
	for i := range before {
		if before[i] != after[i] {
			moved++
			if before[i] != left {
				others++
			}
		}
	}
	return moved, others
}

// without returns bs minus its i-th backend.
func without(bs []balancer.Backend, i int) []balancer.Backend {
	return append(slices.Clone(bs[:i]), bs[i+1:]...)
}

// When one of N backends leaves, exactly its keys move (about 1/N of them);
// when one joins, about 1/(N+1) move, all of them to it.
func TestRingRemoveAndJoin(t *testing.T) {
	const n, k = 64, 200_000
	bs := balancer.Endpoints(addrs(n + 1)...)
	ks := keys(k)
	r := consistent.NewRing()
	require.NoError(t, r.Update(bs[:n]))
	before := assign(t, r, ks)
	count := shares(before)

	for _, gone := range []int{0, 17, 40, n - 1} {
		t.Run(fmt.Sprint("remove ", gone), func(t *testing.T) {
			r := consistent.NewRing()
			require.NoError(t, r.Update(without(bs[:n], gone)))
			moved, others := remap(before, assign(t, r, ks), bs[gone].ID())
			assert.Zero(t, others, "keys of other backends must not move")
			assert.Equal(t, count[bs[gone].ID()], moved, "every key of the removed backend moves")
			assert.InEpsilon(t, 1.0/n, float64(moved)/k, 0.3)
		})
	}
	t.Run("join", func(t *testing.T) {
		r := consistent.NewRing()
		require.NoError(t, r.Update(bs))
		after := assign(t, r, ks)
		moved, _ := remap(before, after, "")
		for i := range ks {
			if before[i] != after[i] {
				require.Equal(t, bs[n].ID(), after[i], "a key moved to a backend other than the new one")
			}
		}
		assert.InEpsilon(t, 1.0/(n+1), float64(moved)/k, 0.3)
	})
}

// held picks m requests for keys, round robin over them, and keeps them all
// in flight (no Done), returning the in-flight count per ID and the largest
// ratio seen of a backend's load to its bound ⌈c·m/n⌉ after each pick.
func held(t *testing.T, r *consistent.Ring, ks []string, m, n int, c float64) (map[string]int, float64) {
	t.Helper()
	load := map[string]int{}
	worst := 0.0
	for i := range m {
		b, err := r.Pick(balancer.Request{Key: ks[i%len(ks)]})
		require.NoError(t, err)
		load[b.ID()]++
		bound := math.Ceil(c * float64(i+1) / float64(n))
		worst = max(worst, float64(load[b.ID()])/bound)
	}
	return load, worst
}

// A handful of hot keys with 1000 requests in flight: on the plain ring
// they pile onto a few backends; with bounded loads no backend ever holds
// more than ⌈c·m/n⌉ of the m in flight, at every step.
func TestBoundedHotKeys(t *testing.T) {
	const n, m, c = 10, 1000, 1.25
	bs := balancer.Endpoints(addrs(n)...)
	hot := []string{"hot-1", "hot-2", "hot-3", "hot-4", "hot-5"}
	limit := int(math.Ceil(c * m / n)) // 125

	plain, bounded := plainAndBounded(t, bs, c)
	load, _ := held(t, plain, hot, m, n, c)
	assert.LessOrEqual(t, len(load), len(hot), "plain ring: hot keys on at most 5 backends")
	assert.GreaterOrEqual(t, slices.Max(slices.Collect(mapValues(load))), m/len(hot), "plain ring: one backend holds at least 200")

	load, worst := held(t, bounded, hot, m, n, c)
	peak := slices.Max(slices.Collect(mapValues(load)))
	t.Logf("bounded, c=%.2f: peak %d in flight of %d on %d backends (bound %d); plain: over 200", c, peak, m, n, limit)
	assert.LessOrEqual(t, peak, limit)
	assert.LessOrEqual(t, worst, 1.0, "a backend passed ⌈c·m/n⌉ on the way")
	assert.Len(t, load, n, "the spill reaches every backend")
}

// With weights the bound is per unit of weight: ⌈c·m·w/W⌉.
func TestBoundedWeighted(t *testing.T) {
	const m, c = 1000, 1.5
	bs := []balancer.Backend{
		balancer.NewEndpoint("a:1", 1), balancer.NewEndpoint("b:1", 3),
		balancer.NewEndpoint("c:1", 1), balancer.NewEndpoint("d:1", 5),
	}
	r := consistent.NewRing(consistent.WithBoundedLoad(c))
	require.NoError(t, r.Update(bs))
	load, _ := held(t, r, []string{"hot"}, m, 1, c)
	for _, b := range bs {
		limit := int(math.Ceil(c * m * float64(balancer.WeightOf(b)) / 10))
		assert.LessOrEqual(t, load[b.ID()], limit, b.ID())
	}
	// One hot key fills its backends in ring order until every one is at
	// its bound: all 1000 fit under the 1500 of capacity.
	total := 0
	for _, v := range load {
		total += v
	}
	assert.Equal(t, m, total)
}

// plainAndBounded returns a plain ring and a bounded one with factor c,
// both given the set bs.
func plainAndBounded(t *testing.T, bs []balancer.Backend, c float64) (plain, bounded *consistent.Ring) {
	t.Helper()
	plain, bounded = consistent.NewRing(), consistent.NewRing(consistent.WithBoundedLoad(c))
	require.NoError(t, plain.Update(bs))
	require.NoError(t, bounded.Update(bs))
	return plain, bounded
}

// A full backend spills to the next distinct backend clockwise: the one a
// retry (Attempt 1) would get.
func TestBoundedSpillOrder(t *testing.T) {
	plain, r := plainAndBounded(t, balancer.Endpoints(addrs(4)...), 1.25)
	for _, k := range keys(20) {
		want := []string{
			pickDone(t, plain, balancer.Request{Key: k}),
			pickDone(t, plain, balancer.Request{Key: k, Attempt: 1}),
		}
		// Pick 1 with 0 in flight: bound ⌈1.25·1/4⌉ = 1, the key's own.
		// Pick 2 with 1 in flight: bound ⌈1.25·2/4⌉ = 1, it is full.
		x, err := r.Pick(balancer.Request{Key: k})
		require.NoError(t, err)
		y, err := r.Pick(balancer.Request{Key: k})
		require.NoError(t, err)
		assert.Equal(t, want, []string{x.ID(), y.ID()}, "key %q", k)
		r.Done(x, balancer.Result{})
		r.Done(y, balancer.Result{})
	}
}

// Without pressure (each request done before the next) the bounded ring
// maps every key, retry and avoid exactly as the plain ring does.
func TestBoundedNoPressure(t *testing.T) {
	plain, r := plainAndBounded(t, balancer.Endpoints(addrs(64)...), 1.25)
	for i, k := range keys(20000) {
		req := balancer.Request{Key: k, Attempt: i % 3}
		if i%5 == 0 {
			req.Avoid = addrs(64)[i%64]
		}
		require.Equal(t, pickDone(t, plain, req), pickDone(t, r, req), "%+v", req)
	}
}

// In-flight counts follow backends across updates by ID: requests picked
// before an update still bound their backend after it, and Done for them,
// late or repeated, is harmless.
func TestBoundedAcrossUpdate(t *testing.T) {
	const c = 2.0
	two := balancer.Endpoints("a:1", "b:1")
	three := balancer.Endpoints("a:1", "b:1", "c:1")
	// A key whose backend is the same on both sets.
	var key, own string
	plain2, plain3 := consistent.NewRing(), consistent.NewRing()
	require.NoError(t, plain2.Update(two))
	require.NoError(t, plain3.Update(three))
	for _, k := range keys(100) {
		if x := pickDone(t, plain2, balancer.Request{Key: k}); x == pickDone(t, plain3, balancer.Request{Key: k}) {
			key, own = k, x
			break
		}
	}
	require.NotEmpty(t, key)
	var others []balancer.Backend
	for _, b := range three {
		if b.ID() != own {
			others = append(others, b)
		}
	}

	r := consistent.NewRing(consistent.WithBoundedLoad(c))
	require.NoError(t, r.Update(two))
	var inflight []balancer.Backend
	for range 8 {
		b, err := r.Pick(balancer.Request{Key: key})
		require.NoError(t, err)
		inflight = append(inflight, b)
	}
	// The bound ⌈2·(m+1)/2⌉ = m+1 never binds on two backends.
	assert.Equal(t, 8, shares(ids(inflight))[own])

	// A third backend joins; the 8 are still counted, so with 8 in flight
	// (bound ⌈2·9/3⌉ = 6) the key spills off its full backend.
	require.NoError(t, r.Update(three))
	assert.NotEqual(t, own, pickDone(t, r, balancer.Request{Key: key}), "the carried count must bound the backend")

	// The key's backend leaves with its requests in flight; they finish
	// late, each Done twice, among Dones for nil and a stranger.
	require.NoError(t, r.Update(others))
	for _, b := range inflight {
		r.Done(b, balancer.Result{})
		r.Done(b, balancer.Result{})
	}
	r.Done(nil, balancer.Result{})
	r.Done(balancer.NewEndpoint("never:1", 1), balancer.Result{})
	// It comes back idle, and takes its key again.
	require.NoError(t, r.Update(three))
	for range 3 {
		assert.Equal(t, own, pickDone(t, r, balancer.Request{Key: key}))
	}
}

func ids(bs []balancer.Backend) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.ID()
	}
	return out
}

// With bounded loads, InFlight reads a backend's count by ID; without, the
// Ring counts nothing and reports 0.
func TestRingInFlight(t *testing.T) {
	tests := []struct {
		name string
		opts []consistent.RingOption
		want int64 // while one request is in flight
	}{
		{"bounded", []consistent.RingOption{consistent.WithBoundedLoad(1.25)}, 1},
		{"plain", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := consistent.NewRing(tt.opts...)
			require.NoError(t, r.Update(balancer.Endpoints("a:80")))
			b, err := r.Pick(balancer.Request{Key: "k"})
			require.NoError(t, err)
			assert.Equal(t, tt.want, r.InFlight("a:80"))
			assert.Zero(t, r.InFlight("nobody:80"))
			r.Done(b, balancer.Result{})
			assert.Zero(t, r.InFlight("a:80"))
		})
	}
}
