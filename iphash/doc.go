// Package iphash is client-IP affinity: each client address maps to one
// backend, by a hash of the address taken modulo the number of backends, so
// that a client keeps reaching the backend that holds its session or its
// warm cache, from every proxy, across restarts. Use it when the set of
// backends rarely changes and affinity by client address is enough. When
// backends come and go (autoscaling, health flaps), use package consistent
// instead: here, when one of n backends leaves or joins, about (n−1)/n of
// all clients move (see Mapping); with consistent hashing about 1/n do.
//
//	p := iphash.New()
//	if err := p.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080")); err != nil { ... }
//	b, err := p.Pick(balancer.Request{Key: r.RemoteAddr}) // "192.0.2.1:51000"
//	if err != nil { ... } // balancer.ErrNoBackend, or a key that is no address (balancer.ErrBadKey)
//	// ... send the request to b.ID() ...
//
// What a caller must do:
//
//   - Done: nothing to call. A Picker does not implement balancer.Feedback
//     and keeps no per-backend state, so a proxy that looks for Feedback
//     gets nil. Calling Done through a decorator (health, metrics) is still
//     right: they use it.
//   - Key: Request.Key is the client's address, "ip" or "ip:port" (see
//     Keys): http.Request.RemoteAddr as it comes, or, behind a load balancer
//     or CDN, the client address from X-Forwarded-For, but only when the
//     immediate peer is one of your own proxies; otherwise any client could
//     pick its backend by forging the header. A key that does not parse is
//     an error wrapping balancer.ErrBadKey and gets no backend. The empty
//     key is valid: clients without an IP address share one backend. On a
//     retry, set Attempt to 1, 2, ... and Avoid to the ID of the backend
//     that failed: attempt n gets the n-th backend of the key's retry
//     sequence, which visits every backend once in n attempts, the same in
//     every process.
//   - Errors: iphash does not see them. A dead backend keeps its clients
//     until it leaves the set, and when it does, hash mod n moves most
//     clients, not only its own.
//
// Package github.com/lbkit/lbkit/lbhttp does all of this for
// net/http: its ClientIP key reads X-Forwarded-For only from trusted proxy
// prefixes, and its transport retries a refused connection with Attempt and
// Avoid set. Wrap the picker in github.com/lbkit/lbkit/health to keep dead
// and failing backends out of its set.
//
// # Choosing
//
// Affinity ignores load, so iphash balances only as well as the hash
// spreads the clients, and a dead backend keeps its clients until it
// leaves the set: put health in front. lbsim's tables (docs/results.md;
// go run ./bench/cmd/lbsim, where each virtual user has an address of its
// own) set it beside every other algorithm.
//
// # Keys
//
// Request.Key is the client address, in any form net/netip parses as an
// address or as an address and port:
//
//	192.0.2.1              192.0.2.1:51000
//	2001:db8::1            [2001:db8::1]:443
//	::ffff:192.0.2.1       [::ffff:192.0.2.1]:443    (folded into 192.0.2.1)
//	fe80::1%eth0           [fe80::1%eth0]:443        (the zone is dropped)
//
// The port never counts, so a client's connections all map alike. An
// IPv4-mapped IPv6 address, which is how a dual-stack socket reports an
// IPv4 client, is folded into the IPv4 address. A zone names the proxy's
// interface, not the client, so it is accepted and ignored. As in net/netip,
// an IPv6 address with a port needs brackets: "2001:db8::1:443" is the
// address 2001:db8::1:443, and "[1.2.3.4]:80", "01.2.3.4" (a leading zero)
// and "1.2.3.4:65536" are refused. The parser is lbkit's own, tested against
// net/netip by a fuzz test, because net/netip allocates on every refused
// key and on first sight of each zone, and because trying ParseAddr and then
// ParseAddrPort makes "ip:port", the commonest form, fail once first.
//
// A key that does not parse is an error wrapping balancer.ErrBadKey: Pick
// never panics on it and never picks for it. The error is one static value
// that does not quote the key, so that the error path allocates nothing too
// and no client-supplied text reaches logs unasked; log req.Key yourself if
// you need it.
//
// The empty key stands for a client without an IP address (a Unix-socket
// peer): as nginx does with a fixed pseudo-address for those, all such
// requests share one backend (and one retry sequence). It is distinct from
// 0.0.0.0 and from ::.
//
// WithPrefix hashes only a client's /24 (IPv4) or /64 (IPv6), so that a
// client whose address changes within its network (a carrier-grade NAT pool,
// IPv6 privacy addresses) stays on its backend; WithPrefixBits sets other
// lengths. The price is coarser balance: a large network behind one prefix
// is one key.
//
// # Algorithm
//
// At Update the backends are sorted by ID. At Pick the address, masked to
// its prefix, is written in network byte order, 4 bytes for IPv4 and 16 for
// IPv6 (the empty key is 0 bytes), and hashed with xxhash64 to h. The key's
// home is backend h mod n. With unequal weights, the weights, divided by
// their greatest common divisor, are laid end to end in ID order and the home
// is the backend whose stretch holds h mod (sum of weights): a backend of
// weight 3 is home to three times as many clients as one of weight 1.
//
// Retries reach a new backend each time, the same one in every process.
// Attempt 0 is the home; attempts 1 to n−1 visit the other n−1 backends
// once each, in ID order, starting at a point chosen by h's high bits; attempt
// n is the home again. The hashed start means that when a backend fails, its
// clients' retries spread over all the others rather than doubling the load
// of one neighbour (TestRetrySpreads). With n = 5, home 3 and start 2, the
// sequence is 3, 1, 2, 4, 0. Retries do not follow weights. A request whose
// Avoid names the backend chosen gets the next one of the sequence, which
// always differs.
//
// # Source
//
// nginx's ip_hash, src/http/modules/ngx_http_upstream_ip_hash_module.c,
// which lbkit follows in intent (hash the client address modulo the total
// weight, walk the weights to the home, honour weights, share one pseudo
// address among non-IP clients) and departs from where a library can do
// better:
//
//   - nginx always hashes the first three octets of an IPv4 address, and the
//     whole 16 bytes of an IPv6 one. lbkit hashes whole addresses by default;
//     WithPrefix gives nginx's /24 and extends the idea to IPv6 as a /64.
//   - nginx's hash (seed 89, then hash = (hash·113 + byte) mod 6271 per byte)
//     has 6271 values; lbkit uses xxhash64, whose spread does not limit large
//     or heavily weighted sets.
//   - nginx maps in configuration order; lbkit in ID order, so that
//     processes fed the same set in different orders agree.
//   - On a failed peer nginx rehashes, up to 20 times, then falls back to
//     round robin; lbkit's retry sequence visits every backend exactly once
//     in n attempts, with no fallback needed.
//   - nginx finds the home by subtracting weights peer by peer, O(n); lbkit
//     binary-searches the cumulative weights, O(log n).
//
// # Mapping
//
// The mapping is a function of the key, the options, and the set's IDs and
// weights, nothing else: no randomness, no per-process seed, no dependence
// on the order of the set. Every process, and the same process after a
// restart, maps a key to the same backend. xxhash64's output is fixed by its
// specification, so the mapping is the same on every platform; golden
// vectors in the tests pin it, so that a change to it is always deliberate.
//
// On a membership change, hash mod n remaps most clients: a key keeps its
// backend only when h mod n and h mod n' name the same one, about 1 in n
// of them when one of n backends leaves, so (n−1)/n move: 90% with 10
// backends, where consistent hashing would move about 1/n
// (TestRemapOnMembershipChange holds more than 80% moved). Every moved
// client loses its affinity at once, so prefer package consistent when
// the set changes often.
//
// # Cost
//
// Pick: a parse of the key, one xxhash64 of 4 or 16 bytes and h mod n (mod
// the total weight when weights differ), plus a binary search over n with
// unequal weights; no lock, no allocation, on success and on error. With
// equal weights the cost does not grow with n.
//
// IPv4 keys, "a.b.c.d" and "a.b.c.d:port", take a fast path: the address is
// parsed where it stands in straight-line code rather than a loop over
// bytes (parseIPv4), and hashed by xxhash64 written out for 4 bytes (sum4),
// with the general function's length dispatch and loops taken out. Both
// give exactly what the general path gives (TestFastPathMatches,
// FuzzParseKey). h mod n is Lemire, Kaser and Kurz's direct remainder
// ("Faster Remainder by Direct Computation", 2019) with a 128-bit constant
// computed at Update: four 64-bit multiplications instead of a 64-bit
// division, exact for every h (TestDivisor, FuzzDivisor check it against
// %), so no mapping changed; the golden vectors pin that.
//
// The benchmarks: BenchmarkPickInterface, a Pick through the
// balancer.Balancer interface at 4, 64 and 1024 backends with keys of mixed
// forms; BenchmarkPickForm, one Pick for each form of key; BenchmarkParse,
// the parser beside net/netip, which allocates where lbkit's does not
// (ip:port, zones, refused keys); BenchmarkVsJump, a Pick beside jump hash
// over xxhash of the key string, the cheapest way a Go peer maps a key,
// which parses nothing and so maps two ports of one client apart.
//
// BenchmarkVsJump sets a Pick beside jump hash over xxhash at four
// backends; parsing (BenchmarkParse) is most of what iphash costs more.
// BenchmarkVsJumpMixed does the same on the shared harness's keys, half of
// them IPv6, at 4, 64 and 1024 backends: jump hash's cost grows as
// O(log n) and iphash's does not, so iphash leads at large sets, and at
// small ones trails by what the parse costs. That parse is the contract,
// not overhead: it is what maps a client's ports, its IPv6 spellings and
// its IPv4-mapped form to one backend, and refuses a key that is no
// address; a peer that hashes the string does none of that.
//
// IPv6 groups are shifted into two 64-bit words as they are read, with no
// 16-byte array to expand at the "::" and read back, and the 16 bytes are
// hashed by xxhash64 written out for that length (sum16, checked against
// the library by TestSum16MatchesXXHash).
//
// A parser that finds the dots and digits of all 16 bytes at once, as bit
// masks computed on two 64-bit words (SIMD within a register), so that no
// branch depends on a field's length, was written, checked exact against
// parseIPv4, and measured slower than parseIPv4 in BenchmarkParse, with
// keys of varied field lengths too. The straight-line parser's branches
// were predicted well enough; the mask arithmetic costs more instructions
// than they do. It was not kept.
//
// Update: O(n log n) for the sort, and a few allocations.
//
// # Concurrency
//
// Pick and Update are safe for concurrent use. Update builds the new set
// aside and publishes it with one atomic store, so it never blocks Pick,
// and a Pick that starts after Update returns sees the new set. Calls to
// Update are serialised, validation included, by a mutex that Pick never
// takes; each weight is read once (balancer.NewSet). The Picker fills one
// cache line, so that what every Pick reads (the snapshot pointer, the
// prefix masks) shares its line with no one else's data. iphash keeps no
// per-backend state and does not implement balancer.Feedback.
package iphash
