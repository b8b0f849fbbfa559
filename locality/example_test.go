package locality_test

import (
	"fmt"
	"log"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/locality"
)

// A caller in zone us-east-1a, with backends in three zones: while every
// zone is whole, all its requests stay in its zone. Health goes around
// the Balancer, which then learns every backend's health.
func Example() {
	l, err := locality.New(func() balancer.Balancer { return leastconn.New() }, locality.Config{Zone: "us-east-1a"})
	if err != nil {
		log.Fatal(err)
	}
	h, err := health.New(l, health.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()

	var bs []balancer.Backend
	for i, zone := range []string{"us-east-1a", "us-east-1b", "us-east-1c"} {
		for j := range 3 {
			addr := fmt.Sprintf("10.0.%d.%d:8080", i, j+1)
			bs = append(bs, balancer.NewEndpoint(addr, 1).At(balancer.Locality{Zone: zone}))
		}
	}
	if err := h.Update(bs); err != nil {
		log.Fatal(err)
	}
	for _, z := range l.View().Levels[0].Zones {
		fmt.Printf("%s %.0f%%\n", z.Zone, z.Share*100)
	}
	b, err := h.Pick(balancer.Request{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(balancer.LocalityOf(b).Zone)
	h.Done(b, balancer.Result{})
	// Output:
	// us-east-1a 100%
	// us-east-1b 0%
	// us-east-1c 0%
	// us-east-1a
}

// Envoy's priority levels: a primary tier and a fallback. With 6 of the
// primary's 10 backends healthy, 1.4 × 60% = 84% of the traffic stays and
// the rest spills to the fallback.
func Example_priorities() {
	var bs []balancer.Backend
	for i := range 10 {
		bs = append(bs, balancer.NewEndpoint(fmt.Sprintf("10.0.0.%d:8080", i+1), 1))
	}
	for i := range 10 {
		bs = append(bs, balancer.NewEndpoint(fmt.Sprintf("10.9.0.%d:8080", i+1), 1).At(balancer.Locality{Priority: 1}))
	}
	l, err := locality.New(func() balancer.Balancer { return leastconn.New() }, locality.Config{})
	if err != nil {
		log.Fatal(err)
	}
	healthy := make([]bool, len(bs))
	for i := range healthy {
		healthy[i] = i >= 4 // four of the primary's backends are down
	}
	if err := l.UpdateHealth(bs, healthy); err != nil { // health does this for you
		log.Fatal(err)
	}
	for _, lv := range l.View().Levels {
		fmt.Printf("priority %d: %d of %d healthy, %.0f%% of requests\n", lv.Priority, lv.Healthy, lv.Total, lv.Load*100)
	}
	// Output:
	// priority 0: 6 of 10 healthy, 84% of requests
	// priority 1: 10 of 10 healthy, 16% of requests
}
