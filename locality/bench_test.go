package locality_test

import (
	"fmt"
	"testing"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/locality"
	"github.com/lbkit/lbkit/rr"
)

// zonedBalancer spreads the harness's backends over three zones (and, for
// the spill layout, makes half of zone a unhealthy).
type zonedBalancer struct {
	*locality.Balancer
	spill bool
}

func (z *zonedBalancer) Update(bs []balancer.Backend) error {
	placed := make([]balancer.Backend, len(bs))
	healthy := make([]bool, len(bs))
	for i, b := range bs {
		zone := []string{"a", "b", "c"}[i%3]
		placed[i] = balancer.NewEndpoint(b.ID(), balancer.WeightOf(b)).At(balancer.Locality{Zone: zone})
		healthy[i] = !z.spill || zone != "a" || i%2 == 0
	}
	return z.UpdateHealth(placed, healthy)
}

// Pick and Done through the decorator, beside the bare picker: flat (no
// locality: one zone), zoned (three zones, all local), and spilling (a
// third of zone a's traffic goes to b and c).
func BenchmarkPick(b *testing.B) {
	inners := []struct {
		name string
		new  func() balancer.Balancer
	}{
		{"rr", func() balancer.Balancer { return rr.New() }},
		{"leastconn", func() balancer.Balancer { return leastconn.New() }},
	}
	opt := balancertest.BenchOptions{Sizes: []int{6, 64, 1024}}
	for _, in := range inners {
		b.Run("algo="+in.name+"/wrap=bare", func(b *testing.B) {
			balancertest.Benchmark(b, in.new, opt)
		})
		for _, layout := range []string{"flat", "zoned", "spill"} {
			b.Run("algo="+in.name+"/wrap="+layout, func(b *testing.B) {
				balancertest.Benchmark(b, func() balancer.Balancer {
					cfg := locality.Config{}
					if layout != "flat" {
						cfg.Zone = "a"
					}
					l, err := locality.New(in.new, cfg)
					if err != nil {
						b.Fatal(err)
					}
					if layout == "flat" {
						return l
					}
					return &zonedBalancer{Balancer: l, spill: layout == "spill"}
				}, opt)
			})
		}
	}
}

// UpdateHealth of 1024 backends in three zones and two levels when one
// backend's health flips, as health does after an ejection: the layout
// and the Update of the one picker whose set changed.
func BenchmarkUpdateHealth(b *testing.B) {
	var bs []balancer.Backend
	for i := range 1024 {
		bs = append(bs, balancer.NewEndpoint(fmt.Sprintf("10.0.%d.%d:80", i/250, i%250), 1).
			At(balancer.Locality{Zone: []string{"a", "b", "c"}[i%3], Priority: i % 2}))
	}
	up := make([]bool, len(bs))
	for i := range up {
		up[i] = true
	}
	down := append([]bool(nil), up...)
	down[0] = false
	l, err := locality.New(func() balancer.Balancer { return leastconn.New() }, locality.Config{Zone: "a"})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		h := up
		if i%2 == 0 {
			h = down
		}
		if err := l.UpdateHealth(bs, h); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
