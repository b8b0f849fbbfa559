package balancer

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Load is a backend's own report of how loaded it is, as it came with one
// answer: the fields of an ORCA load report (xds.data.orca.v3
// OrcaLoadReport, the format of gRFC A51 and of Envoy's
// endpoint-load-metrics header) that pickers use, in fixed fields, so that
// passing one in a Result costs a copy and no allocation.
//
// The zero Load means no report: Reported is false. A backend that sends
// nothing, or a report that does not parse or breaks the rule
// LoadBuilder states (one value out of range refuses the whole report),
// gives the zero Load. Every field is non-negative, finite, and zero when
// the report did not carry it (ORCA itself does not tell a zero from an
// absent value).
//
// Where reports come from: package github.com/lbkit/lbkit/lbhttp
// parses the endpoint-load-metrics response header into Result.Load, and
// its Reporter middleware makes backends send one; the gRPC policy in
// examples/grpc fills it from the per-call ORCA trailer. Pickers that use
// reports: wrr's Reported (weights after gRFC A58), leastconn with
// WithReports (two choices on utilisation), and lrt/prequal, which probes
// for InFlight and Latency.
type Load struct {
	// CPU is cpu_utilization: the share of the backend's CPU in use. It
	// may exceed 1 when the backend runs beyond its soft limits.
	CPU float64
	// Memory is mem_utilization, in [0, 1].
	Memory float64
	// Application is application_utilization: a utilisation the backend
	// defines for itself (its capacity in requests, a queue, a licence
	// count). It may exceed 1. See Utilization.
	Application float64
	// RPS is rps_fractional: the requests per second the backend serves,
	// from every client, not only this one.
	RPS float64
	// EPS is eps: the errors per second among those.
	EPS float64

	// InFlight and Latency are the answers a probing picker asks for
	// (lrt/prequal): the requests the backend has in flight and its own
	// estimate of the latency of a request arriving now. ORCA has no
	// fields for them; they travel as the named metrics MetricInFlight
	// and MetricLatency (milliseconds), which sources put here as well as
	// in Named.
	InFlight float64
	Latency  time.Duration

	// Named holds every named metric of the report (ORCA's named_metrics
	// map), or is nil when there were none. It is valid only during the
	// Done call that receives it: a picker that wants one reads it there
	// (Metric) and keeps the number, not the Metrics. Reading costs what
	// the source makes it cost: lbhttp's parser compares the names of an
	// index it built while parsing (at most MaxNamedMetrics), the gRPC
	// policy looks in the proto's map; fixed fields are the cheap path.
	Named Metrics
}

// Metrics is a report's named metrics, looked up by name.
type Metrics interface {
	// Metric returns the named metric and true, or 0 and false if the
	// report did not carry it.
	Metric(name string) (float64, bool)
}

// Reported reports whether l carries anything: some field is not zero, or
// it has named metrics.
func (l Load) Reported() bool {
	return l.CPU != 0 || l.Memory != 0 || l.Application != 0 || l.RPS != 0 || l.EPS != 0 ||
		l.InFlight != 0 || l.Latency != 0 || l.Named != nil
}

// Utilization returns the utilisation gRFC A58 weighs a backend by:
// Application when it is positive, CPU otherwise. Zero means the report
// said nothing of it.
func (l Load) Utilization() float64 {
	if l.Application > 0 {
		return l.Application
	}
	return l.CPU
}

// Metric returns the named metric name, as Named.Metric does, and false
// when the report has no named metrics.
func (l Load) Metric(name string) (float64, bool) {
	if l.Named == nil {
		return 0, false
	}
	return l.Named.Metric(name)
}

// The named metrics lbkit's pickers read, which every source of reports
// (lbhttp's parser, the gRPC policy in examples/grpc) also puts in Load's
// InFlight and Latency: the requests in flight at the backend, and its
// latency estimate in milliseconds. lbhttp's Reporter sends both in its
// probe answers; a gRPC backend records them with orca's
// CallMetricsRecorder.SetNamedMetric.
const (
	MetricInFlight = "rif"
	MetricLatency  = "latency_ms"
)

// MaxNamedMetrics is the most named metrics a report may carry: a source
// refuses a report with more (CheckNamedMetrics), so that what a picker
// reads from one stays small. A backend reports a handful; 64 leaves room
// for a generous one and bounds a hostile one.
const MaxNamedMetrics = 64

// maxLatencyMS bounds latency_ms so that it converts to a time.Duration:
// 2⁶³ ns is about 9.2·10¹² ms.
const maxLatencyMS = float64(math.MaxInt64/int64(time.Millisecond)) - 1

// LoadField names a value of an ORCA load report, for LoadBuilder.Add.
type LoadField uint8

// The values of an OrcaLoadReport (xds.data.orca.v3), by their field.
const (
	LoadCPU         LoadField = iota + 1 // cpu_utilization
	LoadMemory                           // mem_utilization
	LoadApplication                      // application_utilization
	LoadRPS                              // rps_fractional
	LoadRPSInt                           // rps, the deprecated integer; rps_fractional wins
	LoadEPS                              // eps
	LoadNamed                            // an entry of named_metrics
	LoadRequestCost                      // an entry of request_cost
	LoadUtilization                      // an entry of utilization
)

var loadFieldNames = [...]string{
	LoadCPU:         "cpu_utilization",
	LoadMemory:      "mem_utilization",
	LoadApplication: "application_utilization",
	LoadRPS:         "rps_fractional",
	LoadRPSInt:      "rps",
	LoadEPS:         "eps",
	LoadNamed:       "named_metrics",
	LoadRequestCost: "request_cost",
	LoadUtilization: "utilization",
}

// String returns the field's name in the proto ("cpu_utilization").
func (f LoadField) String() string {
	if int(f) < len(loadFieldNames) && loadFieldNames[f] != "" {
		return loadFieldNames[f]
	}
	return fmt.Sprintf("LoadField(%d)", int(f))
}

// A LoadBuilder turns the values of one ORCA load report, as a source
// decodes them from its wire (an HTTP header, a gRPC trailer), into a
// Load, by the one rule every lbkit source keeps. The zero value is ready
// for one report.
//
// The rule: a report is taken whole or not at all. A source adds each
// value of the report; the first that breaks the rule makes Add return an
// error wrapping ErrBadLoad, and the source then passes no report (the
// zero Load) rather than the rest of it. Add refuses:
//
//   - a value that is not a finite number (NaN, ±Inf), in any field, named
//     metrics included, as Envoy's parser of the endpoint-load-metrics
//     header does (source/common/orca/orca_parser.cc);
//   - a negative cpu_utilization, application_utilization,
//     rps_fractional, rps or eps, a mem_utilization outside [0, 1] and an
//     utilization entry outside [0, 1]: the ranges of the proto's own
//     validation rules (xds/data/orca/v3/orca_load_report.proto);
//   - an empty name in a map field, as Envoy's parser does;
//   - a negative MetricInFlight, and a MetricLatency that is negative or
//     does not fit a time.Duration.
//
// Other named metrics and request_cost entries may be any finite number,
// negative included: the proto gives them no range, and their meaning is
// the backend's. A source also refuses a report with more than
// MaxNamedMetrics named metrics (CheckNamedMetrics), and a transport may
// bound a report's size (lbhttp.MaxLoadHeader).
//
// Why the whole report: a value out of range says the reporter is broken
// or hostile, and the rest of what it sent is no better. Keeping part of
// it changes its meaning without a trace: a dropped
// application_utilization makes gRFC A58 weigh by CPU instead, a memory
// clamped to 1 is a number the backend never sent. No report is what
// every picker already handles (wrr's Reported keeps the last weight until
// it expires; leastconn's WithReports counts connections), and it is what
// Envoy does with a header it cannot parse. gRFC A51 puts validation on
// the recording side (grpc-go's ServerMetricsRecorder drops values out of
// range); this rule is its mirror on the receiving side, for backends
// that do not use a recorder.
//
// What Load keeps: the fixed fields; rps_fractional, or the deprecated
// integer rps when rps_fractional is absent or zero; MetricInFlight and
// MetricLatency in InFlight and Latency (milliseconds). request_cost and
// utilization are checked and not kept; named metrics are the source's to
// look up (Load.Named). A map entry given twice is the source's to
// resolve before it adds (proto: the last wins).
//
// Cost: Add is a few comparisons; no allocation.
type LoadBuilder struct {
	l      Load
	rpsInt float64
}

// Add checks one value of the report by the rule above and keeps what
// Load keeps of it. key is the entry's name for the map fields
// (LoadNamed, LoadRequestCost, LoadUtilization) and is ignored for the
// others. The error names the field and the value.
func (b *LoadBuilder) Add(f LoadField, key string, v float64) error {
	if f < LoadCPU || f > LoadUtilization {
		return fmt.Errorf("%w: unknown field %v", ErrBadLoad, f)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("%w: %s is not a finite number (%v)", ErrBadLoad, loadLabel(f, key), v)
	}
	if f >= LoadNamed && key == "" {
		return fmt.Errorf("%w: %s has an entry without a name", ErrBadLoad, f)
	}
	switch f {
	case LoadMemory, LoadUtilization:
		if v < 0 || v > 1 {
			return fmt.Errorf("%w: %s is outside [0, 1] (%g)", ErrBadLoad, loadLabel(f, key), v)
		}
	case LoadNamed:
		switch key {
		case MetricInFlight:
			if v < 0 {
				return fmt.Errorf("%w: %s is negative (%g)", ErrBadLoad, loadLabel(f, key), v)
			}
			b.l.InFlight = v
		case MetricLatency:
			if v < 0 || v > maxLatencyMS {
				return fmt.Errorf("%w: %s is out of range (%g)", ErrBadLoad, loadLabel(f, key), v)
			}
			b.l.Latency = time.Duration(v * float64(time.Millisecond))
		}
		return nil
	case LoadRequestCost:
		return nil
	default:
		if v < 0 {
			return fmt.Errorf("%w: %s is negative (%g)", ErrBadLoad, loadLabel(f, key), v)
		}
	}
	switch f {
	case LoadCPU:
		b.l.CPU = v
	case LoadMemory:
		b.l.Memory = v
	case LoadApplication:
		b.l.Application = v
	case LoadRPS:
		b.l.RPS = v
	case LoadRPSInt:
		b.rpsInt = v
	case LoadEPS:
		b.l.EPS = v
	}
	return nil
}

// Load returns the Load of the values added so far, without Named, which
// the source sets to its own lookup when the report has named metrics.
func (b *LoadBuilder) Load() Load {
	l := b.l
	if l.RPS == 0 {
		l.RPS = b.rpsInt
	}
	return l
}

// CheckNamedMetrics returns an error wrapping ErrBadLoad if a report with
// n named metrics is one to refuse: more than MaxNamedMetrics.
func CheckNamedMetrics(n int) error {
	if n > MaxNamedMetrics {
		return fmt.Errorf("%w: more than %d named metrics", ErrBadLoad, MaxNamedMetrics)
	}
	return nil
}

// loadLabel names a value in an error: the field, or for a map entry its
// name quoted ("named_metrics.queue").
func loadLabel(f LoadField, key string) string {
	if f >= LoadNamed {
		return strconv.Quote(f.String() + "." + key)
	}
	return f.String()
}
