package locality

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/lbkit/lbkit/balancer"
)

// Balancer routes each request to a priority level and a zone, and picks
// within that zone with a picker of its own, made by the function given to
// New. Create it with New; the zero value is not ready.
//
// Pick and Done are safe for concurrent use, take no lock and allocate
// nothing beyond what the pickers inside do. Update, UpdateHealth,
// SetCallers, SetOverprovisioning, Start and Close serialise on a mutex that Pick and Done
// never take. A Balancer must not be copied.
type Balancer struct {
	// Immutable after New.
	newPicker func() balancer.Balancer
	s         settings
	// locate, if set, gives backends their locality instead of
	// balancer.LocalityOf (tests run the conformance kit's backends in
	// zones with it).
	locate func(balancer.Backend) balancer.Locality

	// Atomic: read by Pick and Done.
	cur atomic.Pointer[snapshot]

	// Guarded by mu.
	mu       sync.Mutex
	callers  map[string]int
	overprov float64      // the factor in force: Config's, or SetOverprovisioning's
	set      balancer.Set // the last set taken, and its health
	healthy  []bool
	groups   map[groupKey]*group // every picker made, by level and zone
	spare    balancer.Balancer   // the picker New made, for the first group
	retired  map[string]*place   // removed backends' last places, for late Dones
	queue    []string            // retirement order, oldest first; may hold stale IDs
	ctx      context.Context     // Start's, for pickers made later; nil before Start
	closed   bool                // Close was called: pickers made later are closed at once
}

var (
	_ balancer.Balancer      = (*Balancer)(nil)
	_ balancer.Feedback      = (*Balancer)(nil)
	_ balancer.HealthUpdater = (*Balancer)(nil)
	_ io.Closer              = (*Balancer)(nil)
)

// groupKey names a group: the backends of one zone at one priority.
type groupKey struct {
	priority int
	zone     string
}

// group is the picker of one zone at one priority. child, fb and ic are
// immutable; handed is guarded by Balancer.mu.
type group struct {
	key    groupKey
	child  balancer.Balancer
	fb     balancer.Feedback        // child's, or nil
	ic     balancer.InFlightCounter // child's, or nil
	handed []balancer.Backend
}

// home is a group a backend was handed to, with the Backend value it was
// handed: the value its picker returns, and its callers' Done passes back.
type home struct {
	g *group
	b balancer.Backend
}

// place is where Done sends the results of one ID: the group it is in
// now (or was in last, once removed), with the value handed there, and
// the other groups it was in before (it moved to another zone or
// priority), each with the last value handed there, newest first.
// Immutable once published.
type place struct {
	home
	before []home // nil unless the backend moved; at most maxMoves
}

// maxMoves bounds the earlier groups a place remembers: the Dones of
// requests picked in a zone the backend left more than maxMoves zones
// ago go to the group it is in now.
const maxMoves = 8

// from returns the group whose picker picked be, whose ID is id.
//
// Requests picked in the old zone and in the new one are in flight
// together; the value tells them apart. A new Locality is a new value
// (Endpoint.At, lbkube, DNS refreshes make one), whose Locality still
// names the group it was handed to: an earlier value goes to the earlier
// group its Locality names. The value handed now goes to the group it is
// in now, unless the same value was handed to an earlier group (a Backend
// whose Locality changed in place): then that group takes the Dones while
// its picker counts requests to id (balancer.InFlightCounter), so that
// both counts come back to zero, but for a race: two Dones that read the
// old picker's last request at once both go there, and the new picker
// keeps one.
//
// Why not a record kept only while the old picker counts: it would be
// read at the Update, while a Pick that loaded the old picker's set
// before its Update may still count one more.
func (pl *place) from(be balancer.Backend, id string) *group {
	if len(pl.before) == 0 {
		return pl.g
	}
	if be == pl.b {
		for i := range pl.before {
			h := &pl.before[i]
			if h.b == be && h.g.ic != nil && h.g.ic.InFlight(id) > 0 {
				return h.g
			}
		}
		return pl.g
	}
	l := balancer.LocalityOf(be)
	for i := range pl.before {
		if k := pl.before[i].g.key; k.priority == l.Priority && k.zone == l.Zone {
			return pl.before[i].g
		}
	}
	return pl.g
}

// moved returns the earlier homes of a backend now handed to g as b:
// old's home (old is its place in the previous snapshot) and old's
// earlier homes, one per group other than g, newest first, at most
// maxMoves. b.mu must be held.
func moved(old *place, g *group) []home {
	if old == nil || (old.g == g && len(old.before) == 0) {
		return nil
	}
	var out []home
	add := func(h home) {
		if len(out) == maxMoves || h.g == g {
			return
		}
		for _, o := range out {
			if o.g == h.g {
				return
			}
		}
		out = append(out, h)
	}
	add(old.home)
	for _, h := range old.before {
		add(h)
	}
	return out
}

// snapshot is what Pick reads: every group with backends, in walk order
// (level by level, zone by zone), the cuts that choose a level and a zone
// from a 64-bit draw, and the group of every backend, for Done. It is
// immutable once published.
type snapshot struct {
	walk     []route
	total    int // backends over walk
	levels   []levelRoute
	levelCut []uint64 // x < levelCut[i]: level i; cumulative
	byID     map[string]*place
	// only is the one group every backend of byID belongs to, and has
	// always belonged to, if there is one (a set without localities):
	// Pick draws nothing and Done looks nothing up. feedback is whether any group's picker has a Done.
	only     *group
	feedback bool
	view     View
}

type route struct {
	child balancer.Balancer
	fb    balancer.Feedback
	n     int // backends the child has
}

type levelRoute struct {
	zones    []int // positions in walk
	local    int   // position in zones of the caller's zone under zone-aware routing, or -1
	localCut uint64
	cut      []uint64 // cumulative over zones, for the draw that is not local
}

// minRetired is how many removed backends' groups are remembered at least,
// so that their late Dones reach the picker that counted them.
const minRetired = 64

// New returns a Balancer that gives each zone of each priority level a
// picker of its own, made by newPicker (each call must return a new,
// empty picker: leastconn.New, say). New calls it once to check it, and
// returns an error wrapping ErrConfig if it returns nil or cfg is out of
// range.
func New(newPicker func() balancer.Balancer, cfg Config) (*Balancer, error) {
	if newPicker == nil {
		return nil, fmt.Errorf("%w: nil newPicker", ErrConfig)
	}
	s, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	first := newPicker()
	if isNil(first) {
		return nil, fmt.Errorf("%w: newPicker returned nil", ErrConfig)
	}
	b := &Balancer{
		newPicker: newPicker,
		s:         s,
		callers:   s.callers,
		overprov:  s.overprov,
		groups:    make(map[groupKey]*group),
		spare:     first,
		retired:   make(map[string]*place),
	}
	b.cur.Store(&snapshot{})
	return b, nil
}

func isNil(b balancer.Balancer) bool {
	if b == nil {
		return true
	}
	v := reflect.ValueOf(b)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// Update replaces the set, every backend healthy. Use it without health;
// with health around the Balancer, health calls UpdateHealth instead.
// See UpdateHealth.
func (b *Balancer) Update(bs []balancer.Backend) error {
	return b.UpdateHealth(bs, nil)
}

// UpdateHealth replaces the set with bs, healthy[i] telling whether bs[i]
// is fit to serve (nil: all are). It validates bs (see balancer.Validate),
// refuses a healthy slice of another length, groups the backends by
// priority and zone (balancer.LocalityOf, read once), works out each
// level's and zone's share of the traffic, and hands each zone's picker
// its healthy backends (all of them in a level in panic): the very
// Backend values given here. Only pickers whose set changed are updated.
// On error, from validation or from a picker, every picker keeps its
// previous set and the previous routing stays. A picker left without
// backends is emptied after the new routing is published: if it refuses,
// the error names it, and the new set and routing stay.
//
// Cost: O(n log n), and the Update of each picker whose set changed.
func (b *Balancer) UpdateHealth(bs []balancer.Backend, healthy []bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	set, err := balancer.NewSet(bs)
	if err != nil {
		return fmt.Errorf("locality: update: %w", err)
	}
	if healthy != nil && len(healthy) != set.Len() {
		return fmt.Errorf("locality: update: %d health flags for %d backends", len(healthy), set.Len())
	}
	if b.locate != nil {
		for i, be := range set.Backends {
			set.Localities[i] = b.locate(be)
		}
	}
	up := make([]bool, set.Len())
	for i := range up {
		up[i] = healthy == nil || healthy[i]
	}
	// The backends leaving are retired first, so that the new snapshot
	// routes their late Dones; a refused set puts the record back.
	retired, queue, before := maps.Clone(b.retired), slices.Clone(b.queue), b.cur.Load()
	b.retire(set)
	err = b.apply(set, up, b.callers)
	if err != nil && b.cur.Load() == before {
		b.retired, b.queue = retired, queue
	}
	return err
}

// SetCallers replaces Config.Callers: how many callers run in each zone
// (nil: spread as the backends). It returns an error wrapping ErrConfig
// for a negative count or no caller at all, and keeps the previous counts.
//
// Cost: that of an UpdateHealth of the current set, without picker
// Updates (the callers change only the shares).
func (b *Balancer) SetCallers(callers map[string]int) error {
	c, err := checkCallers(callers)
	if err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.apply(b.set, b.healthy, c)
}

// SetOverprovisioning replaces Config.Overprovisioning, the factor in
// percent (100 to 1000; 0 goes back to the one New was given), for the
// current set and those that follow: a discovery source whose endpoints
// carry a factor of their own (an xDS ClusterLoadAssignment's
// policy.overprovisioning_factor) sets it with each set. It returns an
// error wrapping ErrConfig for a factor out of range, and keeps the
// previous one.
//
// Cost: that of an UpdateHealth of the current set, without picker
// Updates unless the levels' loads move a level into or out of panic.
func (b *Balancer) SetOverprovisioning(percent int) error {
	if percent == 0 {
		percent = b.s.overprovPercent
	}
	if percent < 100 || percent > MaxOverprovisioning {
		return fmt.Errorf("%w: overprovisioning %d, want 0 (the Config's, %d) or 100 to %d", ErrConfig, percent, b.s.overprovPercent, MaxOverprovisioning)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	factor, routing := b.overprov, b.cur.Load()
	b.overprov = float64(percent) / 100
	err := b.apply(b.set, b.healthy, b.callers)
	if err != nil && b.cur.Load() == routing {
		b.overprov = factor
	}
	return err
}

// apply lays out set and publishes the routing: pickers that gain or keep
// backends are updated first, then the snapshot is published (and set,
// healthy and callers become the Balancer's), then the pickers left
// without backends are emptied, so that a Pick running meanwhile always
// finds a picker with backends. An error before publishing leaves
// everything as it was. b.mu must be held.
func (b *Balancer) apply(set balancer.Set, healthy []bool, callers map[string]int) error {
	st := b.s
	st.overprov = b.overprov
	l := plan(set, healthy, st, callers)
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
	live := make(map[*group]bool)    // groups whose picker has backends now
	present := make(map[*group]bool) // groups of the set, with backends or not
	prev := b.cur.Load()
	places := make([]place, set.Len())
	s := &snapshot{byID: make(map[string]*place, set.Len()+len(b.retired))}
	for id, pl := range b.retired {
		s.byID[id] = pl
	}
	for _, lv := range l.levels {
		var lr levelRoute
		lr.local = -1
		lvView := Level{Priority: lv.priority, Healthy: lv.healthy, Total: lv.total, Load: lv.load, Panic: lv.panic, ZoneAware: lv.zoneAware}
		var shares []float64
		for _, z := range lv.zones {
			g, err := b.group(groupKey{lv.priority, z.zone})
			if err != nil {
				undo()
				return err
			}
			present[g] = true
			for _, i := range z.all {
				id, be := set.IDs[i], set.Backends[i]
				places[i] = place{home: home{g, be}, before: moved(prev.byID[id], g)}
				s.byID[id] = &places[i]
			}
			next := make([]balancer.Backend, len(z.handed))
			for j, i := range z.handed {
				next[j] = set.Backends[i]
			}
			lvView.Zones = append(lvView.Zones, Zone{Zone: z.zone, Healthy: z.healthy, Total: len(z.all), Handed: len(next), Share: z.share})
			if len(next) == 0 {
				continue
			}
			live[g] = true
			if !sameBackends(g.handed, next) {
				if err := g.child.Update(next); err != nil {
					undo()
					return fmt.Errorf("locality: update: the picker of zone %q at priority %d: %w", z.zone, lv.priority, err)
				}
				done = append(done, change{g, g.handed})
				g.handed = next
			}
			if lv.zoneAware && z.zone == b.s.zone {
				lr.local = len(lr.zones)
			}
			lr.zones = append(lr.zones, len(s.walk))
			shares = append(shares, z.share)
			s.walk = append(s.walk, route{child: g.child, fb: g.fb, n: len(next)})
			s.total += len(next)
		}
		s.view.Levels = append(s.view.Levels, lvView)
		if len(lr.zones) == 0 {
			continue
		}
		if lr.local >= 0 {
			lr.localCut = cutOf(shares[lr.local])
			shares[lr.local] = 0 // the draw that is not local goes elsewhere
		}
		lr.cut = cumulative(shares)
		s.levels = append(s.levels, lr)
	}
	var loads []float64
	for _, lv := range l.levels {
		if slices.ContainsFunc(lv.zones, func(z zonePlan) bool { return len(z.handed) > 0 }) {
			loads = append(loads, lv.load)
		}
	}
	s.levelCut = cumulative(loads)
	alone := true // every place is in one group, and none has moved
	for _, pl := range s.byID {
		s.feedback = s.feedback || pl.g.fb != nil
		for _, h := range pl.before {
			s.feedback = s.feedback || h.g.fb != nil
		}
		switch {
		case !alone:
		case len(pl.before) > 0, s.only != nil && s.only != pl.g:
			alone, s.only = false, nil
		default:
			s.only = pl.g
		}
	}
	if s.only != nil {
		s.feedback = s.only.fb != nil
	}
	b.cur.Store(s)
	b.set, b.healthy, b.callers = set, healthy, callers
	// Empty the pickers left out, which no new Pick reaches.
	var errs []error
	for _, g := range b.groups {
		if !live[g] && len(g.handed) > 0 {
			if err := g.child.Update(nil); err != nil {
				errs = append(errs, fmt.Errorf("locality: update: emptying the picker of zone %q at priority %d: %w", g.key.zone, g.key.priority, err))
				continue
			}
			g.handed = nil
		}
	}
	b.trimGroups(present, s)
	return errors.Join(errs...)
}

// maxIdle is how many pickers without backends a Balancer keeps, so that a
// zone that empties and fills again finds its picker's state.
const maxIdle = 64

// trimGroups drops idle pickers beyond maxIdle, in key order: those of no
// zone of the set, without backends, and not needed by a late Done of a
// removed or moved backend (those are bounded by the retired record,
// max(n, 64), and maxMoves), as s routes them. b.mu must be held.
func (b *Balancer) trimGroups(present map[*group]bool, s *snapshot) {
	needed := make(map[*group]bool)
	for _, pl := range s.byID {
		needed[pl.g] = true
		for _, h := range pl.before {
			needed[h.g] = true
		}
	}
	var idle []*group
	for _, g := range b.groups {
		if !present[g] && !needed[g] && len(g.handed) == 0 {
			idle = append(idle, g)
		}
	}
	if len(idle) <= maxIdle {
		return
	}
	slices.SortFunc(idle, func(x, y *group) int {
		return cmp.Or(cmp.Compare(x.key.priority, y.key.priority), cmp.Compare(x.key.zone, y.key.zone))
	})
	for _, g := range idle[maxIdle:] {
		delete(b.groups, g.key)
		_ = balancer.CloseInner(g.child)
	}
}

// group returns the picker of key, making it if need be. b.mu must be held.
func (b *Balancer) group(key groupKey) (*group, error) {
	if g := b.groups[key]; g != nil {
		return g, nil
	}
	child := b.spare
	b.spare = nil
	if child == nil {
		child = b.newPicker()
		if isNil(child) {
			return nil, fmt.Errorf("locality: update: newPicker returned nil for zone %q at priority %d", key.zone, key.priority)
		}
	}
	switch {
	case b.closed:
		// No background work after Close: a picker made now is closed
		// before it is used, as Close closed the others.
		if err := balancer.CloseInner(child); err != nil {
			return nil, fmt.Errorf("locality: update: closing the picker of zone %q at priority %d: %w", key.zone, key.priority, err)
		}
	case b.ctx != nil:
		if err := balancer.StartInner(b.ctx, child); err != nil {
			return nil, fmt.Errorf("locality: update: starting the picker of zone %q at priority %d: %w", key.zone, key.priority, err)
		}
	}
	g := &group{key: key, child: child}
	g.fb, _ = child.(balancer.Feedback)
	g.ic, _ = child.(balancer.InFlightCounter)
	b.groups[key] = g
	return g, nil
}

// retire remembers the places of the backends of the previous set that
// left it, the last max(n, 64) of them, so that a Done arriving after the
// removal still reaches the picker that counted the request. b.mu must be
// held; set is the new set.
func (b *Balancer) retire(set balancer.Set) {
	prev := b.cur.Load()
	in := make(map[string]bool, set.Len())
	for _, id := range set.IDs {
		in[id] = true
		delete(b.retired, id)
	}
	for _, id := range b.set.IDs {
		if !in[id] {
			if pl := prev.byID[id]; pl != nil {
				kept := *pl // not a pointer into the snapshot's array, which it would keep
				b.retired[id] = &kept
				b.queue = append(b.queue, id)
			}
		}
	}
	for len(b.retired) > max(set.Len(), minRetired) && len(b.queue) > 0 {
		id := b.queue[0]
		b.queue = b.queue[1:]
		delete(b.retired, id)
	}
	if len(b.queue) > 2*len(b.retired)+minRetired {
		b.queue = slices.DeleteFunc(b.queue, func(id string) bool { return b.retired[id] == nil })
	}
}

func sameBackends(a, b []balancer.Backend) bool {
	return slices.Equal(a, b)
}

// cutOf turns a probability into a threshold for a uniform 64-bit draw.
func cutOf(p float64) uint64 {
	if p >= 1 {
		return math.MaxUint64
	}
	if p <= 0 {
		return 0
	}
	return uint64(p * (1 << 64))
}

// cumulative returns the thresholds of a draw over shares: x < cut[i]
// chooses i. Shares that add up to 0 are read as equal; the last
// threshold is the largest uint64, so that every draw chooses.
func cumulative(shares []float64) []uint64 {
	sum := 0.0
	for _, p := range shares {
		sum += p
	}
	cut := make([]uint64, len(shares))
	acc := 0.0
	for i, p := range shares {
		if sum > 0 {
			acc += p / sum
		} else {
			acc += 1 / float64(len(shares))
		}
		cut[i] = cutOf(acc)
	}
	if len(cut) > 0 {
		cut[len(cut)-1] = math.MaxUint64
	}
	return cut
}

// choose returns the first i with x < cut[i], or the last.
func choose(cut []uint64, x uint64) int {
	for i, c := range cut {
		if x < c {
			return i
		}
	}
	return len(cut) - 1
}

// keySalt decorrelates the draw of a keyed request from the key's hash as
// a hash picker inside uses it (xxhash of the key): the draw is mix(hash ^
// keySalt), so the keys sent to one zone are spread over that zone's ring,
// not bunched in one arc of it.
const keySalt = 0x9e3779b97f4a7c15

// mix is the finaliser of SplitMix64: a bijection of 64-bit numbers whose
// every output bit depends on every input bit.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Pick chooses a level and a zone, then returns the pick of that zone's
// picker. The draw is the hash of req.Key for a request with a key, so
// that a key goes to the same zone in every process that sees the same
// set, and a random number otherwise.
//
// Retries: Attempt n of a key walks from its zone's picker (attempts 0 to
// m−1 there, for a zone of m backends) on to the next zone's, level by
// level, so that a hash picker's sequence reaches every backend once. A
// pick equal to req.Avoid, which a picker returns only when it has no
// other, moves on to the next zone with backends, and so does a picker
// with none; the pick moved from is handed back with
// Done(balancer.ErrAbandoned). A set of one backend returns it.
//
// Cost: one atomic load, a hash of the key or a random number, two mixes,
// a scan of the levels' and zones' cuts, and the inner Pick (with one
// zone and level, the inner Pick alone); no lock, no allocation.
func (b *Balancer) Pick(req balancer.Request) (balancer.Backend, error) {
	s := b.cur.Load()
	for range 3 {
		got, err := b.pickFrom(s, req)
		if err != balancer.ErrNoBackend { //nolint:errorlint // Pick returns the sentinel itself
			return got, err
		}
		// An Update publishes the new snapshot and then empties the
		// pickers it leaves out: a Pick that walked the old one may have
		// found each of them emptied. If a newer snapshot is there, its
		// pickers have the set: try it.
		next := b.cur.Load()
		if next == s {
			return nil, err
		}
		s = next
	}
	return b.pickFrom(s, req)
}

// pickFrom picks from snapshot s, as Pick says.
func (b *Balancer) pickFrom(s *snapshot, req balancer.Request) (balancer.Backend, error) {
	if len(s.walk) == 0 {
		return nil, balancer.ErrNoBackend
	}
	i := 0
	if len(s.walk) > 1 {
		var x uint64
		if req.Key != "" {
			x = mix(xxhash.Sum64String(req.Key) ^ keySalt)
		} else {
			x = b.s.rand()
		}
		i = s.route(x)
	}
	inner := req
	if req.Attempt > 0 {
		a := req.Attempt % s.total
		for a >= s.walk[i].n {
			a -= s.walk[i].n
			i = (i + 1) % len(s.walk)
		}
		inner.Attempt = a
	}
	var avoided balancer.Backend // the pick of Avoid, if no other comes
	var avoidedFrom balancer.Feedback
	for range s.walk {
		r := &s.walk[i]
		got, err := r.child.Pick(inner)
		switch {
		case err == balancer.ErrNoBackend, err == nil && got == nil: //nolint:errorlint // Pick returns the sentinel itself
		case err != nil:
			b.handBack(avoidedFrom, avoided)
			return nil, err
		case req.Avoid != "" && got.ID() == req.Avoid:
			if avoided == nil {
				avoided, avoidedFrom = got, r.fb
			} else if r.fb != nil {
				r.fb.Done(got, balancer.Result{Err: balancer.ErrAbandoned})
			}
		default:
			b.handBack(avoidedFrom, avoided)
			return got, nil
		}
		i = (i + 1) % len(s.walk)
		inner.Attempt = 0
	}
	if avoided != nil {
		return avoided, nil
	}
	return nil, balancer.ErrNoBackend
}

// handBack tells fb that the pick of be will not be sent.
func (b *Balancer) handBack(fb balancer.Feedback, be balancer.Backend) {
	if fb != nil && be != nil {
		fb.Done(be, balancer.Result{Err: balancer.ErrAbandoned})
	}
}

// route returns the position in walk of the zone a draw x chooses.
func (s *snapshot) route(x uint64) int {
	lv := &s.levels[choose(s.levelCut, x)]
	y := mix(x ^ keySalt)
	if lv.local >= 0 && y < lv.localCut {
		return lv.zones[lv.local]
	}
	return lv.zones[choose(lv.cut, mix(y^keySalt))]
}

// Done passes the result to the picker that picked be, if it is a
// balancer.Feedback: the picker of the zone and priority be was in when
// it was picked, also after be has left the set (for the last max(n, 64)
// backends removed) or moved to another zone or priority (for its last 8
// zones). A moved backend's requests are told apart by the value: one
// with a Locality of an earlier zone goes to that zone's picker (a new
// Locality is a new value: Endpoint.At, lbkube); when the same value
// moved (a Backend whose Locality changed in place), the old zone's
// picker takes its Dones while it counts requests to be
// (balancer.InFlightCounter). Done for nil or an unknown backend does
// nothing.
//
// Cost: one atomic load, one map read by ID (none when every backend is
// in one zone and level, or no picker inside has a Done), for a moved
// backend a comparison per earlier zone, and the inner Done; no lock, no
// allocation.
func (b *Balancer) Done(be balancer.Backend, r balancer.Result) {
	s := b.cur.Load()
	if !s.feedback || be == nil {
		return
	}
	g := s.only
	if g == nil {
		id := be.ID()
		pl := s.byID[id]
		if pl == nil {
			return
		}
		g = pl.from(be, id)
	}
	if g.fb != nil {
		g.fb.Done(be, r)
	}
}

// Start starts the background work of every picker inside that has a
// Start method (balancer.StartInner), now and as pickers are made for new
// zones, until ctx ends. It returns their errors, joined, each as it is.
// A second Start returns an error wrapping balancer.ErrStarted, and Start
// after Close one wrapping balancer.ErrClosed, and neither starts
// anything.
func (b *Balancer) Start(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.closed:
		return fmt.Errorf("locality: start: %w", balancer.ErrClosed)
	case b.ctx != nil:
		return fmt.Errorf("locality: start: %w", balancer.ErrStarted)
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
// for a new zone after Close is closed as it is made. The Balancer keeps
// working, without their background work. Close is idempotent: a second
// Close does nothing.
//
// A Balancer has no Unwrap: it holds a picker per zone, not one. Put
// health around it (see the package doc) and call health's Drain,
// Maintenance and Enable; the pickers inside have no admin methods of
// their own to reach.
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

// View returns how the current set is routed: each level's share of this
// caller's traffic, and each zone's share of its level's.
func (b *Balancer) View() View {
	v := b.cur.Load().view
	out := View{Levels: slices.Clone(v.Levels)}
	for i := range out.Levels {
		out.Levels[i].Zones = slices.Clone(out.Levels[i].Zones)
	}
	return out
}
