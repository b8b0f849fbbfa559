// Command lbsim answers "which algorithm for my backends?" in seconds: it
// plays load scenarios in virtual time against every lbkit algorithm and
// prints a table per scenario. With -live it plays them for real instead,
// through lbhttp's reverse proxy to HTTP backends on 127.0.0.1, and sets
// the live figures beside the simulated ones.
//
//	go run ./bench/cmd/lbsim                                   # every default scenario
//	go run ./bench/cmd/lbsim -scenarios steady -proxies 1,10   # a fleet of 10 balancers
//	go run ./bench/cmd/lbsim -backends 20ms:c=4,20ms:c=4,80ms:c=4 -users 60
//	go run ./bench/cmd/lbsim -html report.html                 # tables and charts
//	go run ./bench/cmd/lbsim -live -scenarios steady           # live, 18 s per algorithm
//	go run ./bench/cmd/lbsim -live -scale 0.5 -algos rr,leastconn -duration 1m
//
// See package github.com/lbkit/lbkit/bench/sim for the model, package
// github.com/lbkit/lbkit/bench/live for the live runs, and -help for the
// flags. Bad flags exit with status 2; an interrupt (Ctrl-C) stops the
// simulation or the live run with status 1.
package main
