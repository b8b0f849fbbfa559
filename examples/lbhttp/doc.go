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
//     backend was too slow.
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
//     GetBody). A POST whose connection broke after it was sent is never
//     sent again: it may have taken effect.
//
// Attempts are bounded by Config.MaxAttempts (3 by default), and none
// starts once the request's context has ended; the caller gets the last
// attempt's error. A response, even a 5xx, is not retried: it goes to the
// caller, and to health as a failure. With no backend at all, RoundTrip
// fails with an error wrapping balancer.ErrNoBackend, which NewProxy's
// ErrorHandler answers with 503 "no backend available".
//
// Retries on the same set keep an affinity picker's mapping: the clients
// of a dead backend retry elsewhere and all others stay put. Once health
// ejects the backend, the picker gets a smaller set: consistent's ring and
// Maglev still move only that backend's clients, but iphash, hashing
// modulo the set's size, moves most clients (see package iphash).
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
// the request sent to the backend, its URL and the response body wrapper
// (TestAllocs; BenchmarkRoundTrip: 1 alloc, 640 B; the pointer to a load
// report took the block past 576 B, a size class, and a response that
// carries a report adds one allocation of 80 B to hold it until the body
// ends). Parsing a TEXT or JSON report allocates nothing unless it has
// named metrics (TestParseLoadAllocs). NewProxy's Rewrite
// adds two: the context carrying the key, and the request copy
// WithContext makes. The keys themselves (ClientIP, ForwardedClientIP,
// Header, Cookie) allocate nothing for canonical addresses
// (TestKeyAllocs). Through the real ReverseProxy on loopback,
// BenchmarkProxy measured 147 allocations and about 45.9 KB per request
// with NewProxy against 144 and 44.9 KB for a plain ReverseProxy with the
// same base transport; the time per request was within the noise of a
// busy two-core machine (100 to 250 µs for both).
//
// NewBase, the default base transport, keeps up to 256 idle connections
// per backend instead of Go's 2. With 2, a proxy holding more than two
// requests in flight to a backend closes the extra connections as their
// responses end and opens new ones for the next requests: a handshake per
// request, and a socket left in TIME_WAIT each time.
package lbhttp
