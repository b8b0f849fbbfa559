package sticky_test

import (
	"fmt"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/rr"
	"github.com/lbkit/lbkit/sticky"
)

// A session pinned to a backend stays there while health keeps it, and is
// picked afresh once it is drained.
func Example() {
	st, err := sticky.New(rr.New())
	if err != nil {
		panic(err)
	}
	h, err := health.New(st, health.Config{})
	if err != nil {
		panic(err)
	}
	if err := h.Update(balancer.Endpoints("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80")); err != nil {
		panic(err)
	}
	req := balancer.Request{Prefer: "10.0.0.2:80"}
	for range 3 {
		b, _ := h.Pick(req)
		fmt.Println(b.ID())
		h.Done(b, balancer.Result{})
	}
	if err := h.Drain("10.0.0.2:80"); err != nil {
		panic(err)
	}
	b, _ := h.Pick(req)
	fmt.Println("drained, picked afresh:", b.ID() != "10.0.0.2:80")
	// Output:
	// 10.0.0.2:80
	// 10.0.0.2:80
	// 10.0.0.2:80
	// drained, picked afresh: true
}
