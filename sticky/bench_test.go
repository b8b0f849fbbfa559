package sticky_test

import (
	"testing"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/leastconn"
)

// BenchmarkPick is a Pick and its Done through the decorator, pinned and
// not, beside leastconn alone, over 64 backends.
func BenchmarkPick(b *testing.B) {
	addrs := ids(64)
	bare := leastconn.New()
	if err := bare.Update(balancer.Endpoints(addrs...)); err != nil {
		b.Fatal(err)
	}
	s := newSticky(b, leastconn.New())
	if err := s.Update(balancer.Endpoints(addrs...)); err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		p    interface {
			balancer.Picker
			balancer.Feedback
		}
		req balancer.Request
	}{
		{"picker=leastconn", bare, balancer.Request{}},
		{"picker=sticky/prefer=none", s, balancer.Request{}},
		{"picker=sticky/prefer=live", s, balancer.Request{Prefer: addrs[17]}},
		{"picker=sticky/prefer=gone", s, balancer.Request{Prefer: "10.9.9.9:80"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				be, err := bc.p.Pick(bc.req)
				if err != nil {
					b.Fatal(err)
				}
				bc.p.Done(be, balancer.Result{})
			}
		})
	}
}
