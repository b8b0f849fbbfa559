package balancertest

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// The rule PublishOrder checks, and why it is the one a caller can see.
//
// Calls to Update are serialised (balancer.Updater): each runs, its
// validation included, while it holds the writers' mutex, and publishes
// its set before it lets the mutex go. So Updates run one after the
// other, and the order they run in is the order of their first calls to
// one of their backends' ID or Weight methods, made under the mutex (a
// picker that reads a backend before taking it fails Serialised). From
// that, two things a caller can observe:
//
//   - When an Update makes its first call to one of its backends, the
//     Update that ran before it has published: a Pick made then returns
//     a backend of that Update's set.
//   - Once concurrent Updates have all returned, the set in force is that
//     of the Update whose first call came last.
//
// "The set of the Update that returned last" is not the rule: a sound
// Update can publish, unlock, and be descheduled before it returns,
// while another runs to its end. An Update that publishes after letting
// the mutex go breaks both rules whenever the next Update runs in
// between: that one then starts from a set that is not the latest, and
// the older set lands on top of the newer once both return.
//
// The window between the unlock and the publish is short. The check
// makes it wide the way the runtime allows: with one processor, a
// goroutine blocked on a sync.Mutex for more than a millisecond that
// wakes to find it taken puts the mutex in starvation mode, and then
// Unlock hands the mutex, and the processor, to that waiter at once, so
// that the waiter runs its Update before the one that unlocked goes on
// to publish (see handoff). Rounds of Updates from three goroutines on
// every processor follow, for flaws that need other interleavings (a
// snapshot built after the unlock). Neither can make a sound picker
// fail: the rules hold in every interleaving.

// witness is a Backend of a set PublishOrder gives to Update: the first
// call an Update makes to a backend of the set is recorded, and can park
// the Update there, as a gate does.
type witness struct {
	id  string
	w   int
	set *witnessSet
}

func (x *witness) ID() string  { x.set.visit(); return x.id }
func (x *witness) Weight() int { x.set.visit(); return x.w }

// witnessSet is one set given to Update, and what was seen of its Update.
type witnessSet struct {
	name    string
	rec     *recorder
	bs      []balancer.Backend
	started atomic.Bool
	// parked and release, when not nil, stop the Update at its first call
	// (after it is recorded) until release is closed.
	parked, release chan struct{}
}

func (s *witnessSet) visit() {
	if s.started.Swap(true) {
		return
	}
	s.rec.first(s)
	if s.parked != nil {
		close(s.parked)
		<-s.release
	}
}

// recorder keeps the order in which the Updates of one Balancer made
// their first calls.
type recorder struct {
	b     balancer.Balancer
	owner map[balancer.Backend]*witnessSet // by identity: no ID call
	mu    sync.Mutex
	last  *witnessSet // the set whose Update made its first call last
	errs  []error
	// direct makes the Picks of first calls in the Update's goroutine
	// rather than in goroutines of their own, which would reorder the
	// hand-off's goroutines: only once a Pick is known to return while an
	// Update is parked.
	direct atomic.Bool
}

func newRecorder(b balancer.Balancer) *recorder {
	return &recorder{b: b, owner: map[balancer.Backend]*witnessSet{}}
}

// set makes a set of n witnesses, weights 1 to 4. It must not be called
// while an Update runs (owner is read then).
func (r *recorder) set(name string, n int, park bool) *witnessSet {
	s := &witnessSet{name: fmt.Sprintf("%s (%d backends)", name, n), rec: r}
	if park {
		s.parked, s.release = make(chan struct{}), make(chan struct{})
	}
	for i := range n {
		x := &witness{id: fmt.Sprintf("%s-%d.test:8080", name, i), w: 1 + i%4, set: s}
		s.bs = append(s.bs, x)
		r.owner[x] = s
	}
	return s
}

// first records s's first call and checks that the set of the Update
// recorded before it is in force.
func (r *recorder) first(s *witnessSet) {
	r.mu.Lock()
	prev := r.last
	r.last = s
	r.mu.Unlock()
	if prev == nil {
		return
	}
	if err := r.inForce(prev, 8, func(err error) error {
		return fmt.Errorf("when the Update of %s made its first call to one of its backends (under the writers' mutex), the Update of %s had run before it, but %w", s.name, prev.name, err)
	}); err != nil {
		r.mu.Lock()
		r.errs = append(r.errs, err)
		r.mu.Unlock()
	}
}

// inForce makes picks picks, half of them retries, each in a goroutine
// of its own with a time limit (it may be made inside an Update), and
// reports the first that is not a backend of want, through wrap.
func (r *recorder) inForce(want *witnessSet, picks int, wrap func(error) error) error {
	for i := range picks {
		req := balancer.Request{Key: key(i)}
		if i%2 == 1 {
			req.Attempt, req.Avoid = 1+i%3, "removed-or-unknown.test:1"
		}
		var a answer
		if r.direct.Load() {
			a = pickRecovered(r.b, req)
		} else {
			c := make(chan answer, 1)
			go func() { c <- pickRecovered(r.b, req) }()
			select {
			case a = <-c:
			case <-time.After(blockedFor):
				return wrap(fmt.Errorf("a Pick blocked for %v: Pick must never wait for Update (NeverBlocks)", blockedFor))
			}
		}
		switch got := r.owner[a.b]; {
		case a.err != nil:
			return wrap(fmt.Errorf("Pick %+v returned %w", req, a.err))
		case a.b == nil:
			return wrap(fmt.Errorf("Pick %+v returned a nil backend", req))
		case got == nil:
			return wrap(fmt.Errorf("Pick %+v returned a backend of no set given to Update", req))
		case got != want:
			return wrap(fmt.Errorf("Pick %+v returned a backend of %s: publish the new set before releasing the writers' mutex", req, got.name))
		}
	}
	return nil
}

// answer is what a Pick returned.
type answer struct {
	b   balancer.Backend
	err error
}

// pickRecovered makes one Pick, turning a panic into an error.
func pickRecovered(b balancer.Balancer, req balancer.Request) (a answer) {
	defer func() {
		if p := recover(); p != nil {
			a = answer{err: fmt.Errorf("panic: %v", p)}
		}
	}()
	got, err := b.Pick(req)
	return answer{got, err}
}

// final checks, once every Update has returned, that the set of the
// Update recorded last is in force, and returns what was recorded wrong.
func (r *recorder) final(when string) error {
	r.mu.Lock()
	last, errs := r.last, r.errs
	r.errs = nil
	r.mu.Unlock()
	if len(errs) > 0 {
		return fmt.Errorf("%s: %w", when, errors.Join(errs...))
	}
	return r.inForce(last, 100, func(err error) error {
		return fmt.Errorf("%s, once every Update had returned, the set in force must be that of the Update that ran last, %s, but %w", when, last.name, err)
	})
}

// handoffSizes are the sizes of the three sets of each hand-off: the
// Update that holds the mutex first, the one that waits for it, and the
// one that takes it in between (A, W and C of handoff).
var handoffSizes = [][3]int{{1, 3, 2}, {17, 1, 5}, {256, 2, 1}}

// roundSizes are the sizes of the sets three goroutines give to Update at
// once, round after round: one large and slow to build beside small ones.
var roundSizes = [][3]int{{256, 1, 9}, {3, 64, 17}, {1, 2, 100}, {7, 1, 33}}

// checkPublishOrder: Updates take effect in the order they run (see the
// note above): a Pick made when an Update first reads one of its
// backends returns a backend of the set of the Update that ran before
// it, and after concurrent Updates the set in force is that of the one
// that ran last.
func checkPublishOrder(newBalancer func() balancer.Balancer) error {
	b := newBalancer()
	rec := newRecorder(b)
	s0 := rec.set("po0", 4, false)
	if err := update(b, s0.bs); err != nil {
		return err
	}
	for i, sz := range handoffSizes {
		if err := handoff(b, rec, i, sz); err != nil {
			return err
		}
	}
	for i, sz := range roundSizes {
		var sets [3]*witnessSet
		for g := range sets {
			sets[g] = rec.set(fmt.Sprintf("po%d-%d", i, g), sz[g], false)
		}
		start := make(chan struct{})
		var done [3]<-chan error
		for g := range done {
			done[g] = goErr(func() error {
				<-start
				return update(b, sets[g].bs)
			})
		}
		close(start)
		for _, d := range done {
			if err := <-d; err != nil {
				return err
			}
		}
		if err := rec.final(fmt.Sprintf("after round %d of %d of three concurrent Updates", i+1, len(roundSizes))); err != nil {
			return err
		}
	}
	return nil
}

// handoff runs one hand-off (see the note above) on one processor: an
// Update of A parked at its first call holds the mutex while an Update of
// W blocks on it for a few milliseconds. A goes on, and the goroutine that
// ran it calls Update of C at once, which takes the mutex before W wakes
// (the goroutine has not given up the processor), and parks at its first
// call. W runs, finds the mutex taken, and starves it. C goes on, and its
// Unlock hands the mutex, and the processor, to W.
func handoff(b balancer.Balancer, rec *recorder, i int, sz [3]int) error {
	measureMu.Lock() // the processor count is the process's
	defer measureMu.Unlock()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	// No collection during the hand-off: its preemptions would reorder
	// the goroutines the hand-off lines up.
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	a := rec.set(fmt.Sprintf("poA%d", i), sz[0], true)
	w := rec.set(fmt.Sprintf("poW%d", i), sz[1], false)
	c := rec.set(fmt.Sprintf("poC%d", i), sz[2], true)
	rec.direct.Store(false)
	doneAC := goErr(func() error {
		if err := update(b, a.bs); err != nil {
			return err
		}
		return update(b, c.bs)
	})
	select {
	case <-a.parked:
	case err := <-doneAC:
		return fmt.Errorf("an Update of %s returned (error %v) without a call to one of its backends", a.name, err)
	}
	rec.mu.Lock()
	errs := rec.errs
	rec.mu.Unlock()
	if len(errs) > 0 {
		close(a.release)
		close(c.release)
		<-doneAC
		return errors.Join(errs...) // a Pick made while A is parked blocked, or failed
	}
	rec.direct.Store(true)
	defer rec.direct.Store(false)
	doneW := goErr(func() error { return update(b, w.bs) })
	time.Sleep(5 * time.Millisecond) // W blocks on the mutex, long enough to starve
	go func() {
		<-c.parked
		time.Sleep(20 * time.Millisecond) // W runs, finds the mutex taken
		close(c.release)
	}()
	close(a.release)
	errAC, errW := <-doneAC, <-doneW
	if errAC != nil {
		return errAC
	}
	if errW != nil {
		return errW
	}
	return rec.final(fmt.Sprintf("after Updates of %s and %s from one goroutine, and of %s from another waiting for the first", a.name, c.name, w.name))
}
