package main

import (
	"context"
	"fmt"
	"os"
)

// A bad flag gets one line saying what is wrong, and exit status 2.
func Example_badFlag() {
	code := run(context.Background(), []string{"-backends", "10.0.0.1:8080,10.0.0.2:8080=0"}, os.Stdout)
	fmt.Println("exit status", code)
	// Output:
	// lbkit-metrics-proxy: -backends: "10.0.0.2:8080=0": weight "0" is not a whole number from 1 to 1000000
	// Run lbkit-metrics-proxy -h for the flags.
	// exit status 2
}
