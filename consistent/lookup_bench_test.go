package consistent

import (
	"fmt"
	"slices"
	"sort"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/lbkit/lbkit/balancer"
)

// benchKeys are 2¹⁶ distinct keys, so that lookups spread over the whole
// ring as real traffic does; the harness's 1024 keys would keep a large
// ring's few touched cache lines warm and flatter a binary search.
func benchKeys() []string {
	ks := make([]string, 1<<16)
	for i := range ks {
		ks[i] = fmt.Sprint("user-", i)
	}
	return ks
}

// BenchmarkRingLookup compares, on one ring of 1024 backends × 150 points
// (153,600) and the same 2¹⁶ keys, the indexed search against a bare binary
// search over the same sorted hashes, with slices.BinarySearch and with
// sort.Search. Each variant finds the owner's Backend.
//
// With key=hashed the keys' hashes are computed ahead: this is the lookup
// alone. With key=string each variant hashes the key, and search=pick is
// the whole of Ring.Pick; the strings' own cache misses, paid by every
// variant, narrow the ratio.
func BenchmarkRingLookup(b *testing.B) {
	const n = 1024
	r := NewRing()
	if err := r.Update(balancer.Endpoints(addrs(n)...)); err != nil {
		b.Fatal(err)
	}
	s := r.snap.Load()
	ks := benchKeys()
	hs := make([]uint64, len(ks))
	for i, k := range ks {
		hs[i] = xxhash.Sum64String(k)
	}
	const mask = 1<<16 - 1

	// The searches under comparison, each returning a position.
	index := s.search
	binary := func(h uint64) int {
		p, _ := slices.BinarySearch(s.hashes, h)
		return p
	}
	sortSearch := func(h uint64) int {
		return sort.Search(len(s.hashes), func(j int) bool { return s.hashes[j] >= h })
	}
	searches := []struct {
		name   string
		search func(uint64) int
	}{{"index", index}, {"binary", binary}, {"sort", sortSearch}}

	var sink balancer.Backend
	owner := func(p int) balancer.Backend {
		if p == len(s.hashes) {
			p = 0
		}
		return s.backends[s.owner[p]]
	}
	for _, v := range searches {
		b.Run(fmt.Sprintf("n=%d/key=hashed/search=%s", n, v.name), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sink = owner(v.search(hs[i&mask]))
				i++
			}
		})
	}
	for _, v := range searches {
		b.Run(fmt.Sprintf("n=%d/key=string/search=%s", n, v.name), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sink = owner(v.search(xxhash.Sum64String(ks[i&mask])))
				i++
			}
		})
	}
	b.Run(fmt.Sprintf("n=%d/key=string/search=pick", n), func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			sink, _ = r.Pick(balancer.Request{Key: ks[i&mask]})
			i++
		}
	})
	_ = sink
}
