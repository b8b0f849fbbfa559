package balancertest

import (
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// gate is a Backend whose ID and Weight methods park on their n-th call,
// counted across both, until released: a way to stop an Update half-way.
type gate struct {
	id      string
	parkAt  int64
	calls   atomic.Int64
	parked  chan struct{} // closed when a call parks
	release chan struct{} // closed to let it go on
}

func newGate(id string, parkAt int64) *gate {
	return &gate{id: id, parkAt: parkAt, parked: make(chan struct{}), release: make(chan struct{})}
}

func (g *gate) visit() {
	if g.calls.Add(1) == g.parkAt {
		close(g.parked)
		<-g.release
	}
}

func (g *gate) ID() string  { g.visit(); return g.id }
func (g *gate) Weight() int { g.visit(); return 1 }

// blockedFor is how long a check waits for a call that must not block
// before it calls it blocked. It only bounds the wait for a verdict: a
// correct picker answers in microseconds, and a slow machine can only make
// a broken one look correct, never the reverse.
const blockedFor = 2 * time.Second

// goErr runs f in a goroutine, turning a panic into an error, and returns
// the channel its result arrives on.
func goErr(f func() error) <-chan error {
	c := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				c <- fmt.Errorf("panic: %v\n%s", r, debug.Stack())
			}
		}()
		c <- f()
	}()
	return c
}

// parkUpdate starts Update(set) in a goroutine and waits for g to park. It
// reports false if the Update finished first (it never made g's parkAt-th
// call), with its error.
func parkUpdate(b balancer.Balancer, set []balancer.Backend, g *gate) (<-chan error, bool, error) {
	done := goErr(func() error { return b.Update(set) })
	select {
	case <-g.parked:
		return done, true, nil
	case err := <-done:
		return nil, false, err
	}
}

// updateFor is how long a check waits for an Update that must return (one
// released from a gate, one that waited for another). It is no verdict on
// speed: an Update may build a large table in each of several pickers
// (Maglev's, in every zone of a locality Balancer), slowly under -race on
// a loaded machine; it only keeps a stuck Update from hanging the check
// until checkTimeout.
const updateFor = 30 * time.Second

// finish releases g and waits for the Update parked on it.
func finish(g *gate, done <-chan error) error {
	close(g.release)
	select {
	case err := <-done:
		return err
	case <-time.After(updateFor):
		return errors.New("an Update did not return after its backend was released")
	}
}

// pickBound is how long the fastest of parkedPicks Picks made while an
// Update is parked may take. A sound Pick takes microseconds, even under
// -race; a loaded machine can stretch some of eight Picks made back to
// back, not all of them, while a Pick that waits on a running Update takes
// at least its wait every time. So a Pick that waits for Update for a few
// milliseconds or more fails, where before only one that never returned
// (blockedFor) did.
const (
	pickBound   = 2 * time.Millisecond
	parkedPicks = 8
)

// updateRecovered calls Update, turning a panic into its value.
func updateRecovered(b balancer.Balancer, bs []balancer.Backend) (panicked any, err error) {
	defer func() { panicked = recover() }()
	return nil, b.Update(bs)
}

// blockSets are the Updates NeverBlocks stops: with the gate last of a set
// of size n, at each of the first calls made to the gate's ID or Weight.
// Every call of a small set's Update, and the first few of larger ones,
// either side of 16 and 256: a picker may lock only where it treats a
// large set apart.
var blockSets = []struct{ n, calls int64 }{{3, 16}, {17, 4}, {257, 4}}

// checkNeverBlocks: Pick returns, fast, while an Update is stopped
// half-way, at each of the calls it makes to a backend's ID or Weight, in
// Updates of 3, 17 and 257 backends: of parkedPicks Picks made then, the
// fastest takes under pickBound.
func checkNeverBlocks(newBalancer func() balancer.Balancer) error {
	b := newBalancer()
	fb := feedback(b)
	cur := backends("nb", 3, true)
	if err := update(b, cur); err != nil {
		return err
	}
	for _, bset := range blockSets {
		for n := int64(1); n <= bset.calls; n++ {
			g := newGate(fmt.Sprintf("gate-%d-%d.test:1", bset.n, n), n)
			next := append(backends(fmt.Sprintf("nb%d-%d", bset.n, n), int(bset.n)-1, true), g)
			done, parked, err := parkUpdate(b, next, g)
			if !parked {
				close(g.release) // so that a later Update reading cur goes on
				if err != nil {
					return fmt.Errorf("update of a valid set of %d: %w", bset.n, err)
				}
				cur = next
				break // Update makes fewer than n calls: all tried
			}
			var fastest time.Duration
			pick := goErr(func() error {
				fastest = time.Duration(math.MaxInt64)
				for i := range parkedPicks {
					start := time.Now()
					got, err := b.Pick(balancer.Request{Key: key(int(n) + i)})
					fastest = min(fastest, time.Since(start))
					if err := member(got, err, members(cur, next)); err != nil {
						return err
					}
					fb.Done(got, balancer.Result{Latency: 1e6})
				}
				return nil
			})
			where := fmt.Sprintf("an Update of %d backends was parked in call %d to a backend's ID or Weight", bset.n, n)
			select {
			case err := <-pick:
				if err != nil {
					_ = finish(g, done)
					return fmt.Errorf("pick while %s: %w", where, err)
				}
				if fastest >= pickBound {
					_ = finish(g, done)
					return fmt.Errorf("the fastest of %d Picks made while %s took %v, want under %v: Pick must not wait for Update", parkedPicks, where, fastest, pickBound)
				}
			case <-time.After(blockedFor):
				ferr := finish(g, done)
				<-pick
				return fmt.Errorf("pick blocked for %v while %s (it returned once the Update went on; %v): Pick must never wait for Update", blockedFor, where, ferr)
			}
			if err := finish(g, done); err != nil {
				return err
			}
			cur = next
		}
	}
	return nil
}

// checkSerialised: calls to Update are serialised, validation included:
// an Update called while another is running waits for it, and the set in
// place at the end is the one of the call that started, and finished,
// last. A second Update must not overtake a first stopped half-way.
func checkSerialised(newBalancer func() balancer.Balancer) error {
	b := newBalancer()
	if err := update(b, backends("s0", 3, true)); err != nil {
		return err
	}
	g := newGate("first.test:1", 1)
	first := append(backends("s1", 3, false), g)
	second := backends("s2", 4, true)
	done1, parked, err := parkUpdate(b, first, g)
	if !parked {
		return fmt.Errorf("update of a valid set of %d never read a backend's ID or Weight (error %v)", len(first), err)
	}
	done2 := goErr(func() error { return b.Update(second) })
	select {
	case err := <-done2:
		if ferr := finish(g, done1); ferr != nil {
			return ferr
		}
		return fmt.Errorf("an Update returned (error %v) while an earlier one was still running, parked in its first call to a backend's ID: take the writers' mutex before validating, so that a slow Update that started first cannot overwrite a newer set", err)
	case <-time.After(blockedFor / 10):
		// Waiting, as it should.
	}
	if err := finish(g, done1); err != nil {
		return fmt.Errorf("first Update: %w", err)
	}
	select {
	case err := <-done2:
		if err != nil {
			return fmt.Errorf("second Update: %w", err)
		}
	case <-time.After(updateFor):
		return errors.New("the second Update did not return after the first finished")
	}
	if _, err := pickIn(b, members(second), 500, false, true); err != nil {
		return fmt.Errorf("after two Updates, the second waiting for the first: the second's set must be in place: %w", err)
	}
	return nil
}

// checkConcurrent: Pick and Done race with Updates from two goroutines. Run
// it under -race; it also fails on any pick outside every set ever
// published, and a panic in any goroutine fails the check rather than the
// test binary. Each updater waits, after each Update, until the pickers
// have picked a few times, so that every set is picked from while the
// other updater may be replacing it.
func checkConcurrent(newBalancer func() balancer.Balancer) error {
	b := newBalancer()
	fb := feedback(b)
	x := backends("x", 5, true)
	sets := [][]balancer.Backend{x, backends("y", 9, false), x[1:4], backends("z", 17, true)}
	union := members(sets...)
	var avoid []string // read by the pickers, never given to Update
	for _, set := range sets {
		avoid = append(avoid, set[0].ID())
	}
	if err := update(b, slices.Clone(sets[0])); err != nil {
		return err
	}
	const pickers, updaters, picks, updates = 4, 2, 2000, 12
	ks := keys(256)
	var picked, exited, updating atomic.Int64
	updating.Store(updaters)
	var errs []<-chan error
	for g := range pickers {
		errs = append(errs, goErr(func() error {
			defer exited.Add(1)
			for i := 0; i < picks || updating.Load() > 0; i++ {
				req := balancer.Request{Key: ks[(g*picks+i)%len(ks)], Attempt: i % 3}
				if i%5 == 0 {
					req.Avoid = avoid[i%len(avoid)]
				}
				got, err := b.Pick(req)
				if err := member(got, err, union); err != nil {
					return fmt.Errorf("picker %d, pick %d: %w", g, i, err)
				}
				fb.Done(got, results[i%len(results)])
				picked.Add(1)
			}
			return nil
		}))
	}
	for u := range updaters {
		errs = append(errs, goErr(func() error {
			defer updating.Add(-1)
			for i := range updates {
				// A copy each time: a picker that sorts the slice in place
				// (a flaw the Slice check reports) must not race the kit.
				if err := b.Update(slices.Clone(sets[(u+i)%len(sets)])); err != nil {
					return fmt.Errorf("updater %d, update %d: %w", u, i, err)
				}
				for start := picked.Load(); picked.Load() < start+pickers && exited.Load() == 0; {
					time.Sleep(20 * time.Microsecond) // frees the processor for the pickers
				}
				// A refused update in between must not disturb anything.
				if err := b.Update([]balancer.Backend{nil}); err == nil {
					return fmt.Errorf("updater %d, update %d: a set holding nil was accepted", u, i)
				}
			}
			return nil
		}))
	}
	var all []error
	for _, c := range errs {
		all = append(all, <-c)
	}
	return errors.Join(all...)
}
