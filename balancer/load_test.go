package balancer_test

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
)

// The rule of LoadBuilder, value by value: what each field takes, what it
// refuses (wrapping ErrBadLoad), and what Load keeps.
func TestLoadBuilder(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	tests := []struct {
		f    balancer.LoadField
		key  string
		v    float64
		ok   bool
		want balancer.Load
	}{
		{balancer.LoadCPU, "", 0.5, true, balancer.Load{CPU: 0.5}},
		{balancer.LoadCPU, "", 1.5, true, balancer.Load{CPU: 1.5}}, // beyond soft limits
		{balancer.LoadCPU, "", -0.1, false, balancer.Load{}},
		{balancer.LoadCPU, "", nan, false, balancer.Load{}},
		{balancer.LoadCPU, "", inf, false, balancer.Load{}},
		{balancer.LoadMemory, "", 1, true, balancer.Load{Memory: 1}},
		{balancer.LoadMemory, "", 1.0000001, false, balancer.Load{}},
		{balancer.LoadMemory, "", -1, false, balancer.Load{}},
		{balancer.LoadApplication, "", 3, true, balancer.Load{Application: 3}},
		{balancer.LoadApplication, "", -3, false, balancer.Load{}},
		{balancer.LoadRPS, "", 120, true, balancer.Load{RPS: 120}},
		{balancer.LoadRPS, "", -1, false, balancer.Load{}},
		{balancer.LoadRPSInt, "", 7, true, balancer.Load{RPS: 7}},
		{balancer.LoadRPSInt, "", -7, false, balancer.Load{}},
		{balancer.LoadEPS, "", 2, true, balancer.Load{EPS: 2}},
		{balancer.LoadEPS, "", math.Inf(-1), false, balancer.Load{}},
		{balancer.LoadNamed, "queue", -4, true, balancer.Load{}}, // any finite value
		{balancer.LoadNamed, "queue", nan, false, balancer.Load{}},
		{balancer.LoadNamed, "", 1, false, balancer.Load{}},
		{balancer.LoadNamed, balancer.MetricInFlight, 3, true, balancer.Load{InFlight: 3}},
		{balancer.LoadNamed, balancer.MetricInFlight, -1, false, balancer.Load{}},
		{balancer.LoadNamed, balancer.MetricLatency, 2.5, true, balancer.Load{Latency: 2500 * time.Microsecond}},
		{balancer.LoadNamed, balancer.MetricLatency, -1, false, balancer.Load{}},
		{balancer.LoadNamed, balancer.MetricLatency, 1e13, false, balancer.Load{}}, // past a Duration
		{balancer.LoadRequestCost, "db", -2, true, balancer.Load{}},
		{balancer.LoadRequestCost, "db", inf, false, balancer.Load{}},
		{balancer.LoadUtilization, "gpu", 1, true, balancer.Load{}},
		{balancer.LoadUtilization, "gpu", 1.5, false, balancer.Load{}},
		{balancer.LoadUtilization, "", 0.5, false, balancer.Load{}},
		{0, "", 1, false, balancer.Load{}},
		{balancer.LoadUtilization + 1, "", 1, false, balancer.Load{}},
	}
	for _, tt := range tests {
		var b balancer.LoadBuilder
		err := b.Add(tt.f, tt.key, tt.v)
		if tt.ok {
			assert.NoError(t, err, "%v %q %v", tt.f, tt.key, tt.v)
		} else {
			assert.ErrorIs(t, err, balancer.ErrBadLoad, "%v %q %v", tt.f, tt.key, tt.v)
			if err != nil {
				t.Log(err)
			}
		}
		assert.Equal(t, tt.want, b.Load(), "%v %q %v", tt.f, tt.key, tt.v)
	}
}

// rps_fractional wins over the deprecated integer rps, in either order,
// unless it is zero.
func TestLoadBuilderRPS(t *testing.T) {
	for _, order := range [][]balancer.LoadField{{balancer.LoadRPSInt, balancer.LoadRPS}, {balancer.LoadRPS, balancer.LoadRPSInt}} {
		var b balancer.LoadBuilder
		for _, f := range order {
			v := 7.0
			if f == balancer.LoadRPS {
				v = 7.5
			}
			require.NoError(t, b.Add(f, "", v))
		}
		assert.Equal(t, 7.5, b.Load().RPS)
	}
	var b balancer.LoadBuilder
	require.NoError(t, b.Add(balancer.LoadRPS, "", 0))
	require.NoError(t, b.Add(balancer.LoadRPSInt, "", 7))
	assert.Equal(t, 7.0, b.Load().RPS)
}

func TestCheckNamedMetrics(t *testing.T) {
	assert.NoError(t, balancer.CheckNamedMetrics(0))
	assert.NoError(t, balancer.CheckNamedMetrics(balancer.MaxNamedMetrics))
	assert.ErrorIs(t, balancer.CheckNamedMetrics(balancer.MaxNamedMetrics+1), balancer.ErrBadLoad)
	assert.Equal(t, "cpu_utilization", balancer.LoadCPU.String())
	assert.Equal(t, "LoadField(0)", balancer.LoadField(0).String())
}

// Add allocates nothing for a value it takes (a refusal builds its error
// with fmt), so that a source passes a good report for free.
func TestLoadBuilderAllocs(t *testing.T) {
	allocs := testing.AllocsPerRun(1000, func() {
		var b balancer.LoadBuilder
		_ = b.Add(balancer.LoadCPU, "", 0.5)
		_ = b.Add(balancer.LoadNamed, balancer.MetricLatency, 3)
		_ = b.Load()
	})
	assert.Zero(t, allocs)
}
