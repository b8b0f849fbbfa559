package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/bench"
	"github.com/lbkit/lbkit/examples/lbhttp"
	"github.com/lbkit/lbkit/examples/prometheus/lbmetrics"
	"github.com/lbkit/lbkit/health"
)

// Exit statuses of run.
const (
	exitOK    = 0
	exitError = 1 // a failure while running: an address is taken
	exitUsage = 2 // a bad flag
)

// shutdownGrace is how long requests in flight may take to finish once
// the proxy is asked to stop.
const shutdownGrace = 10 * time.Second

// config is the parsed command line.
type config struct {
	listen         string
	metricsListen  string
	backends       []balancer.Backend
	algo           bench.Algorithm
	trusted        []netip.Prefix
	healthPath     string
	healthInterval time.Duration
	maxAttempts    int
}

// parse reads the flags. Errors name the flag and say what is accepted.
func parse(args []string, stderr io.Writer) (config, error) {
	var (
		c                       config
		backends, algo, trusted string
	)
	fs := flag.NewFlagSet("lbkit-metrics-proxy", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run prints errors once, in its own words
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "`address` to serve the proxy on")
	fs.StringVar(&c.metricsListen, "metrics-listen", "127.0.0.1:9464", "`address` to serve /metrics on")
	fs.StringVar(&backends, "backends", "", "backends: `host:port[=weight],...`")
	fs.StringVar(&algo, "algo", "leastconn", "algorithm: "+strings.Join(algoNames(), ", "))
	fs.StringVar(&trusted, "trusted-proxies", "", "`CIDRs` whose X-Forwarded-For is believed, comma-separated")
	fs.StringVar(&c.healthPath, "health-path", "", "`path` to probe with GET on every backend (empty: no active checks)")
	fs.DurationVar(&c.healthInterval, "health-interval", health.DefaultInterval, "time between two probes of a backend")
	fs.IntVar(&c.maxAttempts, "max-attempts", lbhttp.DefaultMaxAttempts, "backends tried per request, the first included")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "Usage: lbkit-metrics-proxy -backends host:port[=weight],... [flags]\n\nFlags:\n")
			fs.SetOutput(stderr)
			fs.PrintDefaults()
		}
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q: every setting is a flag", fs.Arg(0))
	}
	if backends == "" {
		return c, errors.New("-backends is required")
	}
	var err error
	if c.backends, err = backendList(backends); err != nil {
		return c, fmt.Errorf("-backends: %w", err)
	}
	i := -1
	for j, a := range bench.Algorithms() {
		if a.Name == algo {
			i = j
		}
	}
	if i < 0 {
		return c, fmt.Errorf("-algo: unknown algorithm %q; one of %s", algo, strings.Join(algoNames(), ", "))
	}
	c.algo = bench.Algorithms()[i]
	if trusted != "" {
		for s := range strings.SplitSeq(trusted, ",") {
			p, err := netip.ParsePrefix(strings.TrimSpace(s))
			if err != nil {
				return c, fmt.Errorf("-trusted-proxies: %q is not a CIDR prefix such as 10.0.0.0/8", s)
			}
			c.trusted = append(c.trusted, p.Masked())
		}
	}
	if c.healthPath != "" && !strings.HasPrefix(c.healthPath, "/") {
		return c, fmt.Errorf("-health-path: %q does not start with /", c.healthPath)
	}
	if c.healthInterval < health.MinInterval {
		return c, fmt.Errorf("-health-interval: %v is below the minimum of %v", c.healthInterval, health.MinInterval)
	}
	if c.maxAttempts < 1 {
		return c, fmt.Errorf("-max-attempts: %d is below 1", c.maxAttempts)
	}
	return c, nil
}

func algoNames() []string {
	var names []string
	for _, a := range bench.Algorithms() {
		names = append(names, a.Name)
	}
	return names
}

// backendList reads "host:port[=weight],..." into endpoints that
// balancer.Validate accepts.
func backendList(s string) ([]balancer.Backend, error) {
	var ws []balancer.Weighted
	for item := range strings.SplitSeq(s, ",") {
		addr, weight, weighted := strings.Cut(strings.TrimSpace(item), "=")
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
			return nil, fmt.Errorf("%q is not host:port", addr)
		}
		w := 1
		if weighted {
			n, err := strconv.Atoi(weight)
			if err != nil {
				return nil, fmt.Errorf("%q: weight %q is not a whole number", item, weight)
			}
			w = n
		}
		ws = append(ws, balancer.Weighted{Addr: addr, Weight: w})
	}
	bs := balancer.WeightedEndpoints(ws...)
	return bs, balancer.Validate(bs)
}

// run is the whole program but its exit: it serves until ctx ends and
// returns the exit status.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	c, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "lbkit-metrics-proxy: %v\nRun lbkit-metrics-proxy -h for the flags.\n", err)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if err := serve(ctx, c, log, nil); err != nil {
		log.Error("lbkit-metrics-proxy: " + err.Error())
		return exitError
	}
	return exitOK
}

// addrs are the addresses serve listens on, for tests.
type addrs struct {
	proxy, metrics string
}

// serve builds the metrics, the health-checked picker and the proxy from
// c, and serves the proxy and /metrics until ctx ends. When listening is
// not nil it gets the addresses served on.
func serve(ctx context.Context, c config, log *slog.Logger, listening chan<- addrs) error {
	// The metrics first: health reports its changes to them.
	m, err := lbmetrics.New(lbmetrics.Config{ConstLabels: prometheus.Labels{"algo": c.algo.Name}})
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	hcfg := health.Config{
		OnChange: func(ch health.Change) {
			log.Info("backend state", "backend", ch.ID, "from", ch.Old, "to", ch.New, "reason", ch.Reason, "err", ch.Err)
			m.HealthChanged(ch)
		},
	}
	if c.healthPath != "" {
		hcfg.Probe = health.HTTP(health.HTTPCheck{Path: c.healthPath})
		hcfg.Interval = c.healthInterval
	}
	h, err := health.New(c.algo.New(), hcfg)
	if err != nil {
		return err
	}
	defer h.Close()
	// The decorator is the outermost layer: it sees every pick the proxy
	// makes, retries included, and every Done, before health does.
	lb, err := m.Wrap(h)
	if err != nil {
		return err
	}
	if err := lb.Update(c.backends); err != nil {
		return err
	}
	if err := h.Start(ctx); err != nil {
		return err
	}

	proxy, err := lbhttp.NewProxy(lb, lbhttp.Config{
		TrustedProxies: c.trusted,
		MaxAttempts:    c.maxAttempts,
		ErrorLog:       log,
	})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))

	pln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return err
	}
	mln, err := net.Listen("tcp", c.metricsListen)
	if err != nil {
		pln.Close()
		return err
	}
	servers := []*http.Server{
		{Handler: proxy, ReadHeaderTimeout: 10 * time.Second},
		{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
	}
	log.Info("listening", "proxy", pln.Addr().String(), "metrics", mln.Addr().String(), "algo", c.algo.Name, "backends", len(c.backends))
	if listening != nil {
		listening <- addrs{proxy: pln.Addr().String(), metrics: mln.Addr().String()}
	}
	served := make(chan error, len(servers))
	for i, ln := range []net.Listener{pln, mln} {
		go func() { served <- servers[i].Serve(ln) }()
	}
	pending := len(servers)
	select {
	case err = <-served: // one stopped on its own: stop the other too
		pending--
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	for _, srv := range servers {
		if serr := srv.Shutdown(sctx); err == nil {
			err = serr
		}
	}
	for range pending {
		<-served // http.ErrServerClosed, now that Shutdown was called
	}
	proxy.Transport.(*lbhttp.Transport).CloseIdleConnections()
	return err
}
