package consistent

import (
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/cespare/xxhash/v2"

	"github.com/lbkit/lbkit/balancer"
)

// Ring is a consistent-hash ring with virtual nodes, and optionally bounded
// loads (WithBoundedLoad). Create it with NewRing; the zero value is not
// ready.
//
// Pick, Done, Update and InFlight are safe for concurrent use. Pick takes
// no lock and allocates nothing; it reads an immutable snapshot that
// Update builds aside and publishes with one atomic store. Calls to Update
// are serialised by a mutex that Pick and Done never take. A Ring must not
// be copied.
//
// The struct is laid out in whole cache lines (a size class the allocator
// aligns to 64 bytes). The first holds what every Pick reads and nothing
// written after NewRing; the bounded-load total, which every Pick and Done
// of a bounded ring writes, has the second to itself, so that its traffic
// never evicts the snapshot pointer from a reader's cache.
type Ring struct {
	// Atomic: read by every Pick.
	snap atomic.Pointer[ringSnap] // the published ring; empty, never nil, after NewRing
	// Immutable after NewRing.
	cfg ringConfig
	_   [64 - 8 - unsafe.Sizeof(ringConfig{})]byte

	// Atomic: written by every Pick and Done of a bounded ring.
	total balancer.InFlight // requests in flight on all backends, bounded loads only

	// Guarded by mu, which only Update takes.
	mu  sync.Mutex
	reg balancer.Registry[balancer.InFlight] // bounded loads only
	_   [(64 - (8+unsafe.Sizeof(balancer.Registry[balancer.InFlight]{}))%64) % 64]byte
}

// ringSnap is an immutable published ring.
type ringSnap struct {
	circle          // positions are the points, in hash order
	hashes []uint64 // hashes[p] is point p's place on the ring, ascending

	// index[j] is the first point whose hash has j as its top bits (the
	// shift leaves them), or the first point after them if none does; it
	// has one extra entry, len(hashes). A key with top bits j lands in
	// hashes[index[j]:index[j+1]+1], on average fewer than two points.
	index []uint32
	shift uint

	// Bounded loads only (states.Len() == 0 otherwise).
	states balancer.States[balancer.InFlight]
	capNum []uint64 // c·w for each backend, c in ten-thousandths
	capDen uint64   // 10⁴·W, W the total weight
}

var (
	_ balancer.Balancer        = (*Ring)(nil)
	_ balancer.Feedback        = (*Ring)(nil)
	_ balancer.InFlightCounter = (*Ring)(nil)
)

// NewRing returns a Ring with an empty set; call Update to give it
// backends. The defaults are 150 virtual nodes per unit of weight, at most
// 2²⁰ points, and no load bound. An invalid option is reported by Update.
func NewRing(opts ...RingOption) *Ring {
	r := &Ring{cfg: ringConfig{vnodes: defaultVnodes, maxSize: defaultMaxRingSize}}
	for _, o := range opts {
		o.applyRing(&r.cfg)
	}
	r.snap.Store(&ringSnap{index: []uint32{0, 0}, shift: 64})
	return r
}

// Update replaces the set. It validates bs first (see balancer.Validate) and
// on error keeps the previous set; it also returns, every time, the error of
// an invalid option given to NewRing.
//
// Each backend gets vnodes·weight points, each placed at the xxhash of
// "<key>_<i>" for i = 0, 1, ..., where key is the backend's hash key
// (balancer.HashKeyer) or, by default, its ID, so a backend's points depend
// on its key and weight only, never on the rest of the set or its order,
// and are the same in every process. A backend whose ID changes while its
// hash key stays keeps its points, and so its keys. Two backends with one
// placement key are refused (balancer.ErrDuplicateHashKey). When the total would pass the ring's size cap, every
// count is scaled down in proportion (at least one point each); a
// backend's points are then a prefix of its uncapped ones.
//
// With bounded loads, in-flight counts are carried across updates by ID, so
// a request picked before the update and finished after it still counts,
// and its Done still finds its counter.
//
// Cost: O(P) for P points (hashing them, a radix sort, the index), plus
// sorting the n IDs; BenchmarkUpdate measures it. Memory: about
// 20 bytes per point kept, and 32 more while building.
func (r *Ring) Update(bs []balancer.Backend) error {
	if r.cfg.err != nil {
		return fmt.Errorf("consistent: ring update: %w", r.cfg.err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	set, err := balancer.NewSet(bs)
	if err != nil {
		return fmt.Errorf("consistent: ring update: %w", err)
	}
	keys, err := balancer.HashKeys(set)
	if err != nil {
		return fmt.Errorf("consistent: ring update: %w", err)
	}
	s := buildRing(set, keys, r.cfg)
	if r.cfg.factor > 0 {
		s.states = r.reg.Sync(s.backends)
	}
	r.snap.Store(s)
	return nil
}

// point is one virtual node while the ring is built.
type point struct {
	hash  uint64
	owner int32
}

// buildRing places every backend's points, by keys[i] for backend i (its
// placement key, see balancer.HashKeys), sorts them and indexes them.
func buildRing(set balancer.Set, keys []string, cfg ringConfig) *ringSnap {
	s := &ringSnap{circle: newCircle(set)}
	weights := make([]uint64, set.Len())
	var total uint64 // at most n·MaxWeight: no overflow
	for i, w := range set.Weights {
		weights[i] = uint64(w)
		total += weights[i]
	}
	counts := pointCounts(weights, total, cfg)

	var size uint64
	for _, c := range counts {
		size += c
	}
	// Points are made in the order of the backends' placement keys and
	// the sort is stable, so ties between hashes (one in 2⁶⁴ per pair) are
	// broken by key, not by position in the set: the order of the set does
	// not matter, nor, for a backend with a hash key, its ID.
	byKey := make([]int32, len(keys))
	for i := range byKey {
		byKey[i] = int32(i)
	}
	slices.SortFunc(byKey, func(a, b int32) int { return strings.Compare(keys[a], keys[b]) })
	points := make([]point, 0, size)
	var buf []byte
	for _, i := range byKey {
		buf = append(append(buf[:0], keys[i]...), '_')
		n := len(buf)
		for j := range counts[i] {
			buf = strconv.AppendUint(buf[:n], j, 10)
			points = append(points, point{hash: xxhash.Sum64(buf), owner: i})
		}
	}
	sortPoints(points)

	s.hashes = make([]uint64, len(points))
	s.owner = make([]int32, len(points))
	for p, pt := range points {
		s.hashes[p] = pt.hash
		s.owner[p] = pt.owner
	}
	s.setGaps()
	s.index, s.shift = buildIndex(s.hashes)

	if cfg.factor > 0 {
		s.capNum = make([]uint64, len(weights))
		for i, w := range weights {
			s.capNum[i] = cfg.factor * w // ≤ 10⁶·10⁶: no overflow
		}
		s.capDen = factorScale * total
	}
	return s
}

// sortPoints sorts points by hash, stably, with a least-significant-digit
// radix sort: eight passes of one byte each, every pass counting the
// byte's values and then moving each point to its place in a scratch copy.
// That is O(P) against the O(P log P) of a comparison sort such as
// slices.SortFunc; BenchmarkUpdate times the ring's Update, of which the
// sort is a part (153,600 points at 1024 backends).
func sortPoints(points []point) {
	src, dst := points, make([]point, len(points))
	for shift := 0; shift < 64; shift += 8 {
		var start [256]int
		for _, p := range src {
			start[byte(p.hash>>shift)]++
		}
		sum := 0
		for d, c := range start {
			start[d] = sum
			sum += c
		}
		for _, p := range src {
			d := byte(p.hash >> shift)
			dst[start[d]] = p
			start[d]++
		}
		src, dst = dst, src
	}
	// After an even number of passes the sorted points are back in points.
}

// pointCounts returns how many points each backend gets: vnodes·w, or, if
// the total would pass cfg.maxSize, its share of maxSize, w·maxSize/W
// rounded, and at least one.
func pointCounts(weights []uint64, total uint64, cfg ringConfig) []uint64 {
	counts := make([]uint64, len(weights))
	hi, want := bits.Mul64(uint64(cfg.vnodes), total)
	capped := hi != 0 || want > uint64(cfg.maxSize)
	for i, w := range weights {
		if !capped {
			counts[i] = uint64(cfg.vnodes) * w
			continue
		}
		// w·maxSize ≤ 10⁶·2²⁴: no overflow.
		counts[i] = max(1, (w*uint64(cfg.maxSize)+total/2)/total)
	}
	return counts
}

// buildIndex returns the jump table over the top bits of the sorted hashes,
// and the shift that leaves those bits. It uses 2^k buckets for the largest
// k with 2^k ≤ len(hashes), so a bucket holds between one and two points on
// average and the index costs at most 4 bytes per point.
//
// Why: a binary search over 153,600 points (1024 backends × 150) takes 17
// dependent steps, the last several of them cache misses. The index turns
// that into one read of index, then of the hashes, one or two cache lines
// away: two to three misses instead of about eight.
func buildIndex(hashes []uint64) ([]uint32, uint) {
	k := 0
	if len(hashes) > 0 {
		k = bits.Len(uint(len(hashes))) - 1
	}
	shift := uint(64 - k) // 64 for k = 0: x >> 64 is 0 in Go
	index := make([]uint32, 1<<k+1)
	j := 0
	for p, h := range hashes {
		for top := int(h >> shift); j <= top; j++ {
			index[j] = uint32(p)
		}
	}
	for ; j < len(index); j++ {
		index[j] = uint32(len(hashes))
	}
	return index, shift
}

// search returns the first point whose hash is at least h, wrapping to
// point 0 past the last. The ring must not be empty.
//
// Cost: two reads of index and a scan of the bucket (under two points on
// average), against the ~log₂(P) dependent reads of a binary search.
func (s *ringSnap) search(h uint64) int {
	j := h >> s.shift
	p, end := s.index[j], s.index[j+1]
	for p < end && s.hashes[p] < h {
		p++
	}
	// Every point of later buckets is above h, so p is the answer, unless
	// it is past the last point.
	if int(p) == len(s.hashes) {
		return 0
	}
	return int(p)
}

// Pick returns the backend for req.Key: the owner of the first point
// clockwise from the key's hash (xxhash of the key; an empty key is hashed
// like any other string, so requests without a key all go to one backend).
//
// A retry with Attempt n gets the n-th distinct backend walking clockwise
// from there, the same in every process; n wraps after the number of
// backends. If the chosen backend is req.Avoid and the set has another, Pick
// takes the next distinct one.
//
// With bounded loads, a backend at its capacity is passed over for the next
// distinct one clockwise under capacity; if every backend is at capacity
// (possible only for an instant, while counts move under concurrent Picks
// and Dones), Pick keeps the backend it would pick without the bound. The
// picked backend's in-flight count and the ring's total are incremented
// (a Pick racing an Update that evicts the counter it read picks again
// from the newer ring; see the package doc, Concurrency): call Done.
//
// Pick returns balancer.ErrNoBackend when the set is empty.
//
// Cost: the key's hash and one indexed lookup (see BenchmarkPickInterface
// and BenchmarkPick), no allocation, no lock. A retry adds a short walk;
// bounded loads add two atomic adds and, for a full backend, a walk to the
// next one.
func (r *Ring) Pick(req balancer.Request) (balancer.Backend, error) {
	s := r.snap.Load()
	if len(s.backends) == 0 {
		return nil, balancer.ErrNoBackend
	}
	h := xxhash.Sum64String(req.Key)
	if r.cfg.factor > 0 {
		return r.pickBounded(s, h, req), nil
	}
	p := s.search(h)
	o := s.owner[p]
	if req.Attempt != 0 || req.Avoid != "" && s.ids[o] == req.Avoid { // as in Maglev.Pick
		q, _, _ := s.target(p, req.Attempt, req.Avoid)
		o = s.owner[q]
	}
	return s.backends[o], nil
}

// maxRecounts bounds how many newer rings a bounded Pick moves to when
// the counter it meant to count on was evicted under it (see pickBounded).
// Each move needs an Update published meanwhile, so more than one is rare.
const maxRecounts = 3

// pickBounded picks from s under the load bound, for a key of hash h, and
// counts the request on the backend and in the total.
//
// An Update may evict the counter of a backend s still holds (it left the
// set, idle, and more backends retired than the registry keeps) between
// this Pick's load of s and its Inc. The counter is then sealed (see
// balancer.Sealer): Inc says so, and the request must not enter the total,
// which no Done would ever take it out of again. Pick picks afresh from
// the newer ring instead, so that the request is counted where its Done
// will find it. If the Update has not yet published its ring, or after
// maxRecounts moves, Pick returns the backend uncounted; its Done finds no
// counter, or a new one that a Dec never takes below zero.
func (r *Ring) pickBounded(s *ringSnap, h uint64, req balancer.Request) balancer.Backend {
	for moves := 0; ; moves++ {
		o := s.bounded(s.search(h), req, r.total.Load())
		if s.states.At(int(o)).Inc() > 0 {
			r.total.Inc()
			return s.backends[o]
		}
		next := r.snap.Load()
		if next == s || len(next.backends) == 0 || moves == maxRecounts {
			return s.backends[o]
		}
		s = next
	}
}

// bounded returns the backend for a request whose key lands on point p,
// given m requests in flight: the backend target picks if it is under its
// capacity, else the next distinct backend clockwise that is, skipping
// req.Avoid.
func (s *ringSnap) bounded(p int, req balancer.Request, m int64) int32 {
	n := len(s.backends)
	q, d, met := s.target(p, req.Attempt, req.Avoid)
	first := s.owner[q]
	for {
		if o := s.owner[q]; s.underCapacity(o, m) && (n == 1 || s.ids[o] != req.Avoid) {
			return o
		}
		if met == n {
			return first
		}
		q, d = s.step(q, d)
		met++
	}
}

// underCapacity reports whether backend o, with m requests in flight on the
// whole ring, may take one more: load < ⌈c·(m+1)·w/W⌉, which for an integer
// load is load < c·(m+1)·w/W, compared here as load·10⁴·W < c·w·(m+1) in
// exact 128-bit integers. Counting the request being placed (the +1) is what
// lets the first request of an idle ring through, as in the paper.
func (s *ringSnap) underCapacity(o int32, m int64) bool {
	load := s.states.At(int(o)).Load()
	if load <= 0 {
		return true
	}
	if m < 0 {
		m = 0 // not expected: the total never goes below zero
	}
	lhi, llo := bits.Mul64(uint64(load), s.capDen)
	rhi, rlo := bits.Mul64(s.capNum[o], uint64(m)+1)
	return lhi < rhi || lhi == rhi && llo < rlo
}

// Done reports that a request to b has finished, failed or been abandoned;
// the Result is not read. Call it once for every backend Pick returned.
// With bounded loads it decrements b's in-flight count and the ring's
// total; without, it does nothing. Done for nil, for a backend never in the
// set, or for one removed since its Pick is harmless: a removed backend's
// counter stays reachable while it counts requests (see
// balancer.Registry), and a Done that finds no request in flight changes
// nothing.
//
// Cost: one map lookup by ID and two atomic operations; no allocation.
func (r *Ring) Done(b balancer.Backend, _ balancer.Result) {
	if r.cfg.factor == 0 {
		return
	}
	st := r.snap.Load().states.Lookup(b)
	// Decrement the total only when the backend's count came down, so that
	// the total stays the sum of the counters: a late Done for a counter
	// that was evicted and made anew, or two Dones racing for a count's
	// last request, would otherwise take the total below the requests
	// really in flight.
	if st != nil && st.Dec() {
		r.total.Dec()
	}
}

// InFlight returns, with bounded loads, the number of requests Pick has
// counted on the backend with this ID and Done has not yet counted down,
// never below zero; a recently removed backend still reports its count.
// It returns 0 for an unknown ID, and for every ID without bounded loads,
// when the Ring counts nothing. It is the balancer.InFlightCounter
// accessor, for metrics and tests: one map read, no allocation.
func (r *Ring) InFlight(id string) int64 {
	if st := r.snap.Load().states.LookupID(id); st != nil {
		return st.Load()
	}
	return 0
}
