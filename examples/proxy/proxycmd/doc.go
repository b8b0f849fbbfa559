// Package proxycmd is the command line and the serving loop of an lbkit
// load-balancing HTTP proxy, so that a command is a main of a few lines:
// the flags (-listen, -backends or -dns, -algo, -key, -trusted-proxies,
// -health-path, -health-interval, -max-attempts, the timeouts, the retry
// budget, hedging, -route-header and -sticky-cookie), an algorithm of
// catalog.Algorithms() wrapped in health, lbhttp.NewProxy in front of it, and
// a graceful shutdown on SIGINT or SIGTERM. Command proxy (examples/proxy)
// is this package and nothing else; lbkit-metrics-proxy (examples/prometheus)
// adds a flag, Prometheus metrics around the picker, and /metrics.
//
//	func main() { proxycmd.Main(run) }
//
//	// run is the whole program but its exit: tests call it.
//	func run(ctx context.Context, args []string, stderr io.Writer) int {
//		return proxycmd.NewFlags("myproxy").Run(ctx, args, stderr, nil)
//	}
//
// A command with more to do adds its own flags to Flags.FlagSet before
// parsing, and returns Options from the function it passes to Run, which is
// called with the parsed Config:
//
//	f := proxycmd.NewFlags("myproxy")
//	admin := f.FlagSet.String("admin-listen", "127.0.0.1:9000", "`address` of the admin page")
//	return f.Run(ctx, args, stderr, func(c proxycmd.Config) (proxycmd.Options, error) {
//		return proxycmd.Options{
//			OnChange: func(ch health.Change) { ... },                             // every health state change
//			Wrap:     func(h *health.Balancer) (balancer.Balancer, error) { ... }, // a decorator, outermost
//			Servers:  []proxycmd.Server{{Name: "admin", Addr: *admin, Handler: mux}},
//		}, nil
//	})
//
// Tests, and programs that do more than serve, call Start instead of Run:
// it returns once every listener is open, with the addresses (port 0
// resolved), and the proxy stops when its context ends (Done, Wait).
//
// What the package does, so that a command does not have to:
//
//   - A bad flag prints one line on stderr naming the flag and saying what is
//     accepted, then "Run NAME -h for the flags.", and Run returns ExitUsage
//     (2) without serving. -h prints the usage, the command's own flags
//     included, and returns ExitOK.
//   - The algorithm sees only the backends fit to serve: health wraps it
//     (passive ejection always, active GET probes of -health-path when set)
//     and every state change is logged. Options.Wrap goes around health, so a
//     decorator sees every pick, retries included, and every Done; the
//     backends, static or resolved from DNS, go to the outermost layer's
//     Update. A -dns name that does not resolve at start is an error.
//   - The proxy is lbhttp.NewProxy with the -key affinity key, the trusted
//     proxies and -max-attempts: Done when each response body ends, a
//     refused connection retried on another backend, 503 with no backend.
//     Its timeouts are on by default, lbhttp's: -attempt-timeout 5s to a
//     backend's response headers, -request-timeout 15s over every attempt,
//     -idle-timeout 60s of a body that sends nothing (0 turns each off);
//     a timeout is a failure of that backend (504 when no attempt is
//     left), which passive ejection counts. The first -hold-bytes (64 KiB)
//     of a response to an idempotent request are read within the attempt
//     timeout before the response is passed on, so that a body that
//     stalls there is retried elsewhere (0 turns it off: do so for
//     streams that send their headers first and their body slowly). So is the retry budget:
//     retries and hedges at most -retry-budget (0.2) of the requests plus
//     -retry-budget-min (10) a second, over 10 s (-retry-budget 0 turns it
//     off). Hedging is off unless -hedge-after or -hedge-percentile is set.
//     It sends over HTTP/1.1, keeping up to 256 idle connections per
//     backend (lbhttp.NewBase), or over HTTP/2 without TLS with -h2c.
//     -sticky-cookie NAME puts a sticky.Balancer between health and the
//     algorithm and turns lbhttp's sticky cookie on (lbhttp.Config.Sticky).
//   - The proxy and each of Options.Servers get a listener of their own; if
//     any address cannot be listened on, nothing is served and Run returns
//     ExitError. When the context ends (Main: SIGINT or SIGTERM), or one
//     server stops on its own, every server stops taking connections and
//     requests in flight get up to ShutdownGrace to finish; then the health
//     checks and the DNS refresher stop, and Serve returns. They run on
//     through the drain, so a backend that dies meanwhile is still
//     ejected.
//
// Config is plain data: a program may build one itself, or change the one
// Parse returns, before calling Start or Serve.
package proxycmd
