package leastconn_test

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/leastconn"
)

// modes are the ways to run a Picker that every test of behaviour common to
// all of them goes through.
var modes = []struct {
	name string
	opts []leastconn.Option
}{
	{"auto", nil},
	{"scan", []leastconn.Option{leastconn.WithScan()}},
	{"choices=2", []leastconn.Option{leastconn.WithChoices(2)}},
	{"choices=3", []leastconn.Option{leastconn.WithChoices(3)}},
}

// seeded returns a WithRand option with a fixed seed, so that every test is
// repeatable.
func seeded(seed uint64) leastconn.Option {
	return leastconn.WithRand(rand.New(rand.NewPCG(seed, seed)).Uint64)
}

func newPicker(t *testing.T, bs []balancer.Backend, opts ...leastconn.Option) *leastconn.Picker {
	t.Helper()
	p := leastconn.New(append([]leastconn.Option{seeded(1)}, opts...)...)
	require.NoError(t, p.Update(bs))
	return p
}

func TestConformance(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			balancertest.Run(t, func() balancer.Balancer { return leastconn.New(m.opts...) })
		})
	}
}

func named(prefix string, n int) []balancer.Backend {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%d:80", prefix, i)
	}
	return balancer.Endpoints(ids...)
}

func weighted(ws ...int) []balancer.Backend {
	bs := make([]balancer.Backend, len(ws))
	for i, w := range ws {
		bs[i] = balancer.NewEndpoint(fmt.Sprintf("w%d:80", i), w)
	}
	return bs
}

// shares makes n picks, each followed at once by its Done, and returns the
// fraction of them each backend got, by ID.
func shares(t *testing.T, p *leastconn.Picker, n int, req balancer.Request) map[string]float64 {
	t.Helper()
	got := map[string]float64{}
	for range n {
		b, err := p.Pick(req)
		require.NoError(t, err)
		got[b.ID()] += 1 / float64(n)
		p.Done(b, balancer.Result{})
	}
	return got
}

// hold picks n times without calling Done and returns what was picked.
func hold(t *testing.T, p *leastconn.Picker, n int, req balancer.Request) []balancer.Backend {
	t.Helper()
	held := make([]balancer.Backend, n)
	for i := range held {
		b, err := p.Pick(req)
		require.NoError(t, err)
		held[i] = b
	}
	return held
}

func TestEmpty(t *testing.T) {
	p := leastconn.New()
	b, err := p.Pick(balancer.Request{})
	assert.Nil(t, b)
	assert.True(t, err == balancer.ErrNoBackend, "Pick must return the sentinel itself, got %v", err)
	p.Done(nil, balancer.Result{})
	assert.Zero(t, p.InFlight("a:80"))
}

func TestPickCountsAndDoneUncounts(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			bs := named("c", 2)
			p := newPicker(t, bs, m.opts...)
			held := hold(t, p, 6, balancer.Request{})
			// Least connections on equal backends: three each, whatever the
			// mode (two backends are scanned, also with choices).
			for _, b := range bs {
				assert.Equal(t, int64(3), p.InFlight(b.ID()), b.ID())
			}
			for _, b := range held {
				p.Done(b, balancer.Result{Err: errors.New("failed")})
			}
			for _, b := range bs {
				assert.Equal(t, int64(0), p.InFlight(b.ID()), b.ID())
			}
			// An extra Done does not take a count below zero.
			p.Done(bs[0], balancer.Result{})
			assert.Equal(t, int64(0), p.InFlight(bs[0].ID()))
		})
	}
}

// The scan always returns the least loaded backend, and among weights the
// one with the least (in-flight+1)/weight, idle backends first.
func TestScanTakesLeastLoaded(t *testing.T) {
	tests := []struct {
		name    string
		weights []int
		load    []int // requests held on each backend before the pick
		want    int   // index of the backend the next pick must take
	}{
		{"one idle", []int{1, 1, 1, 1}, []int{2, 1, 0, 3}, 2},
		{"one less loaded", []int{1, 1, 1, 1}, []int{5, 4, 5, 5}, 1},
		// (1+1)/1 = 2 against (9+1)/10 = 1: the heavy one, although it
		// holds nine times as many.
		{"weight beats count", []int{1, 10}, []int{1, 9}, 1},
		// (1+1)/1 = 2 against (4+1)/3 ≈ 1.67: the heavy one. Comparing
		// in-flight/weight, as nginx does, would take the light one (1 < 1.33).
		{"the load after the pick decides", []int{1, 3}, []int{1, 4}, 1},
		// (1+1)/1 = 2 against (19+1)/10 = 2 is a tie; (20+1)/10 > 2.
		{"weight up to its share", []int{1, 10}, []int{1, 20}, 0},
		// An idle backend beats any loaded one, whatever the weights.
		{"idle beats heavy", []int{1, 1000}, []int{0, 1}, 0},
		{"avoid loaded", []int{1, 1, 1}, []int{1, 1, 0}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bs := weighted(tt.weights...)
			p := newPicker(t, bs, leastconn.WithScan())
			for i, n := range tt.load {
				for range n {
					// Hold requests on backend i only: a one-backend set
					// counts them on it, and Update carries the count.
					require.NoError(t, p.Update(bs[i:i+1]))
					hold(t, p, 1, balancer.Request{})
				}
			}
			require.NoError(t, p.Update(bs))
			for i, n := range tt.load {
				require.Equal(t, int64(n), p.InFlight(bs[i].ID()))
			}
			for range 20 { // the same answer every time, not by luck
				b, err := p.Pick(balancer.Request{})
				require.NoError(t, err)
				assert.Equal(t, bs[tt.want].ID(), b.ID())
				p.Done(b, balancer.Result{})
			}
		})
	}
}

// loadAllBut holds requests on every backend except bs[free], at least one
// each, using Avoid, and returns them.
func loadAllBut(t *testing.T, p *leastconn.Picker, bs []balancer.Backend, free int) []balancer.Backend {
	t.Helper()
	held := hold(t, p, 8*len(bs), balancer.Request{Avoid: bs[free].ID()})
	for i, b := range bs {
		if i != free {
			require.Positive(t, p.InFlight(b.ID()), "backend %d should hold requests", i)
		}
	}
	require.Zero(t, p.InFlight(bs[free].ID()))
	return held
}

// How often the one idle backend is picked tells how many candidates a
// pick compares: all of them in a scan, k of n with k choices (k/n).
func TestModeBySize(t *testing.T) {
	tests := []struct {
		name string
		opts []leastconn.Option
		n    int
		want float64 // share of picks that find the idle backend
	}{
		{"auto below ScanBelow scans", nil, leastconn.ScanBelow - 1, 1},
		{"auto at ScanBelow uses two choices", nil, leastconn.ScanBelow, 2 / float64(leastconn.ScanBelow)},
		{"auto at 100 uses two choices", nil, 100, 2.0 / 100},
		{"WithScan at 100", []leastconn.Option{leastconn.WithScan()}, 100, 1},
		{"WithChoices(2) at 4", []leastconn.Option{leastconn.WithChoices(2)}, 4, 2.0 / 4},
		{"WithChoices(5) at 20", []leastconn.Option{leastconn.WithChoices(5)}, 20, 5.0 / 20},
		{"WithChoices(MaxChoices)", []leastconn.Option{leastconn.WithChoices(leastconn.MaxChoices)}, leastconn.MaxChoices + 1,
			float64(leastconn.MaxChoices) / float64(leastconn.MaxChoices+1)},
		{"choices covering the set scan", []leastconn.Option{leastconn.WithChoices(4)}, 4, 1},
		{"the last option wins: scan", []leastconn.Option{leastconn.WithChoices(2), leastconn.WithScan()}, 50, 1},
		{"the last option wins: choices", []leastconn.Option{leastconn.WithScan(), leastconn.WithChoices(2)}, 50, 2.0 / 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bs := named("m", tt.n)
			p := newPicker(t, bs, tt.opts...)
			loadAllBut(t, p, bs, 0)
			got := shares(t, p, 4000, balancer.Request{})[bs[0].ID()]
			// 4000 draws: the binomial standard deviation is at most 0.008.
			assert.InDelta(t, tt.want, got, 0.035)
		})
	}
}

// Ties are broken at random: equal idle backends get equal shares, and so
// do idle backends next to loaded ones (where a random start offset would
// favour the first idle one after the loaded run). Idle backends with
// weights share in proportion to weight.
func TestFairTies(t *testing.T) {
	tests := []struct {
		name    string
		opts    []leastconn.Option
		weights []int
		load    []int // held on each backend, with a scan, before measuring
		want    []float64
	}{
		{"scan, four idle", []leastconn.Option{leastconn.WithScan()}, []int{1, 1, 1, 1}, nil, []float64{.25, .25, .25, .25}},
		{"choices, four idle", []leastconn.Option{leastconn.WithChoices(2)}, []int{1, 1, 1, 1}, nil, []float64{.25, .25, .25, .25}},
		{"auto, 64 idle", nil, make([]int, 64), nil, nil},
		{"scan, two idle after two loaded", []leastconn.Option{leastconn.WithScan()}, []int{1, 1, 1, 1}, []int{1, 1, 0, 0}, []float64{0, 0, .5, .5}},
		{"scan, idle by weight", []leastconn.Option{leastconn.WithScan()}, []int{1, 2, 3, 4}, nil, []float64{.1, .2, .3, .4}},
		{"choices, idle by weight", []leastconn.Option{leastconn.WithChoices(2)}, []int{1, 2, 3, 4}, nil, []float64{.1, .2, .3, .4}},
		{"scan, loaded tie by weight", []leastconn.Option{leastconn.WithScan()}, []int{1, 3}, []int{1, 5}, []float64{.25, .75}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ws := tt.weights
			want := tt.want
			if want == nil { // n equal idle backends
				for i := range ws {
					ws[i] = 1
				}
				want = make([]float64, len(ws))
				for i := range want {
					want[i] = 1 / float64(len(ws))
				}
			}
			bs := weighted(ws...)
			p := newPicker(t, bs, tt.opts...)
			for i, n := range tt.load {
				require.NoError(t, p.Update(bs[i:i+1]))
				hold(t, p, n, balancer.Request{})
			}
			require.NoError(t, p.Update(bs))
			const picks = 64000
			got := shares(t, p, picks, balancer.Request{})
			for i, b := range bs {
				// Five standard deviations of a binomial share.
				eps := 5 * math.Sqrt(want[i]*(1-want[i])/picks)
				assert.InDelta(t, want[i], got[b.ID()], max(eps, 1e-9), b.ID())
			}
		})
	}
}

func TestAvoid(t *testing.T) {
	t.Run("scan skips the least loaded", func(t *testing.T) {
		bs := named("a", 3)
		p := newPicker(t, bs, leastconn.WithScan())
		hold(t, p, 3, balancer.Request{}) // one each
		p.Done(bs[0], balancer.Result{})  // a0 is the least loaded
		for range 50 {
			b, err := p.Pick(balancer.Request{Avoid: bs[0].ID()})
			require.NoError(t, err)
			assert.NotEqual(t, bs[0].ID(), b.ID())
			p.Done(b, balancer.Result{})
		}
	})
	t.Run("choices never return it", func(t *testing.T) {
		bs := named("a", 200)
		p := newPicker(t, bs, leastconn.WithChoices(2))
		loadAllBut(t, p, bs, 7) // backend 7 idle, so a candidate wins when drawn
		got := shares(t, p, 5000, balancer.Request{Avoid: bs[7].ID()})
		assert.Zero(t, got[bs[7].ID()])
	})
	// When the backend to avoid holds nearly all the weight, every draw
	// lands on it; the pick falls back to a scan rather than return it.
	t.Run("choices with the avoided backend holding the weight", func(t *testing.T) {
		bs := weighted(balancer.MaxWeight, 1, 1, 1, 1)
		p := newPicker(t, bs, leastconn.WithChoices(2))
		got := shares(t, p, 2000, balancer.Request{Avoid: bs[0].ID()})
		assert.Zero(t, got[bs[0].ID()])
		assert.InDelta(t, 1.0, got[bs[1].ID()]+got[bs[2].ID()]+got[bs[3].ID()]+got[bs[4].ID()], 1e-9)
	})
	t.Run("the only backend is returned", func(t *testing.T) {
		bs := named("a", 1)
		p := newPicker(t, bs)
		b, err := p.Pick(balancer.Request{Avoid: bs[0].ID()})
		require.NoError(t, err)
		assert.Equal(t, bs[0].ID(), b.ID())
		assert.Equal(t, int64(1), p.InFlight(bs[0].ID()))
	})
}

// Counts follow the ID across updates: a backend that is removed and comes
// back keeps its count, and a Done that arrives while it is away still
// counts down its counter and no other.
func TestCountsCarriedAcrossUpdate(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			a, b, c := balancer.NewEndpoint("a:80", 1), balancer.NewEndpoint("b:80", 1), balancer.NewEndpoint("c:80", 1)
			p := newPicker(t, []balancer.Backend{a}, m.opts...)
			hold(t, p, 3, balancer.Request{}) // a: 3

			require.NoError(t, p.Update([]balancer.Backend{c, b, a})) // reordered and grown
			assert.Equal(t, int64(3), p.InFlight("a:80"))
			held := hold(t, p, 4, balancer.Request{}) // b and c catch up: 2 each
			for _, h := range held {
				assert.NotEqual(t, "a:80", h.ID())
			}

			require.NoError(t, p.Update([]balancer.Backend{b, c})) // a leaves
			p.Done(a, balancer.Result{})                           // a late answer from a
			p.Done(a, balancer.Result{})
			assert.Equal(t, int64(1), p.InFlight("a:80"), "the removed backend's counter")
			assert.Equal(t, int64(2), p.InFlight("b:80"), "untouched by a's Done")
			assert.Equal(t, int64(2), p.InFlight("c:80"), "untouched by a's Done")

			// A new Backend value with a's ID is the same backend.
			a2 := balancer.NewEndpoint("a:80", 1)
			require.NoError(t, p.Update([]balancer.Backend{a2, b, c}))
			assert.Equal(t, int64(1), p.InFlight("a:80"), "a came back with its count")
			p.Done(a, balancer.Result{})
			assert.Equal(t, int64(0), p.InFlight("a:80"))
		})
	}
}

// A refused update keeps the previous set and its counts.
func TestUpdateErrors(t *testing.T) {
	good := named("g", 2)
	tests := []struct {
		name string
		set  []balancer.Backend
		want error
		msg  string
	}{
		{"duplicate", balancer.Endpoints("x:1", "y:1", "x:1"), balancer.ErrDuplicateID,
			`leastconn: update: balancer: duplicate backend ID "x:1" at positions 0 and 2`},
		{"nil", []balancer.Backend{good[0], nil}, balancer.ErrNilBackend,
			"leastconn: update: balancer: nil backend at position 1"},
		{"zero weight", []balancer.Backend{balancer.NewEndpoint("z:1", 0)}, balancer.ErrBadWeight,
			`leastconn: update: balancer: weight out of range: "z:1" at position 0 has weight 0, want 1 to 1000000`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPicker(t, good)
			hold(t, p, 2, balancer.Request{})
			err := p.Update(tt.set)
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.want)
			assert.EqualError(t, err, tt.msg)
			for _, b := range good {
				assert.Equal(t, int64(1), p.InFlight(b.ID()))
			}
			for range 10 {
				b, err := p.Pick(balancer.Request{})
				require.NoError(t, err)
				assert.Contains(t, []string{good[0].ID(), good[1].ID()}, b.ID())
			}
		})
	}
}

func TestUpdateCopiesSlice(t *testing.T) {
	bs := named("s", 3)
	p := newPicker(t, bs)
	bs[0] = balancer.NewEndpoint("intruder:1", 1)
	got := shares(t, p, 300, balancer.Request{})
	assert.Zero(t, got["intruder:1"])
	assert.Len(t, got, 3)
}

// Pick and Done allocate nothing, in every mode, with and without weights
// and Avoid.
func TestPickDoneAllocs(t *testing.T) {
	sets := map[string][]balancer.Backend{
		"equal":    named("e", 64),
		"weighted": weighted(1, 5, 2, 8, 3, 9, 4, 7, 6, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11),
	}
	for _, m := range modes {
		for name, bs := range sets {
			t.Run(m.name+"/"+name, func(t *testing.T) {
				p := leastconn.New(m.opts...) // the default rand source
				require.NoError(t, p.Update(bs))
				held := hold(t, p, 3*len(bs), balancer.Request{}) // some load, some ties
				i := 0
				allocs := testing.AllocsPerRun(2000, func() {
					b, err := p.Pick(balancer.Request{Key: "192.0.2.1", Avoid: bs[i%len(bs)].ID()})
					i++
					if err == nil {
						p.Done(b, balancer.Result{})
					}
				})
				assert.Zero(t, allocs)
				for _, b := range held {
					p.Done(b, balancer.Result{})
				}
			})
		}
	}
}

// Pick, Done and Update race from several goroutines, with sets that drop
// and re-add backends, so that Done often arrives after its backend left.
// Once every request has finished, every count is back to zero. Run with
// -race.
func TestStressCountsReturnToZero(t *testing.T) {
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			all := named("x", 40)
			for i := 0; i < len(all); i += 3 { // some weights
				all[i] = balancer.NewEndpoint(all[i].ID(), 1+i%5)
			}
			sets := [][]balancer.Backend{all, all[:10], all[5:30], all[20:], all[:3], all[1:2]}
			p := leastconn.New(m.opts...)
			require.NoError(t, p.Update(all))

			const pickers, rounds = 4, 3000
			var wg sync.WaitGroup
			for g := range pickers {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), 7))
					var held []balancer.Backend
					for i := range rounds {
						b, err := p.Pick(balancer.Request{Avoid: all[i%len(all)].ID()})
						if !assert.NoError(t, err) {
							return
						}
						held = append(held, b)
						// Finish a random held request about as often as
						// one starts, keeping up to ~16 in flight.
						for len(held) > 0 && (len(held) > 16 || r.IntN(2) == 0) {
							j := r.IntN(len(held))
							p.Done(held[j], balancer.Result{})
							held[j] = held[len(held)-1]
							held = held[:len(held)-1]
						}
					}
					for _, b := range held {
						p.Done(b, balancer.Result{})
					}
				})
			}
			wg.Go(func() {
				for i := range 300 {
					assert.NoError(t, p.Update(sets[i%len(sets)]))
				}
			})
			wg.Wait()

			for _, b := range all {
				assert.Zero(t, p.InFlight(b.ID()), b.ID())
			}
		})
	}
}

func TestInFlightUnknown(t *testing.T) {
	p := newPicker(t, named("k", 2))
	hold(t, p, 2, balancer.Request{})
	assert.Zero(t, p.InFlight("nobody:80"))
	assert.Zero(t, p.InFlight(""))
	assert.Equal(t, int64(1), p.InFlight("k0:80"))
}

// WithRand's promise holds on the rarest path too: when every draw lands
// on the backend to avoid (it holds nearly all the weight), the fallback
// scan breaks its ties from the same draw rather than calling rnd again.
func TestOneRandCallPerPick(t *testing.T) {
	src := rand.New(rand.NewPCG(3, 3))
	calls := 0
	p := leastconn.New(leastconn.WithChoices(2), leastconn.WithRand(func() uint64 { calls++; return src.Uint64() }))
	set := []balancer.Backend{balancer.NewEndpoint("heavy", balancer.MaxWeight)}
	for i := range 15 {
		set = append(set, balancer.NewEndpoint(fmt.Sprintf("light-%d", i), 1))
	}
	require.NoError(t, p.Update(set))
	most := 0
	for range 2000 {
		calls = 0
		b, err := p.Pick(balancer.Request{Avoid: "heavy"})
		require.NoError(t, err)
		require.NotEqual(t, "heavy", b.ID())
		most = max(most, calls)
		p.Done(b, balancer.Result{Latency: time.Millisecond})
	}
	assert.Equal(t, 1, most, "calls to rnd in one Pick, at most")
}
