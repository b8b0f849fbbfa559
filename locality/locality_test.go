package locality_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/locality"
	"github.com/lbkit/lbkit/rr"
)

func TestNewRefuses(t *testing.T) {
	newRR := func() balancer.Balancer { return rr.New() }
	tests := []struct {
		name      string
		newPicker func() balancer.Balancer
		cfg       locality.Config
		msg       string
	}{
		{"nil newPicker", nil, locality.Config{}, "locality: invalid config: balancer: bad option: nil newPicker"},
		{"newPicker returns nil", func() balancer.Balancer { return nil }, locality.Config{}, "locality: invalid config: balancer: bad option: newPicker returned nil"},
		{"newPicker returns a nil pointer", func() balancer.Balancer { return (*rr.Picker)(nil) }, locality.Config{}, "locality: invalid config: balancer: bad option: newPicker returned nil"},
		{"negative MinSize", newRR, locality.Config{MinSize: -1}, "locality: invalid config: balancer: bad option: MinSize is -1, want 0 (the default, 6) or more"},
		{"overprovisioning below 100", newRR, locality.Config{Overprovisioning: 99}, "locality: invalid config: balancer: bad option: Overprovisioning is 99, want 0 (the default, 140) or 100 to 1000"},
		{"overprovisioning too large", newRR, locality.Config{Overprovisioning: 1001}, "locality: invalid config: balancer: bad option: Overprovisioning is 1001, want 0 (the default, 140) or 100 to 1000"},
		{"negative panic", newRR, locality.Config{PanicPercent: -1}, "locality: invalid config: balancer: bad option: PanicPercent is -1, want 0 (the default, 50) or 1 to 100"},
		{"panic above 100", newRR, locality.Config{PanicPercent: 101}, "locality: invalid config: balancer: bad option: PanicPercent is 101, want 0 (the default, 50) or 1 to 100"},
		{"negative callers", newRR, locality.Config{Callers: map[string]int{"a": 1, "b": -1}}, `locality: invalid config: balancer: bad option: Callers["b"] is -1, want 0 or more`},
		{"no callers", newRR, locality.Config{Callers: map[string]int{"a": 0}}, "locality: invalid config: balancer: bad option: Callers counts no caller in any zone; pass nil to spread callers as the backends"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := locality.New(tt.newPicker, tt.cfg)
			assert.Nil(t, l)
			assert.ErrorIs(t, err, locality.ErrConfig)
			assert.ErrorIs(t, err, balancer.ErrBadOption)
			assert.EqualError(t, err, tt.msg)
		})
	}
}

// Envoy's two cases of zone-aware routing, and the conditions under which
// it gives way to routing by healthy weight alone.
func TestZoneAware(t *testing.T) {
	three := concat(tier("a", 0, 10), tier("b", 0, 10), tier("c", 0, 10))
	small := concat(tier("a", 0, 2), tier("b", 0, 2), tier("c", 0, 2))
	tests := []struct {
		name    string
		cfg     locality.Config
		set     []balancer.Backend
		down    []string
		aware   bool
		want    map[string]float64 // zone shares of level 0
		localIn float64            // the local zone's share of real picks, ±0.02
	}{
		{"even zones: all local", locality.Config{Zone: "a"}, three, nil, true,
			map[string]float64{"a": 1, "b": 0, "c": 0}, 1},
		// Callers spread as the backends (a third each); a keeps 0.2/(1/3)
		// = 60%, and b and c take the rest by their room, 0.4 − 1/3 each.
		{"half of the local zone down: spill", locality.Config{Zone: "a"}, three,
			ids(three[:5]), true, map[string]float64{"a": 0.6, "b": 0.2, "c": 0.2}, 0.6},
		// A quarter of the callers in a, a third of the backends: all local.
		{"fewer callers than backends: all local", locality.Config{Zone: "a", Callers: map[string]int{"a": 1, "b": 1, "c": 2}}, three, nil, true,
			map[string]float64{"a": 1, "b": 0, "c": 0}, 1},
		// Half the callers in c, a third of the backends: c keeps
		// (1/3)/(1/2) = 2/3, a and b take 1/3 − 1/4 each, evenly.
		{"more callers than backends: spill", locality.Config{Zone: "c", Callers: map[string]int{"a": 1, "b": 1, "c": 2}}, three, nil, true,
			map[string]float64{"a": 1.0 / 6, "b": 1.0 / 6, "c": 2.0 / 3}, 2.0 / 3},
		{"smaller than MinSize: by healthy weight", locality.Config{Zone: "a"}, small, ids(small[2:3]), false,
			map[string]float64{"a": 0.4, "b": 0.2, "c": 0.4}, 0.4},
		{"MinSize met", locality.Config{Zone: "a"}, small, nil, true,
			map[string]float64{"a": 1, "b": 0, "c": 0}, 1},
		{"local zone all down: by healthy weight", locality.Config{Zone: "a"}, three, ids(three[:10]), false,
			map[string]float64{"a": 0, "b": 0.5, "c": 0.5}, 0},
		{"no backend in the caller's zone", locality.Config{Zone: "d"}, three, nil, false,
			map[string]float64{"a": 1.0 / 3, "b": 1.0 / 3, "c": 1.0 / 3}, 0},
		{"no Zone: by healthy weight", locality.Config{}, three, ids(three[:5]), false,
			map[string]float64{"a": 0.2, "b": 0.4, "c": 0.4}, 0.2},
		{"one zone only", locality.Config{Zone: "a"}, tier("a", 0, 10), nil, false,
			map[string]float64{"a": 1}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newRR(t, tt.cfg)
			require.NoError(t, l.UpdateHealth(tt.set, healthOf(tt.set, tt.down...)))
			v := l.View()
			require.Len(t, v.Levels, 1)
			assert.Equal(t, tt.aware, v.Levels[0].ZoneAware)
			got := zoneShares(v, 0)
			for z, w := range tt.want {
				assert.InDelta(t, w, got[z], 1e-9, "zone %s", z)
			}
			zones, backends := shares(t, l, 30000, balancer.Request{})
			local := tt.cfg.Zone
			if local == "" {
				local = "a"
			}
			assert.InDelta(t, tt.localIn, zones[local], 0.02, "the local zone's share of picks")
			for _, d := range tt.down {
				assert.Zero(t, backends[d], "an unhealthy backend is not picked")
			}
		})
	}
}

// Priority levels after Envoy: a level keeps all its traffic while its
// healthy share times 1.4 reaches 100%, and spills the rest down the
// chain; when the levels together fall short, each takes its health over
// their sum, and a level below 50% healthy panics: its traffic goes to all
// of its backends.
func TestPriorities(t *testing.T) {
	l0, l1, l2 := tier("a", 0, 10), tier("a", 1, 10), tier("a", 2, 10)
	two := concat(l0, l1)
	tests := []struct {
		name  string
		cfg   locality.Config
		set   []balancer.Backend
		down  []string
		loads map[int]float64
		panic map[int]bool
	}{
		{"all healthy", locality.Config{}, two, nil, map[int]float64{0: 1, 1: 0}, nil},
		{"80% healthy: 1.4 × 0.8 covers it", locality.Config{}, two, ids(l0[:2]), map[int]float64{0: 1, 1: 0}, nil},
		{"70% healthy", locality.Config{}, two, ids(l0[:3]), map[int]float64{0: 0.98, 1: 0.02}, nil},
		{"60% healthy", locality.Config{}, two, ids(l0[:4]), map[int]float64{0: 0.84, 1: 0.16}, nil},
		{"30% healthy", locality.Config{}, two, ids(l0[:7]), map[int]float64{0: 0.42, 1: 0.58}, nil},
		{"level 0 down", locality.Config{}, two, ids(l0), map[int]float64{0: 0, 1: 1}, nil},
		{"spill chain", locality.Config{}, concat(l0, l1, l2), ids(concat(l0[:7], l1[:7])),
			map[int]float64{0: 0.42, 1: 0.42, 2: 0.16}, nil},
		// Healths 0.42 and 0.28 add up to 0.70: normalised, 0.6 and 0.4;
		// both levels are below 50% healthy and panic.
		{"short overall: normalised, panic", locality.Config{}, two, ids(concat(l0[:7], l1[:8])),
			map[int]float64{0: 0.6, 1: 0.4}, map[int]bool{0: true, 1: true}},
		{"short overall, level 1 above the threshold", locality.Config{}, two, ids(concat(l0[:8], l1[:5])),
			map[int]float64{0: 0.28 / 0.98, 1: 0.7 / 0.98}, map[int]bool{0: true}},
		{"NoPanic", locality.Config{NoPanic: true}, two, ids(concat(l0[:7], l1[:8])),
			map[int]float64{0: 0.6, 1: 0.4}, nil},
		{"nothing healthy: level 0 in panic", locality.Config{NoPanic: true}, two, ids(two),
			map[int]float64{0: 1, 1: 0}, map[int]bool{0: true}},
		{"overprovisioning 100%", locality.Config{Overprovisioning: 100}, two, ids(l0[:1]),
			map[int]float64{0: 0.9, 1: 0.1}, nil},
		{"panic threshold 20%", locality.Config{PanicPercent: 20}, two, ids(concat(l0[:7], l1[:8])),
			map[int]float64{0: 0.6, 1: 0.4}, map[int]bool{0: false, 1: false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newRR(t, tt.cfg)
			require.NoError(t, l.UpdateHealth(tt.set, healthOf(tt.set, tt.down...)))
			v := l.View()
			got := loads(v)
			for p, w := range tt.loads {
				assert.InDelta(t, w, got[p], 1e-9, "level %d", p)
			}
			for _, lv := range v.Levels {
				assert.Equal(t, tt.panic[lv.Priority], lv.Panic, "level %d panic", lv.Priority)
				want := lv.Healthy
				if lv.Panic {
					want = lv.Total
				}
				assert.Equal(t, want, lv.Zones[0].Handed, "level %d: the picker has the healthy backends, or all in panic", lv.Priority)
			}
			picked := map[int]float64{}
			downPicked := 0
			_, backends := shares(t, l, 30000, balancer.Request{})
			for _, b := range tt.set {
				picked[balancer.LocalityOf(b).Priority] += backends[b.ID()]
				for _, d := range tt.down {
					if d == b.ID() && backends[d] > 0 {
						downPicked++
					}
				}
			}
			for p, w := range tt.loads {
				assert.InDelta(t, w, picked[p], 0.02, "level %d's share of picks", p)
			}
			if len(tt.panic) == 0 || !tt.panic[0] && !tt.panic[1] {
				assert.Zero(t, downPicked, "no unhealthy backend picked outside panic")
			} else {
				assert.Positive(t, downPicked, "in panic, unhealthy backends are picked")
			}
		})
	}
}

// The fleet the simulator's zones scenario will run, in miniature: four
// callers, two of them in zone a, and backends provisioned to match (12,
// 6, 6). Every caller routes through its own Balancer. All traffic stays
// in its zone while every zone is whole; when zone a loses half its
// backends, a third of a's traffic spills, in proportion to the room b
// and c have, and every healthy backend ends up with the same load.
func TestZonesFleet(t *testing.T) {
	set := concat(tier("a", 0, 12), tier("b", 0, 6), tier("c", 0, 6))
	callers := map[string]int{"a": 2, "b": 1, "c": 1}
	fleet := []string{"a", "a", "b", "c"}
	run := func(down []string) (inZone float64, load map[string]float64) {
		load = map[string]float64{}
		const picks = 12000
		for i, zone := range fleet {
			l := newLC(t, locality.Config{Zone: zone, Callers: callers, Rand: seeded(uint64(i + 1))})
			require.NoError(t, l.UpdateHealth(set, healthOf(set, down...)))
			zones, backends := shares(t, l, picks, balancer.Request{})
			inZone += zones[zone] / float64(len(fleet))
			for id, s := range backends {
				load[id] += s / float64(len(fleet))
			}
		}
		return inZone, load
	}
	spread := func(load map[string]float64, healthy int) (lo, hi float64) {
		mean := 1 / float64(healthy)
		lo = 2
		for _, b := range set {
			if l, ok := load[b.ID()]; ok {
				lo, hi = min(lo, l/mean), max(hi, l/mean)
			}
		}
		return lo, hi
	}

	inZone, load := run(nil)
	lo, hi := spread(load, len(set))
	t.Logf("whole: %.1f%% in zone, load %.2f to %.2f of the mean", inZone*100, lo, hi)
	assert.GreaterOrEqual(t, inZone, 0.90, "at least 90% of requests stay in their zone")
	assert.InDelta(t, 1, lo, 0.1)
	assert.InDelta(t, 1, hi, 0.1)

	down := ids(set[:6])
	inZone, load = run(down)
	lo, hi = spread(load, len(set)-len(down))
	t.Logf("zone a at half: %.1f%% in zone, load %.2f to %.2f of the mean", inZone*100, lo, hi)
	assert.InDelta(t, 0.5*2.0/3+0.5, inZone, 0.02, "a keeps two thirds, b and c keep all")
	assert.InDelta(t, 1, lo, 0.1, "no healthy backend is left idle")
	assert.InDelta(t, 1, hi, 0.1, "no backend is pushed past the others")
	for _, d := range down {
		assert.Zero(t, load[d])
	}
}

// A request with a key draws its level and zone from the key's hash: two
// Balancers with the same set send a key to the same backend, and the keys
// spill in the same proportion as random draws do.
func TestKeyedDraws(t *testing.T) {
	set := concat(tier("a", 0, 10), tier("b", 0, 10), tier("c", 0, 10))
	up := healthOf(set, ids(set[:5])...)
	newRing := func() *locality.Balancer {
		l, err := locality.New(func() balancer.Balancer { return leastconn.New() }, locality.Config{Zone: "a", Rand: seeded(9)})
		require.NoError(t, err)
		require.NoError(t, l.UpdateHealth(set, up))
		return l
	}
	x, y := newRing(), newRing()
	local := 0
	const n = 20000
	for i := range n {
		key := fmt.Sprintf("user-%d", i)
		bx, err := x.Pick(balancer.Request{Key: key})
		require.NoError(t, err)
		by, err := y.Pick(balancer.Request{Key: key})
		require.NoError(t, err)
		assert.Equal(t, balancer.LocalityOf(bx).Zone, balancer.LocalityOf(by).Zone, "key %s", key)
		if balancer.LocalityOf(bx).Zone == "a" {
			local++
		}
		x.Done(bx, balancer.Result{})
		y.Done(by, balancer.Result{})
	}
	assert.InDelta(t, 0.6, float64(local)/n, 0.02)
}

// A retry that avoids the only backend of its zone reaches another zone;
// a set of one returns its backend.
func TestAvoidCrossesZones(t *testing.T) {
	set := concat(tier("a", 0, 1), tier("b", 0, 3), tier("c", 1, 2))
	l := newRR(t, locality.Config{Zone: "a", MinSize: 1})
	require.NoError(t, l.Update(set))
	for range 50 {
		b, err := l.Pick(balancer.Request{Attempt: 1, Avoid: set[0].ID()})
		require.NoError(t, err)
		assert.NotEqual(t, set[0].ID(), b.ID())
		l.Done(b, balancer.Result{})
	}
	one := tier("a", 0, 1)
	require.NoError(t, l.Update(one))
	b, err := l.Pick(balancer.Request{Avoid: one[0].ID()})
	require.NoError(t, err)
	assert.Equal(t, one[0], b)
}

// Done reaches the picker of the zone the backend was picked in, also
// after the backend has left the set, so that in-flight counts come back
// to zero.
func TestDoneReachesZonePicker(t *testing.T) {
	var made []*leastconn.Picker
	l, err := locality.New(func() balancer.Balancer {
		p := leastconn.New()
		made = append(made, p)
		return p
	}, locality.Config{Zone: "a", MinSize: 1})
	require.NoError(t, err)
	set := concat(tier("a", 0, 2), tier("b", 0, 2))
	require.NoError(t, l.Update(set))
	b, err := l.Pick(balancer.Request{})
	require.NoError(t, err)
	inflight := func() int64 {
		var n int64
		for _, p := range made {
			n += p.InFlight(b.ID())
		}
		return n
	}
	assert.Equal(t, int64(1), inflight())
	var rest []balancer.Backend
	for _, x := range set {
		if x.ID() != b.ID() {
			rest = append(rest, x)
		}
	}
	require.NoError(t, l.Update(rest))
	l.Done(b, balancer.Result{Latency: 1e6})
	assert.Zero(t, inflight(), "the late Done reached the picker that counted it")

	l.Done(nil, balancer.Result{})
	l.Done(balancer.NewEndpoint("stranger:1", 1), balancer.Result{})
}

// A refused set, a health slice of the wrong length, or a picker that
// refuses its share leave every picker and the routing as they were.
func TestUpdateErrorKeepsState(t *testing.T) {
	var fail bool
	l, err := locality.New(func() balancer.Balancer { return &refuser{Picker: rr.New(), fail: &fail} }, locality.Config{})
	require.NoError(t, err)
	set := concat(tier("a", 0, 4), tier("b", 0, 4))
	require.NoError(t, l.Update(set))
	before := l.View()

	assert.ErrorIs(t, l.Update(append(tier("c", 0, 2), nil)), balancer.ErrNilBackend)
	assert.ErrorIs(t, l.Update(tier("a", 200, 1)), balancer.ErrBadLocality)
	assert.EqualError(t, l.UpdateHealth(set, []bool{true}), "locality: update: 1 health flags for 8 backends")

	fail = true
	err = l.UpdateHealth(set, healthOf(set, ids(set[:2])...))
	assert.ErrorIs(t, err, errRefused)
	fail = false
	assert.Equal(t, before, l.View())
	_, backends := shares(t, l, 2000, balancer.Request{})
	for _, b := range set {
		assert.Positive(t, backends[b.ID()], "%s: every backend of the previous set is still picked", b.ID())
	}
}

var errRefused = errors.New("refused")

// refuser is rr that refuses every Update while *fail is set.
type refuser struct {
	*rr.Picker
	fail *bool
}

func (r *refuser) Update(bs []balancer.Backend) error {
	if *r.fail && len(bs) > 0 {
		return errRefused
	}
	return r.Picker.Update(bs)
}

func TestSetCallers(t *testing.T) {
	set := concat(tier("a", 0, 10), tier("b", 0, 10), tier("c", 0, 10))
	l := newRR(t, locality.Config{Zone: "c"})
	require.NoError(t, l.Update(set))
	assert.InDelta(t, 1, zoneShares(l.View(), 0)["c"], 1e-9)

	require.NoError(t, l.SetCallers(map[string]int{"a": 1, "b": 1, "c": 2}))
	assert.InDelta(t, 2.0/3, zoneShares(l.View(), 0)["c"], 1e-9)

	assert.ErrorIs(t, l.SetCallers(map[string]int{"c": -1}), locality.ErrConfig)
	assert.ErrorIs(t, l.SetCallers(map[string]int{}), locality.ErrConfig)
	assert.InDelta(t, 2.0/3, zoneShares(l.View(), 0)["c"], 1e-9, "refused counts leave the previous ones")

	require.NoError(t, l.SetCallers(nil))
	assert.InDelta(t, 1, zoneShares(l.View(), 0)["c"], 1e-9, "nil: callers spread as the backends")
}

// SetOverprovisioning changes the factor of a live Balancer (an xDS
// ClusterLoadAssignment carries its own): the routing of the current set
// follows at once, and later sets keep the new factor; 0 goes back to the
// Config's; a factor out of range is refused and the previous one stays.
func TestSetOverprovisioning(t *testing.T) {
	l0, l1 := tier("a", 0, 10), tier("a", 1, 10)
	two := concat(l0, l1)
	l := newRR(t, locality.Config{Overprovisioning: 120})
	require.NoError(t, l.UpdateHealth(two, healthOf(two, ids(l0[:4])...)))
	assert.InDelta(t, 0.72, loads(l.View())[0], 1e-9, "Config's 1.2 × 60% healthy")

	require.NoError(t, l.SetOverprovisioning(150))
	assert.InDelta(t, 0.9, loads(l.View())[0], 1e-9, "1.5 × 60%")
	require.NoError(t, l.SetOverprovisioning(100))
	assert.InDelta(t, 0.6, loads(l.View())[0], 1e-9, "1.0 × 60%")

	for _, bad := range []int{99, 1001, -1} {
		err := l.SetOverprovisioning(bad)
		require.ErrorIs(t, err, locality.ErrConfig, "%d", bad)
		assert.Contains(t, err.Error(), fmt.Sprintf("overprovisioning %d", bad))
	}
	assert.InDelta(t, 0.6, loads(l.View())[0], 1e-9, "refused factors leave the previous one")

	require.NoError(t, l.UpdateHealth(two, healthOf(two, ids(l0[:3])...)))
	assert.InDelta(t, 0.7, loads(l.View())[0], 1e-9, "the next set keeps the factor")

	require.NoError(t, l.SetOverprovisioning(0))
	assert.InDelta(t, 0.84, loads(l.View())[0], 1e-9, "0: the Config's factor again, 1.2 × 70%")

	fresh := newRR(t, locality.Config{})
	require.NoError(t, fresh.SetOverprovisioning(200), "before any set")
	require.NoError(t, fresh.UpdateHealth(two, healthOf(two, ids(l0[:6])...)))
	assert.InDelta(t, 0.8, loads(fresh.View())[0], 1e-9, "2.0 × 40%, set before the first Update")
}

func TestEmpty(t *testing.T) {
	l := newRR(t, locality.Config{Zone: "a"})
	_, err := l.Pick(balancer.Request{})
	assert.Equal(t, balancer.ErrNoBackend, err) //nolint:testifylint // the sentinel itself
	require.NoError(t, l.SetCallers(map[string]int{"a": 1}), "before any set")
	require.NoError(t, l.Update(tier("a", 0, 3)))
	require.NoError(t, l.Update(nil))
	_, err = l.Pick(balancer.Request{Key: "k"})
	assert.Equal(t, balancer.ErrNoBackend, err) //nolint:testifylint // the sentinel itself
	assert.Empty(t, l.View().Levels)
}

// Start and Close reach every picker inside, those made after Start too
// (here health decorators, one per zone, which the package doc advises
// against, since health around the Balancer sees more).
func TestStartCloseReachPickers(t *testing.T) {
	var made []*health.Balancer
	l, err := locality.New(func() balancer.Balancer {
		h, err := health.New(rr.New(), health.Config{})
		require.NoError(t, err)
		made = append(made, h)
		return h
	}, locality.Config{})
	require.NoError(t, err)
	set := concat(tier("a", 0, 2), tier("b", 0, 2))
	require.NoError(t, l.Update(set))
	require.NoError(t, l.Start(t.Context()))
	require.NoError(t, l.Update(concat(set, tier("c", 0, 1))))
	require.Len(t, made, 3)
	for _, h := range made {
		assert.ErrorIs(t, h.Start(t.Context()), balancer.ErrStarted, "Start reached every picker, the late one too")
	}
	require.NoError(t, l.Close())
	for _, h := range made {
		assert.ErrorIs(t, h.Start(t.Context()), balancer.ErrClosed, "Close reached every picker")
	}

	plain := newRR(t, locality.Config{})
	require.NoError(t, plain.Update(set))
	assert.NoError(t, plain.Start(t.Context()))
	assert.NoError(t, plain.Close())
}

// With a seeded Rand and seeded pickers inside, driven from one goroutine,
// two Balancers pick the same sequence: what the simulator relies on.
func TestDeterministic(t *testing.T) {
	set := concat(tier("a", 0, 4), tier("b", 0, 4), tier("c", 0, 4), tier("a", 1, 4))
	up := healthOf(set, ids(set[:3])...)
	run := func() []string {
		l := newLC(t, locality.Config{Zone: "a", MinSize: 1, Rand: seeded(42)})
		require.NoError(t, l.UpdateHealth(set, up))
		var seq []string
		for i := range 500 {
			b, err := l.Pick(balancer.Request{Attempt: i % 3})
			require.NoError(t, err)
			seq = append(seq, b.ID())
			if i%2 == 0 {
				l.Done(b, balancer.Result{Latency: 1e6})
			}
		}
		return seq
	}
	assert.Equal(t, run(), run())
}

// Zones come and go by the hundred (a typo in a zone label, say): idle
// pickers are dropped beyond a bound, never those a late Done still needs
// or those of a zone of the set whose backends are all unhealthy.
func TestIdlePickersBounded(t *testing.T) {
	made := 0
	l, err := locality.New(func() balancer.Balancer { made++; return leastconn.New() }, locality.Config{})
	require.NoError(t, err)
	keep := tier("kept", 0, 2)
	for i := range 200 {
		set := concat(keep, tier(fmt.Sprintf("z%d", i), 0, 1))
		require.NoError(t, l.UpdateHealth(set, healthOf(set, keep[0].ID(), keep[1].ID())))
	}
	b, err := l.Pick(balancer.Request{})
	require.NoError(t, err)
	require.NoError(t, l.Update(keep))
	l.Done(b, balancer.Result{}) // reaches the retired zone's picker, without a panic
	assert.Equal(t, 201, made, "one picker per zone seen")
	assert.LessOrEqual(t, locality.Pickers(l), 1+64+64, "the kept zone, the 64 a late Done may need, 64 idle")
	got, err := l.Pick(balancer.Request{})
	require.NoError(t, err)
	assert.Contains(t, ids(keep), got.ID())
}

// parking is a picker whose first Pick, once armed, waits for release:
// a way to hold a locality Pick inside a zone's picker while an Update
// runs.
type parking struct {
	balancer.Balancer
	armed   atomic.Bool
	parked  chan struct{}
	release chan struct{}
}

func (p *parking) Pick(req balancer.Request) (balancer.Backend, error) {
	if p.armed.CompareAndSwap(true, false) {
		close(p.parked)
		<-p.release
	}
	return p.Balancer.Pick(req)
}

// A Pick that walked the snapshot before an Update, and reaches a zone's
// picker only once the Update has emptied it (the zone left the set),
// picks from the set now in place instead of failing with ErrNoBackend
// (the conformance kit's Concurrent check saw it about once in 150 runs).
func TestPickDuringUpdate(t *testing.T) {
	var made []*parking
	l, err := locality.New(func() balancer.Balancer {
		p := &parking{Balancer: rr.New(), parked: make(chan struct{}), release: make(chan struct{})}
		made = append(made, p)
		return p
	}, locality.Config{Rand: seeded(1)})
	require.NoError(t, err)
	require.NoError(t, l.Update(tier("a", 0, 3)))
	require.NotEmpty(t, made)
	first := made[len(made)-1]
	first.armed.Store(true)

	type pick struct {
		b   balancer.Backend
		err error
	}
	got := make(chan pick, 1)
	go func() {
		b, err := l.Pick(balancer.Request{})
		got <- pick{b, err}
	}()
	<-first.parked
	moved := tier("b", 0, 3)
	require.NoError(t, l.Update(moved)) // zone a leaves; its picker is emptied
	close(first.release)
	p := <-got
	require.NoError(t, p.err, "a Pick caught across the Update must find the new set")
	assert.Contains(t, ids(moved), p.b.ID())
}

// emptyRefuser is rr that refuses to be emptied while *fail is set.
type emptyRefuser struct {
	*rr.Picker
	fail *bool
}

func (r *emptyRefuser) Update(bs []balancer.Backend) error {
	if *r.fail && len(bs) == 0 {
		return errRefused
	}
	return r.Picker.Update(bs)
}

// A picker that refuses to be emptied, after the new routing is
// published, fails the Update, but the new set is the one in place: a
// later SetCallers lays it out (and empties that picker), not the set
// before, and a backend that left gets no pick.
func TestEmptyingErrorKeepsNewSet(t *testing.T) {
	fail := true
	l, err := locality.New(func() balancer.Balancer { return &emptyRefuser{Picker: rr.New(), fail: &fail} }, locality.Config{})
	require.NoError(t, err)
	require.NoError(t, l.Update(concat(tier("a", 0, 2), tier("b", 0, 2))))
	left := tier("b", 0, 2)
	assert.ErrorIs(t, l.Update(left), errRefused, "zone a's picker refused to be emptied")
	after := l.View()
	require.Len(t, after.Levels, 1)
	require.Len(t, after.Levels[0].Zones, 1, "the new set is routed")

	fail = false
	require.NoError(t, l.SetCallers(map[string]int{"b": 1}), "zone a's picker is emptied now")
	assert.Equal(t, after, l.View(), "SetCallers lays out the set in place")
	_, backends := shares(t, l, 200, balancer.Request{})
	for id := range backends {
		assert.Contains(t, ids(left), id)
	}
}

// counting is rr counting its Updates.
type counting struct {
	*rr.Picker
	updates *int
}

func (c counting) Update(bs []balancer.Backend) error {
	*c.updates++
	return c.Picker.Update(bs)
}

// Only the pickers whose set changed are updated (UpdateHealth's doc, and
// the package doc's Cost): a health flip updates one zone's picker, and
// SetCallers none.
func TestUpdatesOnlyChangedPickers(t *testing.T) {
	updates := 0
	l, err := locality.New(func() balancer.Balancer { return counting{rr.New(), &updates} }, locality.Config{Zone: "a"})
	require.NoError(t, err)
	set := concat(tier("a", 0, 4), tier("b", 0, 4), tier("c", 0, 4), tier("a", 1, 4))
	require.NoError(t, l.UpdateHealth(set, nil))
	assert.Equal(t, 4, updates, "one Update per zone and level")

	updates = 0
	require.NoError(t, l.UpdateHealth(set, healthOf(set, set[5].ID())))
	assert.Equal(t, 1, updates, "a health flip in zone b updates zone b's picker only")
	updates = 0
	require.NoError(t, l.UpdateHealth(set, healthOf(set, set[5].ID())))
	assert.Zero(t, updates, "the same set and health again: no Update")
	require.NoError(t, l.SetCallers(map[string]int{"a": 1, "b": 1, "c": 1}))
	assert.Zero(t, updates, "callers change only the shares")
}
