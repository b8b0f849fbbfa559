package wrr_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/wrr"
)

// Weights 5, 1 and 1 give nginx's smooth sequence: a's five turns are
// spread around b's and c's, not sent in one burst.
func Example() {
	// A fixed start makes the output repeatable; leave WithRand out in
	// production so that proxies start at different places in the schedule.
	p := wrr.New(wrr.WithRand(func() uint64 { return 0 }))
	err := p.Update([]balancer.Backend{
		balancer.NewEndpoint("a", 5),
		balancer.NewEndpoint("b", 1),
		balancer.NewEndpoint("c", 1),
	})
	if err != nil {
		panic(err)
	}
	for range 2 {
		var period []string
		for range 7 {
			b, _ := p.Pick(balancer.Request{})
			period = append(period, b.ID())
		}
		fmt.Println(strings.Join(period, " "))
	}
	// Output:
	// a a b a c a a
	// a a b a c a a
}

// A retry names the backend that failed in Avoid; the pick whose turn falls
// on it takes the next turn's backend instead.
func ExamplePicker_Pick_retry() {
	p := wrr.New(wrr.WithRand(func() uint64 { return 0 }))
	_ = p.Update([]balancer.Backend{
		balancer.NewEndpoint("10.0.0.1:8080", 2),
		balancer.NewEndpoint("10.0.0.2:8080", 1),
	})
	// The turns are 1 2 1; avoiding 2 turns its turn into 1's.
	for range 3 {
		b, _ := p.Pick(balancer.Request{Attempt: 1, Avoid: "10.0.0.2:8080"})
		fmt.Println(b.ID())
	}
	// Output:
	// 10.0.0.1:8080
	// 10.0.0.1:8080
	// 10.0.0.1:8080
}

// Reported weighs backends by their own load reports, after gRFC A58:
// qps / utilisation. Here a reports 100 requests a second at 20% and b
// the same at 50%, so a gets 2.5 times b's share once the blackout is
// over. A test clock and Refresh stand in for time and the weight loop.
func ExampleReported() {
	now := time.Unix(1_700_000_000, 0)
	p := wrr.NewReported(
		wrr.WithClock(func() time.Time { return now }),
		wrr.WithRand(func() uint64 { return 0 }),
	)
	bs := balancer.Endpoints("a", "b")
	if err := p.Update(bs); err != nil {
		panic(err)
	}
	send := func() {
		p.Done(bs[0], balancer.Result{Load: balancer.Load{RPS: 100, Application: 0.2}})
		p.Done(bs[1], balancer.Result{Load: balancer.Load{RPS: 100, Application: 0.5}})
	}
	send()
	now = now.Add(wrr.DefaultBlackout) // reports must keep coming for 10 s
	send()
	p.Refresh()
	wa, _ := p.Weight("a")
	wb, _ := p.Weight("b")
	fmt.Println(wa, wb)
	var seq []string
	for range p.Period() {
		b, _ := p.Pick(balancer.Request{})
		seq = append(seq, b.ID())
	}
	fmt.Println(strings.Join(seq, " "))
	// Output:
	// 500 200
	// a b a a a b a
}
