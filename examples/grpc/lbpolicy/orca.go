package lbpolicy

import (
	"math"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	lbk "github.com/lbkit/lbkit/balancer"

	// gRPC parses an RPC's ORCA trailer (endpoint-load-metrics-bin) into
	// balancer.DoneInfo.ServerLoad only when the orca package is linked
	// in: its init installs the parser.
	_ "google.golang.org/grpc/orca"
)

// The named metrics lbkit's probing and reporting pickers read, as the
// lbhttp package names them: the backend's RPCs in flight and its latency
// estimate in milliseconds. A backend records them with
// orca.CallMetricsRecorder's SetNamedMetric.
const (
	metricInFlight = "rif"
	metricLatency  = "latency_ms"
)

// loadOf turns the per-RPC ORCA report gRPC parsed from the trailer
// (DoneInfo.ServerLoad, a *v3orcapb.OrcaLoadReport) into lbkit's Load:
// the fixed fields, rps_fractional or the deprecated rps, and the named
// metrics behind Load.Named without copying them. Negative, NaN and
// infinite values read as absent, as ORCA's own validation would refuse
// them. Anything else, nil included, is no report.
//
// Cost: a few field reads; Named is a pointer-sized value, so no
// allocation.
func loadOf(serverLoad any) lbk.Load {
	r, ok := serverLoad.(*v3orcapb.OrcaLoadReport)
	if !ok || r == nil {
		return lbk.Load{}
	}
	l := lbk.Load{
		CPU:         valid(r.GetCpuUtilization()),
		Memory:      min(valid(r.GetMemUtilization()), 1),
		Application: valid(r.GetApplicationUtilization()),
		RPS:         valid(r.GetRpsFractional()),
		EPS:         valid(r.GetEps()),
	}
	if l.RPS == 0 {
		//lint:ignore SA1019 the deprecated integer rps, for servers that send only it
		l.RPS = float64(r.GetRps())
	}
	if len(r.GetNamedMetrics()) > 0 {
		l.Named = orcaMetrics{r}
		l.InFlight = valid(r.GetNamedMetrics()[metricInFlight])
		if ms := valid(r.GetNamedMetrics()[metricLatency]); ms < float64(math.MaxInt64/int64(time.Millisecond)) {
			l.Latency = time.Duration(ms * float64(time.Millisecond))
		}
	}
	return l
}

// valid returns v, or 0 for a negative, NaN or infinite v.
func valid(v float64) float64 {
	if !(v >= 0) || math.IsInf(v, 1) {
		return 0
	}
	return v
}

// orcaMetrics is a report's named metrics for Load.Named.
type orcaMetrics struct{ r *v3orcapb.OrcaLoadReport }

var _ lbk.Metrics = orcaMetrics{}

// Metric returns the named metric.
func (m orcaMetrics) Metric(name string) (float64, bool) {
	v, ok := m.r.GetNamedMetrics()[name]
	return v, ok
}
