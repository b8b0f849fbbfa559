// Package rr is round robin: each pick takes the next backend in turn, so
// every backend gets an equal share of requests whatever it costs to serve
// them. Use it when backends are alike and requests cost about the same;
// when backends differ in capacity use wrr, and when request costs or
// backend speeds vary use leastconn or lrt (see Choosing below).
//
//	p := rr.New()
//	if err := p.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080")); err != nil { ... }
//	b, err := p.Pick(balancer.Request{})
//	if err != nil { ... } // balancer.ErrNoBackend: the set is empty
//	// ... send the request to b.ID() ...
//
// What a caller must do:
//
//   - Done: nothing to call. A Picker does not implement balancer.Feedback
//     and learns nothing from finished requests, so a proxy that looks for
//     Feedback gets nil. Calling Done through a decorator (health, metrics)
//     is still right: they use it.
//   - Key: none. Request.Key and Attempt are ignored. On a retry, set Avoid
//     to the ID of the backend that failed: if the turn falls on it, Pick
//     returns the next backend (the same one only in a set of one).
//   - Errors: round robin does not see them. A dead or slow backend keeps
//     getting its share until it leaves the set.
//
// Package github.com/lbkit/lbkit/lbhttp wires a picker into
// net/http: a reverse proxy or client transport that retries a refused
// connection on another backend with Avoid set. Wrap the picker in
// github.com/lbkit/lbkit/health to keep dead and failing backends out of
// its set.
//
// # Choosing
//
// Round robin ignores how long requests take, so a slow backend holds more
// of them, and with backends that serve a bounded number at once the
// slowest one queues its full share. With backends that answer alike it
// is as good as any and the cheapest pick there is. Without health in
// front, a dead backend keeps its share of requests until it leaves the
// set. lbsim's tables (docs/results.md; go run ./bench/cmd/lbsim) set rr
// beside every other algorithm in the study's scenarios.
//
// # Algorithm
//
// One atomic counter, shared by all goroutines, indexes the set modulo its
// size. The counter starts at a random value so that a fleet of proxies
// started together does not send its first requests to the same backend
// (WithRand makes the start repeatable). It carries on across updates, so
// an update does not send a burst to the first backend. The counter is 64
// bits wide, so it never wraps in practice. (A division-free remainder,
// Lemire's fastmod, was tried and was no faster in BenchmarkPick: the
// atomic add, not the division, sets the pace.)
//
// A request whose Avoid names the backend whose turn it is gets the next one.
// Weights are validated but not used.
//
// # Cost
//
// Pick: one atomic add, one division, no lock, no allocation; small enough
// for the compiler to inline when called on a *Picker. Its floor is the
// bare atomic add: BenchmarkPick and BenchmarkAtomicAdd measure the two in
// one run. Under parallel load every pick writes the one counter, so its
// cache line moves between cores; that is the price of an exact rotation.
// The Picker is laid out in whole cache lines, so that the counter's
// traffic, and whatever the caller allocated next to the Picker, never
// evict the snapshot pointer that every Pick reads (see Picker).
//
// Update: O(n) and a few allocations. It takes the mutex that serialises
// Updates, validates the set with balancer.NewSet (reading each ID once),
// builds a new snapshot and publishes it with one atomic store.
//
// # Concurrency
//
// Pick and Update are safe for concurrent use; a Pick that starts after
// Update returns sees the new set. Calls to Update are serialised,
// validation included, by a mutex that Pick never takes.
//
// # Mapping
//
// None: round robin has no affinity, and the sequence differs between
// processes because of the random start.
package rr
