// Package consistent is consistent hashing: it maps a key (a session, a
// user, a tenant, a cache key) to a backend so that the key keeps its
// backend while the set changes, and only a small share of keys move when a
// backend leaves or joins. The mapping depends only on the backends'
// placement keys (their IDs, or their hash keys; see Hash keys) and
// weights, so every process, and every restart, maps a key the same way;
// golden vectors in the tests freeze it, so that a change of mapping
// between lbkit versions is always deliberate and announced. Two pickers:
// Ring (optionally with bounded loads) and Maglev; see Choosing.
//
//	r := consistent.NewRing(consistent.WithBoundedLoad(1.25)) // or NewRing(), or NewMaglev()
//	if err := r.Update(balancer.Endpoints("10.0.0.1:6379", "10.0.0.2:6379")); err != nil { ... }
//	b, err := r.Pick(balancer.Request{Key: sessionID})
//	if err != nil { ... } // balancer.ErrNoBackend: the set is empty
//	start := time.Now()
//	resp, err := http.Get("http://" + b.ID() + "/api") // err is now the request's, not Pick's
//	if err == nil {
//		_, err = io.Copy(io.Discard, resp.Body) // Done when the body ends, not at the headers
//		resp.Body.Close()
//	}
//	r.Done(b, balancer.Result{Latency: time.Since(start), Err: err}) // nil: a success
//
// What a caller must do:
//
//   - Done: a Ring implements balancer.Feedback. With WithBoundedLoad it
//     counts requests in flight, so call Done exactly once per Pick, when
//     the request has finished (for HTTP when the response body has been
//     read to the end or closed), also when it failed or was given up on; a
//     Pick without its Done fills its backend for good. Without bounded
//     loads Done does nothing, and a proxy that calls it anyway stays right
//     when bounded loads are turned on. A Maglev does not implement
//     Feedback.
//   - Key: Request.Key is whatever should stick to one backend: a session
//     or user ID from a cookie or header your front end sets, a tenant, a
//     cache key, a URL path. Any string; it is hashed, not parsed. The empty
//     key is hashed like any other, so requests without a key all go to one
//     backend: give them a fallback, such as the client address. On a
//     retry, set Attempt to 1, 2, ... and Avoid to the ID of the backend
//     that failed: attempt n gets the n-th distinct backend after the key's
//     own (see Retries), the same in every process.
//   - Hash keys (optional): a backend that may come back at another
//     address with the same identity (a StatefulSet pod, a VM given a new
//     IP) should carry a hash key (balancer.Endpoint.WithHashKey, or
//     HashKey on your own type): it is placed by the key and keeps its
//     keys. Keep hash keys unique within a set; see Hash keys.
//   - Errors: neither picker reads the Result. A dead backend keeps its keys
//     until it leaves the set; then the ring moves only its keys, and Maglev
//     a few more (see Disruption). With bounded loads a dead backend whose
//     connections are refused at once never fills up, so it also draws the
//     keys that full backends spill: keep it out with health.
//
// Package github.com/lbkit/lbkit/lbhttp does all of this for
// net/http: its Header and Cookie keys read a session or user ID (First
// gives a fallback for requests without one), and its transport calls Done
// when the body ends and retries with Attempt and Avoid set. Wrap the
// picker in github.com/lbkit/lbkit/health to keep dead and failing
// backends out of its set.
//
// # Choosing
//
//   - Ring: the fewest keys move. When one of N backends leaves, exactly its
//     keys move (1/N on average) and no other key does; when one joins, only
//     the keys it takes move. Use it for caches and sessions, where every
//     moved key costs a miss or a login.
//   - Ring with WithBoundedLoad: when some keys are hot (a viral product, a
//     big tenant) and would overload their backend. No backend holds more
//     than ⌈c·average⌉ requests in flight; keys move only while their
//     backend is full. Needs Done.
//   - Maglev: the fastest and flattest lookup (one table read, the same cost
//     at 4 or 1024 backends), near-exact shares (each backend within n/M of
//     its share), fixed memory. It moves more keys than the ring when the set
//     changes: the leaving backend's, plus some keys of backends that stayed
//     (see Disruption). Use it when lookups are hot and the set is stable,
//     as in the network load balancers it was designed for.
//
// Affinity ignores load; bounded loads give some of it back. Without
// health a dead backend keeps its keys, and with bounded loads it also
// draws the keys that full backends spill, since a backend whose
// connections are refused at once never fills up. lbsim's tables
// (docs/results.md; go run ./bench/cmd/lbsim, where each virtual user is
// a key of its own) set ring, ring-bounded (c = 1.25) and maglev beside
// every other algorithm.
//
// # Ring
//
// Consistent hashing is due to Karger et al., "Consistent hashing and random
// trees" (STOC 1997). Each backend is placed on a circle of 2⁶⁴ positions at
// several points, its virtual nodes; a key goes to the backend of the first
// point at or after the key's hash, clockwise. Removing a backend removes
// its points, so its keys fall to the next points clockwise and no other key
// moves.
//
// A backend of weight w gets 150·w points by default (WithVnodes), at the
// xxhash of "<ID>_0", "<ID>_1", ..., the key format of Envoy's ring_hash
// (source/common/upstream/ring_hash_lb.cc) and gRPC's ringhash
// (balancer/ringhash/ring.go); the rings differ in size, so their mappings
// do not coincide with lbkit's. The spread of the backends' shares
// shrinks as 1/√points (TestRingBalance bounds it for 64 backends over 1M
// keys). The total is capped at 2²⁰ points
// (WithMaxRingSize), as Envoy caps it with max_ring_size: past the cap the
// counts are scaled down in proportion to weight, at least one per backend,
// so weights up to balancer.MaxWeight cannot exhaust memory.
//
// A key's hash is xxhash of the key. Instead of a binary search over the
// sorted points (17 dependent, mostly cache-missing reads at 153,600
// points), a jump table indexes the points by the top k bits of their hash,
// with 2^k about the number of points: the key's top bits give the range of
// points that can hold its answer, under two on average, scanned in order:
// two reads where a binary search makes log₂ P dependent ones.
// BenchmarkRingLookup sets the lookup beside a bare binary search over the
// same sorted hashes (slices.BinarySearch), and the whole of Pick beside
// the hash and a binary search. FuzzSearch checks the index against a scan
// of every point.
//
// # Bounded loads
//
// Consistent hashing with bounded loads is due to Mirrokni, Thorup and
// Zadimoghaddam, "Consistent Hashing with Bounded Loads" (SODA 2018); HAProxy
// offers it as hash-balance-factor. With factor c, a backend of weight w may
// take a request while it has fewer than ⌈c·(m+1)·w/W⌉ in flight, where m
// counts the requests in flight on the whole ring and W is the total weight;
// the request being placed is counted, so an idle ring always has room. A
// key whose backend is full walks clockwise to the next distinct backend
// with room, the one its retry would reach. Without pressure (each request
// done before the next) every key maps exactly as on the plain ring
// (TestBoundedNoPressure); with 1000 requests in flight for five hot keys on
// 10 backends, no backend holds more than ⌈1.25·1000/10⌉ = 125
// (TestBoundedHotKeys), where the plain ring piles them on a few.
//
// In-flight counts are balancer.InFlight counters kept in a balancer.Registry
// by ID, so they survive updates, and the ring's total is one more atomic
// counter, so Pick costs O(1) expected: the paper shows that the expected
// walk past full backends is bounded by a constant that depends on c only.
// The check of a backend's count and its increment are two atomic steps,
// not one, so Picks racing for the same backend can take it past its bound
// by as many as race; a compare-and-swap loop would close that gap at the
// price of retries on the hottest counter.
//
// With bounded loads a key's backend depends on this process's in-flight
// counts as well as on the set: under load, two proxies can send one key to
// different backends. Without pressure they agree.
//
// # Maglev
//
// Maglev hashing is due to Eisenbud et al., "Maglev: A Fast and Reliable
// Software Network Load Balancer" (NSDI 2016, section 3.4). Each backend
// has a permutation of the M slots of a lookup table (offset and skip from
// two xxhashes of its ID; M prime, 65537 by default, WithTableSize), and
// backends take turns claiming the next free slot of their permutation
// until the table is full, so each owns ⌊M/n⌋ or ⌈M/n⌉ slots. Weights are
// honoured as in Envoy's Maglev: a backend of weight w takes w turns for
// every maxW the heaviest takes, and at least one slot. A key's slot is
// ⌊h·M/2⁶⁴⌋ for its xxhash h, one multiplication and one read.
//
// # Disruption
//
// When one of N backends leaves, the ring moves only its keys (1/N on
// average), below its size cap, and a joining backend takes keys only for
// itself (TestRingRemoveAndJoin). Capped (weights that want more than
// WithMaxRingSize points), a change of the total weight rescales every
// backend's points, which moves a few keys between backends that stayed.
// Maglev rebuilds its table, and some slots change hands between backends
// that stayed: its aim is minimal, not zero, disruption. Those extra
// moves are a small share of all keys, so they weigh more against 1/N as
// N grows; a larger table reduces them, as the paper says. Keep M above
// 100·N where disruption matters; Update refuses sets of more than M/10
// backends. BenchmarkUpdate reports both figures for the ring and for
// Maglev at two table sizes, with 64, 256 and 1024 backends: the keys
// moved per key the leaving backend owned (1 is the least possible), and
// the share of all keys that moved although their backend stayed. They
// are fixed by the hashes and do not vary between runs.
//
// # Hash keys
//
// A backend is placed by its ID, unless it has a hash key
// (balancer.HashKeyer; the empty key means the ID): the ring's points are
// then the xxhash of "<hash key>_<i>", and Maglev's permutation comes from
// the hash key, exactly as for a backend whose ID is that key. This is
// Envoy's hash_key (the "envoy.lb" metadata of an EDS endpoint, for
// ring_hash and Maglev) and gRPC's endpoint hash key (gRFC A76). A backend
// whose address changes while its hash key stays keeps every key and
// every retry sequence, on the ring, the bounded ring and Maglev
// (TestHashKeyKeepsPlace: 0 of 20,000 keys move when one of 64 backends,
// or all of them, change address; without hash keys the same move sends
// the mover's keys elsewhere). The ID remains what Pick returns and what
// Done, Avoid and the bounded ring's in-flight counts go by: a moved
// backend is a new backend to them, with a count of its own.
//
// Hash keys are read once per Update (balancer.HashKeys), never by Pick,
// so they cost Pick nothing. Two backends with one placement key (two
// equal hash keys, or a hash key equal to the ID of a backend without
// one) would share every point of the ring: Update refuses the set with
// an error wrapping balancer.ErrDuplicateHashKey that names both, and the
// previous set stays. Without hash keys nothing changes: the golden
// vectors hold.
//
// # Retries
//
// A request with Attempt n gets the n-th distinct backend met walking
// clockwise from the key's point (ring) or slot (Maglev), so every retry of
// a key reaches a new backend until all have been tried, and the same one in
// every process; n wraps after the number of backends. If the backend
// chosen is Request.Avoid and the set has another, the next distinct one is
// taken instead. Each position knows how far back its owner last appeared,
// so the walk needs no set of backends already met: a retry allocates
// nothing and takes O(1) per step.
//
// An empty key is hashed like any other string: requests without a key all
// go to one backend.
//
// # Cost
//
//   - Ring Pick: the key's xxhash and an indexed lookup (two reads of the
//     index and a scan of under two points on average), no allocation, no
//     lock. BenchmarkPickInterface measures it through the
//     balancer.Balancer interface with Done, at 4, 64 and 1024 backends;
//     BenchmarkPick with 2¹⁶ distinct keys spread over the ring, as real
//     traffic spreads them; BenchmarkRetry a retry, which walks a few
//     points more.
//   - Ring with bounded loads, Pick and Done: two more atomic operations
//     each, on counters other goroutines also write (the backend's and the
//     ring's total), and for Done a map lookup by ID.
//   - Maglev Pick: the key's xxhash, one multiplication and one table read,
//     the same work at any set size, as the table's size does not depend on
//     the set's. A retry walks a few slots more (neighbouring slots mostly
//     belong to different backends).
//   - Ring Update: O(P) for P points (hashing, a radix sort, the index) and
//     about 50 bytes a point allocated, 20 kept: 1024 backends of weight 1
//     are 153,600 points, 3 MB kept; at the cap of 2²⁰ points, 20 MB.
//   - Maglev Update: O(M log M), whatever the set's size. Memory: 8 bytes
//     per slot, 512 KB by default.
//   - BenchmarkUpdate measures both at 64, 256 and 1024 backends, equal
//     and unequal weights.
//
// Ring and Maglev are laid out in whole cache lines, so that the snapshot
// pointer every Pick reads shares its line with nothing the caller
// allocated; the bounded ring's total, which every Pick and Done of a
// bounded ring writes, has a line of its own (see Ring and Maglev).
//
// # Concurrency
//
// Pick, Done and Update are safe for concurrent use. Pick and Done take no
// lock: they read an immutable snapshot that Update builds aside and
// publishes with one atomic store; a Pick that starts after Update returns
// sees the new set. Both Updates take a mutex, taken by writers only,
// before validating, so calls to Update are serialised, validation
// included, and each reads every weight once (balancer.NewSet). The
// bounded ring carries its in-flight counts across updates by ID
// (balancer.Registry), and keeps a removed backend's counter while it
// still counts requests, so that their Dones find it. An idle counter the
// registry evicts is sealed in the same atomic step (balancer.Sealer): a
// Pick that read the older ring and would count on it picks again from
// the newer one instead, so the ring's total stays the number of requests
// really in flight, through any churn (TestBoundedTotalUnderChurn).
//
// # Errors
//
// Options cannot fail where they are written, and never panic: an invalid
// one (a factor of 1, a table size that is not prime) makes every Update
// return an error saying which, and the picker stays empty.
package consistent
