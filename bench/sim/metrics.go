package sim

import (
	"math"
	"strconv"
)

// Better says which way a figure is better.
type Better int8

const (
	// Neither: the figure describes a run and is not ranked.
	Neither Better = 0
	// Higher is better (throughput).
	Higher Better = 1
	// Lower is better (latency, errors).
	Lower Better = -1
)

// String returns "higher", "lower" or "neither".
func (b Better) String() string {
	switch b {
	case Higher:
		return "higher"
	case Lower:
		return "lower"
	}
	return "neither"
}

// Metric is one named figure of a run: a column of the tables, a key of
// the JSON figures and a column of the CSV, and, when it has a Leader, a
// line of the verdict. Metrics returns the standard ones; a scenario that
// reports figures of its own (attempts per request, a cross-zone share)
// lists them in Scenario.Metrics and its runs fill Result.Extra, and
// every writer and the verdict pick them up by name.
type Metric struct {
	// Name is the key in JSON and CSV: lower case, its unit last, as
	// "rps" or "p99_ms".
	Name string
	// Label heads the column in tables, as "RPS" or "p99 ms"; empty for
	// a figure the tables leave to JSON and CSV.
	Label string
	// Unit is what the figure counts, as "requests/s", "ms", "requests"
	// or "%".
	Unit string
	// Better says which way is better; the verdict ranks by the metrics
	// that have a Leader.
	Better Better
	// Leader names the best in the verdict, as "most throughput" or
	// "lowest p99"; empty when the verdict does not rank by it.
	Leader string
	// Share marks a figure that is a part of all requests (0 to 1, or 0
	// to 100 with Unit "%"): the verdict compares what it leaves, 1 − it,
	// rather than the ratio of two figures, which a zero would make
	// infinite.
	Share bool
	// Decimals is the number of decimals tables print.
	Decimals int

	value  func(*Result) (float64, bool) // nil: Result.Extra by Name
	sign   bool                          // tables print a sign: "+1.5%"
	hidden bool                          // a column only when some run has a non-zero value
	// byVariant asks the verdict to set the variants' figures side by
	// side (Verdict.ByVariant), under phrase.
	byVariant bool
	phrase    string
	// kept is, for a Lower metric the verdict ranks by, the part of all
	// requests it leaves, when that compares runs better than a ratio:
	// errors, whose best is often zero.
	kept func(*Result) float64
}

// Figure is one named value of a run, beyond the standard ones: see
// Result.Extra.
type Figure struct {
	Name  string
	Value float64
}

// Metrics returns the standard metrics, in table order: successful
// throughput, latency, errors and retries, and throughput around the
// first outage; then the counts the tables leave out. Per-backend
// figures (share, in flight) are columns of their own.
func Metrics() []Metric {
	always := func(f func(*Result) float64) func(*Result) (float64, bool) {
		return func(r *Result) (float64, bool) { return f(r), true }
	}
	failure := func(f func(*FailureResult) float64) func(*Result) (float64, bool) {
		return func(r *Result) (float64, bool) {
			if r.Failure == nil {
				return 0, false
			}
			return f(r.Failure), true
		}
	}
	return []Metric{
		{Name: "rps", Label: "RPS", Unit: "requests/s", Better: Higher, Leader: "most throughput", Decimals: 1,
			value: always(func(r *Result) float64 { return r.RPS })},
		{Name: "mean_ms", Label: "mean ms", Unit: "ms", Better: Lower, Decimals: 1,
			value: always(func(r *Result) float64 { return millis(r.Mean) })},
		{Name: "p50_ms", Label: "p50 ms", Unit: "ms", Better: Lower, Decimals: 1,
			value: always(func(r *Result) float64 { return millis(r.Median) })},
		{Name: "p95_ms", Label: "p95 ms", Unit: "ms", Better: Lower, Decimals: 1,
			value: always(func(r *Result) float64 { return millis(r.P95) })},
		{Name: "p99_ms", Label: "p99 ms", Unit: "ms", Better: Lower, Leader: "lowest p99", Decimals: 1,
			value: always(func(r *Result) float64 { return millis(r.P99) })},
		{Name: "errors", Label: "errors", Unit: "requests", Better: Lower, Leader: "fewest errors",
			value: always(func(r *Result) float64 { return float64(r.Errors) }),
			kept: func(r *Result) float64 {
				if n := r.Requests + r.Errors; n > 0 {
					return float64(r.Requests) / float64(n)
				}
				return 0
			}},
		{Name: "retries", Label: "retries", Unit: "attempts", Better: Lower, hidden: true,
			value: always(func(r *Result) float64 { return float64(r.Retries) })},
		{Name: "rps_before", Label: "before", Unit: "requests/s", Decimals: 1,
			value: failure(func(f *FailureResult) float64 { return f.Before })},
		{Name: "rps_during", Label: "during", Unit: "requests/s", Better: Higher, Decimals: 1,
			value: failure(func(f *FailureResult) float64 { return f.After })},
		{Name: "change_pct", Label: "change", Unit: "%", Decimals: 1, sign: true,
			value: failure(func(f *FailureResult) float64 { return 100 * f.Change() })},
		{Name: "requests", Unit: "requests", Better: Higher,
			value: always(func(r *Result) float64 { return float64(r.Requests) })},
		{Name: "attempts", Unit: "attempts",
			value: always(func(r *Result) float64 { return float64(r.Attempts()) })},
		{Name: "length_s", Unit: "s", Decimals: 1,
			value: always(func(r *Result) float64 { return r.Length.Seconds() })},
	}
}

// ProbesMetric is the probes probing pickers sent per user request
// answered: what probing costs the backends, in requests of their own.
// The load scenarios list it in their Metrics.
func ProbesMetric() Metric {
	return Metric{Name: "probes_per_request", Label: "probes/req", Unit: "probes", Better: Lower, Decimals: 2,
		value: func(r *Result) (float64, bool) {
			if r.Requests == 0 {
				return 0, false
			}
			return float64(r.Probes) / float64(r.Requests), true
		}}
}

// Value returns m's figure in r, and false when r has none (the failure
// figures of a scenario without an outage, an extra figure the run did
// not report).
func (m *Metric) Value(r *Result) (float64, bool) {
	if m.value != nil {
		return m.value(r)
	}
	for _, f := range r.Extra {
		if f.Name == m.Name {
			return f.Value, true
		}
	}
	return 0, false
}

// Format prints v as the tables do: Decimals decimals, a sign and a "%"
// for a change.
func (m *Metric) Format(v float64) string {
	s := strconv.FormatFloat(v, 'f', m.Decimals, 64)
	if m.sign {
		if v >= 0 && !math.Signbit(v) {
			s = "+" + s
		}
		s += "%"
	}
	return s
}

// Attempts returns the attempts the pickers sent to every backend,
// refused ones included.
func (r *Result) Attempts() int64 {
	var n int64
	for _, b := range r.Backends {
		n += b.Sent
	}
	return n
}

// Metrics returns the metrics of the scenario report's runs, in table
// order: the standard ones that some run has (the failure figures need
// an outage; retries need a retry), then the scenario's own.
func (sr *ScenarioReport) Metrics() []Metric {
	var out []Metric
	for _, m := range append(Metrics(), sr.Scenario.Metrics...) {
		for i := range sr.Results {
			if v, ok := m.Value(&sr.Results[i]); ok && (!m.hidden || v != 0) {
				out = append(out, m)
				break
			}
		}
	}
	return out
}
