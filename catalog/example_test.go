package catalog_test

import (
	"fmt"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/catalog"
)

// Algorithms drives comparisons: here, the first pick of each from a fresh
// set of one backend.
func ExampleAlgorithms() {
	for _, a := range catalog.Algorithms() {
		p := a.New()
		_ = p.Update(balancer.Endpoints("10.0.0.1:8080"))
		b, err := p.Pick(balancer.Request{Key: "192.0.2.1"})
		fmt.Println(a.Name, b.ID(), err)
	}
	// Output:
	// rr 10.0.0.1:8080 <nil>
	// wrr 10.0.0.1:8080 <nil>
	// leastconn 10.0.0.1:8080 <nil>
	// leastconn-p2c 10.0.0.1:8080 <nil>
	// iphash 10.0.0.1:8080 <nil>
	// ring 10.0.0.1:8080 <nil>
	// ring-bounded 10.0.0.1:8080 <nil>
	// maglev 10.0.0.1:8080 <nil>
	// lrt 10.0.0.1:8080 <nil>
	// lrt-naive 10.0.0.1:8080 <nil>
}
