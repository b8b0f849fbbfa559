package proxycmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/lbhttp"
	"github.com/lbkit/lbkit/sticky"
)

// Exit statuses of Run.
const (
	ExitOK    = 0
	ExitError = 1 // a failure while serving: an address is taken, DNS fails at start
	ExitUsage = 2 // a bad flag
)

// ShutdownGrace is how long requests in flight may take to finish once the
// context given to Start or Serve ends.
const ShutdownGrace = 10 * time.Second

// Options are what a command adds to Start and Serve. The zero value serves
// the proxy alone.
type Options struct {
	// OnChange is told of every change of a backend's health state, after
	// Serve has logged it: lbmetrics' HealthChanged, for example. It runs
	// on health's goroutines, never under its lock, and must not block
	// for long (see health.Config.OnChange).
	OnChange func(health.Change)
	// Wrap puts a layer around the health-checked balancer, such as
	// lbmetrics' decorator. The proxy picks from, and reports Done to,
	// what Wrap returns, and the backends (static or from DNS) go to its
	// Update. Start and Close go to it too, if it has them, and it passes
	// them on to health as every decorator does (balancer's doc,
	// "Decorators"); health is started anyway if it did not. Nil: the
	// proxy uses the health.Balancer itself.
	Wrap func(*health.Balancer) (balancer.Balancer, error)
	// Servers are served beside the proxy, each on a listener of its own,
	// and shut down with it: /metrics, an admin page.
	Servers []Server
}

// Server is a handler served beside the proxy, on a listener of its own.
type Server struct {
	// Name says what it serves, in the log: "metrics".
	Name string
	// Addr is the address to listen on, as for net.Listen("tcp", Addr).
	Addr string
	// Handler answers its requests.
	Handler http.Handler
}

// Main runs a command's run function with a context that ends on SIGINT or
// SIGTERM, the arguments after the program name and os.Stderr, and exits
// with the status run returns. A command's main is then one line, and its
// tests call run:
//
//	func main() { proxycmd.Main(run) }
func Main(run func(ctx context.Context, args []string, stderr io.Writer) int) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(code)
}

// Run is the whole of a command but its exit: it parses args, gets the
// command's Options from options (nil: none), and Serves until ctx ends,
// logging on stderr. It returns the exit status: ExitUsage after a bad flag,
// with one line on stderr naming it; ExitOK after -h, or once Serve has
// stopped at the end of ctx; ExitError, logged, when options or Serve fails.
func (f *Flags) Run(ctx context.Context, args []string, stderr io.Writer, options func(Config) (Options, error)) int {
	c, err := f.Parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "%[1]s: %[2]v\nRun %[1]s -h for the flags.\n", f.name, err)
		return ExitUsage
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	var o Options
	if options != nil {
		o, err = options(c)
	}
	if err == nil {
		err = Serve(ctx, c, log, o)
	}
	if err != nil {
		log.Error(f.name + ": " + err.Error())
		return ExitError
	}
	return ExitOK
}

// Serve is Start and Wait: it serves until ctx ends, or one of the servers
// stops on its own, and returns once everything has stopped.
func Serve(ctx context.Context, c Config, log *slog.Logger, o Options) error {
	p, err := Start(ctx, c, log, o)
	if err != nil {
		return err
	}
	return p.Wait()
}

// Proxy is a running proxy, as Start returns it.
type Proxy struct {
	// Addrs are the addresses served on: the proxy's first, then each of
	// Options.Servers' in order. A port 0 in Config.Listen or Server.Addr
	// is here the port the system chose.
	Addrs []string

	done chan struct{} // closed once everything has stopped
	err  error         // why, written before done is closed
}

// Done returns a channel that is closed once the proxy has stopped: its
// servers, its health checks and its DNS refresher.
func (p *Proxy) Done() <-chan struct{} { return p.done }

// Wait waits for Done, and returns nil if the proxy stopped because its
// context ended and every request in flight finished within ShutdownGrace;
// otherwise the error of the server that stopped on its own, or of the
// shutdown.
func (p *Proxy) Wait() error {
	<-p.done
	return p.err
}

// Start builds the picker, the health checks and the proxy c describes,
// with o's additions, listens on c.Listen and on every o.Servers address,
// logs where, and returns while they serve in the background. When ctx
// ends, or one server stops on its own, every server stops taking
// connections, requests in flight get up to ShutdownGrace to finish, and
// then the health checks and the DNS refresher, which run on through the
// drain, stop; then Done is closed.
//
// Start logs backend state changes, DNS failures and the proxy's errors
// (lbhttp.Config.ErrorLog) on log; nil means slog.Default(). If anything
// fails (an address cannot be listened on, a -dns name does not resolve,
// o.Wrap fails), Start returns the error with nothing left running or
// listening.
func Start(ctx context.Context, c Config, log *slog.Logger, o Options) (p *Proxy, err error) {
	if log == nil {
		log = slog.Default()
	}
	if c.Algorithm.New == nil {
		return nil, errors.New("proxycmd: Config.Algorithm has no New")
	}
	var cleanups []func() // what to stop, in the order it started
	// The health checks and the DNS refresher outlive ctx: they stop only
	// once the requests in flight have drained (serveAll has returned),
	// so that a draining proxy still ejects a backend that dies.
	bg, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	cleanups = append(cleanups, stopBg)
	cleanup := func() {
		for _, f := range slices.Backward(cleanups) {
			f()
		}
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()

	// The algorithm sees only eligible backends: health wraps it, keeps
	// the full set, and Updates it as backends fail and recover.
	hcfg := health.Config{
		OnChange: func(ch health.Change) {
			log.Info("backend state", "backend", ch.ID, "from", ch.Old, "to", ch.New, "reason", ch.Reason, "err", ch.Err)
			if o.OnChange != nil {
				o.OnChange(ch)
			}
		},
	}
	if c.HealthPath != "" {
		hcfg.Probe = health.HTTP(health.HTTPCheck{Path: c.HealthPath})
		hcfg.Interval = c.HealthInterval
	}
	algo := c.Algorithm.New()
	if c.StickyCookie != "" {
		// Inside health, which hands it the eligible backends: a
		// session's backend while it is one of them.
		if algo, err = sticky.New(algo); err != nil {
			return nil, err
		}
	}
	h, err := health.New(algo, hcfg)
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, func() { h.Close() })
	// A decorator is the outermost layer: it sees every pick the proxy
	// makes, retries included, and every Done, before health does; and it
	// learns the backends through its own Update.
	var lb balancer.Balancer = h
	if o.Wrap != nil {
		if lb, err = o.Wrap(h); err != nil {
			return nil, err
		}
		if lb == nil {
			return nil, errors.New("proxycmd: Options.Wrap returned no balancer")
		}
		// Decorators pass Close on (balancer's doc, "Decorators"): closing
		// the top closes health, and whatever the decorator runs itself.
		cleanups = append(cleanups, func() { balancer.CloseInner(lb) })
	}
	if c.DNSHost == "" {
		if err := lb.Update(c.Backends); err != nil {
			return nil, err
		}
	} else {
		r, err := startRefresher(ctx, bg, c, lb, log)
		if err != nil {
			return nil, err
		}
		cleanups = append(cleanups, func() { r.Close() })
	}
	// Start the top, which starts health inside it, as every lbkit
	// decorator passes Start on; then health itself, unless that did, so
	// that a decorator of the command's own that does not pass Start on
	// still gets working health checks.
	if o.Wrap != nil {
		if err := balancer.StartInner(bg, lb); err != nil {
			return nil, err
		}
	}
	if err := h.Start(bg); err != nil && !errors.Is(err, balancer.ErrStarted) {
		return nil, err
	}

	pc, err := c.proxyConfig()
	if err != nil {
		return nil, err
	}
	pc.Key, pc.TrustedProxies, pc.ErrorLog = c.KeyFunc(), c.TrustedProxies, log
	proxy, err := lbhttp.NewProxy(lb, pc)
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, proxy.Transport.(*lbhttp.Transport).CloseIdleConnections)
	// What the ReverseProxy and the servers log themselves (a body that
	// breaks off, a handler's panic) goes to the same logger, at Warn,
	// not through package log.
	errorLog := slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	proxy.ErrorLog = errorLog

	servers := append([]Server{{Name: "proxy", Addr: c.Listen, Handler: proxy}}, o.Servers...)
	lns := make([]net.Listener, len(servers))
	p = &Proxy{Addrs: make([]string, len(servers)), done: make(chan struct{})}
	logged := []any{"algo", c.Algorithm.Name, "backends", len(c.Backends)}
	if c.DNSHost != "" {
		logged = append(logged, "dns", c.DNSHost)
	}
	for i, s := range servers {
		if lns[i], err = net.Listen("tcp", s.Addr); err != nil {
			return nil, err
		}
		cleanups = append(cleanups, func() { lns[i].Close() }) // for an error; Shutdown closes it too
		p.Addrs[i] = lns[i].Addr().String()
		logged = append(logged, s.Name, p.Addrs[i])
	}
	log.Info("listening", logged...)
	go func() {
		p.err = serveAll(ctx, servers, lns, errorLog)
		cleanup()
		close(p.done)
	}()
	return p, nil
}

// startRefresher gives lb the addresses of c.DNSHost, failing fast (or
// when ctx ends) on a name that does not resolve at all, and keeps them up
// to date until bg ends or the returned Refresher is closed.
func startRefresher(ctx, bg context.Context, c Config, lb balancer.Updater, log *slog.Logger) (*lbhttp.Refresher, error) {
	r, err := lbhttp.NewRefresher(lb, lbhttp.RefresherConfig{
		Host: c.DNSHost, Port: c.DNSPort, Interval: c.DNSInterval,
		OnError: func(err error) { log.Warn("dns refresh failed; the previous set stays", "err", err) },
	})
	if err != nil {
		return nil, err
	}
	if err := r.Refresh(ctx); err != nil {
		return nil, err
	}
	if err := r.Start(bg); err != nil {
		return nil, err
	}
	return r, nil
}

// serveAll serves each server on its listener until ctx ends or one stops
// on its own; then it shuts them all down and waits for them. The servers
// log their own errors on errorLog.
func serveAll(ctx context.Context, servers []Server, lns []net.Listener, errorLog *stdlog.Logger) error {
	srvs := make([]*http.Server, len(servers))
	served := make(chan error, len(servers))
	for i, s := range servers {
		srvs[i] = &http.Server{Handler: s.Handler, ReadHeaderTimeout: 10 * time.Second, ErrorLog: errorLog}
		go func() { served <- srvs[i].Serve(lns[i]) }()
	}
	pending := len(srvs)
	var err error
	select {
	case err = <-served: // one stopped on its own: stop the others too
		pending--
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownGrace)
	defer cancel()
	for _, srv := range srvs {
		if serr := srv.Shutdown(sctx); err == nil {
			err = serr
		}
	}
	for range pending {
		<-served // http.ErrServerClosed, now that Shutdown was called
	}
	return err
}
