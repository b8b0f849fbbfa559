package lbhedge_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lbkit/lbkit/examples/grpc/internal/echo"
	"github.com/lbkit/lbkit/examples/grpc/lbhedge"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// Two servers, one of which takes a second over every call. Echo, which
// is idempotent, is hedged after 20 ms, so every Echo is answered by the
// fast server wherever its first attempt went; Store, which is not named,
// is never sent twice.
func Example() {
	var stores atomic.Int64
	serve := func(name string, delay time.Duration) (addr string, stop func()) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		s := grpc.NewServer()
		echo.Register(s, func(ctx context.Context, _ string) (string, error) {
			if m, _ := grpc.Method(ctx); m == echo.StoreMethod {
				stores.Add(1)
			}
			select {
			case <-time.After(delay):
				return name, nil
			case <-ctx.Done(): // a hedge won: this attempt is cancelled
				return "", ctx.Err()
			}
		})
		go func() { _ = s.Serve(lis) }()
		return lis.Addr().String(), s.Stop
	}
	slow, stopSlow := serve("slow", time.Second)
	defer stopSlow()
	fast, stopFast := serve("fast", 0)
	defer stopFast()

	h, err := lbhedge.New(lbhedge.Config{
		Methods:    []string{echo.Method}, // idempotent: may be sent twice
		Percentile: -1,                    // a fixed delay, MinDelay, for the example;
		MinDelay:   20 * time.Millisecond, // leave both zero for the 95th percentile
	})
	if err != nil {
		log.Fatal(err)
	}
	// lbpolicy.Register() runs once at start-up (here, in TestMain).
	r := manual.NewBuilderWithScheme("example")
	r.InitialState(resolver.State{Endpoints: []resolver.Endpoint{
		{Addresses: []resolver.Address{{Addr: slow}}},
		{Addresses: []resolver.Address{{Addr: fast}}},
	}})
	cc, err := grpc.NewClient(r.Scheme()+":///orders",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithUnaryInterceptor(h.Unary),
		grpc.WithDefaultServiceConfig(`{
			"loadBalancingConfig": [{"lbkit_round_robin": {}}],
			"methodConfig": [{"name": [{"service": "lbkit.example.Echo"}], "waitForReady": true, "timeout": "5s"}]
		}`))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()

	var replies []string
	for range 4 {
		reply, err := echo.Call(context.Background(), cc, "get")
		if err != nil {
			log.Fatal(err)
		}
		replies = append(replies, reply)
	}
	fmt.Println("Echo answered by:", strings.Join(replies, " "))
	for range 2 {
		if _, err := echo.Invoke(context.Background(), cc, echo.StoreMethod, "put"); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("Store calls the servers received:", stores.Load())
	// Output:
	// Echo answered by: fast fast fast fast
	// Store calls the servers received: 2
}
