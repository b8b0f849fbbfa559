package lbmetrics_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/prometheus/lbmetrics"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/leastconn"
)

// Wrap a health-checked picker, register the metrics, and use the
// decorator as the picker: every Pick and Done is counted.
func Example() {
	m, err := lbmetrics.New(lbmetrics.Config{})
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry() // a server passes its own, or prometheus.DefaultRegisterer
	reg.MustRegister(m)

	h, err := health.New(leastconn.New(), health.Config{OnChange: m.HealthChanged})
	if err != nil {
		panic(err)
	}
	lb, err := m.Wrap(h)
	if err != nil {
		panic(err)
	}
	defer lb.Close() // closes health too; lb.Start(ctx) would start it
	a, b := balancer.NewEndpoint("10.0.0.1:8080", 1), balancer.NewEndpoint("10.0.0.2:8080", 1)
	if err := lb.Update([]balancer.Backend{a, b}); err != nil {
		panic(err)
	}

	// Three requests to a (b avoided, as a retry would), one of them a 503;
	// one to b, still in flight.
	for i := range 3 {
		got, _ := lb.Pick(balancer.Request{Avoid: b.ID()})
		res := balancer.Result{Latency: 20 * time.Millisecond}
		if i == 2 {
			res.Err = errors.New("backend answered 503")
		}
		lb.Done(got, res)
	}
	_, _ = lb.Pick(balancer.Request{Avoid: a.ID()})

	show(reg, "lbkit_picks_total", "lbkit_requests_in_flight", "lbkit_failures_total",
		"lbkit_request_duration_seconds", "lbkit_backend_state")
	// Output:
	// lbkit_picks_total{backend="10.0.0.1:8080"} 3
	// lbkit_picks_total{backend="10.0.0.2:8080"} 1
	// lbkit_requests_in_flight{backend="10.0.0.1:8080"} 0
	// lbkit_requests_in_flight{backend="10.0.0.2:8080"} 1
	// lbkit_failures_total{backend="10.0.0.1:8080"} 1
	// lbkit_failures_total{backend="10.0.0.2:8080"} 0
	// lbkit_request_duration_seconds_count{backend="10.0.0.1:8080"} 3
	// lbkit_request_duration_seconds_count{backend="10.0.0.2:8080"} 0
	// lbkit_backend_state{backend="10.0.0.1:8080",state="up"} 1
	// lbkit_backend_state{backend="10.0.0.2:8080",state="up"} 1
}

// show prints the named metrics as a scrape would show them, histograms
// by their count, and states only where they are 1.
func show(g prometheus.Gatherer, names ...string) {
	mfs, err := g.Gather()
	if err != nil {
		panic(err)
	}
	for _, name := range names {
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, mt := range mf.GetMetric() {
				labels := ""
				for i, lp := range mt.GetLabel() {
					if i > 0 {
						labels += ","
					}
					labels += fmt.Sprintf("%s=%q", lp.GetName(), lp.GetValue())
				}
				switch {
				case mt.Counter != nil:
					fmt.Printf("%s{%s} %g\n", name, labels, mt.Counter.GetValue())
				case mt.Histogram != nil:
					fmt.Printf("%s_count{%s} %d\n", name, labels, mt.Histogram.GetSampleCount())
				case mt.Gauge != nil && (name != "lbkit_backend_state" || mt.Gauge.GetValue() == 1):
					fmt.Printf("%s{%s} %g\n", name, labels, mt.Gauge.GetValue())
				}
			}
		}
	}
}

// Several balancers in one process: one Metrics each, told apart by a
// constant label.
func ExampleConfig() {
	reg := prometheus.NewRegistry()
	for _, upstream := range []string{"orders", "users"} {
		m, err := lbmetrics.New(lbmetrics.Config{ConstLabels: prometheus.Labels{"upstream": upstream}})
		if err != nil {
			panic(err)
		}
		reg.MustRegister(m)
		lb, err := m.Wrap(leastconn.New())
		if err != nil {
			panic(err)
		}
		if err := lb.Update(balancer.Endpoints(upstream + ".internal:8080")); err != nil {
			panic(err)
		}
		got, _ := lb.Pick(balancer.Request{})
		lb.Done(got, balancer.Result{Latency: time.Millisecond})
	}
	show(reg, "lbkit_picks_total")
	// Output:
	// lbkit_picks_total{backend="orders.internal:8080",upstream="orders"} 1
	// lbkit_picks_total{backend="users.internal:8080",upstream="users"} 1
}

// Health's admin methods, reached from the top of the stack: balancer.As
// walks the decorators by their Unwrap and finds health inside the
// metrics decorator.
func ExampleBalancer_Unwrap() {
	m, err := lbmetrics.New(lbmetrics.Config{})
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m)
	h, err := health.New(leastconn.New(), health.Config{OnChange: m.HealthChanged})
	if err != nil {
		panic(err)
	}
	lb, err := m.Wrap(h)
	if err != nil {
		panic(err)
	}
	defer lb.Close()
	if err := lb.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080")); err != nil {
		panic(err)
	}

	if h, ok := balancer.As[*health.Balancer](lb); ok {
		if err := h.Drain("10.0.0.2:8080"); err != nil {
			panic(err)
		}
	}
	show(reg, "lbkit_backend_state")
	// Output:
	// lbkit_backend_state{backend="10.0.0.1:8080",state="up"} 1
	// lbkit_backend_state{backend="10.0.0.2:8080",state="draining"} 1
}
