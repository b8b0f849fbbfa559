// Package locality keeps each request in the caller's zone while that
// zone can take it, and fails over from one tier of backends to the next
// when a tier degrades: Envoy's zone-aware routing and priority levels,
// as a decorator with any lbkit picker inside. Each zone of each priority
// level gets a picker of its own (leastconn, rr, a hash picker...); the
// Balancer chooses a level and a zone for each request, then asks that
// zone's picker.
//
//	l, err := locality.New(func() balancer.Balancer { return leastconn.New() }, locality.Config{
//		Zone: "us-east-1a", // where this caller runs
//	})
//	if err != nil { ... }
//	h, err := health.New(l, health.Config{}) // health around it: see below
//	if err != nil { ... }
//	defer h.Close()
//	err = h.Update([]balancer.Backend{
//		balancer.NewEndpoint("10.0.0.1:8080", 1).At(balancer.Locality{Zone: "us-east-1a"}),
//		balancer.NewEndpoint("10.0.1.1:8080", 1).At(balancer.Locality{Zone: "us-east-1b"}),
//		balancer.NewEndpoint("10.9.0.1:8080", 1).At(balancer.Locality{Zone: "us-west-2a", Priority: 1}),
//	})
//
//	b, err := h.Pick(balancer.Request{})
//	// ... send the request to b.ID(), read the response to the end ...
//	h.Done(b, balancer.Result{Latency: elapsed, Err: err})
//
// What the caller must do:
//
//   - Say where each backend runs: balancer.Endpoint.At, or a Backend of
//     your own that implements balancer.Locator. A backend without a
//     locality is in zone "" at priority 0. examples/kubernetes fills it
//     from EndpointSlices.
//   - Say where the caller runs (Config.Zone) and, if callers are not
//     spread over the zones as the backends are, how many run in each
//     (Config.Callers, or SetCallers when that changes). Without a Zone
//     there is no zone-aware routing, only priority levels.
//   - Wrap the Balancer in health, not the other way round: health then
//     calls UpdateHealth (the Balancer is a balancer.HealthUpdater) with
//     every backend and its health, so that a level's unhealthy backends
//     lower its share and a level can panic on its own backends. One
//     health keeps one prober and one ejection record per backend, and
//     its Drain is the one to call. Give the set to health's Update;
//     without health, call Update (every backend healthy) or UpdateHealth
//     yourself.
//   - Make newPicker return a new, empty picker on every call. The
//     Balancer calls it once per zone and level; Start and Close reach
//     the pickers it made. It has no Unwrap, holding many: health's
//     Drain, around it, is the one to call.
//
// To give each client a subset of a large fleet, put package subset
// around health: subset ▶ health ▶ locality ▶ one picker per zone.
//
// That order differs from the one lbkit's design first drew, [subset] ▶
// [locality] ▶ health ▶ algorithm. With locality outside, it would need a
// health per zone (a prober and an ejection record per zone's picker, and
// a Drain per zone) and would see only the backends health found
// eligible, so it could neither lower a level's share as its backends
// fail nor panic per level: health's own panic mode, over the whole set,
// would hide a level's loss from it. Inside health, it gets every backend
// with its health through balancer.HealthUpdater, the explicit interface
// the design asks for, and one health serves all zones.
//
// # Priority levels
//
// Envoy's priority load, with its overprovisioning factor, 1.4 by default
// (Config.Overprovisioning; SetOverprovisioning changes it on a live
// Balancer, as an xDS ClusterLoadAssignment carries its own): a level's
// health is its healthy share of weight times the factor, capped at 100%. Level 0 takes its health's
// worth of the traffic, level 1 the rest up to its own health, and so on
// down the chain. So level 0 keeps everything while 71.4% of it is healthy;
// with 60% healthy it keeps 84% and level 1 takes 16%. If the healths add
// up to less than 100%, the levels together cannot carry the traffic:
// each level then takes its health over their sum, and a level whose
// healthy share is below the panic threshold (50%, Envoy's
// healthy_panic_threshold; Config.PanicPercent) panics: its traffic goes
// to all of its backends, healthy or not, rather than crushing the few
// that are left. If nothing at all is healthy, level 0 takes everything,
// in panic, as health's own panic mode would (Config.NoPanic turns off
// the rest of panic, not this).
//
// # Zone-aware routing
//
// Within a level, with Config.Zone set, Envoy's two cases. Let u be the
// local zone's share of the level's healthy weight and c the local share
// of the callers (Config.Callers; by default, the local zone's share of
// the level's backends, healthy or not: each zone taken to be provisioned
// for its own callers).
//
//   - u ≥ c: the local zone can serve every local caller at no more load
//     per backend than elsewhere. All the local traffic stays local.
//   - u < c: the local zone keeps u/c of the local traffic, which loads
//     its backends as much as the others, and sends the rest to the zones
//     with room left after their own callers (their u − c), in proportion
//     to that room.
//
// A worked example: three zones of 10 backends, callers spread alike.
// Zone a loses half its backends: its healthy share is 5/25 = 20%, its
// callers' 33%. It keeps 20/33 = 60% of its traffic; zones b and c each
// have 40% − 33% = 6.7% of room, and take 20% of a's traffic each. Every
// healthy backend then serves the same share: a's 5 get 0.6 × 1/3 of the
// whole, b's 10 get 1/3 + 0.2 × 1/3, each 4% of the whole.
//
// Zone-aware routing applies in a level that has at least MinSize healthy
// backends (6, Envoy's min_cluster_size), healthy backends in the local
// zone and in at least one other, and is not in panic. Otherwise the
// level's traffic is spread over its zones by healthy weight (total weight
// in panic), which is what one picker over the whole level would do. Two
// departures from Envoy: zone-aware routing applies in every level, not
// only level 0, and shares are of weight rather than of host count (equal
// when weights are 1).
//
// # Picks and retries
//
// A request with a Key draws its level and zone from the key's hash
// (mixed, so that it does not bunch the keys on one arc of a ring inside):
// a key goes to the same zone in every process with the same view, and a
// hash picker inside keeps its affinity. Other requests draw from
// Config.Rand. Attempt n of a request walks from its zone's picker
// (attempts 0 to m−1 for a zone of m) to the next zone's, level by level,
// so that a hash picker's retries reach every backend once; a pick of
// req.Avoid, which a picker returns only when it has nothing else, moves
// on to the next zone. The balancertest kit runs with the kit's backends
// spread over three zones and two levels (TestConformance).
//
// # Done
//
// Done goes to the picker that picked the backend, also after it has
// left the set (the last max(n, 64) removed) or moved to another zone or
// level (its last 8), so that every picker's in-flight counts come back
// to zero (TestDoneFollowsMovedBackend). The value tells the pickers
// apart: a moved backend comes as a new value (Endpoint.At), whose
// Locality names the zone it was picked in. When the same value moves (a
// Backend whose Locality changes in place), the old zone's picker takes
// its Dones while it counts requests to it; two Dones racing for its last
// request can leave one on the new zone's count, so give a moved backend
// a new value.
//
// # Cost
//
// Pick: an atomic load, a random number or a hash of the key, two mixes,
// a scan of the levels' and the level's zones' cut points (a handful),
// and the inner Pick; no lock, no allocation. Done: an atomic load, a map
// read by ID (and, for a backend that moved, a comparison per earlier
// zone), the inner Done. UpdateHealth: O(n log n) to lay the set out
// by level and zone, and an Update of each picker whose backends changed,
// only: a health flip updates one zone's picker.
//
// BenchmarkPick measures Pick+Done, serial and parallel: bare (the
// algorithm alone), flat (the Balancer over backends without locality:
// one picker), zoned (the harness's backends spread over three zones,
// the caller's taking everything) and spill (half of the local zone
// unhealthy, a third of its traffic going to the others); none allocates.
// The draw (a key's hash or a random number, two mixes) and Done's map
// read by ID make most of the difference with several zones.
// BenchmarkUpdateHealth flips one backend's health in 1024 backends over
// three zones and two levels.
//
// # The zones scenario
//
// lbsim's zones scenario (go run ./bench/cmd/lbsim -scenarios zones;
// package bench/sim, "Fleets") plays three zones of 14, 10 and 6 backends
// serving in about 10 ms, 4 requests at once; 10 callers spread 5, 3 and
// 2 over them (Config.Callers says so); 2 ms more across zones; at 1
// minute zone a loses 7 of its 14 backends. Health (active checks,
// passive ejection, retries) goes around the Balancer, with each
// algorithm inside each zone, against health around one picker over all
// 30. The worked example's arithmetic says what to expect: zone a's 14
// of 30 backends against its 50% of the callers keep 14/30 ÷ 0.5 = 93.3%
// of its traffic, and 7/23 ÷ 0.5 = 60.9% once it has 7 of the 23 left;
// every other zone keeps all of its own, so 96.7% and then 80.4% of all
// requests stay in their zone. The simulator's requests carry a Key (the
// user's address), so each user's zone comes from its key's hash, and the
// shares from how the users' hashes fall. TestZones (package bench/sim)
// holds the local zone to at least 90% while every zone has capacity,
// and each zone's load during the outage within 15% of the others';
// docs/results.md has the tables.
//
// # Concurrency
//
// Pick and Done are safe for concurrent use with each other and with the
// writers (Update, UpdateHealth, SetCallers, SetOverprovisioning, Start,
// Close), which
// serialise on a mutex that Pick and Done never take. A
// writer updates the pickers that gain backends, then publishes the new
// routing, then empties the pickers left without any, so that a Pick
// running meanwhile always finds a picker with backends; a Pick that
// starts after Update returns sees the new set.
//
// # Determinism
//
// The routing tables are a function of the set, its health, the Config
// and the caller counts (plan is pure). With a seeded Config.Rand and
// seeded pickers inside, driven from one goroutine, every pick is
// repeatable, which is what the scenario simulator needs; keyed picks
// draw from the key alone.
package locality
