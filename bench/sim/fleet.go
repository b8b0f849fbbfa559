package sim

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/locality"
	"github.com/lbkit/lbkit/route"
	"github.com/lbkit/lbkit/subset"
)

// What the simulator adds for fleets (issue 20): zones on proxies and
// backends, the time between zones, the locality and subset decorators
// around each proxy's picker, and the figures that say what they do.

// Parameters of the fleet scenarios (FleetScenarios).
const (
	// FleetLatency is the median service time of every backend of the
	// fleet scenarios, lognormal with shape FleetSigma: a service that
	// answers in milliseconds, against which a cross-zone round trip
	// counts.
	FleetLatency = 10 * time.Millisecond
	// FleetSigma is the shape of their lognormal service times: mean
	// 11.3 ms, p99 32 ms.
	FleetSigma = 0.5
	// FleetCapacity is the requests each of their backends serves at
	// once; the rest queue.
	FleetCapacity = 4
	// CrossZoneDelay is the zones scenario's Scenario.CrossZone.
	CrossZoneDelay = 2 * time.Millisecond
	// ZoneLossAt is when the zones scenario's zone a loses half its
	// backends.
	ZoneLossAt = time.Minute
)

// FleetScenarios returns the scenarios that ask what the fleet
// decorators do, each played by Run with a fleet of its own (Proxies):
//
//   - zones: 30 backends in three zones, 14/10/6 (a/b/c), and 10 proxies
//     in them, 5/3/2, so that zone a's callers (50%) outnumber its
//     backends (47%); 2 ms more across zones (CrossZone); 700 users for
//     2 minutes; at 1 minute 7 of zone a's 14 backends die. Compared
//     under active+passive+retry (zone-blind, as lbhttp with health
//     runs) and the same with Locality. Its Contrast sets leastconn
//     under each side by side.
//   - fleet: 300 backends and 100 proxies, 10 users each, for 1 minute,
//     all-to-all (None) and with subsets of 20 (Subset). Its Contrast
//     sets round robin under each side by side.
//
// Every backend serves in FleetLatency, lognormal (FleetSigma), at most
// FleetCapacity at once; users think DefaultThink.
func FleetScenarios() []Scenario {
	backend := Backend{Latency: FleetLatency, Sigma: FleetSigma, Capacity: FleetCapacity}
	var zoned []Backend
	for _, z := range []struct {
		name string
		n    int
	}{{"a", 14}, {"b", 10}, {"c", 6}} {
		for i := range z.n {
			b := backend
			b.Name, b.Zone = z.name, z.name
			if z.name == "a" && i < z.n/2 {
				b.Down = []Outage{{At: ZoneLossAt}}
			}
			zoned = append(zoned, b)
		}
	}
	failure := Active | Passive | Retry
	zones := Scenario{
		Name: "zones", Backends: zoned, Users: 700, Stages: []Stage{{2 * time.Minute, 700}}, Think: DefaultThink,
		Variants: []Variant{failure, failure | Locality}, CheckInterval: DefaultCheckInterval,
		Metrics: ZoneMetrics(), Proxies: 10, ProxyZones: []string{"a", "a", "a", "a", "a", "b", "b", "b", "c", "c"},
		CrossZone: CrossZoneDelay,
		Contrast:  &Contrast{Variant: failure | Locality, Against: failure, Algorithm: "leastconn"},
	}
	many := make([]Backend, 300)
	for i := range many {
		many[i] = backend
	}
	fleet := Scenario{
		Name: "fleet", Backends: many, Users: 1000, Stages: []Stage{{time.Minute, 1000}}, Think: DefaultThink,
		Variants: []Variant{None, Subset}, Metrics: FleetMetrics(), Proxies: 100, SubsetSize: subset.DefaultSize,
		Contrast: &Contrast{Variant: Subset, Against: None, Algorithm: "rr"},
	}
	return []Scenario{zones, fleet}
}

// ZoneMetrics are the figures of a scenario with zones: the share of
// attempts that stayed in their proxy's zone, and the load of the
// busiest backend against its capacity, each before the first outage (or
// over the whole run without one) and during it.
//
// Load is a backend's requests, in service and queued, time-weighted over
// the span, over its Capacity: above 100% it was asked, on average, for
// more than it serves at once, and requests queued. Backends without a
// Capacity are left out.
func ZoneMetrics() []Metric {
	return []Metric{
		{Name: "in_zone_before_pct", Label: "in zone % before", Unit: "%", Better: Higher, Decimals: 1},
		{Name: "in_zone_during_pct", Label: "in zone % during", Unit: "%", Better: Higher, Decimals: 1},
		{Name: "max_load_before_pct", Label: "max load % before", Unit: "%", Better: Lower, Decimals: 1},
		{Name: "max_load_during_pct", Label: "max load % during", Unit: "%", Better: Lower, Decimals: 1},
	}
}

// FleetMetrics are the figures of a fleet of proxies: connections per
// backend, the distinct proxies that sent it at least one attempt (those
// a connection pool would have opened), their mean and maximum over the
// backends; and the spread of load, the attempts of the least and the
// most loaded backend against the mean, in percent ("−10.0%", "+5.0%").
func FleetMetrics() []Metric {
	return []Metric{
		{Name: "conns_mean", Label: "conns/backend", Unit: "connections", Better: Lower, Decimals: 1},
		{Name: "conns_max", Label: "conns max", Unit: "connections", Better: Lower},
		{Name: "load_low_pct", Label: "least load", Unit: "%", Decimals: 1, sign: true},
		{Name: "load_high_pct", Label: "most load", Unit: "%", Better: Lower, Decimals: 1, sign: true},
	}
}

// figure computes the fleet figure named name, and false when the run
// has none or the engine does not compute it: the engine fills
// Result.Extra with those the scenario's Metrics list.
func (e *engine) figure(name string) (float64, bool) {
	switch name {
	case "in_zone_before_pct":
		return e.inZone(0)
	case "in_zone_during_pct":
		return e.inZone(1)
	case "max_load_before_pct":
		return e.maxLoad(0)
	case "max_load_during_pct":
		return e.maxLoad(1)
	case "conns_mean":
		return e.conns(false)
	case "conns_max":
		return e.conns(true)
	case "load_low_pct":
		return e.spread(false)
	case "load_high_pct":
		return e.spread(true)
	}
	return 0, false
}

// validateFleet checks the fleet fields of s.
func (s *Scenario) validateFleet() error {
	switch {
	case s.Proxies < 0 || s.Proxies > MaxProxies:
		return fmt.Errorf("%d proxies, outside [0, %d]", s.Proxies, MaxProxies)
	case s.CrossZone < 0 || s.CrossZone > MaxLength:
		return fmt.Errorf("cross-zone delay %v outside [0, %v]", s.CrossZone, MaxLength)
	case s.SubsetSize < 0:
		return fmt.Errorf("negative subset size %d", s.SubsetSize)
	case slices.Contains(s.ProxyZones, ""):
		return errors.New("a proxy zone is empty: name every zone, or give none")
	case s.Contrast != nil && s.Contrast.Algorithm == "":
		return errors.New("a contrast names no algorithm")
	case s.Contrast != nil && (s.Contrast.Variant|s.Contrast.Against)&^features != 0:
		return fmt.Errorf("contrast of unknown variants %v and %v", s.Contrast.Variant, s.Contrast.Against)
	}
	return nil
}

// Locality returns where the backend runs: its scenario backend's Zone,
// at priority 0.
func (e *endpoint) Locality() balancer.Locality { return e.loc }

var _ balancer.Locator = (*endpoint)(nil)

// zoneIndex numbers the zones of sc's proxies and backends: each
// proxy's zone and each backend's, −1 for none.
func zoneIndex(sc *Scenario, proxies int) (proxyZone, backendZone []int32) {
	index := map[string]int32{}
	of := func(z string) int32 {
		if z == "" {
			return -1
		}
		i, ok := index[z]
		if !ok {
			i = int32(len(index))
			index[z] = i
		}
		return i
	}
	proxyZone = make([]int32, proxies)
	for p := range proxyZone {
		proxyZone[p] = -1
		if n := len(sc.ProxyZones); n > 0 {
			proxyZone[p] = of(sc.ProxyZones[p%n])
		}
	}
	backendZone = make([]int32, len(sc.Backends))
	for i, b := range sc.Backends {
		backendZone[i] = of(b.Zone)
	}
	return proxyZone, backendZone
}

// proxyZone returns the zone proxy p of proxies runs in, or "".
func (s *Scenario) proxyZone(p int) string {
	if len(s.ProxyZones) == 0 {
		return ""
	}
	return s.ProxyZones[p%len(s.ProxyZones)]
}

// callers counts the users of each zone's proxies at the profile's peak
// (user u goes through proxy u mod proxies, so proxy p has the users p,
// p+proxies, ...), for locality's Config.Callers; nil when no proxy has a
// zone.
func (s *Scenario) callers(proxies int) map[string]int {
	if len(s.ProxyZones) == 0 {
		return nil
	}
	out := map[string]int{}
	peak := s.PeakUsers()
	for p := range min(proxies, peak) {
		out[s.proxyZone(p)] += (peak - p + proxies - 1) / proxies
	}
	return out
}

// picker returns proxy p's picker: the algorithm's, inside package
// locality with Locality (callers being Scenario.callers) or package route
// with Route, its pickers drawing from rand and reading now.
func (e *engine) picker(p int, a catalog.Algorithm, callers map[string]int, rand func() uint64, now func() time.Time) (balancer.Balancer, error) {
	if e.variant&(Locality|Route) == 0 {
		return a.Sim(rand, now), nil
	}
	// The simulator turns the loops of the pickers it holds (probes,
	// weights); one per zone inside locality, or per track inside route,
	// it cannot reach, and its figures would be those of a picker whose
	// loop never runs.
	looped := false
	factory := func() balancer.Balancer {
		b := a.Sim(rand, now)
		looped = looped || loops(b)
		return b
	}
	var (
		b    balancer.Balancer
		err  error
		what = "locality"
	)
	if e.variant&Route != 0 {
		what = "route"
		b, err = route.New(factory, route.Config{Label: TrackLabel, Default: StableTrack, Rand: rand})
	} else {
		b, err = locality.New(factory, locality.Config{
			Zone:    e.sc.proxyZone(p),
			Callers: callers,
			Rand:    rand,
		})
	}
	if err != nil {
		return nil, fmt.Errorf("sim: %s: %s: %w", a.Name, what, err)
	}
	if looped {
		if c, ok := b.(io.Closer); ok {
			_ = c.Close()
		}
		return nil, errLoops(e.sc, a)
	}
	return b, nil
}

// loops reports whether b runs a loop the simulator turns: probes
// (prober), weights (refresher).
func loops(b balancer.Balancer) bool {
	_, probes := b.(prober)
	_, refreshes := b.(refresher)
	return probes || refreshes
}

// errLoops is the error for algorithm a, whose pickers run a loop, under
// the Locality or Route variant of scenario sc.
func errLoops(sc *Scenario, a catalog.Algorithm) error {
	return fmt.Errorf("%w: %s: %s runs a loop of its own (probes, weights), which the simulator cannot turn inside locality or route; leave it out (-algos) or run it without them",
		ErrScenario, sc.Name, a.Name)
}

// checkLoops refuses, before any run starts, a scenario with the
// Locality or Route variant played with an algorithm whose pickers run a
// loop.
func checkLoops(sc *Scenario, algos []catalog.Algorithm) error {
	if !slices.ContainsFunc(sc.RunVariants(), func(v Variant) bool { return v&(Locality|Route) != 0 }) {
		return nil
	}
	for _, a := range algos {
		if a.Sim == nil {
			continue
		}
		b := a.Sim(nil, nil)
		looped := loops(b)
		if c, ok := b.(io.Closer); ok {
			_ = c.Close()
		}
		if looped {
			return errLoops(sc, a)
		}
	}
	return nil
}

// subset returns bal inside package subset, proxy p being Index p of
// Count proxies, with Subset; bal otherwise.
func (e *engine) subset(p int, a catalog.Algorithm, bal balancer.Balancer) (balancer.Balancer, error) {
	if e.variant&Subset == 0 {
		return bal, nil
	}
	s, err := subset.New(bal, subset.Config{Size: e.sc.SubsetSize, Index: p, Count: len(e.proxies)})
	if err != nil {
		return nil, fmt.Errorf("sim: %s: subset: %w", a.Name, err)
	}
	return s, nil
}

// crossDelay returns the network time user u's attempt t takes more for
// crossing zones: CrossZone when its proxy and its backend are in
// different zones, both known; zero otherwise.
func (e *engine) crossDelay(u int32, t *try) int64 {
	if e.cross == 0 {
		return 0
	}
	pz, bz := e.proxyZone[e.users[u].proxy], e.servers[t.backend].zone
	if pz >= 0 && bz >= 0 && pz != bz {
		return e.cross
	}
	return 0
}

// carriedAt returns where user u's attempt t keeps the report its answer
// carries across zones in engine.carried: the user's own, then its
// hedge's.
func (e *engine) carriedAt(u int32, t *try) int {
	if t.token&hedgeToken != 0 {
		return len(e.users) + int(u)
	}
	return int(u)
}

// span returns the span now falls in, which an attempt sent or a request
// ended now counts in: 0 before the first outage (or all the run without
// one), 1 during it, −1 after.
func (e *engine) span() int {
	switch {
	case !e.hasWindow || e.now < e.window[0]:
		return 0
	case e.now < e.window[1]:
		return 1
	}
	return -1
}

// track records what the fleet figures need of an attempt by proxy p to
// backend i: whether it stayed in its zone, and the connection.
func (e *engine) track(p, i int32) {
	if pz, bz := e.proxyZone[p], e.servers[i].zone; pz >= 0 && bz >= 0 {
		if k := e.span(); k >= 0 {
			if pz == bz {
				e.local[k]++
			} else {
				e.remote[k]++
			}
		}
	}
	if e.connected != nil {
		w := (len(e.servers) + 63) / 64
		e.connected[int(p)*w+int(i)/64] |= 1 << (uint(i) % 64)
	}
}

// inZone returns the share of attempts, in percent, that stayed in their
// proxy's zone during span k, of those whose proxy and backend both have
// a zone.
func (e *engine) inZone(k int) (float64, bool) {
	if k == 1 && !e.hasWindow {
		return 0, false
	}
	n := e.local[k] + e.remote[k]
	if n == 0 {
		return 0, false
	}
	return 100 * float64(e.local[k]) / float64(n), true
}

// addSpans adds to s's in-flight area in each span the part of n
// requests held from s.last to now.
func (s *server) addSpans(n, now int64) {
	for k := range 2 {
		if lo, hi := max(s.last, s.spans[k]), min(now, s.spans[k+1]); hi > lo {
			s.spanArea[k] += n * (hi - lo)
		}
	}
}

// spans returns the bounds of the spans the fleet figures are measured
// over: before the first outage, or the whole run without one, and
// during it.
func (e *engine) spans() [3]int64 {
	if e.hasWindow {
		return [3]int64{0, e.window[0], e.window[1]}
	}
	return [3]int64{0, e.end, e.end}
}

// maxLoad returns the load of the busiest backend with a Capacity during
// span k, in percent: its time-weighted requests over its capacity.
func (e *engine) maxLoad(k int) (float64, bool) {
	if k == 1 && !e.hasWindow {
		return 0, false
	}
	b := e.spans()
	lo, hi := b[k], b[k+1]
	if hi <= lo {
		return 0, false
	}
	best, found := 0.0, false
	for i := range e.servers {
		s := &e.servers[i]
		if c := s.spec.Capacity; c > 0 {
			best, found = max(best, 100*float64(s.spanArea[k])/float64(hi-lo)/float64(c)), true
		}
	}
	return best, found
}

// conns returns the mean, or the maximum, over the backends of the
// proxies that sent each at least one attempt.
func (e *engine) conns(most bool) (float64, bool) {
	if e.connected == nil || len(e.servers) == 0 {
		return 0, false
	}
	w := (len(e.servers) + 63) / 64
	total, top := 0, 0
	for i := range e.servers {
		n := 0
		for p := range e.proxies {
			n += int(e.connected[p*w+i/64] >> (uint(i) % 64) & 1)
		}
		total += n
		top = max(top, n)
	}
	if most {
		return float64(top), true
	}
	return float64(total) / float64(len(e.servers)), true
}

// spread returns the attempts of the least (or the most) loaded backend
// against the mean, in percent: −10 for 10% below it.
func (e *engine) spread(most bool) (float64, bool) {
	var total int64
	low, high := int64(-1), int64(0)
	for i := range e.servers {
		n := e.servers[i].sent
		total += n
		if low < 0 || n < low {
			low = n
		}
		high = max(high, n)
	}
	if total == 0 {
		return 0, false
	}
	mean := float64(total) / float64(len(e.servers))
	if most {
		return 100 * (float64(high)/mean - 1), true
	}
	return 100 * (float64(low)/mean - 1), true
}

// extras returns the figures of the scenario's Metrics that the engine
// computes, in their order.
func (e *engine) extras() []Figure {
	var out []Figure
	for _, m := range e.sc.Metrics {
		if v, ok := e.figure(m.Name); ok {
			out = append(out, Figure{Name: m.Name, Value: v})
		}
	}
	return out
}

// tracksConns reports whether sc asks for connection figures, which cost
// a bit per proxy and backend and an OR per attempt.
func (s *Scenario) tracksConns() bool {
	return slices.ContainsFunc(s.Metrics, func(m Metric) bool { return m.Name == "conns_mean" || m.Name == "conns_max" })
}
