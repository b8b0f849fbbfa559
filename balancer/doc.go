// Package balancer holds the contracts every lbkit algorithm implements, and
// the pieces they share, exported so that pickers written outside lbkit can
// use them too.
//
// # Contracts
//
// A [Backend] is one upstream with a stable, unique ID and, optionally, a
// weight ([Weighter]). [Endpoint] is a ready implementation.
//
// A [Picker] has one method, Pick([Request]) (Backend, error). It never
// blocks, takes no lock and allocates nothing. The [Request] carries an
// affinity key for hash pickers, and what a retry needs to reach a different
// backend (Attempt, and Avoid: the ID of the backend that just failed).
//
// A [Feedback] learns from finished requests through Done(Backend, [Result]),
// where Result holds the latency and the error. Pickers that count in-flight
// requests or learn latency implement it, and so do decorators (health,
// metrics), which pass it on. Callers find it with a type assertion, once.
//
// An [Updater] replaces the set. Update validates it with [Validate]
// (nil backends, empty or duplicate IDs, weights outside [1, MaxWeight]); on
// error the previous set stays. On success it publishes an immutable
// snapshot through an atomic pointer: a mutex is held by writers only, and a
// Pick that starts after Update returns sees the new set. A [Balancer] is a
// Picker with Update.
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
// lookup Done needs. [InFlight] is the padded in-flight counter that
// leastconn, lrt and consistent's bounded loads share.
//
// # Errors
//
// Pick returns [ErrNoBackend] itself when the set is empty. Update errors
// wrap [ErrNilBackend], [ErrEmptyID], [ErrDuplicateID] or [ErrBadWeight];
// pickers that parse keys wrap [ErrBadKey]. Test with errors.Is. Error
// strings start with the package that made them.
//
// The conformance kit in package balancertest checks all of this for any
// Balancer, lbkit's or yours, with one call.
package balancer
