package sim

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Tie is the verdict's resolution: two figures within this fraction of
// the better one tie (1%, above the percentiles' HistogramError).
const Tie = 0.01

// Verdict is what one scenario report's figures say: who leads by each
// metric that has a Leader, and the trade-off between the leaders, in a
// line. ScenarioReport.Verdict computes it; nothing in it is written by
// hand, so other backends give other verdicts.
type Verdict struct {
	// Variant is the failure handling judged, when the scenario compares
	// several: the one whose runs fail the fewest user requests together
	// (on a tie, the one that serves the most; then the later one); or,
	// when the scenario has a Contrast that ran, the variant it is about.
	Variant Variant
	// Leads has one entry per metric the verdict ranks by (those with a
	// Leader that the runs report), in table order.
	Leads []Lead
	// TradeOff says in a line what the throughput leader gives up, or
	// what it gains over the next; empty with fewer than two algorithms.
	TradeOff string
	// Handling sets the variants' errors side by side, in a line, when
	// the scenario compares several; empty otherwise.
	Handling string
	// Versus sets the best p99 of the scenario's Versus groups side by
	// side, in a line: "report-driven or probing against local: prequal's
	// p99 is 41% below lrt's (60.2 against 102.3 ms)"; empty without a
	// Versus, or when a group has no run that served a request.
	Versus string
	// Contrast sets one algorithm's figures under the scenario's
	// Contrast variants side by side, in a line: "leastconn with
	// locality against without: in zone % before: 96.7 against 33.9;
	// ...; p99 ms: 30.1 against 32.4"; empty without a Contrast, or when
	// either run is missing.
	Contrast string
	// ByVariant sets the variants' figures side by side, a line for each
	// of the scenario's own metrics that asks for it (the slow scenarios':
	// attempts per request, the longest wait), with the range over the
	// algorithms: "load amplification during the outage, by variant (the
	// algorithms' range): none 1.00, active+passive+retry 2.93 to 3.00";
	// empty when the scenario compares one variant.
	ByVariant []string
}

// Lead is who leads by one metric in a scenario.
type Lead struct {
	Metric Metric
	// Algorithms lead: the best value and those within Tie of it, in
	// table order.
	Algorithms []string
	// Value is the best value.
	Value float64
	// Next is the best value of the other algorithms, Others the ones
	// that have it (within Tie); Others is empty when every algorithm
	// leads.
	Next   float64
	Others []string
}

// judged returns the variant the verdict judges and its results.
func (sr *ScenarioReport) judged() (Variant, []*Result) {
	vs := sr.Scenario.RunVariants()
	best, bestErrs, bestRPS := vs[0], int64(math.MaxInt64), -1.0
	if c := sr.Scenario.Contrast; c != nil && slices.Contains(vs, c.Variant) {
		vs = []Variant{c.Variant}
	}
	for _, v := range vs {
		var errs int64
		var rps float64
		for i := range sr.Results {
			if sr.Results[i].Variant == v {
				errs += sr.Results[i].Errors
				rps += sr.Results[i].RPS
			}
		}
		if errs < bestErrs || errs == bestErrs && rps >= bestRPS {
			best, bestErrs, bestRPS = v, errs, rps
		}
	}
	var rs []*Result
	for i := range sr.Results {
		if sr.Results[i].Variant == best {
			rs = append(rs, &sr.Results[i])
		}
	}
	return best, rs
}

// ranked returns the metrics the verdict ranks by: those with a Leader
// and a Better, among the report's.
func (sr *ScenarioReport) ranked() []Metric {
	var out []Metric
	for _, m := range sr.Metrics() {
		if m.Leader != "" && m.Better != Neither {
			out = append(out, m)
		}
	}
	return out
}

// tied reports whether a and b are within Tie of the larger.
func tied(a, b float64) bool {
	return math.Abs(a-b) <= Tie*max(math.Abs(a), math.Abs(b))
}

// lead ranks rs by m.
func lead(m Metric, rs []*Result) Lead {
	l := Lead{Metric: m}
	var vals []float64
	var algos []string
	for _, r := range rs {
		if v, ok := m.Value(r); ok {
			vals, algos = append(vals, v), append(algos, r.Algorithm)
		}
	}
	// best returns the best of vals but those skip says, and false if
	// skip says all.
	best := func(skip func(float64) bool) (float64, bool) {
		var b float64
		found := false
		for _, v := range vals {
			if !skip(v) && (!found || m.Better == Higher && v > b || m.Better == Lower && v < b) {
				b, found = v, true
			}
		}
		return b, found
	}
	var ok bool
	if l.Value, ok = best(func(float64) bool { return false }); !ok {
		return l
	}
	leads := func(v float64) bool { return tied(v, l.Value) }
	l.Next, ok = best(leads)
	for i, v := range vals {
		switch {
		case leads(v):
			l.Algorithms = append(l.Algorithms, algos[i])
		case ok && tied(v, l.Next):
			l.Others = append(l.Others, algos[i])
		}
	}
	return l
}

// Verdict computes the scenario report's verdict from its figures.
func (sr *ScenarioReport) Verdict() Verdict {
	v, rs := sr.judged()
	vd := Verdict{Variant: v}
	for _, m := range sr.ranked() {
		vd.Leads = append(vd.Leads, lead(m, rs))
	}
	vd.TradeOff = tradeOff(vd.Leads, rs, HerdBounds(&sr.Scenario))
	if vs := sr.Scenario.Versus; vs != nil {
		vd.Versus = versus(vs, rs)
	}
	vd.Contrast = sr.contrast()
	if vs := sr.Scenario.RunVariants(); len(vs) > 1 {
		parts := make([]string, len(vs))
		for i, variant := range vs {
			var errs int64
			for _, r := range sr.Results {
				if r.Variant == variant {
					errs += r.Errors
				}
			}
			parts[i] = fmt.Sprintf("%v %d", variant, errs)
		}
		what := "failure handling"
		if sr.Scenario.Contrast != nil {
			what = "variants"
		}
		vd.Handling = fmt.Sprintf("%s, errors of all algorithms together: %s; judged under %v",
			what, strings.Join(parts, ", "), v)
		vd.ByVariant = sr.byVariant()
	}
	return vd
}

// byVariant sets the variants' figures side by side, for each metric of
// the report that asks for it.
func (sr *ScenarioReport) byVariant() []string {
	var out []string
	for _, m := range sr.Metrics() {
		if !m.byVariant {
			continue
		}
		var parts []string
		for _, v := range sr.Scenario.RunVariants() {
			lo, hi, found := 0.0, 0.0, false
			for i := range sr.Results {
				r := &sr.Results[i]
				if x, ok := m.Value(r); ok && r.Variant == v {
					if !found {
						lo, hi, found = x, x, true
					}
					lo, hi = min(lo, x), max(hi, x)
				}
			}
			switch {
			case !found:
			case m.Format(lo) == m.Format(hi):
				parts = append(parts, fmt.Sprintf("%v %s", v, valueText(&m, lo)))
			default:
				parts = append(parts, fmt.Sprintf("%v %s to %s", v, m.Format(lo), valueText(&m, hi)))
			}
		}
		if len(parts) > 0 {
			out = append(out, fmt.Sprintf("%s, by variant (the algorithms' range): %s", m.phrase, strings.Join(parts, ", ")))
		}
	}
	return out
}

// versus compares the best p99 of vs's groups among rs.
func versus(vs *Versus, rs []*Result) string {
	best := func(names []string) *Result {
		var b *Result
		for _, n := range names {
			if r := find(rs, n); r != nil && r.Requests > 0 && (b == nil || r.P99 < b.P99) {
				b = r
			}
		}
		return b
	}
	a, b := best(vs.Algorithms), best(vs.Baselines)
	if a == nil || b == nil {
		return ""
	}
	ms := Metrics()
	m := &ms[slices.IndexFunc(ms, func(m Metric) bool { return m.Name == "p99_ms" })]
	pa, _ := m.Value(a)
	qb, _ := m.Value(b)
	var how string
	switch {
	case tied(pa, qb):
		how = "the same as"
	case pa < qb:
		how = fmt.Sprintf("%.0f%% below", 100*(1-pa/qb))
	default:
		how = fmt.Sprintf("%.0f%% above", 100*(pa/qb-1))
	}
	return fmt.Sprintf("%s against %s: %s's p99 is %s %s's (%s against %s)", vs.Name, vs.Against, a.Algorithm, how, b.Algorithm,
		valueText(m, pa), valueText(m, qb))
}

// contrast is Verdict.Contrast's line.
func (sr *ScenarioReport) contrast() string {
	c := sr.Scenario.Contrast
	if c == nil {
		return ""
	}
	run := func(v Variant) *Result {
		for i := range sr.Results {
			if r := &sr.Results[i]; r.Variant == v && r.Algorithm == c.Algorithm {
				return r
			}
		}
		return nil
	}
	a, b := run(c.Variant), run(c.Against)
	if a == nil || b == nil {
		return ""
	}
	var parts []string
	ms := append(slices.Clone(sr.Scenario.Metrics), Metrics()...)
	for _, m := range ms {
		if m.Label == "" || m.value != nil && m.Name != "p99_ms" {
			continue // the scenario's own figures, and the p99
		}
		va, okA := m.Value(a)
		vb, okB := m.Value(b)
		if okA && okB {
			parts = append(parts, fmt.Sprintf("%s: %s against %s", m.Label, m.Format(va), m.Format(vb)))
		}
	}
	how := fmt.Sprintf("under %v against %v", c.Variant, c.Against)
	if added := c.Variant &^ c.Against; c.Against&^c.Variant == 0 && added != 0 {
		how = fmt.Sprintf("with %v against without", added)
	}
	return fmt.Sprintf("%s %s: %s", c.Algorithm, how, strings.Join(parts, "; "))
}

// find returns the result of the named algorithm in rs, or nil.
func find(rs []*Result, name string) *Result {
	for _, r := range rs {
		if r.Algorithm == name {
			return r
		}
	}
	return nil
}

// tradeOff says what the leader by the first ranked metric (throughput)
// gives up to the leader by another, or, when it leads by every one,
// what it gains over the next.
func tradeOff(leads []Lead, rs []*Result, bounds []float64) string {
	if len(leads) == 0 || len(rs) < 2 || len(leads[0].Algorithms) == 0 {
		return ""
	}
	primary := &leads[0].Metric
	value := func(m *Metric, r *Result) float64 { v, _ := m.Value(r); return v }
	// The best by the primary metric among names.
	top := func(names []string) *Result {
		var best *Result
		for _, n := range names {
			r := find(rs, n)
			if r != nil && (best == nil || value(primary, r) > value(primary, best)) {
				best = r
			}
		}
		return best
	}
	t := top(leads[0].Algorithms)
	var line string
	for i := 1; i < len(leads) && line == ""; i++ {
		l := &leads[i]
		if slices.Contains(l.Algorithms, t.Algorithm) || len(l.Algorithms) == 0 {
			continue
		}
		b := top(l.Algorithms)
		line = fmt.Sprintf("%s %s %s but %s", t.Algorithm, more(primary, value(primary, t), value(primary, b)), b.Algorithm,
			worse(&l.Metric, value(&l.Metric, t), value(&l.Metric, b), b.Algorithm))
	}
	if line == "" {
		// It leads by every metric: what it gains over the next.
		var others []string
		for _, r := range rs {
			if r != t {
				others = append(others, r.Algorithm)
			}
		}
		n := top(others)
		line = fmt.Sprintf("%s %s %s", t.Algorithm, more(primary, value(primary, t), value(primary, n)), n.Algorithm)
		if len(leads) > 1 {
			m := &leads[1].Metric
			switch a, b := value(m, t), value(m, n); {
			case tied(a, b):
				line += " with the same " + noun(m)
			default:
				line += fmt.Sprintf(" with a %s %s (%s against %s)", comparative(m), noun(m), valueText(m, a), valueText(m, b))
			}
		}
	}
	if h := herding(t, bounds); h.Value < 1 {
		line += fmt.Sprintf("; it sends %.0f%% of attempts to one backend (herding: above %.0f%%)", h.Own, h.Best)
	}
	return line
}

// more says how much more a serves than b by the primary metric: "serves
// 10% more than", "serves about as much as".
func more(m *Metric, a, b float64) string {
	if tied(a, b) || b == 0 {
		return "serves about as much as"
	}
	return fmt.Sprintf("serves %.0f%% more than", 100*(a/b-1))
}

// worse says how a compares with leader b by m, when b leads: "its p99 is
// 2.6× lrt's (1300.0 against 500.0 ms)", "it fails 4 requests to lrt's 0".
func worse(m *Metric, a, b float64, name string) string {
	switch {
	case m.kept != nil:
		return fmt.Sprintf("%s %s to %s's %s", verb(m), valueText(m, a), name, valueText(m, b))
	case m.Share || b <= 0 || a <= 0:
		return fmt.Sprintf("its %s is %s to %s's %s", noun(m), valueText(m, a), name, valueText(m, b))
	case m.Better == Lower:
		return fmt.Sprintf("its %s is %s× %s's (%s against %s)", noun(m), times(a/b), name, valueText(m, a), valueText(m, b))
	}
	return fmt.Sprintf("its %s is %.0f%% of %s's (%s against %s)", noun(m), 100*a/b, name, valueText(m, a), valueText(m, b))
}

// noun is what m measures: its Leader without the first word ("lowest
// p99": "p99"), or its name.
func noun(m *Metric) string {
	if _, n, ok := strings.Cut(m.Leader, " "); ok {
		return n
	}
	return m.Name
}

// comparative is "lower" or "higher" by m's Better.
func comparative(m *Metric) string {
	if m.Better == Higher {
		return "higher"
	}
	return "lower"
}

// verb says what a count of m means: "fails" for errors.
func verb(m *Metric) string {
	if m.Name == "errors" {
		return "it fails"
	}
	return "it has"
}

// valueText prints v with its unit: "581.7 RPS", "300.0 ms", "0".
func valueText(m *Metric, v float64) string {
	s := m.Format(v)
	switch m.Unit {
	case "requests/s":
		return s + " RPS"
	case "ms":
		return s + " ms"
	case "%":
		if !m.sign {
			return s + "%"
		}
		return s
	case "", "requests", "attempts":
		return s
	}
	return s + " " + m.Unit
}

// names lists up to three names, or says how many: "lrt, lrt-naive",
// "8 algorithms", "all 10" when they are all of total.
func names(ns []string, total int) string {
	switch {
	case len(ns) == total && total > 1:
		return "all " + strconv.Itoa(total)
	case len(ns) > 3:
		return strconv.Itoa(len(ns)) + " algorithms"
	}
	return strings.Join(ns, ", ")
}

// Lines returns the verdict as lines of text: one per lead ("most
// throughput: lrt-naive, 640.7 RPS (next lrt, 581.7 RPS)"), the
// trade-off, the failure handling.
func (v *Verdict) Lines(algorithms int) []string {
	var out []string
	for _, l := range v.Leads {
		if len(l.Algorithms) == 0 {
			continue
		}
		line := fmt.Sprintf("%s: %s, %s", l.Metric.Leader, names(l.Algorithms, algorithms), valueText(&l.Metric, l.Value))
		if len(l.Others) > 0 {
			line += fmt.Sprintf(" (next %s, %s)", names(l.Others, algorithms), valueText(&l.Metric, l.Next))
		}
		out = append(out, line)
	}
	if v.TradeOff != "" {
		out = append(out, "trade-off: "+v.TradeOff)
	}
	if v.Handling != "" {
		out = append(out, v.Handling)
	}
	out = append(out, v.ByVariant...)
	if v.Versus != "" {
		out = append(out, v.Versus)
	}
	if v.Contrast != "" {
		out = append(out, v.Contrast)
	}
	return out
}
