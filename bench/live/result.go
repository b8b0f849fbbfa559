package live

import (
	"math"
	"slices"
	"time"

	"github.com/lbkit/lbkit/bench/sim"
)

// result converts what the run measured in real time to the scenario's
// time base, in the simulator's shape: durations ÷ scale, rates × scale;
// counts and requests in flight are the same in both.
func (r *run) result(algo string, v sim.Variant, proxies int) sim.Result {
	f := r.scale
	length := r.orig.Length()
	res := sim.Result{Algorithm: algo, Variant: v, Proxies: proxies, Length: length}
	var lat []time.Duration
	var okBefore, okAfter, errAfter int64
	var maxWait time.Duration
	for _, u := range r.users {
		res.Requests += u.ok
		res.Errors += u.errs
		okBefore += u.okBefore
		okAfter += u.okAfter
		errAfter += u.errAfter
		maxWait = max(maxWait, u.maxWait)
		for _, l := range u.lat {
			lat = append(lat, time.Duration(float64(l)/f))
		}
	}
	res.RPS = float64(res.Requests) / length.Seconds()
	res.SetLatencies(lat) // sorts lat
	var p999 time.Duration
	if n := len(lat); n > 0 {
		p999 = lat[max(int(math.Ceil(0.999*float64(n)))-1, 0)] // nearest rank, as the simulator's
	}
	for _, p := range r.proxies {
		res.Retries += p.meter.retries.Load()
	}

	step := sim.SeriesStep(length)
	// unscaled returns the length of step k in the scenario's time base.
	unscaled := func(k int) time.Duration { return min(time.Duration(k+1)*step, length) - time.Duration(k)*step }
	res.Series = sim.Series{
		Step:         step,
		Users:        r.usersSeries(step),
		InFlight:     make([][]float64, len(r.backends)),
		PeakInFlight: make([][]int, len(r.backends)),
		RPS:          make([][]float64, len(r.backends)),
		Errors:       make([]float64, r.steps),
	}
	for k := range r.stepErrs {
		res.Series.Errors[k] = float64(r.stepErrs[k].Load()) / unscaled(k).Seconds()
	}
	var sent int64
	for _, b := range r.backends {
		sent += b.sent.Load()
	}
	res.Backends = make([]sim.BackendResult, len(r.backends))
	for i, b := range r.backends {
		area, stepArea, stepPeak, peak := r.inFlight(b.spans)
		br := sim.BackendResult{
			Sent:         b.sent.Load(),
			Refused:      b.refused.Load(),
			Reset:        b.reset.Load(),
			MeanInFlight: area / float64(r.length),
			PeakInFlight: peak,
		}
		if sent > 0 {
			br.Share = float64(br.Sent) / float64(sent)
		}
		res.Backends[i] = br
		in := make([]float64, r.steps)
		rps := make([]float64, r.steps)
		for k := range r.steps {
			in[k] = stepArea[k] / (float64(unscaled(k)) * f)
			rps[k] = float64(b.stepSent[k].Load()) / unscaled(k).Seconds()
		}
		res.Series.InFlight[i], res.Series.RPS[i], res.Series.PeakInFlight[i] = in, rps, stepPeak
	}
	res.Extra = append(r.rig(res.Mean), sim.SlowFigures(&r.orig, time.Duration(float64(maxWait)/f), p999,
		r.sentDuring.Load(), okAfter+errAfter)...)
	if o, ok := r.orig.FirstOutage(); ok {
		fr := &sim.FailureResult{Outage: o}
		until := length
		if o.Until != 0 {
			until = min(o.Until, length)
		}
		if o.At > 0 {
			fr.Before = float64(okBefore) / o.At.Seconds()
		}
		if d := until - o.At; d > 0 {
			fr.After = float64(okAfter) / d.Seconds()
		}
		res.Failure = fr
	}
	return res
}

// inFlight integrates requests at a backend over the run from their
// spans, cut to the run: the area (request·ns, real), the area and the
// peak in each series step, and the peak.
func (r *run) inFlight(spans []span) (area float64, stepArea []float64, stepPeak []int, peak int) {
	stepArea = make([]float64, r.steps)
	stepPeak = make([]int, r.steps)
	type edge struct {
		at int64
		d  int
	}
	edges := make([]edge, 0, 2*len(spans))
	for _, s := range spans {
		from, to := max(s.from, 0), min(s.to, r.length)
		if to <= from {
			continue
		}
		area += float64(to - from)
		for t := from; t < to; {
			k := r.stepOf(t)
			next := min(int64(float64(k+1)*r.step), to)
			if next <= t { // rounding at a step's end
				next = to
			}
			stepArea[k] += float64(next - t)
			t = next
		}
		edges = append(edges, edge{from, +1}, edge{to, -1})
	}
	// Departures before arrivals at one instant: a request that leaves as
	// another arrives is not two in flight.
	slices.SortFunc(edges, func(a, b edge) int {
		if a.at != b.at {
			if a.at < b.at {
				return -1
			}
			return 1
		}
		return a.d - b.d
	})
	// Sweep the edges: the count holds from one edge to the next, so each
	// step it spans sees it.
	n, k := 0, 0 // requests in flight, the step the sweep is in
	for _, e := range edges {
		for s := r.stepOf(e.at); k < s; k++ {
			// The count carried into the next step, unless this edge is
			// at its very start.
			if k+1 < s || e.at > int64(float64(s)*r.step) {
				stepPeak[k+1] = max(stepPeak[k+1], n)
			}
		}
		n += e.d
		peak = max(peak, n)
		stepPeak[k] = max(stepPeak[k], n)
	}
	return area, stepArea, stepPeak, peak
}

// usersSeries is the number of users the profile wants at the end of
// each series step, as the simulator counts them: changes at a step's
// very end count in it, changes at the scenario's end do not.
func (r *run) usersSeries(step time.Duration) []int {
	out := make([]int, r.steps)
	active := r.orig.Users
	changes := slices.Collect(r.orig.UserChanges())
	length := r.orig.Length()
	i := 0
	for k := range out {
		end := time.Duration(k+1) * step
		for ; i < len(changes) && changes[i].At <= end && changes[i].At < length; i++ {
			if changes[i].Join {
				active++
			} else {
				active--
			}
		}
		out[k] = active
	}
	return out
}

// RigMetrics are the figures of its own a live report adds to each
// scenario's (see Run): what the rig itself added to the requests, in
// the scenario's time base, so that every live row says how far it can
// be taken for the backends'.
func RigMetrics() []sim.Metric {
	return []sim.Metric{
		{Name: "rig_late_ms", Label: "late ms", Unit: "ms", Better: sim.Lower, Decimals: 1},
		{Name: "rig_proxy_ms", Label: "proxy ms", Unit: "ms", Better: sim.Lower, Decimals: 1},
	}
}

// rig returns the run's RigMetrics: how late the backends' service-time
// timers fired on average, and how much longer the clients waited than
// the requests spent at the backends (proxy, loopback, scheduling: the
// client's mean latency less the mean time a request spent at a
// backend, queueing included), both divided by the scale.
func (r *run) rig(mean time.Duration) []sim.Figure {
	var late, fired, at, spans float64
	for _, b := range r.backends {
		b.mu.Lock()
		late += float64(b.late)
		fired += float64(b.fired)
		for _, s := range b.spans {
			at += float64(s.to - s.from)
		}
		spans += float64(len(b.spans))
		b.mu.Unlock()
	}
	ms := func(ns float64) float64 { return ns / r.scale / float64(time.Millisecond) }
	var out []sim.Figure
	if fired > 0 {
		out = append(out, sim.Figure{Name: "rig_late_ms", Value: ms(late / fired)})
	}
	if spans > 0 && mean > 0 {
		// mean is already in the scenario's time base.
		out = append(out, sim.Figure{Name: "rig_proxy_ms", Value: max(float64(mean)/float64(time.Millisecond)-ms(at/spans), 0)})
	}
	return out
}
