// Package sim answers "which algorithm for my backends?" in seconds. It
// plays load scenarios in virtual time against every configuration of
// catalog.Algorithms (and of catalog.LoadAware, the pickers that weigh the
// backends' load reports and probes) — the real pickers, driven through
// their rand and clock seams, wrapped in the real health package where a
// scenario compares failure handling, with lbhttp's own retry budget and
// latency percentile where it compares timeouts, budgets and hedges, and
// in the real locality and subset decorators where one compares fleets
// (see "Fleets") — and reports, per algorithm, throughput, latency
// percentiles, how the requests spread over the backends, and errors.
// Runs are deterministic: one seed, the same bytes.
//
// From the command line (package bench/cmd/lbsim):
//
//	go run ./bench/cmd/lbsim -scenarios steady           # one table, under a second
//	go run ./bench/cmd/lbsim                             # the six default scenarios
//	go run ./bench/cmd/lbsim -proxies 1,10               # and a fleet of 10 balancers
//	go run ./bench/cmd/lbsim -backends 20ms:c=4,20ms:c=4,80ms:c=4 -users 60
//	go run ./bench/cmd/lbsim -backends-file latencies.csv  # your measured latencies
//	go run ./bench/cmd/lbsim -html report.html           # tables, verdicts and charts
//	go run ./bench/cmd/lbsim -json out.json -csv out.csv # every figure, for other tools
//	go run ./bench/cmd/lbsim -live -scenarios steady     # the same for real, beside the simulation
//	go run ./bench/cmd/lbsim -scenarios antagonist,hetero -proxies 1,10  # are load reports worth it?
//	go run ./bench/cmd/lbsim -scenarios zones,fleet      # zone-aware routing and subsets (see "Fleets")
//	go run ./bench/cmd/lbsim -scenarios stall,storm,tail   # what timeouts, the retry budget and hedging buy
//
// Each table ends with its verdict, and the output with a summary: which
// algorithm to use for these backends, why, and the runner-up (see "The
// verdict" below).
//
// From Go:
//
//	rep, err := sim.Run(sim.Defaults(nil), catalog.Algorithms(), sim.Options{Seed: 1})
//	if err != nil { ... }
//	rep.WriteText(os.Stdout) // or WriteMarkdown, WriteHTML
//	for _, s := range rep.Summaries() {
//		fmt.Println(s.Standings[0].Algorithm) // the pick
//	}
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
// and when it dies (down=). Or give measured latencies (-backends-file):
// a CSV of backend,latency_ms, one sample a line (ReadLatencies), or an
// nginx access log with the log_format that wrote it, which must include
// $upstream_addr and $upstream_response_time (ReadAccessLog, -log-format);
// each backend then serves in times drawn from its own samples. Then pick
// the user count and think time that match your traffic (-users, -think,
// or -stages for a profile of your own). A backend can also stall
// (stall=: it accepts and never answers), answer 503 for a while (503=),
// or have a heavy tail (tail=1%x20): the slow scenarios over your
// backends.
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
//   - before, during, change: successful throughput (RPS) before the
//     scenario's first outage and during it, and the change.
//   - share %: each backend's share of attempts (refused ones included,
//     so a black hole shows), in the order of the line above the table.
//   - in flight, peak: time-weighted mean and maximum of requests at
//     each backend, queued ones included: what the study's "active
//     connections" measured.
//   - att/req, att/req during (the slow scenarios): attempts sent per
//     user request that ended, the load amplification of retries and
//     hedges, over the run and during the first outage; max wait s: the
//     longest a user waited for an outcome, success or error; p99.9 ms.
//
// Every column is a Metric, named as in the JSON and CSV (rps, mean_ms,
// p99_ms, errors, retries, rps_before, rps_during, change_pct). A table
// wider than 120 columns prints the per-backend columns in a table of its
// own below; with more than 8 backends they give the busiest backend's
// share, the most requests in flight at one over the mean, and the
// highest peak, instead of one figure per backend.
//
// # The verdict
//
// Under each table, lines computed from its figures: which algorithm gives
// the most throughput, the lowest p99 and the fewest errors (figures
// within 1% of the best tie: Tie), and the trade-off in one line, of the
// form "A serves N% more than B with the same p99; it sends M% of
// attempts to one backend". A scenario that compares failure handling is
// judged under the variant that fails fewest requests, or under the one
// it is about when it names one (Scenario.Contrast: the fleet and slow
// scenarios), and a line sets the variants' errors side by side; the slow
// scenarios add one per figure of theirs, with the algorithms' range
// under each variant.
//
// The summary, for each number of proxies, scores every algorithm in
// every scenario by the least of its weighted ratios to the best there
// (its throughput over the most, weight 1; the square root of the lowest
// p99 over its p99, weight ½; what its errors leave of the requests over
// what the fewest leave, weight 1; and, where backends have a capacity,
// what its busiest backend leaves the others over what a share at that
// backend's herding bound leaves, weight 1: see Summary and HerdBounds),
// and picks the one whose worst scenario scores best: the pick should
// hold on every kind of day, not win most of them. RuleText says the
// rule in a line, which lbsim prints under the summary. The runner-up follows, then algorithms that lead
// somewhere but not at worst, with why. ScenarioReport.Verdict and
// Report.Summaries compute them; nothing is written by hand, so other
// backends give other verdicts (TestVerdictFollowsBackends: lrt for the
// study's, least connections for four equal backends with lognormal
// service times). A scenario's own figures (Scenario.Metrics, filled in
// Result.Extra) join the verdict when they have a Leader.
//
// # Machine-readable output
//
// lbsim -json FILE writes a Document as one JSON object: "format"
// ("lbsim/1"), "command" (the command line) and "flags" (every flag's
// value, defaults included), then "reports": the simulation's and, with
// -live, the live run's. A report has "source", "seed", "scenarios" and
// "summaries" (each with "proxies", "scenarios", "standings" and the
// printed "lines"). A scenario has its "name", "proxies", "description",
// "users", "stages", "length_s", "think_ms", "check_interval_ms",
// "report_delay_ms", "probe_rtt_ms", "client_timeout_ms" (when users
// give up), "variants", "backends" (label, id, latency_ms, jitter_ms,
// sigma, samples, weight, capacity, down, and neighbours, zone, stalls,
// unavailable, tail_share, tail_factor, fail_share and track when it has
// them), "metrics"
// (name, label, unit, better, leader), "results" and its "verdict"
// (variant, leads, trade_off, handling, by_variant, versus, contrast
// when it has one, lines), and, for a fleet scenario, "proxy_zones",
// "cross_zone_ms" and "subset_size". A result has "variant",
// "algorithm", "figures" (an object from metric name to value; null for
// a value JSON cannot hold),
// "backends" (sent, share_pct, refused, reset, in_flight_mean,
// in_flight_peak) and "series" (step_s, users, in_flight, in_flight_peak,
// attempts_per_s, errors_per_s: per step, per backend where it applies).
// Times carry their unit in their name.
//
// lbsim -csv FILE writes the tables' figures: a header row, then per run
// one row with source, scenario, proxies, variant, algorithm, an empty
// backend and a column per metric name, followed by one row per backend
// with its label and the columns sent, share_pct, refused, reset,
// in_flight_mean and in_flight_peak. A cell a row does not have (the
// failure figures without an outage) is empty; numbers are in full
// precision. TestWriteJSON and TestWriteCSV read both back.
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
// LoadScenarios returns four more, which ask whether the backends' own
// reports of their load, and probes, are worth their cost (see "Load
// reports and probes" below). lbsim runs them when asked
// (-scenarios antagonist,hetero; each name stands for both of its
// shares), and then runs catalog.LoadAware's pickers too, with every
// other; they are not in its default run, which replays the study.
//
//   - antagonist-70, antagonist-95: four backends serving in 50 ms (fixed
//     service times, as in the study), 16 requests at once each; from 1
//     minute on, a neighbour the proxies cannot see takes 8 of the first
//     one's slots. 118 and 160 users: 70% and 95% of the 56 slots left
//     with the neighbour there (95% of all 64 would overload them: 109%).
//   - hetero-70, hetero-95: four backends serving in 50 ms, 32, 16, 8 and
//     4 at once; 126 and 171 users, 70% and 95% of the 60 slots.
//
// Users think 100 ms and stay 3 minutes; their number is the share of the
// slots they would keep busy if no request queued, share × slots ×
// (think + latency) / latency. The tables add probes/req, the probes sent
// per request answered (ProbesMetric), and the verdict a line that sets
// the best p99 of wrr-reported, leastconn-reports and prequal against the
// best of leastconn and lrt (Scenario.Versus).
//
// SlowScenarios returns five more, of backends that fail slowly or
// answer errors fast, which compare what the proxy does about them:
// timeouts, the retry budget and hedged requests, as lbhttp's Transport
// does them, health without retries, and a canary behind package route
// (docs/results.md has the tables). lbsim runs them when asked
// (-scenarios stall,storm,tail,flaky,canary), over -backends when given; they
// are not in its default run either: their question is the proxy's more
// than the algorithm's (their variants differ far more than their
// algorithms do), and they would add 100 runs to the default run's 120.
// Each has the study's four backends, 100 users for 3 minutes who
// give up on a request after a minute (DefaultClientTimeout, k6's
// default), and active checks every 5 s; "retries" below is
// active+passive+retry (lbhttp before it had timeouts) and "defaults"
// active+passive+retry+timeout+budget (lbhttp's defaults since).
//
//   - stall: the 50 ms backend accepts connections and never answers from
//     1 minute on; under retries, defaults, retries with timeouts and
//     hedging but no budget, and defaults with hedging.
//   - storm: every backend answers 503 in a millisecond (UnavailableTime)
//     from 1 minute for 30 s, then recovers; under the bare picker,
//     retries and defaults.
//   - tail: each backend takes 20 times its latency for 1% of its
//     requests, drawn at random; under retries, defaults and defaults with
//     hedging.
//   - flaky: the 50 ms backend answers 30% of its requests, and of its
//     health checks, with a 503 in a millisecond, drawn at random, for
//     the whole run; under the bare picker, active+passive (health
//     without retries), retries and defaults, and active+passive and
//     defaults with failrate. Without retries each of those is a user's
//     error; passive ejection counts consecutive
//     failures, which one failure in three makes now and then, so it
//     takes the backend out for a while only, the more often the more a
//     picker sends it; a retry saves every one, for 1.3 attempts per
//     request the flaky backend took (TestFlaky). Least connections
//     sends it the most: its fast failures leave it the fewest requests
//     in flight. The failrate variants add health's failure-percentage
//     ejection (Envoy's failure_percentage) at a threshold of 20%
//     (FailRateThreshold): it ejects the backend interval after interval,
//     and round robin's errors without retries, and retries with them,
//     fall by more than half.
//   - canary: four backends serving in 50 ms, 16 at once, tracked
//     "stable", and a canary three times slower (150 ms), tracked
//     "canary"; under the bare picker (the canary one backend of five),
//     route (behind package route, sent nothing: the canary off) and
//     route+canary (5% of the requests tagged for it: on). Off, the
//     figures are the stable backends' alone; on, 5% of the requests take
//     three times as long, which sets the p99 (5% is more than 1%) and
//     costs the throughput what the closed loop's law says; in the pool,
//     round robin sends the canary a fifth (TestCanary). Over -backends,
//     the canary is a copy of the first three times slower, unless a
//     backend has a track= of its own.
//
// Their tables add the attempts per request, over the run and during the
// outage, the longest wait and the 99.9th percentile (SlowMetrics), and
// their verdicts a line for each that sets the variants side by side.
// Each verdict judges the variant its scenario is about, lbhttp's
// defaults (with hedging, in the tail: Scenario.Contrast), and ends with
// lrt's figures under it and under the variant without it. In the storm
// the fewest errors would pick plain retries, which fail a few fewer
// requests only because each fails three times as slowly and so leaves
// its users fewer to send.
//
// # Fleets
//
// Two scenarios ask what the fleet decorators do, package locality
// (Envoy's zone-aware routing) and package subset (deterministic
// subsetting), for a fleet of a given shape. lbsim runs them by name:
//
//	go run ./bench/cmd/lbsim -scenarios zones,fleet
//	go run ./bench/cmd/lbsim -scenarios zones -algos leastconn -html zones.html
//
// The two:
//
//   - zones: 30 backends in three zones, 14, 10 and 6 (a, b, c), each
//     serving in 10 ms (lognormal, σ 0.5; mean 11.3 ms, p99 32 ms), 4
//     requests at once; 10 proxies, 5, 3 and 2 in those zones, so that
//     zone a's callers (50%) outnumber its backends (47%); 2 ms more
//     across zones; 700 users for 2 minutes, about 60% of the slots busy;
//     at 1 minute 7 of zone a's 14 backends die, and the 23 left are
//     about 76% busy. Active checks, passive ejection and retries
//     (active+passive+retry, as lbhttp runs with health) without and with
//     locality: zone-blind routing is the baseline.
//   - fleet: 300 such backends and 100 proxies, 10 users each, for 1
//     minute, every proxy talking to every backend (none) and each to a
//     subset of 20 (subset).
//
// Their tables add the figures that answer the question. zones: "in zone
// % before" and "in zone % during", the attempts that stayed in their
// proxy's zone before the outage and during it; "max load % before" and
// "during", the busiest backend's requests (in service and queued,
// time-weighted) over its capacity, above 100% when it was asked for
// more than it serves. fleet: "conns/backend" and "conns max", the
// proxies that sent a backend at least one request, as many as a
// connection pool would open, mean and most over the backends; "least
// load" and "most load", the attempts of the least and the most loaded
// backend against the mean. The verdict judges the variant the scenario
// is about (locality, subset: Scenario.Contrast) and ends with a line
// that sets one algorithm's figures under both variants side by side:
// leastconn for zones, round robin for fleet. docs/results.md has the
// tables; packages locality and subset work out what to expect.
//
// They are not in the default run, for two reasons. The default run's
// summary picks an algorithm for the user's backends (-backends); zones
// and fleet bring backends and proxies of their own (Scenario.Proxies:
// lbsim refuses -backends with them, and -proxies does not change them),
// and answer another question: whether to turn a decorator on. And they
// cost an order of magnitude more CPU than the default run: fleet's 100
// proxies each hold a picker over 300 backends (see "Cost").
//
// What the simulator adds for them. A backend runs in a Zone, and proxy p
// in ProxyZones[p mod n]; an attempt from one zone to another takes
// CrossZone more, added on the answer's way back (the backend is free once
// it has answered, and the answer carries the report it left with) and to
// a refusal; a backend dying under a request resets it at once, wherever
// it comes from. Variant Locality wraps each proxy's picker in
// locality.New, one picker of the algorithm per zone, the proxy's zone its
// Config.Zone, the users of each zone's proxies its Config.Callers and the
// proxy's seeded source its Rand; Subset wraps it in subset.New in
// deterministic mode, proxy p being Index p of Count M. With health, they
// stack as their docs say: subset ▶ health ▶ locality ▶ the algorithm, so
// that health hands locality every backend with its health. Every request
// carries its user's address as Key (for the hash pickers), so locality
// draws each user's zone from its key: a user keeps its zone, and the
// zones' shares come out as the users' hashes fall, within a few points of
// the shares' arithmetic. A picker that runs a loop the simulator turns
// (prequal's probes, wrr-reported's weights) is refused under Locality,
// before any run starts: one per zone inside locality, the simulator
// cannot reach them.
//
// # The model
//
// What is simulated. Discrete events in virtual time, played in order of
// time and then of scheduling (a binary heap, and FIFO lanes for the
// events a constant delay ahead: see "Cost"), so that a run is
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
// drawn from the run's seeded source when service starts; a backend with
// a tail (TailShare) then takes TailFactor times as long for that share
// of its requests, one more draw. A dead backend refuses connections: the
// attempt fails RefuseTime (100 µs) after it is sent with an error
// wrapping syscall.ECONNREFUSED; requests in service or queued when it
// dies fail at that instant with syscall.ECONNRESET. A revived backend
// serves again at once. A stalled backend (Stalls) accepts requests and
// serves them, but holds every answer until the stall ends, when the
// answers held leave at once; its slots stay taken meanwhile. A backend
// answering 503 (Unavailable) answers every request that arrives so
// UnavailableTime (1 ms) later, without taking a slot; the requests it was
// serving finish. A backend failing a share (FailShare) answers that
// share of its requests so, drawn at random per request. Health checks
// see what requests see: a stalled backend's fail (a probe timeout), as
// do those of one answering 503, and that share of one failing a share. An
// attempt that leaves a backend before its answer (it timed out, lost a
// race to a hedge, or its user gave up) leaves its queue or frees its
// slot at once, as a Go handler that honours its request's context stops
// work when the proxy closes the connection.
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
// what their failures tell it), and after every 503 and every timeout.
// Retry does what
// lbhttp's Transport does for a GET: it sends a failed attempt again at
// once on another backend, with Attempt+1 and Avoid set to the backend
// that failed it, up to MaxAttempts (3) attempts. That covers every
// failure simulated: a refused connection, a request in flight on a
// backend when it died, a 503 (lbhttp's RetryOn) and a timeout. All but
// the first are safe to resend only because the users' requests are
// idempotent; lbhttp never resends a POST whose connection broke after it
// was sent, since the backend may have acted on it. With one backend dead
// at a time, a retry that avoids it reaches a live one, so the failure
// scenarios with retries end with no failed user request for any
// algorithm (TestFailure).
//
// Timeouts, the budget, hedges, as lbhttp's Transport has them, on the
// virtual clock. Timeout ends an attempt still waiting
// lbhttp.DefaultAttemptTimeout (5 s) after it was sent, or at the
// request's deadline, lbhttp.DefaultRequestTimeout (15 s) after its first
// attempt, if that is sooner: its Done reports lbhttp.ErrAttemptTimeout
// (or ErrRequestTimeout) with the time waited, a failure that health
// counts and lrt learns from, and Retry sends it again if the deadline
// has not passed. Budget gives each proxy an lbhttp.Budget of lbhttp's
// defaults: Request counts every user request, and every retry and hedge
// must pass Retry, or the request fails with its last error at once.
// Hedge gives each proxy an lbhttp.Percentile of the times its attempts
// waited (answers that could be used, and attempts still waiting when
// they timed out or lost a race); once it has 100, an attempt with no
// answer after its 95th percentile gets a hedge, picked with Attempt+1
// and Avoid the first, not sent if that is the same backend or the budget
// says no (its Done then reports it abandoned). The first answer that
// is not a 503 wins; the other attempt leaves its backend and its Done
// reports it abandoned (as a timeout if it had waited AttemptTimeout). A
// failed attempt whose hedge still waits leaves the outcome to it. Hedges
// count as attempts and as retries. A user whose ClientTimeout passes
// gives up: its attempts leave their backends, reported abandoned, and
// the request fails. TestLeave, TestStallHolds and TestHedge check these
// steps one by one.
//
// Route and the canary. Route wraps each proxy's picker in route.New, by
// the label "track" (Backend.Track; each backend with one is a
// balancer.Labeler), one picker of the algorithm per track, requests
// without a Route going to the "stable" set (Config.Default) and, when it
// has no backend, to any (Fallback Any), route's random draws from the
// proxy's seeded source; health goes around it (health ▶ route ▶ the
// algorithm), so that a track health empties falls back at once. Canary
// tags each user request, at random from the run's source, with
// Request.Route "canary" with probability Scenario.CanaryShare (5% by
// default); its retries and hedges keep the tag. As under Locality, a
// picker whose loop the simulator turns (prequal, wrr-reported) is
// refused under Route, before any run starts, and Route does not go with
// Locality.
//
// Load reports and probes. Every backend measures itself over the window
// lbhttp's Reporter uses, and every answer carries its report
// (balancer.Result.Load, in Done), for the pickers that weigh reports
// (wrr's Reported, leastconn's WithReports; catalog.Algorithm.Reports);
// probing pickers (lrt/prequal) have their probes answered.
//
//   - Utilisation (Load.Application): busy slots over the slots the
//     backend has, over the window (ReportWindow, 10 s in ten slots: the
//     nine before the one in progress and that one so far, as the
//     Reporter keeps it). A backend serving at its capacity reads 1
//     however long its queue, as a CPU gauge does. That is the Reporter's
//     figure (requests in its handler over Capacity) for a backend that
//     queues in front of it; a Reporter around a handler that queues
//     counts the queued requests too, and reads above 1 under a queue
//     (not simulated). With a neighbour, the
//     slots it has are those the neighbour leaves: its gauge sees that it
//     is full. (A gauge that missed the neighbour's share, a process's
//     own CPU time under a CPU antagonist, would read half at most, and
//     lead the pickers that trust it to send more.) A backend with
//     unlimited capacity reports no utilisation, as a Reporter without
//     Capacity, and wrr's Reported weighs it as round robin does.
//   - Rate (Load.RPS): answers per second over the window, to every
//     proxy. EPS is zero: reports ride on the answers that succeed (a
//     simulated 503 carries none).
//   - Requests in flight (Load.InFlight): queued ones included, the
//     answer's own not.
//   - Report delay (Scenario.ReportDelay, lbsim -report-delay; zero by
//     default): an answer carries what the backend would have reported
//     that long before it left, as of the last 100 ms sample at or before
//     then: a gauge refreshed now and then, a report sent out of band.
//     TestMeterMatchesReporter holds an undelayed report to lbhttp's
//     Reporter's for the same requests at the same times; TestDelayedReport
//     a delayed one to the undelayed one of back then.
//   - Probes: every 2 ms (prequal's tick) the simulator turns each probing
//     picker's probe loop (Step) and sends the probes it asks for, one per
//     pick by default. A probe reaches its backend half a round trip after
//     it left (Scenario.ProbeRTT, lbsim -probe-rtt; DefaultProbeRTT, 1 ms)
//     and is answered with the backend's requests in flight and its
//     latency estimate then, the median of its last 64 answers' times at
//     the backend, queue included, as the Reporter answers; the answer
//     reaches the picker (Observe) the other half later. A dead backend
//     does not answer. A probe takes no slot: its work is not simulated.
//     TestProbes checks the timing and the answers.
//   - wrr's Reported recomputes its weights every second (Refresh, its
//     default period) in virtual time; no goroutine of its own runs.
//
// A neighbour (Backend.Neighbours; -backends nb=TAKES@AT-UNTIL) takes
// slots of a backend from its arrival to its departure: requests in
// service finish, new ones queue for the slots left (TestNeighbour).
//
// What is not simulated: network time (but for a refusal, and the time
// between zones: see "Fleets"), connection set-up and pooling, the CPU
// cost of picking and proxying, the idle timeout of a body (bodies are not
// simulated), request and response sizes, a backend slowing down by
// degrees (it stalls, answers 503 or has a tail at once), or serving more
// slowly under load except by queueing at its capacity. Package bench/live
// plays the scenarios through a real proxy, where the first four happen,
// and measures what they add.
//
// # Checks against theory
//
// TestLittlesLaw runs the steady scenario for every algorithm and checks
// the closed-loop law X = N/(R+Z) within 2% (100 users thinking 100 ms,
// with round robin's R of 250 ms, give 100/(0.25+0.1) = 285.7 requests/s),
// that round robin over fixed delays gives R = the mean of the delays,
// 250 ms, and that each backend holds λ·W requests on average (Little's
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
// # Are load reports worth their cost?
//
// The load scenarios ask it (go run ./bench/cmd/lbsim -scenarios
// antagonist,hetero -proxies 1,10; docs/results.md has the tables). Each
// verdict ends with a line that sets the best p99 of the three pickers
// that weigh reports or probes (wrr-reported, leastconn-reports, prequal)
// against the best of the local ones (leastconn, lrt), which issue 19 set
// out to beat by 30% at 95% of capacity behind 10 proxies. Variations
// worth trying: -report-delay 1s or 5s (reports that age), lognormal
// service times (-backends 50ms:c=16:s=0.5:nb=8@1m,...), antagonist-95 at
// 95% of all 64 slots (-users 182, overloaded once the neighbour comes).
// What sets the pickers apart, by mechanism:
//
//   - wrr-reported's weights, rps over utilisation, are the slots over the
//     latency when capacities differ and stay put (hetero). Behind one
//     proxy, with fixed service times, its smooth turns queue nothing;
//     behind ten, ten schedules overlap at random. It does not follow a
//     change faster than its report window (10 s): when the neighbour
//     arrives (antagonist), the first backend's share of its attempts
//     falls over those 10 s, while lrt, which sees the slower answers at
//     once, moves away at once. Delayed reports make that worse.
//   - leastconn-reports: a backend at its capacity reads 1 however long
//     its queue, so at high load the reports tell a full backend from a
//     flooded one no better than this proxy's own counts do.
//   - prequal, as lbkit implements it and as lbhttp's Reporter answers
//     probes, sends a probe per request (probes/req). With four backends
//     the 0.84 quantile of four RIFs is the third, so at most one backend
//     is hot at a time; the paper's setting has many more. Its package doc
//     lists where it departs from the paper (the pool's management, the
//     latency estimate).
//   - lrt learns from its own answers the latency that every proxy's load
//     causes, with no reports at all.
//
// # Cost
//
// Memory is O(users + proxies × backends), not O(requests): each proxy
// holds a picker over the backends (a hash ring's 150 points per backend
// are the largest), latencies go to a Histogram (a few kilobytes,
// quantiles within HistogramError, 1/256, of the exact nearest-rank ones:
// TestHistogram, TestSimulatedPercentiles), series have at most 300 steps,
// and the event queue holds one pending event per user. Time is linear in
// requests: most events are scheduled a constant delay ahead (a think
// time, a fixed service time, a refusal), and FIFO lanes keep those sorted
// at O(1), beside a binary heap for the rest, in the same order as the
// heap alone. Run plays one run per CPU, fewer when that many runs of the
// largest scenario would hold more than MemoryBudget (RunBytes: 256 bytes
// a user). lbsim refuses, before it starts, runs that would simulate more
// requests than -max-requests (2 billion; Scenario.Requests estimates
// them), with the estimate and what to narrow.
//
// The event loop allocates nothing per event: a run allocates a bounded
// number of times, at set-up (TestRunAllocations, for the study's runs
// and for a stall run with every variant feature on). BenchmarkSimulate
// measures the time per simulated request for rr, leastconn and lrt with
// 100 users and for rr with 100,000, and for prequal, whose probes add two
// events a probe and an allocation per answer. A picker that weighs
// reports has its backends measure themselves (a few float operations per
// answer, and a report in each Done). The fleet scenarios cost the most:
// fleet's 100 proxies each hold a picker over 300 backends, most of the
// memory with the hash pickers. The slow scenarios' storm costs more than
// the others per minute simulated: its users send ten requests a second
// each while every backend fails them in a millisecond, and timeouts and
// give-ups add an event per attempt and per request.
package sim
