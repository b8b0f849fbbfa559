package lbhttp_test

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/discovery"
	"github.com/lbkit/lbkit/lbhttp"
)

// zone is a DNS zone in memory: the addresses one name resolves to, or a
// failure. A resolver over a real DNS server would need a DNS codec
// outside the standard library, which the core module does not take; the
// Refresher reaches DNS through its Resolver interface, which this
// implements.
type zone struct {
	mu     sync.Mutex
	addrs  []netip.Addr
	failed bool
}

func (z *zone) LookupNetIP(ctx context.Context, _, _ string) ([]netip.Addr, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.failed {
		return nil, errors.New("zone: server failure (SERVFAIL)")
	}
	return append([]netip.Addr(nil), z.addrs...), nil
}

// The Refresher keeps the rules of every discovery source; an empty
// answer keeps the last set, by its own rule.
func TestRefresherSource(t *testing.T) {
	z := &zone{}
	balancertest.RunSource(t, balancertest.SourceHarness{
		New: func(t testing.TB, target balancer.Updater) discovery.Source {
			r, err := lbhttp.NewRefresher(target, lbhttp.RefresherConfig{Host: "api.test", Port: 8080, Interval: 10 * time.Millisecond, Resolver: z})
			require.NoError(t, err)
			return r
		},
		Set: func(t testing.TB, eps []discovery.Endpoint) {
			z.mu.Lock()
			defer z.mu.Unlock()
			z.addrs = z.addrs[:0]
			for _, e := range eps {
				ap, err := netip.ParseAddrPort(e.Addr)
				require.NoError(t, err)
				z.addrs = append(z.addrs, ap.Addr())
			}
		},
		Fail:       func(testing.TB) { z.mu.Lock(); z.failed = true; z.mu.Unlock() },
		Heal:       func(testing.TB) { z.mu.Lock(); z.failed = false; z.mu.Unlock() },
		KeepsEmpty: true,
		Settle:     3 * time.Second,
	})
}
