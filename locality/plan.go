package locality

import (
	"cmp"
	"slices"

	"github.com/lbkit/lbkit/balancer"
)

// layout is what one set, with its health, makes of the levels and zones:
// which backends each group's picker gets and which share of the
// caller's traffic each level and zone takes. It is computed off the
// request path (plan) and turned into a snapshot for Pick.
type layout struct {
	levels []levelPlan // by priority, ascending; only priorities with backends
}

type levelPlan struct {
	priority         int
	healthy, total   int     // backends
	healthyW, totalW int64   // weights
	health           float64 // min(1, overprovisioning × healthy share)
	load             float64 // the share of the caller's traffic it takes
	panic            bool
	zoneAware        bool
	zones            []zonePlan // by zone name
}

type zonePlan struct {
	zone             string
	all              []int // positions in the set of the zone's backends
	handed           []int // those the zone's picker gets: the healthy ones, or all in panic
	healthy          int
	healthyW, totalW int64
	share            float64 // the share of the level's traffic it takes
}

// plan lays out set with its health. It is a pure function of its
// arguments, so that the routing tables can be checked and simulated
// without a picker.
//
// Cost: O(n log n) for the sort by priority and zone.
func plan(set balancer.Set, healthy []bool, s settings, callers map[string]int) layout {
	order := make([]int, set.Len())
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int {
		li, lj := set.Localities[i], set.Localities[j]
		return cmp.Or(cmp.Compare(li.Priority, lj.Priority), cmp.Compare(li.Zone, lj.Zone))
	})
	var l layout
	for _, i := range order {
		loc, w := set.Localities[i], int64(set.Weights[i])
		if len(l.levels) == 0 || l.levels[len(l.levels)-1].priority != loc.Priority {
			l.levels = append(l.levels, levelPlan{priority: loc.Priority})
		}
		lv := &l.levels[len(l.levels)-1]
		if len(lv.zones) == 0 || lv.zones[len(lv.zones)-1].zone != loc.Zone {
			lv.zones = append(lv.zones, zonePlan{zone: loc.Zone})
		}
		z := &lv.zones[len(lv.zones)-1]
		z.all = append(z.all, i)
		z.totalW += w
		lv.total++
		lv.totalW += w
		if healthy[i] {
			z.healthy++
			z.healthyW += w
			lv.healthy++
			lv.healthyW += w
		}
	}
	l.assignLoads(s)
	for i := range l.levels {
		l.levels[i].route(s, callers, healthy)
	}
	return l
}

// assignLoads gives each level its share of the traffic, after Envoy's
// priority load: a level's health is its healthy share of weight times
// the overprovisioning factor, capped at 1; level 0 takes its health,
// level 1 the rest up to its own health, and so on. If the healths add up
// to less than 1 (the levels together cannot take everything), each level
// takes its health over their sum, and a level whose healthy share is
// below the panic threshold panics. If nothing is healthy, level 0 takes
// everything, in panic.
//
// A worked example, with the factor 1.4: level 0 has 10 backends of which
// 6 are healthy, level 1 has 10, all healthy. Level 0's health is
// min(1, 1.4 × 0.6) = 0.84; it takes 84% and level 1 the other 16%. With
// 3 of level 0's healthy instead, 42% and 58%. If level 1 were down too,
// the healths would add up to 0.42: level 0 would take everything, and,
// with 30% healthy, below the threshold of 50%, in panic, on all 10.
func (l *layout) assignLoads(s settings) {
	sum := 0.0
	for i := range l.levels {
		lv := &l.levels[i]
		if lv.totalW > 0 {
			lv.health = min(1, s.overprov*float64(lv.healthyW)/float64(lv.totalW))
		}
		sum += lv.health
	}
	if len(l.levels) == 0 {
		return
	}
	if sum == 0 {
		l.levels[0].load, l.levels[0].panic = 1, true
		return
	}
	remaining := 1.0
	for i := range l.levels {
		lv := &l.levels[i]
		if sum >= 1 {
			lv.load = min(lv.health, remaining)
			remaining -= lv.load
			continue
		}
		lv.load = lv.health / sum
		lv.panic = !s.noPanic && float64(lv.healthyW) < s.panicFrac*float64(lv.totalW)
	}
}

// route decides which backends each zone's picker gets and how the
// level's traffic is split between its zones: zone-aware routing (Envoy's
// two cases) when it applies, else in proportion to healthy weight (to
// total weight in panic).
func (lv *levelPlan) route(s settings, callers map[string]int, healthy []bool) {
	for i := range lv.zones {
		z := &lv.zones[i]
		if lv.panic {
			z.handed = z.all
			z.share = float64(z.totalW) / float64(lv.totalW)
		} else {
			z.handed = z.handed[:0:0]
			for _, b := range z.all {
				if healthy[b] {
					z.handed = append(z.handed, b)
				}
			}
			if lv.healthyW > 0 {
				z.share = float64(z.healthyW) / float64(lv.healthyW)
			}
		}
	}
	if lv.panic || s.zone == "" || lv.healthy < s.minSize {
		return
	}
	local := -1
	zonesUp := 0
	for i, z := range lv.zones {
		if z.healthyW > 0 {
			zonesUp++
			if z.zone == s.zone {
				local = i
			}
		}
	}
	if local < 0 || zonesUp < 2 {
		return
	}
	lv.zoneAware = true
	// The callers' share of each zone (c) and the healthy backends' (u).
	c := make([]float64, len(lv.zones))
	if callers == nil {
		for i, z := range lv.zones {
			c[i] = float64(z.totalW) / float64(lv.totalW)
		}
	} else {
		total := 0
		for _, n := range callers {
			total += n
		}
		for i, z := range lv.zones {
			c[i] = float64(callers[z.zone]) / float64(total)
		}
	}
	uLocal := lv.zones[local].share
	if uLocal >= c[local] {
		// Case 1: the local zone can take all the local callers' traffic.
		for i := range lv.zones {
			lv.zones[i].share = 0
		}
		lv.zones[local].share = 1
		return
	}
	// Case 2: the local zone takes what keeps its backends as loaded as
	// the others, uLocal/cLocal of the local traffic; the rest goes to
	// the zones with room left after their own callers (residual
	// capacity u − c), in proportion to that room.
	keep := uLocal / c[local]
	residual := make([]float64, len(lv.zones))
	sum := 0.0
	for i, z := range lv.zones {
		if i != local && z.healthyW > 0 {
			residual[i] = max(0, z.share-c[i])
			sum += residual[i]
		}
	}
	for i := range lv.zones {
		switch {
		case i == local:
			lv.zones[i].share = keep
		case sum > 0:
			lv.zones[i].share = (1 - keep) * residual[i] / sum
		default: // unreachable when the shares add up, kept for safety
			lv.zones[i].share = (1 - keep) * lv.zones[i].share / (1 - uLocal)
		}
	}
}
