package prequal_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/lrt/prequal"
)

// Two backends answer probes: fast has nothing in flight and answers in
// 2 ms; slow is busy with 12 requests. Once both have answered, picks go
// to fast (slow's 12 is above the pool's 0.84 quantile: it is hot). In production the ProbeFunc is lbhttp's Prober.Probe.
func Example() {
	loads := map[string]balancer.Load{
		"fast:80": {InFlight: 0, Latency: 2 * time.Millisecond},
		"slow:80": {InFlight: 12, Latency: 30 * time.Millisecond},
	}
	var mu sync.Mutex
	answered := map[string]bool{}
	probe := func(_ context.Context, b balancer.Backend) (balancer.Load, error) {
		mu.Lock()
		defer mu.Unlock()
		answered[b.ID()] = true
		return loads[b.ID()], nil
	}
	// Answers that last, so that the output does not depend on how busy
	// the machine running the example is; leave both options out in
	// production.
	p := prequal.New(probe, prequal.WithReuse(1<<20), prequal.WithReportExpiry(time.Minute))
	if err := p.Update(balancer.Endpoints("fast:80", "slow:80")); err != nil {
		panic(err)
	}
	if err := p.Start(context.Background()); err != nil {
		panic(err)
	}
	defer p.Close()

	// Picks ask for probes; until answers come they are random.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		b, _ := p.Pick(balancer.Request{})
		p.Done(b, balancer.Result{})
		mu.Lock()
		both := answered["fast:80"] && answered["slow:80"]
		mu.Unlock()
		if both {
			break
		}
		time.Sleep(time.Millisecond)
	}
	counts := map[string]int{}
	for range 100 {
		b, _ := p.Pick(balancer.Request{})
		p.Done(b, balancer.Result{})
		counts[b.ID()]++
		time.Sleep(time.Millisecond) // requests a millisecond apart, so that answers keep up
	}
	fmt.Println("most picks to fast:", counts["fast:80"] > counts["slow:80"])
	// Output:
	// most picks to fast: true
}
