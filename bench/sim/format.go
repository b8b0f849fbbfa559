package sim

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// WriteText writes one aligned table per scenario and number of proxies,
// after a line naming the Source when it is not "simulation".
func (r *Report) WriteText(w io.Writer) error {
	if r.Source != "" && r.Source != simulation {
		if _, err := fmt.Fprintf(w, "source: %s\n\n", r.Source); err != nil {
			return err
		}
	}
	return r.sections(w, func(bw *bufio.Writer, sr *ScenarioReport) {
		fmt.Fprintf(bw, "%s, %s: %s\n", sr.Scenario.Name, plural(sr.Proxies, "proxy", "proxies"), sr.Scenario.Describe())
		fmt.Fprintf(bw, "  backends %s\n", sr.Scenario.DescribeBackends())
		fmt.Fprintf(bw, "  per backend (share of attempts, mean and peak in flight): %s\n", sr.Scenario.Labels())
		sr.table().text(bw)
	})
}

// WriteMarkdown writes the tables as GitHub Markdown, one section per
// scenario and number of proxies, after a line naming the Source when it
// is not "simulation".
func (r *Report) WriteMarkdown(w io.Writer) error {
	if r.Source != "" && r.Source != simulation {
		if _, err := fmt.Fprintf(w, "Source: %s.\n\n", r.Source); err != nil {
			return err
		}
	}
	return r.sections(w, func(bw *bufio.Writer, sr *ScenarioReport) {
		fmt.Fprintf(bw, "### %s, %s\n\n", sr.Scenario.Name, plural(sr.Proxies, "proxy", "proxies"))
		fmt.Fprintf(bw, "%s; backends `%s`. Per backend (share of attempts, mean and peak in flight): %s.\n\n",
			sr.Scenario.Describe(), sr.Scenario.DescribeBackends(), sr.Scenario.Labels())
		sr.table().markdown(bw)
	})
}

// sections writes one section per scenario report, a blank line apart.
func (r *Report) sections(w io.Writer, section func(*bufio.Writer, *ScenarioReport)) error {
	bw := bufio.NewWriter(w)
	for i := range r.Scenarios {
		if i > 0 {
			bw.WriteString("\n")
		}
		section(bw, &r.Scenarios[i])
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
	return b.String()
}

// DescribeBackends lists the backends in ParseBackends' syntax, so that the
// line can be pasted into lbsim's -backends.
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
		for _, o := range b.Down {
			fmt.Fprintf(&p, ":down=%v", o.At)
			if o.Until != 0 {
				fmt.Fprintf(&p, "-%v", o.Until)
			}
		}
		if b.Name != "" {
			fmt.Fprintf(&p, ":name=%s", b.Name)
		}
		parts[i] = p.String()
	}
	return strings.Join(parts, ",")
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
type table struct {
	header []string
	right  []bool
	rows   [][]string
}

// table lays out a scenario's results: one row per variant and algorithm.
func (sr *ScenarioReport) table() *table {
	sc := &sr.Scenario
	variants := len(sc.RunVariants()) > 1 || sc.RunVariants()[0] != None
	_, failure := sc.FirstOutage()
	retries := false
	for _, r := range sr.Results {
		retries = retries || r.Retries > 0
	}
	t := &table{}
	col := func(name string, right bool) {
		t.header = append(t.header, name)
		t.right = append(t.right, right)
	}
	if variants {
		col("variant", false)
	}
	col("algorithm", false)
	col("RPS", true)
	col("mean ms", true)
	col("p50 ms", true)
	col("p95 ms", true)
	col("p99 ms", true)
	col("errors", true)
	if retries {
		col("retries", true)
	}
	if failure {
		col("RPS before", true)
		col("RPS after", true)
		col("change", true)
	}
	col("share %", true)
	col("in flight", true)
	col("peak", true)

	for _, r := range sr.Results {
		var row []string
		if variants {
			row = append(row, r.Variant.String())
		}
		row = append(row, r.Algorithm,
			strconv.FormatFloat(r.RPS, 'f', 1, 64),
			ms(r.Mean), ms(r.Median), ms(r.P95), ms(r.P99),
			strconv.FormatInt(r.Errors, 10))
		if retries {
			row = append(row, strconv.FormatInt(r.Retries, 10))
		}
		if failure {
			if f := r.Failure; f != nil {
				row = append(row, strconv.FormatFloat(f.Before, 'f', 1, 64),
					strconv.FormatFloat(f.After, 'f', 1, 64),
					fmt.Sprintf("%+.1f%%", 100*f.Change()))
			} else {
				row = append(row, "", "", "")
			}
		}
		share := make([]string, len(r.Backends))
		mean := make([]string, len(r.Backends))
		peak := make([]string, len(r.Backends))
		for i, b := range r.Backends {
			share[i] = strconv.FormatFloat(100*b.Share, 'f', 0, 64)
			mean[i] = strconv.FormatFloat(b.MeanInFlight, 'f', 1, 64)
			peak[i] = strconv.Itoa(b.PeakInFlight)
		}
		row = append(row, strings.Join(share, "/"), strings.Join(mean, "/"), strings.Join(peak, "/"))
		t.rows = append(t.rows, row)
	}
	return t
}

// ms formats d in milliseconds with one decimal.
func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 1, 64)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// text writes t with columns two spaces apart.
func (t *table) text(w *bufio.Writer) {
	width := make([]int, len(t.header))
	for _, row := range append([][]string{t.header}, t.rows...) {
		for i, c := range row {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	line := func(row []string) {
		var b strings.Builder
		for i, c := range row {
			if i > 0 {
				b.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if t.right[i] {
				b.WriteString(pad + c)
			} else {
				b.WriteString(c + pad)
			}
		}
		w.WriteString(strings.TrimRight(b.String(), " ") + "\n")
	}
	line(t.header)
	for _, row := range t.rows {
		line(row)
	}
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
