package route

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/bits"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/lbkit/lbkit/balancer"
)

// ErrConfig reports a Config that New refuses; the message names the field
// and the value at fault.
var ErrConfig = errors.New("route: invalid config")

// Fallback says where a request goes when the set it asks for has no
// backend: none was ever labelled so, or every one is drained, ejected or
// removed.
type Fallback uint8

const (
	// Any sends the request to any backend, as a request that asks for no
	// set goes (Envoy's subset load balancer, fallback_policy
	// ANY_ENDPOINT). The default: a dead canary costs its requests nothing.
	Any Fallback = iota
	// DefaultSet sends it to the backends labelled Config.Default
	// (Envoy's DEFAULT_SUBSET), and fails with balancer.ErrNoBackend when
	// that set is empty too.
	DefaultSet
	// Fail answers balancer.ErrNoBackend (Envoy's NO_FALLBACK): for
	// requests that must never reach another version.
	Fail
)

// String returns "any", "default" or "fail".
func (f Fallback) String() string {
	switch f {
	case Any:
		return "any"
	case DefaultSet:
		return "default"
	case Fail:
		return "fail"
	}
	return fmt.Sprintf("Fallback(%d)", uint8(f))
}

// Config configures a Balancer. Label is required; every other field's
// zero value means the documented default.
type Config struct {
	// Label is the key of the label whose values make the sets:
	// "version", "track", "colour". Each value that occurs in the set
	// (balancer.LabelOf) is a set of its own, with a picker of its own;
	// backends without the label are the set of value "". Required.
	Label string
	// Default is the value of the set that requests without a Route go to
	// ("stable"), and that Fallback DefaultSet sends to. "": a request
	// without a Route goes to any backend, a set being chosen in
	// proportion to the sum of its backends' weights, so that a canary of
	// weight 5 beside stable backends of weight 95 takes 5% of them.
	Default string
	// Fallback is where a request goes when its set has no backend.
	// Default Any.
	Fallback Fallback
	// Rand returns uniform random 64-bit numbers, for the choice of a set
	// by weight. Default math/rand/v2's Uint64 (no lock, no allocation).
	Rand func() uint64
}

func (c Config) check() error {
	switch {
	case c.Label == "":
		return fmt.Errorf("%w: empty Label", ErrConfig)
	case c.Fallback > Fail:
		return fmt.Errorf("%w: unknown Fallback %d", ErrConfig, uint8(c.Fallback))
	case c.Fallback == DefaultSet && c.Default == "":
		return fmt.Errorf("%w: Fallback DefaultSet needs a Default", ErrConfig)
	}
	return nil
}

// Balancer sends each request to the backends whose label matches the
// request's Route, through a picker per label value. Create it with New;
// the zero value is not ready.
//
// Pick and Done are safe for concurrent use with each other and with
// Update; they take no lock and allocate nothing. Update, Start and Close
// serialise on a mutex that Pick and Done never take. A Balancer must not
// be copied.
type Balancer struct {
	// Immutable after New.
	newPicker func() balancer.Balancer
	cfg       Config
	rand      func() uint64
	labelOf   func(balancer.Backend) string // the Label's value; tests replace it

	// Atomic: what Pick and Done read.
	cur atomic.Pointer[snapshot]

	// Guarded by mu.
	mu     sync.Mutex
	groups map[string]*group // by label value; kept while idle, up to maxIdle
	spare  balancer.Balancer // New's check call, used for the first group
	ctx    context.Context   // Start's, for pickers made later; nil before
	closed bool              // Close was called: pickers made later are closed at once
}

var (
	_ balancer.Balancer        = (*Balancer)(nil)
	_ balancer.Feedback        = (*Balancer)(nil)
	_ balancer.InFlightCounter = (*Balancer)(nil)
	_ balancer.Starter         = (*Balancer)(nil)
	_ io.Closer                = (*Balancer)(nil)
)

// group is the picker of one label value. value, child, fb and counter
// are immutable; handed is guarded by Balancer.mu.
type group struct {
	value   string
	child   balancer.Balancer
	fb      balancer.Feedback        // child's, or nil
	counter balancer.InFlightCounter // child's, or nil
	handed  []balancer.Backend
}

// snapshot is what Pick and Done read; immutable once published.
type snapshot struct {
	live  []*group       // groups with backends, by value
	cut   []uint64       // cut[i]: the draw below which live[i] is chosen by weight
	index map[string]int // label value → position in live
	def   int            // position in live of Config.Default's set, or -1
	// groups holds every group, idle ones included, by label value: a
	// Done goes to the group of its backend's label, the picker that made
	// the pick, even after the backend left the set or was relabelled.
	groups map[string]*group
	// only is the one group, when there is no other: Pick draws nothing
	// and Done looks nothing up.
	only     *group
	feedback bool // a group's picker has a Done
}

// maxIdle is how many pickers without backends a Balancer keeps, so that a
// set that empties (a canary drained, then back) finds its picker's state.
const maxIdle = 64

// New returns a Balancer that gives each value of cfg.Label a picker of
// its own, made by newPicker (each call must return a new, empty picker:
// wrr.New, say). New calls it once to check it. It returns an error
// wrapping ErrConfig if newPicker is nil or returns nil, or cfg is
// refused.
func New(newPicker func() balancer.Balancer, cfg Config) (*Balancer, error) {
	if newPicker == nil {
		return nil, fmt.Errorf("%w: nil newPicker", ErrConfig)
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	first := newPicker()
	if isNil(first) {
		return nil, fmt.Errorf("%w: newPicker returned nil", ErrConfig)
	}
	b := &Balancer{newPicker: newPicker, cfg: cfg, rand: cfg.Rand, groups: map[string]*group{}, spare: first}
	if b.rand == nil {
		b.rand = rand.Uint64
	}
	b.labelOf = func(be balancer.Backend) string { return balancer.LabelOf(be, cfg.Label) }
	b.cur.Store(&snapshot{def: -1})
	return b, nil
}

func isNil(b balancer.Balancer) bool {
	if b == nil {
		return true
	}
	v := reflect.ValueOf(b)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// Update replaces the set: it validates bs (balancer.NewSet), reads each
// backend's label once, and hands each value's picker the very Backend
// values of its set. Only pickers whose set changed are updated. On error,
// from validation or from a picker, every picker keeps its previous set
// and the previous routing stays. A picker left without backends is
// emptied after the new routing is published, so that a Pick running
// meanwhile finds a picker with backends.
//
// Put health around the Balancer (health ▶ route ▶ algorithm): health
// hands it the eligible backends only, so a set whose backends are all
// ejected or drained is empty here, and its requests fall back.
//
// Cost: O(n log n), and the Update of each picker whose set changed.
func (b *Balancer) Update(bs []balancer.Backend) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	set, err := balancer.NewSet(bs)
	if err != nil {
		return fmt.Errorf("route: update: %w", err)
	}
	byValue := map[string][]int{}
	weight := map[string]uint64{}
	for i, be := range set.Backends {
		v := b.labelOf(be)
		byValue[v] = append(byValue[v], i)
		weight[v] += uint64(set.Weights[i])
	}
	values := slices.Sorted(func(yield func(string) bool) {
		for v := range byValue {
			if !yield(v) {
				return
			}
		}
	})
	type change struct {
		g      *group
		before []balancer.Backend
	}
	var done []change
	undo := func() {
		for _, c := range done {
			_ = c.g.child.Update(c.before)
			c.g.handed = c.before
		}
	}
	s := &snapshot{index: make(map[string]int, len(values)), def: -1}
	var sum uint64
	weights := make([]uint64, 0, len(values))
	for _, v := range values {
		g, err := b.group(v)
		if err != nil {
			undo()
			return err
		}
		next := make([]balancer.Backend, len(byValue[v]))
		for j, i := range byValue[v] {
			next[j] = set.Backends[i]
		}
		if !sameBackends(g.handed, next) {
			if err := g.child.Update(next); err != nil {
				undo()
				return fmt.Errorf("route: update: the picker of %s=%q: %w", b.cfg.Label, v, err)
			}
			done = append(done, change{g, g.handed})
			g.handed = next
		}
		s.index[v] = len(s.live)
		if v == b.cfg.Default {
			s.def = len(s.live)
		}
		s.live = append(s.live, g)
		weights = append(weights, weight[v])
		sum += weight[v]
	}
	b.trim(s.index)
	s.cut = cuts(weights, sum)
	s.groups = maps.Clone(b.groups)
	for _, g := range s.groups {
		s.feedback = s.feedback || g.fb != nil
		s.only = g
	}
	if len(s.groups) != 1 {
		s.only = nil
	}
	b.cur.Store(s)
	var errs []error
	for _, g := range b.groups {
		if _, ok := s.index[g.value]; !ok && len(g.handed) > 0 {
			if err := g.child.Update(nil); err != nil {
				errs = append(errs, fmt.Errorf("route: update: emptying the picker of %s=%q: %w", b.cfg.Label, g.value, err))
				continue
			}
			g.handed = nil
		}
	}
	return errors.Join(errs...)
}

// group returns the group of value v, making its picker if there is none.
// b.mu must be held.
func (b *Balancer) group(v string) (*group, error) {
	if g := b.groups[v]; g != nil {
		return g, nil
	}
	child := b.spare
	b.spare = nil
	if child == nil {
		child = b.newPicker()
		if isNil(child) {
			return nil, fmt.Errorf("route: update: newPicker returned nil for %s=%q", b.cfg.Label, v)
		}
	}
	switch {
	case b.closed:
		// No background work after Close: a picker made now is closed
		// before it is used, as Close closed the others.
		if err := balancer.CloseInner(child); err != nil {
			return nil, fmt.Errorf("route: update: closing the picker of %s=%q: %w", b.cfg.Label, v, err)
		}
	case b.ctx != nil:
		if err := balancer.StartInner(b.ctx, child); err != nil {
			return nil, fmt.Errorf("route: update: starting the picker of %s=%q: %w", b.cfg.Label, v, err)
		}
	}
	g := &group{value: v, child: child}
	g.fb, _ = child.(balancer.Feedback)
	g.counter, _ = child.(balancer.InFlightCounter)
	b.groups[v] = g
	return g, nil
}

// trim drops idle groups (label values no backend has) beyond maxIdle, in
// value order, closing their pickers: a Done for a backend of a dropped
// group finds no picker, so the bound is generous. b.mu must be held.
func (b *Balancer) trim(live map[string]int) {
	var idle []*group
	for v, g := range b.groups {
		if _, ok := live[v]; !ok {
			idle = append(idle, g)
		}
	}
	if len(idle) <= maxIdle {
		return
	}
	slices.SortFunc(idle, func(x, y *group) int { return strings.Compare(x.value, y.value) })
	for _, g := range idle[:len(idle)-maxIdle] {
		delete(b.groups, g.value)
		_ = balancer.CloseInner(g.child)
	}
}

func sameBackends(a, b []balancer.Backend) bool {
	return slices.EqualFunc(a, b, func(x, y balancer.Backend) bool { return x == y })
}

// cuts returns, for weights summing to sum, the draws below which each
// position is chosen: cut[i] = ⌊2⁶⁴ × (w₀+…+wᵢ) / sum⌋, the last being the
// top of the range.
func cuts(weights []uint64, sum uint64) []uint64 {
	out := make([]uint64, len(weights))
	var acc uint64
	for i, w := range weights {
		acc += w
		if acc == sum {
			out[i] = ^uint64(0)
			continue
		}
		q, _ := bits.Div64(acc, 0, sum) // acc × 2⁶⁴ / sum, acc < sum
		out[i] = q
	}
	return out
}

// Pick picks from the set req.Route names (Config.Default's when Route is
// empty and Default is set; any backend when both are empty), and falls
// back as Config.Fallback says when that set has no backend. Any chooses
// a set in proportion to its weight with one random draw. A retry with
// req.Avoid that the set can answer only with Avoid moves on to the next
// set with backends when the request could go to any (Route empty with no
// Default, or Fallback Any), handing the avoided pick back with
// Done(balancer.ErrAbandoned); a request held to its set gets Avoid back,
// as a set of one backend does.
//
// Cost: one atomic load, one map read of req.Route (none when Route is
// empty or every backend is in one set), a random number for a choice by
// weight, and the inner Pick; no lock, no allocation.
func (b *Balancer) Pick(req balancer.Request) (balancer.Backend, error) {
	s := b.cur.Load()
	for range 3 {
		got, err := b.pickFrom(s, req)
		if err != balancer.ErrNoBackend { //nolint:errorlint // Pick returns the sentinel itself
			return got, err
		}
		// An Update publishes the new snapshot and then empties the
		// pickers it left out: a Pick that read the old one may have found
		// its picker emptied. If a newer snapshot is there, try it.
		next := b.cur.Load()
		if next == s {
			return nil, err
		}
		s = next
	}
	return b.pickFrom(s, req)
}

func (b *Balancer) pickFrom(s *snapshot, req balancer.Request) (balancer.Backend, error) {
	if len(s.live) == 0 {
		return nil, balancer.ErrNoBackend
	}
	want := req.Route
	if want == "" {
		want = b.cfg.Default
	}
	if s.only != nil && (want == "" || want == s.only.value) {
		return s.only.child.Pick(req)
	}
	if want == "" {
		return b.walk(s, choose(s.cut, b.rand()), req)
	}
	if i, ok := s.index[want]; ok {
		if b.cfg.Fallback == Any {
			return b.walk(s, i, req)
		}
		return s.live[i].child.Pick(req) // held to its set
	}
	switch b.cfg.Fallback {
	case DefaultSet:
		if s.def >= 0 && want != b.cfg.Default {
			return s.live[s.def].child.Pick(req)
		}
		return nil, balancer.ErrNoBackend
	case Fail:
		return nil, balancer.ErrNoBackend
	}
	return b.walk(s, choose(s.cut, b.rand()), req)
}

// walk picks from live[i], moving on to the next set with backends when a
// picker has none or has only req.Avoid to give.
func (b *Balancer) walk(s *snapshot, i int, req balancer.Request) (balancer.Backend, error) {
	var avoided balancer.Backend
	var avoidedFrom balancer.Feedback
	for range s.live {
		g := s.live[i]
		got, err := g.child.Pick(req)
		switch {
		case err == balancer.ErrNoBackend, err == nil && got == nil: //nolint:errorlint // Pick returns the sentinel itself
		case err != nil:
			handBack(avoidedFrom, avoided)
			return nil, err
		case req.Avoid != "" && got.ID() == req.Avoid:
			if avoided == nil {
				avoided, avoidedFrom = got, g.fb
			} else if g.fb != nil {
				g.fb.Done(got, balancer.Result{Err: balancer.ErrAbandoned})
			}
		default:
			handBack(avoidedFrom, avoided)
			return got, nil
		}
		i = (i + 1) % len(s.live)
	}
	if avoided != nil {
		return avoided, nil
	}
	return nil, balancer.ErrNoBackend
}

func handBack(fb balancer.Feedback, be balancer.Backend) {
	if fb != nil && be != nil {
		fb.Done(be, balancer.Result{Err: balancer.ErrAbandoned})
	}
}

// choose returns the position whose cut is the first above x: a scan for
// a few sets, a binary search for more.
func choose(cut []uint64, x uint64) int {
	if len(cut) <= 8 {
		for i, c := range cut[:len(cut)-1] {
			if x < c {
				return i
			}
		}
		return len(cut) - 1
	}
	lo, hi := 0, len(cut)-1
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if x < cut[m] {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// Done passes the result to the picker of the set be was picked from: the
// one of be's label value, read from be itself, so that a Done reaches the
// picker that counted the request also after be has left the set or come
// back relabelled (a relabelled backend is a new Backend value). Done for
// nil, or for a backend of a label value no picker has, does nothing.
//
// Cost: one atomic load, a read of be's label and one map read by its
// value (none when there is one set), and the inner Done; no lock, no
// allocation.
func (b *Balancer) Done(be balancer.Backend, r balancer.Result) {
	s := b.cur.Load()
	if !s.feedback || be == nil {
		return
	}
	g := s.only
	if g == nil {
		g = s.groups[b.labelOf(be)]
	}
	if g != nil && g.fb != nil {
		g.fb.Done(be, r)
	}
}

// InFlight returns the requests in flight to the backend with this ID, as
// the pickers inside count them (those that implement
// balancer.InFlightCounter), summed over every set's picker: a backend
// relabelled while requests to it were in flight is counted by both.
//
// Cost: one InFlight per label value; not for the Pick path.
func (b *Balancer) InFlight(id string) int64 {
	var n int64
	for _, g := range b.cur.Load().groups {
		if g.counter != nil {
			n += g.counter.InFlight(id)
		}
	}
	return n
}

// Start starts the background work of every picker inside that has a
// Start method (balancer.StartInner), now and as pickers are made for new
// label values, until ctx ends. It returns their errors, joined; one
// wrapping balancer.ErrStarted if called twice, and balancer.ErrClosed
// after Close (balancer.Lifecycle's rules).
func (b *Balancer) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return fmt.Errorf("route: start: %w", balancer.ErrClosed)
	case b.ctx != nil:
		return fmt.Errorf("route: start: %w", balancer.ErrStarted)
	}
	b.ctx = ctx
	var errs []error
	for _, g := range b.groups {
		errs = append(errs, balancer.StartInner(ctx, g.child))
	}
	return errors.Join(errs...)
}

// Close closes every picker inside that is an io.Closer
// (balancer.CloseInner), and returns their errors, joined; a picker made
// for a new label value after Close is closed as it is made. The Balancer
// keeps routing, without their background work. A second Close does
// nothing.
//
// A Balancer has no Unwrap: it holds a picker per label value, not one.
// Put health around it and call health's Drain, Maintenance and Enable.
func (b *Balancer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	var errs []error
	for _, g := range b.groups {
		errs = append(errs, balancer.CloseInner(g.child))
	}
	return errors.Join(errs...)
}

// Sets returns the label values that have backends now, with the number
// of backends in each.
func (b *Balancer) Sets() map[string]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.cur.Load()
	out := make(map[string]int, len(s.live))
	for _, g := range s.live {
		out[g.value] = len(g.handed)
	}
	return out
}
