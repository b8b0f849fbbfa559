package lbpolicy

import (
	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	lbk "github.com/lbkit/lbkit/balancer"

	// gRPC parses an RPC's ORCA trailer (endpoint-load-metrics-bin) into
	// balancer.DoneInfo.ServerLoad only when the orca package is linked
	// in: its init installs the parser.
	_ "google.golang.org/grpc/orca"
)

// loadOf turns the per-RPC ORCA report gRPC parsed from the trailer
// (DoneInfo.ServerLoad, a *v3orcapb.OrcaLoadReport) into lbkit's Load, by
// the rule every lbkit source keeps (balancer.LoadBuilder): the whole
// report or nothing. A report with a value out of range (a negative, NaN
// or infinite one, a mem_utilization above 1) or with more than
// balancer.MaxNamedMetrics named metrics is no report, as is anything
// that is not an *OrcaLoadReport, nil included; lbhttp's ParseLoad gives
// the same Load for the same report sent as an HTTP header
// (TestSameLoadOverHTTPAndGRPC). Named looks in the proto's map, without
// copying it.
//
// Cost: a few comparisons per value, the maps walked once; Named is a
// pointer-sized value, so no allocation.
func loadOf(serverLoad any) lbk.Load {
	r, ok := serverLoad.(*v3orcapb.OrcaLoadReport)
	if !ok || r == nil {
		return lbk.Load{}
	}
	l, err := parseORCA(r)
	if err != nil {
		return lbk.Load{}
	}
	return l
}

// parseORCA is loadOf for a report, with the error that refuses it.
func parseORCA(r *v3orcapb.OrcaLoadReport) (lbk.Load, error) {
	named := r.GetNamedMetrics()
	if err := lbk.CheckNamedMetrics(len(named)); err != nil {
		return lbk.Load{}, err
	}
	var b lbk.LoadBuilder
	for _, f := range [...]struct {
		f lbk.LoadField
		v float64
	}{
		{lbk.LoadCPU, r.GetCpuUtilization()},
		{lbk.LoadMemory, r.GetMemUtilization()},
		{lbk.LoadApplication, r.GetApplicationUtilization()},
		{lbk.LoadRPS, r.GetRpsFractional()},
		//lint:ignore SA1019 the deprecated integer rps, for servers that send only it
		{lbk.LoadRPSInt, float64(r.GetRps())},
		{lbk.LoadEPS, r.GetEps()},
	} {
		if err := b.Add(f.f, "", f.v); err != nil {
			return lbk.Load{}, err
		}
	}
	for _, m := range [...]struct {
		f lbk.LoadField
		m map[string]float64
	}{{lbk.LoadNamed, named}, {lbk.LoadRequestCost, r.GetRequestCost()}, {lbk.LoadUtilization, r.GetUtilization()}} {
		for k, v := range m.m {
			if err := b.Add(m.f, k, v); err != nil {
				return lbk.Load{}, err
			}
		}
	}
	l := b.Load()
	if len(named) > 0 {
		l.Named = orcaMetrics{r}
	}
	return l, nil
}

// orcaMetrics is a report's named metrics for Load.Named.
type orcaMetrics struct{ r *v3orcapb.OrcaLoadReport }

var _ lbk.Metrics = orcaMetrics{}

// Metric returns the named metric.
func (m orcaMetrics) Metric(name string) (float64, bool) {
	v, ok := m.r.GetNamedMetrics()[name]
	return v, ok
}
