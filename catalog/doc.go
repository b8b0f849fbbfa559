// Package catalog names lbkit's algorithms, each with its defaults, so
// that a program can offer them by name (a flag, a config file) and a
// comparison can run them all.
//
//	a, ok := catalog.Lookup("leastconn")
//	if !ok {
//		return fmt.Errorf("no algorithm %q", name)
//	}
//	lb, err := health.New(a.New(), health.Config{})
//
// Algorithms is what the ready proxy (examples/proxy) offers with -algo
// and what lbsim compares by default: rr, wrr, leastconn (scan below 16
// backends, two choices above), leastconn-p2c (two choices at every size),
// iphash, ring, ring-bounded (c = 1.25), maglev, lrt and lrt-naive (kept
// to show herding). LoadAware holds the pickers that need backends which
// send load reports or answer probes: wrr-reported, leastconn-reports and
// prequal. Lookup finds only the first list's names.
//
// Each Algorithm builds fresh pickers two ways: New with the algorithm's
// own randomness and clock, as a service runs it, and Sim with the
// caller's, for the simulator's virtual time (package bench/sim).
//
// The package holds no state: each call returns new values, and a picker
// from New is safe for concurrent use as its own package says.
package catalog
