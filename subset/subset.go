package subset

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/lbkit/lbkit/balancer"
)

// Errors returned by this package. Test for them with errors.Is.
var (
	// ErrConfig reports a Config that New refuses; the message names the
	// field and the value at fault.
	// It wraps balancer.ErrBadOption, as every lbkit refusal of a
	// configuration does.
	ErrConfig = fmt.Errorf("subset: invalid config: %w", balancer.ErrBadOption)
)

// DefaultSize is the subset size of the zero Config: gRFC A68's default
// subset_size.
const DefaultSize = 20

// MaxCount is the largest client Count New accepts in deterministic mode.
const MaxCount = 1 << 24

// Config configures a Balancer. Its zero value means the documented
// defaults: subsets of 20, chosen by rendezvous hashing with a random salt
// (gRFC A68's random subsetting). Each field says its default.
type Config struct {
	// Size is how many backends this client talks to. Default 20 (gRFC
	// A68's subset_size). A set of Size backends or fewer is passed on
	// whole. Negative is an error.
	Size int

	// Rendezvous mode (the default: Count is 0).

	// ClientID names this client for rendezvous hashing: its subset is the
	// Size backends with the highest hash of ClientID and the backend's
	// ID, the same in every process and every run for the same ID. Default
	// "": a random salt drawn from Rand at New, as A68's random_subsetting
	// does, so that each process gets its own subset.
	ClientID string

	// Deterministic mode: set Count.

	// Count is how many clients share the backends, and Index (0 to
	// Count−1) which of them this one is: a pod's ordinal in a
	// StatefulSet, a task's number. With Count set, the subsets of the
	// Count clients cover the backends evenly (the SRE book's
	// deterministic subsetting): each backend has ⌊Size·Count/n⌋ or
	// ⌈Size·Count/n⌉ clients. Default 0: rendezvous mode. At most
	// MaxCount.
	Count int
	// Index is this client's number, in [0, Count). Only with Count.
	Index int

	// Randomness.

	// Rand returns uniform random 64-bit numbers: the salt of rendezvous
	// mode when ClientID is "". Default math/rand/v2's Uint64; a seeded
	// source makes a simulation repeatable. Called only by New.
	Rand func() uint64
}

// Balancer gives the picker it wraps a stable subset of every set given to
// Update, and passes every Pick and Done on to it. Create it with New; the
// zero value is not ready.
//
// Pick and Done take no lock and allocate nothing beyond what the inner
// picker does. Calls to Update serialise on a mutex that Pick and Done
// never take. A Balancer must not be copied.
type Balancer struct {
	// Immutable after New.
	inner balancer.Balancer
	fb    balancer.Feedback // inner's, or nil
	size  int
	salt  string // rendezvous: the client's ID or a random salt
	count int    // deterministic: 0 in rendezvous mode
	index int

	// Atomic: read by Pick.
	cur atomic.Pointer[snapshot]

	// mu serialises Update; Pick and Done never take it.
	mu sync.Mutex
}

var (
	_ balancer.Balancer = (*Balancer)(nil)
	_ balancer.Feedback = (*Balancer)(nil)
	_ io.Closer         = (*Balancer)(nil)
)

// snapshot is what one Update published: the whole set's IDs, the subset,
// and the spare for a retry that the subset cannot serve.
type snapshot struct {
	all     map[string]bool // every ID given to Update
	members []string        // the subset's IDs, in the caller's order
	spare   balancer.Backend
	spareID string
}

// New returns a Balancer that hands inner a subset of every set given to
// Update. inner must be new, with an empty set, and is from then on updated
// only through the Balancer. New checks cfg and returns an error wrapping
// ErrConfig if a field is out of range.
func New(inner balancer.Balancer, cfg Config) (*Balancer, error) {
	if inner == nil || reflect.ValueOf(inner).Kind() == reflect.Pointer && reflect.ValueOf(inner).IsNil() {
		return nil, fmt.Errorf("%w: nil inner balancer", ErrConfig)
	}
	switch {
	case cfg.Size < 0:
		return nil, fmt.Errorf("%w: Size is %d, want 0 (the default, %d) or more", ErrConfig, cfg.Size, DefaultSize)
	case cfg.Count < 0 || cfg.Count > MaxCount:
		return nil, fmt.Errorf("%w: Count is %d, want 0 (rendezvous mode) to %d", ErrConfig, cfg.Count, MaxCount)
	case cfg.Count == 0 && cfg.Index != 0:
		return nil, fmt.Errorf("%w: Index is %d without a Count", ErrConfig, cfg.Index)
	case cfg.Count > 0 && (cfg.Index < 0 || cfg.Index >= cfg.Count):
		return nil, fmt.Errorf("%w: Index is %d, want 0 to %d (Count-1)", ErrConfig, cfg.Index, cfg.Count-1)
	case cfg.Count > 0 && cfg.ClientID != "":
		return nil, fmt.Errorf("%w: ClientID and Count are set: choose rendezvous mode (ClientID) or deterministic mode (Count and Index)", ErrConfig)
	}
	b := &Balancer{inner: inner, size: cmp.Or(cfg.Size, DefaultSize), salt: cfg.ClientID, count: cfg.Count, index: cfg.Index}
	b.fb, _ = inner.(balancer.Feedback)
	if cfg.Count == 0 && b.salt == "" {
		r := cfg.Rand
		if r == nil {
			r = rand.Uint64
		}
		// 128 random bits, as text: the salt is hashed like a client ID.
		b.salt = "random:" + strconv.FormatUint(r(), 16) + strconv.FormatUint(r(), 16)
	}
	b.cur.Store(&snapshot{})
	return b, nil
}

// Update replaces the set. It validates bs (see balancer.Validate), chooses
// this client's subset and hands it to the inner picker: the very Backend
// values given here, in their order. On error, from validation or from the
// inner picker, the previous set and subset stay.
//
// A backend leaving or joining moves at most one member of a subset in
// rendezvous mode, and at most two in deterministic mode (see the package
// doc, "Churn").
//
// Cost: O(n log n) to rank the set, n hashes, and the inner Update.
func (b *Balancer) Update(bs []balancer.Backend) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	set, err := balancer.NewSet(bs)
	if err != nil {
		return fmt.Errorf("subset: update: %w", err)
	}
	picked, spare := b.choose(set.IDs)
	in := make([]bool, set.Len())
	for _, i := range picked {
		in[i] = true
	}
	sub := make([]balancer.Backend, 0, len(picked))
	s := &snapshot{all: make(map[string]bool, set.Len()), members: make([]string, 0, len(picked))}
	for i, ok := range in {
		s.all[set.IDs[i]] = true
		if ok {
			sub = append(sub, set.Backends[i])
			s.members = append(s.members, set.IDs[i])
		}
	}
	if spare >= 0 {
		s.spare, s.spareID = set.Backends[spare], set.IDs[spare]
	}
	if err := b.inner.Update(sub); err != nil {
		return fmt.Errorf("subset: update: %w", err)
	}
	b.cur.Store(s)
	return nil
}

// choose returns the positions in ids of this client's subset, and of the
// spare: the backend that would join it next, or -1 if every backend is in
// it.
func (b *Balancer) choose(ids []string) (picked []int, spare int) {
	n := len(ids)
	k := min(b.size, n)
	if b.count == 0 {
		return rendezvous(b.salt, ids, k)
	}
	return deterministic(ids, k, b.index, b.count)
}

// rendezvous ranks ids by the hash of salt and ID, highest first (ties,
// which need a 64-bit collision, by ID), and takes the first k; the k+1-th
// is the spare. Each score depends on its own ID alone, so a backend
// joining or leaving moves at most one member of the subset.
func rendezvous(salt string, ids []string, k int) ([]int, int) {
	scores := make([]uint64, len(ids))
	var d xxhash.Digest
	for i, id := range ids {
		scores[i] = pairHash(&d, salt, id)
	}
	order := rank(ids, func(i, j int) int {
		return cmp.Or(cmp.Compare(scores[j], scores[i]), cmp.Compare(ids[i], ids[j]))
	})
	return split(order, k)
}

// deterministic lays ids on a ring in the order of their hashes, the same
// order for every client, and gives client index of count the k
// consecutive backends from position ⌊index·n/count⌋: starts spaced n/count
// apart, so that every stretch of k positions holds the starts of
// ⌊k·count/n⌋ or ⌈k·count/n⌉ clients, which is how many clients each
// backend has. The backend after the window is the spare.
func deterministic(ids []string, k, index, count int) ([]int, int) {
	n := len(ids)
	hashes := make([]uint64, n)
	for i, id := range ids {
		hashes[i] = xxhash.Sum64String(id)
	}
	order := rank(ids, func(i, j int) int {
		return cmp.Or(cmp.Compare(hashes[i], hashes[j]), cmp.Compare(ids[i], ids[j]))
	})
	if n == 0 {
		return nil, -1
	}
	start := int(uint64(index) * uint64(n) / uint64(count)) // < n; index < count ≤ 2²⁴, n < 2⁴⁰
	return split(slices.Concat(order[start:], order[:start]), k)
}

// rank returns the positions 0 to len(ids)-1 sorted by compare.
func rank(ids []string, compare func(i, j int) int) []int {
	order := make([]int, len(ids))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, compare)
	return order
}

// split returns the first k of order, and the next one or -1.
func split(order []int, k int) ([]int, int) {
	if k < len(order) {
		return order[:k], order[k]
	}
	return order, -1
}

// pairHash is the rendezvous score of a backend for a client: xxhash of
// the salt, a zero byte and the ID.
func pairHash(d *xxhash.Digest, salt, id string) uint64 {
	d.Reset()
	_, _ = d.WriteString(salt)
	_, _ = d.Write([]byte{0})
	_, _ = d.WriteString(id)
	return d.Sum64()
}

// Pick returns the inner picker's choice among the subset. A retry whose
// Avoid names the only backend the inner picker would return (a subset of
// one, say) gets the spare instead, the backend that would join the subset
// next, so that Avoid keeps its meaning when the set has another backend;
// the inner pick is handed back with Done(balancer.ErrAbandoned).
//
// Cost: the inner Pick and one atomic load; for a retry, a string
// comparison. No lock, no allocation.
func (b *Balancer) Pick(req balancer.Request) (balancer.Backend, error) {
	got, err := b.inner.Pick(req)
	if err != nil || req.Avoid == "" || got.ID() != req.Avoid {
		return got, err
	}
	s := b.cur.Load()
	if s.spare == nil || s.spareID == req.Avoid {
		return got, err
	}
	if b.fb != nil {
		b.fb.Done(got, balancer.Result{Err: balancer.ErrAbandoned})
	}
	return s.spare, nil
}

// Done passes the result on to the inner picker, if it is a
// balancer.Feedback. Done for the spare (see Pick) reaches it as a backend
// it does not know, which is harmless.
//
// Cost: the inner Done.
func (b *Balancer) Done(be balancer.Backend, r balancer.Result) {
	if b.fb != nil {
		b.fb.Done(be, r)
	}
}

// Subset returns the IDs of the current subset, in the order given to
// Update.
func (b *Balancer) Subset() []string {
	return slices.Clone(b.cur.Load().members)
}

// Start starts the inner picker's background work, if it has a Start
// method (health.Balancer has), and returns its error as it is
// (balancer.StartInner): a second Start of the stack returns the inner
// layer's balancer.ErrStarted. Otherwise it does nothing.
func (b *Balancer) Start(ctx context.Context) error { return balancer.StartInner(ctx, b.inner) }

// Close closes the inner picker if it is an io.Closer (health.Balancer
// is), and returns its error as it is (balancer.CloseInner); otherwise it
// does nothing.
func (b *Balancer) Close() error { return balancer.CloseInner(b.inner) }

// Unwrap returns the picker inside, for its admin methods: health's
// Drain, Maintenance and Enable are health's to answer (a backend outside
// this client's subset is one health does not know, and gets nothing from
// this client anyway). Pick, Done and Update go through the Balancer.
func (b *Balancer) Unwrap() balancer.Picker { return b.inner }
