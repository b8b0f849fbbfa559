// Package discovery is the shape every lbkit discovery source follows: the
// part that does not depend on where the endpoints come from. A source
// (lbhttp's DNS Refresher, lbkube's EndpointSlice Watcher, the xDS and
// etcd clients under examples/) turns an outside system's view into a list
// of Endpoints and gives it to a Publisher, which brings the stack of
// pickers in line:
//
//	lb, _ := health.New(leastconn.New(), health.Config{})
//	pub, _ := discovery.New(lb, discovery.Config{})
//	rep, err := pub.Publish([]discovery.Endpoint{
//		{Addr: "10.0.0.1:8080", Weight: 2, Locality: balancer.Locality{Zone: "a"}},
//		{Addr: "10.0.0.2:8080", State: discovery.Draining},
//	})
//
// # The rules
//
//   - IDs are balancer.CanonicalAddr of the address, so two spellings of
//     one address are one backend (and refused as a duplicate within one
//     update), and a set keeps its IDs when it moves from a static list to
//     a source.
//   - A bad update changes nothing: Publish refuses the whole list (an
//     address that does not parse, a duplicate, a weight or priority out
//     of range), naming every fault, and the target keeps its set. A
//     source that would rather skip bad records (etcd's keys are written
//     one by one) drops them before Publish, with Endpoint.ID, and reports
//     them to its caller.
//   - A source keeps the last good set on every kind of error (a lost
//     connection, a timeout, a refused update): it publishes only what the
//     outside system said, and an empty list only when the system said the
//     set is empty. DNS, whose empty answers are often transient, keeps the
//     last set then too.
//   - Health reaches the stack through balancer.HealthUpdater when the
//     target implements it (health.Balancer takes an unhealthy endpoint
//     out of the picks; package locality inside still counts it in its
//     level's size, as Envoy counts it); otherwise unhealthy endpoints
//     are left out of the set.
//   - Draining reaches the first balancer.Admin layer (health.Balancer,
//     found with balancer.As): a draining endpoint already served stays in
//     the set, drained, so that its requests in flight finish and no new
//     ones start, until the source stops listing it. gRPC's xDS client
//     drops DRAINING endpoints at once; lbkit drains them.
//   - Start and Close follow the decorators' rules (Source): one Start,
//     balancer.ErrStarted for a second and balancer.ErrClosed after Close,
//     Close idempotent and waiting for every goroutine.
//   - A source that reconnects waits Backoff's delays between attempts
//     (gRPC's connection backoff, with its jitter).
//
// balancertest.RunSource checks a source against these rules, with a
// harness that drives its outside system.
//
// # Cost
//
// Publish is O(n log n) for n endpoints plus the target's Update (or
// UpdateHealth), and one Drain or Enable per endpoint whose state changed;
// it allocates the set it hands over. It is never on the request path.
//
// # Concurrency
//
// A Publisher is safe for concurrent use; its Publishes are serialised.
// It calls the target's methods under its own mutex, which nothing on the
// request path takes, and runs no callback of its caller's.
package discovery
