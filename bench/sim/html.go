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
)

// palette colours backends in charts, in order; past its end colours
// repeat.
func palette(i int) string {
	colours := [...]string{"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#d62728"}
	return colours[i%len(colours)]
}

const errorColour = "#d62728"

// WriteHTML writes the report as one self-contained page: per scenario and
// number of proxies, the table and, per variant and algorithm, two charts
// over time: requests in flight at each backend, and requests per second
// sent to each backend with failed user requests per second. It uses
// inline CSS and SVG only: no script, no external asset.
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
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;max-width:1500px}
h1{font-size:1.5em}h2{font-size:1.25em;margin-top:2em;border-bottom:1px solid #ccc}h3{font-size:1.05em}
table{border-collapse:collapse;font-variant-numeric:tabular-nums;font-size:13px}
th,td{padding:.2em .6em;border-bottom:1px solid #eee;white-space:nowrap}th{text-align:left;background:#f6f6f6}
td.n,th.n{text-align:right}code{background:#f4f4f4;padding:0 .3em}
.wide{overflow-x:auto}.grid{display:flex;flex-wrap:wrap;gap:1em}
figure{margin:0;border:1px solid #ddd;padding:.4em;border-radius:4px}
figcaption{font-weight:600;margin-bottom:.2em}
svg text{font:10px sans-serif;fill:#555}
.legend span{display:inline-block;margin-right:1.2em}
.legend i{display:inline-block;width:1.2em;height:.3em;margin-right:.3em;vertical-align:middle}
nav a{margin-right:1em}
</style></head><body>
`)
	fmt.Fprintf(bw, "<h1>lbsim report</h1>\n<p>Source: %s; seed %d. Each chart spans the whole scenario; the shaded band is the first outage.</p>\n<nav>",
		esc(r.Source), r.Seed)
	for i := range r.Scenarios {
		sr := &r.Scenarios[i]
		fmt.Fprintf(bw, `<a href="#s%d">%s, %s</a>`, i, esc(sr.Scenario.Name), plural(sr.Proxies, "proxy", "proxies"))
	}
	bw.WriteString("</nav>\n")
	for i := range r.Scenarios {
		sr := &r.Scenarios[i]
		sc := &sr.Scenario
		fmt.Fprintf(bw, "<section id=\"s%d\">\n<h2>%s, %s</h2>\n<p>%s; backends <code>%s</code>. Per backend (share of attempts, mean and peak in flight): %s.</p>\n",
			i, esc(sc.Name), plural(sr.Proxies, "proxy", "proxies"), esc(sc.Describe()), esc(sc.DescribeBackends()), esc(sc.Labels()))
		sr.table().html(bw)
		if after != nil {
			after(bw, sr)
		}
		bw.WriteString(`<p class="legend">`)
		for b := range sc.Backends {
			fmt.Fprintf(bw, `<span><i style="background:%s"></i>%s</span>`, palette(b), esc(sc.Label(b)))
		}
		fmt.Fprintf(bw, `<span><i style="background:%s"></i>errors/s (user requests)</span></p>`+"\n", errorColour)
		variants := sc.RunVariants()
		for _, v := range variants {
			if len(variants) > 1 {
				fmt.Fprintf(bw, "<h3>%s</h3>\n", esc(v.String()))
			}
			bw.WriteString("<div class=\"grid\">\n")
			for _, res := range sr.Results {
				if res.Variant != v {
					continue
				}
				fmt.Fprintf(bw, "<figure><figcaption>%s</figcaption>\n", esc(res.Algorithm))
				chart(bw, sc, res.Series, "in flight", res.Series.InFlight, nil)
				chart(bw, sc, res.Series, "requests/s", res.Series.RPS, res.Series.Errors)
				bw.WriteString("</figure>\n")
			}
			bw.WriteString("</div>\n")
		}
		bw.WriteString("</section>\n")
	}
	bw.WriteString("</body></html>\n")
	return bw.Flush()
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

// Chart geometry, in SVG user units.
const (
	chartW, chartH = 300.0, 120.0
	padL, padR     = 34.0, 6.0
	padT, padB     = 14.0, 16.0
)

// chart writes one line chart of lines (one per backend) and, if not nil,
// extra in the error colour, over the scenario's length.
func chart(w *bufio.Writer, sc *Scenario, s Series, title string, lines [][]float64, extra []float64) {
	top := 0.0
	for _, l := range append(lines, extra) {
		for _, v := range l {
			top = max(top, v)
		}
	}
	top = niceCeil(top)
	length := sc.Length().Seconds()
	plotW, plotH := chartW-padL-padR, chartH-padT-padB
	x := func(t float64) float64 { return padL + plotW*t/length }
	y := func(v float64) float64 { return padT + plotH*(1-v/top) }
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" role="img" aria-label="%s">`,
		chartW, chartH, chartW, chartH, html.EscapeString(title))
	if o, ok := sc.FirstOutage(); ok {
		end := length
		if o.Until != 0 {
			end = min(o.Until.Seconds(), length)
		}
		fmt.Fprintf(w, `<rect x="%.1f" y="%g" width="%.1f" height="%g" fill="#fbe3e3"/>`, x(o.At.Seconds()), padT, x(end)-x(o.At.Seconds()), plotH)
	}
	fmt.Fprintf(w, `<path d="M%g %gV%gH%g" fill="none" stroke="#999" stroke-width="1"/>`, padL, padT, padT+plotH, padL+plotW)
	fmt.Fprintf(w, `<text x="%g" y="10">%s</text>`, padL, html.EscapeString(title))
	fmt.Fprintf(w, `<text x="%g" y="%g" text-anchor="end">%s</text>`, padL-3, padT+4, strconv.FormatFloat(top, 'g', 4, 64))
	fmt.Fprintf(w, `<text x="%g" y="%g" text-anchor="end">0</text>`, padL-3, padT+plotH)
	fmt.Fprintf(w, `<text x="%g" y="%g" text-anchor="end">%v</text>`, padL+plotW, chartH-3, sc.Length())
	step := s.Step.Seconds()
	poly := func(vals []float64, colour string, dashed bool) {
		if !slices.ContainsFunc(vals, func(v float64) bool { return v != 0 }) && dashed {
			return // no errors: no line along the axis
		}
		var b strings.Builder
		for k, v := range vals {
			// Each sample is drawn at the middle of its step.
			t := min((float64(k)+0.5)*step, length)
			fmt.Fprintf(&b, "%.1f,%.1f ", x(t), y(v))
		}
		dash := ""
		if dashed {
			dash = ` stroke-dasharray="3 2"`
		}
		fmt.Fprintf(w, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.2"%s/>`, strings.TrimSpace(b.String()), colour, dash)
	}
	for i, l := range lines {
		poly(l, palette(i), false)
	}
	poly(extra, errorColour, true)
	w.WriteString("</svg>\n")
}

// niceCeil rounds v up to a round number (1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8
// times a power of ten); at least 1.
func niceCeil(v float64) float64 {
	if v <= 1 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}
