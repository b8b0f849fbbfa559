// Package scrape reads a Prometheus scrape into a flat map from series to
// value, for the tests of this module: what lbmetrics exports, gathered
// from a registry or parsed from a /metrics page, checked with plain map
// reads.
//
//	v, err := scrape.Gather(reg)
//	picks := v.Sum("lbkit_picks_total")
//	inFlight := v.Backend("10.0.0.1:8080")["lbkit_requests_in_flight"]
//
// A series is keyed as the text format writes it, name{label="value",...}
// with labels sorted by name; a histogram gives two series, name_count and
// name_sum. Backend groups one backend's series by metric name, with the
// state appended for per-state series (lbkit_backend_state/ejected).
package scrape
