package lbpolicy_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	lbhealth "github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/rr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/lbkit/lbkit/examples/grpc/internal/echo"
)

// drainPolicy is registered by TestMain: rr inside lbkit's health
// decorator, through lbpolicy.NewBuilder, as a user would wrap a picker.
const drainPolicy = "lbkit_test_drain"

// lastDrainable is the decorator the newest channel built. Tests run one
// at a time.
var lastDrainable atomic.Pointer[drainable]

// drainable is a health.Balancer that counts its Closes.
type drainable struct {
	*lbhealth.Balancer
	closes atomic.Int64
}

func newDrainable() *drainable {
	h, err := lbhealth.New(rr.New(), lbhealth.Config{})
	if err != nil {
		panic(err) // the zero Config is valid
	}
	d := &drainable{Balancer: h}
	lastDrainable.Store(d)
	return d
}

func (d *drainable) Close() error {
	d.closes.Add(1)
	return d.Balancer.Close()
}

// TestAllDrained checks what happens when gRPC has READY endpoints but the
// lbkit picker has none to give (a health decorator with every backend
// drained): a fail-fast RPC fails UNAVAILABLE at once, a wait-for-ready one
// waits and is served once a backend is enabled again, though gRPC's own
// state never changed; and closing the channel closes the decorator.
func TestAllDrained(t *testing.T) {
	checkNoLeaks(t)
	bs := startBackends(t, 0, 0)
	cc, _ := dial(t, serviceConfig(drainPolicy, ""), endpoints(bs))
	warm(t, cc, bs, nil)
	d := lastDrainable.Load()
	require.NotNil(t, d)
	for _, b := range bs {
		require.NoError(t, d.Drain(b.addr))
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	_, err := echo.Call(ctx, cc, "fail fast", grpc.WaitForReady(false))
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.Contains(t, status.Convert(err).Message(), "no backend")
	assert.Less(t, time.Since(start), 2*time.Second, "a fail-fast RPC must fail, not wait")

	waited := make(chan error, 1)
	go func() {
		_, err := echo.Call(ctx, cc, "wait for ready")
		waited <- err
	}()
	select {
	case err := <-waited:
		t.Fatalf("a wait-for-ready RPC returned while every backend was drained: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	require.NoError(t, d.Enable(bs[1].addr))
	select {
	case err := <-waited:
		require.NoError(t, err)
	case <-time.After(4 * time.Second):
		t.Fatal("a wait-for-ready RPC was still waiting 4 s after a backend was enabled again")
	}

	require.NoError(t, cc.Close())
	eventually(t, "the channel's Close to close the decorator", func() bool { return d.closes.Load() == 1 })
}
