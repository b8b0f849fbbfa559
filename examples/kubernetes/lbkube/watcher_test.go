package lbkube_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/kubernetes/lbkube"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/locality"
	"github.com/lbkit/lbkit/subset"
)

func TestNewRefuses(t *testing.T) {
	c := fake.NewClientset()
	tests := []struct {
		name   string
		client *fake.Clientset
		target balancer.Updater
		cfg    lbkube.Config
	}{
		{"nil client", nil, &spy{}, lbkube.Config{Namespace: ns, Service: svc}},
		{"nil target", c, nil, lbkube.Config{Namespace: ns, Service: svc}},
		{"no namespace", c, &spy{}, lbkube.Config{Service: svc}},
		{"no service", c, &spy{}, lbkube.Config{Namespace: ns}},
		{"FQDN", c, &spy{}, lbkube.Config{Namespace: ns, Service: svc, AddressType: discoveryv1.AddressTypeFQDN}},
		{"negative timeout", c, &spy{}, lbkube.Config{Namespace: ns, Service: svc, SyncTimeout: -1}},
		{"negative resync", c, &spy{}, lbkube.Config{Namespace: ns, Service: svc, Resync: -time.Second}},
		{"address type", c, &spy{}, lbkube.Config{Namespace: ns, Service: svc, AddressType: "IPv5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var err error
			if tt.client == nil {
				_, err = lbkube.New(nil, tt.target, tt.cfg)
			} else {
				_, err = lbkube.New(tt.client, tt.target, tt.cfg)
			}
			assert.ErrorIs(t, err, lbkube.ErrConfig)
			assert.ErrorIs(t, err, balancer.ErrBadOption)
		})
	}
}

// kuberesolver, a common Go choice, has an open report of seeing at most
// 100 endpoints: the EndpointSlice controller puts at most 100 in a slice.
// Every slice of the Service is merged; other Services' slices are not.
func TestMoreThan100Endpoints(t *testing.T) {
	h, err := health.New(leastconn.New(), health.Config{})
	require.NoError(t, err)
	defer h.Close()
	other := slice("other-1", discoveryv1.AddressTypeIPv4, 8080, many(900, 5)...)
	other.Labels[discoveryv1.LabelServiceName] = "not-cart"
	r := newRig(t, h, lbkube.Config{},
		slice("cart-1", discoveryv1.AddressTypeIPv4, 8080, many(0, 100)...),
		slice("cart-2", discoveryv1.AddressTypeIPv4, 8080, many(100, 100)...),
		slice("cart-3", discoveryv1.AddressTypeIPv4, 8080, many(200, 50)...),
		other)
	s := r.await("with 250 eligible", func(s lbkube.Sync) bool { return len(s.Eligible) == 250 })
	assert.Equal(t, 3, s.Slices)
	assert.Len(t, h.View().Backends, 250)
	seen := map[string]bool{}
	for range 5000 {
		b, err := h.Pick(balancer.Request{})
		require.NoError(t, err)
		seen[b.ID()] = true
		h.Done(b, balancer.Result{Latency: time.Millisecond})
	}
	assert.Len(t, seen, 250, "every endpoint of every slice is picked")

	r.create(slice("cart-4", discoveryv1.AddressTypeIPv4, 8080, many(250, 60)...))
	r.await("with 310 eligible", func(s lbkube.Sync) bool { return len(s.Eligible) == 310 })
}

// A dual-stack Service has one slice per family: each address is a
// backend, IPv6 ones bracketed; AddressType keeps one family.
func TestDualStack(t *testing.T) {
	v4 := slice("cart-v4", discoveryv1.AddressTypeIPv4, 80, ep("10.0.0.1", ""), ep("10.0.0.2", ""))
	v6 := slice("cart-v6", discoveryv1.AddressTypeIPv6, 80, ep("fd00::1", ""), ep("fd00::2", ""))
	both := &spy{}
	r := newRig(t, both, lbkube.Config{}, v4, v6)
	r.awaitEligible("10.0.0.1:80", "10.0.0.2:80", "[fd00::1]:80", "[fd00::2]:80")

	only6 := &spy{}
	r6 := newRig(t, only6, lbkube.Config{AddressType: discoveryv1.AddressTypeIPv6}, v4, v6)
	r6.awaitEligible("[fd00::1]:80", "[fd00::2]:80")
	for _, b := range only6.current() {
		host, _, err := net.SplitHostPort(b.ID())
		require.NoError(t, err)
		assert.NotNil(t, net.ParseIP(host).To16())
	}
}

// The EndpointSlice controller splits a slice that grows and merges
// slices that shrink; an address may sit in two slices for a moment. The
// set stays the union, each address once.
func TestSlicesSplitAndMerge(t *testing.T) {
	all := many(0, 6)
	target := &spy{}
	r := newRig(t, target, lbkube.Config{}, slice("cart-a", discoveryv1.AddressTypeIPv4, 80, all...))
	want := []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80", "10.0.0.5:80", "10.0.0.6:80"}
	r.awaitEligible(want...)

	// Split: the new slice first holds copies, then the old one lets go.
	r.create(slice("cart-b", discoveryv1.AddressTypeIPv4, 80, all[3:]...))
	r.await("with two slices", func(s lbkube.Sync) bool { return s.Slices == 2 })
	assert.Equal(t, want, r.last().Eligible, "an address in two slices is one backend")
	r.update(slice("cart-a", discoveryv1.AddressTypeIPv4, 80, all[:3]...))
	r.await("after the split", func(s lbkube.Sync) bool {
		return s.Slices == 2 && len(s.Eligible) == 6
	})
	assert.Equal(t, want, idsOf(target.current()))

	// Merge back into one.
	r.update(slice("cart-a", discoveryv1.AddressTypeIPv4, 80, all...))
	r.delete("cart-b")
	r.await("after the merge", func(s lbkube.Sync) bool { return s.Slices == 1 })
	assert.Equal(t, want, idsOf(target.current()))
	assert.Equal(t, want, r.last().Eligible)
}

// Conditions: ready is eligible; not ready is left out; terminating is
// drained while it stays in the slices, if it was in the set; a port is
// chosen by name; an FQDN slice is skipped with a problem reported.
func TestConditions(t *testing.T) {
	target := &spy{}
	s := slice("cart-1", discoveryv1.AddressTypeIPv4, 80,
		ep("10.0.0.1", ""), ep("10.0.0.2", ""), notReady(ep("10.0.0.3", "")),
		terminating(ep("10.0.0.4", ""), true))
	s.Ports = append(s.Ports, discoveryv1.EndpointPort{Name: ptr("metrics"), Port: ptr(int32(9090))})
	fqdn := slice("cart-fqdn", discoveryv1.AddressTypeFQDN, 80, ep("cart.example.test", ""))
	r := newRig(t, target, lbkube.Config{Port: "http"}, s, fqdn)
	got := r.awaitEligible("10.0.0.1:80", "10.0.0.2:80")
	assert.Empty(t, got.Draining, "terminating before it was ever in the set: left out")
	assert.Len(t, got.Problems, 1)
	assert.Contains(t, got.Problems[0], "cart-fqdn")

	// 10.0.0.2 starts terminating: drained first, kept in the set.
	s.Endpoints[1] = terminating(s.Endpoints[1], true)
	r.update(s)
	got = r.await("with 10.0.0.2 draining", func(s lbkube.Sync) bool { return len(s.Draining) == 1 })
	assert.Equal(t, []string{"10.0.0.2:80"}, got.Draining)
	assert.Equal(t, []string{"10.0.0.1:80", "10.0.0.2:80"}, idsOf(target.current()))
	assert.Contains(t, target.adminCalls(), "drain 10.0.0.2:80")

	// It is ready again (a new pod given the same IP): enabled.
	s.Endpoints[1] = ep("10.0.0.2", "")
	r.update(s)
	r.await("with 10.0.0.2 ready again", func(s lbkube.Sync) bool { return len(s.Draining) == 0 && len(s.Eligible) == 2 })
	assert.Contains(t, target.adminCalls(), "enable 10.0.0.2:80")

	// Port "metrics" picks the other port; "" with two ports is a problem.
	m := &spy{}
	rm := newRig(t, m, lbkube.Config{Port: "metrics"}, s)
	rm.awaitEligible("10.0.0.1:9090", "10.0.0.2:9090")
	none := &spy{}
	rn := newRig(t, none, lbkube.Config{}, s)
	got = rn.await("with a problem", func(s lbkube.Sync) bool { return len(s.Problems) > 0 })
	assert.Contains(t, got.Problems[0], `set Config.Port`)
}

// Zones go into the backends' locality; topology hints replace them when
// every ready endpoint has one, as kube-proxy uses hints all or not at
// all. A locality Balancer under health then routes by them.
func TestZonesAndHints(t *testing.T) {
	eps := []discoveryv1.Endpoint{
		hinted(ep("10.0.0.1", "z1"), "z1"), hinted(ep("10.0.0.2", "z1"), "z2"),
		hinted(ep("10.0.0.3", "z2"), "z2"), hinted(ep("10.0.0.4", "z3"), "z3"),
	}
	target := &spy{}
	r := newRig(t, target, lbkube.Config{}, slice("cart-1", discoveryv1.AddressTypeIPv4, 80, eps...))
	got := r.awaitEligible("10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80")
	assert.True(t, got.Hinted)
	zones := map[string]string{}
	for _, b := range target.current() {
		zones[b.ID()] = balancer.LocalityOf(b).Zone
	}
	assert.Equal(t, map[string]string{"10.0.0.1:80": "z1", "10.0.0.2:80": "z2", "10.0.0.3:80": "z2", "10.0.0.4:80": "z3"}, zones,
		"10.0.0.2 runs in z1 but is hinted for z2")

	eps = append(eps, ep("10.0.0.5", "z3")) // no hint: hints are dropped
	r.update(slice("cart-1", discoveryv1.AddressTypeIPv4, 80, eps...))
	got = r.await("without hints", func(s lbkube.Sync) bool { return len(s.Eligible) == 5 })
	assert.False(t, got.Hinted)
	for _, b := range target.current() {
		zones[b.ID()] = balancer.LocalityOf(b).Zone
	}
	assert.Equal(t, "z1", zones["10.0.0.2:80"], "its own zone again")

	// The whole stack: health around locality, from zone z3.
	l, err := locality.New(func() balancer.Balancer { return leastconn.New() }, locality.Config{Zone: "z3", MinSize: 1})
	require.NoError(t, err)
	h, err := health.New(l, health.Config{})
	require.NoError(t, err)
	defer h.Close()
	rl := newRig(t, h, lbkube.Config{}, slice("cart-1", discoveryv1.AddressTypeIPv4, 80, eps...))
	rl.await("with 5 eligible", func(s lbkube.Sync) bool { return len(s.Eligible) == 5 })
	for range 100 {
		b, err := h.Pick(balancer.Request{})
		require.NoError(t, err)
		assert.Equal(t, "z3", balancer.LocalityOf(b).Zone, "z3 has 2 of 5 backends for its share of callers: all local")
		h.Done(b, balancer.Result{})
	}
}

// A pod that terminates while a request to it is in flight: the request
// finishes, no new request goes to the pod, and no request fails. Real
// servers on loopback, one slice each (each its own port), behind health
// around leastconn.
func TestTerminatingDrainsWithoutFailing(t *testing.T) {
	release := make(chan struct{})
	var hitsA, hitsB atomic.Int64
	srvA := serve(t, func(w http.ResponseWriter, r *http.Request) {
		hitsA.Add(1)
		if r.URL.Path == "/slow" {
			<-release
		}
		_, _ = io.WriteString(w, "a")
	})
	srvB := serve(t, func(w http.ResponseWriter, r *http.Request) {
		hitsB.Add(1)
		_, _ = io.WriteString(w, "b")
	})
	lc := leastconn.New()
	h, err := health.New(lc, health.Config{})
	require.NoError(t, err)
	defer h.Close()
	sliceA := slice("cart-a", discoveryv1.AddressTypeIPv4, srvA, ep("127.0.0.1", ""))
	sliceB := slice("cart-b", discoveryv1.AddressTypeIPv4, srvB, ep("127.0.0.1", ""))
	r := newRig(t, h, lbkube.Config{}, sliceA, sliceB)
	idA, idB := "127.0.0.1:"+strconv.Itoa(int(srvA)), "127.0.0.1:"+strconv.Itoa(int(srvB))
	r.awaitEligible(idA, idB)

	client := &http.Client{Timeout: waitFor}
	send := func(path string) (string, error) {
		b, err := h.Pick(balancer.Request{})
		if err != nil {
			return "", err
		}
		start := time.Now()
		resp, err := client.Get("http://" + b.ID() + path)
		var body []byte
		if err == nil {
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		h.Done(b, balancer.Result{Latency: time.Since(start), Err: err})
		return string(body), err
	}

	// Hold one request on A, whichever leastconn sends first.
	var slow chan error
	for slow == nil {
		b, err := h.Pick(balancer.Request{})
		require.NoError(t, err)
		if b.ID() != idA {
			h.Done(b, balancer.Result{Err: balancer.ErrAbandoned})
			continue
		}
		slow = make(chan error, 1)
		go func() {
			resp, err := client.Get("http://" + b.ID() + "/slow")
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			h.Done(b, balancer.Result{Latency: time.Millisecond, Err: err})
			slow <- err
		}()
	}
	require.Eventually(t, func() bool { return hitsA.Load() == 1 }, waitFor, time.Millisecond, "the slow request reached A")

	sliceA.Endpoints[0] = terminating(sliceA.Endpoints[0], true)
	r.update(sliceA)
	r.await("with A draining", func(s lbkube.Sync) bool { return len(s.Draining) == 1 })
	for range 50 {
		body, err := send("/")
		require.NoError(t, err)
		assert.Equal(t, "b", body, "no new request reaches the terminating pod")
	}
	assert.Equal(t, int64(1), lc.InFlight(idA), "A's request is still in flight, still counted")
	close(release)
	require.NoError(t, <-slow, "the request in flight on the terminating pod finished")
	assert.Zero(t, lc.InFlight(idA))

	r.delete("cart-a")
	r.awaitEligible(idB)
	assert.Len(t, h.View().Backends, 1)
	for range 10 {
		_, err := send("/")
		require.NoError(t, err)
	}
	assert.Equal(t, int64(1), hitsA.Load())
	assert.Equal(t, int64(60), hitsB.Load())
}

// serve runs handler on a loopback port and returns the port.
func serve(t *testing.T, handler http.HandlerFunc) int32 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: waitFor}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitFor)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return int32(ln.Addr().(*net.TCPAddr).Port)
}

// A target that refuses a set keeps its previous one; the Sync says why.
func TestUpdateErrorReported(t *testing.T) {
	target := &spy{}
	s := slice("cart-1", discoveryv1.AddressTypeIPv4, 80, many(0, 2)...)
	r := newRig(t, target, lbkube.Config{}, s)
	r.awaitEligible("10.0.0.1:80", "10.0.0.2:80")
	target.mu.Lock()
	target.err = errors.New("refused")
	target.mu.Unlock()
	r.update(slice("cart-1", discoveryv1.AddressTypeIPv4, 80, many(0, 3)...))
	got := r.await("with an error", func(s lbkube.Sync) bool { return s.Err != nil })
	assert.ErrorContains(t, got.Err, "refused")
	assert.Equal(t, []string{"10.0.0.1:80", "10.0.0.2:80"}, idsOf(target.current()))
}

// Start gives up after SyncTimeout when the list never comes.
func TestStartTimesOut(t *testing.T) {
	c := fake.NewClientset()
	c.PrependReactor("list", "endpointslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("apiserver unreachable")
	})
	w, err := lbkube.New(c, &spy{}, lbkube.Config{Namespace: ns, Service: svc, SyncTimeout: 200 * time.Millisecond})
	require.NoError(t, err)
	start := time.Now()
	err = w.Start(t.Context())
	assert.ErrorIs(t, err, lbkube.ErrNotSynced)
	assert.ErrorContains(t, err, "apiserver unreachable", "why it did not sync")
	assert.Less(t, time.Since(start), waitFor)
	assert.ErrorIs(t, w.Start(t.Context()), balancer.ErrStarted, "stopped, and started once")
	require.NoError(t, w.Close())
	assert.ErrorIs(t, w.Start(t.Context()), balancer.ErrClosed)
}

// An API server that refuses connections: Start's error says so, and
// wraps the refusal, rather than only that the list did not come.
func TestStartSaysWhy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	c, err := kubernetes.NewForConfig(&rest.Config{Host: "http://" + addr})
	require.NoError(t, err)
	w, err := lbkube.New(c, &spy{}, lbkube.Config{Namespace: ns, Service: svc, SyncTimeout: 500 * time.Millisecond})
	require.NoError(t, err)
	err = w.Start(t.Context())
	t.Log(err)
	require.ErrorIs(t, err, lbkube.ErrNotSynced)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED, "%v", err)
	assert.ErrorContains(t, err, "connection refused")
	require.NoError(t, w.Close())
}

// With subset around health, the Watcher finds health's Drain through
// subset's Unwrap; a terminating endpoint outside this client's subset
// is no error (health does not know it; this client sends it nothing).
func TestDrainThroughSubset(t *testing.T) {
	h, err := health.New(leastconn.New(), health.Config{})
	require.NoError(t, err)
	s, err := subset.New(h, subset.Config{Size: 2, ClientID: "c"})
	require.NoError(t, err)
	defer s.Close()
	eps := many(0, 6)
	sl := slice("cart-1", discoveryv1.AddressTypeIPv4, 80, eps...)
	r := newRig(t, s, lbkube.Config{}, sl)
	r.await("with 6 eligible", func(s lbkube.Sync) bool { return len(s.Eligible) == 6 })
	member := s.Subset()[0]
	for i, e := range sl.Endpoints {
		if e.Addresses[0]+":80" != member {
			sl.Endpoints[i] = terminating(e, true) // every other pod terminates
		}
	}
	r.update(sl)
	got := r.await("with 5 draining", func(s lbkube.Sync) bool { return len(s.Draining) == 5 })
	assert.NoError(t, got.Err, "outsiders' Drains are no error")
	for _, st := range h.View().Backends {
		if st.ID != member {
			assert.Equal(t, health.Draining, st.State, "%s, in the subset and terminating, is drained", st.ID)
		}
	}
	for range 20 {
		b, err := s.Pick(balancer.Request{})
		require.NoError(t, err)
		assert.Equal(t, member, b.ID())
		s.Done(b, balancer.Result{})
	}
}

// Addresses become IDs through balancer.CanonicalAddr: an upper-case
// IPv6 address and an IPv4-mapped one are the backends their canonical
// spellings name, each once, not second backends beside them.
func TestAddressesCanonical(t *testing.T) {
	v4 := slice("cart-v4", discoveryv1.AddressTypeIPv4, 80, ep("10.0.0.1", ""))
	v6 := slice("cart-v6", discoveryv1.AddressTypeIPv6, 80,
		ep("FD00::1", ""), ep("fd00::1", ""), ep("::ffff:10.0.0.1", ""), ep("0:0::FFFF:a00:2", ""))
	target := &spy{}
	r := newRig(t, target, lbkube.Config{}, v4, v6)
	got := r.awaitEligible("10.0.0.1:80", "10.0.0.2:80", "[fd00::1]:80")
	assert.Empty(t, got.Problems)
	assert.Equal(t, []string{"10.0.0.1:80", "10.0.0.2:80", "[fd00::1]:80"}, idsOf(target.current()))
}

// A slice whose port is not from 1 to 65535 is skipped with a problem
// reported, as a slice without the port is; it makes no backend.
func TestPortOutOfRange(t *testing.T) {
	good := slice("cart-good", discoveryv1.AddressTypeIPv4, 80, ep("10.0.0.1", ""))
	var bad []*discoveryv1.EndpointSlice
	for i, p := range []int32{0, -1, 70000} {
		bad = append(bad, slice(fmt.Sprintf("cart-bad-%d", i), discoveryv1.AddressTypeIPv4, p, ep(fmt.Sprintf("10.0.1.%d", i+1), "")))
	}
	target := &spy{}
	r := newRig(t, target, lbkube.Config{}, append([]*discoveryv1.EndpointSlice{good}, bad...)...)
	got := r.await("with three problems", func(s lbkube.Sync) bool { return len(s.Problems) == 3 && s.Slices == 4 })
	assert.Equal(t, []string{"10.0.0.1:80"}, got.Eligible, "problems %q", got.Problems)
	assert.Equal(t, []string{"10.0.0.1:80"}, idsOf(target.current()))
	for i, p := range []string{"0", "-1", "70000"} {
		assert.Contains(t, got.Problems[i], fmt.Sprintf("slice cart-bad-%d: port %q is %s", i, "http", p))
	}
}
