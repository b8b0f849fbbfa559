package iphash

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/lbkit/lbkit/balancer"
)

// Picker maps each client address to a backend by hashing it. Create it with
// New; the zero value is not ready.
//
// Pick and Update are safe for concurrent use. Pick takes no lock and
// allocates nothing, on success and on error. Update builds the new set
// aside and publishes it with one atomic store, so it never blocks Pick;
// calls to Update are serialised by a mutex that Pick never takes. A Picker
// must not be copied.
//
// The struct fills one cache line (a size class the allocator aligns to 64
// bytes), so that what Pick reads shares its line with no one else's data.
type Picker struct {
	// Atomic: read by every Pick.
	snap atomic.Pointer[snapshot] // the published set; empty, never nil, after New

	// Immutable after New: the masks of WithPrefixBits, all ones without it.
	v4Mask     uint32
	v6Hi, v6Lo uint64
	err        error // the first bad option, which Update returns

	// Guarded by itself: taken by Update only.
	mu sync.Mutex
	_  [64 - 8 - 8 - 16 - 16 - 8]byte
}

// snapshot is an immutable published set.
type snapshot struct {
	entries []entry // sorted by ID, so that the mapping does not depend on the order given to Update
	n       uint64  // len(entries)

	// Weighted sets only; cum is nil when all weights are equal, and then
	// the home of hash h is simply h mod n.
	cum   []uint64 // cum[k] = sum of the reduced weights of entries[0..k]
	total uint64   // cum[n-1]

	// The divisors of home, ready for division by multiplication: n, or
	// total when the set is weighted.
	div divisor
}

// entry is one backend with its ID read once, so that Avoid costs a string
// comparison and no interface call.
type entry struct {
	b  balancer.Backend
	id string
}

var _ balancer.Balancer = (*Picker)(nil)

// errBadKey is what Pick returns for a key that does not parse. It is one
// static value rather than an error quoting the key, so that the error path
// allocates nothing (a flood of junk keys costs no garbage) and no
// client-supplied text reaches the caller's logs unasked; log req.Key
// yourself if you need it. Test for it with errors.Is(err, balancer.ErrBadKey).
var errBadKey = fmt.Errorf("iphash: %w: want ip, ip:port or [ipv6]:port", balancer.ErrBadKey)

// Option configures a Picker.
type Option interface {
	apply(*config)
}

type config struct {
	v4Bits, v6Bits int
	err            error // the first bad option
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithPrefix hashes only the /24 of an IPv4 client and the /64 of an IPv6
// client, so that all the addresses of one network reach the same backend.
// This is nginx's ip_hash, which hashes the first three octets of an IPv4
// address, extended to IPv6, where a /64 is what one site or one host
// usually gets (privacy extensions rotate the low 64 bits). It is
// WithPrefixBits(24, 64). The default hashes whole addresses.
func WithPrefix() Option {
	return WithPrefixBits(24, 64)
}

// WithPrefixBits hashes only the first v4Bits of an IPv4 client and the
// first v6Bits of an IPv6 client. The default is 32 and 128: whole
// addresses. v4Bits must be in [0, 32] and v6Bits in [0, 128]; other
// values are a bad option. 0 sends every client of that family to one
// backend.
func WithPrefixBits(v4Bits, v6Bits int) Option {
	return optionFunc(func(c *config) {
		if v4Bits < 0 || v4Bits > 32 || v6Bits < 0 || v6Bits > 128 {
			if c.err == nil {
				c.err = balancer.BadOption("WithPrefixBits", fmt.Sprintf("%d, %d", v4Bits, v6Bits), "0 to 32 and 0 to 128")
			}
			return
		}
		c.v4Bits, c.v6Bits = v4Bits, v6Bits
	})
}

// New returns a Picker with an empty set; call Update to give it backends.
// A bad option (see balancer.ErrBadOption) makes every Update return its
// error, and the Picker stays empty.
func New(opts ...Option) *Picker {
	c := config{v4Bits: 32, v6Bits: 128}
	for _, o := range opts {
		o.apply(&c)
	}
	p := &Picker{
		// A shift by 64 or more gives 0 in Go, so these are exact at the ends.
		v4Mask: uint32(^uint64(0) << (32 - c.v4Bits)),
		v6Hi:   ^uint64(0) << (64 - min(c.v6Bits, 64)),
		v6Lo:   ^uint64(0) << (128 - max(c.v6Bits, 64)),
		err:    c.err,
	}
	p.snap.Store(&snapshot{})
	return p
}

// Update replaces the set. It validates bs first (see balancer.Validate) and
// on error keeps the previous set.
//
// The backends are ordered by ID, so the mapping depends only on the set (its
// IDs and weights), not on the order bs lists them in: two processes given
// the same backends from an unordered source map every key alike. Weights
// are honoured, as in nginx: a backend of weight 3 is home to three times
// as many clients as one of weight 1. Weights are divided by their greatest
// common divisor, so scaling them all changes no mapping, and equal weights
// map exactly as unweighted backends do.
//
// Each weight is read once (balancer.NewSet). Calls to Update are
// serialised, validation included.
//
// Cost: O(n log n) for the sort, and a few allocations.
func (p *Picker) Update(bs []balancer.Backend) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return fmt.Errorf("iphash: update: %w", p.err)
	}
	set, err := balancer.NewSet(bs)
	if err != nil {
		return fmt.Errorf("iphash: update: %w", err)
	}
	type weighted struct {
		entry
		w uint64
	}
	ws := make([]weighted, set.Len())
	for i, b := range set.Backends {
		ws[i] = weighted{entry{b: b, id: set.IDs[i]}, uint64(set.Weights[i])}
	}
	slices.SortFunc(ws, func(a, b weighted) int { return strings.Compare(a.id, b.id) })
	s := &snapshot{entries: make([]entry, len(ws)), n: uint64(len(ws))}
	g := uint64(0)
	for i, e := range ws {
		s.entries[i] = e.entry
		g = gcd(g, e.w)
	}
	for _, e := range ws {
		if e.w != g {
			// Unequal weights: lay the reduced weights end to end. The
			// total is at most n × MaxWeight, far below 2⁶⁴.
			s.cum = make([]uint64, len(ws))
			for i, e := range ws {
				s.total += e.w / g
				s.cum[i] = s.total
			}
			break
		}
	}
	s.div = newDivisor(s.n)
	if s.cum != nil {
		s.div = newDivisor(s.total)
	}
	p.snap.Store(s)
	return nil
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Pick returns the backend for the client address in req.Key (see the
// package doc for the forms accepted), or for the Attempt-th retry of it.
//
// Attempt n > 0 returns the n-th backend of the key's retry sequence, which
// visits every backend once in its first n tries (see the package doc); a
// negative Attempt counts as 0. If the backend chosen is req.Avoid and the
// set has another backend, Pick returns the next one of the sequence, which
// is never the same.
//
// The empty key is valid and stands for a client without an IP address (a
// Unix-socket peer, say): like nginx, which hashes a fixed pseudo-address
// for those, all such requests share one backend. Any other key that does
// not parse is an error wrapping balancer.ErrBadKey; Pick never picks for
// it. An empty set gives balancer.ErrNoBackend, whatever the key.
//
// Cost: a parse of the key, one xxhash of 4 or 16 bytes and a remainder by
// multiplication (see the package doc); with unequal weights, a binary
// search over n; no allocation, no lock.
func (p *Picker) Pick(req balancer.Request) (balancer.Backend, error) {
	s := p.snap.Load()
	if s.n == 0 {
		return nil, balancer.ErrNoBackend
	}
	h, ok := p.hash(req.Key)
	if !ok {
		return nil, errBadKey
	}
	a := uint64(max(req.Attempt, 0))
	i := s.walk(h, a)
	if s.entries[i].id == req.Avoid && s.n > 1 { // never true for "": IDs are not empty
		i = s.walk(h, a+1)
	}
	return s.entries[i].b, nil
}

// hash returns the xxhash of key's canonical form: the 4 bytes of an IPv4
// address or the 16 of an IPv6 one, in network order, masked to the
// configured prefix; no port, no zone. The empty key hashes the empty
// string. It reports false if key does not parse.
//
// IPv4 keys, "a.b.c.d" and "a.b.c.d:port", take a fast path: one pass that
// parses the address where it stands (parseKey would first look for the
// first separator to tell the families apart, then parse), and xxhash of
// the 4 bytes written out for that length (sum4). Both give exactly what
// the general path gives (TestFastPathMatches, FuzzParseKey).
func (p *Picker) hash(key string) (uint64, bool) {
	if v4, n, ok := parseIPv4(key); ok && (n == len(key) || key[n] == ':' && validPort(key[n+1:])) {
		return sum4(v4 & p.v4Mask), true
	}
	return p.hashSlow(key)
}

// hashSlow is hash for every key but IPv4, kept apart so that the IPv4
// path reads as what it is. (hash is not inlined into Pick: too costly for
// the inliner, as go build -gcflags=-m=2 reports.)
func (p *Picker) hashSlow(key string) (uint64, bool) {
	if key == "" {
		return xxhash.Sum64(nil), true
	}
	a, ok := parseKey(key)
	if !ok {
		return 0, false
	}
	if a.is4 {
		return sum4(uint32(a.lo) & p.v4Mask), true
	}
	return sum16(a.hi&p.v6Hi, a.lo&p.v6Lo), true
}

// walk returns the index in s.entries of the a-th backend of the retry
// sequence of hash h. Attempt 0 is the key's home, h mod n (weighted: the
// backend whose stretch of the laid-out weights h mod total falls in).
// Attempts 1 to n−1 visit the n−1 other backends in order, starting at a
// point of the others chosen by the hash's high bits, and attempt n is home
// again.
//
// Starting the retries at a hashed point rather than at the next backend
// spreads a failed backend's clients over all the others instead of piling
// them onto its neighbour. For example, with n = 5, home 3 and start 2, the
// others in order after home are 4, 0, 1, 2 (offsets 1 to 4), and the
// sequence is 3, then offsets 3, 4, 1, 2: backends 1, 2, 4, 0, then 3 again.
func (s *snapshot) walk(h, a uint64) uint64 {
	i := s.home(h)
	r := uint64(0)
	if a != 0 {
		r = a % s.n
	}
	if r == 0 {
		return i
	}
	m := s.n - 1
	start, _ := bits.Mul64(h, m) // ⌊h·m / 2⁶⁴⌋: uniform in [0, m), from h's high bits
	off := start + r - 1         // < 2m, since r ≤ m
	if off >= m {
		off -= m
	}
	if i += 1 + off; i >= s.n {
		i -= s.n
	}
	return i
}

// home returns the index of h's own backend.
func (s *snapshot) home(h uint64) uint64 {
	if s.cum == nil {
		return s.div.mod(h) // h mod n
	}
	// The first backend whose cumulative weight exceeds h mod total.
	x := s.div.mod(h) // h mod total
	lo, hi := 0, len(s.cum)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if s.cum[mid] > x {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return uint64(lo)
}

// The primes of xxhash64.
const (
	prime1 uint64 = 11400714785074694791
	prime2 uint64 = 14029467366897019727
	prime3 uint64 = 1609587929392839161
	prime4 uint64 = 9650029242287828579
	prime5 uint64 = 2870177450012600261
)

// sum4 returns xxhash64, seed 0, of the 4 bytes of v4 in network order:
// what xxhash.Sum64 returns for them, with the general function's length
// dispatch and loops taken out. For an input of 4 bytes the algorithm is
// one 32-bit lane (h = prime5 + 4, then h ^= lane·prime1,
// h = rotl(h, 23)·prime2 + prime3) and the final avalanche.
func sum4(v4 uint32) uint64 {
	// xxhash reads the bytes little-endian; they are v4 big-endian.
	h := prime5 + 4
	h ^= uint64(bits.ReverseBytes32(v4)) * prime1
	h = bits.RotateLeft64(h, 23)*prime2 + prime3
	h ^= h >> 33
	h *= prime2
	h ^= h >> 29
	h *= prime3
	h ^= h >> 32
	return h
}

// sum16 returns xxhash64, seed 0, of the 16 bytes of an IPv6 address whose
// halves, in network order, are hi and lo: what xxhash.Sum64 returns for
// them, written out like sum4. For 16 bytes the algorithm is two 64-bit
// lanes (h = prime5 + 16, then for each lane k, read little-endian,
// h ^= rotl(k·prime2, 31)·prime1, h = rotl(h, 27)·prime1 + prime4) and the
// final avalanche. It skips writing the address out as bytes for the
// library to read back.
func sum16(hi, lo uint64) uint64 {
	h := prime5 + 16
	h ^= bits.RotateLeft64(bits.ReverseBytes64(hi)*prime2, 31) * prime1
	h = bits.RotateLeft64(h, 27)*prime1 + prime4
	h ^= bits.RotateLeft64(bits.ReverseBytes64(lo)*prime2, 31) * prime1
	h = bits.RotateLeft64(h, 27)*prime1 + prime4
	h ^= h >> 33
	h *= prime2
	h ^= h >> 29
	h *= prime3
	h ^= h >> 32
	return h
}

// divisor computes h mod d by multiplications, for a d fixed at Update: the
// direct remainder of Lemire, Kaser and Kurz ("Faster Remainder by Direct
// Computation", 2019) at 64 bits, with the 128-bit constant
// m = ⌈2¹²⁸/d⌉. Then h mod d = ⌊((m·h) mod 2¹²⁸)·d / 2¹²⁸⌋ for every 64-bit
// h: four 64-bit multiplications instead of a 64-bit DIV, whose latency
// is longer and varies a lot between x86 cores (a throwaway benchmark of
// a dependent chain found mod the faster when it was chosen). It is exact (TestDivisor, FuzzDivisor check it against %), so
// the mapping is the same as h % d.
type divisor struct {
	mhi, mlo uint64 // m
	d        uint64
}

// newDivisor returns the divisor for d ≥ 1.
func newDivisor(d uint64) divisor {
	if d <= 1 {
		return divisor{d: d} // mod is 0; m would be 2¹²⁸
	}
	// ⌈2¹²⁸/d⌉ = ⌊(2¹²⁸−1)/d⌋ + 1 for every d > 1: if d does not divide
	// 2¹²⁸ both floors are equal, and if it does (a power of two),
	// ⌊(2¹²⁸−1)/d⌋ = 2¹²⁸/d − 1. The theorem needs 2¹²⁸ ≥ 2⁶⁴·d: true.
	hi, r := bits.Div64(0, ^uint64(0), d) // high word of (2¹²⁸−1)/d
	lo, _ := bits.Div64(r, ^uint64(0), d)
	lo, c := bits.Add64(lo, 1, 0)
	return divisor{mhi: hi + c, mlo: lo, d: d}
}

// mod returns h mod d.
func (v divisor) mod(h uint64) uint64 {
	// low = (m·h) mod 2¹²⁸.
	lowHi, lowLo := bits.Mul64(v.mlo, h)
	lowHi += v.mhi * h
	// ⌊low·d / 2¹²⁸⌋: the top word of a 192-bit product.
	c1, _ := bits.Mul64(lowLo, v.d)
	c2hi, c2lo := bits.Mul64(lowHi, v.d)
	_, carry := bits.Add64(c2lo, c1, 0)
	return c2hi + carry
}
