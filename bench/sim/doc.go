// Package sim answers "which algorithm for my backends?" in seconds. It
// plays load scenarios in virtual time against every configuration of
// bench.Algorithms — the real pickers, driven through their rand and clock
// seams, wrapped in the real health package where a scenario compares
// failure handling — and reports, per algorithm, throughput, latency
// percentiles, how the requests spread over the backends, and errors.
// Runs are deterministic: one seed, the same bytes.
//
// From the command line (package bench/cmd/lbsim):
//
//	go run ./bench/cmd/lbsim -scenarios steady           # one table, under a second
//	go run ./bench/cmd/lbsim                             # the six default scenarios
//	go run ./bench/cmd/lbsim -proxies 1,10               # and a fleet of 10 balancers
//	go run ./bench/cmd/lbsim -backends 20ms:c=4,20ms:c=4,80ms:c=4 -users 60
//	go run ./bench/cmd/lbsim -html report.html           # tables and charts over time
//	go run ./bench/cmd/lbsim -live -scenarios steady     # the same for real, beside the simulation
//
// From Go:
//
//	rep, err := sim.Run(sim.Defaults(nil), bench.Algorithms(), sim.Options{Seed: 1})
//	if err != nil { ... }
//	rep.WriteText(os.Stdout) // or WriteMarkdown, WriteHTML
//
// RunContext does the same and stops early, with ctx's error, when ctx
// ends (lbsim stops so on Ctrl-C).
//
// With -live, lbsim also plays the scenarios for real, with every
// duration scaled down (-scale, default 0.1: 18 s per 3-minute run),
// through lbhttp's reverse proxy to HTTP backends on 127.0.0.1, and
// prints the live tables and a table of simulated against live figures
// (Comparison). Package bench/live says how, and how far they agree.
//
// To ask about your own service, describe its backends as ParseBackends
// reads them: each backend's median service time, and optionally its
// weight (w=, used by wrr only), how many requests it serves at once (c=;
// the rest queue), a spread of service times (j= uniform, s= lognormal)
// and when it dies (down=). Then pick the user count and think time that
// match your traffic (-users, -think, or -stages for a profile of your
// own).
//
// # Reading the tables
//
// One table per scenario and number of proxies; one row per failure
// handling variant and algorithm. A user request is what a virtual user
// sends and waits for; with retries it may take several attempts.
//
//   - RPS: successful user requests per second over the whole scenario.
//   - mean, p50, p95, p99: latency of successful user requests as the
//     user saw it, queueing and retries included.
//   - errors: user requests that failed: refused, or in flight on a
//     backend when it died, with no retry left; or no backend to pick.
//   - retries: attempts beyond each request's first.
//   - RPS before, RPS after, change: successful throughput before the
//     scenario's first outage and during it.
//   - share %: each backend's share of attempts (refused ones included,
//     so a black hole shows), in the order of the line above the table.
//   - in flight, peak: time-weighted mean and maximum of requests at
//     each backend, queued ones included: what the study's "active
//     connections" measured.
//
// # Scenarios
//
// Defaults returns the study's scenarios: four backends answering in 50,
// 150, 300 and 500 ms with weights 6:3:2:1 (seen by wrr; the other
// algorithms see equal weights, as in the study), users who think 100 ms
// between requests.
//
//   - steady: 100 users for 3 minutes.
//   - burst: 10 users for 20 s, a ramp to 250 over 30 s, 250 for 40 s, a
//     ramp back to 10 over 30 s, 10 for 20 s.
//   - failure: steady, with the 50 ms backend killed at 1 minute and
//     active checks every 5 s, compared under four variants: none (the
//     bare picker), active (the study's setup), active+passive (passive
//     ejection too) and active+passive+retry (failed attempts retried on
//     another backend, as lbhttp does for a GET).
//   - steady-cap, burst-cap, failure-cap: the same with each backend
//     serving at most 16 requests at once (DefaultCapacity) and queueing
//     the rest. Together they serve 16·(1/0.05 + 1/0.15 + 1/0.3 + 1/0.5) =
//     512 requests/s: more than 100 users ask of well-spread backends,
//     less than 250 users can. There, sending too much to one backend
//     (herding) costs queueing time; with unlimited capacity it costs
//     nothing.
//
// # The model
//
// What is simulated. Discrete events in virtual time, in a binary heap
// ordered by time and then by scheduling order, so that a run is
// deterministic. Closed-loop users: each sends a request, waits for the
// outcome, thinks for the think time, and sends again; each has its own
// client address (10.1.0.1, 10.1.0.2, ...), which is the request key,
// so that iphash and consistent hashing pin users to backends. The users
// present at time zero send their first requests spread evenly over one
// think time. Stages move the user count linearly, as k6's stages do:
// user k joins when a ramp reaches k+1 users, and leaves when one drops
// to k, the last to join the first to leave; a leaving user finishes the
// request it has in flight, as k6's graceful ramp-down lets it.
//
// Backends: a backend with unlimited capacity serves every request in its
// own service time from the moment it arrives (an infinite-server queue);
// one with capacity c serves c at once and queues the rest first come,
// first served (a G/G/c queue). Service times are fixed, uniform in
// [L−j, L+j], or lognormal with median L and shape σ (mean L·e^(σ²/2)),
// drawn from the run's seeded source when service starts. A dead backend
// refuses connections: the attempt fails RefuseTime (100 µs) after it is
// sent with an error wrapping syscall.ECONNREFUSED; requests in service or
// queued when it dies fail at that instant with syscall.ECONNRESET. A
// revived backend serves again at once.
//
// Each attempt is one Pick and one Done with the attempt's latency and
// error, as a proxy makes them. With -proxies M, user u goes through
// proxy u mod M, and each proxy has its own picker, its own health
// wrapper and its own random source, in front of the same backends: each
// sees only its own users' requests, as a fleet of sidecars or
// client-side balancers does.
//
// Failure handling. Health variants wrap each proxy's picker in
// health.New with the package's defaults (Rise 2, Fall 3, five
// consecutive failures or one refused connection to eject, 30 s base
// ejection, at most half the set ejected, the full set when none is
// eligible), the virtual clock, a seeded source, and no prober: with
// Active, every CheckInterval each proxy, at its own random phase, checks
// every backend and feeds the results to Observe (a dead backend's check
// fails with a refused connection); without Passive, NoEjection is set.
// The simulator never calls Start: it calls Apply after every refused
// attempt (before the attempt is retried), after every round of checks,
// every 100 ms, and once when a backend dies, after the requests it was
// serving or queueing have all been reported to Done and, with Retry,
// sent again (so those retries are picked before the wrapper has applied
// what their failures tell it). Retry does what
// lbhttp's Transport does for a GET: it sends a failed attempt again at
// once on another backend, with Attempt+1 and Avoid set to the backend
// that failed it, up to MaxAttempts (3) attempts. That covers both
// failures simulated: a refused connection, and a request in flight on a
// backend when it died. The second is safe to resend only because the
// users' requests are idempotent; lbhttp never resends a POST whose
// connection broke after it was sent, since the backend may have acted
// on it. With one backend dead at a time, a retry that avoids it reaches
// a live one, so the failure scenarios with retries end with no failed
// user request for any algorithm (TestFailure).
//
// What is not simulated: network time (but for a refusal), connection
// set-up and pooling, the CPU cost of picking and proxying, timeouts,
// request and response sizes, a backend slowing down or failing before
// it dies, or serving more slowly under load except by queueing at its
// capacity. Package bench/live plays the scenarios through a real proxy,
// where the first four happen, and measures what they add.
//
// # Checks against theory
//
// TestLittlesLaw runs the steady scenario for every algorithm and checks
// the closed-loop law X = N/(R+Z) within 2% (measured for round robin:
// 285.6 requests/s against 100/(0.2498+0.1) = 285.9), that round robin
// over fixed delays gives R = the mean of the delays, 250 ms (measured:
// 249.8), and that each backend holds λ·W requests on average (Little's
// law). The first holds for any closed loop whatever the picker, and the
// last for backends that never queue, so further tests hold the rest:
// TestLittlesLawQueues checks, in steady-cap, that the requests at the
// backends, queued ones included, average X·R for every kind of picker,
// and that one saturated backend serves its capacity over its latency;
// TestFeedback that the pickers that learn from Done get it (least
// connections evens out requests in flight, within a factor 1.5 where
// round robin's differ tenfold; lrt sends the 50 ms backend over 30
// points more than round robin's 25%; bounded loads keep every backend
// at or under ⌈1.25·N/n⌉); TestQueue checks a one-server FIFO queue,
// TestDistributions the means of the service-time distributions,
// TestPercentiles the nearest-rank percentiles on known values.
//
// # Cost
//
// The six default scenarios, 120 runs of 13,000 to 120,000 requests each,
// took 3.8 s (4.4 s for `time go run ./bench/cmd/lbsim`, compilation
// cached) on the 2-core machine this was written on, shared with other
// work; runs go in parallel, one per CPU. The event loop allocates
// nothing per event: a run allocates about 200 times, at set-up
// (TestRunAllocations). BenchmarkSimulate measured 0.9 µs per request
// for rr and 1.1 to 1.2 µs for leastconn and lrt, most of it in the
// event heap.
package sim
