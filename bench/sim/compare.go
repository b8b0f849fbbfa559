package sim

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
)

// Comparison sets two reports of the same scenarios side by side: a
// simulation's (Sim) and a live run's (Live, from package bench/live).
// Each table holds, per variant and algorithm of Live, the RPS, the mean
// latency and the errors of both, with the ratios live/sim. Results are
// matched by scenario name, number of proxies, variant and algorithm; a
// result missing from Sim leaves its cells empty.
type Comparison struct {
	Sim, Live *Report
}

// WriteText writes one aligned table per scenario and number of proxies
// of Live.
func (c Comparison) WriteText(w io.Writer) error {
	return c.Live.sections(w, func(bw *bufio.Writer, sr *ScenarioReport) {
		fmt.Fprintf(bw, "%s, %s: simulated vs live (ratio = live/sim)\n", sr.Scenario.Name, plural(sr.Proxies, "proxy", "proxies"))
		c.table(sr).text(bw)
	}, nil)
}

// WriteMarkdown writes the tables as GitHub Markdown.
func (c Comparison) WriteMarkdown(w io.Writer) error {
	return c.Live.sections(w, func(bw *bufio.Writer, sr *ScenarioReport) {
		fmt.Fprintf(bw, "### %s, %s: simulated vs live\n\nratio = live/sim.\n\n", sr.Scenario.Name, plural(sr.Proxies, "proxy", "proxies"))
		c.table(sr).markdown(bw)
	}, nil)
}

// WriteHTML writes Live's page (see Report.WriteHTML) with, under each
// section's table, the side-by-side table of that section.
func (c Comparison) WriteHTML(w io.Writer) error {
	return c.Live.writeHTML(w, func(bw *bufio.Writer, sr *ScenarioReport) {
		bw.WriteString("<h3>Simulated vs live</h3>\n<p>ratio = live/sim.</p>\n")
		c.table(sr).html(bw)
	})
}

// find returns the result of Sim for the scenario, proxies, variant and
// algorithm of r, or nil.
func (c Comparison) find(sr *ScenarioReport, r *Result) *Result {
	for i := range c.Sim.Scenarios {
		s := &c.Sim.Scenarios[i]
		if s.Scenario.Name != sr.Scenario.Name || s.Proxies != sr.Proxies {
			continue
		}
		for j := range s.Results {
			if s.Results[j].Variant == r.Variant && s.Results[j].Algorithm == r.Algorithm {
				return &s.Results[j]
			}
		}
	}
	return nil
}

// table lays out one scenario report of Live against Sim.
func (c Comparison) table(sr *ScenarioReport) *table {
	variants := len(sr.Scenario.RunVariants()) > 1 || sr.Scenario.RunVariants()[0] != None
	t := &table{}
	if variants {
		t.header, t.right = append(t.header, "variant"), append(t.right, false)
	}
	t.header = append(t.header, "algorithm", "RPS sim", "RPS live", "ratio", "mean ms sim", "mean ms live", "ratio", "errors sim", "errors live")
	t.right = append(t.right, false, true, true, true, true, true, true, true, true)
	// No per-backend columns: a table too wide is printed whole, not
	// split (the variants' names make it so: active+passive+retry+timeout).
	t.keys, t.spread = len(t.header)-8, len(t.header)
	for i := range sr.Results {
		live := &sr.Results[i]
		var row []string
		if variants {
			row = append(row, live.Variant.String())
		}
		row = append(row, live.Algorithm)
		rps := strconv.FormatFloat(live.RPS, 'f', 1, 64)
		mean := ms(live.Mean)
		errs := strconv.FormatInt(live.Errors, 10)
		if s := c.find(sr, live); s != nil {
			row = append(row, strconv.FormatFloat(s.RPS, 'f', 1, 64), rps, ratio(live.RPS, s.RPS),
				ms(s.Mean), mean, ratio(float64(live.Mean), float64(s.Mean)),
				strconv.FormatInt(s.Errors, 10), errs)
		} else {
			row = append(row, "", rps, "", "", mean, "", "", errs)
		}
		t.rows = append(t.rows, row)
	}
	return t
}

// ratio formats live/sim with two decimals, or nothing when sim is zero.
func ratio(live, sim float64) string {
	if sim == 0 {
		return ""
	}
	return strconv.FormatFloat(live/sim, 'f', 2, 64)
}
