package sim

import (
	"slices"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/lrt/prequal"
	"github.com/lbkit/lbkit/wrr"
)

// ReportWindow is the span over which a simulated backend measures the
// utilisation and the rate it reports: 10 s in ten slots, as
// lbhttp.Reporter measures them by default (lbhttp.DefaultReportWindow;
// TestReportWindow holds the two together).
const ReportWindow = 10 * time.Second

const (
	// reportSlots is the number of slots a window is kept in, as
	// lbhttp's Reporter keeps it: a report covers the nine slots before
	// the one in progress and that one so far.
	reportSlots = 10
	reportSlot  = int64(ReportWindow / reportSlots)
	// sampleEvery is how often a backend records what it has measured so
	// far, for reports that are delayed (Scenario.ReportDelay): a delayed
	// report is the one the backend would have sent at the last sample at
	// or before its time. A slot is ten samples.
	sampleEvery = reportSlot / 10
	// latencySamples is how many recent answers a backend's latency
	// estimate is the median of, as lbhttp's Reporter's.
	latencySamples = 64
	// probeTick is how often the simulator turns the probe loop of a
	// probing picker, as prequal's own loop does (prequal.DefaultTick).
	probeTick = int64(prequal.DefaultTick)
	// refreshEvery is how often the simulator has a picker that weighs
	// reports recompute its weights, as wrr's Reported does
	// (wrr.DefaultWeightPeriod).
	refreshEvery = int64(wrr.DefaultWeightPeriod)
)

// meter is what a backend measures of itself for its load reports and
// probe answers: how busy its slots have been, how many it had, how many
// requests it answered, and how long its latest answers took.
type meter struct {
	busy, slots float64 // ∫ busy dt and ∫ capacity dt, in request·ns, up to last
	done        int64   // answers sent
	last        int64   // when busy and slots were last brought up to date
	hist        []sample
	next        int64 // the index of the next sample to record, at next·sampleEvery

	lat  [latencySamples]int64 // recent answers' times at the backend, a ring
	latN int                   // answers recorded, up to latencySamples
}

// sample is what a meter had measured at a sample time.
type sample struct {
	busy, slots float64
	done        int64
	inflight    int32
}

// newMeter returns a meter that keeps the history a report delayed by
// delay needs: a window and the delay, in samples, and a few more for the
// rounding.
func newMeter(delay time.Duration) *meter {
	n := (int64(ReportWindow)+int64(delay))/sampleEvery + 4
	return &meter{hist: make([]sample, n)}
}

// advance brings m up to now, with busy of capacity slots in use and
// inflight requests at the backend since the last call, recording the
// samples due on the way.
func (m *meter) advance(now int64, busy, capacity, inflight int) {
	if now <= m.last {
		return
	}
	b, c := float64(busy), float64(capacity)
	if skip := now/sampleEvery - int64(len(m.hist)); skip > m.next {
		// Samples that the ring would overwrite before a report reads
		// them: jump to the last ones, with the state they share.
		t := skip * sampleEvery
		m.busy += b * float64(t-m.last)
		m.slots += c * float64(t-m.last)
		m.last, m.next = t, skip
	}
	for t := m.next * sampleEvery; t <= now; t = m.next * sampleEvery {
		m.busy += b * float64(t-m.last)
		m.slots += c * float64(t-m.last)
		m.last = t
		m.hist[m.next%int64(len(m.hist))] = sample{busy: m.busy, slots: m.slots, done: m.done, inflight: int32(inflight)}
		m.next++
	}
	m.busy += b * float64(now-m.last)
	m.slots += c * float64(now-m.last)
	m.last = now
}

// answered records an answer that spent d at the backend, queue included.
func (m *meter) answered(d int64) {
	m.lat[m.done%latencySamples] = d
	m.done++
	m.latN = min(m.latN+1, latencySamples)
}

// at returns the sample at time t, a multiple of sampleEvery no later
// than the meter's last, or the zero sample for t ≤ 0.
func (m *meter) at(t int64) sample {
	if t <= 0 {
		return sample{}
	}
	return m.hist[(t/sampleEvery)%int64(len(m.hist))]
}

// report returns the load report of an answer leaving the backend now,
// its state delay before (see Scenario.ReportDelay), as lbhttp's Reporter
// computes it: the utilisation, busy slots over the slots the backend
// had, and the answers per second, over the window; the requests in
// flight. The meter must be up to date (advance) and inflight the
// backend's requests now, the answer's excluded. Before the backend has
// measured anything, and for a time before the run, the report is empty.
func (m *meter) report(now, delay int64, inflight int) balancer.Load {
	t := now - delay
	if t <= 0 {
		return balancer.Load{}
	}
	cur := sample{busy: m.busy, slots: m.slots, done: m.done, inflight: int32(inflight)}
	if delay > 0 {
		t -= t % sampleEvery
		if t <= 0 {
			return balancer.Load{}
		}
		cur = m.at(t)
	}
	from := max(t/reportSlot-(reportSlots-1), 0) * reportSlot
	base := m.at(from)
	l := balancer.Load{InFlight: float64(cur.inflight)}
	covered := time.Duration(t - from).Seconds()
	l.RPS = float64(cur.done-base.done) / covered
	if slots := cur.slots - base.slots; slots > 0 {
		l.Application = (cur.busy - base.busy) / slots
	}
	return l
}

// latency returns the backend's latency estimate for probes: the median
// of its last answers' times at the backend (zero before the first).
func (m *meter) latency() time.Duration {
	if m.latN == 0 {
		return 0
	}
	var s [latencySamples]int64
	n := copy(s[:], m.lat[:m.latN])
	slices.Sort(s[:n])
	return time.Duration(s[n/2])
}

// prober is a picker that probes the backends (lrt/prequal): the
// simulator turns its loop every probeTick (Step), sends each probe it
// asks for, and brings the answer back (Observe) a round trip later.
type prober interface {
	Step(send func(balancer.Backend))
	Observe(balancer.Backend, balancer.Load)
}

// refresher is a picker that recomputes its weights from reports off the
// request path (wrr's Reported): the simulator calls Refresh every
// refreshEvery, in place of its background loop.
type refresher interface {
	Refresh()
}

// probeCall is one probe under way: from proxy to backend, and, once the
// backend has answered, its answer.
type probeCall struct {
	proxy, backend int32
	answer         balancer.Load
	answered       bool
}

// sendProbe sends a probe from proxy p to the backend b: it arrives half
// a round trip later.
func (e *engine) sendProbe(p int32, b balancer.Backend) {
	ep, ok := b.(*endpoint)
	if !ok {
		return
	}
	i := len(e.calls)
	if n := len(e.freeCalls); n > 0 {
		i, e.freeCalls = int(e.freeCalls[n-1]), e.freeCalls[:n-1]
	} else {
		e.calls = append(e.calls, probeCall{})
	}
	e.calls[i] = probeCall{proxy: p, backend: ep.index}
	e.probes++
	e.q.pushLane(e.probeLane, e.now+e.rtt/2, evProbeArrive, int32(i), 0)
}

// probeArrives is probe c at its backend: a live one answers with its
// requests in flight and its latency estimate now; a dead one refuses,
// and the prober hears nothing.
func (e *engine) probeArrives(c int32) {
	pc := &e.calls[c]
	s := &e.servers[pc.backend]
	if s.alive {
		pc.answer = balancer.Load{InFlight: float64(s.inflight), Latency: s.meter.latency()}
		pc.answered = true
	}
	e.q.pushLane(e.answerLane, e.now+e.rtt-e.rtt/2, evProbeAnswer, c, 0)
}

// probeAnswers is probe c's answer back at its proxy.
func (e *engine) probeAnswers(c int32) {
	pc := e.calls[c]
	e.freeCalls = append(e.freeCalls, c)
	if pc.answered {
		e.proxies[pc.proxy].prober.Observe(e.eps[pc.backend], pc.answer)
	}
}

// stepProbers turns every probing proxy's probe loop once.
func (e *engine) stepProbers() {
	for p := range e.proxies {
		if px := &e.proxies[p]; px.prober != nil {
			px.prober.Step(px.send)
		}
	}
	e.q.push(e.now+probeTick, evStep, 0, 0)
}

// refreshWeights has every proxy that weighs reports recompute.
func (e *engine) refreshWeights() {
	for p := range e.proxies {
		if r := e.proxies[p].refresher; r != nil {
			r.Refresh()
		}
	}
	e.q.push(e.now+refreshEvery, evRefresh, 0, 0)
}

// setCapacity makes backend i serve at most c requests at once from now
// (a neighbour arrives or leaves): requests in service go on, queued ones
// start while slots are free.
func (e *engine) setCapacity(i int32, c int) {
	s := &e.servers[i]
	s.account(e.now, e.step)
	s.capacity = c
	for s.alive && s.hasSlot() && s.head < len(s.waiting) {
		e.startNext(s)
	}
}
