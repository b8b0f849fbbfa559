package lbkube

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/locality"
	"github.com/lbkit/lbkit/wrr"
)

// cpuTime returns the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchSlices is n ready endpoints at 10.<base>.x.y:8080 in slices of 100
// (the EndpointSlice controller's default size), over zones zones, the
// endpoint at position notReady not ready (none if negative).
func benchSlices(n, zones, base, notReady int) []*discoveryv1.EndpointSlice {
	var out []*discoveryv1.EndpointSlice
	yes, no := true, false
	port, name := int32(8080), "http"
	for s := 0; s*100 < n; s++ {
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: fmt.Sprintf("svc-%d", s), Namespace: "ns"},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
		}
		for i := s * 100; i < min(n, (s+1)*100); i++ {
			zone := fmt.Sprintf("z%d", i%zones)
			ready := &yes
			if i == notReady {
				ready = &no
			}
			sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", base, i/256, i%256)},
				Conditions: discoveryv1.EndpointConditions{Ready: ready, Serving: ready},
				Zone:       &zone,
			})
		}
		out = append(out, sl)
	}
	return out
}

// BenchmarkApply is one sync of 1,000 endpoints in 10 zones, from the
// slices read off the informer's cache to the Update of the pickers
// inside health ▶ locality ▶ wrr: merge, Publish (validation, health's
// Update, locality's layout and every zone's wrr Update). change=all
// alternates between two sets of 1,000 other addresses; change=one flips
// one endpoint's readiness. cpu-ns/op is the process's CPU time per sync
// (getrusage), garbage collection included, which a loaded machine does
// not inflate as it does the wall-clock ns/op.
func BenchmarkApply(b *testing.B) {
	const n, zones = 1000, 10
	for _, tc := range []struct {
		name string
		a, b []*discoveryv1.EndpointSlice
	}{
		{"change=all", benchSlices(n, zones, 1, -1), benchSlices(n, zones, 2, -1)},
		{"change=one", benchSlices(n, zones, 1, -1), benchSlices(n, zones, 1, 500)},
	} {
		b.Run(fmt.Sprintf("n=%d/%s", n, tc.name), func(b *testing.B) {
			l, err := locality.New(func() balancer.Balancer { return wrr.New() }, locality.Config{})
			if err != nil {
				b.Fatal(err)
			}
			h, err := health.New(l, health.Config{})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = h.Close() })
			w, err := New(fake.NewClientset(), h, Config{Namespace: "ns", Service: "svc"})
			if err != nil {
				b.Fatal(err)
			}
			sets := [2][]*discoveryv1.EndpointSlice{tc.a, tc.b}
			b.ReportAllocs()
			i := 0
			cpu0 := cpuTime(b)
			for b.Loop() {
				if r := w.apply(sets[i%2]); r.Err != nil || len(r.Eligible) < n-1 {
					b.Fatalf("sync: %+v", r)
				}
				i++
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(i), "cpu-ns/op")
		})
	}
}
