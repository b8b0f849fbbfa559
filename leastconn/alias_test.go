package leastconn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// implied returns the probability the alias table gives each backend: a
// column is drawn with probability 1/n, keeps itself with cut/2³² and
// goes to its alias otherwise.
func implied(t []column) []float64 {
	n := float64(len(t))
	p := make([]float64, len(t))
	for i, c := range t {
		keep := float64(c.cut) / (1 << 32)
		p[i] += keep / n
		p[c.alias] += (1 - keep) / n
	}
	return p
}

func entriesOf(ws ...uint64) []entry {
	es := make([]entry, len(ws))
	for i, w := range ws {
		es[i] = entry{w: w}
	}
	return es
}

func TestAliasWorkedExample(t *testing.T) {
	// The example in buildAlias's comment: weights 1, 2, 5.
	tab := buildAlias(entriesOf(1, 2, 5))
	assert.Equal(t, column{cut: 3 << 32 / 8, alias: 2}, tab[0])
	assert.Equal(t, column{cut: 6 << 32 / 8, alias: 2}, tab[1])
	assert.Equal(t, column{cut: 1 << 32, alias: 2}, tab[2])
	assert.InDeltaSlice(t, []float64{1.0 / 8, 2.0 / 8, 5.0 / 8}, implied(tab), 1e-12)
}

// The table gives every backend its weight share, to within the 2⁻³²
// rounding of each cut.
func TestAliasShares(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	random := func(n, maxW int) []uint64 {
		ws := make([]uint64, n)
		for i := range ws {
			ws[i] = 1 + uint64(r.IntN(maxW))
		}
		return ws
	}
	tests := [][]uint64{
		{1, 1},
		{1, 1000000},
		{1000000, 1, 1, 1, 1},
		{3, 1, 4, 1, 5, 9, 2, 6},
		random(1000, 100),
		random(1024, 1000000),
	}
	for _, ws := range tests {
		t.Run(fmt.Sprint("n=", len(ws)), func(t *testing.T) {
			tab := buildAlias(entriesOf(ws...))
			require.Len(t, tab, len(ws))
			var total float64
			for _, w := range ws {
				total += float64(w)
			}
			for i, p := range implied(tab) {
				assert.InDelta(t, float64(ws[i])/total, p, 1e-9, "backend %d", i)
				assert.LessOrEqual(t, tab[i].cut, uint64(1<<32))
			}
		})
	}
}

// drawExcept on an unweighted set returns every index left equally often
// and never an excluded one.
func TestDrawExceptUniform(t *testing.T) {
	s := &snapshot{entries: make([]entry, 10)}
	excluded := []int{0, 2, 5, 9}
	r := wyrand(7)
	counts := make([]int, 10)
	const draws = 60000
	for range draws {
		counts[s.drawExcept(&r, excluded)]++
	}
	for i, c := range counts {
		if i == 0 || i == 2 || i == 5 || i == 9 {
			assert.Zero(t, c, "excluded index %d drawn", i)
			continue
		}
		// 1/6 each; five standard deviations is about 0.0076.
		assert.InDelta(t, 1.0/6, float64(c)/draws, 0.0076, "index %d", i)
	}
}

func TestInsertKeepsOrder(t *testing.T) {
	xs := make([]int, 0, 8)
	for _, v := range []int{5, 1, 9, 3, 7, 0} {
		xs = xs[:insert(xs[:len(xs)+1], v)]
	}
	assert.Equal(t, []int{0, 1, 3, 5, 7, 9}, xs)
}

// below maps the full range of x onto [0, n) evenly.
func TestBelow(t *testing.T) {
	assert.Equal(t, uint64(0), below(0, 7))
	assert.Equal(t, uint64(6), below(math.MaxUint64, 7))
	assert.Equal(t, uint64(3), below(1<<63, 7))
}
