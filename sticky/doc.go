// Package sticky pins a request to the backend its session names, while
// that backend can take it: session persistence for any picker (HAProxy's
// cookie persistence, nginx Plus's sticky, traefik's sticky cookies), the
// cookie itself being lbhttp's (Config.Sticky).
//
//	st, err := sticky.New(leastconn.New())
//	h, err := health.New(st, health.Config{}) // health ▶ sticky ▶ leastconn
//	b, err := h.Pick(balancer.Request{Prefer: "10.0.0.2:8080"}) // that one, while health keeps it
//
// A request names the backend it would rather go to by ID in
// balancer.Request.Prefer. When that backend is in the set the Balancer
// was last given, Pick returns it without asking the picker inside;
// otherwise (no Prefer, a backend gone, drained, ejected or failing its
// probes, or a Prefer equal to Avoid) the picker inside picks as usual and
// the caller re-pins the session to what it got (lbhttp rewrites the
// cookie).
//
// # Why a decorator, and where it goes
//
// The rule "go there if it is eligible" needs the eligible set, which
// health hands the layer inside it on every change: so sticky sits
// directly inside health, and a pinned pick costs a map read of that set,
// never a look at health's state, a lock or an allocation. Any picker
// works inside it, route (canaries) included; no algorithm needs to know
// about sessions. HAProxy and nginx do the same: a persistence cookie
// naming a server that is down or in maintenance is ignored and the
// request balanced afresh (HAProxy's option persist and force-persist
// override that; lbkit has no such override).
//
// # What the picker inside sees
//
// A pinned pick is not the inner picker's: it did not make it, so it does
// not get its Done (its in-flight counts stay exact), and it learns
// nothing from pinned requests. It balances the requests that are not
// pinned, new sessions mostly, on what it sees of them: leastconn counts
// the in-flight requests of the sessions it placed, not those of sessions
// already pinned. Health, outside, gets every Done, so passive ejection
// sees pinned traffic fail and takes the backend out, and its sessions
// move. InFlight reports both kinds.
//
// # Caller duties
//
// Put the Balancer inside health (health ▶ sticky ▶ algorithm), and give
// it a new inner picker that is updated only through it. Set Prefer on a
// request's first attempt only: a retry (Avoid set) must move on, and
// Pick ignores a Prefer equal to Avoid. It does not pass health's whole
// set to an inner balancer.HealthUpdater (locality): put locality outside
// sticky's set, or do without pinning there.
//
// # Cost
//
// Pick with a Prefer in the set: one atomic load, one map read by ID and
// one atomic add; otherwise the inner Pick after a map read, or nothing
// more when Prefer is empty. Done: one atomic load, one map read and a
// compare-and-swap, then the inner Done for a request the inner picker
// made. Neither locks nor allocates (TestAllocs; BenchmarkPick). Update:
// O(n) and the inner Update.
//
// # Concurrency
//
// Pick and Done are safe for concurrent use with each other and with
// Update, Start and Close. Update serialises on a mutex Pick and Done never
// take. Start, Close and Unwrap reach the picker inside (balancer's doc,
// "Decorators").
package sticky
