// Package lrt is least response time without herding: each request goes to
// the backend expected to answer it soonest, judged by the latency it has
// shown lately and the requests already waiting on it. Use it when backends
// differ in speed (different hardware, a noisy neighbour, a replica in
// another zone) and you care about latency, not only balance. When backends
// are alike, leastconn does as well for less. When backends can answer
// probes (lbhttp's Reporter), package lrt/prequal asks them instead of
// learning from this proxy's requests alone.
//
//	p := lrt.New()
//	if err := p.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080")); err != nil { ... }
//	b, err := p.Pick(balancer.Request{})
//	if err != nil { ... } // balancer.ErrNoBackend: the set is empty
//	start := time.Now()
//	resp, err := http.Get("http://" + b.ID() + "/api") // err is now the request's, not Pick's
//	if err == nil {
//		_, err = io.Copy(io.Discard, resp.Body) // Done when the body ends, not at the headers
//		resp.Body.Close()
//	}
//	p.Done(b, balancer.Result{Latency: time.Since(start), Err: err}) // nil: a success
//
// What a caller must do:
//
//   - Done: a Picker implements balancer.Feedback and learns from it
//     alone: Done takes the request off the backend's in-flight count and
//     folds its latency into the backend's estimate. Call it exactly once
//     per Pick, when the request has finished: for HTTP when the response
//     body has been read to the end or closed, not when the headers arrive,
//     with the latency from sending the request to that moment. Without
//     Done lrt knows nothing: estimates stay guesses and in-flight counts
//     only grow.
//   - Key: none. Request.Key and Attempt are ignored. On a retry, set Avoid
//     to the ID of the backend that failed: Pick skips it when the set has
//     another backend.
//   - Errors: pass Result{Latency: d, Err: err} for a failure that says
//     something about the backend (a transport error, a timeout, a 5xx),
//     not for a client's 4xx. lrt records it as a slow answer, slower with
//     each failure in a row (see Errors). A request the caller gave up on
//     (Err wrapping balancer.ErrAbandoned or context.Canceled) and a
//     Result{} with nothing measured teach nothing: they only leave the
//     in-flight count. lrt steers away from a failing backend but keeps
//     trying it now and then; it does not take it out.
//
// Package github.com/lbkit/lbkit/lbhttp does all of this for
// net/http: a reverse proxy or client transport that calls Done with the
// latency when the body ends, counts 5xx as failures, reports a client
// that went away as abandoned, and retries with Avoid set. Wrap the picker
// in github.com/lbkit/lbkit/health to keep dead and failing backends out
// of its set.
//
// # Choosing
//
// lrt keeps more requests in flight on the backends that answer fastest,
// and fewer on the slow ones, than leastconn's even counts do; the naive
// mode sends nearly everything to the fastest backend (herding), which
// costs nothing while capacity is unlimited and queues once that backend
// is full. lrt does not take a dead backend out: without health in front
// it keeps trying one now and then (see Errors). lbsim's tables
// (docs/results.md; go run ./bench/cmd/lbsim) set both modes beside every
// other algorithm in the study's scenarios, with and without capacity
// limits, behind one proxy and ten.
//
// # Why not plain least response time
//
// The study this library grew out of measured plain least response time
// (send to the lowest average latency) in front of four backends answering
// in 50, 150, 300 and 500 ms: it sent all of the traffic to the fastest,
// and when that one failed, all of it to the next. The fastest backend
// stays the fastest until it is overloaded, so everything piles onto it:
// herding. The study proposed a composite of response time × active
// connections. lrt ships that as its default mode, Balanced, and keeps
// the plain rule as the Naive mode so that the difference can be
// measured.
//
// TestHerding drives a real Picker in virtual time (closed-loop users,
// seed 1): with unlimited capacity Naive sends more than 90% of requests
// to the 50 ms backend, reproducing the study; with backends that serve a
// few requests at once and queue the rest, Balanced gives a lower mean and
// p99 than Naive, and still sends the fastest backend the most.
//
// # Algorithm
//
// The latency estimate of each backend is learned from Done. It is the
// peak-sensitive, time-weighted moving average of Finagle's PeakEwma
// (twitter/finagle, finagle-core/.../loadbalancer/PeakEwma.scala), which
// Linkerd also uses (tower's load::PeakEwma):
//
//	w   = e^(−Δt/τ)                   Δt: time since the estimate was last updated
//	est = rtt                         if rtt > est: a slower answer raises it at once
//	est = est·w + rtt·(1−w)           otherwise: faster ones lower it gradually
//
// Weighting by time rather than by count makes the estimate forget at the
// same pace whatever the request rate: after τ (10 s by default, as in
// Finagle and Linkerd; WithDecay) of answers in x ms, the gap between the
// estimate and x has shrunk by a factor e. Finagle keeps each backend's
// estimate under a lock and writes the decay back on every read, so that
// the more often a backend is looked at, the less a new sample weighs;
// lrt keeps the estimate and its time in one atomic word and only reads
// the decay.
//
// An estimate also decays toward zero while its backend is idle: Pick reads
// it as est·e^(−age/τ), age being the time since its last update. A backend
// that was slow once and then got no traffic thus looks faster and faster
// until it is tried again, and its next answer sets the estimate right.
// For 500 ms against a busy 50 ms backend that takes τ·ln(10) = 23 s.
//
// In the Balanced mode (the default) Pick compares
//
//	cost = est·e^(−age/τ) × (requests in flight + 1)
//
// the time a new request would wait if it queued behind the ones already
// there. Among four backends or fewer it compares them all; in larger sets
// it compares two drawn at random, Mitzenmacher's power of two choices, as
// Finagle and Linkerd do. Two choices would cap the fastest of four
// backends at half the traffic (each backend is in half the pairs), which
// in TestHerding's bounded settings raises the mean latency and the p99
// (TestScanOrTwoChoices holds the scan's below two choices'); a scan of
// four is cheap enough. In the Naive mode Pick compares the decayed
// estimates alone, across the whole set. Ties go to a random backend. A
// backend whose ID is Request.Avoid is skipped when there is another.
//
// # Unmeasured backends
//
// A backend that has not answered yet has a provisional estimate: the mean
// of the estimates of the measured backends that stay in the set, or
// 100 ms (WithInitial) when there are none, at start-up. Its first Done
// replaces the provisional value outright. A newcomer thus looks like an
// average backend and gets an average backend's share of the requests in
// flight until it has answered (TestNewcomer): with an estimate of zero it
// would take every request until its first answer came back
// (TestZeroEstimateFloods), and with a high one it would wait until the
// others filled up. (Finagle gives an unmeasured backend a cost of zero
// while it is idle and a huge one while its first request is out: one
// probe at a time until the first answer.)
//
// The same holds for a backend that comes back after an absence, say an
// ejection by a health check: its estimate has decayed all the while, and
// after a minute it would look nearly free and draw every request. So a
// backend that comes back keeps its estimate only if that is still above
// the mean; otherwise it restarts from the mean (TestComeback holds a
// returning backend to its share of the requests held in flight). An estimate untouched for 2³⁰ ticks (6.5 days
// at the default τ) counts as no measurement.
//
// Each published set lists the backends whose estimate is only a guess
// (every backend at start-up, newcomers and returning backends later), in
// a random rotation, and the set's first picks go to them in turn, one
// each, unless a measurement came first. Without that trial, under light
// load the first backend to answer in 10 ms would take every request while
// the others' provisional 100 ms decayed below it, some 23 s
// (TestColdStartTriesEveryBackend tries every backend in its first picks,
// at start-up and when one joins). The rotation is random so that a fleet
// of proxies started together does not send every first request to the
// same backend.
//
// # Errors
//
// A failed request must not look like a fast one. Done records a failure as
// an answer that took f^k × max(its latency, the backend's success
// estimate), where f is 2 (WithErrorFactor), k the number of failures in a
// row, and f^k is capped at 64 (and k at 16, which binds only for factors
// below 64^(1/16) ≈ 1.3). The first failure of a 50 ms backend counts
// as 100 ms, the next as 200, and so on; through the peak rule each raises
// the estimate at once. The success estimate is the same moving average
// over successful answers only, so that isolated failures, however many
// over time, never push the estimate beyond f times the usual, while a run
// of them moves traffic away quickly; the decay brings a failed backend
// back for another try after some τ·ln(64) ≈ 42 s at most of idleness,
// sooner if the others are busy. Count as failures only answers that say
// something about the backend (transport errors, 5xx), not a client's 4xx.
// A failure counts even when its Latency is zero (a refused connection may
// take no measurable time). For ejecting dead backends, use the health
// package in front.
//
// What teaches nothing: a Result whose Err wraps balancer.ErrAbandoned or
// context.Canceled (the caller gave up; the backend may have been about to
// answer), and a success without a positive Latency (nothing measured).
// Such a Done only takes the request off the in-flight count. Taken as a
// sample, a zero latency would make the backend look free and draw every
// request (TestAbandonedTeachesNothing).
//
// # Time
//
// Done and Update read a clock (WithClock; by default the monotonic
// clock, through time.Since, which reads no wall clock). Pick
// reads none: it compares two decayed estimates, and for a common now the
// decay of each is e^(−(now−stamp)/τ), so now cancels and only the gap
// between the two stamps matters. This is exact, not an approximation, and
// it saves Pick a clock read, the costliest step it would otherwise have.
//
// Estimates are kept in float32 and times in ticks of 2^k ns, the largest
// power of two not above τ/2¹⁴ (0.52 ms for τ = 10 s), so that an estimate
// and its time fit one 64-bit word. Answers in the same tick as the
// previous update carry no weight, except through the peak rule; over
// many ticks the weights add up exactly. 32-bit ticks wrap after 26 days
// at the default; estimates are read as decayed to nothing long before.
//
// # Cost
//
// Pick, Balanced: one load of the set's trial counter (and, while the set
// still has untried backends, an atomic add to take a trial); one random
// number; for sets of up to four, two loads of each backend's state word
// and one of its in-flight count; for larger sets, the same for two
// backends; then one atomic add. Each comparison takes one exponential, a
// cubic polynomial when the stamps are less than τ/16 apart, as they are
// for backends in use, and math.Exp otherwise. The winner is selected with
// conditional moves, not branches, since with even loads it changes from
// pick to pick. Pick, Naive: O(n). No lock, no allocation, no clock.
//
// The scan stops at four because it grows with the set while two choices
// do not (BenchmarkScanOrTwoChoices sets them side by side at 2 to 16
// backends). Under parallel load the scan of four also reads the
// in-flight counters of all four backends, which the other cores keep
// writing. The scan is still worth it; what it buys is latency per
// request (see above), not nanoseconds. BenchmarkPick measures Pick alone, serial
// and parallel, in both modes at 4, 64 and 1024 backends; BenchmarkPickDone
// the pair through the shared harness.
//
// Done: a map lookup by ID, a clock read (BenchmarkClock measures it
// beside BenchmarkDone), one exponential, an atomic decrement, a
// compare-and-swap of the backend's state word (retried only if another
// Done for the same backend lands in between), and a store. No lock, no
// allocation.
//
// Update: O(n) plus the registry's bookkeeping, a few allocations, one
// clock read; it takes the mutex that serialises Updates before validating
// (balancer.NewSet), and publishes a new snapshot with one atomic store.
//
// # Concurrency
//
// Pick, Done, Update and Stats are safe for concurrent use. Pick and Done
// never block; Updates are serialised, validation included, by a mutex
// that only Update takes. A
// Pick that starts after Update returns sees the new set. Each backend's
// estimate and its time are one atomic word, so Pick never sees one
// without the other. What was learned about a backend is kept by ID
// across updates (balancer.Registry), so a health flap does not reset it,
// and a Done for a backend just removed still finds its state.
//
// # Mapping
//
// None: lrt has no affinity. Each process learns its own estimates from its
// own requests, so proxies in a fleet may rank backends differently.
package lrt
