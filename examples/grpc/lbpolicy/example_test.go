package lbpolicy_test

import (
	"context"
	"fmt"
	"log"
	"net"

	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/grpc/lbpolicy"
	"github.com/lbkit/lbkit/leastconn"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/resolver/ringhash"
)

// Least connections over two servers, chosen by the service config. The
// client's wiring is all public API, gRPC's and lbpolicy's, to copy as it
// is: the RPC here is gRPC's own health Check, which every server built
// with grpc/health answers, so that nothing but gRPC is needed. The
// servers are on loopback behind a manual resolver; with a real service
// the target is "dns:///name:port" and no resolver option is needed.
func Example() {
	lbpolicy.Register() // once, before the first dial

	var eps []resolver.Endpoint
	for range 2 {
		addr, stop := startServer()
		defer stop()
		eps = append(eps, resolver.Endpoint{Addresses: []resolver.Address{{Addr: addr}}})
	}
	r := manual.NewBuilderWithScheme("example")
	r.InitialState(resolver.State{Endpoints: eps})

	cc, err := grpc.NewClient(r.Scheme()+":///my-service",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{
			"loadBalancingConfig": [{"lbkit_least_conn": {}}],
			"healthCheckConfig": {"serviceName": ""},
			"methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}], "waitForReady": true, "timeout": "5s"}]
		}`))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()

	client := healthpb.NewHealthClient(cc) // or your service's generated client
	serving := 0
	for range 10 {
		resp, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil {
			log.Fatal(err)
		}
		if resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			serving++
		}
	}
	fmt.Println(serving, "of 10 answered SERVING")
	// Output: 10 of 10 answered SERVING
}

// startServer starts a gRPC server on loopback with the standard health
// service, and returns its address and a func that stops it.
func startServer() (string, func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer()) // SERVING until told otherwise
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	return lis.Addr().String(), func() { s.Stop(); <-done }
}

// Weights ride on the resolver's endpoints; lbkit_wrr (and the other
// weighted policies) read them.
func ExampleSetWeight() {
	ep := func(addr string) resolver.Endpoint {
		return resolver.Endpoint{Addresses: []resolver.Address{{Addr: addr}}}
	}
	state := resolver.State{Endpoints: []resolver.Endpoint{
		lbpolicy.SetWeight(ep("10.0.0.1:50051"), 3),
		lbpolicy.SetWeight(ep("10.0.0.2:50051"), 1),
		ep("10.0.0.3:50051"), // no weight: 1
	}}
	for _, e := range state.Endpoints {
		fmt.Println(e.Addresses[0].Addr, lbpolicy.WeightOf(e))
	}
	// Output:
	// 10.0.0.1:50051 3
	// 10.0.0.2:50051 1
	// 10.0.0.3:50051 1
}

// Hash keys (gRFC A76) ride on the resolver's endpoints too, set with
// gRPC's own resolver/ringhash.SetHashKey (gRPC's xDS client sets them
// from EDS); lbkit_ring_hash and lbkit_maglev place an endpoint by its
// key, so a StatefulSet pod that comes back at a new IP keeps its RPCs.
// With {"lbkit_ring_hash": {"requestHashHeader": "x-session"}} in the
// service config, an RPC's key is its x-session header (see Config).
func ExampleHashKeyOf() {
	ep := func(addr string) resolver.Endpoint {
		return resolver.Endpoint{Addresses: []resolver.Address{{Addr: addr}}}
	}
	state := resolver.State{Endpoints: []resolver.Endpoint{
		ringhash.SetHashKey(ep("10.0.0.1:50051"), "cache-0"),
		ringhash.SetHashKey(ep("10.0.7.9:50051"), "cache-1"), // rescheduled, new IP, same place
		ep("10.0.0.3:50051"), // no hash key: placed by its address
	}}
	for _, e := range state.Endpoints {
		fmt.Printf("%s %q\n", e.Addresses[0].Addr, lbpolicy.HashKeyOf(e))
	}
	// Output:
	// 10.0.0.1:50051 "cache-0"
	// 10.0.7.9:50051 "cache-1"
	// 10.0.0.3:50051 ""
}

// A policy of your own: leastconn sampling two backends even in small
// sets, registered under a name of your choosing.
func ExampleNewBuilder() {
	b, err := lbpolicy.NewBuilder("my_least_conn_p2c", func() lbk.Balancer {
		return leastconn.New(leastconn.WithChoices(2))
	})
	if err != nil {
		log.Fatal(err)
	}
	balancer.Register(b) // once, before the first dial
	fmt.Println(balancer.Get("my_least_conn_p2c") != nil)
	// Output: true
}

// A config error says what is wrong; gRPC refuses the service config, so
// the dial fails with it.
func ExampleBuilder_ParseConfig() {
	for _, b := range lbpolicy.Builders() {
		if b.Name() != lbpolicy.RingHash {
			continue
		}
		_, err := b.ParseConfig([]byte(`{"boundedLoad": 1.25}`))
		fmt.Println(err)
		_, err = b.ParseConfig([]byte(`{"key": "x-user", "boundedLoad": 1.25}`))
		fmt.Println(err)
		_, err = b.ParseConfig([]byte(`{"requestHashHeader": "x-user-bin"}`))
		fmt.Println(err)
		_, err = b.ParseConfig([]byte(`{"requestHashHeader": "X-User"}`))
		fmt.Println(err)
	}
	// Output:
	// lbpolicy: lbkit_ring_hash config: balancer: bad option: "key" is required (or "requestHashHeader", by gRFC A76's rules): name the metadata entry that holds the affinity key
	// <nil>
	// lbpolicy: lbkit_ring_hash config: balancer: bad option: "requestHashHeader" "x-user-bin" is a binary header (it ends in "-bin"), which gRFC A76 refuses
	// <nil>
}
