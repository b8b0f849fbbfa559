package consistent

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cespare/xxhash/v2"

	"github.com/lbkit/lbkit/balancer"
)

// Maglev is Maglev hashing (Eisenbud et al., NSDI 2016): a lookup table of
// prime size in which each backend owns a near-equal share of slots. Create
// it with NewMaglev; the zero value is not ready.
//
// Pick and Update are safe for concurrent use. Pick takes no lock and
// allocates nothing; it reads an immutable table that Update builds aside
// and publishes with one atomic store. Calls to Update are serialised by a
// mutex that Pick never takes. A Maglev must not be copied.
//
// The struct fills whole cache lines (a size class the allocator aligns to
// 64 bytes), so that the snapshot pointer every Pick reads shares its line
// with no one else's data: unpadded, a 32-byte Maglev can share a line with
// whatever the caller allocated next to it, and every write there evicts
// the pointer from the other cores' caches.
type Maglev struct {
	// Atomic: read by every Pick.
	snap atomic.Pointer[maglevSnap] // the published table; empty, never nil, after NewMaglev

	// Immutable after NewMaglev.
	cfg maglevConfig

	// Guarded by itself: taken by Update only.
	mu sync.Mutex
	_  [64 - 8 - unsafe.Sizeof(maglevConfig{}) - 8]byte
}

// maglevSnap is an immutable published table.
type maglevSnap struct {
	circle        // positions are the table's slots
	size   uint64 // len(owner), the table size M
}

var _ balancer.Balancer = (*Maglev)(nil)

// NewMaglev returns a Maglev with an empty set; call Update to give it
// backends. The default table has 65537 slots. An invalid option is
// reported by Update.
func NewMaglev(opts ...MaglevOption) *Maglev {
	m := &Maglev{cfg: maglevConfig{size: defaultTableSize}}
	for _, o := range opts {
		o.applyMaglev(&m.cfg)
	}
	m.snap.Store(&maglevSnap{})
	return m
}

// Update replaces the set and rebuilds the table. It validates bs first (see
// balancer.Validate) and refuses a set of more than M/10 backends; on error
// it keeps the previous set. It also returns, every time, the error of an
// invalid option given to NewMaglev.
//
// The table depends only on the backends' placement keys (each one's hash
// key, balancer.HashKeyer, or by default its ID) and weights, not on the
// order of the set nor, for a backend with a hash key, on its ID, and is
// the same in every process. Two backends with one placement key are
// refused (balancer.ErrDuplicateHashKey). Weights are honoured:
// a backend of weight w gets about w/W of the slots (W the total weight),
// and never less than one.
//
// Cost: O(M log M) for M slots when weights are equal (the paper's
// population), plus up to n checks per round of turns when they differ;
// BenchmarkUpdate measures it. Memory: 8 bytes per slot.
func (m *Maglev) Update(bs []balancer.Backend) error {
	if m.cfg.err != nil {
		return fmt.Errorf("consistent: maglev update: %w", m.cfg.err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	set, err := balancer.NewSet(bs)
	if err != nil {
		return fmt.Errorf("consistent: maglev update: %w", err)
	}
	if uint64(set.Len())*slotsPerBackend > m.cfg.size {
		return fmt.Errorf("consistent: maglev update: %d backends need a table of at least %d slots, %d per backend; this one has %d (see WithTableSize)",
			set.Len(), uint64(set.Len())*slotsPerBackend, slotsPerBackend, m.cfg.size)
	}
	keys, err := balancer.HashKeys(set)
	if err != nil {
		return fmt.Errorf("consistent: maglev update: %w", err)
	}
	s := &maglevSnap{circle: newCircle(set), size: m.cfg.size}
	if set.Len() > 0 {
		s.populate(keys)
		s.setGaps()
	}
	m.snap.Store(s)
	return nil
}

// turn is one backend's state while the table is populated: its
// permutation of the slots (offset, then steps of skip, mod M), how far
// along it is, and when its next turn comes.
type turn struct {
	owner  int32
	rank   int32  // position of its key in key order: the order of turns within a round
	next   uint64 // the next slot of its permutation
	skip   uint64
	weight uint64
	taken  uint64 // turns taken so far
	round  uint64 // the round of its next turn
}

// populate fills the table as in the paper's Pseudocode 1: backends take
// turns, each claiming the next slot of its own permutation that is still
// free, until every slot is taken. offset = h₀(key) mod M and
// skip = h₁(key) mod (M−1) + 1, with h₀ and h₁ xxhash under seeds 0 and 1
// and key the backend's placement key, keys[i] (its ID by default); since
// M is prime every skip is coprime with it and each permutation visits
// every slot.
//
// Within a round backends take turns in the order of their keys, so the
// order of the set does not matter. Weights follow Envoy's Maglev: a
// backend of weight w takes its k-th turn in round ⌈k·maxW/w⌉, so the
// heaviest takes one every round and the others w for every maxW rounds.
// In round 0 every backend takes one, so each has at least one slot.
func (s *maglevSnap) populate(keys []string) {
	turns, minW, maxW := s.start(keys)
	if minW < maxW {
		s.populateWeighted(turns, maxW)
		return
	}
	// Equal weights: every backend takes a turn every round, in key order.
	for filled := uint64(0); ; {
		for i := range turns {
			s.claim(&turns[i])
			if filled++; filled == s.size {
				return
			}
		}
	}
}

// start makes an empty table and every backend's turn, sorted by rank, and
// returns them with the smallest and largest weight.
func (s *maglevSnap) start(keys []string) (turns []turn, minW, maxW uint64) {
	var d xxhash.Digest
	hash := func(id string, seed uint64) uint64 {
		d.ResetWithSeed(seed)
		_, _ = d.WriteString(id)
		return d.Sum64()
	}
	turns = make([]turn, len(s.backends))
	minW = balancer.MaxWeight
	for i := range s.backends {
		t := &turns[i]
		t.owner = int32(i)
		t.next = hash(keys[i], 0) % s.size
		t.skip = hash(keys[i], 1)%(s.size-1) + 1
		t.weight = uint64(s.weights[i])
		minW, maxW = min(minW, t.weight), max(maxW, t.weight)
	}
	slices.SortFunc(turns, func(a, b turn) int {
		return strings.Compare(keys[a.owner], keys[b.owner])
	})
	for i := range turns {
		turns[i].rank = int32(i)
	}

	s.owner = make([]int32, s.size)
	for i := range s.owner {
		s.owner[i] = -1
	}
	return turns, minW, maxW
}

// populateWeighted takes the turns of backends of unequal weights from a
// min-heap ordered by (round, rank): O(log n) a turn however uneven the
// weights, where a loop over every backend in every round would cost O(n)
// a round, and with one backend a million times heavier than the rest
// there are about M rounds. turns must be sorted by rank, with no turn
// taken, which makes it a heap already. (The heap costs about four times
// the plain loop, so equal weights keep the loop.)
func (s *maglevSnap) populateWeighted(turns []turn, maxW uint64) {
	for range s.size {
		t := &turns[0]
		s.claim(t)
		t.taken++
		// ⌈taken·maxW/w⌉; taken ≤ M and maxW ≤ 10⁶: no overflow.
		t.round = (t.taken*maxW + t.weight - 1) / t.weight
		siftDown(turns)
	}
}

// claim gives t's backend the next free slot of its permutation.
func (s *maglevSnap) claim(t *turn) {
	for s.owner[t.next] >= 0 {
		t.advance(s.size)
	}
	s.owner[t.next] = t.owner
	t.advance(s.size)
}

// advance moves t to the next slot of its permutation.
func (t *turn) advance(size uint64) {
	if t.next += t.skip; t.next >= size {
		t.next -= size
	}
}

// before orders turns: earlier round first, then lower rank.
func (t *turn) before(u *turn) bool {
	return t.round < u.round || t.round == u.round && t.rank < u.rank
}

// siftDown restores the heap after the root's round has grown.
func siftDown(h []turn) {
	i := 0
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h[c+1].before(&h[c]) {
			c++
		}
		if !h[c].before(&h[i]) {
			return
		}
		h[i], h[c] = h[c], h[i]
		i = c
	}
}

// Pick returns the backend for req.Key: the owner of the key's slot,
// ⌊h·M/2⁶⁴⌋ for the key's xxhash h (an empty key is hashed like any other
// string). A multiplication maps the hash onto the slots as evenly as a
// remainder would, without a division.
//
// A retry with Attempt n gets the n-th distinct backend met walking the
// slots from the key's slot onwards, the same in every process; n wraps
// after the number of backends. If the chosen backend is req.Avoid and the
// set has another, Pick takes the next distinct one.
//
// Pick returns balancer.ErrNoBackend when the set is empty.
//
// Cost: the key's hash, one multiplication and one table read whatever the
// size of the set (see BenchmarkPickInterface), no allocation, no lock. A
// retry walks a few slots more (neighbouring slots mostly belong to
// different backends).
func (m *Maglev) Pick(req balancer.Request) (balancer.Backend, error) {
	s := m.snap.Load()
	if len(s.backends) == 0 {
		return nil, balancer.ErrNoBackend
	}
	slot, _ := bits.Mul64(xxhash.Sum64String(req.Key), s.size)
	o := s.owner[slot]
	// A first try with no Avoid, the common case, reads no ID: the owner's
	// ID is another cache line, and Avoid is "" for it anyway.
	if req.Attempt != 0 || req.Avoid != "" && s.ids[o] == req.Avoid {
		q, _, _ := s.target(int(slot), req.Attempt, req.Avoid)
		o = s.owner[q]
	}
	return s.backends[o], nil
}
