package lbetcd_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/etcd/lbetcd"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/wrr"
)

// errs collects a Registration's OnError reports.
type errs struct {
	mu   sync.Mutex
	list []error
}

func (e *errs) add(err error) { e.mu.Lock(); e.list = append(e.list, err); e.mu.Unlock() }

func (e *errs) all() []error { e.mu.Lock(); defer e.mu.Unlock(); return slices.Clone(e.list) }

// exists reports whether key is in etcd, and its lease.
func exists(tb testing.TB, c *clientv3.Client, key string) (bool, clientv3.LeaseID) {
	tb.Helper()
	r, err := c.Get(ctx(tb), key)
	require.NoError(tb, err)
	if len(r.Kvs) == 0 {
		return false, 0
	}
	return true, clientv3.LeaseID(r.Kvs[0].Lease)
}

// TestRegisterClose: a Registration's key is under its lease; Close
// revokes the lease, so the key and the backend go at once, and leaves no
// goroutine behind.
func TestRegisterClose(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	before := ours()
	r := newRecorder()
	w := start(t, c, r, newEvents().config("/svc/"))
	r.waitIDs(t)

	reg, err := lbetcd.Register(ctx(t), c, lbetcd.RegisterConfig{Key: "/svc/a", Record: lbetcd.Record{Address: "127.0.0.1:8001", Zone: "z"}})
	require.NoError(t, err)
	r.waitIDs(t, "127.0.0.1:8001")
	ok, lease := exists(t, c, "/svc/a")
	require.True(t, ok)
	assert.Equal(t, reg.Lease(), lease)
	ttl, err := c.TimeToLive(ctx(t), lease)
	require.NoError(t, err)
	assert.Equal(t, int64(lbetcd.DefaultTTL/time.Second), ttl.GrantedTTL)

	require.NoError(t, reg.Close())
	ok, _ = exists(t, c, "/svc/a")
	assert.False(t, ok, "the key is gone when Close returns")
	r.waitIDs(t)
	require.NoError(t, reg.Close())
	require.NoError(t, w.Close())
	assertGoroutines(t, before)
	assert.ErrorIs(t, reg.Drain(ctx(t)), balancer.ErrClosed)
}

// TestLeaseExpiry: a registrant that dies (its client closed at once,
// the lease not revoked) leaves the set within its TTL.
func TestLeaseExpiry(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	r := newRecorder()
	start(t, c, r, newEvents().config("/svc/"))
	r.waitIDs(t)

	const ttl = 3 * time.Second
	dying := s.direct(t)
	reg, err := lbetcd.Register(ctx(t), dying, lbetcd.RegisterConfig{Key: "/svc/a", Record: lbetcd.Record{Address: "127.0.0.1:8001"}, TTL: ttl, Backoff: fast})
	require.NoError(t, err)
	r.waitIDs(t, "127.0.0.1:8001")
	time.Sleep(ttl / 2) // a keep-alive or two

	require.NoError(t, dying.Close()) // the process dies: no revoke
	died := time.Now()
	ok, _ := exists(t, c, "/svc/a")
	assert.True(t, ok, "the key outlives its registrant until the lease expires")
	r.waitIDs(t)
	gone := time.Since(died)
	t.Logf("the backend left the set %v after its registrant died (TTL %v)", gone.Round(10*time.Millisecond), ttl)
	// The lease had at most TTL left at the death; etcd checks for
	// expired leases every 500 ms and revokes them through raft.
	assert.Less(t, gone, ttl+3*time.Second)
	t0 := time.Now()
	err = reg.Close()
	t.Logf("Close: %v, after %v", err, time.Since(t0).Round(time.Millisecond))
	assert.Error(t, err, "the revoke fails: the client is closed")
}

// TestRegisterLeaseLost: a lease revoked under the Registration (what a
// partition longer than the TTL does) is replaced: the key comes back
// under a new lease, and OnError hears of it.
func TestRegisterLeaseLost(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	r := newRecorder()
	ev := newEvents()
	start(t, c, r, ev.config("/svc/"))
	var e errs
	reg, err := lbetcd.Register(ctx(t), c, lbetcd.RegisterConfig{Key: "/svc/a", Record: lbetcd.Record{Address: "127.0.0.1:8001"}, TTL: 2 * time.Second, Backoff: fast, OnError: e.add})
	require.NoError(t, err)
	defer reg.Close()
	r.waitIDs(t, "127.0.0.1:8001")
	ev.mu.Lock()
	n := len(ev.syncs)
	ev.mu.Unlock()

	old := reg.Lease()
	_, err = s.direct(t).Revoke(ctx(t), old)
	require.NoError(t, err)
	ev.waitFor(t, "the key deleted and written again", func(ss []lbetcd.Sync, _ []error) bool {
		return len(ss) >= n+2 && len(ss[len(ss)-1].Healthy) == 1
	})
	assert.Equal(t, []string{"127.0.0.1:8001"}, ids(r.last()))
	// The Watcher may see the key written before Register has noted its
	// new lease.
	for deadline := time.Now().Add(wait); reg.Lease() == old && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	assert.NotEqual(t, old, reg.Lease())
	ok, lease := exists(t, c, "/svc/a")
	assert.True(t, ok)
	assert.Equal(t, reg.Lease(), lease)
	require.NotEmpty(t, e.all())
	assert.Contains(t, e.all()[0].Error(), "lost")
}

// TestRegisterOutage: etcd is down for longer than the TTL; the
// Watcher's set stays, the Registration tries again, and once etcd is
// back the key is under a new lease, the old one revoked.
func TestRegisterOutage(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	r := newRecorder()
	start(t, c, r, newEvents().config("/svc/"))
	var e errs
	const ttl = 2 * time.Second
	reg, err := lbetcd.Register(ctx(t), c, lbetcd.RegisterConfig{Key: "/svc/a", Record: lbetcd.Record{Address: "127.0.0.1:8001"}, TTL: ttl, Timeout: time.Second, Backoff: fast, OnError: e.add})
	require.NoError(t, err)
	defer reg.Close()
	r.waitIDs(t, "127.0.0.1:8001")
	time.Sleep(ttl / 2) // the first keep-alive answered: the lease's deadline is now TTL away
	old := reg.Lease()
	n := r.count()

	s.Stop(t)
	time.Sleep(2 * ttl)
	assert.Equal(t, n, r.count(), "the target got a set while etcd was down")
	s.Start(t)

	// The keep-alive gave up after a TTL without answer: the key is
	// written again under a new lease, and the old one is revoked (etcd
	// renews every lease when it restarts, so it still lived).
	deadline := time.Now().Add(wait)
	for reg.Lease() == old && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	require.NotEqual(t, old, reg.Lease(), "registered again after the outage; errors %v", e.all())
	// The old lease is revoked, or if the revoke failed (etcd just back,
	// reported), it expires: nothing keeps it alive.
	for time.Now().Before(deadline) {
		if l, err := c.TimeToLive(ctx(t), old); err == nil && l.TTL == -1 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	l, err := c.TimeToLive(ctx(t), old)
	require.NoError(t, err)
	assert.Equal(t, int64(-1), l.TTL, "the old lease is gone")
	// The new lease is kept alive: the key outlives two TTLs.
	time.Sleep(2 * ttl)
	ok, lease := exists(t, c, "/svc/a")
	assert.True(t, ok)
	assert.Equal(t, reg.Lease(), lease)
	assert.Equal(t, []string{"127.0.0.1:8001"}, ids(r.last()))
	es := e.all()
	require.NotEmpty(t, es)
	assert.Contains(t, es[0].Error(), "lost")
	t.Logf("%d errors reported, the first two: %v", len(es), es[:min(2, len(es))])
}

// TestRegisterDrain: Drain rewrites the record as draining; a Watcher
// feeding health drains the backend, then Close removes it.
func TestRegisterDrain(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	h, err := health.New(wrr.New(), health.Config{})
	require.NoError(t, err)
	defer h.Close()
	ev := newEvents()
	start(t, c, h, ev.config("/svc/"))
	a, err := lbetcd.Register(ctx(t), c, lbetcd.RegisterConfig{Key: "/svc/a", Record: lbetcd.Record{Address: "127.0.0.1:8001"}})
	require.NoError(t, err)
	b, err := lbetcd.Register(ctx(t), c, lbetcd.RegisterConfig{Key: "/svc/b", Record: lbetcd.Record{Address: "127.0.0.1:8002"}})
	require.NoError(t, err)
	defer b.Close()
	ev.waitFor(t, "both", func(ss []lbetcd.Sync, _ []error) bool { return len(ss[len(ss)-1].Healthy) == 2 })

	require.NoError(t, a.Drain(ctx(t)))
	ev.waitFor(t, "the drain", func(ss []lbetcd.Sync, _ []error) bool {
		return slices.Equal(ss[len(ss)-1].Draining, []string{"127.0.0.1:8001"})
	})
	for range 20 {
		p, err := h.Pick(balancer.Request{})
		require.NoError(t, err)
		assert.Equal(t, "127.0.0.1:8002", p.ID())
	}
	require.NoError(t, a.Close())
	ev.waitFor(t, "the removal", func(ss []lbetcd.Sync, _ []error) bool {
		l := ss[len(ss)-1]
		return len(l.Draining) == 0 && slices.Equal(l.Healthy, []string{"127.0.0.1:8002"})
	})
}

// TestRegisterNaming: a Registration in etcd's naming format is read by
// etcd's own endpoints.Manager.
func TestRegisterNaming(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	reg, err := lbetcd.Register(ctx(t), c, lbetcd.RegisterConfig{
		Key:    "/naming/cart/127.0.0.1:8001",
		Record: lbetcd.Record{Address: "127.0.0.1:8001", Metadata: map[string]string{"version": "v2"}},
		Format: lbetcd.Naming,
	})
	require.NoError(t, err)
	defer reg.Close()
	m, err := endpoints.NewManager(c, "/naming/cart")
	require.NoError(t, err)
	got, err := m.List(ctx(t))
	require.NoError(t, err)
	assert.Equal(t, endpoints.Key2EndpointMap{
		"/naming/cart/127.0.0.1:8001": {Addr: "127.0.0.1:8001", Metadata: map[string]any{"version": "v2"}},
	}, got)
	assert.Error(t, reg.Drain(ctx(t)), "the naming format has no state")
}

func TestRegisterErrors(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	good := lbetcd.Record{Address: "127.0.0.1:8001"}
	for name, tc := range map[string]struct {
		cfg  lbetcd.RegisterConfig
		is   error
		says string
	}{
		"no key":          {lbetcd.RegisterConfig{Record: good}, lbetcd.ErrConfig, "Key"},
		"fractional TTL":  {lbetcd.RegisterConfig{Key: "/k", Record: good, TTL: 1500 * time.Millisecond}, lbetcd.ErrConfig, "TTL"},
		"short TTL":       {lbetcd.RegisterConfig{Key: "/k", Record: good, TTL: time.Millisecond}, lbetcd.ErrConfig, "TTL"},
		"negative TTL":    {lbetcd.RegisterConfig{Key: "/k", Record: good, TTL: -time.Second}, lbetcd.ErrConfig, "TTL"},
		"no address":      {lbetcd.RegisterConfig{Key: "/k"}, lbetcd.ErrBadRecord, "no address"},
		"bad address":     {lbetcd.RegisterConfig{Key: "/k", Record: lbetcd.Record{Address: "127.0.0.1"}}, balancer.ErrBadAddr, "host:port"},
		"bad weight":      {lbetcd.RegisterConfig{Key: "/k", Record: lbetcd.Record{Address: "127.0.0.1:80", Weight: -1}}, balancer.ErrBadWeight, "-1"},
		"bad state":       {lbetcd.RegisterConfig{Key: "/k", Record: lbetcd.Record{Address: "127.0.0.1:80", State: "up"}}, lbetcd.ErrBadRecord, "state"},
		"naming zone":     {lbetcd.RegisterConfig{Key: "/k", Record: lbetcd.Record{Address: "127.0.0.1:80", Zone: "z"}, Format: lbetcd.Naming}, lbetcd.ErrConfig, "zone"},
		"plain metadata":  {lbetcd.RegisterConfig{Key: "/k", Record: lbetcd.Record{Address: "127.0.0.1:80", Metadata: map[string]string{"a": "b"}}, Format: lbetcd.Plain}, lbetcd.ErrConfig, "metadata"},
		"unknown format":  {lbetcd.RegisterConfig{Key: "/k", Record: good, Format: 7}, lbetcd.ErrConfig, "Format(7)"},
		"negative backof": {lbetcd.RegisterConfig{Key: "/k", Record: good, Backoff: fast, Timeout: -1}, lbetcd.ErrConfig, "Timeout"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := lbetcd.Register(ctx(t), c, tc.cfg)
			require.ErrorIs(t, err, tc.is)
			assert.Contains(t, err.Error(), tc.says)
		})
	}
	_, err := lbetcd.Register(ctx(t), nil, lbetcd.RegisterConfig{Key: "/k", Record: good})
	assert.ErrorIs(t, err, lbetcd.ErrConfig)

	// etcd down: the first registration fails within ctx, and nothing is
	// left running.
	s.Stop(t)
	time.Sleep(200 * time.Millisecond)
	before := ours()
	rctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = lbetcd.Register(rctx, c, lbetcd.RegisterConfig{Key: "/k", Record: good})
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "grant"), err.Error())
	assertGoroutines(t, before)
}
