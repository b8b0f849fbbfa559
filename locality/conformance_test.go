package locality_test

import (
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/locality"
)

// zoned spreads the kit's backends that carry no locality over three
// zones and two priorities by the hash of their IDs; those that say where
// they run (the kit's HealthLevels check gives zones and priorities) keep
// it.
func zoned(b balancer.Backend) balancer.Locality {
	if l := balancer.LocalityOf(b); l != (balancer.Locality{}) {
		return l
	}
	h := xxhash.Sum64String(b.ID())
	return balancer.Locality{Zone: []string{"a", "b", "c"}[h%3], Priority: int(h / 3 % 2)}
}

// Every algorithm inside keeps every contract of package balancer: with
// backends that carry no locality (one group: the decorator must be
// transparent), with the kit's backends spread over zones and levels
// (zone-aware from zone a, so that picks, retries and Avoid cross groups),
// and, for three algorithms, with health around it, which then hands it
// the whole set through UpdateHealth (health's own conformance test runs
// every algorithm).
func TestConformance(t *testing.T) {
	layouts := []struct {
		name  string
		algos []string // nil: every algorithm
		new   func(t *testing.T, a catalog.Algorithm) balancer.Balancer
	}{
		{"flat", nil, func(t *testing.T, a catalog.Algorithm) balancer.Balancer {
			l, err := locality.New(a.New, locality.Config{})
			require.NoError(t, err)
			return l
		}},
		{"zoned", nil, func(t *testing.T, a catalog.Algorithm) balancer.Balancer {
			l, err := locality.New(a.New, locality.Config{Zone: "a", MinSize: 1})
			require.NoError(t, err)
			locality.SetLocate(l, zoned)
			return l
		}},
		{"zoned+health", []string{"rr", "leastconn", "ring"}, func(t *testing.T, a catalog.Algorithm) balancer.Balancer {
			l, err := locality.New(a.New, locality.Config{Zone: "a", MinSize: 1})
			require.NoError(t, err)
			locality.SetLocate(l, zoned)
			h, err := health.New(l, health.Config{})
			require.NoError(t, err)
			return h
		}},
	}
	for _, a := range conformanceAlgorithms() {
		for _, lay := range layouts {
			if lay.algos != nil && !slices.Contains(lay.algos, a.Name) {
				continue
			}
			t.Run("algo="+a.Name+"/layout="+lay.name, func(t *testing.T) {
				balancertest.Run(t, func() balancer.Balancer { return lay.new(t, a) })
			})
		}
	}
}

// conformanceAlgorithms returns the algorithms the conformance runs put
// inside the decorator: every one without the race detector, one of each
// family under it (see race_on_test.go).
func conformanceAlgorithms() []catalog.Algorithm {
	all := catalog.Algorithms()
	if !raceEnabled {
		return all
	}
	var out []catalog.Algorithm
	for _, a := range all {
		if slices.Contains([]string{"rr", "leastconn", "ring-bounded", "lrt"}, a.Name) {
			out = append(out, a)
		}
	}
	return out
}
