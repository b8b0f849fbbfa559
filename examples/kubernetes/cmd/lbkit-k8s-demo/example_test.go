package main

import (
	"context"
	"fmt"
	"os"
)

// Without -service there is nothing to watch: one line says so, and the
// exit status is 2.
func Example_noService() {
	code := run(context.Background(), []string{"-namespace", "shop"}, os.Stdout, nil, nil)
	fmt.Println("exit status", code)
	// Output:
	// lbkit-k8s-demo: -service is required
	// exit status 2
}
