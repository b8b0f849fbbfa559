package main

import (
	"context"
	"fmt"
	"io"
	"os"
)

// Three algorithms in the steady scenario, shortened to 30 s of virtual
// time: round robin gives each backend a quarter whatever its speed, least
// connections favours the fast ones, and lrt herds onto the fastest. The
// verdict under the table and the summary are computed from the figures.
// The same seed prints the same bytes on every run (progress goes to
// stderr).
func Example() {
	run(context.Background(), []string{"-scenarios", "steady", "-algos", "rr,leastconn,lrt", "-duration", "30s", "-seed", "1"}, os.Stdout, io.Discard)
	// Output:
	// steady, 1 proxy: 100 users for 30s, think 100ms
	//   backends 50ms:w=6,150ms:w=3,300ms:w=2,500ms:w=1
	//   per backend (share of attempts, mean and peak in flight): 50ms/150ms/300ms/500ms
	// algorithm    RPS  mean ms  p50 ms  p95 ms  p99 ms  errors      share %            in flight         peak
	// rr         284.9    249.0   150.0   500.0   500.0       0  25/25/25/25   3.6/10.7/21.4/35.6  13/25/35/49
	// leastconn  425.9    134.1    50.0   500.0   500.0       0   59/22/12/7  12.5/14.3/14.9/15.6  22/22/22/22
	// lrt        579.3     72.3    50.0   150.0   500.0       0    85/11/3/1     24.8/9.4/4.8/3.1  39/18/18/17
	//   most throughput: lrt, 579.3 RPS (next leastconn, 425.9 RPS)
	//   lowest p99: all 3, 500.0 ms
	//   fewest errors: all 3, 0
	//   trade-off: lrt serves 36% more than leastconn with the same p99
	//
	// summary, 1 proxy, over 1 scenario (steady):
	//   use lrt: the best by every ranked figure in every scenario
	//   runner-up leastconn: at worst (steady) 74% of the most throughput
	//   rule: in each scenario an algorithm scores the least of its RPS ÷ the most, √(lowest p99 ÷ its p99), (1 − its error share) ÷ (1 − the fewest), and, where backends have a capacity and one takes more than halfway from its share of it to all, (1 − that backend's share) ÷ (1 − that bound) (herding); the pick is the algorithm whose worst scenario scores best
}

// A bad flag gets a clear message on stderr and exit status 2.
func Example_badFlag() {
	code := run(context.Background(), []string{"-backends", "50ms,fast"}, io.Discard, os.Stdout)
	fmt.Println("exit status", code)
	// Output:
	// lbsim: sim: bad scenario: backend 2 "fast": latency: time: invalid duration "fast"
	// run 'lbsim -help' for the flags
	// exit status 2
}
