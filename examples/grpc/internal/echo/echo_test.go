package echo_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/lbkit/lbkit/examples/grpc/internal/echo"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// TestInterceptorAndErrors checks that server interceptors see the method
// and that a handler's status error reaches the caller.
func TestInterceptorAndErrors(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var seen atomic.Value // the method the interceptor saw
	s := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		seen.Store(info.FullMethod)
		return h(ctx, req)
	}))
	echo.Register(s, func(_ context.Context, msg string) (string, error) {
		if msg == "fail" {
			return "", status.Error(codes.NotFound, "no")
		}
		return msg + "!", nil
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = s.Serve(lis)
	}()
	defer func() { s.Stop(); <-done }()
	cc, err := grpc.NewClient("passthrough:///"+lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer cc.Close()

	got, err := echo.Call(context.Background(), cc, "hi")
	require.NoError(t, err)
	assert.Equal(t, "hi!", got)
	assert.Equal(t, echo.Method, seen.Load())

	_, err = echo.Call(context.Background(), cc, "fail")
	assert.Equal(t, codes.NotFound, status.Code(err))
}
