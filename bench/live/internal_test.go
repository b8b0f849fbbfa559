package live

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/bench/sim"
)

// The timeline holds what happens within the scenario only: a revive at
// or after its end is left out, as the simulator leaves it out, so that a
// run ends on time rather than when the outage would have.
func TestTimelineEndsWithScenario(t *testing.T) {
	sc := sim.Scenario{
		Name: "past",
		Backends: []sim.Backend{
			{Latency: 20 * time.Millisecond, Down: []sim.Outage{{At: time.Second, Until: 10 * time.Second}}},
			{Latency: 20 * time.Millisecond, Down: []sim.Outage{{At: time.Second, Until: 2 * time.Second}}},
			{Latency: 20 * time.Millisecond, Down: []sim.Outage{{At: 500 * time.Millisecond, Until: 1500 * time.Millisecond}}},
		},
		Users:  2,
		Stages: []sim.Stage{{Duration: time.Second, Target: 4}, {Duration: time.Second, Target: 2}},
	}
	require.NoError(t, sc.Validate())
	r := &run{sc: sc, length: int64(sc.Length())}
	events := r.timeline()
	var revives, kills, joins, leaves int
	for _, e := range events {
		assert.Less(t, e.at, sc.Length(), "event at or after the end: %+v", e)
		switch {
		case e.user < 0 && e.change == kill:
			kills++
		case e.user < 0:
			revives++
		case e.join:
			joins++
		default:
			leaves++
		}
	}
	assert.Equal(t, 3, kills)
	assert.Equal(t, 1, revives, "only the third backend comes back within the scenario")
	assert.Equal(t, 2, joins)
	assert.Equal(t, 1, leaves, "the last leave falls on the end")
}

// stubPicker always picks its one backend.
type stubPicker struct{ b balancer.Backend }

func (p stubPicker) Pick(balancer.Request) (balancer.Backend, error) { return p.b, nil }

// A pick made after the scenario's end is not counted: the run measures
// what happens within the scenario, as the simulation does; a pick within
// it is.
func TestMeterStopsAtEnd(t *testing.T) {
	ep := balancer.NewEndpoint("10.0.0.1:8080", 1)
	be := &backend{stepSent: make([]atomic.Int32, 10)}
	r := &run{length: int64(time.Second), step: float64(100 * time.Millisecond), steps: 10,
		byID: map[string]*backend{ep.ID(): be}}
	m := &meter{inner: stubPicker{ep}, r: r}

	r.start = time.Now().Add(-500 * time.Millisecond) // half way
	_, err := m.Pick(balancer.Request{})
	require.NoError(t, err)
	assert.Equal(t, int64(1), be.sent.Load())

	r.start = time.Now().Add(-2 * time.Second) // after the end
	b, err := m.Pick(balancer.Request{Attempt: 1})
	require.NoError(t, err)
	assert.Equal(t, ep, b, "the pick still goes through")
	assert.Equal(t, int64(1), be.sent.Load(), "a pick after the end is not counted")
	assert.Equal(t, int32(0), be.stepSent[9].Load(), "nor clamped into the last step")
	assert.Zero(t, m.retries.Load(), "nor counted as a retry")
}

// The per-step peak of requests in flight counts a request in every step
// it spans, and two at once where they overlap; one that ends as a step
// starts is not in that step.
func TestInFlightSteps(t *testing.T) {
	ms := int64(time.Millisecond)
	r := &run{length: 1000 * ms, step: float64(100 * ms), steps: 10}
	area, stepArea, stepPeak, peak := r.inFlight([]span{{0, 250 * ms}, {100 * ms, 150 * ms}, {500 * ms, 700 * ms}, {900 * ms, 2000 * ms}})
	assert.Equal(t, []int{1, 2, 1, 0, 0, 1, 1, 0, 0, 1}, stepPeak)
	assert.Equal(t, 2, peak)
	assert.InDelta(t, float64(250+50+200+100)*float64(ms), area, 1, "cut to the run")
	assert.InDelta(t, float64(150*ms), stepArea[1], 1)
}

// Trust refuses a scale at which the rig's timing error is a large part
// of the fastest backend's latency, warns when the rig cannot serve the
// peak load or adds much to it, and says which scale would do.
func TestTrust(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name  string
		o     Overhead
		scale float64
		warn  string // in the warning; empty: none
		err   string // in the error; empty: none
	}{
		{"fine", Overhead{Light: 200 * time.Microsecond, Loaded: 800 * time.Microsecond, Asked: 1000, Served: 990}, 0.5, "", ""},
		{"loaded", Overhead{Light: 200 * time.Microsecond, Loaded: 2 * ms, Asked: 1000, Served: 990}, 0.1,
			"under the peak load the rig adds 2ms a request, 40% of the fastest backend's 5ms of real time (20ms in the scenario's time); -scale 0.4 or more would keep it under 10%", ""},
		{"saturated", Overhead{Light: time.Millisecond, Loaded: 40 * ms, Asked: 6667, Served: 1452}, 0.1,
			"the rig served 1452 of the 6667 requests/s the peak load asks (an algorithm that sends everything to the fastest backend), adding 40ms a request; -scale 0.55 or more would ask no more than it served", ""},
		{"refused", Overhead{Light: 711 * time.Microsecond, Loaded: time.Millisecond, Asked: 33333, Served: 2590}, 0.001, "",
			"at scale 0.001 the rig's own overhead, 711µs a request at light load (measured just now), is 1422% of the fastest backend's 50µs of real time: live figures would mean nothing; -scale 0.15 or more would keep it under 10%"},
		{"hopeless", Overhead{Light: time.Second}, 1, "", "no scale up to 10 would keep it under 10%"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			warn, err := tc.o.Trust(tc.scale, 50*ms)
			if tc.err != "" {
				require.ErrorIs(t, err, sim.ErrScenario)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			if tc.warn == "" {
				assert.Empty(t, warn)
			} else {
				assert.Contains(t, warn, tc.warn)
			}
		})
	}
}

// Measured samples are scaled with every other duration, so that a live
// backend serves in its own samples' times, scaled.
func TestScaleSamples(t *testing.T) {
	sc := sim.Scenario{Name: "s", Backends: []sim.Backend{{Latency: 40 * time.Millisecond,
		Samples: []time.Duration{20 * time.Millisecond, 40 * time.Millisecond, 90 * time.Millisecond}}},
		Users: 1, Stages: []sim.Stage{{Duration: time.Second, Target: 1}}}
	out, err := scaleScenario(sc, 0.5)
	require.NoError(t, err)
	assert.Equal(t, []time.Duration{10 * time.Millisecond, 20 * time.Millisecond, 45 * time.Millisecond}, out.Backends[0].Samples)
	assert.Equal(t, 90*time.Millisecond, sc.Backends[0].Samples[2], "the scenario given is untouched")
}

// A live run reports what the rig added, in the scenario's time base:
// how late the backends' timers fired, and the clients' wait beyond the
// time at the backends.
func TestRigFigures(t *testing.T) {
	ms := int64(time.Millisecond)
	r := &run{scale: 0.5, backends: []*backend{
		{late: 3 * ms, fired: 3, spans: []span{{0, 10 * ms}, {0, 20 * ms}}},
		{late: 1 * ms, fired: 1, spans: []span{{5 * ms, 35 * ms}}},
	}}
	// Timers 1 ms late on average, real: 2 ms of the scenario's. Requests
	// spent 20 ms at a backend, real: 40 ms; the clients waited 43 ms.
	got := r.rig(43 * time.Millisecond)
	require.Len(t, got, 2)
	assert.Equal(t, "rig_late_ms", got[0].Name)
	assert.InDelta(t, 2, got[0].Value, 1e-9)
	assert.Equal(t, "rig_proxy_ms", got[1].Name)
	assert.InDelta(t, 3, got[1].Value, 1e-9)
	assert.Len(t, RigMetrics(), 2, "each figure is declared as a metric of the live report")
}
