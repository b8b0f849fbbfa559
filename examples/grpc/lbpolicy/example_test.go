package lbpolicy_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/grpc/internal/echo"
	"github.com/lbkit/lbkit/examples/grpc/lbpolicy"
	"github.com/lbkit/lbkit/leastconn"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// Least connections over two servers, chosen by the service config. The
// servers here are echo servers on loopback; with a real service the
// target is "dns:///name:port" and no manual resolver is needed.
func Example() {
	lbpolicy.Register() // once, before the first dial

	var eps []resolver.Endpoint
	for range 2 {
		addr, stop := startEcho()
		defer stop()
		eps = append(eps, resolver.Endpoint{Addresses: []resolver.Address{{Addr: addr}}})
	}
	r := manual.NewBuilderWithScheme("example")
	r.InitialState(resolver.State{Endpoints: eps})

	cc, err := grpc.NewClient(r.Scheme()+":///echo",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{
			"loadBalancingConfig": [{"lbkit_least_conn": {}}],
			"methodConfig": [{"name": [{"service": "lbkit.example.Echo"}], "waitForReady": true}]
		}`))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	replies := 0
	for range 10 {
		if _, err := echo.Call(ctx, cc, "hello"); err != nil {
			log.Fatal(err)
		}
		replies++
	}
	fmt.Println(replies, "replies")
	// Output: 10 replies
}

// startEcho starts an echo server on loopback and returns its address and
// a func that stops it.
func startEcho() (string, func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	echo.Register(s, func(_ context.Context, msg string) (string, error) { return msg, nil })
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
	}
	// Output:
	// lbpolicy: lbkit_ring_hash config: "key" is required: name the metadata entry that holds the affinity key
	// <nil>
}
