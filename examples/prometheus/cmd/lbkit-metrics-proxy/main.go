package main

import (
	"context"
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/prometheus/lbmetrics"
	"github.com/lbkit/lbkit/examples/proxy/proxycmd"
	"github.com/lbkit/lbkit/health"
)

func main() { proxycmd.Main(run) }

// run is the whole program but its exit: it parses args, serves until ctx
// ends (main: SIGINT or SIGTERM), and returns the exit status. The flags,
// the health-checked picker, the proxy and the shutdown are proxycmd's, as
// in examples/proxy; this command adds -metrics-listen and, through
// options, the metrics.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	f, metricsListen := flags()
	return f.Run(ctx, args, stderr, func(c proxycmd.Config) (proxycmd.Options, error) {
		return options(c, *metricsListen)
	})
}

// flags are examples/proxy's and -metrics-listen, whose value Parse sets.
func flags() (f *proxycmd.Flags, metricsListen *string) {
	f = proxycmd.NewFlags("lbkit-metrics-proxy")
	return f, f.FlagSet.String("metrics-listen", "127.0.0.1:9464", "`address` to serve /metrics on")
}

// options puts lbmetrics around the health-checked picker and serves its
// registry on metricsListen.
func options(c proxycmd.Config, metricsListen string) (proxycmd.Options, error) {
	m, err := lbmetrics.New(lbmetrics.Config{ConstLabels: prometheus.Labels{"algo": c.Algorithm.Name}})
	if err != nil {
		return proxycmd.Options{}, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return proxycmd.Options{
		// Health reports its changes to the metrics; the decorator is the
		// outermost layer, so it sees every pick the proxy makes, retries
		// included, and every Done, and it is given the backends.
		OnChange: m.HealthChanged,
		Wrap:     func(h *health.Balancer) (balancer.Balancer, error) { return m.Wrap(h) },
		// /metrics on a listener of its own: it neither shadows a backend
		// path of that name nor is reachable from the proxy's clients.
		Servers: []proxycmd.Server{{Name: "metrics", Addr: metricsListen, Handler: mux}},
	}, nil
}
