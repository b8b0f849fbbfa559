package sim

import (
	"encoding/csv"
	"encoding/json"
	"io"
	"math"
	"strconv"
	"time"
)

// Format names the layout WriteJSON writes; it changes when a field
// changes meaning or goes away (new fields may come without a change).
const Format = "lbsim/1"

// Document is what lbsim's -json and -csv write: the reports of one
// invocation (the simulation's and, with -live, the live run's) and the
// command line that made them. Package doc, "Machine-readable output",
// describes both layouts.
type Document struct {
	// Command is the command line, program name first.
	Command []string
	// Flags holds every flag's value, set or default, by name.
	Flags map[string]string
	// Reports are the reports, in the order run.
	Reports []*Report
}

// Plain types of the JSON layout, so that the layout does not follow
// every Go field by accident.
type (
	jsonDocument struct {
		Format  string            `json:"format"`
		Command []string          `json:"command"`
		Flags   map[string]string `json:"flags"`
		Reports []jsonReport      `json:"reports"`
	}
	jsonReport struct {
		Source    string         `json:"source"`
		Seed      uint64         `json:"seed"`
		Scenarios []jsonScenario `json:"scenarios"`
		Summaries []jsonSummary  `json:"summaries"`
	}
	jsonScenario struct {
		Name            string      `json:"name"`
		Proxies         int         `json:"proxies"`
		Description     string      `json:"description"`
		Users           int         `json:"users"`
		PeakUsers       int         `json:"peak_users"`
		Stages          []jsonStage `json:"stages"`
		LengthS         float64     `json:"length_s"`
		ThinkMS         float64     `json:"think_ms"`
		CheckIntervalMS float64     `json:"check_interval_ms"`
		ReportDelayMS   float64     `json:"report_delay_ms"`
		ProbeRTTMS      float64     `json:"probe_rtt_ms"`
		// ClientTimeoutMS is left out when the users never give up.
		ClientTimeoutMS float64       `json:"client_timeout_ms,omitempty"`
		Variants        []string      `json:"variants"`
		Backends        []jsonBackend `json:"backends"`
		Metrics         []jsonMetric  `json:"metrics"`
		Results         []jsonResult  `json:"results"`
		Verdict         jsonVerdict   `json:"verdict"`
		// The fleet's, left out for a scenario without them.
		ProxyZones  []string `json:"proxy_zones,omitempty"`
		CrossZoneMS float64  `json:"cross_zone_ms,omitempty"`
		SubsetSize  int      `json:"subset_size,omitempty"`
	}
	jsonStage struct {
		DurationS float64 `json:"duration_s"`
		Target    int     `json:"target"`
	}
	jsonBackend struct {
		Label     string       `json:"label"`
		ID        string       `json:"id"`
		LatencyMS float64      `json:"latency_ms"`
		JitterMS  float64      `json:"jitter_ms"`
		Sigma     float64      `json:"sigma"`
		Samples   int          `json:"samples"`
		Weight    int          `json:"weight"`
		Capacity  int          `json:"capacity"`
		Down      []jsonOutage `json:"down"`
		// Neighbours, Zone, Stalls, Unavailable, the tail, the fail share
		// and the track are left out for a backend without them.
		Neighbours  []jsonNeighbour `json:"neighbours,omitempty"`
		Zone        string          `json:"zone,omitempty"`
		Stalls      []jsonOutage    `json:"stalls,omitempty"`
		Unavailable []jsonOutage    `json:"unavailable,omitempty"`
		TailShare   float64         `json:"tail_share,omitempty"`
		TailFactor  float64         `json:"tail_factor,omitempty"`
		FailShare   float64         `json:"fail_share,omitempty"`
		Track       string          `json:"track,omitempty"`
	}
	jsonNeighbour struct {
		AtS    float64 `json:"at_s"`
		UntilS float64 `json:"until_s"` // 0: never leaves
		Takes  int     `json:"takes"`
	}
	jsonOutage struct {
		AtS    float64 `json:"at_s"`
		UntilS float64 `json:"until_s"` // 0: never comes back
	}
	jsonMetric struct {
		Name   string `json:"name"`
		Label  string `json:"label"`
		Unit   string `json:"unit"`
		Better string `json:"better"`
		Leader string `json:"leader,omitempty"`
	}
	jsonResult struct {
		Variant   string              `json:"variant"`
		Algorithm string              `json:"algorithm"`
		Figures   map[string]*float64 `json:"figures"`
		Backends  []jsonBackendResult `json:"backends"`
		Series    jsonSeries          `json:"series"`
	}
	jsonBackendResult struct {
		Label        string  `json:"label"`
		Sent         int64   `json:"sent"`
		SharePct     float64 `json:"share_pct"`
		Refused      int64   `json:"refused"`
		Reset        int64   `json:"reset"`
		InFlightMean float64 `json:"in_flight_mean"`
		InFlightPeak int     `json:"in_flight_peak"`
	}
	jsonSeries struct {
		StepS        float64     `json:"step_s"`
		Users        []int       `json:"users"`
		InFlight     [][]float64 `json:"in_flight"`
		InFlightPeak [][]int     `json:"in_flight_peak"`
		AttemptsPerS [][]float64 `json:"attempts_per_s"`
		ErrorsPerS   []float64   `json:"errors_per_s"`
	}
	jsonVerdict struct {
		Variant  string     `json:"variant"`
		Leads    []jsonLead `json:"leads"`
		TradeOff string     `json:"trade_off"`
		Handling string     `json:"handling,omitempty"`
		// ByVariant is left out when the verdict has none.
		ByVariant []string `json:"by_variant,omitempty"`
		Versus    string   `json:"versus,omitempty"`
		Contrast  string   `json:"contrast,omitempty"`
		Lines     []string `json:"lines"`
	}
	jsonLead struct {
		Metric  string   `json:"metric"`
		Leaders []string `json:"leaders"`
		Value   float64  `json:"value"`
		Next    float64  `json:"next"`
		Others  []string `json:"others"`
	}
	jsonSummary struct {
		Proxies   int            `json:"proxies"`
		Scenarios []string       `json:"scenarios"`
		Variants  []string       `json:"variants"`
		Standings []jsonStanding `json:"standings"`
		Lines     []string       `json:"lines"`
	}
	jsonStanding struct {
		Algorithm string   `json:"algorithm"`
		Score     float64  `json:"score"`
		Mean      float64  `json:"mean"`
		Worst     string   `json:"worst"`
		Leads     []string `json:"leads"`
	}
)

// millis returns d in milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// finite returns a pointer to v, or nil (JSON null) for NaN and ±Inf,
// which JSON cannot hold.
func finite(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

// WriteJSON writes the document as one indented JSON object: every
// figure of every run, the series behind the charts, each scenario as
// run, its verdict, and the summaries.
func (d *Document) WriteJSON(w io.Writer) error {
	doc := jsonDocument{Format: Format, Command: d.Command, Flags: d.Flags}
	for _, r := range d.Reports {
		jr := jsonReport{Source: r.Source, Seed: r.Seed}
		for i := range r.Scenarios {
			jr.Scenarios = append(jr.Scenarios, jsonScenarioOf(&r.Scenarios[i]))
		}
		for _, s := range r.Summaries() {
			js := jsonSummary{Proxies: s.Proxies, Scenarios: s.Scenarios, Lines: s.Lines()}
			for _, v := range s.Variants {
				js.Variants = append(js.Variants, v.String())
			}
			for _, st := range s.Standings {
				js.Standings = append(js.Standings, jsonStanding{Algorithm: st.Algorithm, Score: st.Score, Mean: st.Mean, Worst: st.Worst, Leads: st.Leads})
			}
			jr.Summaries = append(jr.Summaries, js)
		}
		doc.Reports = append(doc.Reports, jr)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(doc)
}

func jsonScenarioOf(sr *ScenarioReport) jsonScenario {
	sc := &sr.Scenario
	js := jsonScenario{
		Name: sc.Name, Proxies: sr.Proxies, Description: sc.Describe(), Users: sc.Users, PeakUsers: sc.PeakUsers(),
		LengthS: sc.Length().Seconds(), ThinkMS: millis(sc.Think), CheckIntervalMS: millis(sc.Interval()),
		ReportDelayMS: millis(sc.ReportDelay), ProbeRTTMS: millis(sc.RTT()), ClientTimeoutMS: millis(sc.ClientTimeout),
		ProxyZones: sc.ProxyZones, CrossZoneMS: millis(sc.CrossZone), SubsetSize: sc.SubsetSize,
	}
	for _, st := range sc.Stages {
		js.Stages = append(js.Stages, jsonStage{DurationS: st.Duration.Seconds(), Target: st.Target})
	}
	for _, v := range sc.RunVariants() {
		js.Variants = append(js.Variants, v.String())
	}
	for i, b := range sc.Backends {
		jb := jsonBackend{Label: sc.Label(i), ID: sc.ID(i), LatencyMS: millis(b.Latency), JitterMS: millis(b.Jitter),
			Sigma: b.Sigma, Samples: len(b.Samples), Weight: b.Weight, Capacity: b.Capacity, Down: []jsonOutage{}, Zone: b.Zone}
		for _, o := range b.Down {
			jb.Down = append(jb.Down, jsonOutage{AtS: o.At.Seconds(), UntilS: o.Until.Seconds()})
		}
		for _, n := range b.Neighbours {
			jb.Neighbours = append(jb.Neighbours, jsonNeighbour{AtS: n.At.Seconds(), UntilS: n.Until.Seconds(), Takes: n.Takes})
		}
		for _, o := range b.Stalls {
			jb.Stalls = append(jb.Stalls, jsonOutage{AtS: o.At.Seconds(), UntilS: o.Until.Seconds()})
		}
		for _, o := range b.Unavailable {
			jb.Unavailable = append(jb.Unavailable, jsonOutage{AtS: o.At.Seconds(), UntilS: o.Until.Seconds()})
		}
		jb.TailShare, jb.TailFactor = b.TailShare, b.TailFactor
		jb.FailShare, jb.Track = b.FailShare, b.Track
		js.Backends = append(js.Backends, jb)
	}
	metrics := sr.Metrics()
	for _, m := range metrics {
		js.Metrics = append(js.Metrics, jsonMetric{Name: m.Name, Label: m.Label, Unit: m.Unit, Better: m.Better.String(), Leader: m.Leader})
	}
	for i := range sr.Results {
		r := &sr.Results[i]
		jr := jsonResult{Variant: r.Variant.String(), Algorithm: r.Algorithm, Figures: map[string]*float64{}}
		for _, m := range metrics {
			if v, ok := m.Value(r); ok {
				jr.Figures[m.Name] = finite(v)
			}
		}
		for k, b := range r.Backends {
			jr.Backends = append(jr.Backends, jsonBackendResult{Label: sc.Label(k), Sent: b.Sent, SharePct: 100 * b.Share,
				Refused: b.Refused, Reset: b.Reset, InFlightMean: b.MeanInFlight, InFlightPeak: b.PeakInFlight})
		}
		s := &r.Series
		jr.Series = jsonSeries{StepS: s.Step.Seconds(), Users: s.Users, InFlight: s.InFlight, InFlightPeak: s.PeakInFlight,
			AttemptsPerS: s.RPS, ErrorsPerS: s.Errors}
		js.Results = append(js.Results, jr)
	}
	v := sr.Verdict()
	js.Verdict = jsonVerdict{Variant: v.Variant.String(), TradeOff: v.TradeOff, Handling: v.Handling, ByVariant: v.ByVariant,
		Versus: v.Versus, Contrast: v.Contrast, Lines: v.Lines(sr.algorithms())}
	for _, l := range v.Leads {
		js.Verdict.Leads = append(js.Verdict.Leads, jsonLead{Metric: l.Metric.Name, Leaders: l.Algorithms, Value: l.Value, Next: l.Next, Others: l.Others})
	}
	return js
}

// backendColumns are the CSV's per-backend columns, after the metrics.
var backendColumns = []string{"sent", "share_pct", "refused", "reset", "in_flight_mean", "in_flight_peak"}

// WriteCSV writes the figures of the tables as CSV with a header row:
// source, scenario, proxies, variant, algorithm and backend, then one
// column per metric name of any scenario (Metrics, then the scenarios'
// own), then the per-backend columns. Each run has one row with backend
// empty and its figures in the metric columns, then one row per backend
// with the backend's label and its figures in the per-backend columns.
// Empty cells are figures a run does not have. Numbers are in full
// precision.
func (d *Document) WriteCSV(w io.Writer) error {
	var names []string
	seen := map[string]bool{}
	for _, r := range d.Reports {
		for i := range r.Scenarios {
			for _, m := range append(Metrics(), r.Scenarios[i].Scenario.Metrics...) {
				if !seen[m.Name] {
					seen[m.Name] = true
					names = append(names, m.Name)
				}
			}
		}
	}
	cw := csv.NewWriter(w)
	header := append([]string{"source", "scenario", "proxies", "variant", "algorithm", "backend"}, names...)
	if err := cw.Write(append(header, backendColumns...)); err != nil {
		return err
	}
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	for _, r := range d.Reports {
		for i := range r.Scenarios {
			sr := &r.Scenarios[i]
			metrics := map[string]Metric{}
			for _, m := range append(Metrics(), sr.Scenario.Metrics...) {
				metrics[m.Name] = m
			}
			for j := range sr.Results {
				res := &sr.Results[j]
				key := []string{r.Source, sr.Scenario.Name, strconv.Itoa(sr.Proxies), res.Variant.String(), res.Algorithm}
				row := append(append([]string(nil), key...), "")
				for _, n := range names {
					m, ok := metrics[n]
					v, has := m.Value(res)
					if !ok || !has || math.IsNaN(v) || math.IsInf(v, 0) {
						row = append(row, "")
						continue
					}
					row = append(row, num(v))
				}
				row = append(row, make([]string, len(backendColumns))...)
				if err := cw.Write(row); err != nil {
					return err
				}
				for k, b := range res.Backends {
					row := append(append([]string(nil), key...), sr.Scenario.Label(k))
					row = append(row, make([]string, len(names))...)
					row = append(row, strconv.FormatInt(b.Sent, 10), num(100*b.Share), strconv.FormatInt(b.Refused, 10),
						strconv.FormatInt(b.Reset, 10), num(b.MeanInFlight), strconv.Itoa(b.PeakInFlight))
					if err := cw.Write(row); err != nil {
						return err
					}
				}
			}
		}
	}
	cw.Flush()
	return cw.Error()
}
