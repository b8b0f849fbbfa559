// Package bench compares lbkit's algorithms side by side.
//
// catalog.Algorithms lists the configurations compared (package catalog,
// which the ready proxy uses too). Two comparisons use it:
//
//   - How they behave under load, the question that chooses an algorithm:
//     the scenario simulator, package bench/sim, and its command,
//     `go run ./bench/cmd/lbsim`. It builds each picker with
//     Algorithm.Sim, on the simulator's seeded random source and virtual
//     clock. Package bench/live plays the same scenarios for real, through
//     a reverse proxy on loopback (`lbsim -live`), to check the simulator.
//   - What a pick costs, below.
//
// # Selection cost
//
// BenchmarkPick runs the shared harness of package balancertest over
// every algorithm, through the balancer.Balancer interface as a proxy
// holding any picker would call it, for sets of 4, 64 and 1024 backends,
// serial and parallel. Sub-benchmarks are named
// algo=…/weights=…/n=…/mode=…, so benchstat can slice them:
//
//	go test -run '^$' -bench . -benchmem ./bench/ | tee new.txt
//	benchstat -col /algo -filter '/mode:serial' new.txt
//
// Each iteration is one Pick, followed by Done for pickers that implement
// balancer.Feedback (leastconn, consistent's bounded ring, lrt), since a
// proxy pays both per request. The keys are client addresses, so the hash
// pickers' figures include hashing (and, for iphash, parsing) the key.
//
// The pickers that weigh what backends say of their load, LoadAware
// (wrr-reported, leastconn-reports, prequal), run in the same harness
// beside the others: their Done gets a load report every time, and
// prequal's pool is kept full, so that each row costs the path it names.
// They are not in Algorithms, and so not in the proxy command's choices
// or lbsim's default run; the simulator feeds them reports and probes,
// and lbsim runs them with its load scenarios (-scenarios
// antagonist,hetero) or when named with -algos.
package bench
