// Package leastconn is least connections: each request goes to the backend
// with the fewest requests in flight, relative to its weight. Pick counts
// the request on the backend it returns and Done counts it off, so the
// picker sees where work is piling up and sends new work elsewhere. Use it
// when request costs vary, or backends differ in speed in ways weights do
// not capture: a slow backend stops getting requests as soon as it holds
// more than the others, where round robin keeps feeding it its share.
//
//	p := leastconn.New()
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
//   - Done: a Picker implements balancer.Feedback. Call Done exactly once
//     per Pick, when the request has finished: for HTTP when the response
//     body has been read to the end or closed, not when the headers arrive,
//     or a slow or streamed body stops counting while it still loads the
//     backend. Also when the request failed or was given up on. A Pick
//     without its Done makes the backend look busier than it is for good.
//   - Key: none. Request.Key and Attempt are ignored. On a retry, set Avoid
//     to the ID of the backend that failed: Pick never returns it when the
//     set has another backend.
//   - Errors: leastconn only counts. The Result's latency and error teach
//     it nothing, so an abandoned request (balancer.ErrAbandoned), a failure
//     and Result{} all just leave the in-flight count. That makes a dead
//     backend dangerous: a refused connection finishes at once, so the dead
//     backend always looks idle and draws most requests, a black hole (see
//     Choosing). Always put health in front.
//
// Package github.com/lbkit/lbkit/lbhttp does all of this for
// net/http: a reverse proxy or client transport that calls Done when the
// body ends and retries with Avoid set. Wrap the picker in
// github.com/lbkit/lbkit/health to keep dead and failing backends out of
// its set.
//
// When the backends report their load (an ORCA endpoint-load-metrics
// header through lbhttp, or gRPC's per-call ORCA trailer), WithReports
// weighs it: two choices, and of the two the lower reported utilisation ×
// (this picker's requests in flight + 1), in-flight counts alone for a
// backend without a report. See Load reports below.
//
//	p := leastconn.New(leastconn.WithReports())
//
// Near capacity a busy-slots utilisation reads 1 for a full backend and a
// flooded one alike, so the reports help most well below capacity (see
// Load reports).
//
// # Choosing
//
// leastconn evens out requests in flight, which serves more than the
// pickers that ignore load whenever backends differ in speed: a slow
// backend stops getting requests as soon as it holds more than the
// others. lrt goes further and keeps more in flight on the fastest
// backends, by their latency; lrt's naive mode herds onto the fastest
// one, which pays only while capacity is unlimited. leastconn-p2c (two
// choices at every size) trades some of the scan's balance for a cost
// that does not grow with the set (see Scan or two choices).
//
// Without health, a dead backend is a black hole: every refused request
// finishes at once and leaves the dead backend the least loaded, so it
// draws most requests. With health's active checks and passive ejection
// in front, it is taken out. lbsim's tables (docs/results.md; go run
// ./bench/cmd/lbsim, scenarios steady, steady-cap and failure) set these
// side by side.
//
// # Algorithm
//
// A backend's load is 0 when it is idle and (in-flight+1)/weight otherwise,
// and Pick takes the least loaded. The +1 makes the comparison about the
// load the backend would have with this request, the time the request
// would take on a backend that shares a capacity of weight among its
// requests: a weight-1 backend holding 1 request (load 2) loses to a
// weight-10 backend holding 10 (load 1.1). Idle backends count as 0, not
// 1/weight, so that under light load every backend gets requests instead
// of the heaviest one taking them all. This is HAProxy's leastconn key
// (src/lb_fwlc.c: inflight ? (inflight+1)·SRV_EWGHT_MAX/eweight : 0); nginx
// (src/http/modules/ngx_http_upstream_least_conn_module.c) compares
// in-flight/weight, which ties the two backends above. Both keep in-flight
// proportional to weight: with weights 1, 2, 3, 4 and 100 requests always
// in flight, TestSimulationWeighted holds the counts at 10, 20, 30, 40 to
// within one request per unit of weight at every pick.
//
// Loads are compared by cross-multiplying, a·wb < b·wa, never by dividing.
// Weights are at most balancer.MaxWeight (< 2²⁰), so the products fit in 64
// bits for any in-flight count below 2⁴³. When every weight is equal the
// picker sets them all to 1 and the comparison is of counts alone.
//
// Ties are broken at random, in proportion to weight: four idle backends
// of equal weight get a quarter of the requests each, and idle backends of
// weights 1 and 3 a quarter and three quarters, as nginx's weighted round
// robin among ties would give (TestFairTies). A random start offset would
// not be fair: with loads 0, 0, 1, 1 it takes the first idle backend three
// times in four.
//
// # Scan or two choices
//
// Pick selects in one of two ways:
//
//   - Scan: compare every backend, take the least loaded. Exact, O(n). A
//     second pass, only when the first met a tie, draws among the tied.
//   - Choices (Mitzenmacher, "The Power of Two Choices in Randomized Load
//     Balancing", IEEE TPDS 2001): draw k distinct candidates at random,
//     take the least loaded of them. O(k), whatever n (but for one case:
//     when the backend to avoid holds nearly all of a weighted set's
//     weight, the draws keep landing on it and Pick falls back to a scan,
//     O(n)). With k = 2 and n
//     requests on n backends the busiest holds about ln ln n / ln 2,
//     against ln n / ln ln n with one random choice; with many more
//     requests it stays ln ln n / ln 2 + O(1) above the mean (Berenbrink
//     et al., "Balanced allocations: the heavily loaded case", 2006), where
//     one random choice drifts with the square root of the load. More
//     choices improve that only by a constant factor. Candidates are drawn
//     uniformly when weights are equal and in proportion to weight
//     otherwise (Walker's alias method, built at Update, O(1) a draw):
//     drawn uniformly, a backend would be a candidate in at most k/n of the
//     picks whatever its weight, and a heavy one could not get its share.
//     gRPC's least_request
//     (balancer/leastrequest, gRFC A48) is this with uniform draws and no
//     weights, k from 2 to 10.
//
// By default New scans sets of fewer than ScanBelow (16) backends and uses
// two choices from 16 on; WithScan and WithChoices force one way at every
// size. WithChoices(k) takes k from 2 to MaxChoices (10); another k is a
// bad option, whose error every Update returns (see balancer,
// "Options"). A set of k backends or fewer is scanned, since drawing all
// of them is a scan.
//
// The threshold comes from two sets of benchmarks. BenchmarkCrossover
// times Pick+Done both ways at 2 to 64 backends, idle (every scan meets
// ties) and loaded: two choices cost the same at every size, while the
// scan grows by a few nanoseconds a backend, and they cross at about 8
// backends. The threshold sits above the crossover, at 16, for quality:
// below it the scan costs a small multiple of two choices, while two
// choices, which draw each backend as a candidate in at most 2/n of the
// picks, cannot give a fast backend the share it needs to stay as busy as
// the slow ones. BenchmarkChoicesThroughput plays the study's mix
// (backends from 50 to 500 ms, closed-loop users) at 4 to 64 backends and
// reports what two choices serve against the scan, and BenchmarkBalance
// how far the busiest backend sits above the mean; above 16 the scan's
// cost keeps growing, and on machines with many cores its reads of every
// counter also contend with the other cores' writes, which two choices
// avoid. Sets of a few dozen backends of very different speeds may still
// prefer WithScan; weights that follow capacity lift the 2/n cap.
//
// Request.Avoid is never returned when the set has another backend: the
// scan skips it, and the choices draw a replacement for it.
//
// # Load reports
//
// In-flight counts see only this picker's requests. A backend knows more:
// the traffic every other proxy sends it, a neighbour taking its CPU, its
// queue. WithReports reads what it says (balancer.Result.Load, passed to
// Done: application_utilization, or cpu_utilization when that is zero;
// WithReportMetric for a named metric) and compares two candidates by
//
//	cost = reported utilisation × (in flight + 1)
//
// with the ratio of the two utilisations counted as at most 10 to 1.
//
// The report says how loaded the backend is from all its traffic; the
// factor in flight + 1 adds what this picker has sent it since, so that
// between two reports one proxy does not send everything to the backend
// that reported least (the same reasoning as lrt's latency × (in flight +
// 1)). Held requests then split in inverse proportion to the reported
// utilisation: with 0.9 and 0.3 reported, about three of this picker's
// requests to one (TestReportsWeighUtilisation). The bound of 10 to 1
// (gRPC's kMaxRatio, wrr's Reported's bound against the mean) keeps a
// backend that reports nearly nothing from drawing every request until
// its next report, and one that reports a huge utilisation from being
// starved: beside three at 0.5, a report of 0.0001 holds at most 10/13
// of the requests, one of 1e300 about 1/31 (TestReportsExtremeBounded).
//
// A candidate with no report, or one older than DefaultReportExpiry
// (10 s; WithReportExpiry), makes its pair compare in-flight counts for
// weight, the rule without reports (TestReportsFallBackToInFlight). So
// a backend that sends no reports is balanced as by plain leastconn, and
// one that reported itself busy and has been sent nothing since is tried
// again once its report is stale. Pick reads no clock: reports are aged
// against the time of the latest report Done took.
//
// WithReports uses two choices at every size, not the scan below 16: a
// scan would send every request of every proxy that saw the same reports
// to the one backend that reported least, and random pairs are what keep a
// fleet from herding on stale reports. WithChoices(k) draws k; WithScan
// compares all, from a random starting point. Weights still draw the
// candidates (in proportion to weight) and weigh the in-flight
// comparison; the reported comparison is unweighted, since a report
// already says how loaded the backend is.
//
// # Load reports in the simulator
//
// lbsim's load scenarios (go run ./bench/cmd/lbsim -scenarios
// antagonist,hetero -proxies 1,10; package bench/sim, "Load reports and
// probes") run WithReports as leastconn-reports, against backends that
// report their busy slots over their slots over lbhttp.Reporter's window;
// docs/results.md has the tables. Near capacity such a utilisation reads
// 1 for a backend with no queue and for one with a long queue alike, so
// the reports no longer tell the backends apart and the pairs fall back,
// in effect, on this picker's own counts, where lrt's latencies still
// show the queue. Use WithReports where backends run well below capacity
// and their load comes from elsewhere; near capacity compare lrt, and
// wrr's Reported for capacities that differ.
//
// # Cost
//
// Pick: one random number from the WithRand source (none for a scan that
// meets no tie), n atomic loads for a scan or k for choices, one atomic
// add; no lock, no allocation; with reports, each candidate's report
// (one more cache line) and a load of the picker's report time. Done: one
// States.Lookup (a map read by ID) and one atomic compare-and-swap; with a
// report, a clock read and three atomic stores more. Each backend's state
// is two cache lines: the in-flight count and the report. Pick+Done with
// two choices costs the same at 4 and at 1024 backends (BenchmarkPickDone,
// select=p2c); most of it is the floor every in-flight picker
// on balancer's shared state pays (one math/rand/v2 number, one lookup by
// ID, Inc and Dec: BenchmarkFloor). gRPC's least_request, for comparison,
// allocates three times per pick.
//
// Update: O(n) and a few allocations (the validated copy from
// balancer.NewSet, entries, the registry's maps, the alias table for a
// weighted set that uses choices); it never blocks Pick or Done.
//
// # Concurrency
//
// Pick, Done, Update and InFlight are safe for concurrent use. Pick and
// Done read the published set through an atomic pointer; Update builds a
// new one under a mutex that only Update takes, and takes it before
// validating, so calls to Update are serialised, validation included. Each
// weight is read once (balancer.NewSet): the weight validated is the weight
// used.
//
// Reading the counts and incrementing the chosen one are not one atomic
// step, so two concurrent picks can both see the same backend as least
// loaded and both take it, leaving it one request above the others. That
// is accepted: the error is at most one request per pick running at the
// same moment, the next pick sees the raised count and corrects it, and
// closing the gap would take a lock or a compare-and-swap loop that
// serialises every pick on one cache line, costing all requests more than
// the occasional extra request costs one backend. (nginx and HAProxy take
// a lock around the choice; nginx without a shared zone instead keeps
// separate counts in each worker process, an error of the same kind and
// larger.)
//
// In-flight counts are kept per backend ID in a balancer.Registry and
// carried across updates: a backend that stays, or leaves and comes back,
// keeps its count, and a Done for a request picked before its backend left
// still finds the retired counter and counts it off, never touching
// another backend's count. The registry keeps a removed backend's counter
// for as long as it counts requests (balancer.Busy), so that Done always
// finds it. A count never goes below zero.
//
// # Mapping
//
// None: least connections has no affinity, and picks depend on the load
// each process sees and on its random source.
package leastconn
