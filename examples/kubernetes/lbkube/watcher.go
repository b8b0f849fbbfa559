package lbkube

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
)

// Errors returned by this package. Test for them with errors.Is.
var (
	// ErrConfig reports a Config that New refuses.
	ErrConfig = errors.New("lbkube: invalid config")
	// ErrNotSynced is returned by Start when the first list of the
	// Service's EndpointSlices did not arrive within Config.SyncTimeout.
	ErrNotSynced = errors.New("lbkube: endpoint slices not synced")
	// ErrStarted is returned by a second Start, and by Start after Close.
	ErrStarted = errors.New("lbkube: already started")
)

// DefaultSyncTimeout is how long Start waits for the first list of
// EndpointSlices by default.
const DefaultSyncTimeout = 30 * time.Second

// Config says which Service to watch and how.
type Config struct {
	// Namespace and Service name the Service. Both are required.
	Namespace, Service string
	// Port is the name of the Service port to send to, as the
	// EndpointSlices name it ("http", "grpc"). Default "": the slices'
	// only port; a slice with several ports is then skipped and reported
	// in Sync.Problems.
	Port string
	// AddressType keeps one IP family: discoveryv1.AddressTypeIPv4 or
	// AddressTypeIPv6. Default "": both, so that a dual-stack pod is two
	// backends, one per family (a single-stack pod, one). FQDN slices are
	// always skipped.
	AddressType discoveryv1.AddressType
	// SyncTimeout bounds Start's wait for the first list. Default 30s.
	SyncTimeout time.Duration
	// Resync is the informer's resync period: every Resync the whole set
	// is given to Update again, and terminating endpoints are drained
	// again. Default 0: no resync; every change the watch delivers is
	// applied as it comes.
	Resync time.Duration
	// OnSync, if set, is called after every sync, with no lock held: the
	// first from Start, the others from the Watcher's goroutine, one at a
	// time. It must not call Close.
	OnSync func(Sync)
}

// Sync reports one sync of the target with the slices.
type Sync struct {
	// Slices is how many EndpointSlices the Service has.
	Slices int
	// Eligible are the IDs given to Update as ready; Draining those
	// given to Update and drained; both sorted.
	Eligible, Draining []string
	// Hinted reports that zones came from topology hints.
	Hinted bool
	// Problems lists the slices skipped and why (a port not found, an
	// FQDN slice).
	Problems []string
	// Err is the error of the target's Update, Drain or Enable, if any.
	// An Update that failed leaves the target's previous set in place;
	// the next change of the slices tries again.
	Err error
}

// Watcher keeps a target's set in step with a Service's EndpointSlices.
// Create it with New, then Start it; Close stops it.
type Watcher struct {
	// Immutable after New.
	target balancer.Updater
	admin  balancer.Admin // target's, or nil
	cfg    Config
	lister discoverylisters.EndpointSliceNamespaceLister
	sel    labels.Selector
	inf    cache.SharedIndexInformer
	fact   informers.SharedInformerFactory
	wake   chan struct{} // capacity 1: the slices changed

	// Guarded by mu: the lifecycle.
	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}

	// Owned by the sync goroutine (and by Start's first sync, before it
	// starts).
	inSet   map[string]bool // IDs of the last set given to Update
	drained map[string]bool // IDs drained and not enabled since
	order   []string        // drained IDs, oldest first, for the bound
}

// New returns a Watcher that will give target the ready and terminating
// endpoints of the Service, through client. target is usually a
// health.Balancer (around a locality.Balancer, to use the zones), or a
// subset.Balancer around one: if a layer of it implements balancer.Admin
// (the target itself, or one reached through Unwrap), a terminating
// endpoint is drained (its requests in flight finish, no new ones go to
// it) until it leaves the slices; otherwise it leaves the set at once.
// New starts nothing.
func New(client kubernetes.Interface, target balancer.Updater, cfg Config) (*Watcher, error) {
	switch {
	case client == nil:
		return nil, fmt.Errorf("%w: nil client", ErrConfig)
	case target == nil:
		return nil, fmt.Errorf("%w: nil target", ErrConfig)
	case cfg.Namespace == "" || cfg.Service == "":
		return nil, fmt.Errorf("%w: Namespace and Service are required, got %q and %q", ErrConfig, cfg.Namespace, cfg.Service)
	case cfg.AddressType != "" && cfg.AddressType != discoveryv1.AddressTypeIPv4 && cfg.AddressType != discoveryv1.AddressTypeIPv6:
		return nil, fmt.Errorf("%w: AddressType is %q, want \"\", IPv4 or IPv6", ErrConfig, cfg.AddressType)
	case cfg.SyncTimeout < 0 || cfg.Resync < 0:
		return nil, fmt.Errorf("%w: SyncTimeout (%v) and Resync (%v) must not be negative", ErrConfig, cfg.SyncTimeout, cfg.Resync)
	}
	if cfg.SyncTimeout == 0 {
		cfg.SyncTimeout = DefaultSyncTimeout
	}
	sel := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: cfg.Service})
	fact := informers.NewSharedInformerFactoryWithOptions(client, cfg.Resync,
		informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel.String() }))
	slices := fact.Discovery().V1().EndpointSlices()
	w := &Watcher{
		target:  target,
		cfg:     cfg,
		lister:  slices.Lister().EndpointSlices(cfg.Namespace),
		sel:     sel,
		inf:     slices.Informer(),
		fact:    fact,
		wake:    make(chan struct{}, 1),
		inSet:   map[string]bool{},
		drained: map[string]bool{},
	}
	w.admin = adminOf(target)
	poke := func(any) { w.poke() }
	if _, err := w.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    poke,
		UpdateFunc: func(_, obj any) { w.poke() },
		DeleteFunc: poke,
	}); err != nil {
		return nil, fmt.Errorf("lbkube: %w", err)
	}
	return w, nil
}

// adminOf returns the first layer of target that is a balancer.Admin,
// target itself or one found through the decorators' Unwrap (health
// inside subset) with balancer.As, or nil if none is.
func adminOf(target balancer.Updater) balancer.Admin {
	if a, ok := target.(balancer.Admin); ok {
		return a // an Updater that is no Picker, which As cannot take
	}
	p, _ := target.(balancer.Picker)
	a, _ := balancer.As[balancer.Admin](p)
	return a
}

// known drops the error of a Drain or Enable for a backend the admin
// layer does not know: one outside this client's subset, to which this
// client sends nothing.
func known(err error) error {
	if errors.Is(err, health.ErrUnknownBackend) {
		return nil
	}
	return err
}

func (w *Watcher) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Start starts the informer, waits for the first list of the Service's
// slices (at most Config.SyncTimeout, or until ctx ends), gives the target
// its first set, and then keeps it in step until ctx ends or Close. It
// returns an error wrapping ErrNotSynced if the list did not come in
// time (the Watcher is then stopped), ErrStarted if called twice, and the
// first sync's error.
func (w *Watcher) Start(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return fmt.Errorf("lbkube: start: %w", ErrStarted)
	}
	w.started = true
	ctx, w.cancel = context.WithCancel(ctx)
	w.done = make(chan struct{})
	w.mu.Unlock()

	w.fact.Start(ctx.Done())
	waitCtx, stop := context.WithTimeout(ctx, w.cfg.SyncTimeout)
	ok := cache.WaitForCacheSync(waitCtx.Done(), w.inf.HasSynced)
	stop()
	if !ok {
		w.cancel()
		close(w.done)
		return fmt.Errorf("lbkube: start: %s/%s: %w after %v", w.cfg.Namespace, w.cfg.Service, ErrNotSynced, w.cfg.SyncTimeout)
	}
	first := w.sync()
	go w.run(ctx)
	return first.Err
}

// run applies changes until ctx ends.
func (w *Watcher) run(ctx context.Context) {
	defer close(w.done)
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
			w.sync()
		}
	}
}

// Close stops the Watcher and waits for its goroutine. The target keeps
// its last set. Close is idempotent.
func (w *Watcher) Close() error {
	w.mu.Lock()
	w.started = true // no Start after Close
	cancel, done := w.cancel, w.done
	w.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	w.fact.Shutdown()
	return nil
}

// sync lists the slices, merges them and brings the target in line:
// drain the endpoints that turned terminating (while they are still in
// the set), Update, drain again those that an Update may have brought
// back (a subset around health picking anew), and enable those that are
// ready again after a drain.
func (w *Watcher) sync() Sync {
	es, err := w.lister.List(w.sel)
	if err != nil {
		return w.report(Sync{Err: fmt.Errorf("lbkube: list: %w", err)})
	}
	m := merge(es, w.cfg.Port, w.cfg.AddressType)
	r := Sync{Slices: len(es), Hinted: m.hinted, Problems: m.problems}
	var set []balancer.Backend
	var drain, enable []string
	ready := map[string]bool{}
	for _, e := range m.endpoints {
		switch {
		case e.state == eligible:
			set = append(set, e.backend())
			r.Eligible = append(r.Eligible, e.id)
			ready[e.id] = true
			if w.drained[e.id] {
				enable = append(enable, e.id)
			}
		case e.state == draining && w.admin != nil && w.inSet[e.id]:
			// Known and now terminating: keep it, drained. A terminating
			// endpoint never given to Update has nothing in flight.
			set = append(set, e.backend())
			r.Draining = append(r.Draining, e.id)
			drain = append(drain, e.id)
		}
	}
	var errs []error
	for _, id := range drain {
		if !w.drained[id] {
			errs = append(errs, known(w.admin.Drain(id)))
			w.markDrained(id)
		}
	}
	if err := w.target.Update(set); err != nil {
		r.Err = fmt.Errorf("lbkube: update: %w", errors.Join(append(errs, err)...))
		return w.report(r)
	}
	w.inSet = make(map[string]bool, len(set))
	for _, b := range set {
		w.inSet[b.ID()] = true
	}
	for _, id := range drain {
		errs = append(errs, known(w.admin.Drain(id)))
	}
	for _, id := range enable {
		errs = append(errs, known(w.admin.Enable(id)))
		delete(w.drained, id)
	}
	if err := errors.Join(errs...); err != nil {
		r.Err = fmt.Errorf("lbkube: %w", err)
	}
	return w.report(r)
}

// markDrained records a drained ID, keeping the record bounded: the last
// max(4n, 1024) drained, for a set of n, which outlasts health's own
// record of removed backends (max(n, 64)), so that an address that comes
// back (a new pod given a terminated pod's IP) is always enabled.
func (w *Watcher) markDrained(id string) {
	w.drained[id] = true
	w.order = append(w.order, id)
	for limit := max(4*len(w.inSet), 1024); len(w.order) > limit; {
		old := w.order[0]
		w.order = w.order[1:]
		if !w.inSet[old] {
			delete(w.drained, old)
		}
	}
}

func (w *Watcher) report(r Sync) Sync {
	if w.cfg.OnSync != nil {
		w.cfg.OnSync(r)
	}
	return r
}
