package lbkube_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/kubernetes/lbkube"
)

const ns, svc = "shop", "cart"

// waitFor bounds every wait for the watch to deliver: generous, since the
// machine may be loaded; a healthy run takes milliseconds.
const waitFor = 20 * time.Second

func ptr[T any](v T) *T { return &v }

// ep is a ready endpoint at addr in zone (none if "").
func ep(addr, zone string) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{Addresses: []string{addr}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true)}}
	if zone != "" {
		e.Zone = ptr(zone)
	}
	return e
}

func terminating(e discoveryv1.Endpoint, serving bool) discoveryv1.Endpoint {
	e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(serving), Terminating: ptr(true)}
	return e
}

func notReady(e discoveryv1.Endpoint) discoveryv1.Endpoint {
	e.Conditions = discoveryv1.EndpointConditions{Ready: ptr(false), Serving: ptr(false)}
	return e
}

func hinted(e discoveryv1.Endpoint, zones ...string) discoveryv1.Endpoint {
	e.Hints = &discoveryv1.EndpointHints{}
	for _, z := range zones {
		e.Hints.ForZones = append(e.Hints.ForZones, discoveryv1.ForZone{Name: z})
	}
	return e
}

// slice is an EndpointSlice of the Service, with one port named "http".
func slice(name string, family discoveryv1.AddressType, port int32, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns,
			Labels: map[string]string{discoveryv1.LabelServiceName: svc},
		},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(port)}},
		Endpoints:   eps,
	}
}

// many returns n ready IPv4 endpoints from 10.0.x.y.
func many(from, n int) []discoveryv1.Endpoint {
	var eps []discoveryv1.Endpoint
	for i := from; i < from+n; i++ {
		eps = append(eps, ep(fmt.Sprintf("10.0.%d.%d", i/250, 1+i%250), ""))
	}
	return eps
}

// rig is a fake cluster, a Watcher on it and the Syncs it reports.
type rig struct {
	t      *testing.T
	client *fake.Clientset
	w      *lbkube.Watcher
	mu     sync.Mutex
	syncs  []lbkube.Sync
	from   int // await looks at syncs[from:]: those after the last change made
	notify chan struct{}
}

func newRig(t *testing.T, target balancer.Updater, cfg lbkube.Config, objects ...*discoveryv1.EndpointSlice) *rig {
	t.Helper()
	r := &rig{t: t, client: fake.NewClientset(), notify: make(chan struct{}, 1)}
	for _, o := range objects {
		r.create(o)
	}
	cfg.Namespace, cfg.Service = ns, svc
	cfg.OnSync = func(s lbkube.Sync) {
		r.mu.Lock()
		r.syncs = append(r.syncs, s)
		r.mu.Unlock()
		select {
		case r.notify <- struct{}{}:
		default:
		}
	}
	w, err := lbkube.New(r.client, target, cfg)
	require.NoError(t, err)
	r.w = w
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { require.NoError(t, w.Close()) })
	return r
}

// changed makes await look only at the Syncs that follow.
func (r *rig) changed() {
	r.mu.Lock()
	r.from = len(r.syncs)
	r.mu.Unlock()
}

func (r *rig) create(s *discoveryv1.EndpointSlice) {
	r.changed()
	_, err := r.client.DiscoveryV1().EndpointSlices(ns).Create(context.Background(), s, metav1.CreateOptions{})
	require.NoError(r.t, err)
}

func (r *rig) update(s *discoveryv1.EndpointSlice) {
	r.changed()
	_, err := r.client.DiscoveryV1().EndpointSlices(ns).Update(context.Background(), s, metav1.UpdateOptions{})
	require.NoError(r.t, err)
}

func (r *rig) delete(name string) {
	r.changed()
	require.NoError(r.t, r.client.DiscoveryV1().EndpointSlices(ns).Delete(context.Background(), name, metav1.DeleteOptions{}))
}

// last returns the last Sync.
func (r *rig) last() lbkube.Sync {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.syncs[len(r.syncs)-1]
}

// await waits until a Sync made after the last change satisfies ok, and
// returns it.
func (r *rig) await(what string, ok func(lbkube.Sync) bool) lbkube.Sync {
	r.t.Helper()
	deadline := time.After(waitFor)
	for {
		r.mu.Lock()
		for _, s := range r.syncs[r.from:] {
			if ok(s) {
				r.mu.Unlock()
				return s
			}
		}
		r.mu.Unlock()
		select {
		case <-r.notify:
		case <-deadline:
			r.t.Fatalf("no sync %s within %v; last: %+v", what, waitFor, r.last())
		}
	}
}

// awaitEligible waits for a Sync whose eligible set is want.
func (r *rig) awaitEligible(want ...string) lbkube.Sync {
	r.t.Helper()
	slices.Sort(want)
	return r.await(fmt.Sprintf("with %d eligible", len(want)), func(s lbkube.Sync) bool { return slices.Equal(s.Eligible, want) })
}

// spy is a target that records every set and the admin calls.
type spy struct {
	mu    sync.Mutex
	sets  [][]balancer.Backend
	calls []string
	err   error
}

func (s *spy) Update(bs []balancer.Backend) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.sets = append(s.sets, slices.Clone(bs))
	return nil
}

func (s *spy) Drain(id string) error       { return s.call("drain " + id) }
func (s *spy) Maintenance(id string) error { return s.call("maintenance " + id) }
func (s *spy) Enable(id string) error      { return s.call("enable " + id) }

func (s *spy) call(c string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, c)
	return nil
}

func (s *spy) current() []balancer.Backend {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.sets) == 0 {
		return nil
	}
	return s.sets[len(s.sets)-1]
}

func (s *spy) adminCalls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

func idsOf(bs []balancer.Backend) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.ID())
	}
	slices.Sort(out)
	return out
}
