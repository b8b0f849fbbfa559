// Package sim answers "which algorithm for my backends?" in seconds. It
// plays load scenarios in virtual time against every configuration of
// bench.Algorithms (and of bench.LoadAware, the pickers that weigh the
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
//	rep, err := sim.Run(sim.Defaults(nil), bench.Algorithms(), sim.Options{Seed: 1})
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
// within 1% of the best tie: Tie), and the trade-off in one line, such as
// "lrt-naive serves 10% more than lrt with the same p99; it sends 97% of
// attempts to one backend". A scenario that compares failure handling is
// judged under the variant that fails fewest requests, or under the one
// it is about when it names one (Scenario.Contrast: the fleet and slow
// scenarios), and a line sets the variants' errors side by side; the slow
// scenarios add one per figure of theirs, with the algorithms' range
// under each variant.
//
// The summary, for each number of proxies, scores every algorithm in
// every scenario by the least of its ratios to the best there (its
// throughput over the most, the lowest p99 over its p99, the share of
// requests it serves over the best share), and picks the one whose worst
// scenario scores best: the pick should hold on every kind of day, not
// win most of them. The runner-up follows, then algorithms that lead
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
// unavailable, tail_share and tail_factor when it has them), "metrics"
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
// shares), and then runs bench.LoadAware's pickers too, with every
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
// SlowScenarios returns three more, of backends that fail slowly or
// answer errors fast, which compare what the proxy does about them:
// timeouts, the retry budget and hedged requests, as lbhttp's Transport
// does them (see "Slow backends, measured" below). lbsim runs them when
// asked (-scenarios stall,storm,tail), over -backends when given; they
// are not in its default run either: their question is the proxy's more
// than the algorithm's (their variants differ far more than their
// algorithms do), and their 100 runs would double the default run's
// time. Each has the study's four backends, 100 users for 3 minutes who
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
//
// Their tables add the attempts per request, over the run and during the
// outage, the longest wait and the 99.9th percentile (SlowMetrics), and
// their verdicts a line for each that sets the variants side by side.
// Each verdict judges the variant its scenario is about, lbhttp's
// defaults (with hedging, in the tail: Scenario.Contrast), and ends with
// lrt's figures under it and under the variant without it. In the storm
// the fewest errors would pick plain retries, which fail 2% fewer
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
// leastconn for zones, round robin for fleet. The measured tables are
// under "Fleets, measured".
//
// They are not in the default run, for two reasons. The default run's
// summary picks an algorithm for the user's backends (-backends); zones
// and fleet bring backends and proxies of their own (Scenario.Proxies:
// lbsim refuses -backends with them, and -proxies does not change them),
// and answer another question: whether to turn a decorator on. And they
// cost about twelve times the default run: 9.9 s of CPU against 0.85 s
// (see "Cost").
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
// serving finish. Health checks see what requests see: a stalled
// backend's fail (a probe timeout), as do those of one answering 503. An
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
// Load reports and probes. Every backend measures itself over the window
// lbhttp's Reporter uses, and every answer carries its report
// (balancer.Result.Load, in Done), for the pickers that weigh reports
// (wrr's Reported, leastconn's WithReports; bench.Algorithm.Reports);
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
// # Are load reports worth their cost?
//
// The load scenarios' p99 in ms for the pickers the question is about:
// the three that weigh reports or probes, and the local baselines
// leastconn and lrt; seed 1 (go run ./bench/cmd/lbsim -scenarios antagonist,hetero -proxies
// 1,10; RPS in the same tables):
//
//	                   antagonist-70  antagonist-95  hetero-70      hetero-95
//	proxies             1      10      1      10      1      10      1      10
//	leastconn          90.7   97.5   99.4  136.9  191.3  240.5  249.4  344.3
//	lrt                50.0   50.0   80.0   90.0   98.4  100.0  139.5  132.5
//	wrr-reported       50.0   50.8   50.0   97.5   50.0   85.7   50.0  100.0
//	leastconn-reports  53.4   90.7   99.4  127.5  147.6  198.4  247.1  348.4
//	prequal            50.0   67.8  148.8  150.0  200.0  200.0  349.9  300.1
//
// The goal set for them (issue 19) was a p99 at least 30% below the best
// local picker's at 95% of capacity behind 10 proxies. The simulator shows
// no such gain: in antagonist-95 the best of the three, wrr-reported, is
// 8% above lrt (97.5 against 90.0 ms); in hetero-95 it is 25% below
// (100.0 against 132.5 ms). Nor did any variation reach it (all at 95%,
// 10 proxies; antagonist, then hetero): reports delayed 1 s
// (-report-delay 1s), 10% above and 28% below; delayed 5 s, 67% above
// (leastconn-reports 150.0 ms: wrr-reported's weights lag to 257.5) and
// 25% below; lognormal service times of median 50 ms and σ 0.5 (-backends
// 50ms:c=16:s=0.5:nb=8@1m,... -users 147; 50ms:c=32:s=0.5,... -users
// 158, 95% of the slots at their mean of 56.7 ms), 3% above and 18% below;
// antagonist-95 at 95% of all 64 slots (-users 182, overloaded once the
// neighbour comes), 50% above.
//
// When they are worth it, then:
//
//   - wrr-reported, for capacities that differ and stay put: its weights,
//     rps over utilisation, are the slots over the latency (shares
//     53/27/14/7 in hetero), and it had the lowest p99 in both hetero
//     scenarios behind either fleet. Behind one proxy, with fixed service
//     times, its smooth turns queue nothing: 50.0 ms in every scenario,
//     against lrt's 50.0 to 139.5. Behind ten, ten schedules overlap at
//     random, and it keeps 14 to 25% of lrt's p99 off in hetero. It does
//     not follow a change faster than its window (10 s): when the
//     neighbour arrives, the first backend's share of its attempts falls
//     from 25% to 14% over the next 10 s, with 64 to 71 requests at the 8
//     slots left at the worst second (series of the 10-proxy run), where
//     lrt, which sees the slower answers at once, had at most 18. Its p95
//     there is 50.0 ms, its p99 97.5. Delayed reports make that worse.
//   - leastconn-reports improved on leastconn at 70% (a p99 7 to 41%
//     lower) and not at 95% (within 7%), and lrt's p99 was lower than
//     both everywhere: a backend at its capacity reads 1 however long its
//     queue, so at high load the reports tell a full backend from a
//     flooded one no better than this proxy's own counts do.
//   - prequal, as lbkit implements it and as lbhttp's Reporter answers
//     probes, lost to lrt at 95% everywhere, by 1.7 to 2.5× behind one
//     proxy and 10 (150.0 against 90.0 ms, 300.1 against 132.5 ms), for a
//     probe per request (probes/req 1.00). Its shares in hetero-95 behind
//     10 proxies were 57/29/14/0, the 4-slot backend left idle, and behind
//     one 46/33/15/5 with 11.3 requests at the 4-slot backend on average,
//     queueing. With four backends the 0.84 quantile of four RIFs is the
//     third, so at most one backend is hot at a time; the paper's setting
//     has many more. Its package doc lists where it departs from the
//     paper (the pool's management, the latency estimate).
//
// In short: behind a fleet, lrt, which learns from its own answers the
// latency every proxy's load causes, did as well as the reports or better
// for a change (antagonist) and came within 25% of them for capacities that
// differ (hetero). Reports are worth their cost for capacities that differ
// and stay put, through wrr-reported, most behind one or few proxies, and
// only while they are fresh; leastconn-reports and prequal did not pay
// here.
//
// # Fleets, measured
//
// go run ./bench/cmd/lbsim -scenarios zones,fleet (seed 1), figures from
// its tables, the two variants side by side; in zone and max load are
// before/during the outage, load is against the mean.
//
// zones, zone-blind (active+passive+retry) and with locality:
//
//	                   zone-blind                         with locality
//	algorithm      p99 ms  err  in zone %  max load %  p99 ms  err  in zone %  max load %
//	rr               34.2    4  37.4/33.5   60.1/82.1    33.3    2  97.3/80.3   61.7/88.0
//	wrr              34.2    4  37.4/33.5   60.1/82.1    33.3    2  97.3/80.3   61.7/88.0
//	leastconn        35.7    6  38.0/34.2   62.6/89.5    33.0    5  97.3/80.3   60.9/86.7
//	leastconn-p2c    35.7    6  38.0/34.2   62.6/89.5    33.8    6  97.3/80.3   63.0/92.0
//	iphash           36.7    1  34.4/31.8  91.6/137.9    36.3    6  97.3/80.2  98.8/181.2
//	ring             39.0    1  39.0/36.1 101.2/194.0    36.4    6  97.3/80.3 104.6/165.5
//	ring-bounded     34.7    2  39.5/36.2  77.2/103.5    33.5    8  97.3/80.3   69.4/99.6
//	maglev           36.5    2  37.2/33.8  92.9/123.6    37.5    4  97.3/80.3 103.9/181.6
//	lrt              35.7    1  40.2/35.5   65.2/90.9    34.0    2  97.3/80.4   64.6/95.3
//	lrt-naive       383.5    0  38.8/34.3 281.1/391.3   278.2    0  96.3/77.2 337.0/373.9
//
// Issue 20's goals, for leastconn in locality against zone-blind
// leastconn: 97.3% of requests stay in their zone while every zone has
// capacity (at least 90%; Envoy's arithmetic gives 96.7%: zone a keeps
// 14/30 ÷ 50% = 93.3% of its own); once zone a has 7 of 14, 80.3% (the
// arithmetic, 7/23 ÷ 50%, gives 80.4%), the busiest backend at 86.7% of
// its capacity, and a p99 of 33.0 ms against 35.7. Met, and by the
// other algorithms that keep load even: rr, wrr, leastconn-p2c, lrt, and
// ring-bounded only just (99.6% of capacity); the hash pickers overload
// backends with locality or without, their keys falling unevenly over 30
// backends and fewer per zone. Zone-blind routing sends 60 to 66% of the
// requests across zones whatever the algorithm; lrt, which sees the 2 ms, keeps 40.2% in zone against
// round robin's 37.4%. Locality fails a few more requests with some
// algorithms (41 over all ten against 27 zone-blind): a retry stays in
// its zone while the zone has backends, and right after the loss half of
// zone a's are dead and not yet ejected. TestZones holds the goals and
// the arithmetic, and each zone's load during the outage within 15% of
// the others' (at half length: zone a 80.1%, b 86.0%, c 77.5%, the users'
// hashes putting a few more of zone a's in zone b).
//
// fleet, all-to-all (none) and subsets of 20:
//
//	                        all-to-all                      subsets of 20
//	algorithm      conns  max  least load  most load  conns  max  least load  most load
//	rr             100.0  100       -0.3%      +0.2%    6.7    7      -10.2%      +5.2%
//	wrr            100.0  100       -0.3%      +0.2%    6.7    7      -10.2%      +5.2%
//	leastconn      100.0  100       -6.8%      +6.7%    6.7    7      -14.3%     +10.4%
//	leastconn-p2c  100.0  100       -6.8%      +6.7%    6.7    7      -14.3%     +10.4%
//	iphash           3.3    9     -100.0%    +170.0%    2.6    7     -100.0%    +200.0%
//	ring             3.3    9     -100.0%    +169.9%    2.7    6     -100.0%    +170.0%
//	ring-bounded     3.4    9     -100.0%    +170.1%    3.9    7      -99.8%    +150.3%
//	maglev           3.3    9     -100.0%    +169.7%    2.7    6     -100.0%    +170.0%
//	lrt            100.0  100       -6.1%      +5.7%    6.7    7      -28.0%     +20.7%
//	lrt-naive      100.0  100       -5.7%      +5.6%    6.7    7      -37.1%     +42.6%
//
// Issue 20's goals: subsets of 20 hold connections per backend at 6.7,
// at most 7, 7% of all-to-all's 100, and, with round robin inside, every
// backend's load from −10.2% to +5.2% of the mean (the subsets give each
// backend 6 or 7 proxies: −10% and +5%). Met with round robin, and with
// least connections (−14.3%, +10.4%: its two random choices over 20 add
// the noise of their draws, which shrinks with the requests; over half
// the minute, in TestFleet, −16.7%). Not with lrt (−28%, +21%): each
// proxy's lrt sees a few requests in flight over 20 backends and
// concentrates them on those its latency estimates favour. Hash pickers
// pin each user to a backend, so a proxy with 10 users talks to at most
// 10 backends with or without subsets, and 1,000 keys fall on 300
// backends as unevenly as any hash does: some get none. The p99 is 32.1
// ms in every run but lrt-naive's (32.3, 32.4): the backends are about 8%
// busy.
//
// # Slow backends, measured
//
// go run ./bench/cmd/lbsim -scenarios stall,storm,tail, seed 1, one
// proxy. Figures for rr/leastconn/lrt, and in brackets the range over all
// ten algorithms where it says more; "retries" is active+passive+retry,
// "defaults" active+passive+retry+timeout+budget (see Scenarios):
//
//	stall           errors          RPS during           max wait s        p99.9 ms
//	retries         100/25/87       119.8/245.2/183.4    60.00 [all]       500.0 [all]
//	defaults        0 [all]         230.3/277.5/315.1    5.50 [5.15-5.50]  5300.0/500.0/5150.0
//	timeout+hedge   0 [all]         230.1/275.9/299.2    2.11/1.51/2.24    1776.4/1171.1/1894.8
//	defaults+hedge  0/0/52 [0-100]  230.1/275.9/306.4    2.11/1.51/5.50    1776.4/1171.1/1105.3
//
//	storm           errors [all]   att/req during [all]  att/req over the run [all]
//	none            29538-29703    0.998-1.000           1.000-1.001
//	retries         28966-29125    2.993-3.000           1.460-1.807
//	defaults        29479-29644    1.207-1.210           1.049-1.087
//
//	tail            p99 ms               p99.9 ms                att/req              max wait s
//	retries         1000.0 [all]         10000.0/6000.0/3000.0   1.002/1.001/1.001    10.00 [all]
//	defaults        1000.0 [all]         5500.0/5050.0/3000.0    1.007/1.003/1.001    10.05/5.50/6.00
//	defaults+hedge  553.3/553.3/500.0    1003.3/1000.0/803.3     1.012/1.012/1.028    5.55/5.65/3.00
//
// Stall. Without timeouts, every user the stalled backend catches waits
// until it gives up, a minute later: all 100 under rr and lrt-naive, 25
// under leastconn, which stops sending there once its count has climbed.
// The active checks take the backend out within 15 s (Fall 3), so none
// is caught twice; during the stall rr serves 119.8 requests/s, against
// 285.3 before. Under lbhttp's defaults no request fails: each attempt
// caught times out after 5 s and its retry is answered elsewhere (rr: 97
// retries), five timeouts eject the backend, each user loses 5 s about
// once, and rr serves 230.3 requests/s during the stall (the p99.9 rises
// to 5.3 s for it: the requests the stall holds now end in a success
// after a timeout and a retry, where without timeouts they ended in an
// error a minute later, which has no latency). The budget
// changes nothing there (timeouts alone give the same runs, figure for
// figure). Hedging shortens the longest wait to 1.5 to 2.8 s, at 1.006 to
// 1.092 attempts a request. With the budget too, though, it failed requests for
// three algorithms (wrr 76, lrt 52, lrt-naive 100), and without the budget
// none: the attempts the stall holds lose their races to the hedges and
// report abandoned, as lbhttp reports a race lost, so they count towards
// no passive ejection and teach lrt nothing; the backend stays in
// rotation until the checks take it out, the pickers that herd send it
// most requests meanwhile, each needs a hedge, the hedges spend the
// budget, and the retries of the attempts that then time out find it
// spent.
//
// Storm. Every request in the storm fails whatever the proxy does; what
// differs is the load on the backends. Retries triple it, every request
// making its three attempts; lbhttp's budget holds it to 1.21 attempts a
// request, its 20% plus the 10 a second (TestStorm holds each run to
// what the budget promises), which is the bare picker's load and a
// fifth. No request fails once the storm is over. Behind 10 proxies
// (-proxies 10) the budgets let 1.30 through: each proxy's 10 a second
// adds up. The verdict judges the defaults, the variant the storm is
// about (see Scenarios).
//
// Tail. The p99 sits at the edge of a 1% tail and does not move until
// hedging: it is a 50 ms backend's tail (1 s) or the 500 ms backend's
// median. The p99.9 shows the tail: the timeouts cut the tails beyond 5 s
// (the 300 and 500 ms backends' 6 and 10 s) to a timeout and a retry,
// and hedging at the 95th percentile cuts the p99.9 3.7 to 5.5 times
// (TestTail: at least three times for every algorithm) for 0.5 to 2.7%
// more attempts. It costs lrt throughput (517.7 → 428.8 requests/s;
// shares 84/12/2/2 → 57/26/13/5): the attempts its hedges beat, those
// sent to the slow backends, whose usual answers come after the 95th
// percentile, report abandoned, so lrt never learns those backends are
// slow and, as its estimates decay, sends them more. With four equal
// backends, as lbhttp's TestHedgeTail has them (-backends
// 200ms,200ms,200ms,200ms -users 50), the p99 is the tail itself, and
// hedging cut it from 4000.0 to 401.3 ms, ten times, for 1.1% more
// attempts.
//
// Live (lbsim -live -scenarios stall,storm,tail -algos rr,leastconn,lrt,
// scale 0.1, 9 minutes at load average 7 to 10; the rig warned that it
// served 2,989 of the 6,667 requests/s the peak load asks), the same
// mechanics: in the stall 100/25/81 errors without timeouts, each user
// waiting 60.03 to 60.26 s, and none with the defaults, the longest wait
// 5.53 to 5.64 s, 1.92 to 2.85 s with hedging and no budget; in the storm
// 2.98 to 2.99 attempts a request without the budget, 1.22 to 1.23 with
// it; in the tail the p99.9 from 5514/5187/3203 ms under the defaults to
// 1101/1337/1730 with hedging, for 2.4 to 4.5% more attempts, and lrt's
// throughput 22% lower with hedging (340.6 → 264.1 requests/s). Where
// they differ the rig is why: it could not serve the storm's 10,000
// requests/s of real time (a millisecond's answer is 0.1 ms at that
// scale), so its users sent fewer and failed 7,712 to 21,748 requests,
// against the simulation's 28,966 to 29,660; and, the rig's own time
// added to every answer, lrt herded less and its
// hedges spent less of the budget: no request failed live in the stall
// with hedging and the budget, where the simulation failed 52 of lrt's.
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
// Measured on the 2-core machine this was written on, shared with other
// work (load average 7 to 18), with /usr/bin/time -v:
//
//   - go run ./bench/cmd/lbsim (120 runs of 13,000 to 120,000 requests):
//     1.1 s at load average 18, 2.5 s at 15; 18 MB peak RSS; with -html
//     (a 4.6 MB page) 1.1 s.
//   - lbsim -users 100000 -scenarios steady -algos rr (51 million
//     requests): 5.8 to 6.5 s of CPU; 5.3 s of wall-clock time at load
//     average 7, 16.4 s at 12, 23.4 s at 15 to 17 (the process got 27% of
//     a core); 32 MB peak RSS.
//   - lbsim -users 1000000 -scenarios steady -algos rr (514 million
//     requests): 68 s of CPU, 2 min 59 s at load average 12; 187 MB peak
//     RSS.
//   - lbsim -users 1000000 (every scenario): refused, "120 runs would
//     simulate up to 1.3e+11 requests ... about 1h48m to 5h24m of work".
//   - go run ./bench/cmd/lbsim -scenarios zones,fleet (40 runs, 25 million
//     requests): 9.9 s of CPU, 23.8 s of wall-clock time at load
//     average 18; 380 MB peak RSS, most of it the hash pickers of fleet's
//     100 proxies, each over 300 backends (-scenarios fleet -algos ring:
//     146 MB).
//
// BenchmarkSimulate, per request: rr 84 ns, leastconn 93 ns, lrt 139 ns
// with 100 users, rr 94 ns with 100,000 (benchstat of 6 runs against the
// heap alone and a slice of every latency: 152, 196, 238 and 347 ns). The
// event loop allocates nothing per event: a run allocates about 200
// times, at set-up (TestRunAllocations). A picker that weighs reports
// has its backends measure themselves (a few float operations per
// answer, and a report in each Done); one that probes adds two events a
// probe and prequal's allocation per answer (about 1 µs a request for
// prequal in BenchmarkSimulate, at load average 12, against 0.2 µs for
// rr in the same run). The load scenarios with both fleet sizes (104
// runs) take 2.9 s of CPU, three times the default run's 1.0 s. The slow
// scenarios (100 runs) take 2.1 s of CPU against the default run's 0.9 s
// in the same minute (3.8 to 4.4 s of wall-clock time at load average
// 7, 27 to 30 MB peak RSS): the storm's users send ten requests a second
// each while every backend fails them in a millisecond, and timeouts and
// give-ups add an event per attempt and per request. They allocate
// nothing per event either (TestRunAllocations: 310 to 341 allocations
// for a stall run with every variant feature on).
package sim
