package lbxds

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/locality"
	"github.com/lbkit/lbkit/wrr"
)

// benchCLA is n endpoints in zones localities of weight 1 at priority 0,
// at 10.<base>.x.y:8080, the endpoint at position down UNHEALTHY (none if
// down < 0).
func benchCLA(n, zones, base, down int) *endpointv3.ClusterLoadAssignment {
	c := &endpointv3.ClusterLoadAssignment{ClusterName: "svc"}
	for z := range zones {
		l := &endpointv3.LocalityLbEndpoints{
			Locality:            &corev3.Locality{Region: "r", Zone: fmt.Sprintf("z%d", z)},
			LoadBalancingWeight: wrapperspb.UInt32(1),
		}
		for i := z; i < n; i += zones {
			hs := corev3.HealthStatus_HEALTHY
			if i == down {
				hs = corev3.HealthStatus_UNHEALTHY
			}
			l.LbEndpoints = append(l.LbEndpoints, &endpointv3.LbEndpoint{
				HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
					Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
						Address:       fmt.Sprintf("10.%d.%d.%d", base, i/256, i%256),
						PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: 8080},
					}}},
				}},
				HealthStatus:        hs,
				LoadBalancingWeight: wrapperspb.UInt32(uint32(1 + i%3)),
			})
		}
		c.Endpoints = append(c.Endpoints, l)
	}
	return c
}

// benchClient is a Client, never started, whose cluster "svc" feeds
// health ▶ locality ▶ wrr: the path of a response from the decoded
// ClusterLoadAssignment to the pickers' Update is c.apply.
func benchClient(b *testing.B) (*Client, *cluster) {
	b.Helper()
	l, err := locality.New(func() balancer.Balancer { return wrr.New() }, locality.Config{})
	if err != nil {
		b.Fatal(err)
	}
	h, err := health.New(l, health.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = h.Close() })
	c, err := New("127.0.0.1:1", Config{
		Node:        &corev3.Node{Id: "bench"},
		Clusters:    map[string]balancer.Updater{"svc": h},
		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c, c.clusters["svc"]
}

// cpuTime returns the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkUpdate is one update of 1,000 endpoints in 10 localities, from
// the decoded ClusterLoadAssignment to the Update of the pickers inside
// health ▶ locality ▶ wrr: Read, Publish (validation, health's Update,
// locality's layout and every zone's wrr Update), as the client applies
// a response. change=all alternates between two sets of 1,000 other
// addresses; change=one flips one endpoint's health. decode=true adds the
// proto.Unmarshal of the resource's bytes. cpu-ns/op is the process's CPU
// time per update (getrusage), garbage collection included.
func BenchmarkUpdate(b *testing.B) {
	const n, zones = 1000, 10
	for _, tc := range []struct {
		name string
		a, b *endpointv3.ClusterLoadAssignment
	}{
		{"change=all", benchCLA(n, zones, 1, -1), benchCLA(n, zones, 2, -1)},
		{"change=one", benchCLA(n, zones, 1, -1), benchCLA(n, zones, 1, 500)},
	} {
		for _, decode := range []bool{false, true} {
			b.Run(fmt.Sprintf("n=%d/%s/decode=%t", n, tc.name, decode), func(b *testing.B) {
				c, cl := benchClient(b)
				raw := [2][]byte{}
				for i, m := range []*endpointv3.ClusterLoadAssignment{tc.a, tc.b} {
					var err error
					if raw[i], err = proto.Marshal(m); err != nil {
						b.Fatal(err)
					}
				}
				clas := [2]*endpointv3.ClusterLoadAssignment{tc.a, tc.b}
				b.ReportAllocs()
				i := 0
				cpu0 := cpuTime(b)
				for b.Loop() {
					m := clas[i%2]
					if decode {
						m = new(endpointv3.ClusterLoadAssignment)
						if err := proto.Unmarshal(raw[i%2], m); err != nil {
							b.Fatal(err)
						}
					}
					if u := c.apply(cl, m, "v"); !u.Taken || u.Err != nil {
						b.Fatalf("update refused: %v", u.Err)
					}
					i++
				}
				// CPU time, the process's (garbage collection included),
				// which a loaded machine does not inflate as it does the
				// wall-clock ns/op.
				b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(i), "cpu-ns/op")
			})
		}
	}
}

// BenchmarkRead is Read alone, the xDS part of BenchmarkUpdate.
func BenchmarkRead(b *testing.B) {
	m := benchCLA(1000, 10, 1, -1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Read(m, nil); err != nil {
			b.Fatal(err)
		}
	}
}
