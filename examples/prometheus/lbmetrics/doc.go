// Package lbmetrics exports what a load balancer does to Prometheus: picks,
// requests in flight, latency and failures per backend, health states, and
// the cost of Pick itself. It is a decorator: it wraps any lbkit picker
// (usually a health.Balancer around an algorithm) and is itself a
// balancer.Balancer and a balancer.Feedback, so it goes wherever the
// picker went.
//
//	m, err := lbmetrics.New(lbmetrics.Config{})
//	if err != nil { ... }
//	reg.MustRegister(m) // your registry, or prometheus.DefaultRegisterer
//
//	h, err := health.New(leastconn.New(), health.Config{OnChange: m.HealthChanged})
//	if err != nil { ... }
//	lb, err := m.Wrap(h)
//	if err != nil { ... }
//	if err := lb.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080")); err != nil { ... }
//	if err := lb.Start(context.Background()); err != nil { ... } // starts health's probes
//	defer lb.Close()
//
//	proxy, err := lbhttp.NewProxy(lb, lbhttp.Config{}) // lb is the picker and its Feedback
//
// What a caller must do:
//
//   - Register the Metrics: nothing registers itself, and the package never
//     touches the default registry. One Metrics wraps one balancer; a
//     process with several makes one each and sets Config.ConstLabels to
//     tell them apart ({"upstream": "orders"}).
//   - Make the decorator the outermost layer, and give it the backends:
//     call Update on the Balancer Wrap returns, never on the one inside.
//     Backends reach the metrics only through that Update.
//   - Call Done exactly once per Pick, when the request has finished, with
//     what happened (see balancer.Result): that is what moves in-flight,
//     latency and failures. The lbhttp Transport and the lbkit gRPC policy
//     do it for you.
//   - For health states, pass HealthChanged as health.Config.OnChange (or
//     call it from yours). Health is made before the decorator, so the
//     Metrics, made first of all, is what both share.
//   - Start and Close the decorator, not health: Start and Close pass on
//     to the balancer inside, as every lbkit decorator's do (balancer's
//     doc, "Decorators"). Health's admin methods are found from the top
//     with balancer.As: h, ok := balancer.As[*health.Balancer](lb), then
//     h.Drain(id). Around health or inside it, the decorator works the
//     same, but only around it does it see health's states and every
//     backend in the set: inside, it sees the eligible backends health
//     hands it.
//
// # Metrics
//
// Names start with Config.Namespace, "lbkit" by default. Per-backend
// series carry the label backend, the backend's ID (its address, for a
// balancer.Endpoint).
//
//	lbkit_picks_total{backend}                     counter    times Pick returned the backend; a retry is a pick of its own
//	lbkit_requests_in_flight{backend}              gauge      picked, Done not yet called
//	lbkit_request_duration_seconds{backend}        histogram  Result.Latency of requests that are samples: latency > 0,
//	                                                          not abandoned; failures included (a timeout is the slowest answer)
//	lbkit_failures_total{backend}                  counter    Result.Err != nil and not abandoned: a transport error, a timeout,
//	                                                          a 5xx the caller counts as a failure
//	lbkit_abandoned_total{backend}                 counter    Result.Err wraps balancer.ErrAbandoned or context.Canceled:
//	                                                          the caller gave up; neither failure nor latency sample
//	lbkit_backend_state{backend,state}             gauge      1 for the backend's health state, 0 for the others; state is
//	                                                          up, ejected, down, draining or maintenance (health.State)
//	lbkit_backend_state_changes_total{backend,state}  counter changes into each state, as HealthChanged saw them
//	lbkit_health_panic                             gauge      1 while health is in panic mode (no backend eligible)
//	lbkit_pick_errors_total{reason}                counter    Picks that failed: no_backend (empty set), bad_key
//	                                                          (balancer.ErrBadKey), other
//	lbkit_pick_duration_seconds                    histogram  time spent in the wrapped Pick, for a random
//	                                                          one in Config.PickSampling picks (default 8)
//
// Useful queries: a backend's share, sum by (backend) (rate(lbkit_picks_total[1m]))
// over the sum of all; its error ratio, rate(lbkit_failures_total[1m]) /
// rate(lbkit_picks_total[1m]); its p99,
// histogram_quantile(0.99, sum by (backend, le) (rate(lbkit_request_duration_seconds_bucket[1m]))).
// Picks minus finished requests is in flight, so picks_total and
// requests_in_flight together show a leak: a caller that never calls Done.
//
// The state series exist only for backends health has reported on: a
// balancer without health inside exports none, nor health_panic. They are
// set by HealthChanged as changes happen, and read again from the wrapped
// health Balancer's View (when the wrapped Balancer is one, or has one
// inside that balancer.As finds) at every Update and every scrape, so that
// a backend that joins already down (health.Config.InitialDown) or comes
// back still ejected shows its true state. The changes counter counts only what HealthChanged was told.
//
// # Removed backends
//
// A backend that leaves the set keeps its series while requests to it are
// in flight, so that their Done still counts. Its series are deleted by the
// first scrape or Update that finds it idle once an earlier scrape or
// Update has seen it removed: a backend removed idle goes at the second
// after its removal, one removed busy at the first after its last Done
// (if one came while it was busy). The grace of one lets a Pick that began
// before the removal and ends after it still find them. A backend that
// comes back before then keeps counting where it was; one that comes back
// later starts again from zero, which Prometheus's rate() reads as a
// counter reset. So series do not pile up when a DNS-refreshed or
// autoscaled set churns. A backend's counters survive a flap of lbkit's
// health decorator wrapped inside this one, which does not remove it from
// the set the decorator sees; behind the gRPC policy (examples/grpc), a
// backend whose connection drops leaves the READY set, and so this set,
// and starts again from zero if two scrapes or Updates pass while it is
// away. A caller that never calls Done for a request keeps its backend's
// series for good.
//
// # Cost
//
// Pick: the wrapped Pick, the backend's ID, one map read in an immutable
// snapshot and two atomic adds; one draw of math/rand/v2 (per-thread, no
// lock) when PickSampling is above 1; for a timed Pick, two clock readings
// and a histogram observation. Done: one map read, an atomic
// compare-and-swap, a histogram observation (three atomic operations in
// client_golang) and, for a failure, a counter add and the walk of the
// error's chain. Neither takes a lock nor allocates: every per-backend
// child (counter, observer) is resolved once, when the backend joins, and
// kept in the snapshot. Update: O(n) map work, the children of new
// backends (WithLabelValues, which allocates), the wrapped Update, and a
// health View. A scrape: O(backends), plus the health View.
//
// The pick duration includes the cost of one clock reading, which depends
// on the machine's clock source: read its low buckets as "fast", not as an
// exact figure, and compare with BenchmarkPickDone's wrap=none on the same
// machine.
//
// # Benchmarks
//
// BenchmarkPickDone runs balancertest.Benchmark over each algorithm bare
// (wrap=none), wrapped with the default sampling (wrap=sampled), and
// wrapped timing every pick (wrap=every):
//
//	go test -run '^$' -bench 'PickDone/algo=(rr|leastconn)/.*/n=(4|1024)/' -count 3 ./lbmetrics/
//
// None of it allocates. What the decorator adds per request is the
// latency histogram's Observe, the per-backend atomic operations and the
// two map reads; timing every Pick adds two clock readings and a
// histogram shared by every Pick, hence one Pick in 8 by default. Set
// the difference beside one request through lbhttp's proxy on loopback
// (lbhttp's BenchmarkProxy) on the same machine to judge it.
package lbmetrics
