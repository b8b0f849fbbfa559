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
		case e.user < 0 && e.kill:
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
