package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

// syncBuffer is a bytes.Buffer safe for the demo's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The demo against client-go's fake clientset (no cluster here): it
// syncs the Service's one endpoint, a loopback server, and proxies to it.
func TestDemo(t *testing.T) {
	backend := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello from the pod")
	}), ReadHeaderTimeout: time.Minute}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = backend.Serve(ln) }()
	defer backend.Close()
	port := int32(ln.Addr().(*net.TCPAddr).Port)

	name, ready := "http", true
	c := fake.NewClientset(&discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "cart-1", Namespace: "shop", Labels: map[string]string{discoveryv1.LabelServiceName: "cart"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"127.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	})
	ctx, cancel := context.WithCancel(t.Context())
	var out syncBuffer
	addr := make(chan string, 1)
	status := make(chan int, 1)
	go func() {
		status <- run(ctx, []string{"-namespace", "shop", "-service", "cart", "-listen", "127.0.0.1:0"}, &out,
			func(string) (kubernetes.Interface, error) { return c, nil }, addr)
	}()
	var proxy string
	select {
	case proxy = <-addr:
	case code := <-status:
		t.Fatalf("exited with %d: %s", code, out.String())
	case <-time.After(time.Minute):
		t.Fatalf("not listening after a minute: %s", out.String())
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Get("http://" + proxy + "/")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, "hello from the pod", string(body))
	assert.Contains(t, out.String(), "sync: 1 slices, 1 ready, 0 draining")
	cancel()
	assert.Zero(t, <-status, out.String())

	assert.Equal(t, 2, run(t.Context(), []string{"-namespace", "shop"}, &out, nil, nil), "-service is required")
	assert.True(t, strings.Contains(out.String(), "-service is required"))
}
