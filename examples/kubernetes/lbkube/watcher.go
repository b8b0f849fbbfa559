package lbkube

import (
	"context"
	"errors"
	"fmt"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/discovery"
)

// Errors returned by this package. Test for them with errors.Is.
var (
	// ErrConfig reports a Config that New refuses.
	ErrConfig = fmt.Errorf("lbkube: invalid config: %w", balancer.ErrBadOption)
	// ErrNotSynced is returned by Start when the first list of the
	// Service's EndpointSlices did not arrive within Config.SyncTimeout.
	ErrNotSynced = errors.New("lbkube: endpoint slices not synced")
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
	// OnSync, if set, is called after every sync, with no lock held, from
	// the Watcher's goroutine, one at a time; Start returns after the
	// first. It must not call Close, which waits for that goroutine.
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
	// Problems lists the slices skipped and why (a port not found or out
	// of range, an FQDN slice).
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
	client kubernetes.Interface
	target balancer.Updater
	pub    *discovery.Publisher // gives target its sets, by the rules of every source
	cfg    Config
	lister discoverylisters.EndpointSliceNamespaceLister
	sel    labels.Selector
	inf    cache.SharedIndexInformer
	fact   informers.SharedInformerFactory
	wake   chan struct{} // capacity 1: the slices changed

	// The sync goroutine: Start and Close.
	life balancer.Lifecycle
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
		client: client,
		target: target,
		cfg:    cfg,
		lister: slices.Lister().EndpointSlices(cfg.Namespace),
		sel:    sel,
		inf:    slices.Informer(),
		fact:   fact,
		wake:   make(chan struct{}, 1),
	}
	pub, err := discovery.New(target, discovery.Config{})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	w.pub = pub
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
// time (the Watcher is then stopped), and with it why, when a list asked
// for then fails too (a refused connection: errors.Is(err,
// syscall.ECONNREFUSED); a 403); one wrapping balancer.ErrStarted if
// called twice and balancer.ErrClosed after Close (balancer.Lifecycle's
// rules); and the first sync's error.
func (w *Watcher) Start(ctx context.Context) error {
	first := make(chan error, 1)
	err := w.life.Start(ctx, func(ctx context.Context) {
		w.fact.Start(ctx.Done())
		waitCtx, stop := context.WithTimeout(ctx, w.cfg.SyncTimeout)
		ok := cache.WaitForCacheSync(waitCtx.Done(), w.inf.HasSynced)
		stop()
		if !ok {
			// Returning ends ctx, which stops the informer.
			err := fmt.Errorf("lbkube: start: %s/%s: %w after %v", w.cfg.Namespace, w.cfg.Service, ErrNotSynced, w.cfg.SyncTimeout)
			if why := w.whyNotSynced(ctx); why != nil {
				err = fmt.Errorf("%w: %w", err, why)
			}
			first <- err
			return
		}
		first <- w.sync().Err
		w.run(ctx)
	})
	if err != nil {
		return fmt.Errorf("lbkube: start: %w", err)
	}
	return <-first
}

// whyNotSynced asks for the slices once, directly, to say why the
// informer's list did not come: the informer retries a refused connection
// without a word, for as long as it is let. It returns the list's error,
// or nil if the list works now (the informer was only slow) or ctx ended.
func (w *Watcher) whyNotSynced(ctx context.Context) error {
	if ctx.Err() != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, whyTimeout)
	defer cancel()
	_, err := w.client.DiscoveryV1().EndpointSlices(w.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: w.sel.String(), Limit: 1})
	return err
}

// whyTimeout bounds whyNotSynced's list.
const whyTimeout = 5 * time.Second

// run applies changes until ctx ends.
func (w *Watcher) run(ctx context.Context) {
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
	w.life.Close()
	w.fact.Shutdown()
	return nil
}

// sync lists the slices, merges them and brings the target in line
// through the Publisher: terminating endpoints drained while they are
// still in the set, before the Update and again after it (a subset around
// health picking anew), and enabled once ready again (package discovery's
// rules).
func (w *Watcher) sync() Sync {
	es, err := w.lister.List(w.sel)
	if err != nil {
		return w.report(Sync{Err: fmt.Errorf("lbkube: list: %w", err)})
	}
	return w.report(w.apply(es))
}

// apply merges the slices and publishes the set: sync's work once the
// informer's cache has been read (BenchmarkApply measures it).
func (w *Watcher) apply(es []*discoveryv1.EndpointSlice) Sync {
	m := merge(es, w.cfg.Port, w.cfg.AddressType)
	r := Sync{Slices: len(es), Hinted: m.hinted, Problems: m.problems}
	eps := make([]discovery.Endpoint, 0, len(m.endpoints))
	for _, e := range m.endpoints {
		switch e.state {
		case eligible:
			eps = append(eps, discovery.Endpoint{Addr: e.id, Locality: balancer.Locality{Zone: e.zone}})
		case draining:
			eps = append(eps, discovery.Endpoint{Addr: e.id, Locality: balancer.Locality{Zone: e.zone}, State: discovery.Draining})
		}
	}
	rep, err := w.pub.Publish(eps)
	r.Eligible, r.Draining = rep.Healthy, rep.Draining
	if err != nil {
		r.Err = fmt.Errorf("lbkube: %w", err)
	}
	return r
}

func (w *Watcher) report(r Sync) Sync {
	if w.cfg.OnSync != nil {
		w.cfg.OnSync(r)
	}
	return r
}
