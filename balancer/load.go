package balancer

import "time"

// Load is a backend's own report of how loaded it is, as it came with one
// answer: the fields of an ORCA load report (xds.data.orca.v3
// OrcaLoadReport, the format of gRFC A51 and of Envoy's
// endpoint-load-metrics header) that pickers use, in fixed fields, so that
// passing one in a Result costs a copy and no allocation.
//
// The zero Load means no report: Reported is false. A backend that sends
// nothing, or a report that does not parse, gives the zero Load. Every
// field is non-negative, finite, and zero when the report did not carry
// it (ORCA itself does not tell a zero from an absent value).
//
// Where reports come from: package github.com/lbkit/lbkit/examples/lbhttp
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
	// fields for them; they travel as the named metrics "rif" and
	// "latency_ms" (milliseconds), which parsers put here as well as in
	// Named.
	InFlight float64
	Latency  time.Duration

	// Named holds every named metric of the report (ORCA's named_metrics
	// map), or is nil when there were none. It is valid only during the
	// Done call that receives it: a picker that wants one reads it there
	// (Metric) and keeps the number, not the Metrics. Reading costs what
	// the source makes it cost; the lbhttp parser parses the header
	// again, so fixed fields are the cheap path.
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
