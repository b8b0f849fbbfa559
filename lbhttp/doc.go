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
//	log.Fatal(http.ListenAndServe("127.0.0.1:8000", proxy))
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
//   - Routing by header and sticky sessions: off (RouteHeader, Sticky;
//     see "Routes" and "Sticky sessions").
//
// A caller must: wrap the picker in health (so that timeouts and failures
// eject a backend), give the backends to the outermost layer's Update,
// and close or read every response body (its attempt's Done comes then).
// Nothing else is required; Key and TrustedProxies matter for the hash
// pickers, Base for TLS or a proxy dialer.
//
// What to change first: Config.TrustedProxies if a load balancer or CDN
// sits in front, or every client looks like that load balancer; Config.Key
// for a hash picker; Config.Classify if your backends signal overload with
// something other than a 5xx (a 429, say); the timeouts for your slowest
// legitimate answer. examples/proxy is a runnable proxy built from this
// package, and its package proxycmd the flags and the serving loop to
// import.
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
// The timer measures wall time, which goes on while the proxy cannot run
// (a stop-the-world pause, CPU throttling in a container, a stopped
// process). When the proxy runs again, Go runs the timers that came due
// before the reads whose data arrived meanwhile; so a timer that fires
// more than 10 ms late does not end anything: it waits again, for as long
// as it was late (20 ms at least), and the reads go first. A wait's
// graces add up to its timeout at most, so a proxy that cannot run for
// good still ends every wait, at twice its timeout at worst
// (TestPausedProxy: the proxy stopped with SIGSTOP while its backends, in
// another process, answer).
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
// the caller's already; the reader gets an error matching ErrIdleTimeout
// from Read, which names the backend.
//
// So that a stall just after the headers can still be retried, the
// Transport holds the start of a response to a request that may be sent
// twice (Config.HoldBytes, 64 KiB by default, or the whole body when it is
// shorter): it reads that much within the attempt timeout, the header
// timer still running, before RoundTrip returns. A backend that stalls
// or breaks off inside it fails the attempt (ErrAttemptTimeout, or the
// broken connection's error), a failure of that backend, and the request
// goes on to another; past it, IdleTimeout applies. nginx, which passes
// the headers on as soon as it has them, cannot retry there either. The
// hold is skipped for responses that say they stream (text/event-stream,
// X-Accel-Buffering: no), for requests whose Accept asks for
// text/event-stream, and when neither AttemptTimeout nor RequestTimeout
// is on. Turn it off (HoldBytes: -1) for endpoints that send their
// headers and then their body slowly under another content type (long
// polls, watch streams, NDJSON): their first HoldBytes would not come
// within the attempt timeout, and each would fail as a stall. A held
// response keeps a pooled buffer of HoldBytes until its held part has
// been read, and its bytes are copied once more (BenchmarkProxy's
// hold=off rows measure it).
//
// So a client waits at most RequestTimeout (15 s) for the headers, and
// never more than IdleTimeout (60 s) for the next byte of a body: a
// backend that accepts connections and never answers costs each request
// AttemptTimeout (5 s) and a retry, until health ejects it. TestStall
// holds it so on loopback for every algorithm, with timeouts of 400 ms and
// one of four backends stalled: no client waits more than MaxAttempts ×
// AttemptTimeout, the stalled backend is picked no more once ejected, and
// a stall before the headers fails no request.
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
// # Routes
//
// Package route sends a request to the backends whose label matches its
// balancer.Request.Route (a canary, a version, a colour). The Transport
// sets Route from WithRoute's value in the request context, or else from
// the first value of the header Config.RouteHeader names; with neither,
// Route is empty and route sends the request by weight or to its Default.
// Every attempt of a request, retries and hedges included, asks for the
// same Route; route's Fallback decides where it goes when its set is
// empty (drained, ejected, dead):
//
//	r, err := route.New(func() balancer.Balancer { return wrr.New() }, route.Config{Label: "version"})
//	h, err := health.New(r, health.Config{}) // health ▶ route ▶ a wrr per version
//	proxy, err := lbhttp.NewProxy(h, lbhttp.Config{RouteHeader: "X-Canary"})
//	// "X-Canary: v2" reaches the backends labelled version=v2 only; a
//	// request without it goes to a version in proportion to its weight.
//
// The header is forwarded to the backends as it came. Off by default, as
// in Envoy, whose header-based routing is a route's match rule the
// operator writes: any client that can send the header chooses its set,
// so strip it at your edge, or set the route with WithRoute in a wrapped
// Rewrite by rules of your own, where clients must not choose. Reading
// it is a map read of the request's header, no allocation
// (TestRouteAllocs). TestRouteCanary holds it on loopback: a canary of
// weight 5% takes about 5% of the requests without the header and all
// of those with it; drained or dead, its requests fall back and none
// fails.
//
// # Sticky sessions
//
// With Config.Sticky set, NewProxy pins each client session to a backend
// by a cookie it inserts, as HAProxy's cookie SRV insert indirect, nginx
// Plus's sticky cookie and traefik's sticky cookie do:
//
//	st, err := sticky.New(leastconn.New())
//	h, err := health.New(st, health.Config{}) // health ▶ sticky ▶ leastconn
//	proxy, err := lbhttp.NewProxy(h, lbhttp.Config{Sticky: &lbhttp.StickyConfig{Key: key}})
//
// What it does:
//
//   - The first response of a session, and any response from a backend
//     other than the one its cookie named, carries Set-Cookie:
//     lbkit_sticky=<value>; Path=/; HttpOnly; SameSite=Lax (the name is
//     StickyConfig.Name; Max-Age and Secure when configured). A response
//     from the backend the cookie named sets none.
//   - A request with a valid cookie goes to the backend it names while
//     that backend is eligible: balancer.Request.Prefer carries the ID on
//     the first attempt, and the sticky.Balancer inside health returns
//     that backend when health still hands it to it. Gone, drained,
//     ejected or failing its probes, it is not there: the request is
//     picked afresh and its cookie rewritten. A retry or a hedge moves on
//     as any does, and the backend that answers is the one the cookie is
//     rewritten to.
//   - The value does not show the backend: it is base64url of an
//     HMAC-SHA256 tag of the backend's ID, truncated to 128 bits,
//     followed by the ID encrypted with AES-CTR under that tag (the SIV
//     construction of RFC 5297, HMAC in place of CMAC), with two keys
//     drawn from StickyConfig.Key. A client can neither read which
//     backend it has nor make a cookie for a backend of its choice; the
//     tag is checked in constant time. A cookie that does not hold
//     (garbage, tampered with, another key's, an address in clear) is
//     ignored: the request is picked afresh, answered, and given a new
//     cookie, never an error page (TestStickyForged).
//   - The cookie is removed from the request before it is forwarded, so
//     that the backend sees the application's cookies only: the
//     persistence is the proxy's, as with HAProxy's indirect. A backend
//     that wants a session of its own sets its own cookie.
//   - Key: give every proxy of a fleet the same one, so that a session
//     keeps its backend whichever proxy takes it and across restarts; by
//     default each proxy draws a random key at NewProxy, and its cookies
//     are good in that process only (every session is re-pinned once
//     after a restart). MaxAge: a session cookie by default, which the
//     browser forgets when it closes (HAProxy's insert without maxlife);
//     a Max-Age counts from when the cookie was set, not from the last
//     request.
//
// Why a field in Request and a decorator: the rule is "go there if it is
// eligible", and eligibility is health's, which hands the layer inside it
// the eligible set on every change. So the sticky.Balancer sits directly
// inside health, and a pinned pick is a map read of that set and an
// atomic add: no lock, no allocation, and no look at health's state from
// the Transport, which does not know the picker's layers. Any algorithm,
// route included, works inside it. A pinned pick is not the inner
// algorithm's, which neither counts it nor learns from it; it balances the
// sessions it places (see package sticky). NewProxy refuses Sticky
// without a sticky.Balancer in the stack (found by balancer.As), rather
// than rewriting every client's cookie on every request.
//
// Cost: a request with a cookie the proxy has seen is a read of its
// Cookie header, a map read of the value, the deletion of the cookie from
// the outgoing request (a new Cookie line when the request carries other
// cookies too) and the pinned pick: TestStickyProxyAllocs holds a pinned
// request to the allocations of one without sticky sessions. A cookie
// not seen before is decrypted and its tag computed once, then
// remembered; a forged one is checked on every request, an HMAC and an
// AES block. Setting a cookie adds a header line, precomputed per
// backend. BenchmarkProxy's cookie=.../sticky=... rows measure both.
// Sessions spread as the algorithm inside places them; leastconn sees the
// requests it placed, not those of sessions already pinned.
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
// TestBudgetStorm sends 1,000 requests to four backends that all answer
// 503 (or all refuse), with a budget of 20% plus 1 a second over a
// minute: the backends receive at most (1 + 0.2) × 1,000 + 60 = 1,260,
// where without the budget every request tries three, 3,000. With one
// backend of four refusing and health in front (TestBudgetOneDead), no
// client request fails, for any algorithm: the refusal ejects it at once,
// and the budget covers the retries meanwhile.
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
// TestHedgeTail (four backends answering in 200 ms, 1% of each one's
// requests at 20 times that, a proxy without hedging and one with it
// measured in turn under the same load) holds hedging at the 95th
// percentile to at least a threefold cut of the clients' p99, for at most
// 10% more backend requests. The cut shrinks as the machine's own delays
// approach the backends' latency, since the 95th percentile then climbs
// far above the median. With every backend slower than a fixed delay
// (TestHedgeBudget) the budget holds the backend requests to its share,
// (1 + 0.2) × requests + 60, which hedges without it exceed.
//
// # Timeouts, the budget and hedging in the simulator
//
// Package bench/sim runs this package's Budget and Percentile in virtual
// time, with the Transport's rules for timeouts, retries and hedges, over
// the study's four backends and users who give up after a minute:
// go run ./bench/cmd/lbsim -scenarios stall,storm,tail, a backend that
// accepts connections and never answers, every backend answering 503 for
// 30 s, and 1% of each backend's requests 20 times slower (docs/results.md
// has the tables; -live plays them through NewProxy on loopback). What
// they show about the mechanisms:
//
//   - Without timeouts, every user a stalled backend catches waits until
//     it gives up; with the defaults each such request costs one attempt
//     timeout and a retry, and five timeouts eject the backend.
//   - In a storm of 503s every request fails whatever the Transport does;
//     what it controls is the load: retries without the budget triple it,
//     the budget holds it to its share.
//   - The attempt timeout cuts a tail beyond 5 s to a timeout and a retry;
//     hedging cuts the tail's percentiles further, for a few more attempts.
//   - Hedges and retries share the budget. In the stall, the attempts the
//     stalled backend holds lose their races to the hedges and are
//     reported abandoned, so they count towards no passive ejection and
//     teach the picker nothing; the backend stays in rotation until the
//     active checks take it out, each request sent there needs a hedge,
//     the hedges spend the budget, and with the pickers that herd (wrr,
//     lrt) the retries of the attempts that then time out find it spent.
//   - A race lost teaching nothing costs lrt in the tail: the attempts to
//     the slower backends, whose usual answers come after the 95th
//     percentile, lose to their hedges, lrt never learns that those
//     backends are slow, and sends them more as its estimates decay.
//
// So when you hedge, keep health's active checks on (a Probe, whose
// timeout fails a stalled backend's checks): with hedging they, not
// passive ejection, take a stalled backend out.
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
// NewProxy keeps both inside: it removes the report headers from the
// responses once the Transport has read them, and answers a request for
// the probe path itself, 404, so that no client reads a backend's load
// or requests in flight through it. Config.ForwardLoadReports and
// Config.ForwardProbes pass them through (a proxy in front of another
// lbkit proxy that picks by them); Config.ProbePath names the backends'
// path when it is not DefaultProbePath.
//
// # Cost
//
// The Transport allocates once per attempt: one block holding the copy of
// the request sent to the backend, its URL, its context and the response
// body wrapper (TestAllocs). Behind NewProxy the Rewrite allocates that
// block for the first attempt, with the context carrying the key, so that
// lbkit adds one allocation to a bare ReverseProxy's request
// (TestProxyAllocs). The keys themselves (ClientIP, ForwardedClientIP,
// Header, Cookie) allocate nothing for canonical addresses
// (TestKeyAllocs). The guard that bounds an attempt in time (a context,
// timers) is reused from a pool. A request whose context can be cancelled
// adds two allocations, the context.AfterFunc that passes its
// cancellation to the guard; behind NewProxy, whose requests' contexts
// end only when their clients have gone, only an attempt that runs longer
// than 100 ms does (an attempt whose client leaves sooner runs on until
// then: TestProxyClientGone). A guard whose timer fired or whose attempt
// was cancelled is not reused, so a timeout or an abandoned request costs
// a new one; so does a hedge. A response that carries a load report adds
// one allocation to hold it until the body ends; parsing a TEXT or JSON
// report allocates nothing unless it has named metrics
// (TestParseLoadAllocs). NewProxy's BufferPool spares each request the
// 32 KB copy buffer a bare ReverseProxy allocates.
//
// The benchmarks, to run on your machine:
//
//   - BenchmarkRoundTrip: the Transport alone over a base that answers at
//     once, with the timeouts and the budget on and off, and with a
//     context that can be cancelled.
//   - BenchmarkProxy: the real ReverseProxy on loopback (client, proxy and
//     backends in one process), allocations and bytes per request: a bare
//     ReverseProxy with Go's defaults and with a BufferPool, NewProxy with
//     the timeouts and the budget off and on, and with hedging, whose
//     hedges are whole extra requests to a backend.
//   - BenchmarkBudget and BenchmarkPercentile: the budget's and the
//     sketch's cost per request.
//   - bench/cmd/lbload and bench/sidebyside/run.sh: CPU per request of a
//     proxy process in front of loopback backends, the ready proxy beside
//     nginx and a bare ReverseProxy, as ratios measured in one run.
//
// Most of a proxy's CPU is net/http's, not lbkit's: system calls (two
// writes and a few reads per request, some of which find nothing and park
// the goroutine), parsing, header maps, the scheduler and the garbage
// collector. lbkit's own share is the pick, the copy of the request, the
// guard's timers, the budget, the clock readings, the Rewrite's key and
// the body wrapper and Done.
//
// NewBase, the default base transport, keeps up to 256 idle connections
// per backend instead of Go's 2. With 2, a proxy holding more than two
// requests in flight to a backend closes the extra connections as their
// responses end and opens new ones for the next requests: a handshake per
// request, and a socket left in TIME_WAIT each time.
//
// # Its tests
//
// The tests run real servers on loopback (go test -race ./lbhttp/).
// TestKillBackend puts four backends behind the real ReverseProxy and
// runs sixteen clients, each from its own 127.0.0.x address; a third of
// the way through it closes one backend's listener and connections. For
// every algorithm (without health, the retry budget off) no client request
// fails, every pick gets exactly one Done, and with iphash, ring and
// maglev only the dead backend's clients move. TestKillBackendHealth runs
// the same with the picker wrapped in health and the default budget
// (go test -v -run TestKillBackend ./lbhttp/ prints the failover per
// algorithm).
package lbhttp
