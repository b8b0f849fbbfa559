package leastconn_test

import (
	"fmt"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/leastconn"
)

func Example() {
	// A fixed source makes ties repeatable; leave WithRand out in
	// production.
	p := leastconn.New(leastconn.WithRand(func() uint64 { return 0 }))
	if err := p.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080")); err != nil {
		panic(err)
	}
	a, _ := p.Pick(balancer.Request{}) // all idle: a tie
	b, _ := p.Pick(balancer.Request{}) // the two idle ones tie
	fmt.Println(a.ID(), b.ID())

	p.Done(a, balancer.Result{}) // a's request finished: a is idle again
	c, _ := p.Pick(balancer.Request{})
	d, _ := p.Pick(balancer.Request{})
	fmt.Println(c.ID(), d.ID())
	fmt.Println(p.InFlight("10.0.0.1:8080"), p.InFlight("10.0.0.2:8080"), p.InFlight("10.0.0.3:8080"))
	// Output:
	// 10.0.0.1:8080 10.0.0.2:8080
	// 10.0.0.1:8080 10.0.0.3:8080
	// 1 1 1
}

// With weights, in-flight counts follow them: a backend of weight 3 holds
// about three times the requests of one of weight 1.
func Example_weighted() {
	p := leastconn.New(leastconn.WithRand(func() uint64 { return 0 }))
	_ = p.Update([]balancer.Backend{
		balancer.NewEndpoint("small:8080", 1),
		balancer.NewEndpoint("large:8080", 3),
	})
	for range 12 {
		_, _ = p.Pick(balancer.Request{}) // held: no Done yet
	}
	fmt.Println("small", p.InFlight("small:8080"), "large", p.InFlight("large:8080"))
	// Output: small 3 large 9
}

// Counts are carried by ID: a backend that leaves the set and comes back
// keeps its count, and a Done that arrives while it is away still finds it.
func Example_update() {
	p := leastconn.New(leastconn.WithRand(func() uint64 { return 0 }))
	a, b := balancer.NewEndpoint("a:80", 1), balancer.NewEndpoint("b:80", 1)
	_ = p.Update([]balancer.Backend{a, b})
	x, _ := p.Pick(balancer.Request{})
	y, _ := p.Pick(balancer.Request{})
	fmt.Println(x.ID(), y.ID())

	_ = p.Update([]balancer.Backend{b}) // a leaves with a request in flight
	p.Done(x, balancer.Result{})        // ... which then finishes
	_ = p.Update([]balancer.Backend{a, b})
	fmt.Println(p.InFlight("a:80"), p.InFlight("b:80"))
	// Output:
	// a:80 b:80
	// 0 1
}

// A proxy finds Feedback once, and calls Done when each request finishes,
// with whatever it learned; leastconn needs only the call.
func Example_feedback() {
	var picker balancer.Balancer = leastconn.New()
	fb, _ := picker.(balancer.Feedback)
	_ = picker.Update(balancer.Endpoints("10.0.0.1:8080"))

	b, err := picker.Pick(balancer.Request{})
	if err != nil {
		return // balancer.ErrNoBackend: answer 502
	}
	// ... send the request to b ...
	fb.Done(b, balancer.Result{})
	fmt.Println(b.ID(), picker.(*leastconn.Picker).InFlight(b.ID()))
	// Output: 10.0.0.1:8080 0
}

// With WithReports, the backends' own load reports weigh in: b says it
// is at 30% and a at 90%, so b takes about three of this picker's
// requests to each of a's.
func ExampleWithReports() {
	p := leastconn.New(leastconn.WithReports(), leastconn.WithRand(func() uint64 { return 0 }))
	bs := balancer.Endpoints("a", "b")
	if err := p.Update(bs); err != nil {
		panic(err)
	}
	// Reports come with finished requests, through Done.
	p.Done(bs[0], balancer.Result{Load: balancer.Load{Application: 0.9}})
	p.Done(bs[1], balancer.Result{Load: balancer.Load{Application: 0.3}})
	for range 12 {
		if _, err := p.Pick(balancer.Request{}); err != nil { // held: no Done yet
			panic(err)
		}
	}
	fmt.Println(p.InFlight("a"), p.InFlight("b"))
	// Output:
	// 3 9
}
