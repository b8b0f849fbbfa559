package lrt_test

import (
	"context"
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
	"github.com/lbkit/lbkit/lrt"
)

const ms = time.Millisecond

var errFail = errors.New("lrt_test: simulated failure")

func addrs(n int) []string {
	a := make([]string, n)
	for i := range a {
		a[i] = fmt.Sprintf("10.0.%d.%d:8080", i/256, i%256)
	}
	return a
}

func TestConformance(t *testing.T) {
	for _, m := range modes {
		t.Run("mode="+m.String(), func(t *testing.T) {
			balancertest.Run(t, func() balancer.Balancer { return lrt.New(lrt.WithMode(m)) })
		})
	}
}

// virtual is a clock the test moves by hand.
type virtual struct{ now time.Duration }

var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

func (v *virtual) time() time.Time { return epoch.Add(v.now) }

// fixture is a Picker on a virtual clock with backends named by letter.
type fixture struct {
	t     *testing.T
	clock *virtual
	p     *lrt.Picker
}

func newFixture(t *testing.T, opts ...lrt.Option) *fixture {
	f := &fixture{t: t, clock: &virtual{}}
	f.p = lrt.New(append([]lrt.Option{lrt.WithClock(f.clock.time), lrt.WithRand(rand.New(rand.NewPCG(1, 2)).Uint64)}, opts...)...)
	return f
}

func (f *fixture) update(ids ...string) {
	f.t.Helper()
	require.NoError(f.t, f.p.Update(balancer.Endpoints(ids...)))
}

func (f *fixture) done(id string, lat time.Duration, err error) {
	f.p.Done(balancer.NewEndpoint(id, 1), balancer.Result{Latency: lat, Err: err})
}

func (f *fixture) stats(id string) lrt.Stats {
	f.t.Helper()
	s, ok := f.p.Stats(balancer.NewEndpoint(id, 1))
	require.True(f.t, ok, "no stats for %q", id)
	return s
}

// pick returns the ID Pick chose, leaving the request in flight.
func (f *fixture) pick(avoid string) string {
	f.t.Helper()
	b, err := f.p.Pick(balancer.Request{Avoid: avoid})
	require.NoError(f.t, err)
	return b.ID()
}

// e returns e^(−t/τ) for the default τ: how much an estimate keeps after t.
func e(t time.Duration) float64 { return math.Exp(-t.Seconds() / lrt.DefaultDecay.Seconds()) }

// scale returns d·x.
func scale(d time.Duration, x float64) time.Duration { return time.Duration(float64(d) * x) }

// A step is, at a virtual time, an Update (set non-nil) or a Done.
type step struct {
	at   time.Duration
	set  []string
	id   string
	lat  time.Duration
	fail bool
}

// every returns Dones of lat for id every period until end.
func every(period, end time.Duration, id string, lat time.Duration) []step {
	var s []step
	for at := period; at <= end; at += period {
		s = append(s, step{at: at, id: id, lat: lat})
	}
	return s
}

// failures returns n fast failures of id at time 0.
func failures(n int, id string) []step {
	s := make([]step, n)
	for i := range s {
		s[i] = step{id: id, lat: ms, fail: true}
	}
	return s
}

func TestEstimate(t *testing.T) {
	type want struct {
		lat      time.Duration
		measured bool
	}
	ab := []string{"a", "b"}
	tests := []struct {
		name  string
		opts  []lrt.Option
		steps []step
		at    time.Duration // when Stats is read
		want  map[string]want
	}{
		{"no measurement: the initial estimate", nil,
			[]step{{set: ab}}, 0,
			map[string]want{"a": {100 * ms, false}, "b": {100 * ms, false}}},
		{"WithInitial sets it", []lrt.Option{lrt.WithInitial(30 * ms)},
			[]step{{set: ab}}, 0,
			map[string]want{"a": {30 * ms, false}}},
		{"the initial estimate decays too", nil,
			[]step{{set: ab}}, 10 * time.Second,
			map[string]want{"a": {scale(100*ms, e(10*time.Second)), false}}},
		{"the first response replaces the initial estimate, up or down", nil,
			[]step{{set: ab}, {at: time.Second, id: "a", lat: 300 * ms}, {at: time.Second, id: "b", lat: 20 * ms}}, time.Second,
			map[string]want{"a": {300 * ms, true}, "b": {20 * ms, true}}},
		{"a slower response raises it at once", nil,
			[]step{{set: ab}, {id: "a", lat: 100 * ms}, {at: time.Second, id: "a", lat: 300 * ms}}, time.Second,
			map[string]want{"a": {300 * ms, true}}},
		{"a faster response lowers it by the weight its time earned", nil,
			[]step{{set: ab}, {id: "a", lat: 300 * ms}, {at: time.Second, id: "a", lat: 100 * ms}}, time.Second,
			// 300·e^(−0.1) + 100·(1 − e^(−0.1)) = 280.97 ms
			map[string]want{"a": {scale(300*ms, e(time.Second)) + scale(100*ms, 1-e(time.Second)), true}}},
		{"faster responses for τ close the gap by a factor e, whatever their number", nil,
			append([]step{{set: ab}, {id: "a", lat: 300 * ms}}, every(10*ms, 10*time.Second, "a", 100*ms)...), 10 * time.Second,
			map[string]want{"a": {100*ms + scale(200*ms, e(10*time.Second)), true}}},
		{"idle, it decays toward zero: e^(−1) after τ", nil,
			[]step{{set: ab}, {id: "a", lat: 200 * ms}}, 10 * time.Second,
			map[string]want{"a": {scale(200*ms, e(10*time.Second)), true}}},
		{"idle, it decays toward zero: e^(−3) after 3τ", nil,
			[]step{{set: ab}, {id: "a", lat: 200 * ms}}, 30 * time.Second,
			map[string]want{"a": {scale(200*ms, e(30*time.Second)), true}}},
		{"WithDecay sets τ", []lrt.Option{lrt.WithDecay(time.Second)},
			[]step{{set: ab}, {id: "a", lat: 200 * ms}}, time.Second,
			map[string]want{"a": {scale(200*ms, e(10*time.Second)), true}}},
		{"a fast failure counts as twice the success estimate", nil,
			[]step{{set: ab}, {id: "a", lat: 100 * ms}, {at: time.Second, id: "a", lat: ms, fail: true}}, time.Second,
			map[string]want{"a": {200 * ms, true}}},
		{"a slow failure counts as twice its own latency", nil,
			[]step{{set: ab}, {id: "a", lat: 100 * ms}, {at: time.Second, id: "a", lat: 800 * ms, fail: true}}, time.Second,
			map[string]want{"a": {1600 * ms, true}}},
		{"consecutive failures double it each time", nil,
			[]step{{set: ab}, {id: "a", lat: 100 * ms}, {at: 1 * ms, id: "a", lat: ms, fail: true},
				{at: 2 * ms, id: "a", lat: ms, fail: true}, {at: 3 * ms, id: "a", lat: ms, fail: true}}, 3 * ms,
			map[string]want{"a": {800 * ms, true}}},
		{"the penalty stops at 64 times", nil,
			append([]step{{set: ab}, {id: "a", lat: 10 * ms}}, failures(10, "a")...), 0,
			map[string]want{"a": {640 * ms, true}}},
		{"a success ends the run: the next failure is a first one again", nil,
			[]step{{set: ab}, {id: "a", lat: 100 * ms}, {at: time.Second, id: "a", lat: ms, fail: true},
				{at: 2 * time.Second, id: "a", lat: 100 * ms}, {at: 3 * time.Second, id: "a", lat: ms, fail: true}}, 3 * time.Second,
			map[string]want{"a": {200 * ms, true}}},
		{"WithErrorFactor sets the factor", []lrt.Option{lrt.WithErrorFactor(3)},
			[]step{{set: ab}, {id: "a", lat: 100 * ms}, {id: "a", lat: ms, fail: true}, {id: "a", lat: ms, fail: true}}, 0,
			map[string]want{"a": {900 * ms, true}}},
		{"a failure before any success is sized from the initial estimate", nil,
			[]step{{set: ab}, {at: time.Second, id: "a", lat: ms, fail: true}}, time.Second,
			map[string]want{"a": {200 * ms, true}}},
		{"a newcomer gets the mean of the measured estimates", nil,
			[]step{{set: ab}, {id: "a", lat: 100 * ms}, {id: "b", lat: 300 * ms}, {set: []string{"a", "b", "c"}}}, 0,
			map[string]want{"a": {100 * ms, true}, "c": {200 * ms, false}}},
		{"the mean is of the estimates decayed to now", nil,
			[]step{{set: ab}, {id: "a", lat: 100 * ms}, {id: "b", lat: 300 * ms}, {at: 10 * time.Second, set: []string{"a", "b", "c"}}}, 10 * time.Second,
			map[string]want{"c": {scale(200*ms, e(10*time.Second)), false}}},
		{"provisional estimates are not in the mean", nil,
			[]step{{set: ab}, {id: "a", lat: 400 * ms}, {set: []string{"a", "b", "c"}}}, 0,
			map[string]want{"b": {100 * ms, false}, "c": {400 * ms, false}}},
		{"what was learned survives leaving the set and coming back", nil,
			[]step{{set: ab}, {id: "a", lat: 300 * ms}, {at: time.Second, set: []string{"b"}},
				{at: time.Second, id: "a", lat: 300 * ms}, // a late Done still counts
				{at: 2 * time.Second, set: ab}}, 2 * time.Second,
			map[string]want{"a": {scale(300*ms, e(time.Second)), true}}},
		{"an estimate a week old counts as no measurement", nil,
			[]step{{set: ab}, {id: "a", lat: 300 * ms}, {at: 7 * 24 * time.Hour, set: ab}}, 7 * 24 * time.Hour,
			map[string]want{"a": {100 * ms, false}}},
		{"a negative latency counts as zero", nil,
			[]step{{set: ab}, {id: "a", lat: 100 * ms}, {at: time.Second, id: "a", lat: -5 * ms}}, time.Second,
			map[string]want{"a": {scale(100*ms, e(time.Second)), true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, tt.opts...)
			for _, s := range tt.steps {
				f.clock.now = s.at
				if s.set != nil {
					f.update(s.set...)
					continue
				}
				var err error
				if s.fail {
					err = errFail
				}
				f.done(s.id, s.lat, err)
			}
			f.clock.now = tt.at
			for id, w := range tt.want {
				got := f.stats(id)
				assert.InEpsilon(t, float64(w.lat), float64(got.Latency), 1e-3, "%s: got %v, want %v", id, got.Latency, w.lat)
				assert.Equal(t, w.measured, got.Measured, "%s measured", id)
			}
		})
	}
}

// Pick compares estimate × (in flight + 1) in the Balanced mode and the
// estimate alone in the Naive mode, each decayed for its age.
func TestPickCost(t *testing.T) {
	tests := []struct {
		name     string
		mode     lrt.Mode
		a, b     time.Duration // estimates, learned at time 0
		bAt      time.Duration // when b's was learned, if later
		inflight int           // requests held on b
		want     string
	}{
		{"balanced: the faster when both are idle", lrt.Balanced, 100 * ms, 50 * ms, 0, 0, "b"},
		{"balanced: 50 ms × 3 in flight costs more than 100 ms × 1", lrt.Balanced, 100 * ms, 50 * ms, 0, 2, "a"},
		{"balanced: 50 ms × 2 in flight costs less than 110 ms × 1", lrt.Balanced, 110 * ms, 50 * ms, 0, 1, "b"},
		{"naive: the faster however loaded", lrt.Naive, 100 * ms, 50 * ms, 0, 5, "b"},
		// a's 200 ms learned 20 s before b's 50 ms reads 200·e^(−2) = 27 ms.
		{"an old estimate is decayed against a fresh one", lrt.Naive, 200 * ms, 50 * ms, 20 * time.Second, 0, "a"},
		// ... but 200·e^(−1) = 74 ms still loses.
		{"not more than its age says", lrt.Naive, 200 * ms, 50 * ms, 10 * time.Second, 0, "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, lrt.WithMode(tt.mode))
			f.update("a", "b")
			f.done("a", tt.a, nil)
			f.clock.now = tt.bAt
			f.done("b", tt.b, nil)
			for range tt.inflight {
				require.Equal(t, "b", f.pick("a"))
			}
			for range 3 { // the same answer from every random start
				got := f.pick("")
				assert.Equal(t, tt.want, got)
				// Release it. A zero latency can only lower the
				// winner's estimate, so the answer stays the same.
				f.done(got, 0, nil)
			}
		})
	}
}

// A backend that joins a measured set is neither flooded nor starved: with
// requests held in flight it takes an average backend's share of them.
func TestNewcomer(t *testing.T) {
	for _, n := range []int{4, 64} { // a full scan; two choices
		t.Run(fmt.Sprint("n=", n), func(t *testing.T) {
			f := newFixture(t)
			ids := addrs(n)
			old, newcomer := ids[:n-1], ids[n-1]
			f.update(old...)
			for _, id := range old {
				f.done(id, 100*ms, nil)
			}
			f.update(ids...)
			const each = 20
			held := map[string]int{}
			for range n * each {
				held[f.pick("")]++
			}
			st := f.stats(newcomer)
			assert.False(t, st.Measured)
			assert.Equal(t, 100*ms, st.Latency)
			// P2C keeps every count within a few of the mean.
			assert.InDelta(t, each, held[newcomer], 4, "newcomer's share of %d requests in flight", n*each)
			assert.InDelta(t, each, st.InFlight, 4)
		})
	}
}

// A backend that comes back after an absence is neither flooded (its
// estimate, decayed by the absence, would make it look nearly free) nor
// starved: below the mean it restarts from the mean; a slow one keeps what
// is left of its estimate and gets less.
func TestComeback(t *testing.T) {
	tests := []struct {
		name        string
		was         time.Duration // d's estimate when it left
		away        time.Duration
		lo, hi      int // d's share of 40 requests held in flight
		provisional bool
	}{
		{"fast, a second away", 100 * ms, time.Second, 9, 11, true},
		{"fast, a minute away", 100 * ms, time.Minute, 9, 11, true},
		// 400·e^(−0.5) = 243 ms against 100: a third of the share.
		{"slow, five seconds away", 400 * ms, 5 * time.Second, 2, 6, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			f.update("a", "b", "c", "d")
			f.done("d", tt.was, nil)
			f.update("a", "b", "c")
			// a, b and c keep answering in 100 ms while d is away.
			for now := time.Duration(0); now <= tt.away; now += 100 * ms {
				f.clock.now = now
				for _, id := range []string{"a", "b", "c"} {
					f.done(id, 100*ms, nil)
				}
			}
			f.update("a", "b", "c", "d")
			assert.Equal(t, !tt.provisional, f.stats("d").Measured)
			held := map[string]int{}
			for range 40 {
				held[f.pick("")]++
			}
			assert.GreaterOrEqual(t, held["d"], tt.lo, "held: %v", held)
			assert.LessOrEqual(t, held["d"], tt.hi, "held: %v", held)
		})
	}
}

// Had the newcomer started at zero, it would have taken every request until
// its first answer: what the provisional estimate prevents.
func TestZeroEstimateFloods(t *testing.T) {
	f := newFixture(t)
	f.update("a", "b", "c")
	for _, id := range []string{"a", "b", "c"} {
		f.done(id, 100*ms, nil)
	}
	f.update("a", "b", "c", "d")
	f.done("d", time.Nanosecond, nil) // a near-zero answer, not the initial estimate
	held := map[string]int{}
	for range 40 {
		held[f.pick("")]++
	}
	assert.Equal(t, 40, held["d"])
}

// A backend failing fast must not draw traffic: two fast failures in a row
// make a 50 ms backend cost more than a healthy 150 ms one.
func TestFailuresSteerAway(t *testing.T) {
	f := newFixture(t)
	f.update("fast", "slow")
	f.done("fast", 50*ms, nil)
	f.done("slow", 150*ms, nil)
	for i, want := range []time.Duration{100 * ms, 200 * ms} {
		f.clock.now += 10 * ms
		require.Equal(t, "fast", f.pick(""), "pick %d", i)
		f.done("fast", ms, errFail)
		assert.InEpsilon(t, float64(want), float64(f.stats("fast").Latency), 1e-3, "after failure %d", i+1)
	}
	assert.Equal(t, "slow", f.pick(""))
}

// An idle backend is tried again once its decayed estimate drops below the
// busy one's: for 500 ms against 50 ms, after τ·ln(10) = 23.0 s.
func TestIdleRetried(t *testing.T) {
	f := newFixture(t, lrt.WithMode(lrt.Naive))
	f.update("fast", "slow")
	f.done("fast", 50*ms, nil)
	f.done("slow", 500*ms, nil)
	var retried time.Duration
	for step := range 4000 { // 40 s, a request every 10 ms
		f.clock.now = time.Duration(step) * 10 * ms
		id := f.pick("")
		if id == "slow" {
			retried = f.clock.now
			break
		}
		f.done(id, 50*ms, nil)
	}
	want := time.Duration(lrt.DefaultDecay.Seconds() * math.Log(10) * float64(time.Second))
	assert.InDelta(t, want.Seconds(), retried.Seconds(), 0.02, "retried at %v, want %v", retried, want)
}

func TestAllocs(t *testing.T) {
	for _, m := range modes {
		for _, n := range []int{4, 64} {
			t.Run(fmt.Sprintf("mode=%v/n=%d", m, n), func(t *testing.T) {
				p := lrt.New(lrt.WithMode(m))
				bs := balancer.Endpoints(addrs(n)...)
				require.NoError(t, p.Update(bs))
				req := balancer.Request{Key: "192.0.2.1", Avoid: bs[1].ID()}
				var got balancer.Backend
				assert.Zero(t, testing.AllocsPerRun(1000, func() { got, _ = p.Pick(req) }), "Pick")
				i := 0
				assert.Zero(t, testing.AllocsPerRun(1000, func() {
					res := balancer.Result{Latency: time.Duration(i) * ms}
					if i%3 == 0 {
						res.Err = errFail
					}
					p.Done(bs[i%n], res)
					i++
				}), "Done")
				assert.NotNil(t, got)
			})
		}
	}
}

// Pick, Done, Update and Stats from many goroutines, under -race. When every
// request is done, no backend has any left in flight.
func TestConcurrent(t *testing.T) {
	for _, m := range modes {
		t.Run("mode="+m.String(), func(t *testing.T) {
			p := lrt.New(lrt.WithMode(m))
			all := balancer.Endpoints(addrs(12)...)
			sets := [][]balancer.Backend{all[:3], all[2:10], all, all[5:6]}
			require.NoError(t, p.Update(sets[0]))
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					r := rand.New(rand.NewPCG(uint64(g), 7))
					var held []balancer.Backend
					for i := range 5000 {
						b, err := p.Pick(balancer.Request{Avoid: all[i%12].ID()})
						if !assert.NoError(t, err) {
							return
						}
						held = append(held, b)
						if len(held) > 8 || i%3 == 0 {
							var err error
							if r.IntN(10) == 0 {
								err = errFail
							}
							k := r.IntN(len(held))
							p.Done(held[k], balancer.Result{Latency: time.Duration(r.IntN(100)) * ms, Err: err})
							held = append(held[:k], held[k+1:]...)
						}
					}
					for _, b := range held {
						p.Done(b, balancer.Result{Latency: ms})
					}
				})
			}
			wg.Go(func() {
				for i := range 200 {
					assert.NoError(t, p.Update(sets[i%len(sets)]))
					_, _ = p.Stats(all[i%12])
				}
			})
			wg.Wait()
			require.NoError(t, p.Update(all))
			for _, b := range all {
				st, ok := p.Stats(b)
				require.True(t, ok)
				assert.Zero(t, st.InFlight, b.ID())
			}
		})
	}
}

func TestUpdateErrors(t *testing.T) {
	p := lrt.New()
	good := balancer.Endpoints("a:1", "b:1")
	require.NoError(t, p.Update(good))
	tests := []struct {
		name string
		set  []balancer.Backend
		want error
		msg  string
	}{
		{"duplicate", balancer.Endpoints("x:1", "y:1", "x:1"), balancer.ErrDuplicateID, `lrt: update: balancer: duplicate backend ID "x:1" at positions 0 and 2`},
		{"nil", []balancer.Backend{good[0], nil}, balancer.ErrNilBackend, "lrt: update: balancer: nil backend at position 1"},
		{"zero weight", []balancer.Backend{balancer.NewEndpoint("z:1", 0)}, balancer.ErrBadWeight, `lrt: update: balancer: weight out of range: "z:1" at position 0 has weight 0, want 1 to 1000000`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := p.Update(tt.set)
			require.Error(t, err)
			assert.ErrorIs(t, err, tt.want)
			assert.EqualError(t, err, tt.msg)
			for range 10 {
				b, err := p.Pick(balancer.Request{})
				require.NoError(t, err)
				assert.Contains(t, []string{"a:1", "b:1"}, b.ID())
				p.Done(b, balancer.Result{Latency: ms})
			}
		})
	}
}

func TestStatsUnknown(t *testing.T) {
	p := lrt.New()
	require.NoError(t, p.Update(balancer.Endpoints("a:1")))
	for _, b := range []balancer.Backend{nil, balancer.NewEndpoint("stranger:1", 1)} {
		_, ok := p.Stats(b)
		assert.False(t, ok)
	}
	st, ok := p.Stats(balancer.NewEndpoint("a:1", 1))
	assert.True(t, ok)
	assert.Equal(t, lrt.DefaultInitial, st.Latency)
}

// InFlight is Stats' count, by ID: counted by Pick, counted down by Done,
// 0 for an ID never seen.
func TestInFlight(t *testing.T) {
	p := lrt.New()
	require.NoError(t, p.Update(balancer.Endpoints("a:1")))
	b, err := p.Pick(balancer.Request{})
	require.NoError(t, err)
	st, _ := p.Stats(b)
	assert.Equal(t, int64(1), st.InFlight)
	assert.Equal(t, int64(1), p.InFlight("a:1"))
	assert.Zero(t, p.InFlight("stranger:1"))
	p.Done(b, balancer.Result{Latency: ms})
	assert.Zero(t, p.InFlight("a:1"))
}

func TestModeString(t *testing.T) {
	assert.Equal(t, "balanced", lrt.Balanced.String())
	assert.Equal(t, "naive", lrt.Naive.String())
	assert.Equal(t, "Mode(7)", lrt.Mode(7).String())
}

// Under light load (one request at a time) every backend is tried within
// as many picks as there are backends, at start-up and when one joins
// later: a provisional estimate is put to the test at once. Without the
// trial, the first backend to answer in 10 ms would take every request
// while the others' provisional 100 ms decayed below it, some 23 s.
func TestColdStartTriesEveryBackend(t *testing.T) {
	service := map[string]time.Duration{"a": 10 * ms, "b": 20 * ms, "c": 30 * ms, "d": 40 * ms, "e": 15 * ms}
	for _, mode := range []lrt.Mode{lrt.Balanced, lrt.Naive} {
		t.Run(mode.String(), func(t *testing.T) {
			f := newFixture(t, lrt.WithMode(mode))
			one := func() string { // one request, answered before the next
				id := f.pick("")
				f.clock.now += service[id]
				f.done(id, service[id], nil)
				return id
			}
			f.update("a", "b", "c", "d")
			tried := map[string]bool{}
			for range 4 {
				tried[one()] = true
			}
			assert.Len(t, tried, 4, "every backend tried in the first 4 picks: %v", tried)
			for range 100 {
				one()
			}
			f.update("a", "b", "c", "d", "e")
			joined := false
			for range 5 {
				joined = joined || one() == "e"
			}
			assert.True(t, joined, "a newcomer is tried within 5 picks")
			assert.True(t, f.stats("e").Measured)
		})
	}
}

// A request given up on, or finished with nothing measured, leaves the
// in-flight count and teaches nothing: no zero-latency sample that would
// make the backend look free.
func TestAbandonedTeachesNothing(t *testing.T) {
	f := newFixture(t)
	f.update("a", "b")
	f.done("a", 100*ms, nil)
	f.done("b", 100*ms, nil)
	before := f.stats("a")
	for _, r := range []balancer.Result{
		{Err: balancer.ErrAbandoned},
		{Latency: 2 * ms, Err: context.Canceled},
		{Latency: 1, Err: fmt.Errorf("proxy: %w", balancer.ErrAbandoned)},
		{},
	} {
		require.Equal(t, "a", f.pick("b"))
		require.EqualValues(t, 1, f.stats("a").InFlight)
		f.p.Done(balancer.NewEndpoint("a", 1), r)
		after := f.stats("a")
		assert.EqualValues(t, 0, after.InFlight, "%+v leaves the in-flight count", r)
		assert.Equal(t, before.Latency, after.Latency, "%+v is no sample", r)
	}
	// A failure, even one measured at zero, is still a failure.
	f.done("a", 0, errors.New("refused"))
	assert.Greater(t, f.stats("a").Latency, before.Latency)
}

// A removed backend's requests still in flight keep its state alive, however
// many other backends come and go before their Dones arrive: when it comes
// back, its count is the true one. The Registry spares only states that
// report Busy; lrt's did not, and lost the count after 64 other IDs.
func TestRemovedBusyStateSurvivesChurn(t *testing.T) {
	f := newFixture(t)
	f.update("a")
	for range 5 {
		require.Equal(t, "a", f.pick(""))
	}
	for i := range 200 { // far past max(live, 64) removed IDs
		f.update(fmt.Sprintf("churn-%d", i))
	}
	f.update("a")
	for range 3 {
		require.Equal(t, "a", f.pick(""))
	}
	assert.Equal(t, int64(8), f.stats("a").InFlight, "5 from before the removal, 3 since")
	for range 5 {
		f.done("a", 10*ms, nil)
	}
	assert.Equal(t, int64(3), f.stats("a").InFlight, "the late Dones count down only what they counted")
}

// A clock that steps back does not make a backend look older than the
// others: its estimate keeps the later stamp, so Pick does not decay it
// for the step. Here a and b answer alike; after the step back, one more
// answer from a must not send it every request.
func TestClockStepBack(t *testing.T) {
	f := newFixture(t)
	f.update("a", "b")
	f.clock.now = time.Minute
	f.done("a", 100*ms, nil)
	f.done("b", 100*ms, nil)
	f.clock.now = 0 // back a minute
	f.done("a", 100*ms, nil)
	picks := map[string]int{}
	for range 300 {
		id := f.pick("")
		picks[id]++
		f.done(id, 100*ms, nil)
	}
	assert.Greater(t, picks["b"], 100, "picks: %v", picks)
	assert.Greater(t, picks["a"], 100, "picks: %v", picks)
}

// An initial estimate at the cap (a larger one is a bad option) does not
// overflow time.Duration in Stats.
func TestHugeInitial(t *testing.T) {
	f := newFixture(t, lrt.WithInitial(1<<43))
	f.update("a")
	got := f.stats("a").Latency
	assert.Positive(t, got)
	assert.InDelta(t, float64(time.Duration(1<<43)), float64(got), float64(time.Millisecond))
}

// k, the count of failures in a row, stops at 16: with a factor of 1.1 the
// multiplier ends at 1.1¹⁶ ≈ 4.6, as WithErrorFactor says, not 64.
func TestPenaltyStopsAtSixteen(t *testing.T) {
	f := newFixture(t, lrt.WithErrorFactor(1.1))
	f.update("a")
	f.done("a", 100*ms, nil)
	for range 40 {
		f.done("a", ms, errFail)
	}
	assert.InEpsilon(t, 100*math.Pow(1.1, 16), float64(f.stats("a").Latency)/float64(ms), 1e-3)
}
