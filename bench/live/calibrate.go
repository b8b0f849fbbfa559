package live

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/lbkit/lbkit/bench/sim"
	"github.com/lbkit/lbkit/catalog"
)

// Thresholds of Trust: what part of the fastest backend's scaled latency
// the rig's own overhead may take.
const (
	// WarnShare: above it, live latencies read high enough, and
	// latency-aware pickers shift enough load, that the live figures
	// should not be taken for the backends'.
	WarnShare = 0.10
	// RefuseShare: above it, at light load, the rig's timing error is a
	// large part of what it measures, and the live figures mean nothing.
	RefuseShare = 0.5
	// calibrateFor is how long each calibration run plays at least;
	// calibrateCycles is how many of its users' cycles (think time and
	// service time, scaled) it plays if that is longer, as at a large
	// scale, up to calibrateMax (a think time may be hours), and two
	// service times at least, so that every user is answered.
	calibrateFor    = time.Second
	calibrateCycles = 4
	calibrateMax    = 10 * time.Second
)

// Overhead is what the rig itself adds to a request on this machine now,
// in real time, as Calibrate measured it: the clients' latency through
// the real proxy beyond the backend's service time.
type Overhead struct {
	// Light is the mean overhead with a few users: the rig's timing error
	// (timers that fire late, the proxy's path, loopback).
	Light time.Duration
	// Loaded is the mean overhead at the load asked: the scenarios' peak
	// rate, every request to the fastest backend.
	Loaded time.Duration
	// Asked is the request rate the loaded run asked (requests/s of real
	// time): what the simulation of that same run serves, with no rig in
	// the way, its users' first sends spread over a think time and its
	// last cycles cut by its end as the live run's are. Served is the rate
	// the live run got.
	Asked, Served float64
}

// Calibrate measures the rig's overhead before a live run of scenarios
// at scale f: two runs, through the real proxy and round robin, to one
// backend answering in the scenarios' fastest latency (scaled): one with
// four users who do not think (the timing error), one with the peak users
// of the scenario that asks the most, thinking its scaled think time (the
// load an algorithm that sends everything to the fastest backend asks).
// Each lasts a second, or four of its users' cycles if that is longer
// (at scale 10 the study's loaded run cycles in 1.5 s), up to 10 s, or
// two service times if that is longer still. Arguments are checked as
// Run checks them.
func Calibrate(ctx context.Context, scenarios []sim.Scenario, f float64) (Overhead, error) {
	rr, ok := catalog.Lookup("rr")
	if !ok || len(scenarios) == 0 {
		return Overhead{}, fmt.Errorf("%w: nothing to calibrate", sim.ErrScenario)
	}
	if err := Check(scenarios, []catalog.Algorithm{rr}, Options{Scale: f}); err != nil {
		return Overhead{}, err
	}
	fastest := Fastest(scenarios)
	var busiest *sim.Scenario
	rate := 0.0
	for i := range scenarios {
		if r := PeakRate(&scenarios[i], f); r > rate {
			busiest, rate = &scenarios[i], r
		}
	}
	// The runs play at scale 1 in real time: a backend at the scaled
	// fastest latency.
	lat := max(time.Duration(float64(fastest)*f), time.Microsecond)
	scenario := func(users int, think time.Duration) sim.Scenario {
		length := max(calibrateFor, min(calibrateCycles*(think+lat), calibrateMax), 2*lat)
		return sim.Scenario{
			Name:     "calibrate",
			Backends: []sim.Backend{{Latency: lat}},
			Users:    users,
			Stages:   []sim.Stage{{Duration: length, Target: users}},
			Think:    think,
		}
	}
	lightSc := scenario(4, 0)
	light, err := Play(ctx, lightSc, sim.None, rr, 1, Options{Scale: 1})
	if err != nil {
		return Overhead{}, err
	}
	loadedSc := scenario(busiest.PeakUsers(), time.Duration(float64(busiest.Think)*f))
	loaded, err := Play(ctx, loadedSc, sim.None, rr, 1, Options{Scale: 1})
	if err != nil {
		return Overhead{}, err
	}
	asked, err := sim.Simulate(loadedSc, sim.None, rr, 1, 1)
	if err != nil {
		return Overhead{}, err
	}
	o := Overhead{
		Light:  max(light.Mean-lat, 0),
		Loaded: max(loaded.Mean-lat, 0),
		Asked:  asked.RPS,
		Served: loaded.RPS,
	}
	if light.Requests == 0 {
		o.Light = lightSc.Length() // nothing came back
	}
	if loaded.Requests == 0 {
		o.Loaded = loadedSc.Length()
	}
	return o, nil
}

// Fastest returns the lowest backend latency of the scenarios.
func Fastest(scenarios []sim.Scenario) time.Duration {
	fastest := time.Duration(math.MaxInt64)
	for _, sc := range scenarios {
		for _, b := range sc.Backends {
			fastest = min(fastest, b.Latency)
		}
	}
	return fastest
}

// PeakRate bounds the requests per second of real time a scenario asks of
// the live rig at scale f: its peak users, each cycling through the think
// time and the fastest backend's latency, as when an algorithm sends
// nearly everything there (lrt-naive).
func PeakRate(sc *sim.Scenario, f float64) float64 {
	return float64(sc.PeakUsers()) / ((sc.Think + Fastest([]sim.Scenario{*sc})).Seconds() * f)
}

// Trust says what an Overhead means for a live run at scale f of
// backends whose fastest answers in fastest (scenario time): an error,
// wrapping sim.ErrScenario, when even at light load the overhead is above
// RefuseShare of the fastest backend's scaled latency; a warning when
// the live figures cannot be taken for the backends': the rig serving
// less than 90% of the peak rate asked (then the fast algorithms are held
// back by the rig), or its overhead under that load above WarnShare of
// the fastest backend's scaled latency. Each says which scale would do:
// the rate asked falls as the scale grows, and the latencies grow with
// it.
func (o Overhead) Trust(f float64, fastest time.Duration) (warning string, err error) {
	scaled := float64(fastest) * f
	share := func(d time.Duration) float64 { return float64(d) / scaled }
	// suggest rounds a scale up to a multiple of 0.05 and says it.
	suggest := func(s float64, what string) string {
		s = math.Ceil(s*20-1e-9) / 20
		if s > MaxScale {
			return fmt.Sprintf("no scale up to %d would %s", MaxScale, what)
		}
		return "-scale " + strconv.FormatFloat(max(s, 0.05), 'g', 3, 64) + " or more would " + what
	}
	real := func(d time.Duration) string { return d.Round(time.Microsecond).String() }
	if share(o.Light) > RefuseShare {
		return "", fmt.Errorf("%w: at scale %v the rig's own overhead, %s a request at light load (measured just now), is %s of the fastest backend's %s of real time: live figures would mean nothing; %s",
			sim.ErrScenario, f, real(o.Light), pct(share(o.Light)), real(time.Duration(scaled)),
			suggest(float64(o.Light)/(WarnShare*float64(fastest)), "keep it under "+pct(WarnShare)))
	}
	switch {
	case o.Asked > 0 && o.Served < 0.9*o.Asked:
		return fmt.Sprintf("live figures at scale %v cannot be taken for the backends': the rig served %.0f of the %.0f requests/s the peak load asks (an algorithm that sends everything to the fastest backend), adding %s a request; %s",
			f, o.Served, o.Asked, real(o.Loaded), suggest(f*o.Asked/(0.9*o.Served), "ask no more than it served")), nil
	case share(o.Loaded) > WarnShare:
		return fmt.Sprintf("live figures at scale %v cannot be taken for the backends': under the peak load the rig adds %s a request, %s of the fastest backend's %s of real time (%v in the scenario's time); %s",
			f, real(o.Loaded), pct(share(o.Loaded)), real(time.Duration(scaled)),
			time.Duration(float64(o.Loaded)/f).Round(time.Millisecond/10), suggest(float64(o.Loaded)/(WarnShare*float64(fastest)), "keep it under "+pct(WarnShare))), nil
	}
	return "", nil
}

// String says what was measured, in a line.
func (o Overhead) String() string {
	return fmt.Sprintf("the rig adds %v a request at light load, %v at the peak load (%.0f requests/s asked, %.0f served)",
		o.Light.Round(time.Microsecond), o.Loaded.Round(time.Microsecond), o.Asked, o.Served)
}

// pct prints a share as a percentage: "26%".
func pct(x float64) string { return strconv.FormatFloat(100*x, 'f', 0, 64) + "%" }
