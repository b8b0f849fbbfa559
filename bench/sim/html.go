package sim

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// palette colours backends in charts, in order; past its end colours
// repeat.
func palette(i int) string {
	colours := [...]string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#d62728"}
	return colours[i%len(colours)]
}

const (
	errorColour     = "#d62728"
	neighbourColour = "#b7791f"
	stallColour     = "#6b46a3"
	leaderColour    = "#2b6cb0"
	barColour       = "#a7c4e2"
)

// WriteHTML writes the report as one self-contained page (inline CSS and
// SVG, no script, no external asset) that reads from the top: the
// summary and every scenario's verdict first; then per scenario and
// number of proxies its verdict, a chart setting every algorithm side by
// side (throughput, p99 and errors, each on a scale shared by all rows),
// the table, and charts over time per variant and algorithm: requests in
// flight at each backend, attempts per second sent to each, and failed
// user requests per second on an axis of their own, every chart of a
// kind on the same scale within the scenario. Charts have ticks and
// units, the outage shaded, and values on hover (SVG titles); the
// over-time charts say how they are binned.
func (r *Report) WriteHTML(w io.Writer) error {
	return r.writeHTML(w, nil)
}

// writeHTML writes the page; after is called, if not nil, in each
// section right after its table.
func (r *Report) writeHTML(w io.Writer, after func(*bufio.Writer, *ScenarioReport)) error {
	bw := bufio.NewWriter(w)
	esc := html.EscapeString
	bw.WriteString(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>lbsim report</title>
<style>
body{font:15px/1.45 system-ui,sans-serif;margin:1em auto;padding:0 1em;color:#222;max-width:1400px}
h1{font-size:1.5em;margin:.3em 0}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #ccc}h3{font-size:1.05em;margin:1.2em 0 .4em}
table{border-collapse:collapse;font-variant-numeric:tabular-nums;font-size:13px}
th,td{padding:.2em .6em;border-bottom:1px solid #eee;white-space:nowrap;vertical-align:top}th{text-align:left;background:#f6f6f6}
td.n,th.n{text-align:right}td.wrap{white-space:normal;min-width:16em}code{background:#f4f4f4;padding:0 .3em;word-break:break-all}
.wide{overflow-x:auto;max-width:100%}.grid{display:flex;flex-wrap:wrap;gap:.8em;align-items:flex-start}
figure{margin:0;border:1px solid #ddd;padding:.4em;border-radius:4px;width:440px;max-width:100%;box-sizing:border-box}
figure.bars{width:auto;flex:1 1 300px;max-width:480px}
figcaption{font-weight:600;margin-bottom:.2em}
svg{display:block;width:100%;height:auto}svg text{font:11px sans-serif;fill:#444}svg text.t{font-weight:600;fill:#222}
.pick{font-size:1.15em;background:#eef5ff;border-left:4px solid ` + leaderColour + `;padding:.5em .8em;margin:.6em 0}
ul.verdict{margin:.4em 0;padding-left:1.2em}ul.verdict li{margin:.15em 0}
.legend span{display:inline-block;margin-right:1.2em;white-space:nowrap}
.legend i{display:inline-block;width:1.4em;height:.35em;margin-right:.3em;vertical-align:middle}
.note{color:#555;font-size:13px}nav{margin:1em 0}nav a{margin-right:1em;white-space:nowrap;display:inline-block}
details>summary{cursor:pointer;font-weight:600;margin:.6em 0}
@media (max-width:640px){table.glance thead{display:none}table.glance tr{display:block;border-bottom:1px solid #ddd;padding:.3em 0}
table.glance td{display:block;border:0;white-space:normal;padding:.1em .3em}table.glance td[data-h]:before{content:attr(data-h) ": ";color:#666}}
</style></head><body>
`)
	fmt.Fprintf(bw, "<h1>lbsim report</h1>\n<p class=\"note\">Source: %s; seed %d.</p>\n", esc(r.Source), r.Seed)
	for _, s := range r.Summaries() {
		writeSummaryHTML(bw, &s)
	}
	r.writeGlance(bw)
	bw.WriteString("<nav>")
	for i := range r.Scenarios {
		sr := &r.Scenarios[i]
		fmt.Fprintf(bw, `<a href="#s%d">%s, %s</a> `, i, esc(sr.Scenario.Name), plural(sr.Proxies, "proxy", "proxies"))
	}
	bw.WriteString("</nav>\n")
	for i := range r.Scenarios {
		r.Scenarios[i].writeSection(bw, i, after)
	}
	bw.WriteString("</body></html>\n")
	return bw.Flush()
}

// writeSummaryHTML writes a summary: the pick in a box, the rest as a
// list.
func writeSummaryHTML(w *bufio.Writer, s *Summary) {
	lines := s.Lines()
	if len(lines) < 2 {
		return
	}
	esc := html.EscapeString
	fmt.Fprintf(w, "<h2>Which algorithm, %s</h2>\n<p class=\"note\">%s</p>\n<p class=\"pick\">%s</p>\n", plural(s.Proxies, "proxy", "proxies"),
		esc(strings.TrimSuffix(strings.TrimPrefix(lines[0], "summary, "), ":")), esc(strings.TrimSpace(lines[1])))
	if len(lines) > 2 {
		w.WriteString("<ul class=\"verdict\">")
		for _, l := range lines[2:] {
			if l = strings.TrimSpace(l); !strings.HasPrefix(l, "rule: ") { // the note below says it
				fmt.Fprintf(w, "<li>%s</li>", esc(l))
			}
		}
		w.WriteString("</ul>\n")
	}
	fmt.Fprintf(w, "<p class=\"note\">%s; figures within 1%% tie.</p>\n", esc(strings.TrimPrefix(RuleText, "rule: ")))
}

// writeGlance writes one row per scenario report: who leads by each
// ranked metric, and the trade-off.
func (r *Report) writeGlance(w *bufio.Writer) {
	if len(r.Scenarios) == 0 {
		return
	}
	esc := html.EscapeString
	w.WriteString("<h3>Every scenario at a glance</h3>\n<div class=\"wide\"><table class=\"glance\"><thead><tr><th>scenario</th>")
	var heads []string
	for _, m := range Metrics() {
		if m.Leader != "" {
			heads = append(heads, m.Leader)
			fmt.Fprintf(w, "<th>%s</th>", esc(m.Leader))
		}
	}
	w.WriteString("<th>trade-off</th></tr></thead><tbody>\n")
	for i := range r.Scenarios {
		sr := &r.Scenarios[i]
		v := sr.Verdict()
		name := sr.Scenario.Name + ", " + plural(sr.Proxies, "proxy", "proxies")
		if len(sr.Scenario.RunVariants()) > 1 {
			name += " (" + v.Variant.String() + ")"
		}
		fmt.Fprintf(w, `<tr><td><a href="#s%d">%s</a></td>`, i, esc(name))
		for _, h := range heads {
			cell := ""
			for _, l := range v.Leads {
				if l.Metric.Leader == h && len(l.Algorithms) > 0 {
					cell = names(l.Algorithms, sr.algorithms()) + ", " + valueText(&l.Metric, l.Value)
				}
			}
			fmt.Fprintf(w, `<td data-h="%s">%s</td>`, esc(h), esc(cell))
		}
		fmt.Fprintf(w, "<td class=\"wrap\" data-h=\"trade-off\">%s</td></tr>\n", esc(v.TradeOff))
	}
	w.WriteString("</tbody></table></div>\n")
}

// writeSection writes one scenario report.
func (sr *ScenarioReport) writeSection(w *bufio.Writer, i int, after func(*bufio.Writer, *ScenarioReport)) {
	esc := html.EscapeString
	sc := &sr.Scenario
	fmt.Fprintf(w, "<section id=\"s%d\">\n<h2>%s, %s</h2>\n<p>%s; backends <code>%s</code>.</p>\n",
		i, esc(sc.Name), plural(sr.Proxies, "proxy", "proxies"), esc(sc.Describe()), esc(sc.DescribeBackends()))
	v := sr.Verdict()
	w.WriteString("<ul class=\"verdict\">")
	for _, l := range v.Lines(sr.algorithms()) {
		fmt.Fprintf(w, "<li>%s</li>", esc(l))
	}
	w.WriteString("</ul>\n")
	sr.writeBars(w, v)
	fmt.Fprintf(w, "<p class=\"note\">%s.</p>\n", esc(strings.Join(sr.legend(), "; ")))
	sr.table().html(w)
	if after != nil {
		after(w, sr)
	}
	sr.writeOverTime(w, v)
	w.WriteString("</section>\n")
}

// html writes t as an HTML table.
func (t *table) html(w *bufio.Writer) {
	cell := func(tag, c string, right bool) {
		if right {
			fmt.Fprintf(w, `<%s class="n">%s</%s>`, tag, html.EscapeString(c), tag)
		} else {
			fmt.Fprintf(w, `<%s>%s</%s>`, tag, html.EscapeString(c), tag)
		}
	}
	w.WriteString("<div class=\"wide\"><table><thead><tr>")
	for i, h := range t.header {
		cell("th", h, t.right[i])
	}
	w.WriteString("</tr></thead><tbody>\n")
	for _, row := range t.rows {
		w.WriteString("<tr>")
		for i, c := range row {
			cell("td", c, t.right[i])
		}
		w.WriteString("</tr>\n")
	}
	w.WriteString("</tbody></table></div>\n")
}

// Bar chart geometry, in SVG user units.
const (
	barW      = 460.0
	barLabelW = 150.0
	barRowH   = 17.0
	barTop    = 34.0
	barRight  = 58.0 // room for the value after the longest bar
)

// writeBars writes the side-by-side chart: for each metric the verdict
// ranks by, one horizontal bar per variant and algorithm, on a scale
// shared by every row, the leaders' bars darker.
func (sr *ScenarioReport) writeBars(w *bufio.Writer, v Verdict) {
	ranked := sr.ranked()
	if len(ranked) == 0 || len(sr.Results) == 0 {
		return
	}
	variants := len(sr.Scenario.RunVariants()) > 1
	w.WriteString("<h3>Side by side</h3>\n<div class=\"grid\">\n")
	for _, m := range ranked {
		var lead Lead
		for _, l := range v.Leads {
			if l.Metric.Name == m.Name {
				lead = l
			}
		}
		top := 0.0
		for i := range sr.Results {
			if x, ok := m.Value(&sr.Results[i]); ok {
				top = max(top, x)
			}
		}
		scale := niceCeil(top)
		h := barTop + barRowH*float64(len(sr.Results)) + 6
		if variants {
			h += barRowH * float64(len(sr.Scenario.RunVariants()))
		}
		title := barTitle(&m)
		fmt.Fprintf(w, "<figure class=\"bars\"><figcaption>%s</figcaption>\n", html.EscapeString(title))
		fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %g %g" role="img" aria-label="%s">`, barW, h, html.EscapeString(title))
		plotW := barW - barLabelW - barRight
		x := func(val float64) float64 { return barLabelW + plotW*val/scale }
		for _, t := range ticks(scale, 6) {
			fmt.Fprintf(w, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#e4e4e4"/>`, x(t), barTop-4, x(t), h-4)
			fmt.Fprintf(w, `<text x="%.1f" y="%g" text-anchor="middle">%s</text>`, x(t), barTop-8, tickText(t))
		}
		fmt.Fprintf(w, `<text x="%g" y="12" class="t">%s</text>`, barLabelW, html.EscapeString(unitText(&m)))
		y := barTop
		var current Variant = 255
		for i := range sr.Results {
			r := &sr.Results[i]
			if variants && r.Variant != current {
				current = r.Variant
				fmt.Fprintf(w, `<text x="4" y="%.1f" class="t">%s</text>`, y+12, html.EscapeString(r.Variant.String()))
				y += barRowH
			}
			val, ok := m.Value(r)
			leader := r.Variant == v.Variant && slices.Contains(lead.Algorithms, r.Algorithm)
			colour := barColour
			if leader {
				colour = leaderColour
			}
			label := r.Algorithm
			if leader {
				label += " ★"
			}
			text := "–"
			if ok {
				text = m.Format(val)
			}
			fmt.Fprintf(w, `<g><title>%s: %s</title><text x="%g" y="%.1f" text-anchor="end">%s</text>`,
				html.EscapeString(rowName(r, variants)), html.EscapeString(valueText(&m, val)), barLabelW-6, y+12, html.EscapeString(label))
			if ok && val > 0 {
				fmt.Fprintf(w, `<rect x="%g" y="%.1f" width="%.1f" height="%g" fill="%s"/>`, barLabelW, y+3, max(x(val)-barLabelW, 0.5), barRowH-5, colour)
			}
			fmt.Fprintf(w, `<text x="%.1f" y="%.1f">%s</text></g>`, x(max(val, 0))+4, y+12, html.EscapeString(text))
			y += barRowH
		}
		w.WriteString("</svg></figure>\n")
	}
	w.WriteString("</div>\n")
	if variants {
		fmt.Fprintf(w, "<p class=\"note\">★ leads under %s, the variant the verdict judges; bars of every variant share each scale.</p>\n", html.EscapeString(v.Variant.String()))
	} else {
		w.WriteString("<p class=\"note\">★ leads (within 1%); all rows share each scale.</p>\n")
	}
}

// rowName names a result: "lrt", or "active+passive / lrt".
func rowName(r *Result, variants bool) string {
	if variants {
		return r.Variant.String() + " / " + r.Algorithm
	}
	return r.Algorithm
}

// barTitle captions a bar chart by its metric: "Throughput: most is best".
func barTitle(m *Metric) string {
	label := m.Label
	if m.Name == "rps" {
		label = "Throughput"
	}
	switch m.Better {
	case Higher:
		return label + " (more is better)"
	case Lower:
		return label + " (less is better)"
	}
	return label
}

// unitText names the axis of m: "successful requests/s".
func unitText(m *Metric) string {
	switch m.Name {
	case "rps":
		return "successful user requests per second"
	case "p99_ms":
		return "99th percentile latency, ms"
	case "errors":
		return "failed user requests over the run"
	}
	return m.Unit
}

// Over-time chart geometry, in SVG user units.
const (
	chartW       = 430.0
	padL, padR   = 46.0, 10.0
	padT, padB   = 22.0, 30.0
	inFlightH    = 170.0
	attemptsH    = 170.0
	errorsH      = 90.0
	hoverColumns = 30 // hover areas per chart: each spans several steps
)

// scales are the y scales shared by every over-time chart of a kind
// within a scenario report.
type scales struct{ inFlight, attempts, errors, users float64 }

func (sr *ScenarioReport) scales() scales {
	var s scales
	groups := sr.Scenario.chartGroups()
	for i := range sr.Results {
		se := &sr.Results[i].Series
		in, peaks, attempts := groupSeries(groups, se)
		for g := range in {
			for k, v := range in[g] {
				s.inFlight = max(s.inFlight, v)
				if peaks != nil {
					s.inFlight = max(s.inFlight, peaks[g][k])
				}
			}
		}
		for _, l := range attempts {
			for _, v := range l {
				s.attempts = max(s.attempts, v)
			}
		}
		for _, v := range se.Errors {
			s.errors = max(s.errors, v)
		}
		for _, u := range se.Users {
			s.users = max(s.users, float64(u))
		}
	}
	return scales{niceCeil(s.inFlight), niceCeil(s.attempts), niceCeil(s.errors), niceCeil(s.users)}
}

// writeOverTime writes the charts over time: the users once, then per
// variant (each in a <details>, the judged one open) a figure per
// algorithm.
func (sr *ScenarioReport) writeOverTime(w *bufio.Writer, v Verdict) {
	if len(sr.Results) == 0 || sr.Results[0].Series.Step <= 0 {
		return
	}
	esc := html.EscapeString
	sc := &sr.Scenario
	s := sr.scales()
	anyErrors := s.errors > 1 || func() bool {
		for i := range sr.Results {
			for _, e := range sr.Results[i].Series.Errors {
				if e > 0 {
					return true
				}
			}
		}
		return false
	}()
	step := sr.Results[0].Series.Step
	groups := sc.chartGroups()
	colours, labels := make([]string, len(groups)), make([]string, len(groups))
	for g := range groups {
		colours[g], labels[g] = palette(g), groups[g].name
	}
	w.WriteString("<h3>Over time</h3>\n<p class=\"legend\">")
	for g := range groups {
		fmt.Fprintf(w, `<span><i style="background:%s"></i>%s</span>`, colours[g], esc(labels[g]))
	}
	if _, ok := sc.FirstOutage(); ok {
		w.WriteString(`<span><i style="background:#f6caca;height:.8em"></i>outage</span>`)
	}
	w.WriteString("</p>\n")
	fmt.Fprintf(w, "<p class=\"note\">Each point is one %v bin (%d bins over %v): in flight is the time-weighted mean of requests at the backend, queued ones included, and the faint line the bin's peak (the table's peak is the highest over the run); attempts/s counts attempts sent to the backend in the bin. Every chart of a kind in this section has the same scale; hover for the values.</p>\n",
		step, len(sr.Results[0].Series.Users), sc.Length())
	if len(groups) < len(sc.Backends) {
		fmt.Fprintf(w, "<p class=\"note\">With %d backends, each line is a group of them: the mean per backend of the group, the faint line the peak of any one.</p>\n", len(sc.Backends))
	}
	w.WriteString("<div class=\"grid\">\n<figure><figcaption>Users</figcaption>\n")
	users := make([]float64, len(sr.Results[0].Series.Users))
	for k, u := range sr.Results[0].Series.Users {
		users[k] = float64(u)
	}
	lineChart(w, sc, step, chartSpec{title: "active users", height: 110, top: s.users, lines: [][]float64{users}, colours: []string{"#555"}, names: []string{"users"}})
	w.WriteString("</figure>\n</div>\n")
	variants := sc.RunVariants()
	for _, variant := range variants {
		if len(variants) > 1 {
			open := ""
			if variant == v.Variant {
				open = " open"
			}
			fmt.Fprintf(w, "<details%s><summary>%s</summary>\n", open, esc(variant.String()))
		}
		w.WriteString("<div class=\"grid\">\n")
		for i := range sr.Results {
			res := &sr.Results[i]
			if res.Variant != variant {
				continue
			}
			se := &res.Series
			fmt.Fprintf(w, "<figure><figcaption>%s</figcaption>\n", esc(res.Algorithm))
			in, peaks, attempts := groupSeries(groups, se)
			lineChart(w, sc, step, chartSpec{title: "requests in flight", height: inFlightH, top: s.inFlight, lines: in, faint: peaks, colours: colours, names: labels})
			lineChart(w, sc, step, chartSpec{title: "attempts/s sent", height: attemptsH, top: s.attempts, lines: attempts, colours: colours, names: labels})
			if anyErrors {
				lineChart(w, sc, step, chartSpec{title: "failed user requests/s", height: errorsH, top: s.errors, lines: [][]float64{se.Errors}, colours: []string{errorColour}, names: []string{"errors/s"}})
			}
			w.WriteString("</figure>\n")
		}
		w.WriteString("</div>\n")
		if len(variants) > 1 {
			w.WriteString("</details>\n")
		}
	}
}

// chartSpec is one line chart over a scenario's length.
type chartSpec struct {
	title   string
	height  float64
	top     float64     // the y scale's top
	lines   [][]float64 // one per series, a value per step
	faint   [][]float64 // drawn lighter under the lines (peaks); nil for none
	colours []string
	names   []string
}

// lineChart writes one chart: y ticks and grid, x ticks in time, the
// outages shaded and labelled, the lines, and hover areas with the
// values.
func lineChart(w *bufio.Writer, sc *Scenario, step time.Duration, c chartSpec) {
	esc := html.EscapeString
	length := sc.Length().Seconds()
	plotW, plotH := chartW-padL-padR, c.height-padT-padB
	x := func(t float64) float64 { return padL + plotW*t/length }
	y := func(v float64) float64 { return padT + plotH*(1-v/c.top) }
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %g %g" role="img" aria-label="%s">`, chartW, c.height, esc(c.title))
	fmt.Fprintf(w, `<text x="%g" y="14" class="t">%s</text>`, padL, esc(c.title))
	// span shades [at, until) (until zero: to the end), with a title, a
	// line where it starts and a label.
	span := func(at, until time.Duration, fill, stroke, title, label string) {
		end := length
		if until != 0 {
			end = min(until.Seconds(), length)
		}
		from := at.Seconds()
		fmt.Fprintf(w, `<rect x="%.1f" y="%g" width="%.1f" height="%g" fill="%s"><title>%s</title></rect>`,
			x(from), padT, max(x(end)-x(from), 1), plotH, fill, esc(title))
		fmt.Fprintf(w, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="%s" stroke-dasharray="3 2"/>`, x(from), padT, x(from), padT+plotH, stroke)
		fmt.Fprintf(w, `<text x="%.1f" y="%g" fill="%s">%s</text>`, x(from)+3, padT+11, stroke, esc(label))
	}
	for _, k := range []struct {
		spans        func(*Backend) []Outage
		fill, stroke string
		what, label  string
	}{
		{func(b *Backend) []Outage { return b.Down }, "#fbe3e3", errorColour, "down", "down"},
		{func(b *Backend) []Outage { return b.Stalls }, "#ece4f6", stallColour, "stalled", "stalled"},
		{func(b *Backend) []Outage { return b.Unavailable }, "#fbe3e3", errorColour, "answering 503", "503"},
	} {
		for _, d := range sc.downs(k.spans) {
			o := d.outage
			span(o.At, o.Until, k.fill, k.stroke, fmt.Sprintf("%s %s from %v%s", d.who, k.what, o.At, untilText(o)), d.who+" "+k.label)
		}
	}
	for i, b := range sc.Backends {
		for _, n := range b.Neighbours {
			span(n.At, n.Until, "#fdf1d8", neighbourColour, fmt.Sprintf("a neighbour takes %d of %s's %d slots from %v%s",
				n.Takes, sc.Label(i), b.Capacity, n.At, untilText(Outage{n.At, n.Until})), sc.Label(i)+" neighbour")
		}
	}
	for _, t := range ticks(c.top, max(2, int(plotH/22))) {
		fmt.Fprintf(w, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#e8e8e8"/>`, padL, y(t), padL+plotW, y(t))
		fmt.Fprintf(w, `<text x="%g" y="%.1f" text-anchor="end">%s</text>`, padL-4, y(t)+4, tickText(t))
	}
	for _, t := range timeTicks(sc.Length()) {
		fmt.Fprintf(w, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#999"/>`, x(t.Seconds()), padT+plotH, x(t.Seconds()), padT+plotH+4)
		fmt.Fprintf(w, `<text x="%.1f" y="%g" text-anchor="middle">%s</text>`, x(t.Seconds()), padT+plotH+16, shortDuration(t))
	}
	fmt.Fprintf(w, `<text x="%g" y="%g" text-anchor="end">time</text>`, padL+plotW, c.height-2)
	fmt.Fprintf(w, `<path d="M%g %gV%gH%g" fill="none" stroke="#999"/>`, padL, padT, padT+plotH, padL+plotW)
	stepS := step.Seconds()
	poly := func(vals []float64, colour string, faint bool) {
		var b strings.Builder
		for k, v := range vals {
			// Each bin is drawn at its middle.
			fmt.Fprintf(&b, "%.0f,%.0f ", x(min((float64(k)+0.5)*stepS, length)), y(min(v, c.top)))
		}
		style := `stroke-width="1.4"`
		if faint {
			style = `stroke-width="1" stroke-opacity=".35"`
		}
		fmt.Fprintf(w, `<polyline points="%s" fill="none" stroke="%s" %s/>`, strings.TrimSpace(b.String()), colour, style)
	}
	for i, l := range c.faint {
		poly(l, c.colours[i%len(c.colours)], true)
	}
	for i, l := range c.lines {
		poly(l, c.colours[i%len(c.colours)], false)
	}
	// Hover areas: each spans a few bins and lists every series' value,
	// mean over its bins (and the faint series' maximum).
	steps := 0
	for _, l := range c.lines {
		steps = max(steps, len(l))
	}
	per := max(1, int(math.Ceil(float64(steps)/hoverColumns)))
	for k0 := 0; k0 < steps; k0 += per {
		k1 := min(k0+per, steps)
		from, to := time.Duration(k0)*step, min(time.Duration(k1)*step, sc.Length())
		var title strings.Builder
		fmt.Fprintf(&title, "%s–%s", shortDuration(from), shortDuration(to))
		for i, l := range c.lines {
			var sum float64
			n := 0
			for k := k0; k < min(k1, len(l)); k++ {
				sum, n = sum+l[k], n+1
			}
			if n == 0 {
				continue
			}
			fmt.Fprintf(&title, "\n%s: %s", c.names[i], strconv.FormatFloat(sum/float64(n), 'f', 1, 64))
			if i < len(c.faint) {
				peak := 0.0
				for k := k0; k < min(k1, len(c.faint[i])); k++ {
					peak = max(peak, c.faint[i][k])
				}
				fmt.Fprintf(&title, " (peak %s)", strconv.FormatFloat(peak, 'f', 0, 64))
			}
		}
		fmt.Fprintf(w, `<rect x="%.1f" y="%g" width="%.1f" height="%g" fill="transparent"><title>%s</title></rect>`,
			x(from.Seconds()), padT, max(x(to.Seconds())-x(from.Seconds()), 0.5), plotH, esc(title.String()))
	}
	w.WriteString("</svg>\n")
}

// chartGroup is a line of the over-time charts: one backend, or, with
// more than maxListed, a group of them.
type chartGroup struct {
	name    string
	members []int
}

// chartGroups returns the lines of the over-time charts: a backend each
// up to maxListed backends; beyond, one per zone ("zone a, 14 backends"),
// or a single one for every backend without zones.
func (s *Scenario) chartGroups() []chartGroup {
	var out []chartGroup
	if len(s.Backends) <= maxListed {
		for i := range s.Backends {
			out = append(out, chartGroup{name: s.Label(i), members: []int{i}})
		}
		return out
	}
	byZone := map[string]int{}
	for i, b := range s.Backends {
		g, ok := byZone[b.Zone]
		if !ok {
			g = len(out)
			byZone[b.Zone] = g
			out = append(out, chartGroup{})
		}
		out[g].members = append(out[g].members, i)
	}
	for g := range out {
		z := s.Backends[out[g].members[0]].Zone
		switch n := plural(len(out[g].members), "backend", "backends"); {
		case len(out) == 1:
			out[g].name = "all " + n
		case z == "":
			out[g].name = "no zone, " + n
		default:
			out[g].name = "zone " + z + ", " + n
		}
	}
	return out
}

// groupSeries returns se's in-flight means, peaks (nil if se has none)
// and attempts per second by group: the mean per backend of its members,
// and the highest peak of any.
func groupSeries(groups []chartGroup, se *Series) (in, peaks, attempts [][]float64) {
	mean := func(lines [][]float64, members []int) []float64 {
		var out []float64
		for _, b := range members {
			if b >= len(lines) {
				continue
			}
			if out == nil {
				out = make([]float64, len(lines[b]))
			}
			for k, v := range lines[b] {
				if k < len(out) {
					out[k] += v / float64(len(members))
				}
			}
		}
		return out
	}
	for _, g := range groups {
		in = append(in, mean(se.InFlight, g.members))
		attempts = append(attempts, mean(se.RPS, g.members))
		if se.PeakInFlight == nil {
			continue
		}
		var top []float64
		for _, b := range g.members {
			if b >= len(se.PeakInFlight) {
				continue
			}
			if top == nil {
				top = make([]float64, len(se.PeakInFlight[b]))
			}
			for k, n := range se.PeakInFlight[b] {
				if k < len(top) {
					top[k] = max(top[k], float64(n))
				}
			}
		}
		peaks = append(peaks, top)
	}
	return in, peaks, attempts
}

// down is an outage of one or more backends, as the charts mark it.
type down struct {
	outage Outage
	who    string // "50ms", or "7 backends"
}

// downs returns the backends' spans that spans picks (their outages,
// stalls or 503s), those of several backends at the same times as one.
func (s *Scenario) downs(spans func(*Backend) []Outage) []down {
	var out []down
	count := map[Outage]int{}
	first := map[Outage]int{}
	for i := range s.Backends {
		for _, o := range spans(&s.Backends[i]) {
			if count[o] == 0 {
				first[o] = len(out)
				out = append(out, down{outage: o, who: s.Label(i)})
			}
			count[o]++
		}
	}
	for o, n := range count {
		if n > 1 {
			out[first[o]].who = plural(n, "backend", "backends")
		}
	}
	return out
}

// untilText says when an outage ends: " to 1m30s", or ", for good" for
// never.
func untilText(o Outage) string {
	if o.Until == 0 {
		return ", for good"
	}
	return " to " + o.Until.String()
}

// niceCeil rounds v up to a round number (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8
// times a power of ten); at least 1.
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if v <= m*p*(1+1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// ticks returns round values from 0 to top (top included when it falls
// on a tick), at most n+1 of them.
func ticks(top float64, n int) []float64 {
	if !(top > 0) {
		return []float64{0}
	}
	p := math.Pow(10, math.Floor(math.Log10(top)))
	step := 10 * p
	for _, m := range []float64{0.1, 0.2, 0.25, 0.5, 1, 2, 2.5, 5, 10} {
		if top/(m*p) <= float64(n) {
			step = m * p
			break
		}
	}
	var out []float64
	for i := 0; float64(i)*step <= top*(1+1e-9); i++ {
		out = append(out, float64(i)*step)
	}
	return out
}

// tickText prints a tick value without needless decimals: "250", "1.5k".
func tickText(v float64) string {
	if v >= 10_000 {
		return strconv.FormatFloat(v/1000, 'g', 4, 64) + "k"
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}

// timeTicks returns round times from 0 to length: about five to eight.
func timeTicks(length time.Duration) []time.Duration {
	steps := []time.Duration{time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond,
		250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second,
		30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour,
		2 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 7 * 24 * time.Hour, 30 * 24 * time.Hour}
	step := steps[len(steps)-1]
	for _, s := range steps {
		if length/s <= 7 {
			step = s
			break
		}
	}
	var out []time.Duration
	for t := time.Duration(0); t <= length; t += step {
		out = append(out, t)
	}
	return out
}

// shortDuration prints d without zero units: "1m30s", "2m", "500ms".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
