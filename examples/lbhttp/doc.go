// Package lbhttp wires an lbkit picker into net/http: a reverse proxy, or
// an http.Client spreading its requests over replicas, with the feedback,
// retries and affinity keys the algorithms need to work as documented.
//
//	lb, err := health.New(leastconn.New(), health.Config{
//		Probe: health.HTTP(health.HTTPCheck{Path: "/healthz"}),
//	})
//	if err != nil { ... }
//	if err := lb.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080")); err != nil { ... }
//	if err := lb.Start(context.Background()); err != nil { ... } // ends with Close
//	defer lb.Close()
//	proxy, err := lbhttp.NewProxy(lb, lbhttp.Config{})
//	if err != nil { ... }
//	log.Fatal(http.ListenAndServe(":8000", proxy))
//
// NewProxy returns an httputil.ReverseProxy whose Rewrite computes the
// affinity key and whose Transport is a [Transport]. Use the Transport
// alone as an http.Client's transport to spread a client's requests:
//
//	t, err := lbhttp.NewTransport(lb, lbhttp.Config{Key: lbhttp.Header("X-User")})
//	client := &http.Client{Transport: t}
//	resp, err := client.Get("http://api/users/42") // "api" stays the Host header
//
// The zero Config is ready for backends that answer within seconds:
//
//   - Timeouts: 5 s per attempt to the response headers (AttemptTimeout),
//     15 s for the request over all its attempts (RequestTimeout), 60 s
//     that a read of a response body may wait for the backend
//     (IdleTimeout). A negative value turns one off. Set them for your
//     slowest legitimate answer: an endpoint that takes 8 s needs a longer
//     AttemptTimeout, or every request to it fails.
//   - Attempts: 3 backends per request at most (MaxAttempts). A refused
//     connection is always tried again elsewhere; a timeout, a broken
//     connection or a 503 only for a request that may be sent twice.
//   - Budget: retries at most 20% of requests plus 10 a second, counted
//     over 10 s (Budget, BudgetConfig); NoBudget turns it off.
//   - Hedging: off. HedgePercentile: 95 turns it on for requests that may
//     be sent twice (see "Hedged requests").
//
// A caller must: wrap the picker in health (so that timeouts and failures
// eject a backend), give the backends to the outermost layer's Update,
// and close or read every response body (its attempt's Done comes then).
// Nothing else is required; Key and TrustedProxies matter for the hash
// pickers, Base for TLS or a proxy dialer.
//
// # What the Transport does for the picker
//
// Every lbkit picker learns from balancer.Feedback, and gets it wrong if
// the caller does not say when a request ends or how it went. The
// Transport does it for every backend it picks:
//
//   - Where Done goes: to Config.Feedback, or to the picker itself when it
//     implements balancer.Feedback (health.Balancer, leastconn, lrt,
//     consistent's bounded ring do). Once per pick: a request retried on
//     a second backend gives two picks and two Dones.
//   - When: when the response body ends, not when the headers arrive, so
//     that a slow or streamed body still counts as in flight. That is at
//     EOF, at a read error, or at Close, whichever comes first; for an
//     attempt that got no response, at once. A response without a body
//     (http.NoBody, as http.Transport returns for HEAD, 204, 304 and
//     Content-Length: 0; or any HEAD, 204 or 304 answer) reports when
//     RoundTrip returns, as Classify judges it, so closing it unread is
//     not abandoning it. The latency is from sending the request to that
//     moment. A 101 Switching Protocols (WebSocket) body reports at Close,
//     with Result{}: a session's length is no latency. Behind NewProxy
//     the end of the incoming request also closes it, which covers a
//     client connection ReverseProxy cannot hijack (a ResponseWriter
//     wrapper without Hijack or Unwrap): ReverseProxy answers 502 and
//     drops the body unclosed.
//   - A 101 that ReverseProxy would not carry is a failed attempt: one to
//     a protocol the request did not ask for in Upgrade (or to any, when
//     it asked for none; RFC 9110 section 7.8), a protocol name that is
//     not printable ASCII, or a body that cannot be written. Its body is
//     closed, Done reports the error and the retry rules below apply.
//   - A panic in the base transport or in Config.Classify still gives the
//     pick its Done, with an error wrapping balancer.ErrAbandoned (a bug
//     in the program says nothing of the backend), and closes the
//     response body; the panic then goes on.
//   - What counts as an error: no response (a refused or broken
//     connection, a timeout), a body that breaks off, and a response that
//     Config.Classify calls a failure: by default any 5xx (a
//     *StatusError), not a 4xx. The response is returned to the caller
//     either way.
//   - What an abandoned request gets: when the caller cancels the
//     request's context (a proxy's client went away), or closes the body
//     before its end on a response Classify accepted, Done gets
//     Result{Err: balancer.ErrAbandoned} (or the context.Canceled error):
//     Result.Abandoned() is true, so it is neither a failure for health
//     nor a latency sample. A deadline that passes is a failure: the
//     backend was too slow. So is a caller that gives up on the headers
//     after waiting longer than AttemptTimeout: it counts as that
//     timeout.
//
// # Timeouts
//
// Every attempt runs under a guard: a context of the Transport's own and
// a timer. Before the response headers the timer ends the attempt at
// AttemptTimeout after it was sent, or at RequestTimeout after RoundTrip
// began if that is sooner; while the body streams, it ends it when a Read
// has waited IdleTimeout for the backend (time the reader spends between
// reads, a proxy writing to a slow client, does not count). The request's
// own cancellation and deadline still apply (behind NewProxy, the
// cancellation once the attempt has run 100 ms; see "Cost").
//
// An attempt the timer ends is a failure of its backend, a gateway
// timeout: Result{Latency: the time waited, Err: ErrAttemptTimeout,
// ErrRequestTimeout or ErrIdleTimeout}. Health counts it towards an
// ejection (five in a row eject, as five 5xx do: Envoy's consecutive
// gateway failures), lrt takes the latency as a sample (a stalled
// backend's estimate jumps at once), and the request goes on to another
// backend if it may be sent twice. The caller gets the last error, a
// net.Error whose Timeout is true and which matches
// context.DeadlineExceeded; behind NewProxy the client gets 504. An
// IdleTimeout cannot be retried: the headers, and part of the body, are
// the caller's already; the reader gets ErrIdleTimeout from Read.
//
// So a client waits at most RequestTimeout (15 s) for the headers, and
// never more than IdleTimeout (60 s) for the next byte of a body: a
// backend that accepts connections and never answers costs each request
// AttemptTimeout (5 s) and a retry, until health ejects it. In TestStall
// (timeouts of 400 ms, 50 clients, one of four backends stalled before
// its headers, every algorithm, under -race at load average 17) the
// longest wait was 0.62 to 1.11 s, under 3 × 400 ms; the stalled backend
// was ejected 0.4 to 0.9 s in and picked no more; and no request failed.
//
// The defaults come from the proxies lbkit stands beside: Envoy's route
// timeout is 15 s and its per_try_timeout falls back to it; nginx's
// proxy_read_timeout is 60 s between two reads; HAProxy's timeout server
// has no default and its documentation sets it in seconds. 5 s per
// attempt is ten times the slowest backend of the study this library
// grew out of, and fits three attempts in 15 s.
//
// # Which key
//
// Hash pickers (iphash, consistent) map balancer.Request.Key to a backend.
// NewProxy takes it from Config.Key, called on the incoming request:
//
//   - ClientIP (the default): the client's address, from RemoteAddr, or
//     from X-Forwarded-For when the peer is one of Config.TrustedProxies.
//     This is the key iphash needs. A header from an untrusted peer is
//     ignored, so no client can pick its backend by forging it.
//   - ForwardedClientIP: the same from the RFC 7239 Forwarded header.
//   - Header or Cookie: a session, user or tenant your front end sets, for
//     consistent hashing. First(Cookie("sid"), ClientIP()) falls back to
//     the address for clients without one.
//
// The key travels to the Transport in the request context (WithKey). A
// Transport used directly takes it from WithKey, or Config.Key called on
// the request.
//
// # Retries
//
// An attempt that fails without a response is tried again on another
// backend (Request.Attempt counts up, Request.Avoid names the backend that
// failed, so every picker, hash pickers included, moves on):
//
//   - always when nothing was sent: the connection was refused or could
//     not be made. A request body that cannot be fetched again (no
//     GetBody, as in a proxy) is held back from the first attempt's
//     Close, so it can go to the next backend unread;
//   - otherwise only when sending twice is safe: an idempotent method
//     (GET, HEAD, OPTIONS, TRACE, PUT, DELETE; RFC 9110 9.2.2) or an
//     Idempotency-Key header, and a body that can be sent again (none, or
//     GetBody). A POST whose connection broke, or timed out, after it was
//     sent is never sent again: it may have taken effect.
//
// A response is the caller's, even a 5xx, with one exception: a response
// Config.RetryOn accepts (by default a 503 Service Unavailable, which a
// backend answers when it cannot take the request now) to a request that
// may be sent twice is closed, reported as Classify judged it, and the
// request tried on another backend; the last attempt's response goes to
// the caller whatever it is.
//
// Attempts are bounded by Config.MaxAttempts (3 by default), none starts
// once the request's context has ended or RequestTimeout has passed, and
// every retry must pass the budget. The caller gets the last attempt's
// error (or response). With no backend at all, RoundTrip fails with an
// error wrapping balancer.ErrNoBackend, which NewProxy's ErrorHandler
// answers with 503 "no backend available".
//
// Retries on the same set keep an affinity picker's mapping: the clients
// of a dead backend retry elsewhere and all others stay put. Once health
// ejects the backend, the picker gets a smaller set: consistent's ring and
// Maglev still move only that backend's clients, but iphash, hashing
// modulo the set's size, moves most clients (see package iphash).
//
// # The retry budget
//
// Retries are what keeps a request alive when one backend fails, and
// what triples the load on the others when they all fail: an overload, a
// bad deploy, a storm of 503s. A [Budget] bounds them: in any 10 s
// window, retries and hedges at most 20% of the requests that started in
// it plus 10 a second (Finagle's RetryBudget; Envoy's budget is 20% of
// the requests in flight, at least 3; gRPC's retryThrottling is a token
// bucket the service config sizes). When the budget says no, the request
// fails with its last error at once. Every Transport has one unless
// Config.NoBudget is set; Config.Budget shares one between Transports.
// Budget and Percentile take the time, or the samples, from the caller,
// so that a simulator can drive them in virtual time.
//
// In TestBudgetStorm (1,000 requests from 50 clients, a budget of 20% plus
// 1 a second over a minute), four backends answering 503 at once received
// 1,260 requests, (1 + 0.2) × 1,000 + 60, and four refusing ones as many
// connection attempts; without the budget, 3,000 each. With one backend
// of four refusing and health in front (TestBudgetOneDead), no client
// request failed, for any algorithm: the refusal ejects it at once, and
// the budget covers the retries meanwhile.
//
// # Hedged requests
//
// A hedge is a second attempt sent while the first is still waiting
// ("The Tail at Scale", Dean and Barroso, 2013): with Config.HedgeAfter
// set, or Config.HedgePercentile, a request that may be sent twice (see
// Retries; and not an upgrade) whose first attempt has no response
// headers after the delay gets one on another backend (Attempt 1, Avoid
// the first). The first usable answer wins, a response RetryOn would not
// retry; the other attempt is cancelled and its Done reports it abandoned
// (a race lost teaches nothing, unless it had outlived AttemptTimeout).
// If the first attempt fails while the hedge waits, the hedge is its
// retry. Hedges count as attempts and spend the budget, so that when
// every backend is slow they stay within its share instead of doubling
// the load.
//
// The delay is fixed (HedgeAfter), or a percentile of the recent
// latencies to response headers (HedgePercentile; 95 as the paper
// advises), kept in a [Percentile] sketch without a lock or an
// allocation; HedgeAfter is then the least delay. Until the sketch has
// PercentileMinSamples answers, nothing is hedged. An attempt still
// waiting when it timed out or lost the race is counted at the time it
// waited, so that the slow answers hedging hides still hold the
// percentile up.
//
// In TestHedgeTail (four backends answering in 200 ms, 1% of each one's
// requests at 20 times that, 50 clients, a proxy without hedging and one
// with it measured in turn under the same load; three runs under -race on
// a two-core machine at load average 14), hedging at the 95th percentile
// cut the clients' p99 from 4.0 s to 0.67 to 0.93 s, 4.3 to 6.1 times, for
// 2.0 to 4.8% more backend requests. The cut shrinks as the machine's own
// delays approach the backends' latency, since the 95th percentile then
// climbs far above the median: with two busy loops added it was 4.5 and
// 2.9 times, and with 50 ms backends at load 14, 1.9 to 2.9. With every
// backend slower than a fixed delay (TestHedgeBudget) the budget kept the
// backend requests at 530 to 540 for 400 client requests, against 785 to
// 800 without it.
//
// # Timeouts, the budget and hedging in the simulator
//
// Package bench/sim runs this package's Budget and Percentile in virtual
// time, with the Transport's rules for timeouts, retries and hedges, over
// the four backends of the study this library grew out of (50, 150, 300
// and 500 ms) and 100 users who give up after a minute: go run
// ./bench/cmd/lbsim -scenarios stall,storm,tail (seed 1, one proxy; the
// range over the ten algorithms of package bench, and the same through
// this package's NewProxy on loopback with -live, at scale 0.1, for rr,
// leastconn and lrt):
//
//   - A backend that accepts connections and never answers from the
//     first minute on. With the timeouts off, every user it catches waits
//     until it gives up: 24 to 100 users (live: 25 to 100), each waiting
//     60 s. With the defaults no request failed, simulated or live, and no
//     user waited more than 5.50 s (live: 5.64 s): one attempt timeout and
//     the retry's answer; five timeouts ejected the backend, and round
//     robin served 230 requests/s during the stall against 120 without
//     them. HedgePercentile 95 on top, without the budget, brought the
//     longest wait down to 1.5 to 2.8 s (live: 1.9 to 2.9 s).
//   - Every backend answering 503 in a millisecond for 30 s. Every request
//     in the storm fails whatever the Transport does; what it controls is
//     the load. Retries without the budget sent 2.99 to 3.00 attempts a
//     request (live: 2.98 to 2.99); the default budget held it to 1.21
//     (live: 1.22 to 1.23, the 10 a second weighing more at the rate the
//     rig served).
//   - 1% of each backend's requests 20 times slower. The attempt timeout
//     cut the tails beyond 5 s (the 99.9th percentile of round robin from
//     10.0 to 5.5 s, live the same), and HedgePercentile 95 cut the 99.9th
//     percentile 3.7 to 5.5 times (live: 1.9 to 5.0 times) for 0.5 to 2.7%
//     more attempts (live: 2.4 to 4.5%). With four equal 200 ms backends,
//     TestHedgeTail's setting, it cut the p99 from 4.0 to 0.40 s.
//
// Two things the simulator showed that the tests above do not. Hedges
// and retries share the budget: in the stall, with hedging and the
// budget, the pickers that herd (wrr, lrt, lrt-naive) failed 52 to 100
// requests in the simulation, where without the budget none failed. The
// attempts the stall holds lose their races to the hedges and are
// reported abandoned, so they count towards no passive ejection and teach
// the picker nothing; the backend stays in rotation until the active
// checks take it out, each request sent there needs a hedge, the hedges
// spend the budget, and the retries of the attempts that then time out
// find it spent. And a race lost teaching nothing costs lrt in the tail:
// the attempts to the slower backends, whose usual answers come after the
// 95th percentile, lose to their hedges, lrt never learns that those
// backends are slow, and sends them more as its estimates decay: 17%
// less throughput with hedging than without (live: 22% less). Package
// bench/sim ("Slow backends, measured") has the tables. So when you hedge,
// keep health's active checks on (a Probe, whose timeout fails a stalled
// backend's checks): with hedging they, not passive ejection, take a
// stalled backend out.
//
// # Backends from DNS
//
// A Refresher re-resolves a name every Interval and Updates the picker
// (usually the health.Balancer) with "address:port" Endpoints, keeping
// the previous set when a lookup fails or returns nothing.
//
// # Load reports
//
// A backend can say how loaded it is in an ORCA endpoint-load-metrics
// response header (the header Envoy reads; TEXT, JSON or BIN). The
// Transport parses it from every response (LoadOf) and passes it to Done
// in balancer.Result.Load, for the pickers that weigh by it: wrr's
// Reported (gRPC's weighted_round_robin, gRFC A58) and leastconn with
// WithReports. A report that does not parse counts as none.
//
// Reporter is the backend's side, an http.Handler middleware: it sends
// the header with every response (utilisation from a Capacity or a
// function of yours, rps and eps over a window) and answers probes on
// DefaultProbePath with the requests in flight and a latency estimate.
// Prober asks those probes for lrt/prequal:
//
//	// backend
//	rep, err := lbhttp.NewReporter(app, lbhttp.ReporterConfig{Capacity: 64})
//	http.ListenAndServe(":8080", rep)
//
//	// proxy
//	p := wrr.NewReported()
//	proxy, err := lbhttp.NewProxy(p, lbhttp.Config{})
//
// The proxy forwards the header to its clients like any other; delete it
// in the proxy's ModifyResponse to keep it inside (the Transport has read
// it by then).
//
// # Cost
//
// The Transport allocates once per attempt: one block holding the copy of
// the request sent to the backend, its URL, its context and the response
// body wrapper (TestAllocs; BenchmarkRoundTrip: 1 alloc, 704 B). Behind
// NewProxy the Rewrite allocates that block for the first attempt, with
// the context carrying the key, so that lbkit adds one allocation to a
// bare ReverseProxy's request (TestProxyAllocs). The keys themselves
// (ClientIP, ForwardedClientIP, Header, Cookie) allocate nothing for
// canonical addresses (TestKeyAllocs). The guard that bounds an attempt
// in time (a context, timers) is reused from a pool. A request whose
// context can be cancelled adds two allocations, the context.AfterFunc
// that passes its cancellation to the guard; behind NewProxy, whose
// requests' contexts end only when their clients have gone, only an
// attempt that runs longer than 100 ms does (an attempt whose client
// leaves sooner runs on until then: TestProxyClientGone). A guard whose
// timer fired or whose attempt was cancelled is not reused, so a timeout
// or an abandoned request costs a new one; so does a hedge. A response
// that carries a load report adds one allocation of 80 B to hold it until
// the body ends; parsing a TEXT or JSON report allocates nothing unless it
// has named metrics (TestParseLoadAllocs). NewProxy's BufferPool spares
// each request the 32 KB copy buffer a bare ReverseProxy allocates.
//
// Through the real ReverseProxy on loopback (BenchmarkProxy: client,
// proxy and backends in one process), a request cost 144 allocations and
// 44.9 KB through a bare ReverseProxy with Go's defaults, 143 and 12.2 KB
// with a BufferPool; through NewProxy 144 and 12.9 KB with the timeouts
// and the budget off, 142 and 12.7 KB with them on, the default (one
// fewer than the bare proxy: the base transport's context for the request
// registers with the guard's pooled context, not with a map made anew in
// the server's context of each request), and 146 and 13.2 KB with
// hedging at the 95th percentile, whose hedges (about one request in
// twenty) are whole extra requests to a backend.
//
// In CPU time per request of the proxy process (lbload, four loopback
// backends that answer at once, 64 connections, the proxy on a core of
// its own; a run's figure is the median of 5 to 16 rounds' ratios, each
// round running every proxy in turn, on a two-core machine at load
// average 1 to 7, where one round's figure moves by up to 15%), NewProxy
// with rr cost 1.04 and 1.05 times a bare ReverseProxy with a BufferPool
// and 256 idle connections per backend in two runs (1.03 with the
// timeouts and the budget off); the ready proxy, with health around rr,
// 0.96 times in the quietest run (load average 0.8 to 3) and 0.98 to 1.11
// in eight busier ones, 1.05 the median of the nine; a bare ReverseProxy
// with Go's defaults cost 2.4 to 2.5 times NewProxy: the 32 KB buffer,
// and with two idle connections per backend a new connection for most
// requests. In a profile of the ready proxy lbkit's own code takes about
// 4% of the CPU:
// the Transport's work around the base's RoundTrip (2.3%: the pick, the
// copy of the request, the guard's two timers, the budget, the clock
// readings), the Rewrite's key and block (1.1%, SetXForwarded aside) and
// the body wrapper and Done; 41% is system calls (per request, two writes
// and five reads, three of which find nothing and park the goroutine),
// and most of the rest net/http's parsing, header maps, the scheduler and
// the garbage collector. On the Transport alone (BenchmarkRoundTrip, a
// base that answers at once) the timeouts and the budget add 0.1 to 0.3
// µs per request, 0.5 µs with a context that can be cancelled on a
// Transport used directly (the AfterFunc).
//
// NewBase, the default base transport, keeps up to 256 idle connections
// per backend instead of Go's 2. With 2, a proxy holding more than two
// requests in flight to a backend closes the extra connections as their
// responses end and opens new ones for the next requests: a handshake per
// request, and a socket left in TIME_WAIT each time.
package lbhttp
