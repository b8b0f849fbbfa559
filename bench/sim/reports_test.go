package sim_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/bench/sim"
	"github.com/lbkit/lbkit/catalog"
)

// recorder is a picker for one backend that records what the simulator
// gives it: each Done's report, and, as a prober and a refresher, each
// turn of its loop, probe and answer, with the virtual time.
type recorder struct {
	now     func() time.Time
	set     []balancer.Backend
	dones   []recorded
	sent    []time.Duration // when each probe was sent
	answers []recorded
	refresh []time.Duration
	epoch   time.Time
}

type recorded struct {
	at   time.Duration
	load balancer.Load
}

func (r *recorder) since() time.Duration { return r.now().Sub(r.epoch) }

func (r *recorder) Update(bs []balancer.Backend) error {
	r.set = bs
	r.epoch = r.now()
	return nil
}

func (r *recorder) Pick(balancer.Request) (balancer.Backend, error) { return r.set[0], nil }

func (r *recorder) Done(_ balancer.Backend, res balancer.Result) {
	r.dones = append(r.dones, recorded{r.since(), res.Load})
}

// probing is a recorder that probes its backend once every turn of its
// loop.
type probing struct{ *recorder }

func (p probing) Step(send func(balancer.Backend)) {
	p.sent = append(p.sent, p.since())
	send(p.set[0])
}

func (p probing) Observe(_ balancer.Backend, l balancer.Load) {
	p.answers = append(p.answers, recorded{p.since(), l})
}

// refreshing is a recorder whose weights the simulator refreshes.
type refreshing struct{ *recorder }

func (r refreshing) Refresh() { r.refresh = append(r.refresh, r.since()) }

// recording returns an algorithm whose one picker (run with one proxy)
// is rec, wrapped by wrap.
func recording(rec *recorder, wrap func(*recorder) balancer.Balancer) catalog.Algorithm {
	return catalog.Algorithm{Name: "recorder", Reports: true, Sim: func(_ func() uint64, now func() time.Time) balancer.Balancer {
		rec.now = now
		return wrap(rec)
	}}
}

func plain(r *recorder) balancer.Balancer { return r }

// mean returns the mean of f over the recorded entries in [from, to).
func mean(rs []recorded, from, to time.Duration, f func(balancer.Load) float64) (float64, int) {
	var sum float64
	n := 0
	for _, r := range rs {
		if r.at >= from && r.at < to {
			sum += f(r.load)
			n++
		}
	}
	return sum / float64(max(n, 1)), n
}

// Each answer carries its backend's report: the utilisation over the
// window, busy slots over the slots the backend has (the capacity left
// once a neighbour takes half of it), the answers per second from every
// client, the requests in flight. With a report delay, it says what the
// backend would have said that long before.
//
// Five users who think 100 ms in front of one backend serving in 100 ms
// keep 2.5 requests busy on average, 25 answers a second: 0.25 of 10
// slots, and 0.5 of the 5 left from 30 s on.
func TestReportsInDone(t *testing.T) {
	backend := sim.Backend{Latency: 100 * time.Millisecond, Capacity: 10, Neighbours: []sim.Neighbour{{At: 30 * time.Second, Takes: 5}}}
	sc := sim.Scenario{Name: "reports", Backends: []sim.Backend{backend}, Users: 5, Stages: []sim.Stage{{time.Minute, 5}}, Think: 100 * time.Millisecond}
	util := func(l balancer.Load) float64 { return l.Application }
	rps := func(l balancer.Load) float64 { return l.RPS }
	for _, tc := range []struct {
		name        string
		delay       time.Duration
		from, to    time.Duration
		util, inAll float64
	}{
		{"before the neighbour", 0, 20 * time.Second, 30 * time.Second, 0.25, 0},
		{"a window after it came", 0, 41 * time.Second, 60 * time.Second, 0.5, 0},
		{"delayed 15 s, the state before it came", 15 * time.Second, 41 * time.Second, 45 * time.Second, 0.25, 0},
		{"delayed 15 s, a window after it came", 15 * time.Second, 56 * time.Second, 60 * time.Second, 0.5, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := sc
			sc.ReportDelay = tc.delay
			rec := &recorder{}
			res, err := sim.Simulate(sc, sim.None, recording(rec, plain), 1, 1)
			require.NoError(t, err)
			require.Equal(t, int64(len(rec.dones)), res.Requests)
			u, n := mean(rec.dones, tc.from, tc.to, util)
			require.Greater(t, n, 50)
			assert.InDelta(t, tc.util, u, 0.01*tc.util, "utilisation")
			r, _ := mean(rec.dones, tc.from, tc.to, rps)
			assert.InDelta(t, 25, r, 0.5, "answers per second (in bunches, every 200 ms: a window can hold one less)")
			// Fresh, the others' requests; delayed, every user's then.
			most := 4.0
			if tc.delay > 0 {
				most = 5
			}
			for _, d := range rec.dones {
				require.True(t, d.load.InFlight >= 0 && d.load.InFlight <= most, "in flight %v", d.load.InFlight)
			}
		})
	}
	// Only pickers that weigh reports get them (catalog.Algorithm.Reports):
	// for the others the backends measure nothing.
	rec := &recorder{}
	quiet := recording(rec, plain)
	quiet.Reports = false
	_, err := sim.Simulate(sc, sim.None, quiet, 1, 1)
	require.NoError(t, err)
	require.NotEmpty(t, rec.dones)
	for _, d := range rec.dones {
		require.False(t, d.load.Reported())
	}
	// Before the backend has measured anything (and, delayed, before
	// the run), answers carry no report.
	sc.ReportDelay = 15 * time.Second
	rec = &recorder{}
	_, err = sim.Simulate(sc, sim.None, recording(rec, plain), 1, 1)
	require.NoError(t, err)
	for _, d := range rec.dones {
		if d.at < 15*time.Second {
			require.False(t, d.load.Reported(), "at %v", d.at)
		}
	}
}

// A neighbour takes its slots from its arrival to its departure: a
// saturated backend of 4 slots serving in 100 ms answers 40 requests a
// second, 20 while a neighbour takes 2, 40 again when it has left.
func TestNeighbour(t *testing.T) {
	backend := sim.Backend{Latency: 100 * time.Millisecond, Capacity: 4,
		Neighbours: []sim.Neighbour{{At: 20 * time.Second, Until: 40 * time.Second, Takes: 2}}}
	sc := sim.Scenario{Name: "neighbour", Backends: []sim.Backend{backend}, Users: 20, Stages: []sim.Stage{{time.Minute, 20}}}
	res, err := sim.Simulate(sc, sim.None, algo(t, "rr"), 1, 1)
	require.NoError(t, err)
	rate := func(from, to time.Duration) float64 {
		var sum float64
		n := 0
		for k, v := range res.Series.RPS[0] {
			if at := time.Duration(k) * res.Series.Step; at >= from && at+res.Series.Step <= to {
				sum += v
				n++
			}
		}
		return sum / float64(n)
	}
	within(t, rate(5*time.Second, 20*time.Second), 40, 0.02, "before")
	within(t, rate(21*time.Second, 40*time.Second), 20, 0.02, "with the neighbour")
	within(t, rate(41*time.Second, 60*time.Second), 40, 0.02, "after")
	assert.Equal(t, 20, res.Backends[0].PeakInFlight)
}

// A probing picker's loop turns every 2 ms (prequal's tick); each probe
// is answered halfway through its round trip with the backend's requests
// in flight and the median of its last answers' times, and the answer is
// back a round trip after it left. A dead backend does not answer.
//
// One user who never thinks keeps exactly one request at a backend that
// serves in 100 ms (and a microsecond, so that no answer comes at the
// instant a probe arrives, when it would see none).
func TestProbes(t *testing.T) {
	const latency = 100*time.Millisecond + time.Microsecond
	backend := sim.Backend{Latency: latency, Down: []sim.Outage{{At: 30 * time.Second}}}
	sc := sim.Scenario{Name: "probes", Backends: []sim.Backend{backend}, Users: 1, Stages: []sim.Stage{{40 * time.Second, 1}},
		ProbeRTT: 4 * time.Millisecond}
	rec := &recorder{}
	res, err := sim.Simulate(sc, sim.None, recording(rec, func(r *recorder) balancer.Balancer { return probing{r} }), 1, 1)
	require.NoError(t, err)
	// A turn every 2 ms, from 2 ms on; each sends one probe.
	assert.Len(t, rec.sent, 40*500-1)
	assert.Equal(t, int64(len(rec.sent)), res.Probes)
	for i, at := range rec.sent[:10] {
		assert.Equal(t, time.Duration(i+1)*2*time.Millisecond, at)
	}
	// Answered while the backend lived, 4 ms after each was sent: the one
	// sent at 29.998 s arrives as it dies, and is refused.
	require.Equal(t, 30*500-2, len(rec.answers))
	odd := 0
	for i, a := range rec.answers {
		require.Equal(t, rec.sent[i]+4*time.Millisecond, a.at)
		if a.load.InFlight != 1 {
			odd++
		}
		if a.at > 200*time.Millisecond {
			assert.Equal(t, latency, a.load.Latency)
		}
	}
	assert.Zero(t, odd, "one request in flight at every probe")
	assert.Zero(t, rec.answers[0].load.Latency, "no answer yet: no estimate")
}

// A picker that recomputes its weights from reports (wrr's Reported) is
// refreshed every second (wrr's default period), and never by a loop of
// its own: the Sim constructors of catalog.LoadAware start none.
func TestRefresh(t *testing.T) {
	sc := sim.Scenario{Name: "refresh", Backends: []sim.Backend{{Latency: 10 * time.Millisecond}}, Users: 1, Stages: []sim.Stage{{10 * time.Second, 1}}}
	rec := &recorder{}
	_, err := sim.Simulate(sc, sim.None, recording(rec, func(r *recorder) balancer.Balancer { return refreshing{r} }), 1, 1)
	require.NoError(t, err)
	want := make([]time.Duration, 9)
	for i := range want {
		want[i] = time.Duration(i+1) * time.Second
	}
	assert.Equal(t, want, rec.refresh)
}
