package balancer

import (
	"math"
	"sync/atomic"
)

// minRetained is how many removed backends' states a Registry keeps at
// least, whatever the size of the live set.
const minRetained = 64

// Registry keeps one *S per backend ID across updates, so that what an
// algorithm has learned about a backend (its in-flight count, its latency)
// survives a membership change or a health flap that removes it and adds it
// back.
//
// A removed backend's state is retired, not dropped: it stays reachable
// through States.Lookup, so that a Done arriving after the removal still
// finds the counter its Pick incremented, and it is revived if the ID comes
// back. Retired states are evicted oldest first once there are more of them
// than live backends (and more than 64), so memory stays bounded under churn
// but for one exception: a state that is busy (an InFlight with requests
// still counted, or a struct embedding one; see Sealer and Busy) is not
// evicted until it is idle, so that the Dones of requests still in flight
// always find their counter. Those states are bounded by the number of
// requests in flight; a caller that never calls Done for a request keeps
// its backend's state for good.
//
// A Registry is for writers only: call Sync under the mutex that serialises
// a picker's updates. The zero value is ready to use. What Sync returns is
// immutable and safe for any number of concurrent readers.
type Registry[S any] struct {
	live    map[string]*S
	retired map[string]retiredState[S]
	queue   []retiredID // retirement order, oldest first; may hold stale entries
	seq     uint64
}

type retiredState[S any] struct {
	s   *S
	seq uint64
}

type retiredID struct {
	id  string
	seq uint64
}

// Sync returns the states of bs, in order, reusing the state of every ID it
// has seen before (live or retired) and allocating a zero S for new ones.
// Backends of the previous Sync missing from bs are retired. bs must already
// be valid (see Validate).
//
// Cost: O(live + retired); two maps and one slice allocated per call, and
// a zero S for each new ID.
func (r *Registry[S]) Sync(bs []Backend) States[S] {
	if r.retired == nil {
		r.retired = make(map[string]retiredState[S])
	}
	live := make(map[string]*S, len(bs))
	list := make([]*S, len(bs))
	for i, b := range bs {
		id := b.ID()
		s := r.live[id]
		if s == nil {
			if e, ok := r.retired[id]; ok {
				s = e.s
				delete(r.retired, id)
			} else {
				s = new(S)
			}
		}
		live[id] = s
		list[i] = s
	}
	for id, s := range r.live {
		if _, ok := live[id]; !ok {
			r.seq++
			r.retired[id] = retiredState[S]{s: s, seq: r.seq}
			r.queue = append(r.queue, retiredID{id: id, seq: r.seq})
		}
	}
	r.live = live
	r.evict()

	byID := make(map[string]*S, len(live)+len(r.retired))
	for id, e := range r.retired {
		byID[id] = e.s
	}
	for id, s := range live {
		byID[id] = s
	}
	return States[S]{list: list, byID: byID}
}

// Busy is implemented by state types that must outlive their backend's
// removal for a while. A Registry does not evict a retired state whose
// pointer implements Busy while Busy returns true. InFlight implements it,
// and so does a struct that embeds an InFlight; a struct that holds one in
// a named field does not, and must forward Busy itself (lrt's state did
// not, and lost counts under churn until it did).
//
// Busy alone leaves a race: a Pick that loaded an older snapshot may count
// a request on a state just after Busy said it was idle and the Registry
// evicted it, and no Done finds that count again. A state that implements
// Sealer closes it.
type Busy interface {
	Busy() bool
}

// Sealer is implemented by state types that a Pick counts requests on, so
// that an idle state can be evicted without losing a count. Before it
// evicts a retired state whose pointer implements Sealer, a Registry calls
// Seal (under the writers' mutex): Seal returns false, and the state is
// kept, if requests are counted on it; otherwise it marks the state
// evicted, for good, in the same atomic step, and returns true. A Pick that
// still holds the state from an older snapshot then learns from it that
// the state is gone (InFlight.Inc returns a negative count) and does not
// count its request there. InFlight implements Sealer, and so does a struct
// that embeds one; a struct that holds one in a named field forwards it.
//
// The ring-wide total of consistent's bounded loads is why: a request
// counted in it on a state evicted under the Pick was never counted down,
// and the total grew under churn (to 11–31 after 200 Updates in that
// package's TestBoundedTotalUnderChurn, under -race) until counters were
// sealed.
type Sealer interface {
	Seal() bool
}

// evict drops the oldest retired states beyond the bound, sparing busy
// ones, and compacts the queue when revived IDs have left it mostly stale.
func (r *Registry[S]) evict() {
	limit := max(len(r.live), minRetained)
	var spared []retiredID // busy, kept at the head of the queue, oldest first
	for len(r.retired)-len(spared) > limit && len(r.queue) > 0 {
		q := r.queue[0]
		r.queue = r.queue[1:]
		e, ok := r.retired[q.id]
		if !ok || e.seq != q.seq {
			continue // revived, or retired again later
		}
		if busy(e.s) {
			spared = append(spared, q)
			continue
		}
		delete(r.retired, q.id)
	}
	if len(spared) > 0 {
		r.queue = append(spared, r.queue...)
	}
	if len(r.queue) > 2*len(r.retired)+minRetained {
		fresh := make([]retiredID, 0, len(r.retired))
		for _, q := range r.queue {
			if e, ok := r.retired[q.id]; ok && e.seq == q.seq {
				fresh = append(fresh, q)
			}
		}
		r.queue = fresh
	}
}

// busy reports whether s must be kept: a Sealer that refuses its seal, or
// a Busy (that is not a Sealer) that reports true. A Sealer whose Seal
// succeeds is idle and evicted from then on.
func busy[S any](s *S) bool {
	switch x := any(s).(type) {
	case Sealer:
		return !x.Seal()
	case Busy:
		return x.Busy()
	}
	return false
}

// States is an immutable view of per-backend state for one published set:
// the states of the live backends in set order, and a lookup by ID that also
// reaches recently removed backends. Keep it in the picker's snapshot.
type States[S any] struct {
	list []*S
	byID map[string]*S
}

// Len returns the number of live backends.
func (s States[S]) Len() int { return len(s.list) }

// At returns the state of the i-th backend of the set given to Sync.
func (s States[S]) At(i int) *S { return s.list[i] }

// Lookup returns b's state, or nil if b is nil or its ID is neither live nor
// retired. Done uses it; it costs one map read and allocates nothing.
func (s States[S]) Lookup(b Backend) *S {
	if b == nil {
		return nil
	}
	return s.byID[b.ID()]
}

// LookupID is Lookup by ID, for accessors that are given an ID rather than
// a Backend (metrics, tests). It returns nil for an ID neither live nor
// retired.
func (s States[S]) LookupID(id string) *S { return s.byID[id] }

// InFlight counts the requests in flight on one backend: Pick calls Inc on
// the backend it returns, Done calls Dec. It is padded to a cache line so
// that the counters of different backends, allocated side by side, do not
// slow each other down through false sharing.
//
// A counter its Registry has evicted is sealed (see Sealer): Inc then
// returns a negative number, Load returns 0 and Dec does nothing.
//
// The zero value is ready to use. Safe for concurrent use; must not be
// copied after first use.
type InFlight struct {
	n atomic.Int64
	_ [56]byte
}

var (
	_ Busy   = (*InFlight)(nil)
	_ Sealer = (*InFlight)(nil)
)

// sealedCount is the count of a sealed InFlight: so far below zero that
// the Incs of Picks still holding the counter can never bring it back up.
const sealedCount = math.MinInt64 / 2

// Inc adds one request and returns the new count. A negative count means
// the counter is sealed: its Registry evicted it after the caller read it
// from an older snapshot, no Done will find it, and the request is counted
// nowhere. A picker that keeps a second count (a total) must not count the
// request there; it may pick again from its newest snapshot, as
// consistent's bounded Ring does.
func (c *InFlight) Inc() int64 { return c.n.Add(1) }

// Dec removes one request, never taking the count below zero: a late Done
// for a backend whose state was evicted and made anew must not leave the
// new counter negative, which would make least-loaded pickers flood it. It
// reports whether it removed one (false if the count was already zero), so
// that a picker keeping a second count, such as a total, can keep the two
// in step.
func (c *InFlight) Dec() bool {
	for {
		n := c.n.Load()
		if n <= 0 {
			return false
		}
		if c.n.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// Load returns the current count: 0 for a sealed counter.
func (c *InFlight) Load() int64 { return max(c.n.Load(), 0) }

// Busy reports whether requests are counted, so that a Registry keeps the
// counter of a removed backend until the Dones of its last requests have
// found it (see Registry).
func (c *InFlight) Busy() bool { return c.n.Load() > 0 }

// Seal makes an idle counter refuse requests from now on and reports true;
// it reports false, and changes nothing, while requests are counted. The
// check and the seal are one compare-and-swap, so a concurrent Inc either
// comes first (Seal fails, the counter is kept) or finds the counter
// sealed. A Registry seals a retired counter before it evicts it (see
// Sealer); nothing else should call Seal.
func (c *InFlight) Seal() bool { return c.n.CompareAndSwap(0, sealedCount) }
