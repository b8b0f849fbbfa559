// Package subset gives each client a stable subset of a large fleet of
// backends, so that a fleet of C clients and n backends holds about C·k
// connections instead of C·n, and each client's picker, probes and
// outlier detection work on k backends. It wraps any balancer.Balancer
// (rr, leastconn, health around either, ...) and is itself one, and a
// balancer.Feedback: the inner picker only ever sees the subset.
//
//	h, err := health.New(leastconn.New(), health.Config{})
//	if err != nil { ... }
//	s, err := subset.New(h, subset.Config{Size: 20, Index: ordinal, Count: replicas})
//	if err != nil { ... }
//	defer s.Close() // closes health too
//	if err := s.Update(allBackends); err != nil { ... } // the whole fleet
//
//	b, err := s.Pick(balancer.Request{})
//	// ... send the request to b.ID(), read the response to the end ...
//	s.Done(b, balancer.Result{Latency: elapsed, Err: err})
//
// What the caller must do:
//
//   - Give the whole set to the subset's Update, never to the inner
//     picker: the subset hands the inner picker its share.
//   - Choose a mode. Deterministic (Count and Index set: this client is
//     Index of Count, a StatefulSet's ordinal, a task number) spreads the
//     fleet evenly: every backend has ⌊k·C/n⌋ or ⌈k·C/n⌉ clients.
//     Rendezvous (the default) needs no numbering: with ClientID set the
//     subset is the same in every process for that ID; without it each
//     Balancer draws a random salt, as gRFC A68's random_subsetting does.
//     It spreads the fleet as a random draw does (see Spread).
//   - Put health inside the subset, as above, so that only the subset is
//     probed, and locality inside health if zones matter (see package
//     locality). The subset ignores zones and weights when it chooses:
//     pass weights through to a weighted picker inside.
//   - Call Done once per Pick, as for any picker. Start and Close reach
//     the inner picker; Unwrap returns it, for its admin methods (health's
//     Drain), which know only the backends of this client's subset.
//
// # Modes
//
// Rendezvous (gRFC A68, "random subsetting with rendezvous hashing"):
// each backend scores xxhash(salt, 0, ID), the salt being ClientID or a
// random value drawn at New, and the subset is the Size highest scores.
// A backend's score depends on its own ID alone, so a backend leaving the
// set moves only the subsets that held it, one member each, and a backend
// joining enters about k/n of the subsets, displacing one member each:
// the least movement any scheme can have.
//
// Deterministic (the SRE book's deterministic subsetting, "Load Balancing
// in the Datacenter", laid out as Finagle's deterministic aperture lays
// out its ring): every client ranks the backends the same way, by xxhash
// of the ID, on a ring, and client Index of Count takes the Size
// backends from position ⌊Index·n/Count⌋ on. The starts are n/Count
// apart, so every run of k positions holds ⌊k·C/n⌋ or ⌈k·C/n⌉ of them:
// that is how many clients each backend has. The book groups clients
// into rounds of n/k, each round a fresh shuffle; but a round's size
// follows n, so one backend leaving a fleet of 300 with subsets of 20
// regroups every round: written as the book writes it, it moves most of
// the (client, backend) pairs, where the ring moves a handful
// (TestRoundsChurn holds the ring to a tenth of the rounds' moves at
// most). The ring also needs no n divisible by k. The price: neighbouring
// clients' subsets overlap (clients i and i+1 share all but about n/C
// backends), where the book's rounds make a round's subsets disjoint.
//
// In both modes a set of Size backends or fewer is passed whole, and the
// subset is a function of the IDs alone, not of their order: every
// process computes the same subsets from the same fleet.
//
// # Spread
//
// The fleet, 100 clients and 300 backends with subsets of 20
// (TestSpread; BenchmarkSpread reports the figures). All-to-all would be
// 100 clients per backend. Deterministic subsets give every backend
// ⌊k·C/n⌋ = 6 or ⌈k·C/n⌉ = 7 clients, 7% of all-to-all at most, and with
// round robin inside, each client picking 600 times, a backend with 6
// clients gets 6 × 600/20 = 180 picks and one with 7 gets 210, −10% and
// +5% of the mean of 200. Rendezvous hashing holds the mean at 6.7
// clients a backend but draws: some backends get no client at all and
// others twice the mean; gRFC A68 says as much (the spread narrows as
// k·C/n grows). TestSpread holds the deterministic mode to the ⌊k·C/n⌋
// and ⌈k·C/n⌉ bounds and its load within 15% of the mean. Prefer the
// deterministic mode where clients can be numbered.
//
// # Churn
//
// One backend leaving, then one joining (TestChurn): rendezvous moves
// exactly the subsets that held the leaver, one member each, and a
// joiner displaces one member of a subset at most; deterministic moves no
// subset more than two members, and at most 5% of the pairs. A change of
// Count in deterministic mode (the client fleet scaling) moves every
// start and so most subsets.
//
// # The fleet scenario
//
// lbsim's fleet scenario (go run ./bench/cmd/lbsim -scenarios fleet;
// package bench/sim, "Fleets") plays 100 proxies of 10 users each in
// front of 300 backends serving in about 10 ms, for a minute; each
// proxy's picker in a deterministic subset of 20 (Index p of Count 100),
// against the same picker over all 300. Connections per backend are the
// proxies that sent it a request, as many as a connection pool would
// open: 100 all-to-all, 6 or 7 in subsets. Round robin inside spreads the
// load as the arithmetic above says; least connections adds the noise of
// its two random choices, which shrinks over a longer run; lrt, with a
// few requests in flight over 20 backends, sends more to those its
// latency estimates favour. docs/results.md has every algorithm's figures.
//
// # Retries
//
// A retry whose Avoid names the only backend the inner picker would
// return (a subset of one, say) gets the spare, the backend that would
// join the subset next, so that Avoid keeps its meaning as the balancer
// package defines it; the inner pick is handed back with Done and
// balancer.ErrAbandoned. Hash pickers inside walk their retry sequence
// within the subset: Attempt reaches k backends, not n.
//
// # Cost
//
// Pick: the inner Pick, plus, for a retry, a string comparison and an
// atomic load; no lock, no allocation. Done: the inner Done.
// BenchmarkPick sets Pick+Done through a subset of 20 beside the bare
// picker. Update: the set's validation, n hashes and a sort, O(n log n),
// then the inner Update of the subset (BenchmarkUpdate, at 1024
// backends).
//
// # Concurrency
//
// Pick and Done are safe for concurrent use with each other and with
// Update; calls to Update are serialised by a mutex that Pick and Done
// never take. A Pick that starts after Update returns picks from the new
// subset.
//
// # Determinism
//
// With ClientID set, or in deterministic mode, the subset depends on the
// configuration and the backends' IDs alone. Without a ClientID the salt
// comes from Config.Rand, once, at New: seed it to repeat a simulation.
package subset
