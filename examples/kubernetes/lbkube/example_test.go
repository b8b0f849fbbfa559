package lbkube_test

import (
	"context"
	"fmt"
	"log"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/kubernetes/lbkube"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/locality"
)

// A Service with two slices and four pods, one of them not ready. With a
// real cluster, build the client with clientcmd or rest.InClusterConfig
// instead of the fake. Three backends are fewer than locality's MinSize
// (6), so this proxy in us-east-1a spreads its requests over the zones.
func Example() {
	no := false
	name, port := "http", int32(8080)
	pod := func(ip, zone string, ready bool) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, Zone: &zone,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Terminating: &no}}
	}
	client := fake.NewClientset(
		&discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "cart-x7k2p", Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: "cart"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
			Endpoints:   []discoveryv1.Endpoint{pod("10.1.0.7", "us-east-1a", true), pod("10.1.1.4", "us-east-1b", true)},
		},
		&discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "cart-m9q4z", Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: "cart"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
			Endpoints:   []discoveryv1.Endpoint{pod("10.1.2.9", "us-east-1c", true), pod("10.1.0.8", "us-east-1a", false)},
		},
	)

	l, err := locality.New(func() balancer.Balancer { return leastconn.New() }, locality.Config{Zone: "us-east-1a"})
	if err != nil {
		log.Fatal(err)
	}
	h, err := health.New(l, health.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	w, err := lbkube.New(client, h, lbkube.Config{Namespace: "shop", Service: "cart", Port: "http"})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	defer w.Close()

	for _, st := range h.View().Backends {
		fmt.Println(st.ID, st.State)
	}
	for _, z := range l.View().Levels[0].Zones {
		fmt.Printf("%s: %d backend(s), %.0f%% of this proxy's requests\n", z.Zone, z.Total, z.Share*100)
	}
	// Output:
	// 10.1.0.7:8080 up
	// 10.1.1.4:8080 up
	// 10.1.2.9:8080 up
	// us-east-1a: 1 backend(s), 33% of this proxy's requests
	// us-east-1b: 1 backend(s), 33% of this proxy's requests
	// us-east-1c: 1 backend(s), 33% of this proxy's requests
}
