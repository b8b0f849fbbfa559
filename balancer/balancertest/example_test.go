package balancertest_test

import (
	"fmt"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/rr"
)

// In a test, call balancertest.Run(t, newBalancer). Test returns the same
// findings as an error.
func ExampleTest() {
	err := balancertest.Test(func() balancer.Balancer { return rr.New() })
	fmt.Println("round robin conforms:", err == nil)
	// Output: round robin conforms: true
}
