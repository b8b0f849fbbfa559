package live_test

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/lbkit/lbkit/bench/live"
	"github.com/lbkit/lbkit/bench/sim"
	"github.com/lbkit/lbkit/catalog"
)

// Play one small scenario live, a second of real time at scale 0.5, and
// set it beside the simulation. Live figures vary from run to run, so the
// example prints what does not: the errors, and whether the split agrees
// with the simulation's. Throughput moves with the machine's load (live
// RPS was 0.91 to 0.94 of the simulation's under -race with four busy
// loops on two cores, and lower still on a busier machine: the rig's own
// overhead weighs on 10 ms backends); TestAgreement holds it to the
// simulation with that overhead measured in the same run.
func ExamplePlay() {
	bs, err := sim.ParseBackends("20ms,60ms")
	if err != nil {
		panic(err)
	}
	sc := sim.Scenario{
		Name:     "small",
		Backends: bs,
		Users:    4,
		Stages:   []sim.Stage{{Duration: 2 * time.Second, Target: 4}},
		Think:    40 * time.Millisecond,
	}
	rr, _ := catalog.Lookup("rr")
	got, err := live.Play(context.Background(), sc, sim.None, rr, 1, live.Options{Scale: 0.5})
	if err != nil {
		panic(err)
	}
	want, err := sim.Simulate(sc, sim.None, rr, 1, 1)
	if err != nil {
		panic(err)
	}
	sameShares := true
	for i := range got.Backends {
		sameShares = sameShares && math.Abs(got.Backends[i].Share-want.Backends[i].Share) < 0.05
	}
	fmt.Println("errors:", got.Errors)
	fmt.Println("shares as simulated (±5 points):", sameShares)
	// Output:
	// errors: 0
	// shares as simulated (±5 points): true
}
