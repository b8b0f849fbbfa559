package sim

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Summary is what a report's scenarios say together about the
// algorithms, for one number of proxies: which to use for these backends,
// why, and the runner-up. Report.Summaries computes it from the figures.
//
// Each algorithm scores, in each scenario (under the variant its verdict
// judges), the least of its ratios to the best by every metric the
// verdict ranks by: its throughput over the most, the lowest p99 over its
// own, the share of requests it serves over the best share. Its standing
// is its worst scenario's score: the pick is the algorithm whose worst
// case is best, not the one that wins most often, since a user's traffic
// will meet every kind of day (the highest mean score breaks a tie, then
// the order of the algorithms).
type Summary struct {
	// Proxies is the number of proxies of the scenarios summed up.
	Proxies int
	// Scenarios names the scenarios summed up, in report order, and
	// Variants the failure handling each was judged under (see
	// Verdict.Variant).
	Scenarios []string
	Variants  []Variant
	// Standings has one entry per algorithm, best first: Standings[0] is
	// the pick, Standings[1] the runner-up.
	Standings []Standing
}

// Standing is one algorithm's record over a summary's scenarios.
type Standing struct {
	Algorithm string
	// Score is its worst scenario's score, in (0, 1]; Mean the mean over
	// the scenarios.
	Score, Mean float64
	// Worst is the scenario of its worst score, Ratios its ratio to the
	// best there by each metric the verdict ranks by (1 where it leads),
	// and Busiest the largest share of attempts one backend took there.
	Worst   string
	Ratios  []Ratio
	Busiest float64
	// Leads lists the scenarios where it leads by the first ranked metric
	// (throughput).
	Leads []string
}

// Ratio is an algorithm's figure relative to the best, by one metric: 1
// for the best, less for the others (see Summary).
type Ratio struct {
	Metric Metric
	// Value is the ratio; Own and Best the figures it compares.
	Value, Own, Best float64
}

// score returns r's ratio to the best of rs by m, in [0, 1], and the best
// value.
func score(m *Metric, r *Result, rs []*Result) Ratio {
	own, _ := m.Value(r)
	out := Ratio{Metric: *m, Value: 1, Own: own}
	first := true
	for _, o := range rs {
		v, ok := m.Value(o)
		if ok && (first || m.Better == Higher && v > out.Best || m.Better == Lower && v < out.Best) {
			out.Best, first = v, false
		}
	}
	switch {
	case m.kept != nil:
		best := 0.0
		for _, o := range rs {
			best = max(best, m.kept(o))
		}
		if best > 0 {
			out.Value = m.kept(r) / best
		}
	case m.Share:
		full := 1.0
		if m.Unit == "%" {
			full = 100
		}
		if full-out.Best > 0 {
			out.Value = (full - own) / (full - out.Best)
		}
	case m.Better == Higher && out.Best > 0:
		out.Value = own / out.Best
	case m.Better == Lower && own > 0:
		out.Value = out.Best / own
	}
	out.Value = min(max(out.Value, 0), 1)
	if tied(out.Value, 1) {
		out.Value = 1
	}
	return out
}

// Summaries sums up the report's scenarios, one Summary per number of
// proxies, in report order. A scenario in which no run served a request
// is left out; a summary with no scenario is not returned.
func (r *Report) Summaries() []Summary {
	var out []Summary
	var order []int
	byProxies := map[int][]*ScenarioReport{}
	for i := range r.Scenarios {
		sr := &r.Scenarios[i]
		if _, ok := byProxies[sr.Proxies]; !ok {
			order = append(order, sr.Proxies)
		}
		byProxies[sr.Proxies] = append(byProxies[sr.Proxies], sr)
	}
	for _, m := range order {
		if s, ok := summarize(m, byProxies[m]); ok {
			out = append(out, s)
		}
	}
	return out
}

func summarize(proxies int, srs []*ScenarioReport) (Summary, bool) {
	s := Summary{Proxies: proxies}
	standing := map[string]*Standing{}
	var algos []string
	for _, sr := range srs {
		v, rs := sr.judged()
		served := false
		for _, r := range rs {
			served = served || r.Requests > 0
		}
		if !served {
			continue
		}
		name := sr.Scenario.Name
		s.Scenarios, s.Variants = append(s.Scenarios, name), append(s.Variants, v)
		ranked := sr.ranked()
		var leaders []string
		if len(ranked) > 0 {
			leaders = lead(ranked[0], rs).Algorithms
		}
		for _, r := range rs {
			st := standing[r.Algorithm]
			if st == nil {
				st = &Standing{Algorithm: r.Algorithm, Score: math.Inf(1)}
				standing[r.Algorithm] = st
				algos = append(algos, r.Algorithm)
			}
			sc := 1.0
			var ratios []Ratio
			for i := range ranked {
				q := score(&ranked[i], r, rs)
				ratios = append(ratios, q)
				sc = min(sc, q.Value)
			}
			if r.Requests == 0 {
				sc = 0
			}
			st.Mean += sc
			if sc < st.Score {
				st.Score, st.Worst, st.Ratios = sc, name, ratios
				st.Busiest = 0
				for _, b := range r.Backends {
					st.Busiest = max(st.Busiest, b.Share)
				}
			}
			if slices.Contains(leaders, r.Algorithm) {
				st.Leads = append(st.Leads, name)
			}
		}
	}
	if len(s.Scenarios) == 0 {
		return s, false
	}
	for _, a := range algos {
		st := standing[a]
		st.Mean /= float64(len(s.Scenarios))
		s.Standings = append(s.Standings, *st)
	}
	slices.SortStableFunc(s.Standings, func(a, b Standing) int {
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return cmp.Compare(b.Mean, a.Mean)
	})
	return s, true
}

// Lines returns the summary as lines of text: the pick and why, the
// runner-up, and the algorithms that lead somewhere but not at worst.
func (s *Summary) Lines() []string {
	if len(s.Standings) == 0 {
		return nil
	}
	head := fmt.Sprintf("summary, %s, over %s (%s", plural(s.Proxies, "proxy", "proxies"), plural(len(s.Scenarios), "scenario", "scenarios"),
		strings.Join(s.Scenarios, ", "))
	var judged []string
	for i, v := range s.Variants {
		if v != None {
			judged = append(judged, fmt.Sprintf("%s under %v", s.Scenarios[i], v))
		}
	}
	if len(judged) > 0 {
		head += "; " + strings.Join(judged, ", ")
	}
	out := []string{head + "):"}
	pick := &s.Standings[0]
	line := fmt.Sprintf("  use %s: %s", pick.Algorithm, pick.record(len(s.Scenarios)))
	var ties []string
	for _, st := range s.Standings[1:] {
		if tied(st.Score, pick.Score) && tied(st.Mean, pick.Mean) {
			ties = append(ties, st.Algorithm)
		}
	}
	if len(ties) > 0 {
		// Equals: the first in the order of the algorithms is named.
		line += fmt.Sprintf("; %s as well", names(ties, 0))
		out = append(out, line)
		return out
	}
	out = append(out, line)
	if len(s.Standings) > 1 {
		r := &s.Standings[1]
		out = append(out, fmt.Sprintf("  runner-up %s: %s", r.Algorithm, r.record(len(s.Scenarios))))
	}
	// Those that lead somewhere but stand lower than the runner-up, most
	// leads first, two at most.
	var others []*Standing
	for i := 2; i < len(s.Standings); i++ {
		if st := &s.Standings[i]; len(st.Leads) > 0 && !tied(st.Score, s.Standings[1].Score) {
			others = append(others, st)
		}
	}
	slices.SortStableFunc(others, func(a, b *Standing) int { return cmp.Compare(len(b.Leads), len(a.Leads)) })
	for _, o := range others[:min(len(others), 2)] {
		line := fmt.Sprintf("  not %s, though it gives the most throughput in %s: at worst (%s) %s", o.Algorithm,
			strings.Join(o.Leads, ", "), o.Worst, o.shortfall())
		if o.Busiest > 0.5 {
			line += fmt.Sprintf(", %.0f%% of attempts to one backend", 100*o.Busiest)
		}
		out = append(out, line)
	}
	return out
}

// record says why an algorithm stands where it does: where it falls
// short at worst, and where it leads.
func (st *Standing) record(scenarios int) string {
	var b strings.Builder
	if st.Score >= 1 {
		b.WriteString("the best by every ranked figure in every scenario")
	} else {
		fmt.Fprintf(&b, "at worst (%s) %s", st.Worst, st.shortfall())
	}
	switch n := len(st.Leads); {
	case n == scenarios && st.Score < 1:
		b.WriteString("; the most throughput in every scenario")
	case n > 0 && n < scenarios:
		fmt.Fprintf(&b, "; the most throughput in %s", strings.Join(st.Leads, ", "))
	}
	return b.String()
}

// shortfall lists the ratios below 1 at the worst scenario: "84% of the
// most throughput, a p99 1.7× the lowest".
func (st *Standing) shortfall() string {
	var parts []string
	for _, q := range st.Ratios {
		if q.Value >= 1 {
			continue
		}
		m := &q.Metric
		switch {
		case m.kept != nil || m.Share:
			parts = append(parts, fmt.Sprintf("%s %s (the best %s)", noun(m), valueText(m, q.Own), valueText(m, q.Best)))
		case m.Better == Higher:
			parts = append(parts, fmt.Sprintf("%.0f%% of the %s", 100*q.Value, m.Leader))
		default:
			first, _, _ := strings.Cut(m.Leader, " ")
			article := "a"
			if n := noun(m); n != "" && strings.ContainsRune("aeiou", rune(n[0])) {
				article = "an"
			}
			parts = append(parts, fmt.Sprintf("%s %s %s× the %s", article, noun(m), times(1/q.Value), first))
		}
	}
	if len(parts) == 0 {
		return "as good as the best"
	}
	return strings.Join(parts, ", ")
}

// times prints a ratio above 1: two decimals below 1.1, one above.
func times(x float64) string {
	if x < 1.095 {
		return strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strconv.FormatFloat(x, 'f', 1, 64)
}
