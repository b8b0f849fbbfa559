package health_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/locality"
	"github.com/lbkit/lbkit/rr"
)

// A source's word through UpdateHealth: an unhealthy backend is out, Down
// with ReasonSource, until the source says it is healthy again; Update
// means every backend healthy.
func TestUpdateHealthFromSource(t *testing.T) {
	var rec recorder
	lb, err := health.New(rr.New(), health.Config{OnChange: rec.add})
	require.NoError(t, err)
	defer lb.Close()
	set := balancer.Endpoints("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80")
	require.NoError(t, lb.UpdateHealth(set, []bool{true, false, true}))
	for range 60 {
		b, err := lb.Pick(balancer.Request{})
		require.NoError(t, err)
		assert.NotEqual(t, "10.0.0.2:80", b.ID())
	}
	st := statusOf(lb.View(), "10.0.0.2:80")
	assert.Equal(t, health.Down, st.State)
	assert.Equal(t, health.ReasonSource, st.Reason)
	assert.True(t, st.ProbeUp, "the probes' verdict is its own")

	require.NoError(t, lb.Update(set))
	assert.Equal(t, health.Up, statusOf(lb.View(), "10.0.0.2:80").State)
	seen := map[string]bool{}
	for range 30 {
		b, _ := lb.Pick(balancer.Request{})
		seen[b.ID()] = true
	}
	assert.True(t, seen["10.0.0.2:80"], "healthy again, it is picked")
	var changes []string
	for _, c := range rec.all() {
		if c.ID == "10.0.0.2:80" {
			changes = append(changes, c.String())
		}
	}
	assert.Equal(t, []string{"10.0.0.2:80: up -> down (source)", "10.0.0.2:80: down -> up (source)"}, changes)
}

// Every backend unhealthy by the source's word: panic mode, as for probes.
func TestUpdateHealthAllDownPanics(t *testing.T) {
	lb, err := health.New(rr.New(), health.Config{})
	require.NoError(t, err)
	defer lb.Close()
	require.NoError(t, lb.UpdateHealth(balancer.Endpoints("10.0.0.1:80", "10.0.0.2:80"), []bool{false, false}))
	_, err = lb.Pick(balancer.Request{})
	assert.NoError(t, err)
	assert.True(t, lb.View().Panic)
}

// Refused: flags of another length, an invalid set, or an inner picker
// that refuses; the previous set and health stay.
func TestUpdateHealthRefused(t *testing.T) {
	inner := &wholeSpy{Picker: rr.New()}
	lb, err := health.New(inner, health.Config{})
	require.NoError(t, err)
	defer lb.Close()
	set := balancer.Endpoints("10.0.0.1:80", "10.0.0.2:80")
	require.NoError(t, lb.UpdateHealth(set, []bool{true, false}))
	assert.Error(t, lb.UpdateHealth(set, []bool{true}))
	assert.Error(t, lb.UpdateHealth(balancer.Endpoints("10.0.0.1:80", "10.0.0.1:80"), []bool{true, true}))
	inner.failure = errors.New("no")
	assert.Error(t, lb.UpdateHealth(set, []bool{true, true}))
	inner.failure = nil
	assert.Equal(t, health.Down, statusOf(lb.View(), "10.0.0.2:80").State, "the refused word is taken back")
	up, down := inner.last()
	assert.Equal(t, []string{"10.0.0.1:80"}, up)
	assert.Equal(t, []string{"10.0.0.2:80"}, down)
}

// With locality inside, the source's unhealthy backends reach it as
// unhealthy, and count in their level's size: 4 of 10 unhealthy at
// priority 0 keep 0.6 × 1.4 = 84% of the traffic there, as Envoy does,
// not all of it.
func TestUpdateHealthThroughLocality(t *testing.T) {
	l, err := locality.New(func() balancer.Balancer { return rr.New() }, locality.Config{})
	require.NoError(t, err)
	lb, err := health.New(l, health.Config{})
	require.NoError(t, err)
	defer lb.Close()
	var set []balancer.Backend
	var up []bool
	for i := range 10 {
		set = append(set, balancer.NewEndpoint("10.0.0."+string(rune('1'+i))+":80", 1))
		up = append(up, i >= 4)
	}
	for i := range 5 {
		set = append(set, balancer.NewEndpoint("10.0.1."+string(rune('1'+i))+":80", 1).At(balancer.Locality{Priority: 1}))
		up = append(up, true)
	}
	require.NoError(t, lb.UpdateHealth(set, up))
	p0 := 0
	const n = 20000
	for range n {
		b, err := lb.Pick(balancer.Request{})
		require.NoError(t, err)
		if balancer.LocalityOf(b).Priority == 0 {
			p0++
		}
	}
	assert.InDelta(t, 0.84, float64(p0)/n, 0.02)
}

func statusOf(v health.View, id string) health.Status {
	for _, s := range v.Backends {
		if s.ID == id {
			return s
		}
	}
	return health.Status{}
}
