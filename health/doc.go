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
// k falls by one for every 30 s the backend then stays in. At most half
// the set is ejected at once (one backend always may be); a backend over
// the cap waits for a free slot, unless a success comes first.
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
// catches up, the ramp spreads that first burst out: in the tests, 2 of
// the first 10 picks after a return instead of 9. A request that already
// names a backend to avoid is passed through unchanged, so Avoid keeps its
// meaning.
//
// # Who applies a change
//
// Done and Observe never change the inner picker's set themselves: Done
// runs on the request path, and an inner Update can be slow (wrr's
// schedule or a consistent ring at 1024 backends takes milliseconds). They
// mark the change pending and wake the applier, a goroutine that applies
// every pending change and timed transition (ejections ending, slow-start
// steps) and calls the inner Update at most once per round. Changes that
// arrive while it is busy are applied together in its next round, so a
// rack of 100 backends failing at once costs a few inner Updates, not 100.
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
// Pick: the inner Pick plus one atomic load; while a backend ramps up, a
// map read and a random number, and for a put-back pick an inner Done and
// a second inner Pick. Done: the inner Done plus, while every backend is
// succeeding, one atomic load; after failures, a map read by ID and a few
// atomic operations. Neither allocates. Pick takes no lock; nor does Done,
// but for the one that asks for an ejection: it takes one uncontended
// per-backend mutex to keep the error for OnChange, and, without Start
// and with the real clock, if no applier runs, the mutex that guards
// Start and Close, to start the lazy one. Update: O(n) plus the inner
// Update (a second one if an ejection that waited for a slot fits the new
// set's cap). Apply: two atomic loads and a Clock reading when nothing is
// pending or due, else O(n) (about 40 µs at 1024 backends, see
// BenchmarkApply) plus the inner Update if the eligible set changed.
//
// # Measurements
//
// Measured on a 2-core Intel Xeon with go1.26, shared with other jobs (load
// average 1 to 5 during the runs): allow ±20% on every figure.
//
// Pick+Done in ns per pair, serial, median of three runs of
// go test -run '^$' -bench 'Pick/./././mode=serial' -benchtime 300ms -count 3 ./health/.
// bare is the algorithm alone (Pick only, for those without Done: rr,
// wrr, iphash, ring, maglev); health wraps it with the zero Config;
// ramping has one backend of the set in its slow-start ramp. No run
// allocated.
//
//	               n=4                      n=1024
//	algo           bare  health  ramping    bare  health  ramping
//	rr               26      37       72      28      39       63
//	wrr              27      42       80      29      48       77
//	leastconn       102     128      185      87     110      142
//	iphash           89      88      194      84     100      119
//	ring             32      56      111      39      74      106
//	ring-bounded    127     142      142     127      94      137
//	maglev           23      47       95      26      55       83
//	lrt             216     251      292     224     260      299
//	lrt-naive       240     251      234   11309   10263     9298
//
// The wrapper adds about 10 to 35 ns: an interface call each way and an
// atomic load or two, plus, for the pickers without Done, health's own
// Done, which a proxy calls anyway. Where health measured faster than
// bare, the difference is noise. A ramp adds a map read, a random number
// and, for a put-back pick, a second inner Pick.
//
// An inner Update of 1024 backends that drops one, as an ejection does
// (BenchmarkInnerUpdate), in ms: rr 0.12, wrr 12 (8 in an earlier run),
// leastconn 0.33, iphash 0.46, ring 18, ring-bounded 22, maglev 5.7,
// lrt 0.35, lrt-naive 0.32.
//
// From a Done reporting a refused connection to the return of the inner
// Update without the backend, with Start running (BenchmarkEject, mean
// over at least 24 ejections), at 64 and at 1024 backends: rr 14 µs and
// 0.14 ms, wrr 0.41 and 9.8 ms, leastconn 26 µs and 0.44 ms, iphash 37 µs
// and 0.58 ms, ring 1.1 and 23 ms, ring-bounded 1.1 and 23 ms, maglev 4.5
// and 5.4 ms, lrt 29 µs and 0.42 ms, lrt-naive 27 µs and 0.37 ms. The
// worst single ejection in those runs took 36 ms (ring, 1024 backends);
// the worst for rr, 2.8 ms, was the busy machine's scheduling. The time is
// the applier's wake-up, health's own pass over the set (BenchmarkApply: 3
// µs per Apply at 64 backends, 40 µs at 1024) and the inner Update, which
// dominates for wrr, the rings and Maglev. Meanwhile the backend's own
// requests still reach it; with a refused connection each fails at once
// and can be retried elsewhere.
package health
