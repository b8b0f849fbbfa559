package lbpolicy_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/grpc/internal/echo"
	"github.com/lbkit/lbkit/examples/grpc/lbpolicy"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// TestMain registers the policies once: gRPC's registry must not be
// written while channels read it.
func TestMain(m *testing.M) {
	lbpolicy.Register()
	b, err := lbpolicy.NewBuilder(recorderPolicy, func() lbk.Balancer { return newRecorder() })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	balancer.Register(b)
	b, err = lbpolicy.NewBuilder(drainPolicy, func() lbk.Balancer { return newDrainable() })
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	balancer.Register(b)
	os.Exit(m.Run())
}

// backend is one real gRPC server on loopback, serving echo (which answers
// with the server's name after its delay) and the standard health service.
type backend struct {
	name   string
	addr   string
	srv    *grpc.Server
	health *health.Server
	delay  atomic.Int64 // nanoseconds each echo takes
	served atomic.Int64
	fail   atomic.Pointer[error] // what to answer with instead of the name, if set
}

// setFail makes the backend answer every echo with err, or normally again
// for nil.
func (b *backend) setFail(err error) {
	if err == nil {
		b.fail.Store(nil)
		return
	}
	b.fail.Store(&err)
}

// startBackends starts one server per delay, named b0, b1, ..., each
// SERVING. They stop when the test ends.
func startBackends(t testing.TB, delays ...time.Duration) []*backend {
	t.Helper()
	return startBackendsWith(t, func(int) []grpc.ServerOption { return nil }, delays...)
}

// startBackendsWith is startBackends with the server options opts gives
// for the i-th server.
func startBackendsWith(t testing.TB, opts func(i int) []grpc.ServerOption, delays ...time.Duration) []*backend {
	t.Helper()
	bs := make([]*backend, len(delays))
	for i, d := range delays {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		b := &backend{name: fmt.Sprintf("b%d", i), addr: lis.Addr().String(), srv: grpc.NewServer(opts(i)...), health: health.NewServer()}
		b.delay.Store(int64(d))
		echo.Register(b.srv, b.serve)
		healthpb.RegisterHealthServer(b.srv, b.health)
		b.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = b.srv.Serve(lis)
		}()
		t.Cleanup(func() {
			b.srv.Stop()
			<-done
		})
		bs[i] = b
	}
	return bs
}

func (b *backend) serve(ctx context.Context, _ string) (string, error) {
	b.served.Add(1)
	if d := time.Duration(b.delay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	if err := b.fail.Load(); err != nil {
		return "", *err
	}
	return b.name, nil
}

// endpoints lists the backends as resolver endpoints, with weights if any
// are given.
func endpoints(bs []*backend, weights ...int) []resolver.Endpoint {
	eps := make([]resolver.Endpoint, len(bs))
	for i, b := range bs {
		eps[i] = resolver.Endpoint{Addresses: []resolver.Address{{Addr: b.addr}}}
		if i < len(weights) {
			eps[i] = lbpolicy.SetWeight(eps[i], weights[i])
		}
	}
	return eps
}

// serviceConfig returns a service config selecting policy with its config
// (JSON), checking health through the standard health service, and making
// echo calls wait-for-ready and retried on UNAVAILABLE (they are
// idempotent).
func serviceConfig(policy, cfg string) string {
	if cfg == "" {
		cfg = "{}"
	}
	return fmt.Sprintf(`{
	"loadBalancingConfig": [{%q: %s}],
	"healthCheckConfig": {"serviceName": ""},
	"methodConfig": [{
		"name": [{"service": "lbkit.example.Echo"}],
		"waitForReady": true,
		"retryPolicy": {
			"maxAttempts": 5,
			"initialBackoff": "0.01s",
			"maxBackoff": "0.1s",
			"backoffMultiplier": 2,
			"retryableStatusCodes": ["UNAVAILABLE"]
		}
	}]
}`, policy, cfg)
}

// dial opens a channel to eps through a manual resolver, with the given
// service config. It is closed when the test ends; the resolver is
// returned for updates.
func dial(t testing.TB, sc string, eps []resolver.Endpoint) (*grpc.ClientConn, *manual.Resolver) {
	t.Helper()
	r := manual.NewBuilderWithScheme("lbkit-test")
	r.InitialState(resolver.State{Endpoints: eps})
	cc, err := grpc.NewClient(r.Scheme()+":///backends",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(sc),
	)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return cc, r
}

// tally counts replies per backend name and failures.
type tally struct {
	mu     sync.Mutex
	by     map[string]int
	failed int
	errs   []error
	fails  []failure // every failed call, for tests that ask when it began
}

// failure is one failed call: when it was sent and how it ended.
type failure struct {
	start time.Time
	err   error
}

func newTally() *tally { return &tally{by: map[string]int{}} }

func (c *tally) add(name string, err error, start time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.failed++
		if len(c.errs) < 5 {
			c.errs = append(c.errs, err)
		}
		c.fails = append(c.fails, failure{start, err})
		return
	}
	c.by[name]++
}

// failures returns a copy of the failed calls.
func (c *tally) failures() []failure {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]failure(nil), c.fails...)
}

func (c *tally) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.by {
		n += v
	}
	return n
}

// share returns name's fraction of the successful replies.
func (c *tally) share(name string) float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, v := range c.by {
		n += v
	}
	if n == 0 {
		return 0
	}
	return float64(c.by[name]) / float64(n)
}

func (c *tally) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	names := make([]string, 0, len(c.by))
	for k, v := range c.by {
		n += v
		names = append(names, k)
	}
	sort.Strings(names)
	var sb strings.Builder
	fmt.Fprintf(&sb, "%d replies, %d failed:", n, c.failed)
	for _, k := range names {
		fmt.Fprintf(&sb, " %s %.3f", k, float64(c.by[k])/float64(max(n, 1)))
	}
	return sb.String()
}

// load sends calls echo RPCs over workers goroutines, each with a fresh
// timeout, and returns the tally. key, when not nil, gives the metadata
// for call i. It returns when all calls are done or the budget is spent.
func load(t *testing.T, cc *grpc.ClientConn, workers, calls int, md func(i int) []string) *tally {
	t.Helper()
	c := newTally()
	var next atomic.Int64
	deadline := time.Now().Add(20 * time.Second)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= calls || time.Now().After(deadline) {
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if md != nil {
					ctx = metadataContext(ctx, md(i))
				}
				start := time.Now()
				name, err := echo.Call(ctx, cc, "hi")
				cancel()
				c.add(name, err, start)
			}
		})
	}
	wg.Wait()
	require.Equal(t, calls, c.total()+c.failed, "load ran out of time: %v", c)
	return c
}

// metadataContext returns ctx with kv (key, value, ...) as outgoing
// metadata.
func metadataContext(ctx context.Context, kv []string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// eventually polls cond every 10 ms until it holds or 10 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkNoLeaks fails the test if, once it has ended (and its channels and
// servers are closed), goroutines from gRPC or from this module remain.
// Call it first in a test so that its cleanup runs last.
func checkNoLeaks(t *testing.T) {
	t.Cleanup(func() {
		var left []string
		deadline := time.Now().Add(5 * time.Second)
		for {
			left = leftovers()
			if len(left) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(left) > 0 {
			t.Errorf("%d goroutines outlived the test; the first:\n%s", len(left), left[0])
		}
	})
}

func leftovers() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var left []string
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 { // this goroutine
			continue
		}
		// "lbpolicy." and not "lbpolicy_test.": the test binary's main
		// goroutine runs TestMain.
		if strings.Contains(g, "google.golang.org/grpc") || strings.Contains(g, "examples/grpc/lbpolicy.") {
			left = append(left, g)
		}
	}
	return left
}
