package route_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/route"
	"github.com/lbkit/lbkit/wrr"
)

// sets50 returns 1,000 backends in 50 label sets of 20, and the backends
// of the set "v7".
func sets50() (all, one []balancer.Backend) {
	for i := range 1000 {
		v := fmt.Sprintf("v%d", i%50)
		b := balancer.NewEndpoint(fmt.Sprintf("10.%d.%d.1:80", i/250, i%250), 1+i%3).WithLabels(map[string]string{"version": v})
		all = append(all, b)
		if v == "v7" {
			one = append(one, b)
		}
	}
	return all, one
}

// BenchmarkPick sets the decorator's Pick+Done, 1,000 backends in 50 label
// sets, beside the bare picker's: over the 20 backends of the set a routed
// request reaches (the work routing leaves), and over all 1,000 (what
// the picker costs without routing). The ratio of route=v7 to
// bare=set is the decorator's overhead.
func BenchmarkPick(b *testing.B) {
	all, one := sets50()
	for _, algo := range []struct {
		name string
		new  func() balancer.Balancer
	}{
		{"leastconn", func() balancer.Balancer { return leastconn.New() }},
		{"wrr", func() balancer.Balancer { return wrr.New() }},
	} {
		run := func(name string, lb balancer.Balancer, req balancer.Request) {
			fb, ok := lb.(balancer.Feedback)
			if !ok {
				fb = noFeedback{}
			}
			b.Run("algo="+algo.name+"/"+name+"/mode=serial", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					be, err := lb.Pick(req)
					if err != nil {
						b.Fatal(err)
					}
					fb.Done(be, balancer.Result{Latency: time.Millisecond})
				}
			})
			b.Run("algo="+algo.name+"/"+name+"/mode=parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						be, err := lb.Pick(req)
						if err != nil {
							b.Error(err)
							return
						}
						fb.Done(be, balancer.Result{Latency: time.Millisecond})
					}
				})
			})
		}
		bare := algo.new()
		_ = bare.Update(one)
		run("bare=set", bare, balancer.Request{})
		bareAll := algo.new()
		_ = bareAll.Update(all)
		run("bare=all", bareAll, balancer.Request{})
		lb, err := route.New(algo.new, route.Config{Label: "version"})
		if err != nil {
			b.Fatal(err)
		}
		_ = lb.Update(all)
		run("route=v7", lb, balancer.Request{Route: "v7"})
		run("route=none", lb, balancer.Request{})
	}
}

type noFeedback struct{}

func (noFeedback) Done(balancer.Backend, balancer.Result) {}
