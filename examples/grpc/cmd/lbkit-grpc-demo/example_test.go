package main

import "fmt"

// The hash policies need to be told which metadata entry holds the
// affinity key; a config without one is refused before anything starts
// (main prints this and exits with status 2).
func Example_badConfig() {
	_, err := parseFlags([]string{"-policy", "lbkit_maglev", "-config", "{}"})
	fmt.Println(err)
	// Output:
	// -config: lbpolicy: lbkit_maglev config: balancer: bad option: "key" is required (or "requestHashHeader", by gRFC A76's rules): name the metadata entry that holds the affinity key
}
