package rr_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/rr"
)

func TestConformance(t *testing.T) {
	balancertest.Run(t, func() balancer.Balancer { return rr.New() })
}

func addrs(n int) []string {
	a := make([]string, n)
	for i := range a {
		a[i] = fmt.Sprintf("10.0.%d.%d:8080", i/256, i%256)
	}
	return a
}

func pickIDs(t *testing.T, p *rr.Picker, n int) []string {
	t.Helper()
	out := make([]string, n)
	for i := range out {
		b, err := p.Pick(balancer.Request{})
		require.NoError(t, err)
		out[i] = b.ID()
	}
	return out
}

func TestSequence(t *testing.T) {
	tests := []struct {
		name  string
		start uint64
		n     int
		want  []int // indexes into the set
	}{
		{"one backend", 0, 1, []int{0, 0, 0}},
		{"three from zero", 0, 3, []int{0, 1, 2, 0, 1, 2, 0}},
		{"three from seven", 7, 3, []int{1, 2, 0, 1}},
		// 2⁴⁰+3 ≡ 4 (mod 5): the whole 64-bit start counts.
		{"five from a large start", 1<<40 + 3, 5, []int{4, 0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := rr.New(rr.WithRand(func() uint64 { return tt.start }))
			as := addrs(tt.n)
			require.NoError(t, p.Update(balancer.Endpoints(as...)))
			want := make([]string, len(tt.want))
			for i, w := range tt.want {
				want[i] = as[w]
			}
			assert.Equal(t, want, pickIDs(t, p, len(want)))
		})
	}
}

// Over whole rounds every backend gets exactly its share.
func TestEqualShares(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 64, 1000} {
		t.Run(fmt.Sprint("n=", n), func(t *testing.T) {
			p := rr.New()
			require.NoError(t, p.Update(balancer.Endpoints(addrs(n)...)))
			counts := map[string]int{}
			for _, id := range pickIDs(t, p, n*50) {
				counts[id]++
			}
			require.Len(t, counts, n)
			for id, c := range counts {
				assert.Equal(t, 50, c, id)
			}
		})
	}
}

// The rotation runs on unbroken past 2³² picks (a 32-bit counter would jump
// back to the first backend there).
func TestCounterPast32Bits(t *testing.T) {
	const n = 7
	start := uint64(1)<<32 - 3
	p := rr.New(rr.WithRand(func() uint64 { return start }))
	as := addrs(n)
	require.NoError(t, p.Update(balancer.Endpoints(as...)))
	var want []string
	for i := range uint64(2 * n) {
		want = append(want, as[(start+i)%n])
	}
	assert.Equal(t, want, pickIDs(t, p, 2*n))
}

// The random start spreads the first picks of a fleet of proxies.
func TestRandomStart(t *testing.T) {
	const proxies, n = 400, 4
	as := addrs(n)
	first := map[string]int{}
	for range proxies {
		p := rr.New()
		require.NoError(t, p.Update(balancer.Endpoints(as...)))
		b, err := p.Pick(balancer.Request{})
		require.NoError(t, err)
		first[b.ID()]++
	}
	// Each backend expects 100 first picks; 50 is over seven standard
	// deviations away, so this fails only if the start is not random.
	for _, a := range as {
		assert.Greater(t, first[a], 50, "first picks: %v", first)
	}
}

func TestWithRandIsUsed(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	want := r.Uint64()
	r = rand.New(rand.NewPCG(9, 9))
	p := rr.New(rr.WithRand(r.Uint64))
	as := addrs(5)
	require.NoError(t, p.Update(balancer.Endpoints(as...)))
	b, err := p.Pick(balancer.Request{})
	require.NoError(t, err)
	assert.Equal(t, as[want%5], b.ID())
}

func TestUpdateKeepsTurn(t *testing.T) {
	p := rr.New(rr.WithRand(func() uint64 { return 0 }))
	require.NoError(t, p.Update(balancer.Endpoints("a:1", "b:1", "c:1")))
	assert.Equal(t, []string{"a:1", "b:1"}, pickIDs(t, p, 2))
	require.NoError(t, p.Update(balancer.Endpoints("a:1", "b:1", "c:1", "d:1")))
	// The counter is at 2: the next turn is the third backend, not the first.
	assert.Equal(t, []string{"c:1", "d:1", "a:1"}, pickIDs(t, p, 3))
}

func TestUpdateErrors(t *testing.T) {
	p := rr.New()
	good := balancer.Endpoints("a:1", "b:1")
	require.NoError(t, p.Update(good))
	tests := []struct {
		name string
		set  []balancer.Backend
		want error
		msg  string
	}{
		{"duplicate", balancer.Endpoints("x:1", "y:1", "x:1"), balancer.ErrDuplicateID, `rr: update: balancer: duplicate backend ID "x:1" at positions 0 and 2`},
		{"nil", []balancer.Backend{good[0], nil}, balancer.ErrNilBackend, "rr: update: balancer: nil backend at position 1"},
		{"negative weight", []balancer.Backend{balancer.NewEndpoint("n:1", -1)}, balancer.ErrBadWeight, `rr: update: balancer: weight out of range: "n:1" at position 0 has weight -1, want 1 to 1000000`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := p.Update(tt.set)
			require.Error(t, err)
			assert.True(t, errors.Is(err, tt.want))
			assert.EqualError(t, err, tt.msg)
			for _, id := range pickIDs(t, p, 10) {
				assert.Contains(t, []string{"a:1", "b:1"}, id)
			}
		})
	}
}

func TestPickAllocs(t *testing.T) {
	p := rr.New()
	require.NoError(t, p.Update(balancer.Endpoints(addrs(64)...)))
	req := balancer.Request{Key: "192.0.2.1", Avoid: "10.0.0.3:8080"}
	assert.Zero(t, testing.AllocsPerRun(1000, func() { _, _ = p.Pick(req) }))
}
