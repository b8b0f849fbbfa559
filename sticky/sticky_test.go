package sticky_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/consistent"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/rr"
	"github.com/lbkit/lbkit/sticky"
)

func newSticky(t testing.TB, inner balancer.Balancer) *sticky.Balancer {
	t.Helper()
	s, err := sticky.New(inner)
	require.NoError(t, err)
	return s
}

// Without a Prefer the decorator keeps every contract of the picker inside:
// one that counts, one that hashes, one that does neither.
func TestConformance(t *testing.T) {
	for name, inner := range map[string]func() balancer.Balancer{
		"rr":        func() balancer.Balancer { return rr.New() },
		"leastconn": func() balancer.Balancer { return leastconn.New() },
		"ring":      func() balancer.Balancer { return consistent.NewRing() },
	} {
		t.Run(name, func(t *testing.T) {
			balancertest.Run(t, func() balancer.Balancer { return newSticky(t, inner()) })
		})
	}
}

// Start, Close and Unwrap reach the picker inside.
func TestConformanceDecorator(t *testing.T) {
	balancertest.RunDecorator(t, func(inner balancer.Balancer) (balancer.Balancer, error) {
		return sticky.New(inner)
	})
}

func TestNewRefusesNil(t *testing.T) {
	var nilRR *rr.Picker
	for _, inner := range []balancer.Balancer{nil, nilRR} {
		s, err := sticky.New(inner)
		assert.Nil(t, s)
		assert.ErrorIs(t, err, sticky.ErrConfig)
		assert.ErrorIs(t, err, balancer.ErrBadOption)
		assert.EqualError(t, err, "sticky: invalid config: balancer: bad option: nil inner balancer")
	}
}

func ids(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("10.0.0.%d:80", i+1)
	}
	return out
}

func TestPrefer(t *testing.T) {
	addrs := ids(4)
	tests := []struct {
		name   string
		req    balancer.Request
		pinned bool // the pick must be req.Prefer
	}{
		{"in the set", balancer.Request{Prefer: addrs[2]}, true},
		{"not in the set", balancer.Request{Prefer: "10.9.9.9:80"}, false},
		{"equal to Avoid", balancer.Request{Prefer: addrs[2], Avoid: addrs[2], Attempt: 1}, false},
		{"with a Key", balancer.Request{Prefer: addrs[1], Key: "k"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lc := leastconn.New()
			s := newSticky(t, lc)
			require.NoError(t, s.Update(balancer.Endpoints(addrs...)))
			seen := map[string]int{}
			var picked []balancer.Backend
			for range 40 {
				b, err := s.Pick(tt.req)
				require.NoError(t, err)
				seen[b.ID()]++
				picked = append(picked, b)
			}
			if tt.pinned {
				assert.Equal(t, map[string]int{tt.req.Prefer: 40}, seen)
				// The inner picker counted none of them.
				assert.Zero(t, lc.InFlight(tt.req.Prefer))
				assert.Equal(t, int64(40), s.InFlight(tt.req.Prefer))
			} else {
				want := 4 // leastconn spreads over the set
				if tt.req.Avoid != "" {
					want = 3
				}
				assert.Len(t, seen, want, "%v", seen)
				assert.Zero(t, seen[tt.req.Avoid])
			}
			for _, b := range picked {
				s.Done(b, balancer.Result{})
			}
			for _, id := range addrs {
				assert.Zero(t, s.InFlight(id), id)
				assert.Zero(t, lc.InFlight(id), id)
			}
		})
	}
}

// Pinned and inner picks to one backend in flight at once: the inner
// picker's count follows its own picks exactly, whichever Done comes
// first, and every count comes back to zero.
func TestMixedDones(t *testing.T) {
	lc := leastconn.New()
	s := newSticky(t, lc)
	require.NoError(t, s.Update(balancer.Endpoints("10.0.0.1:80")))
	var pinned, inner []balancer.Backend
	for range 5 {
		b, err := s.Pick(balancer.Request{Prefer: "10.0.0.1:80"})
		require.NoError(t, err)
		pinned = append(pinned, b)
	}
	for range 3 {
		b, err := s.Pick(balancer.Request{})
		require.NoError(t, err)
		inner = append(inner, b)
	}
	assert.Equal(t, int64(3), lc.InFlight("10.0.0.1:80"))
	assert.Equal(t, int64(8), s.InFlight("10.0.0.1:80"))
	// The inner picks finish first: the pinned count takes them.
	for _, b := range inner {
		s.Done(b, balancer.Result{})
	}
	assert.Equal(t, int64(3), lc.InFlight("10.0.0.1:80"))
	assert.Equal(t, int64(5), s.InFlight("10.0.0.1:80"))
	for _, b := range pinned {
		s.Done(b, balancer.Result{})
	}
	assert.Zero(t, lc.InFlight("10.0.0.1:80"))
	assert.Zero(t, s.InFlight("10.0.0.1:80"))
}

// A backend removed with pinned requests in flight: their Dones still find
// the pinned count (and do not reach the inner picker), and a Prefer of it
// is picked afresh.
func TestRemovedWhilePinned(t *testing.T) {
	lc := leastconn.New()
	s := newSticky(t, lc)
	require.NoError(t, s.Update(balancer.Endpoints("10.0.0.1:80", "10.0.0.2:80")))
	b, err := s.Pick(balancer.Request{Prefer: "10.0.0.1:80"})
	require.NoError(t, err)
	require.NoError(t, s.Update(balancer.Endpoints("10.0.0.2:80")))
	got, err := s.Pick(balancer.Request{Prefer: "10.0.0.1:80"})
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.2:80", got.ID())
	assert.Equal(t, int64(1), lc.InFlight("10.0.0.2:80"))
	assert.Equal(t, int64(1), s.InFlight("10.0.0.1:80"))
	s.Done(b, balancer.Result{})
	s.Done(got, balancer.Result{})
	assert.Zero(t, s.InFlight("10.0.0.1:80"))
	assert.Zero(t, lc.InFlight("10.0.0.2:80"))
}

// An Update the inner picker refuses leaves the previous set in both.
func TestUpdateErrorKeepsSet(t *testing.T) {
	s := newSticky(t, leastconn.New())
	require.NoError(t, s.Update(balancer.Endpoints("10.0.0.1:80")))
	err := s.Update([]balancer.Backend{balancer.NewEndpoint("10.0.0.2:80", 1), balancer.NewEndpoint("10.0.0.2:80", 1)})
	require.ErrorIs(t, err, balancer.ErrDuplicateID)
	b, err := s.Pick(balancer.Request{Prefer: "10.0.0.1:80"})
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.1:80", b.ID())
	s.Done(b, balancer.Result{})
}

// Pinned picks and their Dones during Updates that add and remove the
// pinned backend, under -race: every count comes back to zero.
func TestConcurrentPinned(t *testing.T) {
	lc := leastconn.New()
	s := newSticky(t, lc)
	addrs := ids(4)
	require.NoError(t, s.Update(balancer.Endpoints(addrs...)))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			set := addrs
			if i%2 == 0 {
				set = addrs[1:]
			}
			_ = s.Update(balancer.Endpoints(set...))
		}
	}()
	var pickers sync.WaitGroup
	for g := range 4 {
		pickers.Add(1)
		go func() {
			defer pickers.Done()
			for i := range 2000 {
				req := balancer.Request{}
				if i%2 == 0 {
					req.Prefer = addrs[g%2]
				}
				b, err := s.Pick(req)
				if err != nil {
					continue
				}
				s.Done(b, balancer.Result{})
			}
		}()
	}
	pickers.Wait()
	close(stop)
	wg.Wait()
	for _, id := range addrs {
		assert.Zero(t, s.InFlight(id), id)
		assert.Zero(t, lc.InFlight(id), id)
	}
}

func TestAllocs(t *testing.T) {
	s := newSticky(t, leastconn.New())
	require.NoError(t, s.Update(balancer.Endpoints(ids(8)...)))
	for name, req := range map[string]balancer.Request{
		"pinned": {Prefer: "10.0.0.3:80"},
		"fresh":  {},
		"gone":   {Prefer: "10.9.9.9:80"},
	} {
		n := testing.AllocsPerRun(1000, func() {
			b, err := s.Pick(req)
			if err == nil {
				s.Done(b, balancer.Result{})
			}
		})
		assert.Zero(t, n, name)
	}
}
