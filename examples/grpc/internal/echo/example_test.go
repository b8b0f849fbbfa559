package echo_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"strings"

	"github.com/lbkit/lbkit/examples/grpc/internal/echo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

func Example() {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	s := grpc.NewServer()
	echo.Register(s, func(_ context.Context, msg string) (string, error) {
		return strings.ToUpper(msg), nil
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	defer func() { s.Stop(); <-done }()

	cc, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close()
	reply, err := echo.Call(context.Background(), cc, "hello")
	fmt.Println(reply, err)
	// Output: HELLO <nil>
}
