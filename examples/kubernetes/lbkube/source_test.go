package lbkube_test

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/discovery"
	"github.com/lbkit/lbkit/examples/kubernetes/lbkube"
)

// The Watcher keeps the rules of every discovery source. The cluster is
// client-go's fake clientset: no API server can run here (envtest needs
// the kube-apiserver and etcd binaries). Fail makes the fake's lists and
// watches fail, as a lost API server does; the informer's watch already
// open stays quiet meanwhile.
func TestWatcherSource(t *testing.T) {
	client := fake.NewClientset()
	var failing atomic.Bool
	refuse := func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			return true, nil, apierrors.NewServiceUnavailable("the API server is away")
		}
		return false, nil, nil
	}
	client.PrependReactor("list", "endpointslices", refuse)
	client.PrependWatchReactor("endpointslices", func(a k8stesting.Action) (bool, watch.Interface, error) {
		if failing.Load() {
			return true, nil, errors.New("the API server is away")
		}
		return false, nil, nil
	})
	upsert := func(t testing.TB, s *discoveryv1.EndpointSlice) {
		api := client.DiscoveryV1().EndpointSlices(ns)
		if _, err := api.Update(context.Background(), s, metav1.UpdateOptions{}); apierrors.IsNotFound(err) {
			_, err = api.Create(context.Background(), s, metav1.CreateOptions{})
			require.NoError(t, err)
		} else {
			require.NoError(t, err)
		}
	}
	balancertest.RunSource(t, balancertest.SourceHarness{
		New: func(t testing.TB, target balancer.Updater) discovery.Source {
			w, err := lbkube.New(client, target, lbkube.Config{Namespace: ns, Service: svc, Port: "http"})
			require.NoError(t, err)
			return w
		},
		Set: func(t testing.TB, eps []discovery.Endpoint) {
			var v4, v6 []discoveryv1.Endpoint
			for _, e := range eps {
				ap := netip.MustParseAddrPort(e.Addr)
				require.Equal(t, uint16(8080), ap.Port())
				if ap.Addr().Is4() {
					v4 = append(v4, ep(ap.Addr().String(), ""))
				} else {
					v6 = append(v6, ep(ap.Addr().String(), ""))
				}
			}
			upsert(t, slice("cart-v4", discoveryv1.AddressTypeIPv4, 8080, v4...))
			upsert(t, slice("cart-v6", discoveryv1.AddressTypeIPv6, 8080, v6...))
		},
		Fail:   func(testing.TB) { failing.Store(true) },
		Heal:   func(testing.TB) { failing.Store(false) },
		Settle: 5 * time.Second,
	})
}
