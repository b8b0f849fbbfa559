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
//     so all such RPCs share one backend. lbkit_ring_hash and lbkit_maglev
//     take gRPC's own setting instead, if you prefer (gRFC A76):
//     {"requestHashHeader": "x-user-id"}, under which an RPC without the
//     header goes to a random endpoint (see Hash keys).
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
//     does not implement hedgingPolicy; package lbhedge's interceptor
//     hedges, sending each hedge to another endpoint (see Attempt).
//   - A server that accepts RPCs and never answers them, while its health
//     service still says SERVING, is out of gRPC health checking's
//     reach: its RPCs fail at their deadline. lbkit_lrt learns to avoid it
//     from the first few; to take it out with any algorithm, build the
//     policy with NewBuilder around lbkit's health decorator, whose
//     passive checks eject an endpoint after five failures in a row
//     (lbkit-grpc-demo -stall stalls one of three servers a third of the
//     way through its RPCs and prints the RPCs that failed; add -eject to
//     compare).
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
//	                                                      {"requestHashHeader": "x-user"} (A76)
//	lbkit_maglev       consistent Maglev                  {"key": "x-user"} or {"requestHashHeader": "x-user"}
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
// experimental weight attribute (which xDS sets). When any of gRPC's
// weights in an update is above balancer.MaxWeight (gRPC's xDS client
// sets fractions of 2³¹, gRFC A113), they are scaled down together, their
// ratios kept: divided by their gcd, then if need be in proportion. A
// resolver update with a SetWeight weight outside [1, balancer.MaxWeight],
// an endpoint without an address, or two endpoints with the same first
// address is refused as a whole, and the previous endpoints stay in use.
//
// # Hash keys (gRFC A76)
//
// lbkit_ring_hash and lbkit_maglev follow gRFC A76, "Improvements to the
// Ring Hash LB Policy", on both of its sides:
//
//   - The request's key. With "key", the named metadata entry's first
//     value, as ever; with "requestHashHeader" (A76's
//     request_hash_header, gRPC ring_hash's requestHashHeader), the
//     header's values joined with ",", and for an RPC without the header
//     or with an empty value a random key, so that such RPCs go to a
//     random endpoint, each with its share of the ring or table
//     (TestRequestHashHeader: 300 header-less RPCs over three servers
//     reach each at least 40 times, where "key" sends them all to one).
//     The random key is one of 65537 fixed random strings, chosen per RPC
//     with math/rand/v2: no allocation. The name must be a header name,
//     [0-9a-z-_.] (upper case is read as lower), and not a binary header
//     (-bin), as A76 says; "key" and "requestHashHeader" are exclusive.
//     A76's third case, no header configured and the hash taken from xDS
//     route hash_policy, is gRPC's xDS config selector's and has no lbkit
//     counterpart: set "key" or "requestHashHeader".
//   - The endpoint's place. An endpoint with a hash key, set with gRPC's
//     google.golang.org/grpc/resolver/ringhash.SetHashKey (gRPC's xDS
//     client sets it from the EDS endpoint metadata "envoy.lb" hash_key,
//     unless GRPC_XDS_ENDPOINT_HASH_KEY_BACKWARD_COMPAT=true, A76's
//     temporary way back),
//     is placed on the ring or table by that key instead of its first
//     address (balancer.HashKeyer; see HashKeyOf), so that an endpoint
//     whose address changes with its key kept (a StatefulSet pod
//     rescheduled) keeps its RPCs' keys, and none other moves
//     (TestEndpointHashKey). Its ID, for in-flight counts, is still its
//     first address. A resolver update in which two endpoints have one
//     placement key (one hash key; or a hash key equal to another's first
//     address) is refused as a whole with an error wrapping
//     balancer.ErrDuplicateHashKey, and the previous endpoints stay in
//     use (gRPC's own ring_hash (v1.85) does not refuse such a list;
//     lbkit refuses what it cannot place apart).
//     Hash keys are read when the READY set changes, never per RPC.
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
// Load.Named (balancer.MetricInFlight and MetricLatency also in InFlight
// and Latency), without a copy. A report is taken by the rule every lbkit
// source keeps (balancer.LoadBuilder), whole or not at all: one with a
// value out of range (a negative, NaN or infinite value, a
// mem_utilization above 1) or more than balancer.MaxNamedMetrics named
// metrics reaches Done as no report, the zero Load, as the same report in
// an HTTP header does through lbhttp. Two built-in policies use them:
//
//   - lbkit_wrr_orca: weights qps / (utilisation + penalty × eps/qps),
//     gRPC's weighted_round_robin (A58) on lbkit's smooth schedule. Its
//     config takes A58's settings under A58's names: blackoutPeriod (10s),
//     weightExpirationPeriod (3m), weightUpdatePeriod (1s, at least
//     0.1s: A58 raises a shorter one to 0.1s, this policy refuses it, as
//     lbkit refuses every value it would otherwise change; see package
//     balancer, "Options"), errorUtilizationPenalty (1). Out-of-band
//     reports (enableOobLoadReport) are not offered: reports come with
//     each RPC, so an endpoint that gets no RPCs reports nothing, and
//     after the expiry it weighs the mean of the others again.
//   - lbkit_least_conn_orca: two choices on reported utilisation × (RPCs
//     in flight + 1), in-flight counts alone for an endpoint without a
//     fresh report.
//
// TestORCAShiftsTraffic runs both against real servers recording ORCA
// metrics: three backends at 100 RPCs a second by their reports and
// utilisation 0.2, 0.2, 0.8 weigh 500, 500 and 125 by A58's formula, so
// under lbkit_wrr_orca the third gets 1/9 of the RPCs, as the test
// asserts; at 0.3, 0.3, 0.9 under lbkit_least_conn_orca the test holds the
// third below 22%.
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
// and Avoid stay zero unless the caller says so: a gRPC retry of a hashed
// RPC goes to the same endpoint if it is still READY. An interceptor that
// sends attempts of its own puts an Attempt in each one's context
// (WithAttempt): the picker passes its N and Avoid to the lbkit picker and
// records the endpoint it picked, which the next attempt can avoid. That
// is how lbhedge sends a hedge to another endpoint. For a streaming RPC the latency is the stream's
// lifetime; prefer lbkit_least_conn to lbkit_lrt for long streams.
//
// # Cost
//
// BenchmarkPick is the gRPC picker's Pick and Done over four stand-in
// children, without gRPC around it, for lbkit_round_robin,
// lbkit_least_conn (two clock reads and the pooled record) and
// lbkit_maglev with a key. It allocates nothing, but with a key one
// allocation: gRPC's metadata lookup copies the entry's values
// (TestPickAllocs asserts both). requestHashHeader costs the same with
// one value, nothing when the header is missing (the random key), and
// three allocations for a header with several values (the copy and the
// join). BenchmarkRPC times a whole unary RPC
// over loopback with gRPC's round_robin and with lbkit's policies: the
// policy adds no allocation, and its time is lost in the RPC's.
// go test -run '^$' -bench 'BenchmarkPick|BenchmarkRPC' ./lbpolicy/
// runs both.
package lbpolicy
