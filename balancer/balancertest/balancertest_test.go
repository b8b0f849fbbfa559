package balancertest_test

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
)

// flaw is one way to break the reference picker.
type flaw int

const (
	sound               flaw = iota
	keepsRemoved             // Update adds to the set instead of replacing it
	allocates                // Pick returns a fresh copy of the backend
	ignoresEmpty             // Update with an empty set keeps the old one
	skipsValidate            // Update accepts anything
	retainsSlice             // Update keeps the caller's slice
	ignoresAvoid             // Pick never steps past Request.Avoid
	panicsOnUnknown          // Done panics for a backend it does not know
	nilWithoutError          // Pick returns (nil, nil) on an empty set
	wrapsNoBackend           // Pick wraps ErrNoBackend
	copiesBackend            // Pick returns a copy made at Update, with the same ID
	removedOnRetry           // retries may return a backend of the previous set
	rarelyRemoved            // one pick in 10,000 returns a backend of the previous set
	avoidSmallOnly           // Avoid is honoured in sets of up to 8 only
	avoidFirstRetryOnly      // Avoid is ignored from Attempt 2 on
	panicsOnNegative         // a negative Attempt indexes out of range
	sortsInPlace             // Update sorts the caller's slice
	retainsLarge             // Update keeps the caller's slice when it is large
	blocksPick               // Pick takes a read lock that Update holds
	validatesUnlocked        // Update validates before taking its mutex
	rereadsWeight            // Update reads weights again after validating
	derefsNil                // Done dereferences a nil *Endpoint
	floodsAbandoned          // learns latency 0 from abandoned or zero Results
	allocatesHalf            // Pick allocates on every other call
	allocatesOnRetry         // Pick allocates from Attempt 2 on
	allocatesOnFailure       // Done allocates for a failed request
	panicsConcurrently       // Pick panics in a set of 17 (only the Concurrent check has one)
	nilConcurrently          // Pick returns (nil, nil) in a set of 17
	hashes                   // sound, but a hash picker: the key's home, then Attempt steps on
	hashIgnoresAttempt       // a hash picker whose every attempt goes home
	hashRepeats              // a hash picker whose attempts alternate between two backends
	hashPerProcess           // a hash picker whose retry order differs from one instance to the next

	// Flaws of a second round, each missed by the kit before it grew the
	// check that catches it.
	removedAbove64      // Update keeps removed backends when the new set has more than 64
	removedAfterUpdates // Update keeps removed backends from the 17th Update on
	avoidAbove64        // Avoid is honoured in sets of up to 64 only
	avoidAfterUpdates   // Avoid is ignored from the 17th Update on
	waitsOnUpdate       // Pick waits up to 20 ms while an Update runs
	keepsOldValues      // Update keeps the Backend values of the IDs it knew
	keepsOldWeights     // Update keeps the weights of the IDs it knew
	allocatesRarely     // Pick allocates once in 4099 calls
	allocatesEvery300   // Pick allocates once in 300 calls
	panicsOnNegLatency  // Done indexes a histogram by milliseconds: a negative latency panics
	panicsOnRefused     // Done logs a refused connection's local address, which is nil
	allocatesOnRefused  // Done formats the error of a refused connection
	allocatesOnTimeout  // Done formats the error of a network timeout
	learns              // sound: a learner, picking the lowest latency seen
	learnsAbandoned     // a learner that takes an abandoned request's latency as a sample
	ejectsAbandoned     // ejects a backend after 3 errors in a row, abandoned ones included
	hashByPosition      // a hash picker that places backends by position in the slice
	keyedByPosition     // a learner that keeps its state by position, not by ID
	leaksAbandoned      // Done counts an abandoned request off no counter
	dropsRemoved        // an Update that removes a backend forgets every count
	subsets             // sound: round robin over a subset of 3, by a hash salted per instance
	ignoresLocality     // Update accepts a priority outside [0, MaxPriority]

	// Flaws of a third round (issue 24), each missed by the kit before it
	// grew the check that catches it.
	blocksAbove16      // Pick takes a read lock that Update holds, in Updates of more than 16
	rereadsWeightFrom8 // Update reads weights again after validating, in sets of 8 or more
	publishesUnlocked  // Update publishes its snapshot after releasing its mutex
	redrawsSubset      // a subset of 3 whose salt is drawn anew at every Update
	starvesSmallest    // never picks the backend with the smallest ID on a first try
	starvesNinth       // never picks the ninth backend of the slice given on a first try
	dividesByZeroRPS   // Done divides by a report's rps, as an integer
	collapsesKeys      // a hash picker that sends every key home to one backend after an Update that changes only weights

	// Flaws of the hash keys (issue 27.5).
	hashKeysIgnored   // a hash picker that reads hash keys but places backends by ID
	hashKeyOnPick     // a hash picker that reads the picked backend's hash key in Pick
	hashKeysDuplicate // a hash picker that accepts two backends with one placement key
)

// learner reports whether f picks by latency.
func (f flaw) learner() bool {
	return f == learns || f == learnsAbandoned || f == keyedByPosition || f == floodsAbandoned
}

// hash reports whether f picks by the key's hash.
func (f flaw) hash() bool {
	return f == hashes || f == hashIgnoresAttempt || f == hashRepeats || f == hashPerProcess || f == hashByPosition ||
		f == collapsesKeys || f == hashKeysIgnored || f == hashKeyOnPick || f == hashKeysDuplicate
}

// subset reports whether f serves a subset of 3.
func (f flaw) subset() bool { return f == subsets || f == redrawsSubset }

// ref is a small correct picker (weighted round robin, a hash of the key
// for the hash flaws, or lowest latency for the learners, with in-flight
// counting) that a flaw can break in one place.
type ref struct {
	flaw     flaw
	salt     int          // for hashPerProcess: differs between instances
	mu       sync.RWMutex // writers; and readers too, for blocksPick
	cur      atomic.Pointer[refSnap]
	next     atomic.Uint64
	updating atomic.Bool // an Update runs, for waitsOnUpdate
	big      atomic.Bool // an Update of more than 16 runs, for blocksAbove16
	reg      balancer.Registry[refState]
	updates  int // successful Updates; guarded by mu
}

var _ balancer.InFlightCounter = (*ref)(nil)

type refState struct {
	balancer.InFlight
	last    atomic.Int64 // the latency learned, for the learners; 0 before any
	fails   atomic.Int64 // errors in a row, for ejectsAbandoned
	ejected atomic.Bool  // for ejectsAbandoned
	weight  atomic.Int64 // from reports, for dividesByZeroRPS
}

// guess is what a learner takes a backend it has not measured to answer
// in: without one, an unmeasured backend would look free and draw every
// request (floodsAbandoned has none).
const guess = int64(100 * time.Millisecond)

type refSnap struct {
	bs      []balancer.Backend
	weights []int              // bs[i]'s weight, as validated, at most 16
	sched   []int              // indices of bs, each as often as its weight
	sorted  []int              // indices of bs in the order of their IDs, for the hash pickers
	copies  []balancer.Backend // for copiesBackend
	states  balancer.States[refState]
	pos     []*refState          // keyedByPosition: states by position
	byID    map[string]*refState // keyedByPosition: pos by ID
	prev    *refSnap             // for removedOnRetry and rarelyRemoved
	gen     int                  // the Update that published it
	members []string             // the subset's IDs, for the subset pickers
	// collapsed is set, for collapsesKeys, by an Update that kept every
	// ID and changed a weight: every key goes to one home from then on.
	collapsed bool
}

// at returns the state of bs[i].
func (s *refSnap) at(i int) *refState {
	if s.pos != nil {
		return s.pos[i]
	}
	return s.states.At(i)
}

// lookup returns the state of the backend with this ID, or nil.
func (s *refSnap) lookup(id string) *refState {
	if s.byID != nil {
		return s.byID[id]
	}
	return s.states.LookupID(id)
}

// keep makes x escape to the heap, safely from any goroutine, so that a
// flawed picker's allocations are real.
func keep(x any) {
	sinkMu.Lock()
	sink = x
	sinkMu.Unlock()
}

var (
	sinkMu sync.Mutex
	sink   any
)

func newRef(f flaw) func() balancer.Balancer {
	var made atomic.Int64
	return func() balancer.Balancer {
		r := &ref{flaw: f, salt: int(made.Add(1))}
		r.cur.Store(&refSnap{})
		if f.subset() {
			return subsetRef{r}
		}
		return r
	}
}

// subsetRef is a subset picker: a ref that says which backends it serves,
// as package subset's Balancer does.
type subsetRef struct{ *ref }

// Subset returns the IDs of the backends served, all of a set of 3 or
// fewer.
func (s subsetRef) Subset() []string {
	snap := s.cur.Load()
	if len(snap.bs) <= 3 {
		ids := make([]string, len(snap.bs))
		for i, b := range snap.bs {
			ids[i] = b.ID()
		}
		return ids
	}
	return slices.Clone(snap.members)
}

func (r *ref) Update(bs []balancer.Backend) error {
	if r.flaw == validatesUnlocked {
		if err := balancer.Validate(bs); err != nil {
			return err
		}
	}
	r.mu.Lock()
	locked := true // publishesUnlocked unlocks early
	defer func() {
		if locked {
			r.mu.Unlock()
		}
	}()
	r.updating.Store(true)
	defer r.updating.Store(false)
	if r.flaw == blocksAbove16 && len(bs) > 16 {
		r.big.Store(true) // under mu: a Pick that sees it waits for the Update
		defer r.big.Store(false)
	}
	weightOf := map[string]int{}   // the weights validation read
	placeOf := map[string]string{} // the hash pickers' placement keys, by ID
	if r.flaw != skipsValidate && r.flaw != validatesUnlocked {
		set, err := balancer.NewSet(bs)
		if err != nil && (r.flaw != ignoresLocality || !errors.Is(err, balancer.ErrBadLocality)) {
			return err
		}
		for i, id := range set.IDs {
			weightOf[id] = set.Weights[i]
		}
		if r.flaw.hash() {
			keys, err := balancer.HashKeys(set)
			if err != nil && r.flaw != hashKeysDuplicate {
				return err
			}
			for i, id := range set.IDs {
				if keys == nil { // hashKeysDuplicate: unchecked
					placeOf[id] = balancer.HashKeyOf(set.Backends[i])
				} else if r.flaw != hashKeysIgnored {
					placeOf[id] = keys[i]
				}
			}
		}
	}
	if r.flaw == ignoresEmpty && len(bs) == 0 {
		return nil
	}
	old := r.cur.Load()
	oldWeight := map[string]int{}
	oldValue := map[string]balancer.Backend{}
	for i, b := range old.bs {
		oldWeight[b.ID()], oldValue[b.ID()] = old.weights[i], b
	}
	next := append([]balancer.Backend(nil), bs...)
	switch r.flaw {
	case keepsRemoved, removedAbove64, removedAfterUpdates:
		if (r.flaw == removedAbove64 && len(bs) <= 64) || (r.flaw == removedAfterUpdates && r.updates < 16) {
			break
		}
		seen := map[string]bool{}
		for _, b := range bs {
			seen[b.ID()] = true
		}
		for _, b := range old.bs {
			if !seen[b.ID()] {
				next = append(next, b)
			}
		}
	case retainsSlice:
		next = bs
	case retainsLarge:
		if len(bs) > 32 {
			next = bs
		}
	case sortsInPlace:
		slices.SortFunc(bs, func(a, b balancer.Backend) int { return strings.Compare(a.ID(), b.ID()) })
	case rereadsWeight, rereadsWeightFrom8:
		if r.flaw == rereadsWeightFrom8 && len(bs) < 8 {
			break
		}
		for _, b := range bs {
			keep(make([]byte, balancer.WeightOf(b))) // panics on a negative weight
		}
	case skipsValidate:
		// Keep only what Registry can hold, so the flaw is the lack of
		// validation and not a crash.
		next = next[:0:0]
		for _, b := range bs {
			if b != nil && b.ID() != "" {
				next = append(next, b)
			}
		}
	case keepsOldValues:
		for i, b := range next {
			if v, ok := oldValue[b.ID()]; ok {
				next[i] = v
			}
		}
	case dropsRemoved:
		for _, b := range old.bs {
			if !slices.ContainsFunc(bs, func(x balancer.Backend) bool { return x.ID() == b.ID() }) {
				r.reg = balancer.Registry[refState]{} // every count forgotten
				break
			}
		}
	}
	prev := *old    // a copy: the published one is immutable
	prev.prev = nil // keep one generation only
	r.updates++
	s := &refSnap{bs: next, prev: &prev, gen: r.updates, collapsed: old.collapsed}
	if r.flaw == collapsesKeys && len(old.bs) == len(next) && len(next) > 1 {
		changed := false
		for _, b := range next {
			v, known := oldWeight[b.ID()]
			if !known {
				changed = false
				break
			}
			changed = changed || v != min(max(weightOf[b.ID()], 1), 16)
		}
		s.collapsed = s.collapsed || changed
	}
	inSubset := r.subset(next)
	for i, b := range next {
		if r.flaw.subset() && inSubset(i) {
			s.members = append(s.members, b.ID())
		}
		id := b.ID()
		w, ok := weightOf[id]
		if v, known := oldWeight[id]; !ok || (known && r.flaw == keepsOldWeights) {
			w = v // removed and kept, or a flaw
		}
		if w == 0 {
			w = balancer.WeightOf(b) // not validated
		}
		w = min(max(w, 1), 16)
		s.weights = append(s.weights, w)
		for range w {
			if inSubset(i) {
				s.sched = append(s.sched, i)
			}
		}
		s.sorted = append(s.sorted, i)
		s.copies = append(s.copies, balancer.NewEndpoint(id, 1))
	}
	place := func(b balancer.Backend) string {
		if k, ok := placeOf[b.ID()]; ok {
			return k
		}
		return b.ID()
	}
	slices.SortFunc(s.sorted, func(a, b int) int { return strings.Compare(place(next[a]), place(next[b])) })
	if r.flaw == keyedByPosition {
		s.byID = map[string]*refState{}
		for i, b := range next {
			st := new(refState)
			if i < len(old.pos) {
				st = old.pos[i] // whoever was there before
			}
			s.pos = append(s.pos, st)
			s.byID[b.ID()] = st
		}
	} else {
		s.states = r.reg.Sync(next)
	}
	if r.flaw == publishesUnlocked {
		locked = false
		r.mu.Unlock()
	}
	r.cur.Store(s)
	return nil
}

// subset returns, for the subsets picker, whether bs[i] is one of the 3
// backends this instance serves (those whose IDs hash highest with its
// salt, as a rendezvous subset with a random salt chooses); for every
// other picker, true.
func (r *ref) subset(bs []balancer.Backend) func(i int) bool {
	if !r.flaw.subset() || len(bs) <= 3 {
		return func(int) bool { return true }
	}
	salt := r.salt
	if r.flaw == redrawsSubset {
		salt = 1000 + r.updates // a new draw at every Update
	}
	score := func(i int) uint64 {
		h := uint64(14695981039346656037)
		for _, c := range []byte(fmt.Sprint(salt, "/", bs[i].ID())) {
			h = (h ^ uint64(c)) * 1099511628211
		}
		return h
	}
	order := make([]int, len(bs))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(score(b), score(a)) })
	top := order[:3]
	return func(i int) bool { return slices.Contains(top, i) }
}

func (r *ref) Pick(req balancer.Request) (balancer.Backend, error) {
	if r.flaw == blocksPick || (r.flaw == blocksAbove16 && r.big.Load()) {
		r.mu.RLock()
		defer r.mu.RUnlock()
	}
	for start := time.Now(); r.flaw == waitsOnUpdate && r.updating.Load() && time.Since(start) < 20*time.Millisecond; {
		time.Sleep(200 * time.Microsecond)
	}
	s := r.cur.Load()
	n := len(s.bs)
	switch {
	case n == 0 && r.flaw == nilWithoutError:
		return nil, nil
	case n == 0 && r.flaw == wrapsNoBackend:
		return nil, fmt.Errorf("ref: %w", balancer.ErrNoBackend)
	case n == 0:
		return nil, balancer.ErrNoBackend
	case n == 17 && r.flaw == panicsConcurrently:
		panic("ref: seventeen")
	case n == 17 && r.flaw == nilConcurrently:
		return nil, nil
	}
	k := r.next.Add(1) - 1
	i := s.sched[k%uint64(len(s.sched))]
	if r.flaw.hash() {
		i = r.hashIndex(s, req)
		if r.flaw == hashKeyOnPick {
			_ = balancer.HashKeyOf(s.bs[i])
		}
	}
	if r.flaw == panicsOnNegative && req.Attempt < 0 {
		i = (i + req.Attempt) % n // negative for most negative attempts
	}
	if r.flaw.learner() {
		est := func(j int) int64 {
			e := s.at(j).last.Load()
			if e == 0 && r.flaw != floodsAbandoned {
				return guess
			}
			return e
		}
		for j, from := 0, i; j < n; j++ {
			if c := (from + j) % n; est(c) < est(i) {
				i = c
			}
		}
	}
	for j := 0; r.flaw == ejectsAbandoned && j < n && s.at(i).ejected.Load(); j++ {
		i = (i + 1) % n
	}
	if n > 1 && req.Attempt == 0 && ((r.flaw == starvesSmallest && i == s.sorted[0]) || (r.flaw == starvesNinth && i == 8)) {
		i = (i + 1) % n // an off-by-one that skips one backend
	}
	avoid := r.flaw != ignoresAvoid &&
		!(r.flaw == avoidSmallOnly && n > 8) &&
		!(r.flaw == avoidAbove64 && n > 64) &&
		!(r.flaw == avoidAfterUpdates && s.gen > 16) &&
		!(r.flaw == avoidFirstRetryOnly && req.Attempt >= 2)
	if avoid && s.bs[i].ID() == req.Avoid {
		i = (i + 1) % n
	}
	if p := s.prev; p != nil && len(p.bs) > 0 {
		if (r.flaw == removedOnRetry && req.Attempt > 0 && req.Avoid != "") ||
			(r.flaw == rarelyRemoved && rand.IntN(10000) == 0) {
			return p.bs[i%len(p.bs)], nil
		}
	}
	switch {
	case r.flaw == allocatesHalf && k%2 == 0,
		r.flaw == allocatesOnRetry && req.Attempt >= 2,
		r.flaw == allocatesRarely && k%4099 == 4098,
		r.flaw == allocatesEvery300 && k%300 == 299:
		keep(new([32]byte))
	}
	s.at(i).Inc()
	switch r.flaw {
	case allocates:
		return balancer.NewEndpoint(s.bs[i].ID(), 1), nil
	case copiesBackend:
		return s.copies[i], nil
	}
	return s.bs[i], nil
}

// hashIndex is the hash pickers' choice: the key's home, FNV-1a mod n over
// the backends sorted by ID, and for Attempt a the a-th backend after it,
// as the flaw allows.
func (r *ref) hashIndex(s *refSnap, req balancer.Request) int {
	n := len(s.bs)
	h := uint64(14695981039346656037)
	for i := 0; i < len(req.Key); i++ {
		h = (h ^ uint64(req.Key[i])) * 1099511628211
	}
	home := int(h % uint64(n))
	if s.collapsed {
		home = 0 // every key, once weights have changed
	}
	a := max(req.Attempt, 0) % n
	switch r.flaw {
	case hashIgnoresAttempt:
		a = 0
	case hashRepeats:
		a %= 2
	case hashPerProcess:
		if a > 0 { // the same home, but retries stepped by a salt
			a = a * (1 + r.salt%2) % n
		}
	case hashByPosition:
		return (home + a) % n
	}
	return s.sorted[(home+a)%n]
}

// histogram is where panicsOnNegLatency counts latencies, by millisecond,
// the last bucket taking all from a second on.
var histogram [1001]atomic.Int64

func (r *ref) Done(b balancer.Backend, res balancer.Result) {
	if r.flaw == derefsNil {
		if e, ok := b.(*balancer.Endpoint); ok {
			keep(*e)
		}
	}
	if r.flaw == allocatesOnFailure && res.Err != nil {
		keep(res.Err.Error() + "!")
	}
	switch {
	case r.flaw == panicsOnNegLatency:
		histogram[min(res.Latency/time.Millisecond, 1000)].Add(1) // negative: out of range
	case r.flaw == panicsOnRefused:
		logRefused(res.Err)
	case r.flaw == allocatesOnRefused && errors.Is(res.Err, syscall.ECONNREFUSED):
		keep(fmt.Sprint("refused: ", res.Err))
	case r.flaw == allocatesOnTimeout && errors.Is(res.Err, os.ErrDeadlineExceeded):
		keep(fmt.Sprint("timed out: ", res.Err))
	}
	var st *refState
	if b != nil {
		st = r.cur.Load().lookup(b.ID())
	}
	if st == nil {
		if r.flaw == panicsOnUnknown {
			panic("unknown backend")
		}
		return
	}
	if r.flaw == leaksAbandoned && res.Abandoned() {
		return
	}
	if l := res.Load; r.flaw == dividesByZeroRPS && l.Reported() {
		// A weight from the report, qps over utilisation in thousandths,
		// dividing by a count of requests.
		st.weight.Store(int64(1000*l.Utilization()) / int64(l.RPS))
	}
	st.Dec()
	switch r.flaw {
	case floodsAbandoned:
		st.last.Store(int64(res.Latency))
	case learns, keyedByPosition:
		if res.Sample() {
			st.last.Store(int64(res.Latency))
		} else if res.Err != nil && !res.Abandoned() {
			st.last.Store(int64(10 * time.Second)) // a failure: slow
		}
	case learnsAbandoned:
		if res.Latency > 0 {
			st.last.Store(int64(res.Latency))
		}
	case ejectsAbandoned:
		if res.Err == nil {
			st.fails.Store(0)
		} else if st.fails.Add(1) >= 3 {
			st.ejected.Store(true)
		}
	}
}

// logRefused keeps the local address of a refused connection, which a
// dial's OpError does not have: its nil Source panics.
func logRefused(err error) {
	var op *net.OpError
	if errors.As(err, &op) && errors.Is(op, syscall.ECONNREFUSED) {
		keep(op.Source.String())
	}
}

// InFlight is the count of the backend with this ID.
func (r *ref) InFlight(id string) int64 {
	if st := r.cur.Load().lookup(id); st != nil {
		return st.Load()
	}
	return 0
}

func TestKitPassesSoundPicker(t *testing.T) {
	balancertest.Run(t, newRef(sound))
}

// A sound hash picker passes too, the Retries check included: it is the
// picker that check is for.
func TestKitPassesSoundHashPicker(t *testing.T) {
	balancertest.Run(t, newRef(hashes))
}

// A sound learner passes too: Abandoned, AbandonedNeutral and Order are
// the checks for learners, and a learner that keeps what it learns by ID
// and learns only from balancer.Result.Sample passes them.
func TestKitPassesSoundLearner(t *testing.T) {
	balancertest.Run(t, newRef(learns))
}

// A picker whose instances each serve a different subset of the set (a
// random salt per instance, as gRFC A68's random subsetting draws) passes:
// checks that compare one instance with another skip what they cannot
// judge for it.
func TestKitPassesSoundSubset(t *testing.T) {
	balancertest.Run(t, newRef(subsets))
}

// wrapper is a decorator around a ref: it passes every call on and offers
// the picker inside through Unwrap, as lbkit's decorators do. With
// dropsAbandoned set, it passes no abandoned Done on.
type wrapper struct {
	inner          *ref
	dropsAbandoned bool
}

func newWrapper(dropsAbandoned bool) func() balancer.Balancer {
	inner := newRef(sound)
	return func() balancer.Balancer {
		return &wrapper{inner: inner().(*ref), dropsAbandoned: dropsAbandoned}
	}
}

func (w *wrapper) Update(bs []balancer.Backend) error { return w.inner.Update(bs) }

func (w *wrapper) Pick(req balancer.Request) (balancer.Backend, error) { return w.inner.Pick(req) }

func (w *wrapper) Done(b balancer.Backend, r balancer.Result) {
	if w.dropsAbandoned && r.Abandoned() {
		return
	}
	w.inner.Done(b, r)
}

// Unwrap returns the picker inside.
func (w *wrapper) Unwrap() balancer.Picker { return w.inner }

// The kit reads in-flight counts through a decorator's Unwrap: a sound one
// passes, and one that passes no abandoned Done on leaves the counts of
// the picker inside above zero, which the InFlight check finds.
func TestKitReadsCountsThroughUnwrap(t *testing.T) {
	balancertest.Run(t, newWrapper(false))
	err := balancertest.RunCheck("InFlight", newWrapper(true))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "InFlight(")
}

// counting is a decorator around a ref that counts requests in flight
// itself, as a metrics decorator might, and says so (InFlight), so that
// the kit's InFlight check reads its counts first. With dropsFailures
// set, it passes no Done of a failed request on: its own counts are
// right, those of the picker inside never come down.
type counting struct {
	inner         *ref
	dropsFailures bool
	mu            sync.Mutex // writers
	reg           balancer.Registry[balancer.InFlight]
	states        atomic.Pointer[balancer.States[balancer.InFlight]]
}

var _ balancer.InFlightCounter = (*counting)(nil)

func newCounting(dropsFailures bool) func() balancer.Balancer {
	inner := newRef(sound)
	return func() balancer.Balancer {
		c := &counting{inner: inner().(*ref), dropsFailures: dropsFailures}
		c.states.Store(&balancer.States[balancer.InFlight]{})
		return c
	}
}

func (c *counting) Update(bs []balancer.Backend) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	set, err := balancer.NewSet(bs)
	if err != nil {
		return err
	}
	if err := c.inner.Update(set.Backends); err != nil {
		return err
	}
	st := c.reg.Sync(set.Backends)
	c.states.Store(&st)
	return nil
}

func (c *counting) Pick(req balancer.Request) (balancer.Backend, error) {
	b, err := c.inner.Pick(req)
	if err == nil {
		if st := c.states.Load().Lookup(b); st != nil {
			st.Inc()
		}
	}
	return b, err
}

func (c *counting) Done(b balancer.Backend, r balancer.Result) {
	if st := c.states.Load().Lookup(b); st != nil {
		st.Dec()
	}
	if c.dropsFailures && r.Err != nil && !r.Abandoned() {
		return
	}
	c.inner.Done(b, r)
}

// InFlight is the decorator's own count.
func (c *counting) InFlight(id string) int64 {
	if st := c.states.Load().LookupID(id); st != nil {
		return st.Load()
	}
	return 0
}

// Unwrap returns the picker inside.
func (c *counting) Unwrap() balancer.Picker { return c.inner }

// The kit reads the counts of every layer that counts, down the stack: a
// decorator that counts for itself and passes every Done on passes, and
// one whose own counts are right but that passes no Done of a failure on
// leaves the counts of the picker inside above zero, which the InFlight
// check finds.
func TestKitReadsEveryCounter(t *testing.T) {
	balancertest.Run(t, newCounting(false))
	err := balancertest.RunCheck("InFlight", newCounting(true))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the *balancertest_test.ref one layer down (Unwrap): after Done for 20 of them")
}

// hflaw is one way to break healthRef.
type hflaw int

const (
	hSound             hflaw = iota
	hIgnoresHealth           // UpdateHealth hands on every backend, healthy or not
	hIgnoresLength           // UpdateHealth takes health flags of another length
	hKeepsFlags              // UpdateHealth keeps the caller's slices and Pick reads them
	hHalfApplied             // a refused UpdateHealth has already replaced the set
	hUpdateKeepsHealth       // Update keeps the health each known ID had
	hPanicsEarly             // serves every backend once a quarter of the set is unhealthy
	hIgnoresPriority         // serves the healthy backends of every priority level once one is unhealthy
)

// healthRef is a balancer.HealthUpdater over a sound ref: the healthy
// backends of the first priority level that has any go to the ref, as
// locality hands each zone's picker its own, and every backend when none
// is healthy (panic).
type healthRef struct {
	*ref
	flaw hflaw
	mu   sync.Mutex      // writers
	was  map[string]bool // health by ID, for hUpdateKeepsHealth; guarded by mu
	kept atomic.Pointer[keptSlices]
	n    atomic.Uint64
}

// keptSlices are the caller's slices, which hKeepsFlags keeps.
type keptSlices struct {
	bs []balancer.Backend
	up []bool
}

func newHealthRef(f hflaw) func() balancer.Balancer {
	inner := newRef(sound)
	return func() balancer.Balancer { return &healthRef{ref: inner().(*ref), flaw: f} }
}

func (h *healthRef) UpdateHealth(bs []balancer.Backend, healthy []bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.updateHealth(bs, healthy)
}

// updateHealth is UpdateHealth with mu held.
func (h *healthRef) updateHealth(bs []balancer.Backend, healthy []bool) error {
	if len(healthy) != len(bs) && h.flaw != hIgnoresLength {
		if h.flaw == hHalfApplied {
			_ = h.ref.Update(bs)
		}
		return fmt.Errorf("healthref: %d health flags for %d backends", len(healthy), len(bs))
	}
	if err := balancer.Validate(bs); err != nil {
		return err
	}
	var up []balancer.Backend
	was := map[string]bool{}
	top := -1 // the first priority level with a healthy backend
	for i, b := range bs {
		ok := i >= len(healthy) || healthy[i] || h.flaw == hIgnoresHealth
		if p := balancer.LocalityOf(b).Priority; ok && (top < 0 || p < top) {
			top = p
		}
		was[b.ID()] = ok
	}
	anyDown := slices.Contains(healthy, false)
	for _, b := range bs {
		if was[b.ID()] && (balancer.LocalityOf(b).Priority == top || h.flaw == hIgnoresPriority && anyDown) {
			up = append(up, b)
		}
	}
	if n := len(up); n == 0 || (h.flaw == hPanicsEarly && 4*n < 3*len(bs)) {
		up = bs // panic
	}
	if err := h.ref.Update(up); err != nil {
		return err
	}
	h.was = was
	if h.flaw == hKeepsFlags {
		h.kept.Store(&keptSlices{bs, healthy})
	}
	return nil
}

func (h *healthRef) Update(bs []balancer.Backend) error {
	up := make([]bool, len(bs))
	h.mu.Lock() // one critical section, reads included: see PublishOrder
	defer h.mu.Unlock()
	for i, b := range bs {
		up[i] = true
		if ok, known := h.was[idOf(b)]; known && h.flaw == hUpdateKeepsHealth {
			up[i] = ok
		}
	}
	return h.updateHealth(bs, up)
}

// idOf is b's ID, or "" for nil.
func idOf(b balancer.Backend) string {
	if b == nil {
		return ""
	}
	return b.ID()
}

func (h *healthRef) Pick(req balancer.Request) (balancer.Backend, error) {
	if k := h.kept.Load(); k != nil {
		// Round robin over what the caller's slices say now.
		n := int(h.n.Add(1) % uint64(len(k.bs)))
		for j := range k.bs {
			if i := (n + j) % len(k.bs); k.up[i] {
				return k.bs[i], nil
			}
		}
	}
	return h.ref.Pick(req)
}

// A sound HealthUpdater passes the whole kit, and one broken in each way
// fails the HealthUpdate check; a Balancer that is no HealthUpdater passes
// it at once (every other test here).
func TestKitChecksHealthUpdater(t *testing.T) {
	balancertest.Run(t, newHealthRef(hSound))
	for _, tt := range []struct {
		flaw hflaw
		name string
		want string // in the error
	}{
		{hIgnoresHealth, "picks unhealthy backends", "marked unhealthy, 7 of 8 healthy"},
		{hIgnoresLength, "takes flags of another length", "returned nil"},
		{hKeepsFlags, "keeps the caller's slices", "overwrote the slices"},
		{hHalfApplied, "applies a refused set", "previous set and health must stay"},
		{hUpdateKeepsHealth, "Update keeps the old health", "Update must mean every backend healthy"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := balancertest.RunCheck("HealthUpdate", newHealthRef(tt.flaw))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	for _, tt := range []struct {
		flaw hflaw
		name string
		want string // in the error
	}{
		{hPanicsEarly, "gives up with three quarters healthy", "with priority 0: 2 of 3 healthy: a first try"},
		{hIgnoresPriority, "ignores priorities", "past a level whose backends are all healthy"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := balancertest.RunCheck("HealthLevels", newHealthRef(tt.flaw))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// failedChecks returns the names of the checks an error from Test reports.
func failedChecks(err error) []string {
	var failed []string
	names := balancertest.CheckNames()
	for _, line := range strings.Split(err.Error(), "\n") {
		if name, _, ok := strings.Cut(line, ": "); ok && slices.Contains(names, name) {
			failed = append(failed, name)
		}
	}
	return failed
}

// TestKitCatchesFlaws proves each check can fail: a picker broken in one way
// fails the check for that rule, and names it. Each row runs that check
// alone (the whole kit for each row would multiply the test's time by
// the number of rows); TestKitPasses* run every check on the sound
// pickers.
func TestKitCatchesFlaws(t *testing.T) {
	tests := []struct {
		flaw flaw
		name string
		want string // the check that must fail
	}{
		{keepsRemoved, "keeps removed backends", "Removed"},
		{allocates, "allocates per pick", "Allocs"},
		{ignoresEmpty, "ignores an empty set", "Empty"},
		{skipsValidate, "skips validation", "InvalidUpdate"},
		{retainsSlice, "retains the caller's slice", "Slice"},
		{ignoresAvoid, "ignores Avoid", "Avoid"},
		{panicsOnUnknown, "panics on an unknown Done", "DoneUnknown"},
		{nilWithoutError, "returns nil without an error", "Empty"},
		{wrapsNoBackend, "wraps ErrNoBackend", "Empty"},
		{copiesBackend, "returns copies with the same ID", "InSet"},
		{removedOnRetry, "returns removed backends on retries", "Removed"},
		{avoidSmallOnly, "honours Avoid in small sets only", "Avoid"},
		{avoidFirstRetryOnly, "ignores Avoid from attempt 2", "Avoid"},
		{panicsOnNegative, "panics on a negative attempt", "Attempt"},
		{sortsInPlace, "sorts the caller's slice", "Slice"},
		{retainsLarge, "retains large slices", "Slice"},
		{blocksPick, "Pick waits for Update", "NeverBlocks"},
		{validatesUnlocked, "validates outside the mutex", "Serialised"},
		{rereadsWeight, "reads weights twice", "WeightsOnce"},
		{derefsNil, "dereferences a nil Endpoint in Done", "DoneUnknown"},
		{floodsAbandoned, "learns from abandoned requests", "Abandoned"},
		{allocatesHalf, "allocates on every other pick", "Allocs"},
		{allocatesOnRetry, "allocates on retries", "Allocs"},
		{allocatesOnFailure, "allocates in Done for failures", "Allocs"},
		{panicsConcurrently, "panics in a goroutine of the kit", "Concurrent"},
		{nilConcurrently, "returns nil, nil in a goroutine of the kit", "Concurrent"},
		{hashIgnoresAttempt, "a hash picker whose retries all go home", "Retries"},
		{hashRepeats, "a hash picker whose retries repeat a backend", "Retries"},
		{hashPerProcess, "a hash picker whose retry order differs between instances", "Retries"},

		{removedAbove64, "keeps removed backends in sets above 64", "Removed"},
		{removedAfterUpdates, "keeps removed backends after 16 Updates", "Removed"},
		{avoidAbove64, "honours Avoid in sets of up to 64 only", "Avoid"},
		{avoidAfterUpdates, "ignores Avoid after 16 Updates", "Avoid"},
		{waitsOnUpdate, "Pick waits 20 ms for a running Update", "NeverBlocks"},
		{keepsOldValues, "keeps the Backend values of known IDs", "NewValues"},
		{keepsOldWeights, "keeps the weights of known IDs", "NewValues"},
		{allocatesRarely, "allocates once in 4099 picks", "Allocs"},
		{allocatesEvery300, "allocates once in 300 picks", "Allocs"},
		{panicsOnNegLatency, "Done panics on a negative latency", "Results"},
		{panicsOnRefused, "Done panics on a refused connection", "Results"},
		{allocatesOnRefused, "Done allocates for a refused connection", "Results"},
		{allocatesOnTimeout, "Done allocates for a network timeout", "Results"},
		{learnsAbandoned, "learns the latency of abandoned requests", "AbandonedNeutral"},
		{ejectsAbandoned, "ejects on abandoned requests", "AbandonedNeutral"},
		{hashByPosition, "a hash picker that places backends by position", "Order"},
		{keyedByPosition, "a learner keeping its state by position", "Order"},
		{leaksAbandoned, "counts no abandoned request off", "InFlight"},
		{dropsRemoved, "forgets every count when a backend leaves", "InFlight"},
		{ignoresLocality, "accepts a priority out of range", "InvalidUpdate"},

		{blocksAbove16, "Pick waits for an Update of more than 16", "NeverBlocks"},
		{rereadsWeightFrom8, "reads weights twice in sets of 8 or more", "WeightsOnce"},
		{publishesUnlocked, "publishes after releasing its mutex", "PublishOrder"},
		{redrawsSubset, "a subset drawn anew at every Update", "Order"},
		{starvesSmallest, "never picks the smallest ID", "Spread"},
		{starvesNinth, "never picks the ninth backend", "Spread"},
		{dividesByZeroRPS, "divides by a zero rps", "Results"},
		{collapsesKeys, "sends every key to one backend after new weights", "NewValues"},

		{hashKeysIgnored, "a hash picker that places by ID, not by hash key", "HashKeys"},
		{hashKeyOnPick, "a hash picker that reads hash keys in Pick", "HashKeys"},
		{hashKeysDuplicate, "a hash picker that accepts duplicate hash keys", "HashKeys"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := balancertest.RunCheck(tt.want, newRef(tt.flaw))
			require.Error(t, err)
			assert.Contains(t, failedChecks(err), tt.want, "error: %v", err)
		})
	}
}

// A picker that returns a removed backend once in 10,000 picks is caught in
// most runs: the Removed check makes enough picks to see it 19 times in 20.
func TestKitCatchesRareFlaw(t *testing.T) {
	const runs = 10
	caught := 0
	for range runs {
		if balancertest.RunCheck("Removed", newRef(rarelyRemoved)) != nil {
			caught++
		}
	}
	// Expected 9.5 of 10; fewer than 7 has a chance of about 10⁻³.
	assert.GreaterOrEqual(t, caught, 7, "caught in %d runs of %d", caught, runs)
}

// A panic inside a picker fails the check with the panic's message instead
// of crashing the test binary, in the kit's own goroutine or in those it
// starts.
func TestKitReportsPanics(t *testing.T) {
	err := balancertest.Test(newRef(panicsOnUnknown))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "panic: unknown backend")

	err = balancertest.RunCheck("Concurrent", newRef(panicsConcurrently))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "panic: ref: seventeen")
	assert.Contains(t, err.Error(), "goroutine", "the stack is reported")
}

func TestKitErrorIsJoined(t *testing.T) {
	err := balancertest.Test(newRef(ignoresEmpty))
	require.Error(t, err)
	var joined interface{ Unwrap() []error }
	require.True(t, errors.As(err, &joined), "Test should join one error per failed check")
	assert.NotEmpty(t, joined.Unwrap())
}
