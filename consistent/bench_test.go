package consistent_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/consistent"
)

// algos are the benchmarked configurations, each with its constructor.
var algos = []struct {
	name string
	new  func() balancer.Balancer
}{
	{"ring", func() balancer.Balancer { return consistent.NewRing() }},
	{"ring-bounded", func() balancer.Balancer { return consistent.NewRing(consistent.WithBoundedLoad(1.25)) }},
	{"maglev", func() balancer.Balancer { return consistent.NewMaglev() }},
}

// BenchmarkPickInterface runs the harness every algorithm shares: Pick, and
// Done when the picker implements balancer.Feedback (the Ring does; it is a
// no-op without bounded loads), through the interfaces, at 4, 64 and 1024
// backends, serial and parallel.
func BenchmarkPickInterface(b *testing.B) {
	for _, a := range algos {
		b.Run("algo="+a.name, func(b *testing.B) {
			balancertest.Benchmark(b, a.new, balancertest.BenchOptions{})
		})
	}
}

// BenchmarkPick calls Pick on the concrete types with 2¹⁶ distinct keys,
// spread over the whole ring or table as real traffic is. Maglev's cost
// should not depend on n: its table has 65537 slots whatever the set.
func BenchmarkPick(b *testing.B) {
	ks := keys(1 << 16)
	for _, n := range []int{4, 64, 1024} {
		bs := balancer.Endpoints(addrs(n)...)
		r := consistent.NewRing()
		m := consistent.NewMaglev()
		if err := r.Update(bs); err != nil {
			b.Fatal(err)
		}
		if err := m.Update(bs); err != nil {
			b.Fatal(err)
		}
		benchPick(b, fmt.Sprintf("algo=ring/n=%d", n), r.Pick, ks)
		benchPick(b, fmt.Sprintf("algo=maglev/n=%d", n), m.Pick, ks)
	}
}

// benchPick runs pick, a concrete type's Pick method value, over the keys,
// which must number 2¹⁶. Neither Pick is small enough to inline, so the
// call through a func value costs about what a direct call does.
func benchPick(b *testing.B, name string, pick func(balancer.Request) (balancer.Backend, error), ks []string) {
	b.Run(name, func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			_, _ = pick(balancer.Request{Key: ks[i&(1<<16-1)]})
			i++
		}
	})
}

// BenchmarkRetry measures a retry (Attempt 1, avoiding the first backend)
// at 1024 backends: a short walk from the key's position.
func BenchmarkRetry(b *testing.B) {
	ks := keys(1 << 16)
	bs := balancer.Endpoints(addrs(1024)...)
	for _, a := range algos {
		p := a.new()
		if err := p.Update(bs); err != nil {
			b.Fatal(err)
		}
		fb, _ := p.(balancer.Feedback)
		b.Run(fmt.Sprintf("algo=%s/n=1024", a.name), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				got, _ := p.Pick(balancer.Request{Key: ks[i&(1<<16-1)], Attempt: 1, Avoid: bs[i&1023].ID()})
				if fb != nil {
					fb.Done(got, balancer.Result{})
				}
				i++
			}
		})
	}
}

// BenchmarkUpdate measures building a ring or table (the default one, and
// one ten times larger) for a set of n backends, of weight 1 or of weights
// drawn from 1 to 100 (a ring of 1024 such backends is capped at 2²⁰
// points). It also reports, over 100k keys,
// what happens when the first backend leaves: the keys moved per key that
// backend owned (1 is the least possible: only its keys move), and the
// fraction of all keys that moved although their backend stayed (0 for the
// ring unless the cap rescales its points).
func BenchmarkUpdate(b *testing.B) {
	ks := keys(100_000)
	weighted := make([]balancer.Backend, 1024)
	r := rand.New(rand.NewPCG(1, 2))
	for i, a := range addrs(1024) {
		weighted[i] = balancer.NewEndpoint(a, 1+r.IntN(100))
	}
	sets := []struct {
		name string
		bs   []balancer.Backend
	}{
		{"n=64/weights=1", balancer.Endpoints(addrs(64)...)},
		{"n=256/weights=1", balancer.Endpoints(addrs(256)...)},
		{"n=1024/weights=1", balancer.Endpoints(addrs(1024)...)},
		{"n=1024/weights=1-100", weighted},
	}
	builders := []struct {
		name string
		new  func() balancer.Balancer
	}{
		{"ring", func() balancer.Balancer { return consistent.NewRing() }},
		{"maglev", func() balancer.Balancer { return consistent.NewMaglev() }},
		{"maglev-655373", func() balancer.Balancer { return consistent.NewMaglev(consistent.WithTableSize(655373)) }},
	}
	for _, set := range sets {
		bs := set.bs
		for _, a := range builders {
			b.Run(fmt.Sprintf("algo=%s/%s", a.name, set.name), func(b *testing.B) {
				p := a.new()
				b.ReportAllocs()
				for b.Loop() {
					if err := p.Update(bs); err != nil {
						b.Fatal(err)
					}
				}
				before := assignB(b, p, ks)
				if err := p.Update(bs[1:]); err != nil {
					b.Fatal(err)
				}
				after := assignB(b, p, ks)
				moved, others := remap(before, after, bs[0].ID())
				b.ReportMetric(float64(moved)/float64(shares(before)[bs[0].ID()]), "moved/owned")
				b.ReportMetric(float64(others)/float64(len(ks)), "extra-moved/keys")
			})
		}
	}
}

func assignB(b *testing.B, p balancer.Picker, ks []string) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		got, err := p.Pick(balancer.Request{Key: k})
		if err != nil {
			b.Fatal(err)
		}
		out[i] = got.ID()
	}
	return out
}
