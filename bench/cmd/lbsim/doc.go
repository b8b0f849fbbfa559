// Command lbsim answers "which algorithm for my backends?" in seconds: it
// plays load scenarios in virtual time against every lbkit algorithm,
// prints a table per scenario with its verdict (most throughput, lowest
// p99, fewest errors, the trade-off), and ends with a summary: the
// algorithm to use for these backends, why, and the runner-up. With -live
// it plays them for real too, through lbhttp's reverse proxy to HTTP
// backends on 127.0.0.1, and sets the live figures beside the simulated
// ones.
//
//	go run ./bench/cmd/lbsim                                   # every default scenario
//	go run ./bench/cmd/lbsim -scenarios steady -proxies 1,10   # a fleet of 10 balancers
//	go run ./bench/cmd/lbsim -backends 20ms:c=4,20ms:c=4,80ms:c=4 -users 60
//	go run ./bench/cmd/lbsim -backends-file latencies.csv      # backend,latency_ms per line
//	go run ./bench/cmd/lbsim -backends-file access.log -log-format '$remote_addr ... $upstream_addr $upstream_response_time'
//	go run ./bench/cmd/lbsim -html report.html                 # tables, verdicts and charts
//	go run ./bench/cmd/lbsim -json out.json -csv out.csv       # every figure, for other tools
//	go run ./bench/cmd/lbsim -scenarios zones,fleet            # zone-aware routing and subsets, by name
//	go run ./bench/cmd/lbsim -live -scenarios steady           # live, 18 s per algorithm
//	go run ./bench/cmd/lbsim -live -scale 0.5 -algos rr,leastconn -duration 1m
//	go run ./bench/cmd/lbsim -scenarios antagonist,hetero -proxies 1,10   # are load reports worth it?
//	go run ./bench/cmd/lbsim -scenarios stall,storm,tail       # timeouts, the retry budget, hedging
//	go run ./bench/cmd/lbsim -scenarios flaky,canary           # a backend failing 30%; a 5% canary 3× slower
//
// The load scenarios (antagonist-70, antagonist-95, hetero-70,
// hetero-95; antagonist and hetero name both of theirs) run only when
// asked for, and then with the pickers that weigh load reports and probes
// too (wrr-reported, leastconn-reports, prequal), which -algos can also
// name elsewhere. They are kept out of the default run, which replays the
// study: their question, whether the backends' own reports are worth
// their cost, is asked of a fleet (-proxies 10), which the default does
// not run, and with both fleet sizes they add 104 runs, whose reports
// and probes cost more per request. -report-delay ages every report (the
// backend's state that long before) and -probe-rtt sets a probe's round
// trip; package bench/sim ("Load reports and probes") says how backends
// report and answer.
//
// The fleet scenarios, zones (locality against zone-blind routing) and
// fleet (subsets of 20 against all-to-all), run only when named: each
// brings its own backends and proxies (10 and 100), which -backends and
// -proxies do not change, and they take an order of magnitude more CPU
// time than the default run (package bench/sim, "Fleets" and "Cost").
//
// The slow scenarios (stall, storm, tail: a backend that accepts and never
// answers, a storm of 503s from every backend, a heavy tail on each) run
// only when named too, over -backends when given, each under its own
// variants: lbhttp before it had timeouts (active+passive+retry), its
// defaults (+timeout+budget), and hedging; -variants takes timeout,
// budget and hedge, the last two with retry. They are about what the
// proxy does more than which algorithm, and they would add 100 runs to
// the default run's 120. Their tables add the attempts per request, the
// longest wait and the 99.9th percentile. Two more ask what a failure
// rate and a canary cost: flaky (the first backend answers 30% of its
// requests with a fast 503; under the bare picker, health without
// retries, retries and lbhttp's defaults) and canary (four 50 ms
// backends and a canary three times slower: in the pool, behind package
// route sent nothing, and sent 5% of the requests; -variants takes route
// and canary, the second with the first). -backends takes fail=30% and
// track=canary for backends of your own.
//
// docs/results.md is lbsim's output for the study's scenarios behind 1
// and 10 proxies, the load, slow and fleet scenarios, at seed 1;
// TestResultsFile regenerates it and fails when the output changes
// (go test ./bench/cmd/lbsim -run TestResultsFile -write rewrites it).
//
// -json and -csv are described in package bench/sim ("Machine-readable
// output"). Memory stays bounded whatever the number of users; runs that
// would simulate more than -max-requests requests (2 billion by default)
// are refused before they start, with the estimate. -live measures
// the rig's own overhead first, refuses a scale at which it is a large
// part of the backends' latencies and warns when live figures cannot be
// trusted (package bench/live). Progress is one line redrawn on a
// terminal, and a plain line every 10 s elsewhere.
//
// See package github.com/lbkit/lbkit/bench/sim for the model, package
// github.com/lbkit/lbkit/bench/live for the live runs, and -help for the
// flags. Bad flags exit with status 2; an interrupt (Ctrl-C) stops the
// simulation or the live run with status 1.
package main
