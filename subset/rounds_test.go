package subset_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
)

// bookSubset is the SRE book's deterministic subsetting as the book
// writes it ("Load Balancing in the Datacenter"): clients are grouped in
// rounds of n/k; each round shuffles the sorted backends with the round
// as the seed, and client i of its round takes the i-th slice of k.
func bookSubset(ids []string, client, size int) []string {
	count := max(1, len(ids)/size)
	round := client / count
	order := slices.Sorted(slices.Values(ids))
	r := rand.New(rand.NewPCG(uint64(round), 0))
	r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	start := (client % count) * size
	return order[start:min(start+size, len(order))]
}

// Why the ring: with the book's rounds, one backend leaving a fleet of
// 300 with subsets of 20 changes the round size (300/20 = 15 clients, then
// 299/20 = 14), regroups every client and reshuffles nearly every subset;
// the ring moves a few dozen pairs at most (TestChurn pins its figure).
func TestRoundsChurn(t *testing.T) {
	const count, n, size = 100, 300, 20
	var ids []string
	for _, b := range fleet(n) {
		ids = append(ids, b.ID())
	}
	less := slices.Delete(slices.Clone(ids), 137, 138)
	pairs := 0
	for c := range count {
		after := bookSubset(less, c, size)
		for _, id := range bookSubset(ids, c, size) {
			if !slices.Contains(after, id) {
				pairs++
			}
		}
	}
	t.Logf("the book's rounds: one of %d leaves, %d of %d pairs move", n, pairs, count*size)
	assert.Greater(t, pairs, count*size/2, "most pairs move")
	_, _, ring := moved(t, modes[1], count, size, fleet(n), slices.Delete(fleet(n), 137, 138))
	assert.Less(t, 10*ring, pairs, "the ring moves a tenth as many at most")
}
