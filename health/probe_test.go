package health_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
)

// What HTTP accepts and refuses, against a real server on loopback.
func TestHTTPProbe(t *testing.T) {
	var gotMethod, gotHost, gotPath string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotMethod, gotHost, gotPath = r.Method, r.Host, r.URL.Path
		switch r.URL.Path {
		case "/ok":
			_, _ = w.Write([]byte(`{"status":"SERVING"}`))
		case "/redirect":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case "/teapot":
			w.WriteHeader(http.StatusTeapot)
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
		default:
			http.Error(w, "down", http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	b := balancer.NewEndpoint(srv.Listener.Addr().String(), 1)
	ctx := context.Background()

	tests := []struct {
		name    string
		check   health.HTTPCheck
		wantErr error // nil: pass
	}{
		{"2xx passes", health.HTTPCheck{Path: "/ok"}, nil},
		{"path without a slash", health.HTTPCheck{Path: "ok"}, nil},
		{"3xx passes by default and is not followed", health.HTTPCheck{Path: "/redirect"}, nil},
		{"3xx outside a narrower range", health.HTTPCheck{Path: "/redirect", StatusMin: 200, StatusMax: 299}, health.ErrProbe},
		{"5xx fails", health.HTTPCheck{Path: "/down"}, health.ErrProbe},
		{"a chosen status", health.HTTPCheck{Path: "/teapot", StatusMin: 418, StatusMax: 418}, nil},
		{"body holds the text", health.HTTPCheck{Path: "/ok", BodyContains: "SERVING"}, nil},
		{"body lacks the text", health.HTTPCheck{Path: "/ok", BodyContains: "NOT_SERVING"}, health.ErrProbe},
		{"text past MaxBody", health.HTTPCheck{Path: "/ok", BodyContains: "SERVING", MaxBody: 12}, health.ErrProbe},
		{"URL func", health.HTTPCheck{URL: func(b balancer.Backend) string { return "http://" + b.ID() + "/ok" }}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := health.HTTP(tt.check).Probe(ctx, b)
			if tt.wantErr == nil {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, tt.wantErr)
			}
		})
	}

	require.NoError(t, health.HTTP(health.HTTPCheck{Method: http.MethodHead, Path: "/ok", Host: "svc.example"}).Probe(ctx, b))
	assert.Equal(t, http.MethodHead, gotMethod)
	assert.Equal(t, "svc.example", gotHost)
	assert.Equal(t, "/ok", gotPath)

	tctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err := health.HTTP(health.HTTPCheck{Path: "/slow"}).Probe(tctx, b)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "the context's deadline bounds the probe")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := balancer.NewEndpoint(ln.Addr().String(), 1)
	require.NoError(t, ln.Close())
	err = health.HTTP(health.HTTPCheck{}).Probe(ctx, closed)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)
}

// TCP passes when the port accepts a connection.
func TestTCPProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		if c, err := ln.Accept(); err == nil {
			c.Close()
		}
	}()
	open := balancer.NewEndpoint(ln.Addr().String(), 1)
	require.NoError(t, health.TCP(health.TCPCheck{}).Probe(context.Background(), open))
	<-accepted
	require.NoError(t, ln.Close())
	err = health.TCP(health.TCPCheck{}).Probe(context.Background(), open)
	assert.ErrorIs(t, err, syscall.ECONNREFUSED)

	// Address maps a backend to the port to check.
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln2.Close()
	go func() {
		if c, err := ln2.Accept(); err == nil {
			c.Close()
		}
	}()
	p := health.TCP(health.TCPCheck{Address: func(balancer.Backend) string { return ln2.Addr().String() }})
	assert.NoError(t, p.Probe(context.Background(), balancer.NewEndpoint("elsewhere.test:1", 1)))
}
