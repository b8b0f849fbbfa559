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
// would do. At -scale 0.001, say, the 50 ms backend answers in 50 µs, less
// than the rig's own path through the proxy takes, and lbsim refuses.
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
//     failure scenario.
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
//     can be taken for the backends'.
//
// # Agreement with the simulator
//
// TestAgreement plays the steady scenario with 20 users for 10 s at scale
// 0.5 (5 s of real time) for round robin and least connections at the
// same time, and checks least connections against the simulation with
// the rig in it: round robin's live mean minus its simulated mean is the
// rig's latency, the rest of its live cycle (users / RPS) over the cycle
// simulated with that latency is the rig's think time, and least
// connections simulated with both added must match its live RPS and mean
// within 15%, both ways. Against the plain simulation both algorithms are
// held to 15% on the side the rig cannot push (more RPS, less latency)
// and to nothing on the other: there the figures are the machine's load,
// not the model's.
//
// Why not a bound on each live/simulated ratio, or on least connections'
// ratio divided by round robin's: on a loaded machine (and under -race)
// the rig adds tens of milliseconds of the scenario's time to every
// request, so both ratios drift with the load, and no fixed bound both
// allows that and still means something. The overhead is a time added to
// every request, not a factor, and it weighs more on least connections'
// shorter requests, so dividing one ratio by the other leaves a bias that
// grows with the load. Playing both at once makes load that comes and goes
// weigh on both alike. The comparison with the rig is not exact either:
// the rig's latency is added to the backends in the simulation, where
// least connections counts all of it in flight, while live some of it
// (the clients') is outside its counts; so the simulation with the rig
// sends a little less to the fastest backend than the proxy does, and its
// mean reads a few percent high as the load grows.
//
// At scale 0.1 the same overhead reads five times larger than at 0.5, and
// the algorithms that herd ask more of the rig than it serves (see
// below). Choose the scale by the question: 0.1 for a quick look at the
// shape (who herds, who black-holes a dead backend, what retries save),
// 0.5 or 1 for figures. lbsim -live prints the live tables and a table of
// live against simulated figures; Comparison computes it.
//
// # The load generator
//
// The users, the proxies and the backends share one process and the
// machine's cores, so the rig's own cost is part of every live figure.
// How it is kept from setting the pace, and where it does:
//
//   - Capacity. BenchmarkRig plays the steady profile (100 users, no think
//     time) against four backends that answer in 1 µs, at scale 1: what
//     the whole rig serves when nothing else holds it back (go test -run
//     '^$' -bench Rig -benchtime 1x ./bench/live/). A scenario asks, at
//     scale s, its users over their cycle, think time plus latency,
//     divided by s: the steady scenario at 0.1 asks about 2,900 requests/s
//     of real time when round robin spreads the users (a 35 ms cycle:
//     10 ms of think time and a mean of 25 ms), but up to 6,700 when an
//     algorithm sends nearly everything to the 5 ms backend, as lrt and
//     lrt-naive do; the burst scenario's 250 users ask two and a half
//     times as much. lbsim -live prints the bound before it starts ("up to
//     N requests/s of real time") and Calibrate measures what the rig
//     serves at it; keep it well below the rig's capacity, with -scale.
//   - Where the time goes: each backend's mean in flight over its arrival
//     rate (Little's law) gives its real service time, above the nominal
//     one because the backends' timers fire late (Go's timers wait in
//     whole milliseconds in epoll when the process is idle, and later when
//     it is busy); the clients' latency above the backends' is the proxy
//     and the clients. The late ms and proxy ms columns report both.
//     Least connections feels them more than round robin: the in-flight
//     counts it compares include the proxy's time, which weighs most on
//     the fastest backend, so it sends that backend less.
//   - Client-side timestamps, closed loop: each user waits for its answer
//     before it thinks, so a slow rig lowers RPS and raises latency
//     visibly rather than hiding them (no coordinated omission to
//     correct).
//   - Connections: every user keeps one keep-alive connection to its
//     proxy; the proxies keep up to max(256, peak users) idle connections
//     per backend (lbhttp.NewBase's default is 256), so no request pays a
//     handshake in steady state. No goroutine is started per request
//     beyond net/http's own.
//   - GOMAXPROCS is the machine's. lbsim -live sets GOGC to 400 unless the
//     environment sets it: allocation is the largest CPU cost after the
//     system calls (a CPU profile of BenchmarkRig shows it), and the
//     process's live heap is small, so with the default of 100 it collects
//     very often and the collector's pauses join the rig's overhead; 400
//     trades a larger heap goal for fewer collections.
package live
