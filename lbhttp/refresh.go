package lbhttp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/discovery"
)

// Resolver looks up the addresses of a host name. *net.Resolver is one
// (net.DefaultResolver is used when RefresherConfig.Resolver is nil); tests
// and service-discovery clients can supply their own.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Defaults of RefresherConfig.
const (
	DefaultRefreshInterval = 30 * time.Second
	DefaultRefreshTimeout  = 5 * time.Second
)

// MinRefreshInterval is the shortest Interval NewRefresher takes: a
// shorter one is more likely a unit mistake (30 for 30*time.Second), which
// would send the resolver a lookup without pause, than a wish.
const MinRefreshInterval = time.Millisecond

// RefresherConfig configures a Refresher. Host and Port are required; every
// other field's zero value means the documented default.
type RefresherConfig struct {
	// Host is the name to resolve, such as "api.internal". Required.
	Host string
	// Port is the port every resolved address serves on. Required.
	Port uint16
	// Interval is the time between two resolutions. Zero:
	// DefaultRefreshInterval. At least MinRefreshInterval otherwise.
	Interval time.Duration
	// Timeout bounds one resolution. Zero: DefaultRefreshTimeout, or
	// Interval if that is shorter.
	Timeout time.Duration
	// Network is "ip" (both families), "ip4" or "ip6". Empty: "ip".
	Network string
	// Resolver does the lookups. Nil: net.DefaultResolver.
	Resolver Resolver
	// OnError is told of each failed background resolution (the previous
	// set stays in use). It runs on the refresher's goroutine, never under
	// a lock, and must not block for long. Nil: failures are dropped;
	// Refresh still returns them.
	OnError func(error)
}

// Refresher keeps a picker's set equal to the addresses a DNS name
// resolves to: it re-resolves the name every Interval and, when the
// answer changes, Updates the picker (usually a health.Balancer wrapping
// the algorithm, so that new addresses are probed before they get
// traffic). When a resolution fails or returns no address the previous
// set stays: a DNS outage must not empty a working pool.
//
// Backends are balancer.Endpoints of weight 1 whose IDs are
// "address:port" ("10.0.0.7:8080", "[2001:db8::7]:8080"), sorted, so the
// same answer gives the same set whatever order the resolver returns it in.
// The IDs are spelled as balancer.CanonicalAddr spells them (an
// IPv4-mapped address as its IPv4 address), so that two spellings of one
// address in an answer are one backend, and a static set spelled that way
// keeps its IDs when it moves to DNS.
//
// Start runs the refreshing goroutine; Close (or the end of Start's
// context) stops it and waits for it. Refresh resolves once, now. All
// methods are safe for concurrent use.
type Refresher struct {
	// Immutable after NewRefresher.
	u        balancer.Updater
	pub      *discovery.Publisher // gives u the sets, by the rules of every source
	cfg      RefresherConfig
	resolver Resolver

	// Guarded by mu: the set last given to Update and the lookups'
	// sequence numbers. Update runs under mu, and only with the answer of
	// a lookup newer than the last one applied, so that of two
	// overlapping refreshes the one that started last wins, whichever
	// finishes last; no user callback runs under mu.
	mu      sync.Mutex
	current []string
	issued  uint64 // lookups started
	applied uint64 // the number of the newest lookup whose answer is current

	life balancer.Lifecycle // the refreshing goroutine
}

// NewRefresher returns a Refresher that Updates u with the addresses of
// cfg.Host. It does not resolve yet: call Refresh to fail fast on a bad
// name, then Start. It returns an error for a nil u, and one wrapping
// balancer.ErrBadOption for an empty Host, a zero Port, a negative
// Interval or Timeout, an Interval below MinRefreshInterval, or an
// unknown Network.
func NewRefresher(u balancer.Updater, cfg RefresherConfig) (*Refresher, error) {
	switch {
	case u == nil:
		return nil, errors.New("lbhttp: refresher: nil updater")
	case cfg.Host == "":
		return nil, fmt.Errorf("lbhttp: refresher: %w: empty Host", balancer.ErrBadOption)
	case cfg.Port == 0:
		return nil, fmt.Errorf("lbhttp: refresher: %w: zero Port", balancer.ErrBadOption)
	case cfg.Interval < 0 || cfg.Interval > 0 && cfg.Interval < MinRefreshInterval:
		return nil, fmt.Errorf("lbhttp: refresher: %w: Interval %v, want 0 (the default) or at least %v", balancer.ErrBadOption, cfg.Interval, MinRefreshInterval)
	case cfg.Timeout < 0:
		return nil, fmt.Errorf("lbhttp: refresher: %w: negative Timeout %v", balancer.ErrBadOption, cfg.Timeout)
	}
	switch cfg.Network {
	case "":
		cfg.Network = "ip"
	case "ip", "ip4", "ip6":
	default:
		return nil, fmt.Errorf("lbhttp: refresher: %w: Network %q is not ip, ip4 or ip6", balancer.ErrBadOption, cfg.Network)
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultRefreshInterval
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = min(DefaultRefreshTimeout, cfg.Interval)
	}
	pub, err := discovery.New(u, discovery.Config{})
	if err != nil {
		return nil, fmt.Errorf("lbhttp: refresher: %w", err)
	}
	r := &Refresher{u: u, pub: pub, cfg: cfg, resolver: cfg.Resolver}
	if r.resolver == nil {
		r.resolver = net.DefaultResolver
	}
	return r, nil
}

// Refresh resolves the name once and Updates the picker if the set of
// addresses changed. On a lookup error, an empty answer or an Update
// error it returns the error and the picker keeps its previous set.
//
// Refreshes may overlap (the goroutine's and a caller's): the lookup runs
// unlocked, so a Close or another Refresh never waits for it. An answer
// is dropped, and Refresh returns nil, if a lookup started after its own
// has already been applied (even one that found the set unchanged): an
// older answer never replaces a newer one.
func (r *Refresher) Refresh(ctx context.Context) error {
	r.mu.Lock()
	r.issued++
	seq := r.issued
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	addrs, err := r.resolver.LookupNetIP(ctx, r.cfg.Network, r.cfg.Host)
	if err != nil {
		return fmt.Errorf("lbhttp: refresher: resolving %q: %w", r.cfg.Host, err)
	}
	ids := make([]string, 0, len(addrs))
	for _, a := range addrs {
		if !a.IsValid() {
			continue
		}
		ids = append(ids, netip.AddrPortFrom(a.Unmap(), r.cfg.Port).String())
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if len(ids) == 0 {
		return fmt.Errorf("lbhttp: refresher: %q resolved to no address; keeping the previous set", r.cfg.Host)
	}

	r.mu.Lock()
	defer r.mu.Unlock()
	if seq < r.applied {
		return nil // a newer answer is in use
	}
	if !slices.Equal(ids, r.current) {
		eps := make([]discovery.Endpoint, len(ids))
		for i, id := range ids {
			eps[i] = discovery.Endpoint{Addr: id}
		}
		if _, err := r.pub.Publish(eps); err != nil {
			return fmt.Errorf("lbhttp: refresher: updating with %d addresses of %q: %w", len(ids), r.cfg.Host, err)
		}
		r.current = ids
	}
	r.applied = seq
	return nil
}

// Addrs returns the addresses of the set last given to Update, sorted.
func (r *Refresher) Addrs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.current)
}

// Start resolves the name at once and then every Interval, on a goroutine
// of its own, until ctx ends or Close is called. It returns an error
// wrapping balancer.ErrStarted if the refresher was started before, or
// balancer.ErrClosed after Close (balancer.Lifecycle's rules).
func (r *Refresher) Start(ctx context.Context) error {
	// Close ends run's context, which also ends a lookup in flight.
	if err := r.life.Start(ctx, r.run); err != nil {
		return fmt.Errorf("lbhttp: refresher: start: %w", err)
	}
	return nil
}

func (r *Refresher) run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := r.Refresh(ctx); err != nil && ctx.Err() == nil && r.cfg.OnError != nil {
			r.cfg.OnError(err)
		}
		t.Reset(r.cfg.Interval)
	}
}

// Close stops the goroutine Start began and waits for it to return. It is
// safe to call more than once, and before Start.
func (r *Refresher) Close() error {
	r.life.Close()
	return nil
}
