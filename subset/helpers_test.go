package subset_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/rr"
	"github.com/lbkit/lbkit/subset"
)

// fleet returns n backends with addresses as a Kubernetes pod network
// would give them.
func fleet(n int) []balancer.Backend {
	bs := make([]balancer.Backend, n)
	for i := range bs {
		bs[i] = balancer.NewEndpoint(fmt.Sprintf("10.1.%d.%d:8080", i/250, 1+i%250), 1)
	}
	return bs
}

// mode makes the Config of client c of count.
type mode struct {
	name string
	cfg  func(c, count, size int) subset.Config
}

var modes = []mode{
	{"rendezvous", func(c, _, size int) subset.Config {
		return subset.Config{Size: size, ClientID: fmt.Sprintf("client-%d", c)}
	}},
	{"deterministic", func(c, count, size int) subset.Config {
		return subset.Config{Size: size, Index: c, Count: count}
	}},
}

// clients makes count subset Balancers over rr, all given bs.
func clients(tb testing.TB, m mode, count, size int, bs []balancer.Backend) []*subset.Balancer {
	tb.Helper()
	cs := make([]*subset.Balancer, count)
	for c := range cs {
		s, err := subset.New(rr.New(rr.WithRand(func() uint64 { return uint64(c) })), m.cfg(c, count, size))
		require.NoError(tb, err)
		require.NoError(tb, s.Update(bs))
		cs[c] = s
	}
	return cs
}

// spread is how a fleet of clients falls on the backends.
type spread struct {
	meanConns          float64 // clients per backend
	maxConns, minConns int
	// Load is picks per backend, each client making the same number of
	// picks through its own picker, relative to the mean.
	maxLoad, minLoad float64
}

// measure has every client pick picks times, through its subset Balancer
// and the picker inside, and counts clients and picks per backend.
func measure(tb testing.TB, cs []*subset.Balancer, bs []balancer.Backend, picks int) spread {
	tb.Helper()
	conns := map[string]int{}
	load := map[string]int{}
	for _, c := range cs {
		for _, id := range c.Subset() {
			conns[id]++
		}
		for range picks {
			b, err := c.Pick(balancer.Request{})
			require.NoError(tb, err)
			load[b.ID()]++
			c.Done(b, balancer.Result{Latency: 1e6})
		}
	}
	s := spread{minConns: len(cs) + 1}
	total := 0
	for _, b := range bs {
		s.maxConns = max(s.maxConns, conns[b.ID()])
		s.minConns = min(s.minConns, conns[b.ID()])
		total += conns[b.ID()]
	}
	s.meanConns = float64(total) / float64(len(bs))
	mean := float64(len(cs)*picks) / float64(len(bs))
	s.minLoad = 1e18
	for _, b := range bs {
		l := float64(load[b.ID()]) / mean
		s.maxLoad, s.minLoad = max(s.maxLoad, l), min(s.minLoad, l)
	}
	return s
}

// moved returns, for a change from set a to set b, how many clients'
// subsets changed, the most members one subset lost, and how many
// (client, backend) pairs were dropped in all.
func moved(tb testing.TB, m mode, count, size int, a, b []balancer.Backend) (clientsMoved, worst, pairs int) {
	tb.Helper()
	before := clients(tb, m, count, size, a)
	for c, cl := range before {
		old := cl.Subset()
		require.NoError(tb, cl.Update(b))
		lost := 0
		for _, id := range old {
			if !slices.Contains(cl.Subset(), id) {
				lost++
			}
		}
		if lost > 0 {
			clientsMoved++
		}
		worst = max(worst, lost)
		pairs += lost
		_ = c
	}
	return clientsMoved, worst, pairs
}
