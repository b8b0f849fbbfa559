package prequal_test

import (
	"context"
	"errors"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/lrt/prequal"
)

// fleet is a set of fake backends that answer probes with the load the
// test sets.
type fleet struct {
	mu     sync.Mutex
	loads  map[string]balancer.Load
	errs   map[string]error
	probed map[string]int
}

func newFleet() *fleet {
	return &fleet{loads: map[string]balancer.Load{}, errs: map[string]error{}, probed: map[string]int{}}
}

func (f *fleet) set(id string, rif float64, lat time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loads[id] = balancer.Load{InFlight: rif, Latency: lat}
}

func (f *fleet) probe(ctx context.Context, b balancer.Backend) (balancer.Load, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.probed[b.ID()]++
	if err := f.errs[b.ID()]; err != nil {
		return balancer.Load{}, err
	}
	return f.loads[b.ID()], ctx.Err()
}

// cycling returns a random source whose draws over a set of n fall on the
// backends in turn: 0, 1, ..., n−1, 0, ...
func cycling(n uint64) func() uint64 {
	var i atomic.Uint64
	return func() uint64 {
		k := (i.Add(1) - 1) % n
		x, _ := bits.Div64(k, 1<<63, n) // (k+½)·2⁶⁴/n, which multiply-shift maps to k
		return x
	}
}

func TestConformance(t *testing.T) {
	t.Run("probing", func(t *testing.T) {
		balancertest.Run(t, func() balancer.Balancer { return prequal.New(newFleet().probe) })
	})
	t.Run("no probe", func(t *testing.T) {
		balancertest.Run(t, func() balancer.Balancer { return prequal.New(nil) })
	})
}

// filled returns a Picker over four backends whose pool holds four
// answers from each, with the loads given, and no loop running.
func filled(t *testing.T, f *fleet, opts ...prequal.Option) (*prequal.Picker, []balancer.Backend) {
	t.Helper()
	bs := balancer.Endpoints("a", "b", "c", "d")
	p := prequal.New(f.probe, append([]prequal.Option{prequal.WithRand(cycling(4)), prequal.WithReuse(1000)}, opts...)...)
	require.NoError(t, p.Update(bs))
	for range prequal.PoolSize {
		b, err := p.Pick(balancer.Request{}) // random: the pool is empty; each asks for a probe
		require.NoError(t, err)
		p.Done(b, balancer.Result{})
	}
	p.ProbeNow()
	require.Equal(t, prequal.PoolSize, p.Stats().Pool)
	return p, bs
}

func pickID(t *testing.T, p *prequal.Picker, req balancer.Request) string {
	t.Helper()
	b, err := p.Pick(req)
	require.NoError(t, err)
	p.Done(b, balancer.Result{})
	return b.ID()
}

// The hot-cold rule over the answers: d answers fastest but has 20
// requests in flight, above the 0.84 quantile of 1, 2, 3, 20, so it is
// hot; of the cold ones b answers fastest. Q_RIF 1 makes every backend
// cold (latency decides: d), 0 makes all but the least loaded hot (a).
func TestHotCold(t *testing.T) {
	for _, tt := range []struct {
		name string
		q    float64
		want string
	}{{"default", prequal.DefaultQuantile, "b"}, {"latency only", 1, "d"}, {"in flight only", 0, "a"}} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleet()
			f.set("a", 1, 50*time.Millisecond)
			f.set("b", 2, 10*time.Millisecond)
			f.set("c", 3, 20*time.Millisecond)
			f.set("d", 20, time.Millisecond)
			p, _ := filled(t, f, prequal.WithQuantile(tt.q))
			assert.Equal(t, tt.want, pickID(t, p, balancer.Request{}))
			assert.NotEqual(t, tt.want, pickID(t, p, balancer.Request{Avoid: tt.want}), "Avoid")
		})
	}
}

// Requests this picker sends count on top of the probed ones until the
// next answer: held on b, they make it hot, and c, the next fastest,
// takes over.
func TestOwnRequestsCount(t *testing.T) {
	f := newFleet()
	f.set("a", 1, 50*time.Millisecond)
	f.set("b", 1, 10*time.Millisecond)
	f.set("c", 1, 20*time.Millisecond)
	f.set("d", 1, 30*time.Millisecond)
	p, _ := filled(t, f)
	var seq []string
	for range 2 {
		b, err := p.Pick(balancer.Request{}) // held: no Done
		require.NoError(t, err)
		seq = append(seq, b.ID())
	}
	// With one request held, b counts 1+1, above the 0.84 quantile of
	// 1, 1, 1, 2 (the third smallest of four: 1): hot.
	assert.Equal(t, []string{"b", "c"}, seq)
	assert.EqualValues(t, 1, p.InFlight("b"))
}

// An answer serves at most WithReuse picks.
func TestReuse(t *testing.T) {
	f := newFleet()
	bs := balancer.Endpoints("a", "b")
	p := prequal.New(f.probe, prequal.WithReuse(2), prequal.WithRand(cycling(2)))
	require.NoError(t, p.Update(bs))
	_, _ = p.Pick(balancer.Request{}) // asks for one probe
	p.ProbeNow()
	require.Equal(t, 1, p.Stats().Pool)
	_, _ = p.Pick(balancer.Request{})
	assert.Equal(t, 1, p.Stats().Pool)
	_, _ = p.Pick(balancer.Request{})
	assert.Zero(t, p.Stats().Pool, "used twice")
}

// Answers older than WithReportExpiry leave the pool at the next tick.
func TestStaleDropped(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	f := newFleet()
	p, _ := filled(t, f, prequal.WithClock(func() time.Time { return now }), prequal.WithReportExpiry(time.Second))
	now = now.Add(999 * time.Millisecond)
	p.ProbeNow()
	assert.Equal(t, prequal.PoolSize, p.Stats().Pool)
	now = now.Add(2 * time.Millisecond)
	p.ProbeNow()
	assert.Zero(t, p.Stats().Pool)
}

// Each pick asks for WithProbeRate probes; the loop sends them, at most 16
// a turn, and counts the failures, which add nothing to the pool.
func TestProbeRate(t *testing.T) {
	f := newFleet()
	f.errs["b"] = errors.New("refused")
	bs := balancer.Endpoints("a", "b")
	p := prequal.New(f.probe, prequal.WithProbeRate(0.5), prequal.WithRand(cycling(2)), prequal.WithReuse(1000))
	require.NoError(t, p.Update(bs))
	for range 10 {
		b, err := p.Pick(balancer.Request{})
		require.NoError(t, err)
		p.Done(b, balancer.Result{})
	}
	p.ProbeNow()
	st := p.Stats()
	assert.EqualValues(t, 5, st.Sent)
	assert.EqualValues(t, st.Sent-uint64(st.Pool), st.Failed)
	assert.Greater(t, st.Failed, uint64(0))

	// Probes that do not answer until the turn has sent all it may: the
	// 160 asks find 16 probes out and the rest are dropped. (With probes
	// that answer at once, a slot freed mid-turn may take a 17th ask.)
	release := make(chan struct{})
	var out, most atomic.Int64
	slow := func(ctx context.Context, b balancer.Backend) (balancer.Load, error) {
		n := out.Add(1)
		defer out.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		<-release
		return balancer.Load{}, nil
	}
	q := prequal.New(slow, prequal.WithProbeRate(16))
	require.NoError(t, q.Update(bs))
	for range 10 {
		_, _ = q.Pick(balancer.Request{})
	}
	done := make(chan struct{})
	go func() { q.ProbeNow(); close(done) }()
	require.Eventually(t, func() bool { return out.Load() == prequal.PoolSize }, 10*time.Second, time.Millisecond)
	close(release)
	<-done
	assert.EqualValues(t, prequal.PoolSize, q.Stats().Sent, "at most 16 probes out at a time; the other asks dropped")
	assert.EqualValues(t, prequal.PoolSize, most.Load())
}

// Once Update returns, answers for a removed backend are never used, and
// those of the backends that stay still are.
func TestRemovedNeverPicked(t *testing.T) {
	f := newFleet()
	f.set("a", 1, 40*time.Millisecond)
	f.set("b", 1, time.Millisecond) // the favourite, until removed
	f.set("c", 1, 30*time.Millisecond)
	f.set("d", 1, 20*time.Millisecond)
	p, bs := filled(t, f)
	require.Equal(t, "b", pickID(t, p, balancer.Request{}))
	require.NoError(t, p.Update([]balancer.Backend{bs[3], bs[0], bs[2]})) // reordered, without b
	assert.Equal(t, 12, p.Stats().Pool, "b's four answers dropped, the others moved")
	for range 200 {
		assert.Equal(t, "d", pickID(t, p, balancer.Request{}), "d answers fastest of those left")
	}
}

// An answer that comes back after an Update goes to its backend's new
// place, or nowhere if the backend left.
func TestAnswerAcrossUpdate(t *testing.T) {
	release := make(chan struct{})
	asked := make(chan string, 4)
	probe := func(ctx context.Context, b balancer.Backend) (balancer.Load, error) {
		asked <- b.ID()
		<-release
		return balancer.Load{InFlight: 1, Latency: time.Millisecond}, nil
	}
	bs := balancer.Endpoints("a", "b")
	p := prequal.New(probe, prequal.WithRand(cycling(2)), prequal.WithReuse(1000))
	require.NoError(t, p.Update(bs))
	_, _ = p.Pick(balancer.Request{})
	_, _ = p.Pick(balancer.Request{})
	done := make(chan struct{})
	go func() { p.ProbeNow(); close(done) }()
	<-asked
	<-asked
	require.NoError(t, p.Update([]balancer.Backend{balancer.NewEndpoint("z", 1), bs[1]}))
	close(release)
	<-done
	assert.Equal(t, 1, p.Stats().Pool, "a's answer dropped, b's kept")
	for range 50 {
		assert.Equal(t, "b", pickID(t, p, balancer.Request{}))
	}
}

// Pick and Done allocate nothing, with a full pool or an empty one.
func TestAllocs(t *testing.T) {
	f := newFleet()
	p, bs := filled(t, f)
	empty := prequal.New(f.probe)
	require.NoError(t, empty.Update(bs))
	for name, q := range map[string]*prequal.Picker{"pool": p, "empty": empty} {
		i := 0
		allocs := testing.AllocsPerRun(2000, func() {
			b, err := q.Pick(balancer.Request{Avoid: bs[i%4].ID()})
			i++
			if err == nil {
				q.Done(b, balancer.Result{})
			}
		})
		assert.Zero(t, allocs, name)
	}
}

// With Start, the loop probes as picks ask, on its own: requests spread
// by the answers, here towards the backend that answers fastest.
func TestStartProbes(t *testing.T) {
	f := newFleet()
	f.set("a", 0, 30*time.Millisecond)
	f.set("b", 0, time.Millisecond)
	p := prequal.New(f.probe)
	require.NoError(t, p.Update(balancer.Endpoints("a", "b")))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, p.Start(ctx))
	assert.ErrorIs(t, p.Start(ctx), balancer.ErrStarted)
	counts := map[string]int{}
	deadline := time.Now().Add(10 * time.Second)
	for counts["b"] < 200 && time.Now().Before(deadline) {
		counts[pickID(t, p, balancer.Request{})]++
		time.Sleep(100 * time.Microsecond)
	}
	assert.GreaterOrEqual(t, counts["b"], 200)
	assert.Less(t, counts["a"], counts["b"], "%v", counts)
	assert.Greater(t, p.Stats().Sent, uint64(0))
	require.NoError(t, p.Close())
	require.NoError(t, p.Close())
	assert.Zero(t, p.Stats().Pool, "Close empties the pool")
	assert.ErrorIs(t, p.Start(ctx), balancer.ErrClosed)
	_ = pickID(t, p, balancer.Request{}) // still a picker
}

// Observe and Step drive the pool by hand, as a simulator does: Step
// drops stale answers and names the backends to probe, Observe takes the
// answers.
func TestStepObserve(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	bs := balancer.Endpoints("a", "b")
	p := prequal.New(nil, prequal.WithClock(func() time.Time { return now }), prequal.WithRand(cycling(2)),
		prequal.WithReuse(1000))
	require.NoError(t, p.Update(bs))
	p.Observe(bs[0], balancer.Load{InFlight: 5, Latency: time.Millisecond})
	p.Observe(bs[1], balancer.Load{InFlight: 0, Latency: 9 * time.Millisecond})
	p.Observe(balancer.NewEndpoint("x", 1), balancer.Load{})    // not in the set
	p.Observe(bs[1], balancer.Load{InFlight: math.NaN()})       // bad
	p.Observe(bs[1], balancer.Load{Latency: -time.Millisecond}) // bad
	assert.Equal(t, 2, p.Stats().Pool)
	assert.Equal(t, "b", pickID(t, p, balancer.Request{}), "a is hot")
	var asked []string
	p.Step(func(b balancer.Backend) { asked = append(asked, b.ID()) })
	assert.Equal(t, []string{"a"}, asked, "the pick asked for one probe; the source cycles")
	asked = nil

	q := prequal.New(newFleet().probe, prequal.WithClock(func() time.Time { return now }), prequal.WithRand(cycling(2)))
	require.NoError(t, q.Update(bs))
	q.Observe(bs[0], balancer.Load{})
	for range 3 {
		_, _ = q.Pick(balancer.Request{})
	}
	now = now.Add(2 * prequal.DefaultReportExpiry)
	q.Step(func(b balancer.Backend) { asked = append(asked, b.ID()) })
	assert.Len(t, asked, 3)
	assert.Zero(t, q.Stats().Pool, "the stale answer dropped")
}

// A backend whose probe answers say it is idle and instant (0 in flight,
// 0 latency), whatever it holds, does not take the traffic: an answer
// counts at least the requests this picker has in flight on the backend,
// so the liar turns hot like any backend once it holds more than the
// others. Before that bound it held nearly every request.
func TestLyingAnswerBounded(t *testing.T) {
	bs := balancer.Endpoints("a", "b", "c", "d")
	p := prequal.New(nil, prequal.WithRand(cycling(4)))
	require.NoError(t, p.Update(bs))
	answer := func(b balancer.Backend) {
		if b.ID() == "a" {
			p.Observe(b, balancer.Load{}) // the liar
			return
		}
		// The honest: what they hold (this picker's requests only), and
		// a latency that grows with it.
		rif := p.InFlight(b.ID())
		p.Observe(b, balancer.Load{InFlight: float64(rif), Latency: time.Duration(rif+1) * time.Millisecond})
	}
	const n = 400
	for range n {
		_, err := p.Pick(balancer.Request{}) // held: no Done
		require.NoError(t, err)
		p.Step(answer)
	}
	counts := make([]int64, len(bs))
	for i, b := range bs {
		counts[i] = p.InFlight(b.ID())
	}
	t.Logf("held %v", counts)
	assert.Less(t, float64(counts[0])/n, 0.4, "the liar's share of %d held: %v", n, counts)
	for _, c := range counts[1:] {
		assert.Greater(t, float64(c)/n, 0.15, "the others' shares: %v", counts)
	}
}

// Answers no backend can give are ignored: a negative, NaN or infinite
// count in flight, a negative latency.
func TestBadAnswersIgnored(t *testing.T) {
	bs := balancer.Endpoints("a", "b")
	p := prequal.New(nil, prequal.WithRand(cycling(2)))
	require.NoError(t, p.Update(bs))
	for _, l := range []balancer.Load{
		{InFlight: -1}, {InFlight: math.NaN()}, {InFlight: math.Inf(1)}, {Latency: -1},
	} {
		p.Observe(bs[0], l)
		assert.Zero(t, p.Stats().Pool, "%+v", l)
	}
}
