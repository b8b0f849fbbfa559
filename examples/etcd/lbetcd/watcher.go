package lbetcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/discovery"
)

// Defaults of Config and RegisterConfig.
const (
	// DefaultTimeout bounds each request to etcd: a list, a grant, a
	// put, a revoke. It is etcdctl's --command-timeout.
	DefaultTimeout = 5 * time.Second
	// DefaultSyncTimeout bounds Start's wait for the first list, as
	// lbkube's DefaultSyncTimeout bounds its wait for the first list of
	// EndpointSlices.
	DefaultSyncTimeout = 30 * time.Second
)

// coalesce bounds the watch responses applied together before one
// Publish: a burst of writes (a fleet registering at once) is published
// in a few updates, not one per key, and a steady stream of them still
// reaches the target.
const coalesce = 256

// Config says which prefix a Watcher reads, and how.
type Config struct {
	// Prefix is the key prefix whose keys are the endpoints, one a key:
	// "/services/cart/". Required. End it with the delimiter your keys
	// use: "/services/cart" also matches "/services/cart-v2/...".
	Prefix string
	// Format is how the values spell endpoints. Default JSON.
	Format Format
	// Timeout bounds each list of the prefix. Zero: DefaultTimeout.
	Timeout time.Duration
	// SyncTimeout bounds Start's wait for the first list, through
	// retries. Zero: DefaultSyncTimeout.
	SyncTimeout time.Duration
	// Backoff is the wait between two attempts to list after a failure
	// (etcd unreachable, no leader, a watch cancelled). Zero: gRPC's
	// connection backoff (discovery.Backoff), with its jitter.
	Backoff discovery.Backoff
	// Backend makes the backend given to the target for an endpoint
	// (discovery.Config.Backend): a type of the caller's that keeps the
	// endpoint's Labels, say. Nil: a balancer.Endpoint with the
	// endpoint's weight and locality.
	Backend func(id string, e discovery.Endpoint) balancer.Backend
	// OnSync, if set, is called after each Publish to the target, with
	// what was given and what was skipped: the first from Start, the
	// others from the Watcher's goroutine, one at a time, with no lock
	// held. It must not call Close.
	OnSync func(Sync)
	// OnError, if set, is told of each failure to list or to watch; the
	// target keeps its set meanwhile. It is called like OnSync.
	OnError func(error)
}

// Sync reports one Publish of the prefix's endpoints to the target.
type Sync struct {
	// Revision is the etcd revision the set is of.
	Revision int64
	// Keys is how many keys the prefix has, good or not.
	Keys int
	// Listed says that the set comes from a list of the prefix (Start,
	// or a list again after a compaction or a failure), not from watch
	// events.
	Listed bool
	// Report says what the target was given (discovery.Report).
	discovery.Report
	// Problems lists every key whose value is no endpoint (not JSON, an
	// address that does not parse, a negative weight), sorted by key: it
	// is skipped, or, if it held a good record before, that record stays
	// in use. It lists too a key skipped because its address is under
	// another key, written later.
	Problems []Problem
	// Err is the error of the target's Update or of a Drain or Enable
	// that followed it (discovery.Publisher.Publish). A refused Update
	// leaves the target's set as it was, until the next change.
	Err error
}

// Watcher keeps a target's set in step with the keys under an etcd
// prefix: it lists the prefix, gives the target one endpoint per good
// key, then watches the prefix from the revision after the list and
// publishes each change. Create it with New, Start it, and Close it.
type Watcher struct {
	// Immutable after New.
	client *clientv3.Client
	pub    *discovery.Publisher
	cfg    Config

	// Guarded by mu: the lifecycle.
	mu      sync.Mutex
	started bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{} // closed when the work Start began has ended
}

var _ discovery.Source = (*Watcher)(nil)

// New returns a Watcher that gives target the endpoints under
// cfg.Prefix, read through client. target is usually the top of a stack
// (health, or subset around health): a draining endpoint is drained
// through its first balancer.Admin layer, and health reaches it through
// balancer.HealthUpdater, as discovery.Publisher does. New starts nothing
// and does not contact etcd. The Watcher does not close client.
func New(client *clientv3.Client, target balancer.Updater, cfg Config) (*Watcher, error) {
	switch {
	case client == nil:
		return nil, fmt.Errorf("%w: nil client", ErrConfig)
	case target == nil:
		return nil, fmt.Errorf("%w: nil target", ErrConfig)
	case cfg.Prefix == "":
		return nil, fmt.Errorf("%w: empty Prefix (it would watch every key)", ErrConfig)
	case cfg.Format > Plain:
		return nil, fmt.Errorf("%w: unknown %v", ErrConfig, cfg.Format)
	case cfg.Timeout < 0 || cfg.SyncTimeout < 0:
		return nil, fmt.Errorf("%w: Timeout (%v) and SyncTimeout (%v) must not be negative", ErrConfig, cfg.Timeout, cfg.SyncTimeout)
	case cfg.Backoff.Base < 0 || cfg.Backoff.Max < 0:
		return nil, fmt.Errorf("%w: Backoff.Base (%v) and Backoff.Max (%v) must not be negative", ErrConfig, cfg.Backoff.Base, cfg.Backoff.Max)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.SyncTimeout == 0 {
		cfg.SyncTimeout = DefaultSyncTimeout
	}
	pub, err := discovery.New(target, discovery.Config{Backend: cfg.Backend})
	if err != nil {
		return nil, fmt.Errorf("lbetcd: %w", err)
	}
	return &Watcher{client: client, pub: pub, cfg: cfg}, nil
}

// Start lists the prefix, gives the target its first set, and then keeps
// it in step, on a goroutine of its own, until ctx ends or Close is
// called. The first list is tried again (after Config.Backoff's waits)
// until it succeeds or Config.SyncTimeout passes; Start then returns an
// error wrapping ErrNotSynced and the Watcher is stopped. Start returns
// the first Publish's error otherwise (the Watcher runs on: the next
// change tries again), an error wrapping balancer.ErrStarted if called
// again, and one wrapping balancer.ErrClosed after Close.
func (w *Watcher) Start(ctx context.Context) error {
	w.mu.Lock()
	switch {
	case w.closed:
		w.mu.Unlock()
		return fmt.Errorf("lbetcd: start: %w", balancer.ErrClosed)
	case w.started:
		w.mu.Unlock()
		return fmt.Errorf("lbetcd: start: %w", balancer.ErrStarted)
	}
	w.started = true
	ctx, w.cancel = context.WithCancel(ctx)
	w.done = make(chan struct{})
	w.mu.Unlock()

	rs, rev, first, err := w.firstList(ctx)
	if err != nil {
		w.cancel()
		close(w.done)
		return err
	}
	go w.run(ctx, rs, rev)
	return first.Err
}

// firstList lists the prefix until a list succeeds, within SyncTimeout.
func (w *Watcher) firstList(ctx context.Context) (*records, int64, Sync, error) {
	deadline := time.Now().Add(w.cfg.SyncTimeout)
	for n := 0; ; n++ {
		rs, rev, s, err := w.list(ctx, nil, min(w.cfg.Timeout, time.Until(deadline)))
		if err == nil {
			return rs, rev, s, nil
		}
		wait := w.cfg.Backoff.Delay(n)
		if ctx.Err() != nil || time.Until(deadline) < wait {
			return nil, 0, Sync{}, fmt.Errorf("%w %q within %v: %w", ErrNotSynced, w.cfg.Prefix, w.cfg.SyncTimeout, err)
		}
		w.fail(err)
		if !sleep(ctx, wait) {
			return nil, 0, Sync{}, fmt.Errorf("%w %q: %w", ErrNotSynced, w.cfg.Prefix, ctx.Err())
		}
	}
}

// Close stops the Watcher and waits for its goroutine, and for the
// watch it holds to be cancelled. The target keeps its last set. Close is
// idempotent, and returns nil.
func (w *Watcher) Close() error {
	w.mu.Lock()
	w.closed = true
	cancel, done := w.cancel, w.done
	w.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	return nil
}

// run watches from rev, and lists again when the watch ends, until ctx
// ends. A compaction lists again at once (nothing is wrong, the watch
// only fell behind); any other failure waits the backoff first. The
// backoff starts over once a watch is established.
func (w *Watcher) run(ctx context.Context, rs *records, rev int64) {
	defer close(w.done)
	// A watcher of its own, so that Close ends its gRPC stream and its
	// goroutines whatever else shares the client.
	watcher := clientv3.NewWatcher(w.client)
	defer watcher.Close()
	failures := 0
	for {
		err := w.watch(ctx, watcher, rs, rev, &failures)
		if ctx.Err() != nil {
			return
		}
		w.fail(err)
		if !errors.Is(err, rpctypes.ErrCompacted) {
			if !sleep(ctx, w.cfg.Backoff.Delay(failures)) {
				return
			}
			failures++
		}
		for {
			var next *records
			next, rev, _, err = w.list(ctx, rs, w.cfg.Timeout)
			if err == nil {
				rs = next
				break
			}
			if ctx.Err() != nil {
				return
			}
			w.fail(err)
			if !sleep(ctx, w.cfg.Backoff.Delay(failures)) {
				return
			}
			failures++
		}
	}
}

// list reads every key of the prefix, linearizably and from a member
// with a leader, and publishes them. It returns the records, the
// revision to watch from (the list's, plus one) and the sync; on error it
// publishes nothing. prev, if not nil, are the records the list
// replaces, whose last good records stay in use for keys now bad.
func (w *Watcher) list(ctx context.Context, prev *records, timeout time.Duration) (*records, int64, Sync, error) {
	lctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), timeout)
	defer cancel()
	resp, err := w.client.Get(lctx, w.cfg.Prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, Sync{}, fmt.Errorf("lbetcd: listing %q: %w", w.cfg.Prefix, err)
	}
	rs := newRecords(w.cfg.Format, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		rs.put(prev, string(kv.Key), kv.Value, kv.ModRevision)
	}
	rev := resp.Header.Revision
	return rs, rev + 1, w.publish(rs, rev, true), nil
}

// watch applies the prefix's changes from revision rev to rs, publishing
// after each batch, until the watch ends; it returns why. A watch
// established resets *failures.
func (w *Watcher) watch(ctx context.Context, watcher clientv3.Watcher, rs *records, rev int64, failures *int) error {
	// WithRequireLeader: a member cut off from its cluster cancels the
	// watch (etcdserver: no leader) instead of keeping it open, silent.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := watcher.Watch(wctx, w.cfg.Prefix, clientv3.WithPrefix(), clientv3.WithRev(rev), clientv3.WithCreatedNotify())
	for {
		var resp clientv3.WatchResponse
		var ok bool
		select {
		case resp, ok = <-wch:
		case <-ctx.Done():
			return ctx.Err()
		}
		// Apply this response and those already waiting, then publish
		// once.
		changed, last := false, rev-1
		var end error
		for i := 0; ; i++ {
			if !ok {
				end = fmt.Errorf("lbetcd: watch of %q from revision %d closed", w.cfg.Prefix, rev)
				break
			}
			if err := resp.Err(); err != nil {
				if resp.CompactRevision != 0 {
					err = fmt.Errorf("%w (compacted at revision %d)", err, resp.CompactRevision)
				}
				end = fmt.Errorf("lbetcd: watching %q from revision %d: %w; listing again", w.cfg.Prefix, rev, err)
				break
			}
			if resp.Created {
				*failures = 0
			}
			for _, ev := range resp.Events {
				switch ev.Type {
				case clientv3.EventTypePut:
					rs.put(rs, string(ev.Kv.Key), ev.Kv.Value, ev.Kv.ModRevision)
				case clientv3.EventTypeDelete:
					rs.del(string(ev.Kv.Key))
				}
				changed = true
				last = ev.Kv.ModRevision
				rev = last + 1
			}
			if i+1 == coalesce {
				break
			}
			select {
			case resp, ok = <-wch:
				continue
			default:
			}
			break
		}
		if changed {
			w.publish(rs, last, false)
		}
		if end != nil {
			return end
		}
	}
}

// publish gives the target rs's endpoints, and reports it.
func (w *Watcher) publish(rs *records, rev int64, listed bool) Sync {
	eps, problems := rs.endpoints()
	rep, err := w.pub.Publish(eps)
	s := Sync{Revision: rev, Keys: len(rs.byKey), Listed: listed, Report: rep, Problems: problems, Err: err}
	if w.cfg.OnSync != nil {
		w.cfg.OnSync(s)
	}
	return s
}

func (w *Watcher) fail(err error) {
	if w.cfg.OnError != nil {
		w.cfg.OnError(err)
	}
}

// sleep waits d, and reports false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
