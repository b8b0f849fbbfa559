package lbmetrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
)

// Balancer is the decorator Metrics.Wrap returns: a balancer.Balancer and
// a balancer.Feedback that passes every call on to the wrapped balancer
// and records it in its Metrics. Pick returns the wrapped Pick's Backend
// itself.
//
// A Balancer is safe for concurrent use. Pick and Done take no lock and
// allocate nothing; Update is serialised by a mutex used only by writers
// (Update, and the sweep of removed backends at a scrape).
type Balancer struct {
	// Immutable after Wrap.
	m     *Metrics
	inner balancer.Balancer
	fb    balancer.Feedback  // inner's, or nil
	view  func() health.View // inner's View, if it is a health Balancer

	// cur maps the ID of every backend with series (in the set, or
	// removed with series not yet deleted) to them. A published snapshot
	// is never changed.
	cur atomic.Pointer[snapshot]

	// mu serialises Update and sweep; it guards the fields below.
	mu       sync.Mutex
	live     map[string]*series // the set of the last successful Update
	draining map[string]*series // removed, series not yet deleted
}

var (
	_ balancer.Balancer  = (*Balancer)(nil)
	_ balancer.Feedback  = (*Balancer)(nil)
	_ balancer.Starter   = (*Balancer)(nil)
	_ balancer.Unwrapper = (*Balancer)(nil)
	_ io.Closer          = (*Balancer)(nil)
)

// Start starts the wrapped balancer if it has a Start method
// (health.Balancer has: its probes and its applier), so that a decorated
// stack is started from the top; otherwise it does nothing. The decorator
// has no background work of its own. Start returns the wrapped Start's
// error as it is (balancer.StartInner), so that a second Start of the
// stack returns the inner layer's balancer.ErrStarted.
func (b *Balancer) Start(ctx context.Context) error { return balancer.StartInner(ctx, b.inner) }

// Close closes the wrapped balancer if it has a Close method
// (health.Balancer has: it stops its probes and its applier), so that a
// decorated stack can be shut down from the top; otherwise it does
// nothing. The series stay registered: unregister the Metrics to drop
// them. It returns the wrapped Close's error as it is
// (balancer.CloseInner).
func (b *Balancer) Close() error { return balancer.CloseInner(b.inner) }

// Unwrap returns the wrapped balancer, so that balancer.As finds it, or a
// layer inside it, through the decorator: for health's Drain,
// Maintenance, Enable and View, say.
//
//	if h, ok := balancer.As[*health.Balancer](lb); ok {
//		err = h.Drain("10.0.0.1:8080")
//	}
//
// Give the backends to the decorator's Update, never to the wrapped
// balancer's: the metrics learn them only there.
func (b *Balancer) Unwrap() balancer.Picker { return b.inner }

// snapshot is an immutable map from backend ID to series.
type snapshot struct {
	byID map[string]*series
}

// series holds one backend's resolved metric children and its in-flight
// count. Its fields are immutable after newSeries but for the atomic
// counter and the fields marked otherwise.
type series struct {
	id        string
	picks     prometheus.Counter
	failures  prometheus.Counter
	abandoned prometheus.Counter
	latency   prometheus.Observer
	flight    balancer.InFlight // padded: its own cache line

	// Guarded by Metrics.stateMu.
	states  [numStates]prometheus.Gauge // nil until health says a state
	deleted bool

	// Guarded by Balancer.mu.
	seen bool // a sweep has found it removed
}

// Pick picks from the wrapped balancer and counts the pick for the backend
// it returns, or the error by reason; one Pick in Config.PickSampling is
// timed.
//
// Cost: the wrapped Pick, the backend's ID, a map read and two atomic
// adds; a random draw when PickSampling is above 1, and for a timed Pick
// two clock readings and a histogram observation. No lock, no allocation.
func (b *Balancer) Pick(req balancer.Request) (balancer.Backend, error) {
	m := b.m
	var (
		be  balancer.Backend
		err error
	)
	if m.sampleAt == ^uint64(0) || rand.Uint64() <= m.sampleAt {
		start := time.Now()
		be, err = b.inner.Pick(req)
		m.pickDur.Observe(time.Since(start).Seconds())
	} else {
		be, err = b.inner.Pick(req)
	}
	if err != nil {
		switch {
		case err == balancer.ErrNoBackend: //nolint:errorlint // Pick returns the sentinel itself
			m.errNone.Inc()
		case errors.Is(err, balancer.ErrBadKey):
			m.errKey.Inc()
		default:
			m.errOther.Inc()
		}
		return be, err
	}
	if be == nil {
		return be, err // the wrapped picker broke its contract: pass it on
	}
	if s := b.cur.Load().byID[be.ID()]; s != nil {
		s.picks.Inc()
		s.flight.Inc()
	}
	return be, nil
}

// Done records the result of a request to be (in flight one fewer; a
// failure, an abandoned request, a latency sample, as Result says) and
// passes it on to the wrapped balancer's Done, if it has one.
//
// What counts: Err non-nil and not abandoned (see balancer.Result.Abandoned)
// is a failure; abandoned is counted apart and takes no latency sample; a
// positive Latency of a request not abandoned is a sample, failures
// included. Done for nil, unknown or removed backends only passes the
// result on, unless the removed backend's series are still kept.
//
// Cost: a map read, a few atomic operations, a histogram observation and
// for a failed Result the walk of its error's chain. No lock, no
// allocation.
func (b *Balancer) Done(be balancer.Backend, r balancer.Result) {
	if be != nil {
		if s := b.cur.Load().byID[be.ID()]; s != nil {
			abandoned := r.Abandoned()
			switch {
			case abandoned:
				s.abandoned.Inc()
			case r.Err != nil:
				s.failures.Inc()
			}
			if r.Latency > 0 && !abandoned {
				s.latency.Observe(r.Latency.Seconds())
			}
			s.flight.Dec()
		}
	}
	if b.fb != nil {
		b.fb.Done(be, r)
	}
}

// Update validates bs, makes the series of new backends, then updates the
// wrapped balancer. If either refuses the set, Update returns the error and
// the previous set and series stay. Backends that leave the set keep their
// series while requests to them are in flight (see the package doc,
// "Removed backends").
//
// The series of new backends are published before the wrapped Update, so
// that a Pick that returns a new backend the moment the wrapped balancer
// has it is counted.
//
// Update must not be called from health.Config.OnChange: health delivers
// changes inside the wrapped Update, while this Update holds its mutex.
//
// Cost: O(n) map work, the children of each new backend, the wrapped
// Update, and with a health Balancer inside, its View.
func (b *Balancer) Update(bs []balancer.Backend) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	set, err := balancer.NewSet(bs)
	if err != nil {
		return fmt.Errorf("lbmetrics: update: %w", err)
	}
	for i, id := range set.IDs {
		if !utf8.ValidString(id) {
			return fmt.Errorf("lbmetrics: update: the ID %q at position %d is not valid UTF-8, which a Prometheus label value must be", id, i)
		}
	}
	// Before this Update's removals, which get a scrape first; backends
	// coming back keep their series.
	var keep map[string]bool
	if len(b.draining) > 0 {
		keep = make(map[string]bool, len(set.IDs))
		for _, id := range set.IDs {
			keep[id] = true
		}
	}
	b.sweep(keep)

	old := b.cur.Load()
	next := maps.Clone(old.byID)
	if next == nil {
		next = map[string]*series{}
	}
	var added []*series
	for _, id := range set.IDs {
		if next[id] == nil {
			s := b.m.newSeries(id)
			next[id] = s
			added = append(added, s)
		}
	}
	if len(added) > 0 {
		b.cur.Store(&snapshot{byID: next})
	}
	if err := b.inner.Update(bs); err != nil {
		if len(added) > 0 {
			b.cur.Store(old)
			for _, s := range added {
				b.m.deleteSeries(s)
			}
		}
		return err
	}

	live := make(map[string]*series, len(set.IDs))
	for _, id := range set.IDs {
		s := next[id]
		live[id] = s
		delete(b.draining, id)
		s.seen = false
	}
	for id, s := range b.live {
		if live[id] == nil {
			b.draining[id] = s
		}
	}
	b.live = live
	b.m.refreshStates(b)
	return nil
}

// sweep deletes the series of removed backends that have no request in
// flight and were already found removed by an earlier sweep, so that a
// Pick that started before the Update that removed its backend, and ends
// after it, still finds the series. It spares the backends in keep. Call
// with mu held.
func (b *Balancer) sweep(keep map[string]bool) {
	var gone []*series
	for id, s := range b.draining {
		if s.seen && s.flight.Load() == 0 && !keep[id] {
			gone = append(gone, s)
			delete(b.draining, id)
		}
		s.seen = true
	}
	if len(gone) == 0 {
		return
	}
	next := maps.Clone(b.cur.Load().byID)
	for _, s := range gone {
		delete(next, s.id)
	}
	b.cur.Store(&snapshot{byID: next})
	for _, s := range gone {
		b.m.deleteSeries(s)
	}
}
