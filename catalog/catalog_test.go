package catalog_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/catalog"
)

// Sim builds pickers on the caller's random source: the same seed gives
// the same picks, and the algorithms that draw (rr's start, wrr's start,
// leastconn's and lrt's ties) draw from it.
func TestSimSeams(t *testing.T) {
	epoch := time.Unix(1_700_000_000, 0)
	picks := func(a catalog.Algorithm, seed uint64) []string {
		var now time.Duration
		src := rand.New(rand.NewPCG(seed, 0))
		p := a.Sim(src.Uint64, func() time.Time { return epoch.Add(now) })
		require.NoError(t, p.Update(balancer.WeightedEndpoints(
			balancer.Weighted{Addr: "10.0.0.1:80", Weight: 3}, balancer.Weighted{Addr: "10.0.0.2:80", Weight: 1},
			balancer.Weighted{Addr: "10.0.0.3:80", Weight: 2}, balancer.Weighted{Addr: "10.0.0.4:80", Weight: 1})))
		fb, _ := p.(balancer.Feedback)
		var ids []string
		for i := range 200 {
			b, err := p.Pick(balancer.Request{Key: fmt.Sprintf("192.0.2.%d", i%50)})
			require.NoError(t, err)
			ids = append(ids, b.ID())
			now += time.Millisecond
			if fb != nil {
				fb.Done(b, balancer.Result{Latency: time.Duration(1+i%7) * time.Millisecond})
			}
		}
		return ids
	}
	for _, a := range append(catalog.Algorithms(), catalog.LoadAware()...) {
		t.Run(a.Name, func(t *testing.T) {
			require.NotNil(t, a.Sim)
			first := picks(a, 1)
			assert.Equal(t, first, picks(a, 1), "same seed, same picks")
			distinct := map[string]bool{}
			for seed := range uint64(6) {
				distinct[fmt.Sprint(picks(a, seed))] = true
			}
			switch a.Name {
			case "rr", "wrr", "leastconn", "leastconn-p2c", "lrt", "lrt-naive", "wrr-reported", "leastconn-reports", "prequal":
				assert.Greater(t, len(distinct), 1, "the seed reaches the picker")
			default:
				assert.Len(t, distinct, 1, "hash pickers draw nothing")
			}
		})
	}
}

func TestLookup(t *testing.T) {
	for _, want := range catalog.Algorithms() {
		got, ok := catalog.Lookup(want.Name)
		require.True(t, ok, want.Name)
		assert.Equal(t, want.Name, got.Name)
		assert.Equal(t, want.Weighted, got.Weighted)
	}
	_, ok := catalog.Lookup("random")
	assert.False(t, ok)
	// The load-aware ones stay out of what the simulator and the proxy
	// command run and look up by default.
	for _, a := range catalog.LoadAware() {
		_, ok := catalog.Lookup(a.Name)
		assert.False(t, ok, a.Name)
	}
}

// Every configuration takes a set, built by New or by Sim with nil
// arguments (the algorithm's defaults): none passes a bad option, whose
// error every Update would return.
func TestDefaultsTakeASet(t *testing.T) {
	for _, a := range append(catalog.Algorithms(), catalog.LoadAware()...) {
		for name, p := range map[string]balancer.Balancer{"New": a.New(), "Sim(nil, nil)": a.Sim(nil, nil)} {
			assert.NoError(t, p.Update(balancer.Endpoints("10.0.0.1:80")), "%s %s", a.Name, name)
		}
	}
}
