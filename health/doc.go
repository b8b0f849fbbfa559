// Package health keeps dead and failing backends away from any picker. It
// wraps a balancer.Balancer (rr, wrr, leastconn, iphash, consistent, lrt,
// or your own) and is itself one, and a balancer.Feedback: the inner picker
// only ever sees the backends that are fit to serve.
//
//	h, err := health.New(leastconn.New(), health.Config{
//		Probe: health.HTTP(health.HTTPCheck{Path: "/healthz"}), // optional
//	})
//	if err != nil { ... }
//	if err := h.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080")); err != nil { ... }
//	if err := h.Start(context.Background()); err != nil { ... } // ends with Close
//	defer h.Close()
//
//	b, err := h.Pick(balancer.Request{}) // per request
//	if err != nil { ... }                // balancer.ErrNoBackend: the set is empty
//	start := time.Now()
//	resp, err := http.Get("http://" + b.ID() + "/api") // err is now the request's, not Pick's
//	if err == nil {
//		_, err = io.Copy(io.Discard, resp.Body) // Done when the body ends, not at the headers
//		resp.Body.Close()
//	}
//	h.Done(b, balancer.Result{Latency: time.Since(start), Err: err}) // nil: a success
//
// What the caller must do:
//
//   - Give the set to the Balancer's Update, never to the inner picker's:
//     health hands the inner picker the eligible subset.
//   - Call Done exactly once per Pick, when the request has finished: for
//     HTTP, when the response body has been read to the end or closed.
//   - Say what failed. Err is nil for a success. For a failure pass the
//     transport error as it came (or wrapped with %w), so that a refused
//     connection is found with errors.Is(err, syscall.ECONNREFUSED); for a
//     response you count as a failure (a 5xx), pass an error you make. A
//     request the caller gave up on is balancer.ErrAbandoned (or wraps it
//     or context.Canceled): not a failure, not a success. Config.IsFailure
//     changes what counts.
//   - Call Start, and Close when done. See "Who applies a change" for what
//     happens without Start. Both reach the inner picker too (a metrics
//     decorator inside, say), and when health sits inside another
//     decorator, Start and Close that one: every lbkit decorator passes
//     them on (balancer's doc, "Decorators"). From the top of any stack,
//     balancer.As[*health.Balancer](lb) finds health for Drain,
//     Maintenance, Enable and View.
//
// # What takes a backend out
//
// Passive checks (outlier detection, as Envoy's consecutive_5xx): five
// failures in a row reported to Done eject a backend for 30 s; a refused
// connection ejects it at once, since nothing was sent and nobody is
// there. The k-th ejection in a row lasts k times 30 s, up to 300 s, and
// k falls by one for every 30 s the backend then stays in (counted from
// its return, once its trial has passed: see below). At most half
// the set is ejected at once (one backend always may be); a backend over
// the cap waits for a free slot, unless a success comes first.
//
// A backend whose ejection ends, by its time or by Rise passing probes,
// comes back on trial (Finagle's failure accrual, whose revived node
// takes one probing request; a circuit breaker's half-open state): it is
// in the inner picker's set, but takes one request at a time. While its
// trial request is in flight, Pick hands a pick of it back to the inner
// picker (an inner Done with balancer.ErrAbandoned) and asks again with
// Request.Avoid set to it, once, as slow start does. The first request
// that succeeds ends the trial; one that fails ejects the backend again
// at once (ReasonTrial), for its next ejection time, which is longer; an
// abandoned one frees it for the next trial request. So a backend whose
// health check passes while its requests still fail (a stalled data path
// behind a /healthz that answers) costs one request per ejection, not a
// round of them. Config.NoTrial brings a backend back in full at once, as
// Envoy's outlier detection does. A request that already names a backend
// to avoid is passed through, so a retry may reach a backend on trial
// beside its trial request.
//
// Failure-percentage ejection (Envoy's failure_percentage outlier
// detection), when Config.FailureRate is set: consecutive failures miss a
// backend that fails often but never five times in a row, one request in
// three say. With it, Done also counts every backend's requests and
// failures, and once per interval (10 s, Envoy's interval) the applier
// judges them: if at least MinimumHosts eligible backends (3) finished
// RequestVolume requests (50, Envoy's failure_percentage_request_volume)
// in the interval, each of them whose share of failures is Threshold or
// more (85%, Envoy's failure_percentage_threshold) is ejected
// (ReasonFailureRate), under the same cap, for the same growing time, and
// back on the same trial as a run of failures. Backends below the volume
// are not judged. A capped ejection the next judgement no longer finds
// due is withdrawn; a success does not withdraw it. Envoy's
// failure_percentage_minimum_hosts is 5; lbkit's 3 lets a set of four
// backends be judged (with 5 it never would be, and nothing would say so)
// while a set of one or two, where an ejection sends everything to what
// is left, is not. It is off by default, as in Envoy (whose
// enforcing_failure_percentage defaults to 0) and gRPC (whose
// failure_percentage_ejection is off unless configured): it costs every
// Done a lookup, and Envoy's 85% mostly catches backends that consecutive
// failures would catch too. The threshold worth setting is the failure
// rate you would not tolerate: 20% ejects a backend failing one request
// in three, and leaves one at 1%. Envoy's enforcement percentage (a draw
// for each ejection) is not offered: an ejection judged is made.
// A judgement is scheduled only while requests come: an idle Balancer
// schedules nothing, so a lazy applier still returns (see "Who applies a
// change").
//
// Active checks (HAProxy's inter/rise/fall), when Config.Probe is set: each
// backend is probed by its own goroutine every 5 s ± 0.5 s, with a 1 s
// timeout; 3 failing probes in a row take it down, 2 passing ones bring
// it back, and also end a passive ejection early. A hanging backend costs
// its own probe's timeout, no one else's. HTTP checks a status range and
// optionally a text in the body; TCP opens a connection; Func runs
// anything (gRPC's health service, a database ping). Without a Probe,
// results fed to Observe count the same way.
//
// By hand (HAProxy's runtime API): Drain takes a backend out gently (no new
// requests, those in flight finish, probes go on); Maintenance takes it
// out and pauses its probes; Enable brings it back. A weight of 0 stays
// invalid in Update: drain is how a backend is taken out gently.
//
// Panic mode (Envoy's): when no backend is eligible, the inner picker gets
// every backend not drained or in maintenance, so that traffic keeps
// flowing to something rather than failing every request. View reports it.
//
// An inner picker that implements balancer.HealthUpdater (package
// locality's Balancer does) gets more than the eligible backends: every
// backend not drained or in maintenance, through UpdateHealth, each marked
// eligible or not, whenever that changes. Health then makes no fallback
// set of its own: the inner picker decides, level by level, when to use
// unhealthy backends. Drain and Maintenance still take a backend out
// altogether.
//
// The Balancer is itself a balancer.HealthUpdater: a discovery source
// that knows health (an xDS control plane's health_status; package
// discovery's Publisher) gives it through UpdateHealth, and a backend it
// calls unhealthy is out as a failing probe would put it (State Down,
// ReasonSource), whatever its own probes say, until the source says
// otherwise; an inner HealthUpdater still counts it in its level. Update
// is UpdateHealth with every backend healthy.
//
// A backend's state is kept by ID across Update, and after it leaves the
// set for as long as it is one of the last max(n, 64) backends removed,
// for a set of n, so a membership change or a flap does not forget an
// ejection or a drain. An Update the inner picker refuses forgets
// nothing. New backends start up; with Config.InitialDown they start down
// and wait for Rise passing probes.
//
// # Slow start
//
// With Config.SlowStart set (Envoy's slow_start_window), a backend that
// comes back (an ejection ends, probes pass, Enable, or it is added after
// the first set) gets a share factor f that grows linearly from 10% to
// 100% over the window, in 20 steps. It works for every algorithm,
// including those that ignore weights (rr, lrt, the hash pickers): when
// the inner picker returns a ramping backend, Pick keeps it with
// probability f; otherwise it hands it back (an inner Done with
// balancer.ErrAbandoned, so in-flight counts stay right) and picks again
// with Request.Avoid set to it, once. With round robin the backend's share
// is then f times its fair share. With least connections, which would
// otherwise send a returning backend (0 in flight) every request until it
// catches up, the ramp spreads that first burst out (TestSlowStartRamp
// allows it at most 3 of the first 10 picks after a return). A request that already
// names a backend to avoid is passed through unchanged, so Avoid keeps its
// meaning.
//
// # Who applies a change
//
// Done and Observe never change the inner picker's set themselves: Done
// runs on the request path, and an inner Update can be slow (wrr's
// schedule and a consistent ring are rebuilt, O(n) and more: see
// BenchmarkInnerUpdate). They
// mark the change pending and wake the applier, a goroutine that applies
// every pending change and timed transition (ejections ending, slow-start
// steps) and calls the inner Update at most once per round. Changes that
// arrive while it is busy are applied together in its next round, so a
// rack of 100 backends failing at once costs a few inner Updates, not 100.
// Meanwhile Pick keeps away from a backend whose ejection a Done has asked
// for: a pick of it is handed back and made again with Avoid, from the
// moment that Done returns until the ejection ends (or the cap makes it
// wait), so that no request picked after the ejecting Done reaches it
// (TestNoPickAfterEjectingDone), unless it is the last backend, the set
// is in panic mode, or the request already names a backend to avoid.
//
//   - Start runs the applier (and the probers) until Close or until ctx is
//     cancelled.
//   - Without Start, with the real clock (Config.Clock nil): the first
//     change Done or Observe asks for starts an applier lazily, and so
//     does a timed transition that Update, Apply or an admin method
//     schedules (a slow-start ramp, an ejection's end). It returns by
//     itself once nothing has been pending or scheduled for a second (an
//     ejection keeps it until the ejection ends, a ramp until it ends);
//     Close stops it and waits for it. So passive ejection and slow start
//     work without Start, and a Balancer dropped without Close leaves no
//     goroutine behind once its last ejection and ramp have ended.
//   - With a Clock of your own, nothing starts a goroutine: time is yours,
//     and so is applying. Call Apply after events (the scenario simulator
//     does, in virtual time), or Start. Until then, an ejection asked for
//     by Done is not applied.
//
// Update, Drain, Maintenance and Enable apply everything pending or due on
// the caller's goroutine before they return, unless they refuse their
// input (an invalid set, an ID not in the set); Update does so even when
// the inner picker refuses the new set. Config.OnChange is called for each
// change, in order, with no lock held, on the goroutine that applied it,
// or on one already delivering changes, which delivers it before its own
// call returns: once every call has returned, every change has been
// delivered. OnChange may call any method but Close.
//
// # Determinism
//
// Driven from one goroutine through Update, Done, Observe, Apply and the
// admin methods, with a Clock and a seeded Config.Rand, and without Start,
// health's own decisions are deterministic: which backends are ejected,
// down, ramping and handed to the inner picker, the changes OnChange sees
// and their order depend on those calls alone, not on wall time, map order
// or goroutine scheduling. Backends are visited in the order given to
// Update; slow start draws from Config.Rand; jitter applies only to the
// probers Start runs. Which removed backends keep their state is decided
// by the sequence of sets too: the last max(n, 64) removed, for a set of
// n, in the order Update was given them (health keeps its own record; it
// does not use balancer.Registry, which retires in map order).
//
// What Pick returns is also the inner picker's choice, and as
// deterministic as that picker: seed its randomness too. A picker that
// keeps per-backend state in a balancer.Registry (leastconn, lrt, the
// bounded-load ring) may, once more than max(n, 64) backends have left its
// set, keep a different subset of their state from run to run. With
// Start, the probers and the applier run on their own goroutines, and the
// order in which their work interleaves with yours is the scheduler's.
//
// # Cost
//
// Pick: the inner Pick plus two atomic loads; while a backend ramps up, a
// map read and a random number, and while one is on trial, a map read and
// a compare-and-swap; for a put-back pick, an inner Done and a second
// inner Pick. Done: the inner Done plus, while every backend is
// succeeding, two atomic loads; after failures, or while a backend is on
// trial, a map read by ID and a few atomic operations; with
// Config.FailureRate, a map read by ID and one atomic add on every
// result. Neither allocates. Pick takes no lock; nor does Done,
// but for the one that asks for an ejection: it takes one uncontended
// per-backend mutex to keep the error for OnChange, and, without Start
// and with the real clock, if no applier runs, the mutex that guards
// Start and Close, to start the lazy one (as does, with FailureRate, the
// first Done after an interval without requests). A judgement of failure
// rates: O(n) in the applier, once per interval, plus the inner Update if
// it ejects. Update: O(n) plus the inner
// Update (a second one if an ejection that waited for a slot fits the new
// set's cap). Apply: two atomic loads and a Clock reading when nothing is
// pending or due, else O(n) (BenchmarkApply) plus the inner Update if
// the eligible set changed.
//
// # Benchmarks
//
// What they measure, on every algorithm bare and wrapped (run them on
// your machine; go test -run '^$' -bench . ./health/):
//
//   - BenchmarkPick: Pick+Done, serial and parallel, at 4, 64 and 1024
//     backends; bare (the algorithm alone), health with the zero Config,
//     ramping (one backend in its slow-start ramp), and failrate
//     (Config.FailureRate on, every Done counted). None allocates.
//     The wrapper adds an interface call each way and an atomic load or
//     two, plus, for the pickers without Done, health's own Done, which a
//     proxy calls anyway; a ramp adds a map read, a random number and, for
//     a put-back pick, a second inner Pick.
//   - BenchmarkInnerUpdate: the inner Update of 1024 backends that drops
//     one, as an ejection does, or brings it back.
//   - BenchmarkEject: from a Done reporting a refused connection to the
//     return of the inner Update without the backend, with Start running.
//     That time is the applier's wake-up, health's own pass over the set
//     (BenchmarkApply) and the inner Update, which dominates for wrr, the
//     rings and Maglev. Meanwhile the backend's own requests still reach
//     it; with a refused connection each fails at once and can be retried
//     elsewhere.
//   - BenchmarkApply: health's own share of an ejection and a return, an
//     Apply over 64 or 1024 backends each.
package health
