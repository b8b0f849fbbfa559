package consistent_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/consistent"
)

// Key shares on Maglev follow the table's near-equal slots: with 64
// backends and 1M keys every backend is within 3% of the mean (the table
// itself is within 0.1%; the rest is key sampling, σ ≈ 0.8%).
func TestMaglevKeyBalance(t *testing.T) {
	const n, k = 64, 1_000_000
	count := keyShares(t, consistent.NewMaglev(), balancer.Endpoints(addrs(n)...), k)
	require.Len(t, count, n)
	for id, c := range count {
		assert.InEpsilon(t, float64(k)/n, float64(c), 0.03, id)
	}
}

// Disruption when one of N backends leaves or joins, Maglev against the
// ring, on the same keys. The ring moves exactly the leaving backend's keys;
// Maglev moves those and a few more (the table is rebuilt, and some slots
// change hands between backends that stayed), as the paper says: its goal
// is minimal, not zero, disruption. Measured at N=64 over 200k keys: the
// ring moves 1.00 to 1.20 of 1/N (the leaving backend's own share) and no
// other key; Maglev about 1.3 of 1/N, of which about 0.3 are keys of
// backends that stayed.
func TestDisruption(t *testing.T) {
	const n, k = 64, 200_000
	bs := balancer.Endpoints(addrs(n + 1)...)
	ks := keys(k)
	algos := []struct {
		name     string
		new      func() balancer.Balancer
		maxMoved float64 // most keys moved, in units of 1/N (or 1/(N+1) for a join)
		maxOther float64 // most keys moved between backends that stayed, same unit
	}{
		{"ring", func() balancer.Balancer { return consistent.NewRing() }, 1.3, 0},
		{"maglev", func() balancer.Balancer { return consistent.NewMaglev() }, 1.6, 0.6},
	}
	for _, a := range algos {
		t.Run(a.name, func(t *testing.T) {
			b := a.new()
			require.NoError(t, b.Update(bs[:n]))
			before := assign(t, b, ks)
			for _, gone := range []int{0, 31, n - 1} {
				require.NoError(t, b.Update(without(bs[:n], gone)))
				moved, others := remap(before, assign(t, b, ks), bs[gone].ID())
				t.Logf("%s: 1 of %d leaves: %.4f of keys moved (%.2f/N), %.4f from backends that stayed",
					a.name, n, float64(moved)/k, float64(moved)*n/k, float64(others)/k)
				assert.LessOrEqual(t, float64(moved)*n/k, a.maxMoved, "remove %d", gone)
				assert.GreaterOrEqual(t, float64(moved)*n/k, 0.7, "remove %d", gone)
				assert.LessOrEqual(t, float64(others)*n/k, a.maxOther, "remove %d", gone)
			}
			require.NoError(t, b.Update(bs))
			after := assign(t, b, ks)
			moved, _ := remap(before, after, "")
			toNew := 0
			for i := range ks {
				if before[i] != after[i] && after[i] == bs[n].ID() {
					toNew++
				}
			}
			others := moved - toNew
			t.Logf("%s: 1 joins %d: %.4f of keys moved (%.2f/(N+1)), %.4f between backends that stayed",
				a.name, n, float64(moved)/k, float64(moved)*(n+1)/k, float64(others)/k)
			assert.LessOrEqual(t, float64(moved)*(n+1)/k, a.maxMoved)
			assert.GreaterOrEqual(t, float64(moved)*(n+1)/k, 0.7)
			assert.LessOrEqual(t, float64(others)*(n+1)/k, a.maxOther)
		})
	}
}

// Weights: key shares follow weights within 5%.
func TestMaglevWeights(t *testing.T) {
	bs := make([]balancer.Backend, 12)
	total := 0
	for i := range bs {
		w := 1 + i%4
		bs[i] = balancer.NewEndpoint(fmt.Sprint("w-", i), w)
		total += w
	}
	const k = 300_000
	count := keyShares(t, consistent.NewMaglev(), bs, k)
	for _, b := range bs {
		want := float64(k) * float64(balancer.WeightOf(b)) / float64(total)
		assert.InEpsilon(t, want, float64(count[b.ID()]), 0.05, "%s weight %d", b.ID(), balancer.WeightOf(b))
	}
}
