// Package balancer holds the contracts every lbkit picker implements, and
// what a caller hands them: the backends ([Endpoints], [WeightedEndpoints]),
// the [Request] a pick takes and the [Result] that reports how the request
// went. The pieces the pickers share are exported too, for pickers written
// outside lbkit.
//
// Every picker (rr, wrr, leastconn, iphash, consistent, lrt, and the health
// decorator around any of them) is wired the same way:
//
//	var p balancer.Balancer = leastconn.New()
//	if err := p.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080")); err != nil { ... }
//	fb, _ := p.(balancer.Feedback) // once; nil for a picker that learns nothing
//
//	b, err := p.Pick(balancer.Request{Key: key}) // per request
//	if err != nil { ... }                        // balancer.ErrNoBackend: answer 503
//	start := time.Now()
//	// ... send the request to b.ID(); when the response body is closed or read to the end:
//	if fb != nil {
//		fb.Done(b, balancer.Result{Latency: time.Since(start), Err: err})
//	}
//
// What a caller must do:
//
//   - Call Done once per Pick, when the request has finished: for HTTP when
//     the response body has been read to the end or closed, not when the
//     headers arrive, so that a slow or streamed body still counts as in
//     flight. Also when the request failed or was given up on. A retry is a
//     new Pick and gets its own Done. leastconn, lrt and consistent's Ring
//     implement [Feedback] (the Ring counts only with bounded loads), and
//     so does health; rr, wrr, iphash and consistent's Maglev do not and
//     learn nothing from finished requests. A Pick without its Done leaves
//     a request counted in flight for good.
//   - Pass the affinity key in Request.Key: the client address for iphash, a
//     session or user ID for consistent; the others ignore it. On a retry,
//     set Attempt to 1, 2, ... and Avoid to the ID of the backend that just
//     failed: every picker then returns another backend when the set has
//     one, and the hash pickers the same one in every process.
//   - Say how it went: Result{Latency: d} for a success; Result{Latency: d,
//     Err: err} for a failure (a transport error as it came, or wrapped with
//     %w; a timeout; a 5xx you count as one); Result{Err: [ErrAbandoned]}, or
//     an error wrapping context.Canceled, for a request the caller gave up
//     on: no latency sample, and not a failure. Result{} means nothing was
//     measured, also not a failure. See [Result] for each case.
//
// Package github.com/lbkit/lbkit/examples/lbhttp does all of this for
// net/http: a reverse proxy or an http.Client transport that calls Done when
// the body ends, retries with Attempt and Avoid, and takes the key from the
// client address, a header or a cookie. Wrap the picker in
// github.com/lbkit/lbkit/health to keep dead and failing backends out of
// its set.
//
// # Backends
//
// A [Backend] is one upstream with a stable, unique ID and, optionally, a
// weight ([Weighter]). [Endpoint] is a ready implementation: [NewEndpoint],
// [Endpoints] for addresses of weight 1, [WeightedEndpoints] for address and
// weight pairs. Its methods are safe on a nil *Endpoint, which has the empty
// ID: passed to Done it is an unknown backend, and Update refuses it.
//
// # Contracts
//
// A [Picker] has one method, Pick([Request]) (Backend, error). It never
// blocks, takes no lock and allocates nothing. The Request carries an
// affinity key for hash pickers, and what a retry needs to reach a different
// backend (Attempt, and Avoid: the ID of the backend that just failed).
//
// A [Feedback] learns from finished requests through Done(Backend, [Result]).
// Pickers that count in-flight requests or learn latency implement it, and
// so do decorators (health, metrics), which pass it on. Callers find it with
// a type assertion, once. [Result.Abandoned] and [Result.Sample] say what a
// Result teaches: an abandoned request leaves the in-flight count and
// nothing else; only a Result with a positive Latency that was not
// abandoned is a latency sample.
//
// An [Updater] replaces the set. Every lbkit Update first takes the mutex
// that serialises Updates (held by writers only, never by Pick), then
// validates the set with [NewSet], which reads each backend's ID and weight
// exactly once and refuses nil backends, empty or duplicate IDs and weights
// outside [1, MaxWeight]; on error the previous set stays. So calls to
// Update are serialised, validation included, and a weight that changes
// after validation cannot reach a schedule or table. On success Update
// publishes an immutable snapshot built from the [Set] through an atomic
// pointer, and a Pick that starts after Update returns sees the new set. A
// [Balancer] is a Picker with Update. Pickers written outside lbkit should
// do the same; package balancertest checks it.
//
// # Data flow
//
//	backend list ──Update──▶ health (full set, eligibility) ──Update(eligible)──▶ algorithm snapshot
//	request ──Pick(Request)──▶ health.Pick ──▶ algorithm.Pick ──▶ Backend
//	caller sends, measures ──Done(Backend, Result)──▶ health (passive ejection) ──▶ algorithm
//
// A picker sees only the backends it was given; it never consults health
// itself. Health hands it a new set when eligibility changes.
//
// # Shared state
//
// [Registry] keeps one state value per backend ID across updates, so an
// in-flight count or a latency estimate survives a membership change or a
// health flap; [States] is the immutable view a snapshot holds, with the
// lookup Done needs. A removed backend's state is retired rather than
// dropped, so that a late Done still finds it; retired states are evicted
// oldest first past a bound, except busy ones, which are kept until their
// last Done: those whose pointer implements [Sealer] and refuses the seal,
// or implements [Busy] and reports true. [InFlight] is the padded
// in-flight counter that leastconn, lrt and consistent's bounded loads
// share; it implements both, and a Pick that still holds a counter
// evicted under it finds it sealed, so that no count is lost.
//
// Pickers that count implement [InFlightCounter], and decorators pass it
// on, so that metrics, tests and the conformance kit can read the count of
// any backend through one method.
//
// # Errors
//
// Pick returns [ErrNoBackend] itself when the set is empty. Update errors
// wrap [ErrNilBackend], [ErrEmptyID], [ErrDuplicateID] or [ErrBadWeight];
// pickers that parse keys wrap [ErrBadKey]. Test with errors.Is. Error
// strings start with the package that made them. No picker returns
// [ErrAbandoned]: callers pass it to Done.
//
// The conformance kit in package balancertest checks, for any Balancer,
// lbkit's or yours, with one call, the rules above that every Balancer
// keeps, and a hash picker's retry sequence (Request.Attempt). What it
// cannot see from outside, such as a bounded ring's total staying exact
// through churn, each picker's own tests check.
package balancer
