package sim

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lbkit/lbkit/subset"
)

// WriteText writes one aligned table per scenario and number of proxies,
// after a line naming the Source when it is not "simulation"; under each
// table its verdict (ScenarioReport.Verdict), and at the end the summary
// for each number of proxies (Report.Summaries).
func (r *Report) WriteText(w io.Writer) error {
	if r.Source != "" && r.Source != simulation {
		if _, err := fmt.Fprintf(w, "source: %s\n\n", r.Source); err != nil {
			return err
		}
	}
	return r.sections(w, func(bw *bufio.Writer, sr *ScenarioReport) {
		fmt.Fprintf(bw, "%s, %s: %s\n", sr.Scenario.Name, plural(sr.Proxies, "proxy", "proxies"), sr.Scenario.Describe())
		fmt.Fprintf(bw, "  backends %s\n", sr.Scenario.DescribeBackends())
		for _, l := range sr.legend() {
			fmt.Fprintf(bw, "  %s\n", l)
		}
		sr.table().text(bw)
		v := sr.Verdict()
		for _, l := range v.Lines(sr.algorithms()) {
			fmt.Fprintf(bw, "  %s\n", l)
		}
	}, func(bw *bufio.Writer, s *Summary) {
		for _, l := range s.Lines() {
			fmt.Fprintf(bw, "%s\n", l)
		}
	})
}

// WriteMarkdown writes the tables as GitHub Markdown, one section per
// scenario and number of proxies, after a line naming the Source when it
// is not "simulation"; each table is followed by its verdict, and the
// summaries come last, as in WriteText.
func (r *Report) WriteMarkdown(w io.Writer) error {
	if r.Source != "" && r.Source != simulation {
		if _, err := fmt.Fprintf(w, "Source: %s.\n\n", r.Source); err != nil {
			return err
		}
	}
	return r.sections(w, func(bw *bufio.Writer, sr *ScenarioReport) {
		fmt.Fprintf(bw, "### %s, %s\n\n", sr.Scenario.Name, plural(sr.Proxies, "proxy", "proxies"))
		fmt.Fprintf(bw, "%s; backends `%s`. %s.\n\n", sr.Scenario.Describe(), sr.Scenario.DescribeBackends(), strings.Join(sr.legend(), "; "))
		sr.table().markdown(bw)
		bw.WriteString("\n")
		v := sr.Verdict()
		for _, l := range v.Lines(sr.algorithms()) {
			fmt.Fprintf(bw, "- %s\n", l)
		}
	}, func(bw *bufio.Writer, s *Summary) {
		lines := s.Lines()
		fmt.Fprintf(bw, "### %s\n\n", strings.TrimSuffix(lines[0], ":"))
		for _, l := range lines[1:] {
			fmt.Fprintf(bw, "- %s\n", strings.TrimSpace(l))
		}
	})
}

// legend explains the table's columns that need it, a line each: the
// per-backend figures and their order, the throughput around an outage.
func (sr *ScenarioReport) legend() []string {
	sc := &sr.Scenario
	var out []string
	if len(sc.Backends) <= maxListed {
		out = append(out, "per backend (share of attempts, mean and peak in flight): "+sc.Labels())
	} else {
		out = append(out, fmt.Sprintf("per backend, over %d: the busiest one's share of attempts, the most requests in flight at one over the mean, the highest peak", len(sc.Backends)))
	}
	if o, ok := sc.FirstOutage(); ok {
		out = append(out, fmt.Sprintf("before, during: RPS before the first outage (at %v) and during it; change: during over before", o.At))
	}
	return out
}

// algorithms counts the algorithms of the report: its results under one
// variant.
func (sr *ScenarioReport) algorithms() int {
	return len(sr.Results) / len(sr.Scenario.RunVariants())
}

// sections writes one section per scenario report, then, if summary is
// not nil, one per summary, a blank line apart.
func (r *Report) sections(w io.Writer, section func(*bufio.Writer, *ScenarioReport), summary func(*bufio.Writer, *Summary)) error {
	bw := bufio.NewWriter(w)
	for i := range r.Scenarios {
		if i > 0 {
			bw.WriteString("\n")
		}
		section(bw, &r.Scenarios[i])
	}
	if summary != nil {
		for _, s := range r.Summaries() {
			bw.WriteString("\n")
			summary(bw, &s)
		}
	}
	return bw.Flush()
}

// Describe says what the users do, in a line: "100 users for 3m0s, think
// 100ms".
func (s *Scenario) Describe() string {
	var b strings.Builder
	steady := true
	for _, st := range s.Stages {
		steady = steady && st.Target == s.Users
	}
	if steady {
		fmt.Fprintf(&b, "%s for %v", plural(s.Users, "user", "users"), s.Length())
	} else {
		fmt.Fprintf(&b, "users %d", s.Users)
		for _, st := range s.Stages {
			fmt.Fprintf(&b, " → %d over %v", st.Target, st.Duration)
		}
		fmt.Fprintf(&b, " (%v)", s.Length())
	}
	fmt.Fprintf(&b, ", think %v", s.Think)
	for _, v := range s.RunVariants() {
		if v&Active != 0 {
			fmt.Fprintf(&b, ", checks every %v", s.Interval())
			break
		}
	}
	if len(s.ProxyZones) > 0 {
		b.WriteString(", proxies in zones " + joinRuns(s.ProxyZones, "×", ", "))
	}
	if s.CrossZone > 0 {
		fmt.Fprintf(&b, ", %v more across zones", s.CrossZone)
	}
	for _, v := range s.RunVariants() {
		if v&Subset != 0 {
			size := s.SubsetSize
			if size == 0 {
				size = subset.DefaultSize
			}
			fmt.Fprintf(&b, ", subsets of %d", size)
			break
		}
	}
	return b.String()
}

// joinRuns joins xs with sep, a run of n equal neighbours as one: "a×5"
// with times "×" (the proxies' zones), "14x10ms" with "x" (ParseBackends'
// repeat).
func joinRuns(xs []string, times, sep string) string {
	var parts []string
	for i := 0; i < len(xs); {
		j := i + 1
		for j < len(xs) && xs[j] == xs[i] {
			j++
		}
		switch n := strconv.Itoa(j - i); {
		case j-i == 1:
			parts = append(parts, xs[i])
		case times == "×":
			parts = append(parts, xs[i]+times+n)
		default:
			parts = append(parts, n+times+xs[i])
		}
		i = j
	}
	return strings.Join(parts, sep)
}

// DescribeBackends lists the backends in ParseBackends' syntax, so that the
// line can be pasted into lbsim's -backends, neighbours that are alike as
// one ("300x10ms:s=0.5:c=4"); a backend with measured Samples shows their
// median and number ("48ms:samples=1200:name=api"), which only a
// -backends-file gives.
func (s *Scenario) DescribeBackends() string {
	parts := make([]string, len(s.Backends))
	for i, b := range s.Backends {
		var p strings.Builder
		p.WriteString(b.Latency.String())
		if b.Weight != 0 {
			fmt.Fprintf(&p, ":w=%d", b.Weight)
		}
		if b.Capacity != 0 {
			fmt.Fprintf(&p, ":c=%d", b.Capacity)
		}
		if b.Jitter != 0 {
			fmt.Fprintf(&p, ":j=%v", b.Jitter)
		}
		if b.Sigma != 0 {
			fmt.Fprintf(&p, ":s=%g", b.Sigma)
		}
		if len(b.Samples) > 0 {
			fmt.Fprintf(&p, ":samples=%d", len(b.Samples))
		}
		for _, o := range b.Down {
			fmt.Fprintf(&p, ":down=%v", o.At)
			if o.Until != 0 {
				fmt.Fprintf(&p, "-%v", o.Until)
			}
		}
		for _, n := range b.Neighbours {
			fmt.Fprintf(&p, ":nb=%d@%v", n.Takes, n.At)
			if n.Until != 0 {
				fmt.Fprintf(&p, "-%v", n.Until)
			}
		}
		for _, spans := range []struct {
			key string
			os  []Outage
		}{{"stall", b.Stalls}, {"503", b.Unavailable}} {
			for _, o := range spans.os {
				fmt.Fprintf(&p, ":%s=%v", spans.key, o.At)
				if o.Until != 0 {
					fmt.Fprintf(&p, "-%v", o.Until)
				}
			}
		}
		if b.TailShare != 0 {
			fmt.Fprintf(&p, ":tail=%s%%x%g", percent(b.TailShare), b.TailFactor)
		}
		if b.FailShare != 0 {
			fmt.Fprintf(&p, ":fail=%s%%", percent(b.FailShare))
		}
		if b.Name != "" {
			fmt.Fprintf(&p, ":name=%s", b.Name)
		}
		if b.Zone != "" {
			fmt.Fprintf(&p, ":zone=%s", b.Zone)
		}
		if b.Track != "" {
			fmt.Fprintf(&p, ":track=%s", b.Track)
		}
		parts[i] = p.String()
	}
	return joinRuns(parts, "x", ",")
}

// percent prints share as a percentage, without an exponent, in the
// fewest decimals that ParseBackends reads back as share: 1 for 0.01, 7
// for 0.07 (where 100·0.07 prints 7.000000000000001), 30 for 0.3.
func percent(share float64) string {
	for decimals := 0; decimals < 17; decimals++ {
		s := strconv.FormatFloat(100*share, 'f', decimals, 64)
		if v, err := strconv.ParseFloat(s, 64); err == nil && v/100 == share {
			return s
		}
	}
	return strconv.FormatFloat(100*share, 'g', -1, 64)
}

// Labels returns the backends' labels joined by '/', the order of the
// per-backend columns.
func (s *Scenario) Labels() string {
	labels := make([]string, len(s.Backends))
	for i := range labels {
		labels[i] = s.Label(i)
	}
	return strings.Join(labels, "/")
}

// table is a grid of cells with a header; numeric columns align right.
// The first keys columns name the row (variant, algorithm); the columns
// from spread on are per backend, which text prints as a table of its own
// when the whole would be too wide.
type table struct {
	header []string
	right  []bool
	rows   [][]string
	keys   int
	spread int // len(header) when there are no per-backend columns
}

// maxListed is the most backends whose figures a table lists one by one
// ("25/25/25/25"); with more, it gives the busiest backend's share and the
// spread of requests in flight instead.
const maxListed = 8

// table lays out a scenario's results: one row per variant and algorithm,
// a column per metric of the report (Metrics) that has a label, then the
// per-backend figures.
func (sr *ScenarioReport) table() *table {
	sc := &sr.Scenario
	variants := len(sc.RunVariants()) > 1 || sc.RunVariants()[0] != None
	t := &table{}
	col := func(name string, right bool) {
		t.header = append(t.header, name)
		t.right = append(t.right, right)
	}
	if variants {
		col("variant", false)
	}
	col("algorithm", false)
	t.keys = len(t.header)
	var metrics []Metric
	for _, m := range sr.Metrics() {
		if m.Label != "" {
			metrics = append(metrics, m)
			col(m.Label, true)
		}
	}
	t.spread = len(t.header)
	listed := len(sc.Backends) <= maxListed
	if listed {
		col("share %", true)
		col("in flight", true)
		col("peak", true)
	} else {
		col("busiest %", true)
		col("in flight max/mean", true)
		col("peak", true)
	}

	for i := range sr.Results {
		r := &sr.Results[i]
		var row []string
		if variants {
			row = append(row, r.Variant.String())
		}
		row = append(row, r.Algorithm)
		for _, m := range metrics {
			if v, ok := m.Value(r); ok {
				row = append(row, m.Format(v))
			} else {
				row = append(row, "")
			}
		}
		if listed {
			share := make([]string, len(r.Backends))
			mean := make([]string, len(r.Backends))
			peak := make([]string, len(r.Backends))
			for i, b := range r.Backends {
				share[i] = strconv.FormatFloat(100*b.Share, 'f', 0, 64)
				mean[i] = strconv.FormatFloat(b.MeanInFlight, 'f', 1, 64)
				peak[i] = strconv.Itoa(b.PeakInFlight)
			}
			row = append(row, strings.Join(share, "/"), strings.Join(mean, "/"), strings.Join(peak, "/"))
		} else {
			var busiest, top, sum float64
			peak := 0
			for _, b := range r.Backends {
				busiest = max(busiest, b.Share)
				top = max(top, b.MeanInFlight)
				sum += b.MeanInFlight
				peak = max(peak, b.PeakInFlight)
			}
			spread := ""
			if sum > 0 {
				spread = strconv.FormatFloat(top/(sum/float64(len(r.Backends))), 'f', 2, 64)
			}
			row = append(row, strconv.FormatFloat(100*busiest, 'f', 1, 64), spread, strconv.Itoa(peak))
		}
		t.rows = append(t.rows, row)
	}
	return t
}

// ms formats d in milliseconds with one decimal.
func ms(d time.Duration) string {
	return strconv.FormatFloat(millis(d), 'f', 1, 64)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// maxWidth is the widest line text writes a table in: wider, the
// per-backend columns go to a table of their own, below, whose rows are
// named as the first's.
const maxWidth = 120

// text writes t with columns two spaces apart, in two tables when one
// would be wider than maxWidth.
func (t *table) text(w *bufio.Writer) {
	width := make([]int, len(t.header))
	for _, row := range append([][]string{t.header}, t.rows...) {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	total := 2 * (len(width) - 1)
	for _, n := range width {
		total += n
	}
	line := func(row []string, cols []int) {
		var b strings.Builder
		for k, i := range cols {
			if k > 0 {
				b.WriteString("  ")
			}
			c := row[i]
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if t.right[i] {
				b.WriteString(pad + c)
			} else {
				b.WriteString(c + pad)
			}
		}
		w.WriteString(strings.TrimRight(b.String(), " ") + "\n")
	}
	block := func(cols []int) {
		line(t.header, cols)
		for _, row := range t.rows {
			line(row, cols)
		}
	}
	all := make([]int, len(t.header))
	for i := range all {
		all[i] = i
	}
	if total <= maxWidth || t.spread == len(t.header) {
		block(all)
		return
	}
	block(all[:t.spread])
	w.WriteString("\n")
	block(append(all[:t.keys:t.keys], all[t.spread:]...))
}

// markdown writes t as a GitHub table.
func (t *table) markdown(w *bufio.Writer) {
	w.WriteString("| " + strings.Join(t.header, " | ") + " |\n|")
	for _, r := range t.right {
		if r {
			w.WriteString("--:|")
		} else {
			w.WriteString("---|")
		}
	}
	w.WriteString("\n")
	for _, row := range t.rows {
		w.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
}
