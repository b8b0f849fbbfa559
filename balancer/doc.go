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
//	resp, err := http.Get("http://" + b.ID() + "/api") // err is now the request's, not Pick's
//	if err == nil {
//		_, err = io.Copy(io.Discard, resp.Body) // Done when the body ends, not at the headers
//		resp.Body.Close()
//	}
//	if fb != nil {
//		fb.Done(b, balancer.Result{Latency: time.Since(start), Err: err}) // nil: a success
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
//     Request.Route names a set of backends by label (package route) and
//     Request.Prefer the ID of the backend a session is pinned to
//     (package sticky); every other picker ignores both.
//   - Say how it went: Result{Latency: d} for a success; Result{Latency: d,
//     Err: err} for a failure (a transport error as it came, or wrapped with
//     %w; a timeout; a 5xx you count as one); Result{Err: [ErrAbandoned]}, or
//     an error wrapping context.Canceled, for a request the caller gave up
//     on: no latency sample, and not a failure. Result{} means nothing was
//     measured, also not a failure. See [Result] for each case.
//
// Package github.com/lbkit/lbkit/lbhttp does all of this for
// net/http: a reverse proxy or an http.Client transport that calls Done when
// the body ends, retries with Attempt and Avoid, and takes the key from the
// client address, a header or a cookie. Wrap the picker in
// github.com/lbkit/lbkit/health to keep dead and failing backends out of
// its set.
//
// # Load reports
//
// A backend may say how loaded it is: an ORCA load report (gRFC A51; the
// endpoint-load-metrics header Envoy reads) with each answer. The caller
// passes it to Done in Result.Load, a [Load] of fixed fields (CPU,
// Memory, Application utilisation, RPS, EPS, and the InFlight and Latency
// a probing picker asks for), so that Done stays a copy and no
// allocation; named metrics sit behind Load.Named, valid during that Done
// only, for the pickers that ask for one by name. The zero Load is no
// report. lbhttp's Transport and the gRPC policy in examples/grpc fill it
// in, both by one rule, [LoadBuilder]'s: a report is taken whole or not
// at all, so that one value out of range (a negative, NaN or infinite
// one, a mem_utilization above 1) or more than [MaxNamedMetrics] named
// metrics gives the zero Load on either path, never a report with a
// field dropped or clamped. Pickers that do not weigh reports ignore it.
// Pickers that do: wrr's Reported (weights from reports, gRFC A58) and
// leastconn's WithReports (two choices on reported utilisation);
// lrt/prequal takes its answers from probes rather than from Results.
//
// # Backends
//
// A [Backend] is one upstream with a stable, unique ID and, optionally, a
// weight ([Weighter]) and a hash key ([HashKeyer]): the key a hash picker
// places it by instead of its ID, so that a backend whose address changes
// keeps its keys (Envoy's "envoy.lb" hash_key, gRFC A76); read once per
// Update with [HashKeys], which refuses two backends of one placement key
// with an error wrapping [ErrDuplicateHashKey]. The ID stays what Done,
// Avoid and per-backend state go by. [Endpoint] is a ready implementation: [NewEndpoint],
// [Endpoints] for addresses of weight 1, [WeightedEndpoints] for address and
// weight pairs. Its methods are safe on a nil *Endpoint, which has the empty
// ID: passed to Done it is an unknown backend, and Update refuses it.
//
// Where addresses arrive as text (flags, a configuration file), pass them
// through [CanonicalAddrs] first: it spells each the one way (127.0.0.1:080
// is 127.0.0.1:80, [0:0::1]:80 is [::1]:80) and refuses two spellings of
// one address, which Update would otherwise take for two backends, giving
// the server behind them a double share and two health records.
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
// validates the set with [NewSet], which reads each backend's ID, weight
// and locality exactly once and refuses nil backends, empty or duplicate
// IDs, weights outside [1, MaxWeight] and priorities outside
// [0, MaxPriority]; on error the previous set stays. So calls to
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
// # Decorators
//
// A decorator (health, lbkit's Prometheus metrics, one of your own) wraps a
// picker and is one: Pick, Done and Update go to the outermost layer, which
// passes them on. The caller holds only that layer, so a decorator is
// transparent, and these are the rules every decorator in lbkit keeps:
//
//   - It has Start ([Starter]) and Close (io.Closer), and they reach the
//     picker inside: Start starts its own work (if any) and then the
//     inner picker's, if that has a Start, with a context that ends when
//     its own does; Close stops its own work and then closes the inner
//     picker, if that has a Close. A decorator without work of its own
//     still has both, to pass them on, and around a picker without them
//     both succeed. Start and Close the outermost layer, never an inner
//     one. [StartInner] and [CloseInner] are that pass-through.
//   - A second Start returns an error wrapping [ErrStarted], and Start
//     after Close one wrapping [ErrClosed], from whichever layer notices:
//     a decorator passes the inner layer's error on, wrapped or as it is,
//     so that errors.Is tells them through any stack. [Lifecycle] is the
//     start-once, close-once life that keeps these rules for a type with
//     one goroutine of background work (wrr's Reported, lrt/prequal,
//     lbhttp's Refresher, lbkube's Watcher use it).
//   - It has Unwrap ([Unwrapper]), which returns the picker inside. [As]
//     walks the stack by Unwrap and finds a layer by its type, so that
//     admin methods of an inner layer (health's Drain, Maintenance, Enable,
//     View) are reached from the top, whatever the stacking.
//
// For example, with metrics around health or health around metrics:
//
//	h, ok := balancer.As[*health.Balancer](lb)
//	if ok {
//		err = h.Drain("10.0.0.1:8080")
//	}
//
// balancertest.RunDecorator checks these rules for any decorator.
//
// Admin methods are not forwarded one by one: a decorator cannot know
// every method of every picker it may wrap, and a forwarded method that
// answers "not supported" for most inners says less than As's false. This
// is the shape of errors.Unwrap with errors.AsType, and of
// http.ResponseController, which reaches a ResponseWriter's optional
// methods through its wrappers' Unwrap.
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
// # Locality
//
// A backend may also say where it runs ([Locator]): its zone and the
// priority of its tier, a [Locality]; Endpoint.At sets one. Package
// locality routes by it (the caller's zone first, then the next tier);
// every other picker ignores it, but Update validates it as it validates
// weights: a priority outside [0, MaxPriority] is refused with an error
// wrapping [ErrBadLocality]. A picker that wants the unhealthy backends
// too, with their health, implements [HealthUpdater], and package health
// then hands it the whole set. [Admin] names the methods by which an
// operator takes a backend out by hand (health's Drain, Maintenance and
// Enable).
//
// # Options
//
// Algorithms take functional options (rr.New(rr.WithRand(f))), decorators
// and wiring a Config struct whose zero fields mean the defaults. A value
// an option or a field does not take (a negative duration, a count of
// zero, a factor out of range, a nil function) is never clamped to the
// nearest one nor ignored for the default: the caller learns of it, with
// an error wrapping [ErrBadOption] that names the option and the value
// ([BadOption] makes it).
//
//   - A constructor that returns an error (health.New, subset.New,
//     locality.New, lbhttp.NewTransport, lbhttp.NewRefresher, ...) returns
//     it there.
//   - A constructor that cannot (rr.New(opts...), and every algorithm's)
//     keeps the first bad option's error, and every Update returns it
//     while the picker keeps its empty set: Pick says [ErrNoBackend], so a
//     service started with a bad option serves nothing rather than
//     something other than what it asked for, and its first Update says
//     why.
//
// The same name means the same thing everywhere: WithReportExpiry is how
// long a backend's report counts, in wrr's Reported, in leastconn's
// WithReports and in lrt/prequal (a probe answer); WithRand and WithClock
// are the random source and the clock.
//
// # Errors
//
// Pick returns [ErrNoBackend] itself when the set is empty. Update errors
// wrap [ErrNilBackend], [ErrEmptyID], [ErrDuplicateID], [ErrBadWeight] or
// [ErrBadLocality], and a hash picker's [ErrDuplicateHashKey]; pickers that parse keys wrap [ErrBadKey]; parsers of
// load reports wrap [ErrBadLoad]; [CanonicalAddr] wraps [ErrBadAddr]; a
// bad option or configuration value wraps [ErrBadOption]; a second Start
// wraps [ErrStarted], Start after Close [ErrClosed]. Test
// with errors.Is. Error strings start with the package that made them. No
// picker returns [ErrAbandoned]: callers pass it to Done.
//
// The conformance kit in package balancertest checks, for any Balancer,
// lbkit's or yours, with one call, the rules above that every Balancer
// keeps, and a hash picker's retry sequence (Request.Attempt). What it
// cannot see from outside, such as a bounded ring's total staying exact
// through churn, each picker's own tests check.
package balancer
