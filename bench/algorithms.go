package bench

import (
	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/consistent"
	"github.com/lbkit/lbkit/iphash"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/lrt"
	"github.com/lbkit/lbkit/rr"
	"github.com/lbkit/lbkit/wrr"
)

// Algorithm is one picker configuration to compare.
type Algorithm struct {
	// Name is short and stable: it names sub-benchmarks and table rows.
	Name string
	// New returns a fresh picker with an empty set.
	New func() balancer.Balancer
	// Weighted is true when the algorithm is only worth measuring with
	// unequal weights (wrr: with equal weights it is rr). The benchmark then
	// draws weights from 1 to 100 from a fixed seed.
	Weighted bool
}

// Algorithms returns every lbkit algorithm with its defaults, plus the
// variants that show a trade-off: consistent's ring with bounded loads
// (c = 1.25) and lrt's naive mode, which herds.
func Algorithms() []Algorithm {
	return []Algorithm{
		{Name: "rr", New: func() balancer.Balancer { return rr.New() }},
		{Name: "wrr", New: func() balancer.Balancer { return wrr.New() }, Weighted: true},
		{Name: "leastconn", New: func() balancer.Balancer { return leastconn.New() }},
		{Name: "iphash", New: func() balancer.Balancer { return iphash.New() }},
		{Name: "ring", New: func() balancer.Balancer { return consistent.NewRing() }},
		{Name: "ring-bounded", New: func() balancer.Balancer { return consistent.NewRing(consistent.WithBoundedLoad(1.25)) }},
		{Name: "maglev", New: func() balancer.Balancer { return consistent.NewMaglev() }},
		{Name: "lrt", New: func() balancer.Balancer { return lrt.New() }},
		{Name: "lrt-naive", New: func() balancer.Balancer { return lrt.New(lrt.WithMode(lrt.Naive)) }},
	}
}
