package balancer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
)

// plain is a Backend without a weight.
type plain string

func (p plain) ID() string { return string(p) }

// heavy is a non-pointer Backend with a weight.
type heavy struct {
	id string
	w  int
}

func (h heavy) ID() string  { return h.id }
func (h heavy) Weight() int { return h.w }

func TestWeightOf(t *testing.T) {
	assert.Equal(t, 1, balancer.WeightOf(plain("a")))
	assert.Equal(t, 7, balancer.WeightOf(heavy{"a", 7}))
	assert.Equal(t, 3, balancer.WeightOf(balancer.NewEndpoint("a", 3)))
	assert.Equal(t, -2, balancer.WeightOf(balancer.NewEndpoint("a", -2)), "WeightOf does not validate")
}

func TestEndpoint(t *testing.T) {
	e := balancer.NewEndpoint("10.0.0.1:80", 5)
	assert.Equal(t, "10.0.0.1:80", e.ID())
	assert.Equal(t, "10.0.0.1:80", e.Addr())
	assert.Equal(t, "10.0.0.1:80", e.String())
	assert.Equal(t, 5, e.Weight())

	bs := balancer.Endpoints("a:1", "b:1")
	require.Len(t, bs, 2)
	assert.Equal(t, "b:1", bs[1].ID())
	assert.Equal(t, 1, balancer.WeightOf(bs[0]))
	assert.Empty(t, balancer.Endpoints())

	ws := balancer.WeightedEndpoints(
		balancer.Weighted{Addr: "a:1", Weight: 3},
		balancer.Weighted{Addr: "b:1", Weight: -1},
	)
	require.Len(t, ws, 2)
	assert.Equal(t, "a:1", ws[0].ID())
	assert.Equal(t, 3, balancer.WeightOf(ws[0]))
	assert.ErrorIs(t, balancer.Validate(ws), balancer.ErrBadWeight, "weights are checked by Validate")
}

// A nil *Endpoint reaching Done (a caller's bug) must read as an unknown
// backend, not panic.
func TestNilEndpoint(t *testing.T) {
	var e *balancer.Endpoint
	assert.NotPanics(t, func() {
		assert.Equal(t, "", e.ID())
		assert.Equal(t, "", e.Addr())
		assert.Equal(t, "", e.String())
		assert.Equal(t, 0, e.Weight())
	})
	var reg balancer.Registry[balancer.InFlight]
	st := reg.Sync(balancer.Endpoints("a:1"))
	assert.Nil(t, st.Lookup(e))
}

func TestResultAbandoned(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name      string
		r         balancer.Result
		abandoned bool
		sample    bool
	}{
		{"success", balancer.Result{Latency: time.Millisecond}, false, true},
		{"failure", balancer.Result{Latency: time.Millisecond, Err: errors.New("boom")}, false, true},
		{"timeout", balancer.Result{Latency: time.Second, Err: context.DeadlineExceeded}, false, true},
		{"zero value", balancer.Result{}, false, false},
		{"negative latency", balancer.Result{Latency: -1}, false, false},
		{"ErrAbandoned", balancer.Result{Err: balancer.ErrAbandoned}, true, false},
		{"ErrAbandoned with a latency", balancer.Result{Latency: time.Millisecond, Err: balancer.ErrAbandoned}, true, false},
		{"wrapped ErrAbandoned", balancer.Result{Err: fmt.Errorf("proxy: %w", balancer.ErrAbandoned)}, true, false},
		{"context cancelled", balancer.Result{Latency: time.Millisecond, Err: ctx.Err()}, true, false},
		{"wrapped cancel", balancer.Result{Latency: time.Millisecond, Err: fmt.Errorf("get: %w", context.Canceled)}, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.abandoned, tt.r.Abandoned())
			assert.Equal(t, tt.sample, tt.r.Sample())
		})
	}
	r := balancer.Result{Latency: time.Millisecond, Err: fmt.Errorf("x: %w", context.Canceled)}
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = r.Sample() }))
}

func TestValidate(t *testing.T) {
	var nilEndpoint *balancer.Endpoint
	var nilMapBackend mapBackend
	tests := []struct {
		name string
		set  []balancer.Backend
		want error  // nil for a valid set
		msg  string // the whole message, when want is not nil
	}{
		{"nil set", nil, nil, ""},
		{"empty set", []balancer.Backend{}, nil, ""},
		{"mixed types", []balancer.Backend{plain("a"), heavy{"b", 2}, balancer.NewEndpoint("c", balancer.MaxWeight)}, nil, ""},
		{"nil interface", []balancer.Backend{plain("a"), nil}, balancer.ErrNilBackend, "balancer: nil backend at position 1"},
		{"nil pointer", []balancer.Backend{nilEndpoint}, balancer.ErrNilBackend, "balancer: nil backend at position 0"},
		{"nil map", []balancer.Backend{plain("a"), nilMapBackend}, balancer.ErrNilBackend, "balancer: nil backend at position 1"},
		{"empty ID", []balancer.Backend{plain("")}, balancer.ErrEmptyID, "balancer: empty backend ID at position 0"},
		{"duplicate", []balancer.Backend{plain("a"), plain("b"), heavy{"a", 1}}, balancer.ErrDuplicateID, `balancer: duplicate backend ID "a" at positions 0 and 2`},
		{"negative weight", []balancer.Backend{heavy{"a", -1}}, balancer.ErrBadWeight, `balancer: weight out of range: "a" at position 0 has weight -1, want 1 to 1000000`},
		{"zero weight", []balancer.Backend{plain("x"), heavy{"a", 0}}, balancer.ErrBadWeight, `balancer: weight out of range: "a" at position 1 has weight 0, want 1 to 1000000`},
		{"weight too large", []balancer.Backend{heavy{"a", balancer.MaxWeight + 1}}, balancer.ErrBadWeight, `balancer: weight out of range: "a" at position 0 has weight 1000001, want 1 to 1000000`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := balancer.Validate(tt.set)
			if tt.want == nil {
				assert.NoError(t, err)
				return
			}
			assert.True(t, errors.Is(err, tt.want), "got %v", err)
			assert.EqualError(t, err, tt.msg)
		})
	}
}

type mapBackend map[string]string

func (m mapBackend) ID() string { return m["id"] }

type counter struct {
	balancer.InFlight
	picks int
}

func TestRegistryCarriesState(t *testing.T) {
	var r balancer.Registry[counter]
	s1 := r.Sync(balancer.Endpoints("a", "b", "c"))
	require.Equal(t, 3, s1.Len())
	s1.At(0).picks = 10
	s1.At(2).picks = 30

	// Reordered, one removed, one added: state follows the ID.
	s2 := r.Sync(balancer.Endpoints("c", "d", "a"))
	assert.Equal(t, 30, s2.At(0).picks)
	assert.Equal(t, 0, s2.At(1).picks)
	assert.Equal(t, 10, s2.At(2).picks)
	assert.Same(t, s1.At(0), s2.At(2))

	// b was removed but stays reachable, so a late Done finds its counter.
	b := balancer.NewEndpoint("b", 1)
	require.NotNil(t, s2.Lookup(b))
	assert.Same(t, s1.At(1), s2.Lookup(b))
	assert.Nil(t, s2.Lookup(balancer.NewEndpoint("never", 1)))
	assert.Nil(t, s2.Lookup(nil))
	assert.Same(t, s1.At(1), s2.LookupID("b"))
	assert.Nil(t, s2.LookupID("never"))

	// And b comes back with what was learned about it.
	s1.At(1).picks = 20
	s3 := r.Sync(balancer.Endpoints("b"))
	assert.Equal(t, 20, s3.At(0).picks)
}

func TestRegistryBoundsRetired(t *testing.T) {
	var r balancer.Registry[counter]
	live := balancer.Endpoints("live")
	// Churn through 1000 short-lived backends.
	for i := range 1000 {
		set := append([]balancer.Backend{}, live...)
		set = append(set, balancer.NewEndpoint(fmt.Sprint("temp-", i), 1))
		r.Sync(set)
	}
	last := r.Sync(live)
	reachable := 0
	for i := range 1000 {
		if last.Lookup(balancer.NewEndpoint(fmt.Sprint("temp-", i), 1)) != nil {
			reachable++
		}
	}
	// At least 64 are kept (the most recent), and no more than that here,
	// since the live set is small.
	assert.Equal(t, 64, reachable)
	assert.NotNil(t, last.Lookup(balancer.NewEndpoint("temp-999", 1)), "the most recently removed is kept")
	assert.Nil(t, last.Lookup(balancer.NewEndpoint("temp-0", 1)), "the oldest is evicted")
}

// A backend that flaps in and out many times keeps one state and does not
// grow the registry.
func TestRegistryFlapping(t *testing.T) {
	var r balancer.Registry[counter]
	all := balancer.Endpoints("a", "b")
	first := r.Sync(all).At(1)
	first.picks = 5
	for range 10000 {
		r.Sync(all[:1])
		r.Sync(all)
	}
	s := r.Sync(all)
	assert.Same(t, first, s.At(1))
	assert.Equal(t, 5, s.At(1).picks)
}

func TestInFlightNeverNegative(t *testing.T) {
	var c balancer.InFlight
	assert.Equal(t, int64(1), c.Inc())
	assert.True(t, c.Dec())
	assert.False(t, c.Dec(), "nothing left to remove")
	assert.Equal(t, int64(0), c.Load())
	c.Inc()
	assert.Equal(t, int64(1), c.Load())
}

func TestInFlightConcurrent(t *testing.T) {
	var c balancer.InFlight
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 1000 {
				c.Inc()
				c.Dec()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, int64(0), c.Load())
}

func TestLookupAllocs(t *testing.T) {
	var r balancer.Registry[balancer.InFlight]
	bs := balancer.Endpoints("a", "b", "c")
	s := r.Sync(bs)
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		s.Lookup(bs[1]).Inc()
		s.Lookup(bs[1]).Dec()
	}))
}

// Every live and retired ID is found, and nothing else, however many IDs
// share a probe sequence.
func TestLookupManyIDs(t *testing.T) {
	var r balancer.Registry[counter]
	all := make([]balancer.Backend, 3000)
	for i := range all {
		all[i] = balancer.NewEndpoint(fmt.Sprintf("10.0.%d.%d:8080", i/256, i%256), 1)
	}
	first := r.Sync(all)
	s := r.Sync(all[:2000]) // 1000 retired
	for i, b := range all {
		require.Same(t, first.At(i), s.Lookup(b), b.ID())
		require.Same(t, first.At(i), s.LookupID(b.ID()), b.ID())
	}
	for i := range 3000 {
		assert.Nil(t, s.LookupID(fmt.Sprintf("10.1.%d.%d:8080", i/256, i%256)))
	}
	assert.Nil(t, s.LookupID(""))
	var zero balancer.States[counter]
	assert.Nil(t, zero.LookupID("10.0.0.1:8080"))
	assert.Equal(t, 0, zero.Len())
}

// fickle answers a valid weight on its first call and first only, as a
// Backend whose weight is changed by another goroutine might.
type fickle struct {
	id    string
	calls int
	later int
}

func (f *fickle) ID() string { return f.id }
func (f *fickle) Weight() int {
	f.calls++
	if f.calls == 1 {
		return 3
	}
	return f.later
}

func TestNewSetReadsWeightsOnce(t *testing.T) {
	f := &fickle{id: "f:1", later: -7}
	in := []balancer.Backend{plain("a"), f}
	s, err := balancer.NewSet(in)
	require.NoError(t, err)
	assert.Equal(t, 1, f.calls, "weight read once")
	assert.Equal(t, []int{1, 3}, s.Weights, "the value validated is the value kept")
	assert.Equal(t, []string{"a", "f:1"}, s.IDs)
	assert.Equal(t, 2, s.Len())
	in[0] = plain("intruder")
	assert.Equal(t, "a", s.Backends[0].ID(), "the Set keeps its own copy")

	_, err = balancer.NewSet([]balancer.Backend{plain("a"), plain("a")})
	assert.ErrorIs(t, err, balancer.ErrDuplicateID)
}

// A removed backend whose requests are still in flight keeps its counter
// however many backends leave after it, so that their Dones always find
// it; once idle it is evicted like any other.
func TestRegistrySparesBusy(t *testing.T) {
	var r balancer.Registry[balancer.InFlight]
	first := r.Sync(balancer.Endpoints("held", "idle"))
	first.At(0).Inc()
	first.At(0).Inc()
	var last balancer.States[balancer.InFlight]
	for i := range 500 { // far past the 64 retired states kept
		last = r.Sync(balancer.Endpoints(fmt.Sprint("churn-", i)))
	}
	require.Same(t, first.At(0), last.LookupID("held"), "a busy state must not be evicted")
	assert.Nil(t, last.LookupID("idle"), "an idle one is")
	assert.Nil(t, last.LookupID("churn-0"))

	assert.True(t, last.LookupID("held").Dec())
	assert.True(t, last.LookupID("held").Dec())
	for i := range 100 {
		last = r.Sync(balancer.Endpoints(fmt.Sprint("more-", i)))
	}
	assert.Nil(t, last.LookupID("held"), "evicted once its requests are done")
	reachable := 0
	for i := range 100 {
		if last.LookupID(fmt.Sprint("more-", i)) != nil {
			reachable++
		}
	}
	assert.Equal(t, 65, reachable, "the bound still holds: 64 retired and 1 live")
}

// An idle counter is sealed as it is evicted, so that a Pick still holding
// it from an older snapshot learns that no Done will find it: Inc returns a
// negative count, Load 0, Dec nothing. A busy one refuses the seal and
// stays.
func TestRegistrySealsEvicted(t *testing.T) {
	var r balancer.Registry[balancer.InFlight]
	first := r.Sync(balancer.Endpoints("idle", "busy"))
	idle, held := first.At(0), first.At(1)
	held.Inc()
	var last balancer.States[balancer.InFlight]
	for i := range 100 { // past the 64 retired states kept
		last = r.Sync(balancer.Endpoints(fmt.Sprint("churn-", i)))
	}
	require.Nil(t, last.LookupID("idle"), "evicted")
	require.Same(t, held, last.LookupID("busy"), "kept")

	assert.Negative(t, idle.Inc(), "a Pick on the older snapshot finds the counter sealed")
	assert.Zero(t, idle.Load())
	assert.False(t, idle.Dec())
	assert.False(t, idle.Busy(), "a sealed counter never keeps itself alive")
	assert.False(t, held.Seal(), "a counter with requests cannot be sealed")
	assert.Equal(t, int64(1), held.Load())

	// The ID comes back with a counter of its own.
	back := r.Sync(balancer.Endpoints("idle"))
	assert.NotSame(t, idle, back.At(0))
	assert.Equal(t, int64(1), back.At(0).Inc())
}

// The picker of the package example keeps every contract the kit checks:
// what the example shows is what a picker must do.
func TestExamplePickerConforms(t *testing.T) {
	balancertest.Run(t, func() balancer.Balancer { return &leastLoaded{} })
}

// metricsMap is a report's named metrics, for TestLoad.
type metricsMap map[string]float64

func (m metricsMap) Metric(name string) (float64, bool) {
	v, ok := m[name]
	return v, ok
}

func TestLoad(t *testing.T) {
	for _, tt := range []struct {
		name     string
		l        balancer.Load
		reported bool
		util     float64
	}{
		{"zero", balancer.Load{}, false, 0},
		{"cpu", balancer.Load{CPU: 0.5}, true, 0.5},
		{"application wins", balancer.Load{CPU: 0.5, Application: 0.25}, true, 0.25},
		{"rate only", balancer.Load{RPS: 3}, true, 0},
		{"in flight only", balancer.Load{InFlight: 1}, true, 0},
		{"latency only", balancer.Load{Latency: 1}, true, 0},
		{"named only", balancer.Load{Named: metricsMap{}}, true, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.reported, tt.l.Reported())
			assert.Equal(t, tt.util, tt.l.Utilization())
		})
	}
	v, ok := balancer.Load{}.Metric("q")
	assert.False(t, ok)
	assert.Zero(t, v)
	v, ok = balancer.Load{Named: metricsMap{"q": 4}}.Metric("q")
	assert.True(t, ok)
	assert.Equal(t, 4.0, v)
}
