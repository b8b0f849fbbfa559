package locality_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/locality"
	"github.com/lbkit/lbkit/rr"
)

// tier returns n backends of zone at priority p, named zone-p-i.
func tier(zone string, p, n int) []balancer.Backend {
	bs := make([]balancer.Backend, n)
	for i := range bs {
		bs[i] = balancer.NewEndpoint(fmt.Sprintf("%s-%d-%d:80", zone, p, i), 1).
			At(balancer.Locality{Zone: zone, Priority: p})
	}
	return bs
}

func concat(sets ...[]balancer.Backend) []balancer.Backend {
	var all []balancer.Backend
	for _, s := range sets {
		all = append(all, s...)
	}
	return all
}

// seeded returns a Rand for Config, repeatable per seed.
func seeded(seed uint64) func() uint64 {
	r := rand.New(rand.NewPCG(seed, seed^0x5eed))
	return r.Uint64
}

// newRR returns a Balancer over round robin with a fixed start.
func newRR(t testing.TB, cfg locality.Config) *locality.Balancer {
	t.Helper()
	if cfg.Rand == nil {
		cfg.Rand = seeded(1)
	}
	l, err := locality.New(func() balancer.Balancer { return rr.New(rr.WithRand(func() uint64 { return 0 })) }, cfg)
	require.NoError(t, err)
	return l
}

// newLC returns a Balancer over leastconn.
func newLC(t testing.TB, cfg locality.Config) *locality.Balancer {
	t.Helper()
	if cfg.Rand == nil {
		cfg.Rand = seeded(1)
	}
	l, err := locality.New(func() balancer.Balancer { return leastconn.New(leastconn.WithRand(seeded(2))) }, cfg)
	require.NoError(t, err)
	return l
}

// healthOf marks the backends whose IDs are in down unhealthy.
func healthOf(bs []balancer.Backend, down ...string) []bool {
	up := make([]bool, len(bs))
	for i, b := range bs {
		up[i] = true
		for _, d := range down {
			if b.ID() == d {
				up[i] = false
			}
		}
	}
	return up
}

// ids returns the IDs of bs.
func ids(bs []balancer.Backend) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.ID()
	}
	return out
}

// shares picks n times and returns each zone's and each backend's share
// of the picks.
func shares(t testing.TB, l pickDone, n int, req balancer.Request) (zones map[string]float64, backends map[string]float64) {
	t.Helper()
	zones, backends = map[string]float64{}, map[string]float64{}
	for range n {
		b, err := l.Pick(req)
		require.NoError(t, err)
		zones[balancer.LocalityOf(b).Zone] += 1 / float64(n)
		backends[b.ID()] += 1 / float64(n)
		l.Done(b, balancer.Result{Latency: 1e6})
	}
	return zones, backends
}

// pickDone is a locality Balancer, or health around one.
type pickDone interface {
	balancer.Picker
	balancer.Feedback
}

// zoneShares returns each zone's Share from level p of v.
func zoneShares(v locality.View, p int) map[string]float64 {
	out := map[string]float64{}
	for _, lv := range v.Levels {
		if lv.Priority == p {
			for _, z := range lv.Zones {
				out[z.Zone] = z.Share
			}
		}
	}
	return out
}

// loads returns each level's Load from v.
func loads(v locality.View) map[int]float64 {
	out := map[int]float64{}
	for _, lv := range v.Levels {
		out[lv.Priority] = lv.Load
	}
	return out
}
