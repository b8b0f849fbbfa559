package lbetcd_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/naming/endpoints"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/discovery"
	"github.com/lbkit/lbkit/examples/etcd/lbetcd"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/wrr"
)

// TestRecords: the fields of a JSON record reach the target: weight,
// zone, priority, and metadata through Config.Backend.
func TestRecords(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	put(t, c, "/svc/a", rec(lbetcd.Record{Address: "127.0.0.1:8001", Weight: 3, Zone: "z1", Metadata: map[string]string{"version": "v2"}}))
	put(t, c, "/svc/b", `{"address":"127.0.0.1:8002","priority":1,"future-field":true}`)
	put(t, c, "/svcx", rec(lbetcd.Record{Address: "127.0.0.1:9999"})) // not under "/svc/"

	r := newRecorder()
	ev := newEvents()
	cfg := ev.config("/svc/")
	labels := map[string]map[string]string{}
	cfg.Backend = func(id string, e discovery.Endpoint) balancer.Backend {
		labels[id] = e.Labels // the Publisher calls it under its lock, one at a time
		return balancer.NewEndpoint(id, max(e.Weight, 1)).At(e.Locality)
	}
	start(t, c, r, cfg)
	set := r.waitIDs(t, "127.0.0.1:8001", "127.0.0.1:8002")
	for _, b := range set {
		switch b.ID() {
		case "127.0.0.1:8001":
			assert.Equal(t, 3, balancer.WeightOf(b))
			assert.Equal(t, balancer.Locality{Zone: "z1"}, balancer.LocalityOf(b))
		case "127.0.0.1:8002":
			assert.Equal(t, 1, balancer.WeightOf(b))
			assert.Equal(t, balancer.Locality{Priority: 1}, balancer.LocalityOf(b))
		}
	}
	s1 := ev.lastSync()
	assert.True(t, s1.Listed)
	assert.Equal(t, 2, s1.Keys)
	assert.Empty(t, s1.Problems)
	assert.Equal(t, []string{"127.0.0.1:8001", "127.0.0.1:8002"}, s1.Healthy)

	// A change of weight is published.
	put(t, c, "/svc/b", rec(lbetcd.Record{Address: "127.0.0.1:8002", Weight: 7}))
	ev.waitFor(t, "sync of the new weight", func(ss []lbetcd.Sync, _ []error) bool {
		return len(ss) >= 2 && !ss[len(ss)-1].Listed
	})
	for _, b := range r.last() {
		if b.ID() == "127.0.0.1:8002" {
			assert.Equal(t, 7, balancer.WeightOf(b))
		}
	}
	assert.Equal(t, map[string]string{"version": "v2"}, labels["127.0.0.1:8001"])
}

// TestBadRecords: values that are not endpoints are skipped and reported
// in Sync.Problems, with the good keys published; a bad value written over
// a good one keeps the good one in use.
func TestBadRecords(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	bad := map[string]struct {
		value string
		is    error
	}{
		"/svc/not-json":   {"hello", lbetcd.ErrBadRecord},
		"/svc/truncated":  {`{"address":"127.0.0.1:80"`, lbetcd.ErrBadRecord},
		"/svc/bad-addr":   {`{"address":"127.0.0.1"}`, balancer.ErrBadAddr},
		"/svc/octal":      {`{"address":"127.0.0.01:80"}`, balancer.ErrBadAddr},
		"/svc/negative":   {`{"address":"127.0.0.1:81","weight":-1}`, balancer.ErrBadWeight},
		"/svc/fraction":   {`{"address":"127.0.0.1:82","weight":1.5}`, lbetcd.ErrBadRecord},
		"/svc/priority":   {`{"address":"127.0.0.1:83","priority":1000}`, balancer.ErrBadLocality},
		"/svc/state":      {`{"address":"127.0.0.1:84","state":"gone"}`, lbetcd.ErrBadRecord},
		"/svc/no-address": {`{"weight":2}`, lbetcd.ErrBadRecord},
		"/svc/null":       {`null`, lbetcd.ErrBadRecord},
		"/svc/empty":      {``, lbetcd.ErrBadRecord},
	}
	for k, v := range bad {
		put(t, c, k, v.value)
	}
	put(t, c, "/svc/good1", rec(lbetcd.Record{Address: "127.0.0.1:8001"}))
	put(t, c, "/svc/good2", rec(lbetcd.Record{Address: "127.0.0.1:8002", Weight: 2}))

	r := newRecorder()
	ev := newEvents()
	start(t, c, r, ev.config("/svc/"))
	r.waitIDs(t, "127.0.0.1:8001", "127.0.0.1:8002")
	got := ev.lastSync()
	assert.Equal(t, len(bad)+2, got.Keys)
	require.Len(t, got.Problems, len(bad), "%v", got.Problems)
	for _, p := range got.Problems {
		want, ok := bad[p.Key]
		if assert.True(t, ok, "problem for key %q", p.Key) {
			assert.ErrorIs(t, p.Err, lbetcd.ErrBadRecord, p.Key)
			assert.ErrorIs(t, p.Err, want.is, p.Key)
		}
	}
	for _, p := range got.Problems {
		t.Logf("problem: %v", p)
	}

	// A bad value over a good key: the good record stays in use, and the
	// key is reported.
	put(t, c, "/svc/good2", `{"address":"127.0.0.1:8002","weight":-5}`)
	ev.waitFor(t, "sync of the bad write", func(ss []lbetcd.Sync, _ []error) bool {
		return len(ss[len(ss)-1].Problems) == len(bad)+1
	})
	assert.Equal(t, []string{"127.0.0.1:8001", "127.0.0.1:8002"}, ids(r.last()))
	for _, b := range r.last() {
		if b.ID() == "127.0.0.1:8002" {
			assert.Equal(t, 2, balancer.WeightOf(b), "the last good record of the key")
		}
	}
	last := ev.lastSync()
	i := slices.IndexFunc(last.Problems, func(p lbetcd.Problem) bool { return p.Key == "/svc/good2" })
	require.GreaterOrEqual(t, i, 0)
	assert.ErrorIs(t, last.Problems[i].Err, balancer.ErrBadWeight)
	assert.Contains(t, last.Problems[i].Err.Error(), "stays in use")

	// Fixing a bad key brings it in.
	put(t, c, "/svc/negative", rec(lbetcd.Record{Address: "127.0.0.1:8081"}))
	r.waitIDs(t, "127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8081")
	assert.Empty(t, ev.errors(), "bad records are problems of the sync, not errors of the watch")
}

// TestDuplicateAddress: an address under two keys (a backend registered
// again under a new key, its old one not yet expired) is one backend, of
// the key written last; the other is reported.
func TestDuplicateAddress(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	put(t, c, "/svc/new", rec(lbetcd.Record{Address: "127.0.0.1:8001", Weight: 1}))
	put(t, c, "/svc/old", rec(lbetcd.Record{Address: "127.0.0.1:08001", Weight: 5})) // written last, spelled otherwise
	r := newRecorder()
	ev := newEvents()
	start(t, c, r, ev.config("/svc/"))
	set := r.waitIDs(t, "127.0.0.1:8001")
	assert.Equal(t, 5, balancer.WeightOf(set[0]))
	p := ev.lastSync().Problems
	require.Len(t, p, 1)
	assert.Equal(t, "/svc/new", p[0].Key)
	assert.ErrorIs(t, p[0].Err, balancer.ErrDuplicateID)

	put(t, c, "/svc/new", rec(lbetcd.Record{Address: "127.0.0.1:8001", Weight: 2}))
	ev.waitFor(t, "sync", func(ss []lbetcd.Sync, _ []error) bool {
		return len(ss[len(ss)-1].Problems) == 1 && ss[len(ss)-1].Problems[0].Key == "/svc/old"
	})
	assert.Equal(t, 2, balancer.WeightOf(r.last()[0]))
}

// TestDeletedKey: a deleted key's backend leaves the set; a prefix with no
// key left is an empty set, which reaches the target.
func TestDeletedKey(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	put(t, c, "/svc/a", rec(lbetcd.Record{Address: "127.0.0.1:8001"}))
	put(t, c, "/svc/b", rec(lbetcd.Record{Address: "127.0.0.1:8002"}))
	r := newRecorder()
	ev := newEvents()
	start(t, c, r, ev.config("/svc/"))
	r.waitIDs(t, "127.0.0.1:8001", "127.0.0.1:8002")

	_, err := c.Delete(ctx(t), "/svc/a")
	require.NoError(t, err)
	r.waitIDs(t, "127.0.0.1:8002")

	_, err = c.Delete(ctx(t), "/svc/b")
	require.NoError(t, err)
	r.waitIDs(t)
	ev.waitLast(t, "the empty sync", func(s lbetcd.Sync) bool { return s.Keys == 0 && len(s.Healthy) == 0 })
	assert.Empty(t, ev.errors())
}

// TestCompaction: the watcher falls behind (cut off from etcd by a
// partition) while keys change and etcd compacts past its revision; when
// it is back, its watch is refused as compacted, it lists again, and
// converges, and the writes that follow reach it.
func TestCompaction(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	writer := s.direct(t)
	put(t, writer, "/svc/a", rec(lbetcd.Record{Address: "127.0.0.1:8001"}))
	put(t, writer, "/svc/b", rec(lbetcd.Record{Address: "127.0.0.1:8002"}))
	r := newRecorder()
	ev := newEvents()
	start(t, c, r, ev.config("/svc/"))
	r.waitIDs(t, "127.0.0.1:8001", "127.0.0.1:8002")
	n := r.count()

	s.Partition()
	_, err := writer.Delete(ctx(t), "/svc/a")
	require.NoError(t, err)
	put(t, writer, "/svc/c", rec(lbetcd.Record{Address: "127.0.0.1:8003"}))
	rev := put(t, writer, "/other", "x") // a key outside the prefix moves the revision too
	_, err = writer.Compact(ctx(t), rev, clientv3.WithCompactPhysical())
	require.NoError(t, err)
	time.Sleep(200 * time.Millisecond)
	assert.Equal(t, n, r.count(), "the target got a set while the watcher was cut off")
	s.Heal(t)

	r.waitIDs(t, "127.0.0.1:8002", "127.0.0.1:8003")
	ev.waitFor(t, "compaction error", func(_ []lbetcd.Sync, errs []error) bool {
		return slices.ContainsFunc(errs, func(err error) bool { return errors.Is(err, rpctypes.ErrCompacted) })
	})
	ev.waitLast(t, "the list after the compaction", func(s lbetcd.Sync) bool { return s.Listed && s.Keys == 2 })
	t.Logf("errors: %v", ev.errors())

	// Writing on: the new watch follows.
	for i := 4; i <= 6; i++ {
		put(t, writer, fmt.Sprintf("/svc/%d", i), rec(lbetcd.Record{Address: fmt.Sprintf("127.0.0.1:800%d", i)}))
	}
	r.waitIDs(t, "127.0.0.1:8002", "127.0.0.1:8003", "127.0.0.1:8004", "127.0.0.1:8005", "127.0.0.1:8006")
	ev.waitLast(t, "the watch's sync", func(s lbetcd.Sync) bool { return !s.Listed && s.Keys == 5 })
}

// TestServerRestart: etcd stops; the target keeps its set for as long as
// it is down (no Update at all); etcd starts again on the same ports and
// data, and the changes that follow reach the target.
func TestServerRestart(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	put(t, c, "/svc/a", rec(lbetcd.Record{Address: "127.0.0.1:8001"}))
	put(t, c, "/svc/b", rec(lbetcd.Record{Address: "127.0.0.1:8002"}))
	r := newRecorder()
	ev := newEvents()
	start(t, c, r, ev.config("/svc/"))
	r.waitIDs(t, "127.0.0.1:8001", "127.0.0.1:8002")
	n := r.count()

	s.Stop(t)
	time.Sleep(2 * time.Second) // longer than the fast backoff's whole range
	assert.Equal(t, n, r.count(), "the target got a set while etcd was down")
	s.Start(t)

	put(t, c, "/svc/c", rec(lbetcd.Record{Address: "127.0.0.1:8003"}))
	r.waitIDs(t, "127.0.0.1:8001", "127.0.0.1:8002", "127.0.0.1:8003")
	t.Logf("errors during the outage: %v", ev.errors())
}

// TestPartitionWrites: writes made while the watcher is cut off reach it
// once the partition heals (its watch resumes from where it was).
func TestPartitionWrites(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	writer := s.direct(t)
	put(t, writer, "/svc/a", rec(lbetcd.Record{Address: "127.0.0.1:8001"}))
	r := newRecorder()
	ev := newEvents()
	start(t, c, r, ev.config("/svc/"))
	r.waitIDs(t, "127.0.0.1:8001")
	n := r.count()
	s.Partition()
	put(t, writer, "/svc/b", rec(lbetcd.Record{Address: "127.0.0.1:8002"}))
	_, err := writer.Delete(ctx(t), "/svc/a")
	require.NoError(t, err)
	time.Sleep(time.Second)
	assert.Equal(t, n, r.count(), "the target got a set while the watcher was cut off")
	s.Heal(t)
	r.waitIDs(t, "127.0.0.1:8002")
}

// Test1000Keys: a prefix of 1,000 keys, half listed at Start and half
// written while watching, then half deleted in one request.
func Test1000Keys(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	all := putMany(t, c, "/svc/", 0, 500)
	r := newRecorder()
	ev := newEvents()
	start(t, c, r, ev.config("/svc/"))
	r.waitIDs(t, all...)
	all = append(all, putMany(t, c, "/svc/", 500, 500)...)
	r.waitIDs(t, all...)
	ev.mu.Lock()
	t.Logf("1,000 keys: %d syncs (500 listed, then 5 transactions of 100 keys)", len(ev.syncs))
	ev.mu.Unlock()

	_, err := c.Delete(ctx(t), "/svc/0250", clientv3.WithRange("/svc/0750"))
	require.NoError(t, err)
	r.waitIDs(t, append(slices.Clone(all[:250]), all[750:]...)...)
	ev.waitLast(t, "the sync of 500 keys", func(s lbetcd.Sync) bool { return s.Keys == 500 })
	assert.Empty(t, ev.lastSync().Problems)
}

// TestNaming reads etcd's own naming format, written by etcd's own
// endpoints.Manager, and the plain format.
func TestNaming(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	m, err := endpoints.NewManager(c, "/naming/cart")
	require.NoError(t, err)
	require.NoError(t, m.AddEndpoint(ctx(t), "/naming/cart/127.0.0.1:8001", endpoints.Endpoint{Addr: "127.0.0.1:8001", Metadata: map[string]any{"version": "v2", "weight": 3}}))
	require.NoError(t, m.AddEndpoint(ctx(t), "/naming/cart/127.0.0.1:8002", endpoints.Endpoint{Addr: "127.0.0.1:8002"}))

	r := newRecorder()
	ev := newEvents()
	cfg := ev.config("/naming/cart/")
	cfg.Format = lbetcd.Naming
	var labels map[string]string
	cfg.Backend = func(id string, e discovery.Endpoint) balancer.Backend {
		if id == "127.0.0.1:8001" {
			labels = e.Labels
		}
		return balancer.NewEndpoint(id, 1)
	}
	start(t, c, r, cfg)
	r.waitIDs(t, "127.0.0.1:8001", "127.0.0.1:8002")
	assert.Equal(t, map[string]string{"version": "v2", "weight": "3"}, labels)

	require.NoError(t, m.DeleteEndpoint(ctx(t), "/naming/cart/127.0.0.1:8001"))
	r.waitIDs(t, "127.0.0.1:8002")

	// go-zero's shape: the value is the address.
	put(t, c, "/zero/cart/7587", "127.0.0.1:9001")
	put(t, c, "/zero/cart/7588", "not an address")
	r2 := newRecorder()
	ev2 := newEvents()
	cfg = ev2.config("/zero/cart/")
	cfg.Format = lbetcd.Plain
	start(t, c, r2, cfg)
	r2.waitIDs(t, "127.0.0.1:9001")
	require.Len(t, ev2.lastSync().Problems, 1)
	assert.ErrorIs(t, ev2.lastSync().Problems[0].Err, balancer.ErrBadAddr)
}

// TestDraining: a record that turns draining is drained in health (no new
// picks, still in the set) and enabled when healthy again.
func TestDraining(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	put(t, c, "/svc/a", rec(lbetcd.Record{Address: "127.0.0.1:8001"}))
	put(t, c, "/svc/b", rec(lbetcd.Record{Address: "127.0.0.1:8002"}))
	h, err := health.New(wrr.New(), health.Config{})
	require.NoError(t, err)
	defer h.Close()
	ev := newEvents()
	start(t, c, h, ev.config("/svc/"))
	stateOf := func(id string) health.State {
		for _, st := range h.View().Backends {
			if st.ID == id {
				return st.State
			}
		}
		return 255
	}
	require.Equal(t, health.Up, stateOf("127.0.0.1:8001"))

	put(t, c, "/svc/a", rec(lbetcd.Record{Address: "127.0.0.1:8001", State: "draining"}))
	ev.waitFor(t, "sync of the drain", func(ss []lbetcd.Sync, _ []error) bool {
		return slices.Equal(ss[len(ss)-1].Draining, []string{"127.0.0.1:8001"})
	})
	assert.Equal(t, health.Draining, stateOf("127.0.0.1:8001"))
	for range 20 {
		b, err := h.Pick(balancer.Request{})
		require.NoError(t, err)
		assert.Equal(t, "127.0.0.1:8002", b.ID())
	}

	put(t, c, "/svc/a", rec(lbetcd.Record{Address: "127.0.0.1:8001"}))
	ev.waitFor(t, "sync of the enable", func(ss []lbetcd.Sync, _ []error) bool {
		return len(ss[len(ss)-1].Draining) == 0 && len(ss[len(ss)-1].Healthy) == 2
	})
	assert.Equal(t, health.Up, stateOf("127.0.0.1:8001"))
}

// TestLifecycle: Start's errors, Start against an etcd that is down, and
// no goroutine left after Close.
func TestLifecycle(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	put(t, c, "/svc/a", rec(lbetcd.Record{Address: "127.0.0.1:8001"}))

	before := ours()
	w, err := lbetcd.New(c, newRecorder(), lbetcd.Config{Prefix: "/svc/"})
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	assert.ErrorIs(t, w.Start(context.Background()), balancer.ErrStarted)
	require.NoError(t, w.Close())
	require.NoError(t, w.Close())
	assert.ErrorIs(t, w.Start(context.Background()), balancer.ErrClosed)
	assertGoroutines(t, before)

	// Start's context ends the Watcher too.
	wctx, cancel := context.WithCancel(context.Background())
	r := newRecorder()
	w, err = lbetcd.New(c, r, lbetcd.Config{Prefix: "/svc/"})
	require.NoError(t, err)
	require.NoError(t, w.Start(wctx))
	cancel()
	assertGoroutines(t, before)
	n := r.count()
	put(t, c, "/svc/b", rec(lbetcd.Record{Address: "127.0.0.1:8002"}))
	time.Sleep(300 * time.Millisecond)
	assert.Equal(t, n, r.count())
	require.NoError(t, w.Close())

	// Against an etcd that is down, Start gives up after SyncTimeout.
	s.Stop(t)
	ev := newEvents()
	cfg := ev.config("/svc/")
	cfg.SyncTimeout, cfg.Timeout = time.Second, 200*time.Millisecond
	w, err = lbetcd.New(c, r, cfg)
	require.NoError(t, err)
	t0 := time.Now()
	err = w.Start(context.Background())
	took := time.Since(t0)
	assert.ErrorIs(t, err, lbetcd.ErrNotSynced)
	assert.Less(t, took, 10*time.Second)
	assert.NotEmpty(t, ev.errors(), "the failed attempts are reported")
	t.Logf("Start with etcd down: %v after %v; %d attempts reported", err, took.Round(time.Millisecond), len(ev.errors()))
	assert.ErrorIs(t, w.Start(context.Background()), balancer.ErrStarted, "a Watcher whose Start failed is stopped")
	require.NoError(t, w.Close())
}

// ours returns how many goroutines run code of this package or of etcd's
// client (its watchers and lessors): those a Watcher or a Registration
// can leave behind. gRPC's own goroutines of a connection, which come
// and go with the connection's state, are not counted.
func ours() int {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "go.etcd.io/etcd/client/v3.") || strings.Contains(g, "examples/etcd/lbetcd.") {
			n++
		}
	}
	return n
}

// assertGoroutines waits for ours to fall back to n, and fails with every
// stack if it does not.
func assertGoroutines(tb testing.TB, n int) {
	tb.Helper()
	deadline := time.Now().Add(wait)
	for ours() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<22)
			tb.Fatalf("%d goroutines of lbetcd and etcd's client, %d before:\n%s", ours(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestNewErrors(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	for name, tc := range map[string]struct {
		c   *clientv3.Client
		t   balancer.Updater
		cfg lbetcd.Config
	}{
		"nil client":     {nil, newRecorder(), lbetcd.Config{Prefix: "/p/"}},
		"nil target":     {c, nil, lbetcd.Config{Prefix: "/p/"}},
		"empty prefix":   {c, newRecorder(), lbetcd.Config{}},
		"unknown format": {c, newRecorder(), lbetcd.Config{Prefix: "/p/", Format: 9}},
		"negative":       {c, newRecorder(), lbetcd.Config{Prefix: "/p/", Timeout: -1}},
		"backoff":        {c, newRecorder(), lbetcd.Config{Prefix: "/p/", Backoff: discovery.Backoff{Base: -1}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := lbetcd.New(tc.c, tc.t, tc.cfg)
			assert.ErrorIs(t, err, lbetcd.ErrConfig)
		})
	}
}

// TestSource runs balancertest's conformance check for discovery sources
// on the Watcher, against the real etcd: Set writes and deletes keys,
// Fail stops the server and Heal starts it again on the same ports and
// data directory.
func TestSource(t *testing.T) {
	s := newServer(t)
	c := s.client(t)
	writer := s.direct(t)
	const prefix = "/runsource/"
	// The client's connection is made at its first request; make it now,
	// so that the check's goroutine count does not see it.
	_, err := c.Get(ctx(t), prefix)
	require.NoError(t, err)
	balancertest.RunSource(t, balancertest.SourceHarness{
		New: func(tb testing.TB, target balancer.Updater) discovery.Source {
			w, err := lbetcd.New(c, target, lbetcd.Config{Prefix: prefix, Backoff: fast})
			require.NoError(tb, err)
			return w
		},
		Set: func(tb testing.TB, eps []discovery.Endpoint) {
			resp, err := writer.Get(ctx(tb), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
			require.NoError(tb, err)
			want := map[string]bool{}
			var ops []clientv3.Op
			for _, e := range eps {
				want[prefix+e.Addr] = true
				ops = append(ops, clientv3.OpPut(prefix+e.Addr, rec(lbetcd.Record{Address: e.Addr})))
			}
			for _, kv := range resp.Kvs {
				if !want[string(kv.Key)] {
					ops = append(ops, clientv3.OpDelete(string(kv.Key)))
				}
			}
			_, err = writer.Txn(ctx(tb)).Then(ops...).Commit()
			require.NoError(tb, err)
		},
		Fail: func(tb testing.TB) { s.Stop(tb) },
		Heal: func(tb testing.TB) { s.Start(tb) },
	})
}
