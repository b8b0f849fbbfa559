// Package lbpolicy makes any lbkit algorithm a gRPC load-balancing policy:
// a gRPC client spreads its RPCs over a service's endpoints with lbkit's
// least connections, least response time, weighted round robin or
// consistent hashing, chosen by the service config.
//
//	lbpolicy.Register() // once, before the first dial
//	cc, err := grpc.NewClient("dns:///orders.internal:50051",
//		grpc.WithTransportCredentials(creds),
//		grpc.WithDefaultServiceConfig(`{
//			"loadBalancingConfig": [{"lbkit_least_conn": {}}],
//			"healthCheckConfig": {"serviceName": ""},
//			"methodConfig": [{"name": [{"service": "orders.Orders"}], "timeout": "5s"}],
//			"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
//		}`))
//
// What a caller must do:
//
//   - Call Register (or register the Builders you want) once, before the
//     first dial. Nothing registers itself: the package has no init.
//   - Name a policy in loadBalancingConfig (the names are below). The
//     resolver's endpoints are the backends; only READY ones are picked.
//   - For the hash policies, name a metadata key in the config and set it
//     on every RPC: {"lbkit_ring_hash": {"key": "x-user-id"}}, then
//     metadata.AppendToOutgoingContext(ctx, "x-user-id", userID). For
//     lbkit_ip_hash the value must be a client address ("192.0.2.7" or
//     "192.0.2.7:51000"); one that does not parse fails the RPC at once
//     with INTERNAL. An RPC without the entry is hashed as the empty key,
//     so all such RPCs share one backend.
//   - Nothing to do for Done: the policy sees each RPC end and tells the
//     lbkit picker, with the latency from pick to end. A status in the
//     config's failureCodes (default DefaultFailureCodes(): UNKNOWN,
//     DEADLINE_EXCEEDED, INTERNAL, UNAVAILABLE, DATA_LOSS) is a failure;
//     CANCELLED means the caller gave up (balancer.ErrAbandoned: no sample,
//     no failure); any other status is an answer. See Config.
//   - For health checking, serve the standard health service
//     (google.golang.org/grpc/health) and put healthCheckConfig in the
//     service config: a NOT_SERVING endpoint leaves the lbkit picker's set.
//     This package imports gRPC's client-side health checker for you.
//   - To ride out a backend that dies mid-RPC, mark idempotent methods
//     waitForReady with a retryPolicy on UNAVAILABLE in the service config:
//     RPCs in flight on the dead server are retried elsewhere, new ones wait
//     for a READY endpoint instead of failing. One RPC is beyond any
//     policy's reach: if the server had begun its reply (sent response
//     headers) before it died, gRPC has committed the RPC and does not
//     retry it; it fails UNAVAILABLE, at most one per RPC then in flight.
//     A server that stops on purpose loses none: have it call its health
//     server's Shutdown (NOT_SERVING), then GracefulStop, which lets the
//     RPCs in flight finish (TestStoppedServer does both).
//   - Bound every RPC in time, and its retries in number: gRPC's own
//     service config does what lbhttp's defaults do for HTTP. A method's
//     "timeout" is each RPC's deadline (there is no per-attempt timeout
//     in gRPC: the deadline covers every attempt, and gRPC retries
//     nothing past it); an RPC that reaches it is DEADLINE_EXCEEDED, a
//     failure of its endpoint for the lbkit picker (lrt takes its
//     latency as a sample). "retryThrottling": {"maxTokens": 10,
//     "tokenRatio": 0.1} is the retry budget: every failed RPC costs a
//     token, every success earns a tenth of one, and with half the tokens
//     gone gRPC stops retrying until successes earn them back. grpc-go
//     does not implement hedgingPolicy.
//   - A server that accepts RPCs and never answers them, while its health
//     service still says SERVING, is out of gRPC health checking's
//     reach: its RPCs fail at their deadline. lbkit_lrt learns to avoid it
//     from the first few; to take it out with any algorithm, build the
//     policy with NewBuilder around lbkit's health decorator, whose
//     passive checks eject an endpoint after five failures in a row
//     (lbkit-grpc-demo -eject). In the demo, with a 300 ms deadline, 16
//     callers and one of three servers stalled a third of the way through
//     6,000 RPCs (one run each), round robin failed 1,329 RPCs and took
//     26 s; with -eject, 17 and 1.3 s. Least connections failed 24 (10
//     with -eject), lrt 4.
//
// # Policies
//
//	name               algorithm                          config
//	lbkit_round_robin  rr                                 {}
//	lbkit_wrr          wrr (weights: SetWeight)           {}
//	lbkit_least_conn   leastconn                          {}
//	lbkit_lrt          lrt (latency × in flight)          {}
//	lbkit_ip_hash      iphash                             {"key": "x-client-ip"}
//	lbkit_ring_hash    consistent ring, bounded if asked  {"key": "x-user", "boundedLoad": 1.25}
//	lbkit_maglev       consistent Maglev                  {"key": "x-user"}
//	lbkit_wrr_orca     wrr's Reported (ORCA, gRFC A58)    {"blackoutPeriod": "10s", "weightUpdatePeriod": "1s"}
//	lbkit_least_conn_orca  leastconn WithReports (ORCA)   {}
//
// Every config also takes "failureCodes". Unknown fields are refused, so a
// misspelt setting fails the dial rather than being ignored. lbkit's naive
// lrt, which herds, is not offered. To wrap a picker of your own (or an
// lbkit one with other options, or inside a decorator), build a policy with
// NewBuilder and register it with google.golang.org/grpc/balancer.Register.
//
// Weights come from the endpoints: SetWeight in your resolver, or gRPC's
// experimental weight attribute (which xDS sets). A resolver update with a
// weight outside [1, balancer.MaxWeight], an endpoint without an address,
// or two endpoints with the same first address is refused as a whole, and
// the previous endpoints stay in use.
//
// # Load reports (ORCA)
//
// gRPC backends can report their load in every RPC's trailer, with
// grpc-go's orca package (gRFC A51): serve with
// orca.CallMetricsServerOption(rec), rec an orca.ServerMetricsRecorder on
// which the server keeps its utilisation and rates up to date
// (SetApplicationUtilization or SetCPUUtilization, SetQPS, SetEPS), and
// record per-RPC metrics on orca.CallMetricsRecorderFromContext(ctx).
// Call that in every handler (or in an interceptor after the orca one, as
// TestORCAShiftsTraffic does), even with nothing per-RPC to record:
// grpc-go sends the trailer, server-wide metrics included, only for RPCs
// whose handler asked for their recorder. The policy hands each RPC's report to the lbkit picker's Done in
// balancer.Result.Load: the fixed fields, and the named metrics behind
// Load.Named (rif and latency_ms also in InFlight and Latency), without a
// copy. Two built-in policies use them:
//
//   - lbkit_wrr_orca: weights qps / (utilisation + penalty × eps/qps),
//     gRPC's weighted_round_robin (A58) on lbkit's smooth schedule. Its
//     config takes A58's settings under A58's names: blackoutPeriod (10s),
//     weightExpirationPeriod (3m), weightUpdatePeriod (1s, at least
//     0.1s), errorUtilizationPenalty (1). Out-of-band reports
//     (enableOobLoadReport) are not offered: reports come with each RPC,
//     so an endpoint that gets no RPCs reports nothing, and after the
//     expiry it weighs the mean of the others again.
//   - lbkit_least_conn_orca: two choices on reported utilisation × (RPCs
//     in flight + 1), in-flight counts alone for an endpoint without a
//     fresh report.
//
// TestORCAShiftsTraffic runs both against real servers recording ORCA
// metrics: three backends at 100 RPCs a second by their reports and
// utilisation 0.2, 0.2, 0.8 got 44.4%, 44.4% and 11.1% of the RPCs under
// lbkit_wrr_orca (A58's weights 500, 500, 125 give 1/9); at 0.3, 0.3,
// 0.9 the third got 12.1% to 12.8% under lbkit_least_conn_orca (four
// runs, load average 12 to 18; the test asserts below 22%).
//
// # How it works
//
// The policy is built like gRPC's own round_robin and least_request: an
// endpointsharding balancer keeps one pick_first child per endpoint, and
// the resolver state goes down through pickfirst.EnableHealthListener,
// without which the children would ignore health checking. Each time a
// child's state changes the READY endpoints or their weights, the policy
// hands them to the lbkit picker with Update, each as a Backend whose ID
// is the endpoint's first address (so what lbkit learned about it,
// in-flight counts and latency, carries across updates and reconnects),
// and publishes a gRPC picker. A change that leaves them as they were (a
// dead endpoint's reconnection attempts, a child's new picker) makes no
// Update: the child's picker is swapped in place, and a picker is
// published. With no endpoint READY, endpointsharding's own picker goes up
// instead, so RPCs queue or fail as gRPC decides.
//
// If the lbkit picker has no backend while endpoints are READY (a health
// decorator with every backend drained, say), a fail-fast RPC fails
// UNAVAILABLE at once, and one that waits for ready waits: the policy
// publishes a fresh picker every 250 ms while such RPCs keep finding the
// set empty, so they ask lbkit again.
//
// The gRPC picker calls the lbkit Pick, then the chosen endpoint's child
// picker for the connection. lbkit returns the very Backend it was given,
// so finding the child is a type assertion, not a lookup. If the child
// cannot serve the pick, the lbkit picker is told at once (Result{}) so
// that nothing stays counted in flight.
//
// Done needs the time of the pick, which a per-endpoint closure built once
// per picker cannot hold. So the picker takes a call record from a
// sync.Pool, each record with its Done func bound once when it was made;
// Done reports, calls the child's own Done if it had one, and returns the
// record. gRPC calls Done at most once per pick, which makes the reuse
// safe. When the lbkit picker learns nothing (it does not implement
// Feedback: rr, wrr, iphash, Maglev), none of this
// happens and the pick result is the child's own.
//
// gRPC does not tell a picker that a pick is a retry, so Request.Attempt
// and Avoid stay zero: a retry of a hashed RPC goes to the same endpoint
// if it is still READY. For a streaming RPC the latency is the stream's
// lifetime; prefer lbkit_least_conn to lbkit_lrt for long streams.
//
// # Cost
//
// Measured with go test -run '^$' -bench 'BenchmarkPick|BenchmarkRPC'
// -count 3 ./lbpolicy/ on a shared 2-core Intel Xeon VM, busy with other
// work, so take the times as rough. BenchmarkPick is the gRPC picker's
// Pick and Done over four stand-in children, without gRPC around it:
//
//	lbkit_round_robin  42–58 ns, 0 allocations
//	lbkit_least_conn   285–340 ns, 0 allocations (two clock reads, about
//	                   100–200 ns each on this VM, and the pooled record)
//	lbkit_maglev+key   96–171 ns, 1 allocation (16 B: gRPC's metadata
//	                   lookup copies the entry's values)
//
// A whole unary RPC over loopback (BenchmarkRPC) took 48–72 µs and 149
// allocations with gRPC's round_robin and with lbkit_round_robin,
// lbkit_least_conn and lbkit_lrt alike: the policy adds no allocation, and
// its time is lost in the RPC's noise. TestPickAllocs asserts the zero
// (one with a key).
package lbpolicy
