package locality_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/locality"
)

// inFlight returns the in-flight count of id in the picker of zone at
// priority.
func inFlight(t *testing.T, l *locality.Balancer, priority int, zone, id string) int64 {
	t.Helper()
	c := locality.Child(l, priority, zone)
	require.NotNil(t, c, "zone %q at %d", zone, priority)
	return c.(balancer.InFlightCounter).InFlight(id)
}

// pickHeld picks until n picks of id are held, holding the others too
// (leastconn then spreads the picks), hands the others back, and returns
// the picks of id.
func pickHeld(t *testing.T, l *locality.Balancer, id string, n int) []balancer.Backend {
	t.Helper()
	var held, others []balancer.Backend
	for range 10_000 {
		if len(held) == n {
			break
		}
		b, err := l.Pick(balancer.Request{})
		require.NoError(t, err)
		if b.ID() == id {
			held = append(held, b)
		} else {
			others = append(others, b)
		}
	}
	require.Len(t, held, n, "picks of %s", id)
	for _, b := range others {
		l.Done(b, balancer.Result{Latency: 1e6})
	}
	return held
}

func newCounting(t *testing.T) *locality.Balancer {
	t.Helper()
	l, err := locality.New(func() balancer.Balancer { return leastconn.New(leastconn.WithRand(seeded(2))) },
		locality.Config{Rand: seeded(1)})
	require.NoError(t, err)
	return l
}

// A backend that moves to another zone, or another priority, while
// requests picked in the old one are in flight: their Dones reach the
// picker that counted them, and the new zone's picker counts down only
// its own. Both counts end at zero.
func TestDoneFollowsMovedBackend(t *testing.T) {
	for _, tt := range []struct {
		name     string
		from, to balancer.Locality
	}{
		{"zone", balancer.Locality{Zone: "a"}, balancer.Locality{Zone: "b"}},
		{"priority", balancer.Locality{Zone: "a"}, balancer.Locality{Zone: "a", Priority: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l := newCounting(t)
			x := balancer.NewEndpoint("x:80", 1)
			others := []balancer.Backend{
				balancer.NewEndpoint("y:80", 1).At(balancer.Locality{Zone: "a"}),
				balancer.NewEndpoint("z:80", 1).At(balancer.Locality{Zone: "b"}),
				balancer.NewEndpoint("w:80", 1).At(balancer.Locality{Zone: "a", Priority: 1}),
			}
			require.NoError(t, l.Update(append([]balancer.Backend{x.At(tt.from)}, others...)))
			old := pickHeld(t, l, "x:80", 3)
			require.EqualValues(t, 3, inFlight(t, l, tt.from.Priority, tt.from.Zone, "x:80"))

			// x moves. Its priority-0 zone must keep traffic for a
			// priority-1 x to be picked: take the others at 0 out.
			moved := append([]balancer.Backend{x.At(tt.to)}, others...)
			if tt.to.Priority > 0 {
				moved = []balancer.Backend{x.At(tt.to), others[2]}
			}
			require.NoError(t, l.Update(moved))
			now := pickHeld(t, l, "x:80", 2)
			require.EqualValues(t, 2, inFlight(t, l, tt.to.Priority, tt.to.Zone, "x:80"))

			for _, b := range old {
				l.Done(b, balancer.Result{Latency: 1e6})
			}
			assert.EqualValues(t, 0, inFlight(t, l, tt.from.Priority, tt.from.Zone, "x:80"), "the old zone's count")
			assert.EqualValues(t, 2, inFlight(t, l, tt.to.Priority, tt.to.Zone, "x:80"), "the new zone's count, before its own Dones")
			for _, b := range now {
				l.Done(b, balancer.Result{Latency: 1e6})
			}
			assert.EqualValues(t, 0, inFlight(t, l, tt.to.Priority, tt.to.Zone, "x:80"), "the new zone's count")

			// Pick and Done of the moved backend, a late Done of its old
			// value: no allocation.
			allocs := testing.AllocsPerRun(1000, func() {
				b, err := l.Pick(balancer.Request{})
				if err == nil {
					l.Done(b, balancer.Result{Latency: 1e6})
				}
				l.Done(old[0], balancer.Result{Latency: 1e6})
			})
			assert.Zero(t, allocs)
		})
	}
}

// The same backend value in another zone (a Backend whose Locality
// changes, or locality read by a function): the Dones drain the old
// zone's count first, and both end at zero.
func TestDoneFollowsMovedSameValue(t *testing.T) {
	l := newCounting(t)
	zone := map[string]string{"x:80": "a", "y:80": "a", "z:80": "b"}
	var mu sync.Mutex
	locality.SetLocate(l, func(b balancer.Backend) balancer.Locality {
		mu.Lock()
		defer mu.Unlock()
		return balancer.Locality{Zone: zone[b.ID()]}
	})
	bs := balancer.Endpoints("x:80", "y:80", "z:80")
	require.NoError(t, l.Update(bs))
	old := pickHeld(t, l, "x:80", 3)
	mu.Lock()
	zone["x:80"] = "b"
	mu.Unlock()
	require.NoError(t, l.Update(bs))
	now := pickHeld(t, l, "x:80", 2)
	for _, b := range append(old, now...) {
		l.Done(b, balancer.Result{Latency: 1e6})
	}
	assert.EqualValues(t, 0, inFlight(t, l, 0, "a", "x:80"))
	assert.EqualValues(t, 0, inFlight(t, l, 0, "b", "x:80"))
}

// Updates that move a backend between zones, concurrently with Picks and
// Dones: once every Done is in, every zone's count is zero.
func TestDoneFollowsMovesConcurrently(t *testing.T) {
	// The default random sources: seeded ones are not safe for
	// concurrent use.
	l, err := locality.New(func() balancer.Balancer { return leastconn.New() }, locality.Config{})
	require.NoError(t, err)
	x := balancer.NewEndpoint("x:80", 1)
	rest := []balancer.Backend{
		balancer.NewEndpoint("y:80", 1).At(balancer.Locality{Zone: "a"}),
		balancer.NewEndpoint("z:80", 1).At(balancer.Locality{Zone: "b"}),
		balancer.NewEndpoint("v:80", 1).At(balancer.Locality{Zone: "c"}),
	}
	setIn := func(zone string) []balancer.Backend {
		return append([]balancer.Backend{x.At(balancer.Locality{Zone: zone})}, rest...)
	}
	require.NoError(t, l.Update(setIn("a")))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			var held []balancer.Backend
			for {
				select {
				case <-stop:
					for _, b := range held {
						l.Done(b, balancer.Result{Latency: 1e6})
					}
					return
				default:
				}
				b, err := l.Pick(balancer.Request{})
				if err != nil {
					t.Error(err)
					return
				}
				held = append(held, b)
				if len(held) > 8 { // hold up to 8 across Updates, oldest out first
					l.Done(held[0], balancer.Result{Latency: 1e6})
					held = held[1:]
				}
			}
		})
	}
	zones := []string{"a", "b", "c"}
	for i := range 300 {
		require.NoError(t, l.Update(setIn(zones[i%3])))
	}
	close(stop)
	wg.Wait()
	for _, z := range zones {
		for _, id := range []string{"x:80", "y:80", "z:80", "v:80"} {
			assert.EqualValues(t, 0, inFlight(t, l, 0, z, id), "zone %s, %s", z, id)
		}
	}
}
