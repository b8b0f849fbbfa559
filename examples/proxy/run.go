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

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/bench"
	"github.com/lbkit/lbkit/examples/lbhttp"
	"github.com/lbkit/lbkit/health"
)

// Exit statuses of run.
const (
	exitOK    = 0
	exitError = 1 // a failure while running: the address is taken, DNS fails at start
	exitUsage = 2 // a bad flag
)

// shutdownGrace is how long requests in flight may take to finish once
// the proxy is asked to stop.
const shutdownGrace = 10 * time.Second

// config is the parsed command line.
type config struct {
	listen         string
	backends       []balancer.Backend // static set, or nil with dnsHost
	dnsHost        string
	dnsPort        uint16
	dnsInterval    time.Duration
	algo           bench.Algorithm
	keyKind        string // "ip", "header" or "cookie"
	keyName        string
	trusted        []netip.Prefix
	healthPath     string
	healthInterval time.Duration
	maxAttempts    int
}

// parse reads the flags. Errors are for the user: they name the flag and
// say what is accepted.
func parse(args []string, stderr io.Writer) (config, error) {
	var (
		c                                 config
		backends, dns, algo, key, trusted string
	)
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // run prints errors once, in its own words
	fs.StringVar(&c.listen, "listen", "127.0.0.1:8080", "`address` to serve on")
	fs.StringVar(&backends, "backends", "", "static backends: `host:port[=weight],...`")
	fs.StringVar(&dns, "dns", "", "resolve backends from DNS: `host:port` (instead of -backends)")
	fs.DurationVar(&c.dnsInterval, "dns-interval", lbhttp.DefaultRefreshInterval, "time between DNS resolutions")
	fs.StringVar(&algo, "algo", "leastconn", "algorithm: "+strings.Join(algoNames(), ", "))
	fs.StringVar(&key, "key", "ip", "affinity key: ip, header:NAME or cookie:NAME")
	fs.StringVar(&trusted, "trusted-proxies", "", "`CIDRs` or addresses whose X-Forwarded-For is believed, comma-separated")
	fs.StringVar(&c.healthPath, "health-path", "", "`path` to probe with GET on every backend (empty: no active checks)")
	fs.DurationVar(&c.healthInterval, "health-interval", health.DefaultInterval, "time between two probes of a backend")
	fs.IntVar(&c.maxAttempts, "max-attempts", lbhttp.DefaultMaxAttempts, "backends tried per request, the first included")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "Usage: proxy -backends host:port[=weight],... [flags]\n   or: proxy -dns host:port [flags]\n\nFlags:\n")
			fs.SetOutput(stderr)
			fs.PrintDefaults()
		}
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q: every setting is a flag", fs.Arg(0))
	}

	var err error
	switch {
	case backends == "" && dns == "":
		return c, errors.New("-backends or -dns is required")
	case backends != "" && dns != "":
		return c, errors.New("-backends and -dns exclude each other")
	case backends != "":
		if c.backends, err = parseBackends(backends); err != nil {
			return c, fmt.Errorf("-backends: %w", err)
		}
	default:
		host, port, err := splitHostPort(dns)
		if err != nil {
			return c, fmt.Errorf("-dns: %w", err)
		}
		c.dnsHost, c.dnsPort = host, port
		if c.dnsInterval <= 0 {
			return c, fmt.Errorf("-dns-interval: %v is not positive", c.dnsInterval)
		}
	}

	found := false
	for _, a := range bench.Algorithms() {
		if a.Name == algo {
			c.algo, found = a, true
		}
	}
	if !found {
		return c, fmt.Errorf("-algo: unknown algorithm %q; one of %s", algo, strings.Join(algoNames(), ", "))
	}

	c.keyKind, c.keyName, _ = strings.Cut(key, ":")
	switch {
	case key == "ip":
	case (c.keyKind == "header" || c.keyKind == "cookie") && c.keyName != "":
		if c.algo.Name == "iphash" {
			return c, fmt.Errorf("-key %s: iphash hashes client addresses; use -key ip, or -algo ring or maglev for a %s key", key, c.keyKind)
		}
	default:
		return c, fmt.Errorf("-key: %q is not ip, header:NAME or cookie:NAME", key)
	}

	if trusted != "" {
		for s := range strings.SplitSeq(trusted, ",") {
			p, err := parsePrefix(strings.TrimSpace(s))
			if err != nil {
				return c, fmt.Errorf("-trusted-proxies: %w", err)
			}
			c.trusted = append(c.trusted, p)
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

// parseBackends reads "host:port[=weight],...".
func parseBackends(s string) ([]balancer.Backend, error) {
	var bs []balancer.Backend
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		addr, w, hasWeight := strings.Cut(item, "=")
		if _, _, err := splitHostPort(addr); err != nil {
			return nil, err
		}
		weight := 1
		if hasWeight {
			n, err := strconv.Atoi(w)
			if err != nil || n < 1 || n > balancer.MaxWeight {
				return nil, fmt.Errorf("%q: weight %q is not a whole number from 1 to %d", item, w, balancer.MaxWeight)
			}
			weight = n
		}
		bs = append(bs, balancer.NewEndpoint(addr, weight))
	}
	if err := balancer.Validate(bs); err != nil {
		return nil, err
	}
	return bs, nil
}

// splitHostPort checks "host:port" with a non-empty host and a port from 1
// to 65535.
func splitHostPort(s string) (string, uint16, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return "", 0, fmt.Errorf("%q is not host:port", s)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return "", 0, fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, port)
	}
	return host, uint16(n), nil
}

// parsePrefix reads a CIDR, or an address meaning just itself.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR prefix", s)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is neither an address nor a CIDR prefix", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// keyFunc builds the affinity key the flags ask for. A header or cookie
// key falls back to the client address when the request lacks it, so that
// such clients still spread.
func (c config) keyFunc() lbhttp.KeyFunc {
	ip := lbhttp.ClientIP(c.trusted...)
	switch c.keyKind {
	case "header":
		return lbhttp.First(lbhttp.Header(c.keyName), ip)
	case "cookie":
		return lbhttp.First(lbhttp.Cookie(c.keyName), ip)
	}
	return ip
}

// run is the whole program but flag parsing's exit: it serves until ctx
// ends and returns the exit status.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	c, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "proxy: %v\nRun proxy -h for the flags.\n", err)
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if err := serve(ctx, c, log, nil); err != nil {
		log.Error("proxy: " + err.Error())
		return exitError
	}
	return exitOK
}

// serve builds the picker, the health checks and the proxy from c and
// serves until ctx ends. When listening is not nil it gets the address
// served on, for tests.
func serve(ctx context.Context, c config, log *slog.Logger, listening chan<- string) error {
	// The algorithm sees only eligible backends: health wraps it, keeps
	// the full set, and Updates it as backends fail and recover.
	hcfg := health.Config{
		OnChange: func(ch health.Change) {
			log.Info("proxy: backend state", "backend", ch.ID, "from", ch.Old, "to", ch.New, "reason", ch.Reason, "err", ch.Err)
		},
	}
	if c.healthPath != "" {
		hcfg.Probe = health.HTTP(health.HTTPCheck{Path: c.healthPath})
		hcfg.Interval = c.healthInterval
	}
	picker, err := health.New(c.algo.New(), hcfg)
	if err != nil {
		return err
	}
	defer picker.Close()

	if c.backends != nil {
		if err := picker.Update(c.backends); err != nil {
			return err
		}
	} else {
		r, err := lbhttp.NewRefresher(picker, lbhttp.RefresherConfig{
			Host: c.dnsHost, Port: c.dnsPort, Interval: c.dnsInterval,
			OnError: func(err error) { log.Warn("proxy: " + err.Error()) },
		})
		if err != nil {
			return err
		}
		if err := r.Refresh(ctx); err != nil {
			return err // fail fast on a name that does not resolve at all
		}
		if err := r.Start(ctx); err != nil {
			return err
		}
		defer r.Close()
	}
	if err := picker.Start(ctx); err != nil {
		return err
	}

	proxy, err := lbhttp.NewProxy(picker, lbhttp.Config{
		Key:            c.keyFunc(),
		TrustedProxies: c.trusted,
		MaxAttempts:    c.maxAttempts,
		ErrorLog:       log,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", c.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	log.Info("proxy: listening", "addr", ln.Addr().String(), "algo", c.algo.Name, "backends", len(c.backends), "dns", c.dnsHost)
	if listening != nil {
		listening <- ln.Addr().String()
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	err = srv.Shutdown(sctx)
	<-served
	proxy.Transport.(*lbhttp.Transport).CloseIdleConnections()
	return err
}
