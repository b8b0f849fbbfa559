package lbhttp_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/lbhttp"
	"github.com/lbkit/lbkit/wrr"
)

// twoAnswers is a Resolver that answers a and b in turn.
type twoAnswers struct {
	a, b []netip.Addr
	n    int
}

func (r *twoAnswers) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	r.n++
	if r.n%2 == 0 {
		return r.b, nil
	}
	return r.a, nil
}

// addrs is n IPv4 addresses 10.<base>.x.y.
func addrs(n, base int) []netip.Addr {
	out := make([]netip.Addr, n)
	for i := range out {
		out[i] = netip.AddrFrom4([4]byte{10, byte(base), byte(i / 256), byte(i % 256)})
	}
	return out
}

// BenchmarkRefresh is one refresh whose answer changes, from the
// resolver's addresses to the Update of health ▶ wrr: the IDs spelled,
// sorted and compared, and the set published (validation, health's
// Update, wrr's). change=all alternates between two answers of n other
// addresses; change=one between answers that differ in one address.
// cpu-ns/op is the process's CPU time per refresh (getrusage), garbage
// collection included, which a loaded machine does not inflate as it
// does the wall-clock ns/op.
func BenchmarkRefresh(b *testing.B) {
	const n = 1000
	other := addrs(n, 1)
	other[n/2] = netip.AddrFrom4([4]byte{10, 9, 9, 9})
	for _, tc := range []struct {
		name string
		r    *twoAnswers
	}{
		{"change=all", &twoAnswers{a: addrs(n, 1), b: addrs(n, 2)}},
		{"change=one", &twoAnswers{a: addrs(n, 1), b: other}},
	} {
		b.Run(fmt.Sprintf("n=%d/%s", n, tc.name), func(b *testing.B) {
			h, err := health.New(wrr.New(), health.Config{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = h.Close() })
			r, err := lbhttp.NewRefresher(h, lbhttp.RefresherConfig{Host: "api.internal", Port: 8080, Resolver: tc.r})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			cpu0, ok := processCPU()
			i := 0
			for b.Loop() {
				if err := r.Refresh(ctx); err != nil {
					b.Fatal(err)
				}
				i++
			}
			if cpu1, ok1 := processCPU(); ok && ok1 {
				b.ReportMetric(float64(cpu1-cpu0)/float64(i), "cpu-ns/op")
			}
		})
	}
}
