package lbhedge_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lbkit/lbkit/examples/grpc/internal/echo"
	"github.com/lbkit/lbkit/examples/grpc/lbhedge"
	"github.com/lbkit/lbkit/examples/grpc/lbpolicy"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// TestMain registers lbpolicy's policies once: gRPC's registry must not
// be written while channels read it.
func TestMain(m *testing.M) {
	lbpolicy.Register()
	os.Exit(m.Run())
}

// backend is one real gRPC server on loopback serving echo: it answers
// with its name after the delay its delay func gives, and counts what it
// saw, server side.
type backend struct {
	name  string
	addr  string
	delay func(b *backend, n int64, msg string) time.Duration // n: this server's calls so far, from 1
	fail  atomic.Pointer[error]                               // if set, every call fails with it at once

	calls     atomic.Int64 // Echo and Store
	stores    atomic.Int64 // Store alone
	inflight  atomic.Int64
	cancelled atomic.Int64 // calls whose context ended while they waited

	mu   sync.Mutex
	seen map[string]int // message → calls that carried it, here
}

// startBackends starts one server per delay func, named b0, b1, ...; they
// stop when the test ends.
func startBackends(t testing.TB, delays ...func(b *backend, n int64, msg string) time.Duration) []*backend {
	t.Helper()
	bs := make([]*backend, len(delays))
	for i, d := range delays {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		b := &backend{name: fmt.Sprintf("b%d", i), addr: lis.Addr().String(), delay: d, seen: map[string]int{}}
		srv := grpc.NewServer()
		echo.Register(srv, b.serve)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = srv.Serve(lis)
		}()
		t.Cleanup(func() {
			srv.Stop()
			<-done
		})
		bs[i] = b
	}
	return bs
}

func (b *backend) serve(ctx context.Context, msg string) (string, error) {
	b.inflight.Add(1)
	defer b.inflight.Add(-1)
	n := b.calls.Add(1)
	if m, _ := grpc.Method(ctx); m == echo.StoreMethod {
		b.stores.Add(1)
	}
	b.mu.Lock()
	b.seen[msg]++
	b.mu.Unlock()
	_ = grpc.SetHeader(ctx, metadata.Pairs("server", b.name))
	if strings.HasPrefix(msg, "warm-") {
		return b.name, nil // see warmAll
	}
	if err := b.fail.Load(); err != nil {
		return "", *err
	}
	if d := b.delay(b, n, msg); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			b.cancelled.Add(1)
			return "", ctx.Err()
		}
	}
	return b.name, nil
}

// times returns how many calls with msg this server saw.
func (b *backend) times(msg string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.seen[msg]
}

// maxTimes returns the most calls any one message made here.
func (b *backend) maxTimes() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := 0
	for _, n := range b.seen {
		m = max(m, n)
	}
	return m
}

// fixed is a delay func: always d.
func fixed(d time.Duration) func(*backend, int64, string) time.Duration {
	return func(*backend, int64, string) time.Duration { return d }
}

// firstSlow is a delay func over a shared count of messages: the first n
// calls any server gets with a message wait slow, later ones (hedges) do
// not, so that every RPC's first n attempts are slow wherever they go.
type firstSlow struct {
	mu   sync.Mutex
	seen map[string]int
	slow time.Duration
	n    int
}

func newFirstSlow(slow time.Duration, n int) *firstSlow {
	return &firstSlow{seen: map[string]int{}, slow: slow, n: n}
}

func (f *firstSlow) delay(_ *backend, _ int64, msg string) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen[msg]++
	if f.seen[msg] > f.n {
		return 0
	}
	return f.slow
}

// warmAll sends Store RPCs (never hedged, answered at once) until every
// server has served one, so that all are READY in cc's picker, then zeroes
// the servers' counts. Without it, a hedge sent while only one endpoint is
// READY is refused, and a test would measure the channel's start.
func warmAll(t *testing.T, cc *grpc.ClientConn, bs []*backend) {
	t.Helper()
	ready := func() bool {
		for _, b := range bs {
			if b.calls.Load() == 0 {
				return false
			}
		}
		return true
	}
	for i := 0; i < 500 && !ready(); i++ {
		_, _, err := call(cc, echo.StoreMethod, fmt.Sprintf("warm-%d", i))
		require.NoError(t, err)
		if i >= 10 {
			time.Sleep(time.Millisecond) // give a connection time to come up
		}
	}
	require.True(t, ready(), "every server READY")
	settle(t, bs)
	for _, b := range bs {
		b.calls.Store(0)
		b.stores.Store(0)
		b.cancelled.Store(0)
		b.mu.Lock()
		clear(b.seen)
		b.mu.Unlock()
	}
}

// settle waits until no server has a call in flight (cancelled losers
// and late hedges included), so that their counts are final.
func settle(t *testing.T, bs []*backend) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := int64(0)
		for _, b := range bs {
			n += b.inflight.Load()
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d calls still in flight", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// total returns the calls all servers saw.
func total(bs []*backend) int64 {
	n := int64(0)
	for _, b := range bs {
		n += b.calls.Load()
	}
	return n
}

// dial opens a channel to bs under policy (a loadBalancingConfig entry,
// JSON), through h if not nil; it is closed when the test ends. Calls
// wait for ready, and gRPC retries nothing of its own.
func dial(t testing.TB, policy string, bs []*backend, h *lbhedge.Interceptor) *grpc.ClientConn {
	t.Helper()
	eps := make([]resolver.Endpoint, len(bs))
	for i, b := range bs {
		eps[i] = resolver.Endpoint{Addresses: []resolver.Address{{Addr: b.addr}}}
	}
	r := manual.NewBuilderWithScheme("lbhedge-test")
	r.InitialState(resolver.State{Endpoints: eps})
	opts := []grpc.DialOption{
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(fmt.Sprintf(`{
	"loadBalancingConfig": [%s],
	"methodConfig": [{"name": [{"service": "lbkit.example.Echo"}], "waitForReady": true}]
}`, policy)),
	}
	if h != nil {
		opts = append(opts, grpc.WithUnaryInterceptor(h.Unary))
	}
	cc, err := grpc.NewClient(r.Scheme()+":///backends", opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

const roundRobin = `{"lbkit_round_robin": {}}`

// call sends one RPC of method with msg and a 10 s deadline, and returns
// the reply, the error and how long it took.
func call(cc *grpc.ClientConn, method, msg string, opts ...grpc.CallOption) (string, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	reply, err := echo.Invoke(ctx, cc, method, msg, opts...)
	return reply, time.Since(start), err
}

// run sends calls RPCs of method over workers goroutines, message
// prefix-i for the i-th, and returns each one's latency; it fails the
// test on any error.
func run(t *testing.T, cc *grpc.ClientConn, method, prefix string, workers, calls int) []time.Duration {
	t.Helper()
	lat := make([]time.Duration, calls)
	errs := make([]error, calls)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= calls {
					return
				}
				_, lat[i], errs[i] = call(cc, method, fmt.Sprintf("%s-%d", prefix, i))
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	return lat
}

// quantile returns the q-quantile of ds (nearest rank).
func quantile(ds []time.Duration, q float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(q*float64(len(s)) + 0.5)
	return s[min(max(i-1, 0), len(s)-1)]
}
