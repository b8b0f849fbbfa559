package proxycmd

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/lbhttp"
)

// DefaultListen is where the proxy serves without -listen: loopback only,
// so that nothing is exposed by surprise, on the port of the README's
// quick start (and of lbkit-k8s-demo), clear of the 8080 many backends
// take.
const DefaultListen = "127.0.0.1:8000"

// MinDNSInterval is the shortest -dns-interval Parse accepts. Each lookup
// is bounded by the shorter of lbhttp.DefaultRefreshTimeout and the
// interval, so a much shorter interval would time lookups out and query
// the resolver back to back.
const MinDNSInterval = time.Second

// Config is a parsed command line: what Serve builds and serves.
type Config struct {
	// Listen is the address the proxy serves on (-listen).
	Listen string
	// Backends is the static set (-backends): balancer.Endpoints whose ID
	// is "host:port" as balancer.CanonicalAddr spells it, with their
	// weights. Nil when DNSHost is set.
	Backends []balancer.Backend
	// DNSHost is the name resolved for the backends (-dns), every
	// DNSInterval (-dns-interval, at least MinDNSInterval), each lookup
	// bounded by the shorter of lbhttp.DefaultRefreshTimeout and
	// DNSInterval; each address serves on DNSPort. Empty with -backends.
	DNSHost     string
	DNSPort     uint16
	DNSInterval time.Duration
	// Algorithm is the picker (-algo), one of catalog.Algorithms().
	Algorithm catalog.Algorithm
	// Key is the affinity key as given (-key): "ip", "header:NAME" or
	// "cookie:NAME". KeyFunc turns it into an lbhttp.KeyFunc.
	Key string
	// TrustedProxies are the peers whose X-Forwarded-For is believed
	// (-trusted-proxies): for the ip key, and to forward earlier hops.
	TrustedProxies []netip.Prefix
	// HealthPath is the path probed with GET on every backend
	// (-health-path). Empty: no active checks; passive ejection still runs.
	HealthPath string
	// HealthInterval is the time between two probes of a backend
	// (-health-interval).
	HealthInterval time.Duration
	// MaxAttempts bounds the backends one request is tried on, the first
	// included (-max-attempts).
	MaxAttempts int

	// AttemptTimeout, RequestTimeout and IdleTimeout are the lbhttp.Config
	// fields (-attempt-timeout, -request-timeout, -idle-timeout): zero is
	// lbhttp's default, negative none (what a flag set to 0 gives).
	AttemptTimeout, RequestTimeout, IdleTimeout time.Duration
	// HoldBytes is lbhttp.Config's (-hold-bytes): how much of a response
	// to a GET the proxy reads within the attempt timeout before it
	// passes the response on, so that a stall inside it is retried. Zero
	// is lbhttp's default, negative none (what the flag set to 0 gives).
	HoldBytes int
	// RetryBudget is the share of requests that may be retried or hedged
	// (-retry-budget), RetryBudgetMin the retries a second allowed on top
	// (-retry-budget-min): an lbhttp.BudgetConfig's Ratio and
	// MinPerSecond, zero for its defaults. NoBudget turns the budget off
	// (-retry-budget 0).
	RetryBudget, RetryBudgetMin float64
	NoBudget                    bool
	// HedgeAfter and HedgePercentile turn hedging on (-hedge-after,
	// -hedge-percentile), as in lbhttp.Config. Zero: off.
	HedgeAfter      time.Duration
	HedgePercentile float64
	// H2C sends to the backends over HTTP/2 without TLS (-h2c), as
	// lbhttp.Config.H2C: every backend must accept it.
	H2C bool
	// RouteHeader is lbhttp.Config.RouteHeader (-route-header): the
	// header whose value is each request's balancer.Request.Route, for a
	// picker that routes by label (a route.Balancer a command's Wrap
	// puts in). Empty: off.
	RouteHeader string
	// StickyCookie turns sticky sessions on, by a cookie of this name
	// (-sticky-cookie): the algorithm is wrapped in a sticky.Balancer
	// inside health, and lbhttp.Config.Sticky set, with a key drawn at
	// start, so that the cookies hold for this process only. Empty: off.
	StickyCookie string
}

// proxyConfig returns c's settings of the lbhttp Transport: timeouts,
// budget, hedging and the protocol to the backends.
func (c Config) proxyConfig() (lbhttp.Config, error) {
	pc := lbhttp.Config{
		MaxAttempts:     c.MaxAttempts,
		AttemptTimeout:  c.AttemptTimeout,
		RequestTimeout:  c.RequestTimeout,
		IdleTimeout:     c.IdleTimeout,
		HoldBytes:       c.HoldBytes,
		NoBudget:        c.NoBudget,
		HedgeAfter:      c.HedgeAfter,
		HedgePercentile: c.HedgePercentile,
		H2C:             c.H2C,
		RouteHeader:     c.RouteHeader,
	}
	if c.StickyCookie != "" {
		pc.Sticky = &lbhttp.StickyConfig{Name: c.StickyCookie}
	}
	if !c.NoBudget {
		b, err := lbhttp.NewBudget(lbhttp.BudgetConfig{Ratio: c.RetryBudget, MinPerSecond: c.RetryBudgetMin})
		if err != nil {
			return lbhttp.Config{}, err
		}
		pc.Budget = b
	}
	return pc, nil
}

// KeyFunc returns the affinity key c.Key names. A header or cookie key falls
// back to the client address when the request lacks it, so that such
// clients still spread; the address is read from X-Forwarded-For only when
// the peer is one of c.TrustedProxies.
func (c Config) KeyFunc() lbhttp.KeyFunc {
	ip := lbhttp.ClientIP(c.TrustedProxies...)
	kind, name, _ := strings.Cut(c.Key, ":")
	switch kind {
	case "header":
		return lbhttp.First(lbhttp.Header(name), ip)
	case "cookie":
		return lbhttp.First(lbhttp.Cookie(name), ip)
	}
	return ip
}

// Flags is a proxy's command line: a flag set holding lbkit's flags, to
// which a command adds its own before Parse. Use one Flags for one Parse.
type Flags struct {
	// FlagSet holds the flags, and parses with flag.ContinueOnError:
	// define a command's own flags on it, and read them after Parse.
	// Parse it only through Flags.Parse or Flags.Run, which check and
	// convert lbkit's flags.
	FlagSet *flag.FlagSet

	name string
	c    Config // filled by the flags that need no conversion
	// The flags read as text, converted by Parse.
	backends, dns, algo, trusted string
}

// NewFlags returns the flags of a command called name, which Parse's usage
// and Run's messages show.
func NewFlags(name string) *Flags {
	f := &Flags{name: name, FlagSet: flag.NewFlagSet(name, flag.ContinueOnError)}
	fs := f.FlagSet
	fs.SetOutput(io.Discard) // Run prints errors once, in its own words
	fs.StringVar(&f.c.Listen, "listen", DefaultListen, "`address` to serve the proxy on")
	fs.StringVar(&f.backends, "backends", "", "static backends: `host:port[=weight],...`")
	fs.StringVar(&f.dns, "dns", "", "resolve backends from DNS: `host:port` (instead of -backends)")
	fs.DurationVar(&f.c.DNSInterval, "dns-interval", lbhttp.DefaultRefreshInterval, "time between DNS resolutions, at least "+MinDNSInterval.String())
	fs.StringVar(&f.algo, "algo", "leastconn", "algorithm: "+strings.Join(algoNames(), ", "))
	fs.StringVar(&f.c.Key, "key", "ip", "affinity key: ip, header:NAME or cookie:NAME")
	fs.StringVar(&f.trusted, "trusted-proxies", "", "`CIDRs` or addresses whose X-Forwarded-For is believed, comma-separated")
	fs.StringVar(&f.c.HealthPath, "health-path", "", "`path` to probe with GET on every backend (empty: no active checks)")
	fs.DurationVar(&f.c.HealthInterval, "health-interval", health.DefaultInterval, "time between two probes of a backend")
	fs.IntVar(&f.c.MaxAttempts, "max-attempts", lbhttp.DefaultMaxAttempts, "backends tried per request, the first included")
	fs.DurationVar(&f.c.AttemptTimeout, "attempt-timeout", lbhttp.DefaultAttemptTimeout, "longest wait for a backend's response headers, per attempt (0: none)")
	fs.DurationVar(&f.c.RequestTimeout, "request-timeout", lbhttp.DefaultRequestTimeout, "longest wait for the response headers over every attempt (0: none)")
	fs.DurationVar(&f.c.IdleTimeout, "idle-timeout", lbhttp.DefaultIdleTimeout, "longest a backend may leave a response body waiting (0: none)")
	fs.IntVar(&f.c.HoldBytes, "hold-bytes", lbhttp.DefaultHoldBytes, "`bytes` of a response to an idempotent request read within -attempt-timeout before it is passed on, so that a stall inside them is retried (0: none; turn it off for streams)")
	fs.Float64Var(&f.c.RetryBudget, "retry-budget", lbhttp.DefaultBudgetRatio, "`share` of requests that may be retried or hedged (0: no budget)")
	fs.Float64Var(&f.c.RetryBudgetMin, "retry-budget-min", lbhttp.DefaultBudgetMinPerSecond, "retries a second allowed beyond the budget's share")
	fs.DurationVar(&f.c.HedgeAfter, "hedge-after", 0, "send a hedge to another backend after this wait for the headers (0: no hedging)")
	fs.Float64Var(&f.c.HedgePercentile, "hedge-percentile", 0, "hedge after this `percentile` of recent latencies, e.g. 95 (0: no hedging)")
	fs.BoolVar(&f.c.H2C, "h2c", false, "send to the backends over HTTP/2 without TLS (every backend must accept it)")
	fs.StringVar(&f.c.RouteHeader, "route-header", "", "`header` whose value names the set of backends a request asks for, for a picker that routes by label (empty: off)")
	fs.StringVar(&f.c.StickyCookie, "sticky-cookie", "", "pin each client session to a backend by a cookie of this `name` (empty: off)")
	return f
}

// Parse parses args and checks lbkit's flags. Its errors are for the user:
// they name the flag and say what is accepted. On -h it prints the usage,
// the command's own flags included, on stderr and returns flag.ErrHelp.
func (f *Flags) Parse(args []string, stderr io.Writer) (Config, error) {
	if err := f.FlagSet.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "Usage: %[1]s -backends host:port[=weight],... [flags]\n   or: %[1]s -dns host:port [flags]\n\nFlags:\n", f.name)
			f.FlagSet.SetOutput(stderr)
			f.FlagSet.PrintDefaults()
			f.FlagSet.SetOutput(io.Discard)
		}
		return Config{}, err
	}
	if f.FlagSet.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected argument %q: every setting is a flag", f.FlagSet.Arg(0))
	}
	c := f.c
	if err := f.convert(&c); err != nil {
		return Config{}, err
	}
	return c, nil
}

// convert fills c from the flags read as text, and checks the others.
func (f *Flags) convert(c *Config) error {
	var err error
	switch {
	case f.backends == "" && f.dns == "":
		return errors.New("-backends or -dns is required")
	case f.backends != "" && f.dns != "":
		return errors.New("-backends and -dns exclude each other")
	case f.backends != "":
		if c.Backends, err = parseBackends(f.backends); err != nil {
			return fmt.Errorf("-backends: %w", err)
		}
	default:
		if c.DNSHost, c.DNSPort, err = splitHostPort(f.dns); err != nil {
			return fmt.Errorf("-dns: %w", err)
		}
		if c.DNSInterval < MinDNSInterval {
			return fmt.Errorf("-dns-interval: %v is below the minimum of %v", c.DNSInterval, MinDNSInterval)
		}
	}

	var found bool
	if c.Algorithm, found = catalog.Lookup(f.algo); !found {
		return fmt.Errorf("-algo: unknown algorithm %q; one of %s", f.algo, strings.Join(algoNames(), ", "))
	}

	kind, name, _ := strings.Cut(c.Key, ":")
	switch {
	case c.Key == "ip":
	case (kind == "header" || kind == "cookie") && name != "":
		if c.Algorithm.Name == "iphash" {
			return fmt.Errorf("-key %s: iphash hashes client addresses; use -key ip, or -algo ring or maglev for a %s key", c.Key, kind)
		}
	default:
		return fmt.Errorf("-key: %q is not ip, header:NAME or cookie:NAME", c.Key)
	}

	if f.trusted != "" {
		for s := range strings.SplitSeq(f.trusted, ",") {
			p, err := parsePrefix(strings.TrimSpace(s))
			if err != nil {
				return fmt.Errorf("-trusted-proxies: %w", err)
			}
			c.TrustedProxies = append(c.TrustedProxies, p)
		}
	}

	if c.HealthPath != "" && !strings.HasPrefix(c.HealthPath, "/") {
		return fmt.Errorf("-health-path: %q does not start with /", c.HealthPath)
	}
	if c.HealthInterval < health.MinInterval {
		return fmt.Errorf("-health-interval: %v is below the minimum of %v", c.HealthInterval, health.MinInterval)
	}
	if c.MaxAttempts < 1 {
		return fmt.Errorf("-max-attempts: %d is below 1", c.MaxAttempts)
	}
	// A timeout flag's 0 means none, which lbhttp.Config spells negative.
	for _, d := range []struct {
		flag string
		v    *time.Duration
	}{{"-attempt-timeout", &c.AttemptTimeout}, {"-request-timeout", &c.RequestTimeout}, {"-idle-timeout", &c.IdleTimeout}} {
		switch {
		case *d.v < 0:
			return fmt.Errorf("%s: %v is negative; 0 turns it off", d.flag, *d.v)
		case *d.v == 0:
			*d.v = -1
		}
	}
	switch {
	case c.HoldBytes < 0:
		return fmt.Errorf("-hold-bytes: %d is negative; 0 turns it off", c.HoldBytes)
	case c.HoldBytes > lbhttp.MaxHoldBytes:
		return fmt.Errorf("-hold-bytes: %d is above %d", c.HoldBytes, lbhttp.MaxHoldBytes)
	case c.HoldBytes == 0:
		c.HoldBytes = -1
	}
	switch {
	case c.RetryBudget < 0 || math.IsNaN(c.RetryBudget) || math.IsInf(c.RetryBudget, 0):
		return fmt.Errorf("-retry-budget: %v is not a share of 0 (no budget) or more", c.RetryBudget)
	case c.RetryBudget == 0:
		c.NoBudget = true
	case !(c.RetryBudgetMin > 0) || math.IsInf(c.RetryBudgetMin, 0):
		return fmt.Errorf("-retry-budget-min: %v is not a positive rate", c.RetryBudgetMin)
	}
	for _, n := range []struct{ flag, v string }{{"-route-header", c.RouteHeader}, {"-sticky-cookie", c.StickyCookie}} {
		if n.v != "" && strings.IndexFunc(n.v, notToken) >= 0 {
			return fmt.Errorf("%s: %q is not a token (letters, digits and !#$%%&'*+-.^_`|~)", n.flag, n.v)
		}
	}
	if c.HedgeAfter < 0 {
		return fmt.Errorf("-hedge-after: %v is negative; 0 turns hedging off", c.HedgeAfter)
	}
	if c.HedgePercentile < 0 || c.HedgePercentile >= 100 || math.IsNaN(c.HedgePercentile) {
		return fmt.Errorf("-hedge-percentile: %v is not between 0 (off) and 100", c.HedgePercentile)
	}
	return nil
}

func algoNames() []string {
	var names []string
	for _, a := range catalog.Algorithms() {
		names = append(names, a.Name)
	}
	return names
}

// parseBackends reads "host:port[=weight],...". Each address becomes an
// Endpoint ID in balancer.CanonicalAddr's spelling, and two spellings of
// one address (127.0.0.1:80 and 127.0.0.1:080) are refused, both named:
// taken for two backends, the server behind them would get a double share
// and two health records.
func parseBackends(s string) ([]balancer.Backend, error) {
	var (
		addrs   []string
		weights []int
	)
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
		addrs = append(addrs, addr)
		weights = append(weights, weight)
	}
	ids, err := balancer.CanonicalAddrs(addrs)
	if err != nil {
		return nil, err
	}
	bs := make([]balancer.Backend, len(ids))
	for i, id := range ids {
		bs[i] = balancer.NewEndpoint(id, weights[i])
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

// notToken reports whether r may not appear in an RFC 9110 token: a
// header or cookie name.
func notToken(r rune) bool {
	return r <= ' ' || r >= 0x7f || strings.ContainsRune(`()<>@,;:\"/[]?={}`, r)
}
