package lbetcd_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/discovery"
	"github.com/lbkit/lbkit/examples/etcd/lbetcd"
)

// wait bounds every wait for the watch: a healthy run never comes near
// it, a loaded machine may take seconds.
const wait = 20 * time.Second

// fast is the backoff of the tests' Watchers and Registrations, so that a
// test does not wait gRPC's one second per retry.
var fast = discovery.Backoff{Base: 50 * time.Millisecond, Max: 500 * time.Millisecond}

// recorder is a target that keeps every set it is given, validated as a
// picker validates it.
type recorder struct {
	mu      sync.Mutex
	sets    [][]balancer.Backend
	changed chan struct{} // capacity 1
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{}, 1)} }

func (r *recorder) Update(bs []balancer.Backend) error {
	if _, err := balancer.NewSet(bs); err != nil {
		return err
	}
	r.mu.Lock()
	r.sets = append(r.sets, slices.Clone(bs))
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
	return nil
}

// count returns how many sets were taken.
func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.sets)
}

// last returns the last set taken, nil if none.
func (r *recorder) last() []balancer.Backend {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sets) == 0 {
		return nil
	}
	return r.sets[len(r.sets)-1]
}

// ids returns the sorted IDs of bs.
func ids(bs []balancer.Backend) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.ID()
	}
	slices.Sort(out)
	return out
}

// waitIDs waits for the last set to have the IDs want (any order), and
// returns it.
func (r *recorder) waitIDs(tb testing.TB, want ...string) []balancer.Backend {
	tb.Helper()
	want = slices.Sorted(slices.Values(want))
	if want == nil {
		want = []string{}
	}
	deadline := time.Now().Add(wait)
	for {
		r.mu.Lock()
		n := len(r.sets)
		r.mu.Unlock()
		got := ids(r.last())
		if n > 0 && slices.Equal(got, want) {
			return r.last()
		}
		if time.Now().After(deadline) {
			tb.Fatalf("after %v the target has %d backends %.200v (%d sets); want %d: %.200v", wait, len(got), got, n, len(want), want)
		}
		select {
		case <-r.changed:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// events collects what a Watcher reports.
type events struct {
	mu     sync.Mutex
	syncs  []lbetcd.Sync
	errs   []error
	notify chan struct{}
}

func newEvents() *events { return &events{notify: make(chan struct{}, 1)} }

func (e *events) onSync(s lbetcd.Sync) {
	e.mu.Lock()
	e.syncs = append(e.syncs, s)
	e.mu.Unlock()
	e.poke()
}

func (e *events) onError(err error) {
	e.mu.Lock()
	e.errs = append(e.errs, err)
	e.mu.Unlock()
	e.poke()
}

func (e *events) poke() {
	select {
	case e.notify <- struct{}{}:
	default:
	}
}

func (e *events) lastSync() lbetcd.Sync {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.syncs) == 0 {
		return lbetcd.Sync{}
	}
	return e.syncs[len(e.syncs)-1]
}

func (e *events) errors() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.errs)
}

// waitFor waits until cond holds of what was reported.
func (e *events) waitFor(tb testing.TB, what string, cond func(syncs []lbetcd.Sync, errs []error) bool) {
	tb.Helper()
	deadline := time.Now().Add(wait)
	for {
		e.mu.Lock()
		ok := cond(e.syncs, e.errs)
		e.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			e.mu.Lock()
			defer e.mu.Unlock()
			tb.Fatalf("no %s after %v; errors %v", what, wait, e.errs)
		}
		select {
		case <-e.notify:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitLast waits until cond holds of the last Sync reported: OnSync
// runs after the target's Update, so a test that saw the set may be
// ahead of it.
func (e *events) waitLast(tb testing.TB, what string, cond func(lbetcd.Sync) bool) {
	tb.Helper()
	e.waitFor(tb, what, func(ss []lbetcd.Sync, _ []error) bool { return len(ss) > 0 && cond(ss[len(ss)-1]) })
}

// config returns a Watcher config for prefix that reports to ev.
func (e *events) config(prefix string) lbetcd.Config {
	return lbetcd.Config{Prefix: prefix, Backoff: fast, OnSync: e.onSync, OnError: e.onError}
}

// start makes and starts a Watcher, closed at tb's end.
func start(tb testing.TB, c *clientv3.Client, target balancer.Updater, cfg lbetcd.Config) *lbetcd.Watcher {
	tb.Helper()
	w, err := lbetcd.New(c, target, cfg)
	require.NoError(tb, err)
	require.NoError(tb, w.Start(context.Background()))
	tb.Cleanup(func() { w.Close() })
	return w
}

// ctx returns a context that bounds one request of a test.
func ctx(tb testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), wait)
	tb.Cleanup(cancel)
	return c
}

// put writes key = value.
func put(tb testing.TB, c *clientv3.Client, key, value string) int64 {
	tb.Helper()
	r, err := c.Put(ctx(tb), key, value)
	require.NoError(tb, err)
	return r.Header.Revision
}

// rec returns the JSON of a record.
func rec(r lbetcd.Record) string {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// putMany writes n records prefix%04d (from first) of addresses
// 127.1.x.y:8080, in transactions of 100 keys.
func putMany(tb testing.TB, c *clientv3.Client, prefix string, first, n int) []string {
	tb.Helper()
	var addrs []string
	var ops []clientv3.Op
	flush := func() {
		_, err := c.Txn(ctx(tb)).Then(ops...).Commit()
		require.NoError(tb, err)
		ops = ops[:0]
	}
	for i := first; i < first+n; i++ {
		a := fmt.Sprintf("127.1.%d.%d:8080", i/250, i%250+1)
		addrs = append(addrs, a)
		ops = append(ops, clientv3.OpPut(fmt.Sprintf("%s%04d", prefix, i), rec(lbetcd.Record{Address: a})))
		if len(ops) == 100 {
			flush()
		}
	}
	if len(ops) > 0 {
		flush()
	}
	return addrs
}
