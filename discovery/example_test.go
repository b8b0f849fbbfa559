package discovery_test

import (
	"fmt"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/discovery"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/rr"
)

// A source hands what it discovered to a Publisher: IDs are canonical, a
// draining endpoint stays drained while it finishes its requests, and a
// bad update changes nothing.
func Example() {
	lb, _ := health.New(rr.New(), health.Config{})
	defer lb.Close()
	pub, _ := discovery.New(lb, discovery.Config{})

	rep, err := pub.Publish([]discovery.Endpoint{{Addr: "10.0.0.1:080"}, {Addr: "[::ffff:10.0.0.2]:80", Weight: 2}})
	fmt.Println(rep.Healthy, err)

	rep, err = pub.Publish([]discovery.Endpoint{{Addr: "10.0.0.1:80"}, {Addr: "10.0.0.2:80", State: discovery.Draining}})
	fmt.Println(rep.Healthy, rep.Draining, err)

	_, err = pub.Publish([]discovery.Endpoint{{Addr: "10.0.0.1:80"}, {Addr: "10.0.0.3"}})
	fmt.Println(err)
	for _, s := range lb.View().Backends {
		fmt.Println(s.ID, s.State)
	}
	b, _ := lb.Pick(balancer.Request{})
	fmt.Println("picked", b.ID())
	// Output:
	// [10.0.0.1:80 10.0.0.2:80] <nil>
	// [10.0.0.1:80] [10.0.0.2:80] <nil>
	// discovery: endpoints refused: endpoint 1: balancer: bad address "10.0.0.3": not host:port
	// 10.0.0.1:80 up
	// 10.0.0.2:80 draining
	// picked 10.0.0.1:80
}
