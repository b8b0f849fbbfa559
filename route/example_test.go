package route_test

import (
	"fmt"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/route"
	"github.com/lbkit/lbkit/rr"
)

// A canary named by the request, and the fallback when it is drained.
func Example() {
	lb, _ := route.New(func() balancer.Balancer { return rr.New() }, route.Config{Label: "track", Default: "stable"})
	h, _ := health.New(lb, health.Config{})
	defer h.Close()
	_ = h.Update([]balancer.Backend{
		balancer.NewEndpoint("10.0.0.1:8080", 1).WithLabels(map[string]string{"track": "stable"}),
		balancer.NewEndpoint("10.0.0.9:8080", 1).WithLabels(map[string]string{"track": "canary"}),
	})
	b, _ := h.Pick(balancer.Request{})
	fmt.Println("no route:", b.ID())
	b, _ = h.Pick(balancer.Request{Route: "canary"})
	fmt.Println("canary:", b.ID())

	_ = h.Drain("10.0.0.9:8080")
	b, err := h.Pick(balancer.Request{Route: "canary"})
	fmt.Println("canary drained:", b.ID(), err)
	// Output:
	// no route: 10.0.0.1:8080
	// canary: 10.0.0.9:8080
	// canary drained: 10.0.0.1:8080 <nil>
}
