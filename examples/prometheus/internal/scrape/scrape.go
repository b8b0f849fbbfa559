package scrape

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Values maps each series of a scrape to its value.
type Values map[string]float64

// Gather gathers g and flattens what it returns.
func Gather(g prometheus.Gatherer) (Values, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	return Flatten(mfs), nil
}

// Parse reads a page in the Prometheus text format, as /metrics serves it.
func Parse(r io.Reader) (Values, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	byName, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("scrape: %w", err)
	}
	mfs := make([]*dto.MetricFamily, 0, len(byName))
	for _, mf := range byName {
		mfs = append(mfs, mf)
	}
	return Flatten(mfs), nil
}

// Flatten turns metric families into Values. Counters, gauges and untyped
// metrics give their value; histograms their count and sum.
func Flatten(mfs []*dto.MetricFamily) Values {
	v := Values{}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			var pairs []string
			for _, lp := range mt.GetLabel() {
				pairs = append(pairs, fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue()))
			}
			slices.Sort(pairs)
			labels := "{" + strings.Join(pairs, ",") + "}"
			switch {
			case mt.Counter != nil:
				v[mf.GetName()+labels] = mt.Counter.GetValue()
			case mt.Gauge != nil:
				v[mf.GetName()+labels] = mt.Gauge.GetValue()
			case mt.Untyped != nil:
				v[mf.GetName()+labels] = mt.Untyped.GetValue()
			case mt.Histogram != nil:
				v[mf.GetName()+"_count"+labels] = float64(mt.Histogram.GetSampleCount())
				v[mf.GetName()+"_sum"+labels] = mt.Histogram.GetSampleSum()
			}
		}
	}
	return v
}

// Backend returns the series whose backend label is id, keyed by metric
// name, or by name/state for series that also have a state label.
func (v Values) Backend(id string) map[string]float64 {
	out := map[string]float64{}
	needle := fmt.Sprintf("backend=%q", id)
	for k, val := range v {
		name, labels, _ := strings.Cut(k, "{")
		if !strings.Contains(labels, needle) {
			continue
		}
		if _, st, ok := strings.Cut(labels, `state="`); ok {
			st, _, _ = strings.Cut(st, `"`)
			name += "/" + st
		}
		out[name] = val
	}
	return out
}

// Sum adds up the values of every series of the named metric (for a
// histogram, name_count or name_sum).
func (v Values) Sum(name string) float64 {
	total := 0.0
	for k, val := range v {
		if n, _, _ := strings.Cut(k, "{"); n == name {
			total += val
		}
	}
	return total
}

// Backends returns the values of the backend label found in v, sorted.
func (v Values) Backends() []string {
	var ids []string
	for k := range v {
		if _, rest, ok := strings.Cut(k, `backend="`); ok {
			id, _, _ := strings.Cut(rest, `"`)
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
	}
	slices.Sort(ids)
	return ids
}
