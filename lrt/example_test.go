package lrt_test

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/lrt"
)

// exampleClock is a clock the examples move by hand, so that their output
// is repeatable. Leave WithClock out in production.
type exampleClock struct{ now time.Duration }

func (c *exampleClock) Now() time.Time {
	return time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC).Add(c.now)
}

func Example() {
	clock := &exampleClock{}
	p := lrt.New(lrt.WithClock(clock.Now), lrt.WithRand(rand.New(rand.NewPCG(1, 2)).Uint64))
	if err := p.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080")); err != nil {
		panic(err)
	}
	took := map[string]time.Duration{"10.0.0.1:8080": 60 * time.Millisecond, "10.0.0.2:8080": 150 * time.Millisecond}

	// Before any answer both backends have the same provisional estimate,
	// so requests in flight are spread as by least connections.
	var inFlight []balancer.Backend
	for range 4 {
		b, _ := p.Pick(balancer.Request{})
		inFlight = append(inFlight, b)
		fmt.Println("sent to", b.ID())
	}
	// A proxy calls Done once for every Pick, with what it measured; the
	// answers come in the order they take.
	slices.SortFunc(inFlight, func(a, b balancer.Backend) int { return cmp.Compare(took[a.ID()], took[b.ID()]) })
	for _, b := range inFlight {
		clock.now = took[b.ID()]
		p.Done(b, balancer.Result{Latency: took[b.ID()]})
	}

	// Now the faster backend costs 60, 120, then 180 ms as requests pile
	// on it, and at 180 the slower one (150) is cheaper.
	fmt.Println("after the answers:")
	for range 4 {
		b, _ := p.Pick(balancer.Request{})
		fmt.Println("sent to", b.ID())
	}
	// Output:
	// sent to 10.0.0.1:8080
	// sent to 10.0.0.2:8080
	// sent to 10.0.0.1:8080
	// sent to 10.0.0.2:8080
	// after the answers:
	// sent to 10.0.0.1:8080
	// sent to 10.0.0.1:8080
	// sent to 10.0.0.2:8080
	// sent to 10.0.0.1:8080
}

// The naive mode ignores load: every request goes to the backend with the
// lowest estimate. This is the herding the Balanced default exists to
// prevent.
func ExampleWithMode_naive() {
	clock := &exampleClock{}
	p := lrt.New(lrt.WithMode(lrt.Naive), lrt.WithClock(clock.Now))
	bs := balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080")
	_ = p.Update(bs)
	p.Done(bs[0], balancer.Result{Latency: 60 * time.Millisecond})
	p.Done(bs[1], balancer.Result{Latency: 150 * time.Millisecond})
	for range 4 {
		b, _ := p.Pick(balancer.Request{})
		fmt.Println("sent to", b.ID())
	}
	// Output:
	// sent to 10.0.0.1:8080
	// sent to 10.0.0.1:8080
	// sent to 10.0.0.1:8080
	// sent to 10.0.0.1:8080
}

// A failure is recorded as a slow answer: twice the backend's usual
// latency, doubling with each failure in a row. An idle backend's estimate
// decays, so that it is tried again.
func ExamplePicker_Done() {
	clock := &exampleClock{}
	p := lrt.New(lrt.WithClock(clock.Now))
	b := balancer.NewEndpoint("10.0.0.1:8080", 1)
	_ = p.Update([]balancer.Backend{b})
	refused := errors.New("connection refused")

	p.Done(b, balancer.Result{Latency: 50 * time.Millisecond})
	show := func(what string) {
		st, _ := p.Stats(b)
		fmt.Printf("%-24s %v\n", what, st.Latency.Round(time.Millisecond))
	}
	show("answered in 50ms:")
	p.Done(b, balancer.Result{Latency: time.Millisecond, Err: refused})
	show("refused in 1ms:")
	p.Done(b, balancer.Result{Latency: time.Millisecond, Err: refused})
	show("refused again:")
	clock.now += 10 * time.Second // τ
	show("10s later, idle:")
	// Output:
	// answered in 50ms:        50ms
	// refused in 1ms:          100ms
	// refused again:           200ms
	// 10s later, idle:         74ms
}
