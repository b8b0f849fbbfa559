package balancer_test

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/lbkit/lbkit/balancer"
)

// leastLoaded is a picker written outside lbkit with lbkit's ground floor: a
// copy-on-write snapshot, per-backend state carried by ID, and in-flight
// counting. Ties go round: each Pick starts its scan one backend further,
// so that a caller whose requests finish before the next one starts does
// not send all of them to the first backend of the slice. (It scans every
// backend; see package leastconn for the real one.)
type leastLoaded struct {
	mu   sync.Mutex // writers only
	reg  balancer.Registry[balancer.InFlight]
	snap atomic.Pointer[loadSnap]
	next atomic.Uint64 // where the next scan starts
}

type loadSnap struct {
	set    balancer.Set // the backends, with their IDs read once
	states balancer.States[balancer.InFlight]
}

// Update takes the writers' mutex first, so that calls are serialised
// validation included, and builds from balancer.NewSet, the picker's own
// copy with each ID and weight read once.
func (p *leastLoaded) Update(bs []balancer.Backend) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	set, err := balancer.NewSet(bs)
	if err != nil {
		return fmt.Errorf("leastloaded: %w", err)
	}
	p.snap.Store(&loadSnap{set: set, states: p.reg.Sync(set.Backends)})
	return nil
}

func (p *leastLoaded) Pick(req balancer.Request) (balancer.Backend, error) {
	s := p.snap.Load()
	if s == nil || s.set.Len() == 0 {
		return nil, balancer.ErrNoBackend
	}
	n := s.set.Len()
	start := int((p.next.Add(1) - 1) % uint64(n))
	best := -1
	for j := range n {
		i := (start + j) % n
		if s.set.IDs[i] == req.Avoid && n > 1 {
			continue
		}
		if best < 0 || s.states.At(i).Load() < s.states.At(best).Load() {
			best = i
		}
	}
	s.states.At(best).Inc()
	return s.set.Backends[best], nil
}

func (p *leastLoaded) Done(b balancer.Backend, _ balancer.Result) {
	if s := p.snap.Load(); s != nil {
		if st := s.states.Lookup(b); st != nil {
			st.Dec()
		}
	}
}

// Example writes a picker of one's own on balancer's shared pieces.
func Example() {
	p := &leastLoaded{}
	_ = p.Update(balancer.Endpoints("a:80", "b:80", "c:80"))

	x, _ := p.Pick(balancer.Request{}) // a: 1 in flight
	y, _ := p.Pick(balancer.Request{}) // b: 1 in flight
	p.Done(x, balancer.Result{})       // a: 0 in flight
	z, _ := p.Pick(balancer.Request{}) // a and c tie at 0; the scan starts at c
	p.Done(z, balancer.Result{})       // c: 0 in flight
	fmt.Println(x.ID(), y.ID(), z.ID())

	// b leaves and comes back: its in-flight count is carried by ID, so
	// the next two Picks go to a and c, not to b.
	_ = p.Update(balancer.Endpoints("a:80", "c:80"))
	_ = p.Update(balancer.Endpoints("a:80", "b:80", "c:80"))
	v, _ := p.Pick(balancer.Request{}) // the scan starts at a
	w, _ := p.Pick(balancer.Request{}) // at b, which has 1 in flight: c
	fmt.Println(v.ID(), w.ID())
	// Output:
	// a:80 b:80 c:80
	// a:80 c:80
}

func ExampleValidate() {
	err := balancer.Validate([]balancer.Backend{
		balancer.NewEndpoint("10.0.0.1:80", 2),
		balancer.NewEndpoint("10.0.0.1:80", 1),
	})
	fmt.Println(err)
	// Output: balancer: duplicate backend ID "10.0.0.1:80" at positions 0 and 1
}

// ExampleCanonicalAddrs reads backend addresses given as text: each is
// spelled the one way, and two spellings of one address are refused.
func ExampleCanonicalAddrs() {
	ids, err := balancer.CanonicalAddrs([]string{"10.0.0.1:080", "[0:0::1]:8080", "API.internal:443"})
	fmt.Println(ids, err)

	_, err = balancer.CanonicalAddrs([]string{"127.0.0.1:80", "127.0.0.1:080"})
	fmt.Println(err)
	fmt.Println(errors.Is(err, balancer.ErrDuplicateID))
	// Output:
	// [10.0.0.1:80 [::1]:8080 api.internal:443] <nil>
	// balancer: duplicate backend ID: "127.0.0.1:80" at position 0 and "127.0.0.1:080" at position 1 are both 127.0.0.1:80
	// true
}

// A Load is what a backend said of itself with its answer. Utilization is
// the figure gRFC A58 weighs by: the application's own when it sent one,
// the CPU's otherwise.
func ExampleLoad() {
	for _, l := range []balancer.Load{
		{},
		{CPU: 0.7, RPS: 120},
		{CPU: 0.7, Application: 0.4, RPS: 120},
	} {
		fmt.Println(l.Reported(), l.Utilization())
	}
	// Output:
	// false 0
	// true 0.7
	// true 0.4
}
