package lbxds_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/lbhttp"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/locality"
)

// serve runs handler on a loopback port and returns its address.
func serve(t testing.TB, handler http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: wait}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// named is a backend that answers with its name.
func named(name string, hits *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if hits != nil {
			hits.Add(1)
		}
		_, _ = io.WriteString(w, name)
	})
}

// proxyOver serves lbhttp.NewProxy over health ▶ locality ▶ leastconn
// and returns the stack and the proxy's URL.
func proxyOver(t testing.TB) (*health.Balancer, string) {
	t.Helper()
	l, err := locality.New(func() balancer.Balancer { return leastconn.New() }, locality.Config{})
	require.NoError(t, err)
	h, err := health.New(l, health.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.Close() })
	p, err := lbhttp.NewProxy(h, lbhttp.Config{})
	require.NoError(t, err)
	return h, "http://" + serve(t, p)
}

func get(client *http.Client, url string) (string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	return string(body), err
}

// An endpoint the control plane marks DRAINING, with a request in flight
// through the proxy: the request finishes, the next 50 go elsewhere, and
// none fails. gRPC's client would drop it at once.
func TestDrainThroughProxy(t *testing.T) {
	release := make(chan struct{})
	var hitsA atomic.Int64
	addrA := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hitsA.Add(1)
		if r.URL.Path == "/slow" {
			select {
			case <-release:
			case <-time.After(wait):
			}
		}
		_, _ = io.WriteString(w, "a")
	}))
	addrB := serve(t, named("b", nil))
	h, url := proxyOver(t)
	cp := newControlPlane(t)
	c := newClient(t, cp, map[string]balancer.Updater{"svc": h})
	waitVersion(t, c, cp.set(t, cla("svc", loc("r", "a", 0, 0, healthy(addrA)))))

	client := &http.Client{Timeout: wait}
	slow := make(chan error, 1)
	go func() {
		body, err := get(client, url+"/slow")
		if err == nil && body != "a" {
			err = fmt.Errorf("body %q", body)
		}
		slow <- err
	}()
	require.Eventually(t, func() bool { return hitsA.Load() == 1 }, wait, time.Millisecond, "the slow request reached A")

	waitVersion(t, c, cp.set(t, cla("svc", loc("r", "a", 0, 0, ep(addrA, 0, corev3.HealthStatus_DRAINING), healthy(addrB)))))
	var drained bool
	for _, b := range h.View().Backends {
		if b.ID == addrA {
			drained = b.State == health.Draining
		}
	}
	assert.True(t, drained, "A is drained in health, not removed")
	for range 50 {
		body, err := get(client, url+"/")
		require.NoError(t, err)
		assert.Equal(t, "b", body, "no new request reaches the draining endpoint")
	}
	close(release)
	require.NoError(t, <-slow, "the request in flight on the draining endpoint finished")
	assert.Equal(t, int64(1), hitsA.Load())

	waitVersion(t, c, cp.set(t, cla("svc", loc("r", "a", 0, 0, healthy(addrB)))))
	assert.Len(t, h.View().Backends, 1, "unlisted, A leaves the set")
}

// A proxy follows a snapshot that replaces every backend within a
// second, with no failed request: four clients send requests through it
// all along, the old backends keep serving what they were given, and
// every request that starts once the client has ACKed the new version
// goes to a new backend.
func TestProxyFollowsSnapshot(t *testing.T) {
	var old, next []*endpointv3.LbEndpoint
	oldNames := map[string]bool{}
	for i := range 3 {
		old = append(old, healthy(serve(t, named(fmt.Sprintf("old%d", i), nil))))
		next = append(next, healthy(serve(t, named(fmt.Sprintf("new%d", i), nil))))
		oldNames[fmt.Sprintf("old%d", i)] = true
	}
	h, url := proxyOver(t)
	cp := newControlPlane(t)
	c := newClient(t, cp, map[string]balancer.Updater{"svc": h})
	waitVersion(t, c, cp.set(t, cla("svc", loc("r", "a", 0, 0, old...))))

	type result struct {
		start time.Time
		body  string
		err   error
	}
	var (
		mu      sync.Mutex
		results []result
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	client := &http.Client{Timeout: wait}
	for range 4 {
		wg.Go(func() {
			// Bounded: until stop, or 20,000 requests at most.
			for range 20_000 {
				select {
				case <-stop:
					return
				default:
				}
				start := time.Now()
				body, err := get(client, url+"/")
				mu.Lock()
				results = append(results, result{start, body, err})
				mu.Unlock()
			}
		})
	}
	time.Sleep(200 * time.Millisecond)
	pushed := time.Now()
	v := cp.set(t, cla("svc", loc("r", "a", 0, 0, next...)))
	waitVersion(t, c, v)
	acked := time.Now()
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()

	var failed, before, after, lateOld int
	firstNew := time.Duration(-1)
	for _, r := range results {
		if r.err != nil {
			failed++
			t.Logf("failed: %v", r.err)
			continue
		}
		if !oldNames[r.body] && firstNew < 0 {
			firstNew = r.start.Sub(pushed)
		}
		switch {
		case r.start.Before(pushed):
			before++
		case r.start.After(acked):
			after++
			if oldNames[r.body] {
				lateOld++
			}
		}
	}
	t.Logf("%d requests: %d before the push, %d after the ACK; ACKed %v after the push; first request to a new backend started %v after it",
		len(results), before, after, acked.Sub(pushed), firstNew)
	assert.Zero(t, failed, "no request fails during the change")
	assert.Less(t, acked.Sub(pushed), time.Second, "the change is taken within a second")
	assert.Positive(t, before)
	assert.Positive(t, after)
	assert.Zero(t, lateOld, "no request started after the ACK reaches an old backend")
}
