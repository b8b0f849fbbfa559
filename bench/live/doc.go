// Package live plays the simulator's scenarios for real: HTTP backends on
// 127.0.0.1, lbhttp's reverse proxy with the real picker and the real
// health package in front of them, and HTTP clients as the virtual users,
// with every duration scaled down. It fills the same sim.Report as the
// simulator, so the same tables, Markdown and HTML print it, and
// sim.Comparison sets the two side by side. A simulator is only worth
// trusting when reality agrees with it: this is the check.
//
// From the command line:
//
//	go run ./bench/cmd/lbsim -live -scenarios steady            # 18 s per algorithm, then sim vs live
//	go run ./bench/cmd/lbsim -live -scale 0.1 -scenarios steady,failure   # about 15 minutes
//	go run ./bench/cmd/lbsim -live -scale 0.5 -algos rr,leastconn -duration 1m -users 20
//
// From Go:
//
//	rep, err := live.Run(context.Background(), scenarios, algos, live.Options{Scale: 0.1})
//	if err != nil { ... }
//	simRep, err := sim.Run(scenarios, algos, sim.Options{Seed: 1})
//	if err != nil { ... }
//	rep.WriteText(os.Stdout)
//	sim.Comparison{Sim: simRep, Live: rep}.WriteText(os.Stdout)
//
// lbsim -live measures the rig first (Calibrate, two seconds or more), refuses a
// scale at which the rig's own overhead is a large part of what it would
// measure, and warns when the live figures cannot be taken for the
// backends' (see "Can the live figures be trusted?"). It also raises GOGC
// to 400 (see "The load generator"); a program of your own may want to do
// the same, with debug.SetGCPercent.
//
// # Can the live figures be trusted?
//
// The rig shares the machine with whatever else runs there, and at scale
// s a real overhead of d reads as d/s in the scenario's time. So before a
// live run lbsim calls Calibrate: about a second with four users who do
// not think, to one backend at the fastest scaled latency, through the
// real proxy (the rig's timing error: late timers, the proxy's path,
// loopback), then about a second at the peak load the scenarios ask (the
// busiest scenario's users, its scaled think time, every request to that
// backend, as lrt-naive sends them); each run lasts four of its users'
// cycles when that is longer (up to 10 s), and what the loaded one served is set
// beside what the simulation of the same run serves, so that its start
// and end weigh on both (TestCalibrateLargeScale). Overhead.Trust then refuses the
// scale, before anything is simulated, when the light-load overhead is
// above RefuseShare (half) of the fastest backend's scaled latency, and
// warns, on stderr and in the live report's source line, when the rig
// served less than 90% of the rate asked or added more than WarnShare
// (10%) of that latency under load. Each message names a scale that
// would do. On the 2-core machine this was written on, shared with other
// work (load average 12 to 15): at -scale 0.001 (the 50 ms backend
// answers in 50 µs) the rig added 711 µs at light load, 1421% of it, and
// lbsim refused, suggesting 0.15; at the default 0.1, 2 ms at light load
// and, asked 6,667 requests/s at the peak, it served 1,452: lbsim warned,
// and round robin's live RPS read 0.82 of the simulation's, its mean
// 1.22.
//
// Runs play one at a time, in sim.Run's order; Plays share nothing, and
// may run at the same time (TestAgreement plays two at once). Each lasts the scenario's
// length times the scale (an outage that would end later is cut short
// with it, as in the simulation; TestEndsOnTime), and stops by itself: when it is over, or when
// ctx ends, every server, client and goroutine it started is shut down
// before Run or Play returns (TestFailure and TestRun count goroutines
// before and after). Traffic goes to loopback addresses only.
//
// # What a run is made of
//
//   - Backends: one http.Server per scenario backend, on 127.0.0.1 and a
//     port of its own. A request waits the backend's service time (its
//     Latency, Jitter or Sigma, drawn as the simulator draws them, from a
//     source seeded by Options.Seed); a backend with a Capacity serves
//     that many at once and queues the rest first come, first served
//     (goroutines waiting to send on a channel are served in order).
//     GET /healthz answers at once, outside latency and capacity: the
//     active checks' target. A tail (sim.Backend.TailShare) is drawn as
//     the simulator draws it.
//   - Stalls and 503s: during a stall (sim.Backend.Stalls) a backend
//     serves as usual but holds every answer, the health check's
//     included, until the stall ends or the connection closes (the proxy
//     gave up on the attempt); while it answers 503
//     (sim.Backend.Unavailable) it answers every request so after the
//     scaled sim.UnavailableTime, without a capacity slot, and its health
//     check with 503.
//   - Outages: at the scaled time the backend's server is closed: its
//     listener, so new connections are refused (ECONNREFUSED), and every
//     connection, so the requests in service or queued fail. At the end
//     of the outage it listens again on the same address.
//   - Proxies: lbhttp.NewProxy (an httputil.ReverseProxy with lbhttp's
//     Transport) around a fresh picker of the algorithm, on its own
//     loopback port; Options.Proxies or -proxies M starts M of them, each
//     with its own picker and health checks, and user u goes through
//     proxy u mod M, as in the simulator. The pickers see the
//     simulator's backend IDs (10.0.0.1:8080, ...) and weights, so that
//     the hash pickers place the backends as in the simulation; the
//     proxy's base transport dials the backend's real loopback address
//     for each ID and refuses any other address without sending a packet.
//     Variants: none is the bare picker with MaxAttempts 1, so nothing is
//     retried; active wraps it in health.New with health.HTTP probes of
//     /healthz every scaled check interval and passive ejection off;
//     passive turns passive ejection on (ejection times scaled too);
//     retry sets MaxAttempts to sim.MaxAttempts (3), so lbhttp retries a
//     refused connection, a GET that failed in flight or timed out, and a
//     503, on another backend, as the simulator's Retry does; timeout
//     sets lbhttp's default timeouts, scaled (at 0.1, 500 ms per attempt,
//     1.5 s per request), and without it they are off; budget gives each
//     proxy an lbhttp.Budget of lbhttp's defaults with its window scaled
//     and its minimum per second divided by the scale, and without it
//     there is none (NoBudget); hedge sets HedgePercentile to
//     sim.HedgePercentile (95). Health runs with Start, in real time.
//   - The algorithms' time: a picker is built with Algorithm.Sim on a
//     clock that runs 1/scale times as fast as real time, and the
//     latencies it learns from Done are divided by the scale, so that it
//     lives in the scenario's time base, as in the simulation. This
//     matters for lrt, whose estimates decay over τ = 10 s: with the real
//     clock, at scale 0.1 that would be 100 s of the scenario, and lrt
//     would, for one, never come back to try a dead backend within the
//     failure scenario (16 errors live against 52,966 simulated, in a run
//     made before the clock was scaled; 11,820 against 17,637 with it, at
//     scale 0.5, over 1 minute).
//   - Users: one goroutine and one http.Client per virtual user (at most
//     MaxUsers, 2,000), each with its own keep-alive connection to its
//     proxy, following the stage
//     profile (sim.Scenario.UserChanges) and thinking the scaled think
//     time between an answer and the next request. Each sends GET with
//     X-Forwarded-For set to its own client address (sim.UserAddr, the
//     simulator's keys); the proxies trust 127.0.0.0/8 and ::1, so the key
//     is the user's address, as lbhttp.ClientIP reads it behind a trusted
//     proxy. A request is a success when a 200 arrives and its body is
//     read to the end, an error otherwise (the proxy's 502 when every
//     attempt failed, its 504 when one timed out, a 503 passed on). A user
//     gives up on a request after the scaled sim.Scenario.ClientTimeout
//     (http.Client's Timeout), which counts as an error.
//
// # The figures
//
// Every duration of the scenario is multiplied by Options.Scale (-scale,
// default 0.1): latencies and jitter, think time, stages, outage times,
// the check interval, health's ejection times. The figures are converted
// back, latencies ÷ scale and rates × scale, so that they read in the
// scenario's time base, like the simulation's; the report's Source says
// so, and the text output's first line prints it. In flight counts need
// no conversion (Little's law: λ·W is the same at any scale).
//
//   - Latency is the client's: from sending the request to the end of the
//     answer's body, measured in the user's goroutine. It includes the
//     proxy, loopback and the machine's scheduling, which the simulation
//     does not have; at scale s a real overhead of d reads as d/s.
//   - RPS, errors and the throughput before and after an outage count
//     the user requests that finished within the run, as the simulator
//     does.
//   - Per backend: share and sent count every attempt the proxies'
//     pickers returned within the run (refused ones included); refused
//     and reset count the attempts whose Done reported a refused
//     connection or another failure within it, but for timeouts and 5xx
//     answers, which the simulator does not count there either; in
//     flight is measured at the backend, from a request's
//     arrival (queueing included) to its answer. A request in flight when
//     its backend dies mostly counts as refused, not reset: net/http's
//     Transport resends a GET whose kept-alive connection broke before an
//     answer, to the same backend, which then refuses it.
//   - Retries are picks with Request.Attempt > 0, hedges included.
//   - The slow scenarios' figures (sim.SlowFigures): the longest wait of
//     a request that ended within the run, the 99.9th percentile latency
//     of the successful ones, and the attempts per request during the
//     outage, attempts counted as the meter counts them: picks, which
//     include a hedge lbhttp picked and did not send (the budget said
//     no), so that this figure can read a little above the simulation's
//     there.
//   - late ms, proxy ms (RigMetrics, live tables only): what the rig
//     itself added, in the scenario's time base: how late the backends'
//     service-time timers fired on average, and how much longer the
//     clients waited than their requests spent at the backends (the
//     proxy, loopback, scheduling). Together they say how far a live row
//     can be taken for the backends': in `lbsim -live -scale 0.5
//     -scenarios steady -algos rr,lrt -duration 10s -users 20` at a load
//     average near 15, round robin's timers fired 10.3 ms late (5 ms of
//     real time) and its proxy added 1.2 ms, and its live RPS read 0.94
//     of the simulation's.
//
// # Agreement with the simulator
//
// TestAgreement plays the steady scenario with 20 users for 10 s at scale
// 0.5 (5 s of real time, about 115 requests/s per algorithm) for round
// robin and least connections at the same time, and checks least
// connections against the simulation with the rig in it: round robin's
// live mean minus its simulated mean is the rig's latency, the rest of
// its live cycle (users / RPS) over the cycle simulated with that latency
// is the rig's think time, and least connections simulated with both
// added must match its live RPS and mean within 15%, both ways. Against
// the plain simulation both algorithms are held to 15% on the side the
// rig cannot push (more RPS, less latency) and to nothing on the other:
// there the figures are the machine's load, not the model's.
//
// Why not a bound on each live/simulated ratio, or on least connections'
// ratio divided by round robin's. Under -race with two CPU-bound loops
// beside it, on two cores that other jobs were loading too (go test -race
// -count 10 -run 'TestAgreement$' ./bench/live/, load average 12 to 13),
// the live/simulated RPS was 0.76 to 0.95 for round robin and 0.68 to
// 0.90 for least connections, and the mean 1.06 to 1.33 and 1.14 to 1.62:
// the rig added 14 to 83 ms of the scenario's time to round robin's
// latency there (7 to 42 ms of real time) and 7 to 27 ms to its think
// time. Dividing least connections' ratios by round robin's gave RPS 0.87
// to 0.95 and mean 1.08 to 1.26: the overhead is a time added to every
// request, and it weighs more on least connections' shorter ones (142 ms
// simulated against 247). Least connections against
// the simulation with the rig: RPS 1.00 to 1.08, mean 0.89 to 1.01, all
// ten within 15%. At a load average of 17 to 18 (the same command, ten
// runs) round robin's RPS was 0.58 to 0.80 of the simulation's, the
// ratio of ratios 0.77 to 0.88 for RPS and 1.25 to 1.52 for the mean, and
// least connections against the simulation with the rig still 1.01 to
// 1.09 for RPS and 0.90 to 1.04 for the mean. That comparison is not
// exact: the rig's latency is added to the backends in the simulation,
// where least connections counts all of it in flight, while live some of
// it (the clients') is outside its counts; so the simulation with the rig
// sends a little less to the fastest backend than the proxy does, and its
// mean reads a few percent high as the load grows.
//
// On an idle machine, for scale: ten runs in a row under -race, one
// algorithm at a time (load average 0.5 to 1.4), gave live/simulated
// ratios of 0.984 to 0.988 for RPS and 1.013 to 1.017 for the mean with
// round robin, 0.968 to 0.982 and 1.017 to 1.043 with least connections.
// The proxy path and the timers add a millisecond or two of real time to
// each request, 2 to 6 ms of the scenario's at that scale.
//
// At scale 0.1 the same overhead reads five times larger, and the fast
// algorithms ask more of the rig than it serves (see below): in the
// steady scenario (`lbsim -live -scale 0.1 -scenarios steady`, load
// average 0.3 to 2.4) the live/simulated RPS was 0.95 for round robin,
// 0.89 to 0.93 for the others but lrt (0.76) and lrt-naive (0.74), and
// the mean latency 1.05 for round robin, 1.10 to 1.19 for the others,
// 1.69 and 1.89 for lrt and lrt-naive. At scale 0.5 (the same command
// with -scale 0.5, 15 minutes, load average 1.2 to 2.2) the rig keeps up
// with all of them: RPS 0.98 to 0.99 of the simulation's and mean 1.01
// to 1.03 for all but lrt (0.95 and 1.12) and lrt-naive (0.94 and 1.14).
// Choose the scale by the question: 0.1 for a quick look at the shape
// (who herds, who black-holes a dead backend, what retries save), 0.5 or
// 1 for figures.
//
// # The load generator
//
// The users, the proxies and the backends share one process and the
// machine's cores, so the rig's own cost is part of every live figure.
// How it was checked that it does not set the pace, or where it does:
//
//   - Capacity. BenchmarkRig plays the steady profile (100 users, no think
//     time) against four backends that answer in 1 µs, at scale 1: what
//     the whole rig serves when nothing else holds it back (go test -run
//     '^$' -bench Rig -benchtime 1x ./bench/live/, load average about 2).
//     With GOGC=400, as lbsim -live sets it, it served 5,800 to 7,100
//     requests/s (rr 5,801 and 5,892, leastconn 7,062 and 6,250); with
//     Go's default GOGC=100, 3,900 to 4,200. A scenario asks, at scale s,
//     its users over their cycle, think time plus latency, divided by s:
//     the steady scenario at 0.1 asks 2,900/s when round robin spreads the
//     users (a 35 ms cycle), about half the rig's capacity, but up to
//     6,700/s when an algorithm sends nearly everything to the 5 ms
//     backend, as lrt and lrt-naive do: there the rig is the bottleneck,
//     and their live RPS falls 25% short. The burst scenario's 250 users
//     ask twice as much. lbsim -live prints the bound before it starts
//     ("up to N requests/s of real time"); keep it well below the
//     capacity, with -scale.
//   - Where the time goes, in one run of the steady scenario with round
//     robin at scale 0.1 (1 minute, GOGC=400, load average 1.5): each
//     backend's mean in flight over its arrival rate (Little's law) gives
//     its real service time, 4 to 5 ms (unscaled) above the nominal one,
//     0.45 ms of real time: the backends' timers fire late (Go's timers
//     wait in whole milliseconds in epoll when the process is idle, and
//     later when it is busy). The clients' mean latency was 8.5 ms above
//     the backends' mean, 0.85 ms of real time in the proxy and the
//     clients: 1.3 ms per request in all, 13 ms in the scenario's time
//     base, 5% of round robin's 250 ms. Least connections feels it more:
//     the in-flight counts it compares include the proxy's time, which
//     weighs most on the 5 ms backend, so it sends that backend less.
//   - Client-side timestamps, closed loop: each user waits for its answer
//     before it thinks, so a slow rig lowers RPS and raises latency
//     visibly rather than hiding them (no coordinated omission to
//     correct).
//   - Connections: every user keeps one keep-alive connection to its
//     proxy; the proxies keep up to max(256, peak users) idle connections
//     per backend (lbhttp.NewBase's default is 256), so no request pays a
//     handshake in steady state. No goroutine is started per request
//     beyond net/http's own.
//   - GOMAXPROCS is the machine's (2 here). lbsim -live sets GOGC to 400
//     unless the environment sets it: allocation is the largest CPU cost
//     after the system calls (a CPU profile of BenchmarkRig's setting at
//     GOGC=100: 21% in mallocgc, 17% in system calls), and the process's live heap is small, so with the
//     default of 100 it collects very often. The steady scenario at scale
//     0.1, shortened to 1 minute, gave round robin a live/simulated mean
//     latency of 1.20 and 1.18 in two runs with GOGC=100, 1.11, 1.08,
//     1.08 and 1.06 in four with GOGC=400 (peak RSS 57 MB), and 1.05
//     twice with GOGC=1000, for twice the memory.
package live
