package sim

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Summary is what a report's scenarios say together about the
// algorithms, for one number of proxies: which to use for these backends,
// why, and the runner-up. Report.Summaries computes it from the figures.
//
// The rule (RuleText says it in a line). In each scenario, under the
// variant its verdict judges, an algorithm has one ratio to the best per
// figure, each in [0, 1], 1 for the best:
//
//	throughput  its RPS ÷ the most RPS                           weight 1
//	p99         (the lowest p99 ÷ its p99) to the power ½        weight ½
//	errors      what its error share leaves, 1 − it, ÷ what the
//	            fewest errors leave                              weight 1
//	herding     what its busiest backend leaves to the others,
//	            1 − share, ÷ what a share at that backend's
//	            bound leaves (HerdBounds); 1 within the bound    weight 1
//
// (a scenario's own ranked figures, when it has them, count with weight
// 1 as throughput does). Its score there is the least of the weighted
// ratios, and its standing its worst scenario's score: the pick is the
// algorithm whose worst case is best, not the one that wins most often,
// since a user's traffic will meet every kind of day (the highest mean
// score breaks a tie, then the order of the algorithms).
//
// Why these weights: a p99 is a threshold figure. A backend whose 3% of
// answers take 20 times as long moves the p99 by that factor once it
// takes a third of the requests, for a change of a few percent in where
// they go; the square root makes a p99 four times the lowest count as
// much as half the most throughput. Herding counts as a share, as errors
// do, by what it leaves: sending 99% of attempts to a backend whose
// bound is 77% leaves the others 1% where the bound leaves them 23%, a
// ratio of 0.04. A herd has no headroom for the day its favourite slows
// down, which a scenario's throughput does not always show. Herding
// needs a capacity to be past: it counts in the scenarios whose backends
// all have one (the -cap ones), not where capacity is unlimited and the
// fastest backend can take everything at no cost. The same bound marks
// herding in a scenario's trade-off line, in every line of the summary
// that names an algorithm and in the HTML report's headline.
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
	// then by herding, and Busiest the largest share of attempts one
	// backend took there.
	Worst   string
	Ratios  []Ratio
	Busiest float64
	// Herd is the largest share of attempts one backend took in a
	// scenario where that share passed the herding bound (2/n of n
	// backends: see Summary), HerdIn that scenario; 0 and empty when it
	// never herded.
	Herd   float64
	HerdIn string
	// Leads lists the scenarios where it leads by the first ranked metric
	// (throughput).
	Leads []string
}

// Ratio is an algorithm's figure relative to the best, by one metric: 1
// for the best, less for the others, weighted (see Summary).
type Ratio struct {
	Metric Metric
	// Value is the weighted ratio; Own and Best the figures it compares.
	Value, Own, Best float64
}

// RuleText is the summary's rule in a line, as lbsim prints it under its
// summary (see Summary for the whole of it).
const RuleText = "rule: in each scenario an algorithm scores the least of its RPS ÷ the most, √(lowest p99 ÷ its p99), " +
	"(1 − its error share) ÷ (1 − the fewest), and, where backends have a capacity and one takes more than halfway from its share of it to all, " +
	"(1 − that backend's share) ÷ (1 − that bound) (herding); the pick is the algorithm whose worst scenario scores best"

// HerdBounds returns, for each backend of sc, the share of attempts
// above which it takes the herd: halfway from its share of the
// backends' capacity to all of them, (1 + c)/2. A backend's capacity
// share c is what it can serve in a second, its Capacity over its mean
// service time, as a part of what all can: of three backends answering
// in 20, 31.4 (20 with 3% of answers 20 times as long) and 80 ms with 16
// slots each, 0.80, 0.51 and 0.20 requests a millisecond, 53%, 34% and
// 13%, so bounds of 76.5%, 66.9% and 56.6%.
//
// It returns nil, no bound, when a backend has no Capacity: with
// unlimited capacity sending everything to the fastest backend costs
// nothing, and nothing tells how much is too much.
func HerdBounds(sc *Scenario) []float64 {
	rates := make([]float64, len(sc.Backends))
	var sum float64
	for i := range sc.Backends {
		b := &sc.Backends[i]
		if b.Capacity <= 0 {
			return nil
		}
		if m := b.meanService(); m > 0 {
			rates[i] = float64(b.Capacity) / m.Seconds()
		}
		sum += rates[i]
	}
	out := make([]float64, len(rates))
	for i, r := range rates {
		c := 1.0
		if sum > 0 {
			c = r / sum
		}
		out[i] = (1 + c) / 2
	}
	return out
}

// busiest returns the largest share of r's attempts one backend took.
func busiest(r *Result) float64 {
	b := 0.0
	for _, be := range r.Backends {
		b = max(b, be.Share)
	}
	return b
}

// herdMetric names the herding ratio in Standing.Ratios.
var herdMetric = Metric{Name: "herd_pct", Label: "herd %", Unit: "%", Better: Lower, Leader: "least herding", Share: true}

// herding returns r's herding ratio in sc (bounds from HerdBounds): for
// the backend furthest past its bound, what it leaves to the others,
// 1 − its share, over what a share at its bound leaves; 1 when no backend
// passes its bound. Own and Best are that backend's share and bound, in
// percent, when one passes it (Value < 1), and zero otherwise.
func herding(r *Result, bounds []float64) Ratio {
	q := Ratio{Metric: herdMetric, Value: 1}
	for i, b := range r.Backends {
		if i >= len(bounds) {
			break
		}
		v := 1.0
		if b.Share > bounds[i] && bounds[i] < 1 {
			v = (1 - b.Share) / (1 - bounds[i])
		}
		if v < q.Value {
			q.Value, q.Own, q.Best = v, 100*b.Share, 100*bounds[i]
		}
	}
	return q
}

// p99Weight is the power the p99 ratio is raised to (see Summary).
const p99Weight = 0.5

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
		if m.Name == "p99_ms" {
			out.Value = math.Pow(out.Value, p99Weight)
		}
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
		bounds := HerdBounds(&sr.Scenario)
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
			h := herding(r, bounds)
			ratios = append(ratios, h)
			sc = min(sc, h.Value)
			if h.Value < 1 && h.Own/100 > st.Herd {
				st.Herd, st.HerdIn = h.Own/100, name
			}
			if r.Requests == 0 {
				sc = 0
			}
			st.Mean += sc
			if sc < st.Score {
				st.Score, st.Worst, st.Ratios = sc, name, ratios
				st.Busiest = busiest(r)
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
		return append(out, line, "  "+RuleText)
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
		line := fmt.Sprintf("  not %s, though it gives the most throughput in %s: at worst (%s) %s%s", o.Algorithm,
			strings.Join(o.Leads, ", "), o.Worst, o.shortfall(), o.herded())
		out = append(out, line)
	}
	return append(out, "  "+RuleText)
}

// herded says where the algorithm herded, when that was not its worst
// scenario's shortfall already: "; herds: 99% of attempts to one backend
// in steady". Every line that names an algorithm says it the same way.
func (st *Standing) herded() string {
	if st.Herd == 0 {
		return ""
	}
	for _, q := range st.Ratios {
		if q.Metric.Name == herdMetric.Name && q.Value < 1 && st.Worst == st.HerdIn {
			return "" // the shortfall says it
		}
	}
	return fmt.Sprintf("; herds: %.0f%% of attempts to one backend in %s", 100*st.Herd, st.HerdIn)
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
	b.WriteString(st.herded())
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
		case m.Name == herdMetric.Name:
			parts = append(parts, fmt.Sprintf("%.0f%% of attempts to one backend (herding: above %.0f%%)", q.Own, q.Best))
		case m.Better == Lower && m.Name == "p99_ms":
			parts = append(parts, fmt.Sprintf("a p99 %s× the lowest", times(q.Own/q.Best)))
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

// meanService is b's mean service time: its Latency (the mean of its
// Samples; e^(σ²/2) times the median with a Sigma), times
// 1 − TailShare + TailShare × TailFactor with a tail.
func (b *Backend) meanService() time.Duration {
	m := float64(b.Latency)
	switch {
	case len(b.Samples) > 0:
		var sum float64
		for _, d := range b.Samples {
			sum += float64(d)
		}
		m = sum / float64(len(b.Samples))
	case b.Sigma > 0:
		m *= math.Exp(b.Sigma * b.Sigma / 2)
	}
	if b.TailShare > 0 {
		m *= 1 - b.TailShare + b.TailShare*b.TailFactor
	}
	return time.Duration(m)
}
