package main

import (
	"context"
	"fmt"
	"io"
	"os"
)

// Three rounds of nginx and lbkit's proxy, as bench/sidebyside/run.sh
// appends them with run -tsv, reported as medians, with CPU per request
// and requests per second as ratios of the first row's (nginx's): the
// median of the three rounds' ratios.
func Example_report() {
	run(context.Background(), []string{"report", "testdata/runs.tsv"}, os.Stdout, io.Discard)
	// Output:
	// run       process   runs  requests/s  ×first  p50 ms  p99 ms  CPU µs/req  ×first  errors
	// nginx     nginx     3     20000       1.00    2.90    5.10    41.0        1.00    0
	// lbkit-rr  lbkit-rr  3     14815       0.73    4.05    7.80    82.0        2.00    0
}

// A bad command line gets a message and exit status 2.
func Example_badFlag() {
	code := run(context.Background(), []string{"run", "-url", "http://127.0.0.1:1/", "-c", "0"}, io.Discard, os.Stdout)
	fmt.Println("exit status", code)
	// Output:
	// lbload: run: -n 100000 and -c 0 must be positive, -warmup 5000 not negative
	// usage:
	//   lbload backends -listen host:port,...      serve HTTP backends that answer "ok"
	//   lbload proxy -listen host:port -backends host:port,... [-tuned]   a bare ReverseProxy, in turn
	//   lbload run -url URL [-n N] [-c C] [-warmup W] [-pid name=PID ...] [-label L] [-tsv FILE]
	//   lbload report FILE                         the lines -tsv appended, as a table of ratios
	// exit status 2
}
