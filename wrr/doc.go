// Package wrr is smooth weighted round robin: each backend gets a share of
// requests in proportion to its weight, and its turns are spread through
// the sequence rather than sent in bursts. The sequence is nginx's. Use it
// when backends differ in capacity, you know by how much, and requests cost
// about the same. With equal weights it is rr, turn for turn; when request
// costs or backend speeds vary, use leastconn or lrt (see Choosing below).
//
//	p := wrr.New()
//	err := p.Update(balancer.WeightedEndpoints(
//		balancer.Weighted{Addr: "10.0.0.1:8080", Weight: 5},
//		balancer.Weighted{Addr: "10.0.0.2:8080", Weight: 1},
//	))
//	if err != nil { ... }
//	b, err := p.Pick(balancer.Request{})
//	if err != nil { ... } // balancer.ErrNoBackend: the set is empty
//	// ... send the request to b.ID() ...
//
// What a caller must do:
//
//   - Done: nothing to call. A Picker does not implement balancer.Feedback
//     and learns nothing from finished requests, so a proxy that looks for
//     Feedback gets nil. Calling Done through a decorator (health, metrics)
//     is still right: they use it.
//   - Key: none. Request.Key and Attempt are ignored. On a retry, set Avoid
//     to the ID of the backend that failed: if the turn falls on it, Pick
//     returns the backend of the next turn that is not its (the same one
//     only in a set of one).
//   - Errors: wrr does not see them. nginx lowers a backend's effective
//     weight after a failure and lets it climb back; wrr leaves failures to
//     the health package, which hands it a new set.
//
// Package github.com/lbkit/lbkit/lbhttp wires a picker into
// net/http: a reverse proxy or client transport that retries a refused
// connection on another backend with Avoid set. Wrap the picker in
// github.com/lbkit/lbkit/health to keep dead and failing backends out of
// its set.
//
// When the backends can say how loaded they are, Reported takes the
// weights from their load reports instead, as gRPC's weighted_round_robin
// does (gRFC A58): weight = qps / (utilisation + eps/qps), recomputed every
// second off the request path, with the same smooth schedule:
//
//	p := wrr.NewReported()
//	if err := p.Start(context.Background()); err != nil { ... } // the weight loop, until Close; optional, see Reported.Done
//	defer p.Close()
//	// lbhttp's Transport passes each response's endpoint-load-metrics report
//	// to p.Done in Result.Load; backends send it through lbhttp.Reporter.
//
// A Reported implements balancer.Feedback: call Done for every pick with
// the Result, Load included. See Weights from load reports below. It
// waits for reports: a backend's weight counts only once it has reported
// for the blackout, 10 s (DefaultBlackout, A58's); until two backends have
// a weight that counts the schedule is round robin's, and a backend
// without one weighs the mean of the others. It
// pays where backends differ in capacity and stay so; a backend that
// slows down is felt a report window later.
//
// # Choosing
//
// Weights are a static guess at capacity: right when they follow it, no
// help when a backend slows down, and a weight above a backend's capacity
// saturates it (lbsim's capacity-limited scenarios show it). When the
// backends can report their load, Reported follows it instead; when their
// speeds change, leastconn and lrt learn from the requests themselves.
// wrr sees no errors: without health in front, a dead backend keeps its
// share. lbsim's tables (docs/results.md) set wrr, weighted 6:3:2:1, and
// Reported beside every other algorithm.
//
// # Algorithm
//
// nginx's ngx_http_upstream_get_peer (src/http/ngx_http_upstream_round_robin.c)
// keeps a current weight per backend. For each request it adds every
// backend's weight to its current weight, picks the backend with the
// largest current weight (the first one on ties), and takes the sum of all
// weights from the one picked. For weights a=5, b=1, c=1 (sum 7):
//
//	step  current before  pick  current after
//	1      5   1   1       a     −2   1   1
//	2      3   2   2       a     −4   2   2
//	3      1   3   3       b      1  −4   3
//	4      6  −3   4       a     −1  −3   4
//	5      4  −2   5       c      4  −2  −2
//	6      9  −1  −1       a      2  −1  −1
//	7      7   0   0       a      0   0   0
//
// After as many steps as the weights sum to, every current weight is back
// at zero and the sequence, a a b a c a a, repeats. nginx scans every
// backend per request, O(n), and so do the usual Go ports.
// wrr instead computes one period of the sequence when the set changes, as
// a schedule of backend indexes, and Pick reads the slot that one shared
// atomic counter points at, modulo the period: O(1) whatever the number of
// backends. The counter starts at a random value (WithRand), so that a
// fleet of proxies started together does not send its first requests to
// the same backend, and it carries on across updates.
//
// With equal weights the period is one turn each in set order, so wrr and
// rr pick the same sequence from the same start, including what Avoid does.
//
// # Avoid
//
// A request whose Avoid names the backend whose turn it is gets the backend
// of the next turn that is not that one's, however long its run: each slot
// of the schedule carries that second answer, found when the schedule is
// built. The counter moves one step either way, so the next request keeps
// its own turn.
//
// # Smoothness
//
// A backend of weight w among others weighing R in all must somewhere be
// picked ⌈w/R⌉ times in a row (R turns cannot split w turns into shorter
// runs). With two backends nginx's longest run is exactly that; with more
// it stayed within twice that over 2,500 random sets (TestLongestRun; not
// proven), and the +1 one might hope for does not hold: light backends can
// bunch, as in 763,6,17, whose first backend runs to 39 where 34 would do.
// wrr keeps nginx's sequence, runs included.
//
// # Schedule size and accuracy
//
// The weights are first divided by their greatest common divisor (this
// does not change the sequence; 10,2,2 is 5,1,1), so the period is the sum
// of the reduced weights. That sum is bounded by the schedule's capacity
// C: DefaultMaxSchedule = 2¹⁸ slots unless WithMaxSchedule says otherwise,
// and at least 2n. A slot is eight bytes (the backend, and the one to take
// when it is avoided), so by default the schedule takes at most 2 MiB.
// Weights that sum to more are scaled to fill exactly C slots, and the
// schedule is nginx's sequence for the scaled weights:
//
//  1. Backends whose fair part of C slots is below one slot get one, so
//     that none is starved; lightest first, since the slots they take
//     leave less for the rest (see slotCounts). Call their number k and
//     their weight W_k.
//  2. The other C−k slots are shared by largest remainders: each backend
//     gets the floor or the ceiling of its quota q = w·(C−k)/(W−W_k), and
//     q ≥ 1.
//
// Bound: every backend's share of the schedule is within (k+1)/C of its
// weight share w/W.
//
// Proof. A backend held to one slot was held because w·(C−j) < W−W_j ≤ W,
// where j < k is the number of lighter ones held before it; so
// w/W < 1/(C−k), and its error e = 1/C − w/W lies in (−k/(C(C−k)), 1/C).
// Since k ≤ n ≤ C/2, |e| < 1/C. Let δ = k/C − W_k/W, the sum of those
// errors; |δ| < k/C. Any other backend has slots = q + r with |r| < 1, and
//
//	slots/C − w/W = r/C + (w/(W−W_k))·((C−k)/C − (W−W_k)/W) = r/C − p·δ
//
// with p = w/(W−W_k) ≤ 1, so its error is below 1/C + k/C. ∎
//
// TestScaledShareBound checks the bound on 1000 sets built to need
// scaling, and finds it close to tight. k is 0 unless some weight share is
// below about 1/C. TestMemoryBound holds 1000 backends with random weights
// up to 10000 (sum about 5·10⁶, so 2¹⁸ slots) to the bound and to the
// schedule's size. A larger capacity is more exact and costs memory and
// Update time in proportion.
//
// # Building the schedule
//
// Simulating nginx costs O(n) a slot: 2.7·10⁸ current-weight updates for
// 1024 backends and 2¹⁸ slots. For sets above 32 backends wrr computes the same
// sequence with a kinetic tournament (see tournament in schedule.go): a
// tree whose nodes hold their subtree's leader and the step at which a
// faster-growing rival overtakes it, with leaves sorted by weight so that
// those overtakings are rare. It does about log₂ n node updates a slot,
// against nginx's n; BenchmarkBuild sets the two beside each other. Both
// are checked against nginx's loop on random sets and by a fuzz test
// (TestBuildMatchesNginx, FuzzBuild).
//
// # Cost
//
// Pick: one atomic add, one division and two dependent loads, no lock, no
// allocation, whatever the number of backends or the weights; small enough
// for the compiler to inline when called on a *Picker. BenchmarkPick
// measures it so, BenchmarkPickInterface through the balancer.Balancer
// interface, both serial and parallel, with weights 1 to 100. Under
// parallel load every pick writes the one counter, so its cache line moves
// between cores, as for rr. The Picker is laid out in whole cache lines, so
// that the counter's traffic, and whatever the caller allocated next to the
// Picker, never evict the snapshot pointer that every Pick reads (see
// Picker).
//
// Update: it takes the mutex that serialises Updates, validates the set
// with balancer.NewSet, which reads each weight once (the weight validated
// is the weight scheduled), then spends O(n log n) on the slot counts and
// O(P·min(n, log n)) to build a period of P slots, with 8·P bytes kept
// (P ≤ C; with weights 1 to 100 over 1024 backends P is about 52000).
// BenchmarkUpdate measures it at 64 and 1024 backends and at several
// capacities. Update is meant for set changes, not for every request.
//
// # Weights from load reports
//
// Reported follows gRFC A58 and grpc-go's balancer/weightedroundrobin. A
// backend's weight is qps / (utilization + error_penalty × eps/qps) from
// its latest report (Result.Load: RPS, EPS, and Application utilisation,
// or CPU when that is zero); a report without a positive rps and
// utilisation is ignored. A weight counts only once the backend has
// reported for the blackout (DefaultBlackout, 10 s) without a gap as long
// as the expiry (DefaultReportExpiry, 3 min), so that the first reports of a
// backend that has just joined, or come back, do not swing the schedule;
// a report older than the expiry stops counting, and the blackout starts
// again when reports resume. Every weight period (DefaultWeightPeriod,
// 1 s) the weights are recomputed; fewer than two usable weights give
// round robin; every weight is bounded, as in gRPC's C++
// static_stride_scheduler.cc, to at most 10 times the mean of the usable
// weights but the largest (C++ takes the mean of all, which cannot bind in
// a set of ten or fewer) and at least a hundredth of the mean, so that one
// report of a near-zero utilisation takes at most 10/(n+9) of the picks
// among n (TestReportedExtremeReportBounded); a backend without a usable
// weight weighs the mean of the bounded weights; and the ceiling is
// scaled to 1000 (gRPC scales to 65535 for its stride scheduler; a
// thousandth is finer than reports are exact), dividing first, so that
// weights up to the largest float keep their order. The
// schedule is rebuilt and published, as by Update, only when the integer
// weights changed. Static weights are validated and not used.
//
// Why qps over utilisation: a backend that serves qps requests a second
// at utilisation u costs u/qps of itself per request, so the weight is
// what it can serve for the same utilisation as the others. With
// lbhttp.Reporter's Capacity, u is the mean number in flight over the
// capacity, and by Little's law the weight is capacity / latency. Against
// leastconn it sees load that no proxy sent: a noisy neighbour's CPU, the
// traffic of other proxies. Its weakness is the reports' age: a weight
// is up to a window and a period old, so a sudden slowdown is felt later
// than leastconn's in-flight counts feel it.
//
// Done is where reports come in: a map lookup, a clock read and three
// atomic stores, no lock and no allocation (TestReportedDoneAllocs).
// Without Start, the first usable report starts a goroutine that
// recomputes every period and ends when no backend has reported within
// the expiry; Start runs one for good, until its context ends or Close.
// Refresh recomputes on demand, for simulations on a clock of their own
// (WithClock). A recomputation costs O(n) and, when the weights changed,
// a schedule build, O(P·min(n, log n)) as for Update (at most 2¹⁸ slots;
// WithMaxSchedule lowers it), once a period, off the request path
// (BenchmarkRefresh, every weight changed, at 4, 64 and 1024 backends).
// BenchmarkReportedDone measures Done with a report, serial and
// parallel; most of it is the clock read.
//
// # Reported in the simulator
//
// lbsim's load scenarios (go run ./bench/cmd/lbsim -scenarios
// antagonist,hetero -proxies 1,10; package bench/sim, "Load reports and
// probes") run Reported as wrr-reported against backends that report
// their busy slots over their slots and their rate over lbhttp.Reporter's
// window; docs/results.md has the tables. Two mechanisms show there.
// Where capacities differ and stay put (hetero), the weights, qps over
// utilisation, come out as the slots over the latency, and behind one
// proxy the smooth turns queue nothing. Where a backend loses capacity to
// something the proxies cannot see (antagonist), the weights catch up
// only over the report window, while lrt sees the slower answers at once;
// delayed reports (-report-delay) make that lag longer.
//
// # Concurrency
//
// Pick and Update are safe for concurrent use. Update builds the schedule
// aside and publishes it with one atomic store; a Pick that starts after
// Update returns sees the new set. Calls to Update are serialised,
// validation included, by a mutex that Pick never takes.
//
// # Mapping
//
// None: weighted round robin has no affinity. Every process computes the
// same schedule for the same set, but starts at a random place in it.
package wrr
