// Package rr is round robin: each pick takes the next backend in turn, so
// every backend gets an equal share of requests whatever it costs to serve
// them.
//
// Use it when backends are alike and requests cost about the same. When
// backends differ in capacity use wrr; when request costs vary (the study
// this library grew out of had backends answering in 50 to 500 ms), use
// leastconn, which measured the best throughput there.
//
//	p := rr.New()
//	if err := p.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080")); err != nil { ... }
//	b, err := p.Pick(balancer.Request{})
//
// # Algorithm
//
// One atomic counter, shared by all goroutines, indexes the set modulo its
// size. The counter starts at a random value so that a fleet of proxies
// started together does not send its first requests to the same backend
// (WithRand makes the start repeatable). It carries on across updates. The
// counter is 64 bits wide, so it never wraps in practice. (A division-free
// remainder, Lemire's fastmod, was tried and measured no faster here: the
// atomic add, not the division, sets the pace.)
//
// A request whose Avoid names the backend whose turn it is gets the next one.
// Weights are validated but not used.
//
// # Cost
//
// Pick: one atomic add, one division, no lock, no allocation; small
// enough for the compiler to inline when called on a *Picker. On the 2-core
// AMD EPYC this was measured on, a serial Pick cost 1.6 to 1.8 times a bare
// atomic add (see BenchmarkPick and BenchmarkAtomicAdd). Under parallel load
// every pick writes the one counter, so its cache line moves between cores;
// that is the price of an exact rotation.
//
// Update: O(n) and a few allocations; it validates the set, builds a new
// snapshot and publishes it with one atomic store.
//
// # Concurrency
//
// Pick and Update are safe for concurrent use; a Pick that starts after
// Update returns sees the new set.
//
// # Mapping
//
// None: round robin has no affinity, and the sequence differs between
// processes because of the random start.
package rr
