package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/bench"
)

// TestBadFlags checks that each mistake gets a message naming the flag,
// on stderr, and exit status 2, without serving anything.
func TestBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no backends", nil, "-backends or -dns is required"},
		{"both sources", []string{"-backends", "a:1", "-dns", "b:2"}, "-backends and -dns exclude each other"},
		{"unknown flag", []string{"-backend", "a:1"}, "flag provided but not defined: -backend"},
		{"stray argument", []string{"-backends", "a:1", "extra"}, `unexpected argument "extra"`},
		{"backend without port", []string{"-backends", "10.0.0.1"}, `-backends: "10.0.0.1" is not host:port`},
		{"backend bad port", []string{"-backends", "10.0.0.1:http"}, `-backends: "10.0.0.1:http": port "http" is not a number from 1 to 65535`},
		{"backend port zero", []string{"-backends", "10.0.0.1:0"}, `port "0" is not a number from 1 to 65535`},
		{"empty item", []string{"-backends", "a:1,,b:2"}, `-backends: "" is not host:port`},
		{"bad weight", []string{"-backends", "a:1=x"}, `-backends: "a:1=x": weight "x" is not a whole number from 1 to 1000000`},
		{"zero weight", []string{"-backends", "a:1=0"}, `weight "0" is not a whole number`},
		{"duplicate", []string{"-backends", "a:1,a:1"}, "-backends: balancer: duplicate backend ID"},
		{"bad dns", []string{"-dns", "api.internal"}, `-dns: "api.internal" is not host:port`},
		{"bad dns interval", []string{"-dns", "api.internal:80", "-dns-interval", "0s"}, "-dns-interval: 0s is not positive"},
		{"unknown algo", []string{"-backends", "a:1", "-algo", "random"}, `-algo: unknown algorithm "random"; one of rr, wrr, leastconn`},
		{"bad key", []string{"-backends", "a:1", "-key", "query:x"}, `-key: "query:x" is not ip, header:NAME or cookie:NAME`},
		{"key without name", []string{"-backends", "a:1", "-key", "header:"}, `-key: "header:" is not ip`},
		{"iphash with header key", []string{"-backends", "a:1", "-algo", "iphash", "-key", "header:X-User"}, "iphash hashes client addresses"},
		{"bad trusted", []string{"-backends", "a:1", "-trusted-proxies", "10.0.0.0/8,corp"}, `-trusted-proxies: "corp" is neither an address nor a CIDR prefix`},
		{"bad cidr", []string{"-backends", "a:1", "-trusted-proxies", "10.0.0.0/33"}, `-trusted-proxies: "10.0.0.0/33" is not a CIDR prefix`},
		{"bad health path", []string{"-backends", "a:1", "-health-path", "healthz"}, `-health-path: "healthz" does not start with /`},
		{"bad health interval", []string{"-backends", "a:1", "-health-interval", "0s"}, "-health-interval: 0s is below the minimum"},
		{"bad duration", []string{"-backends", "a:1", "-health-interval", "5"}, `invalid value "5" for flag -health-interval`},
		{"bad attempts", []string{"-backends", "a:1", "-max-attempts", "0"}, "-max-attempts: 0 is below 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			code := run(t.Context(), tt.args, &stderr)
			assert.Equal(t, exitUsage, code)
			assert.Contains(t, stderr.String(), tt.want)
			assert.True(t, strings.HasPrefix(stderr.String(), "proxy: "), "one message, not the usage: %q", stderr.String())
			assert.Contains(t, stderr.String(), "Run proxy -h for the flags.")
		})
	}
}

func TestHelp(t *testing.T) {
	var stderr bytes.Buffer
	assert.Equal(t, exitOK, run(t.Context(), []string{"-h"}, &stderr))
	assert.Contains(t, stderr.String(), "Usage: proxy")
	assert.Contains(t, stderr.String(), "-trusted-proxies")
}

// TestEveryAlgorithmAccepted checks that -algo takes every name the bench
// lists, so the proxy never lags behind the library.
func TestEveryAlgorithmAccepted(t *testing.T) {
	for _, a := range bench.Algorithms() {
		c, err := parse([]string{"-backends", "127.0.0.1:1=2,127.0.0.1:2", "-algo", a.Name}, io.Discard)
		require.NoError(t, err, a.Name)
		assert.Equal(t, a.Name, c.algo.Name)
		assert.Len(t, c.backends, 2)
	}
}

func TestListenFails(t *testing.T) {
	var stderr bytes.Buffer
	code := run(t.Context(), []string{"-backends", "127.0.0.1:1", "-listen", "127.0.0.1:99999"}, &stderr)
	assert.Equal(t, exitError, code)
	assert.Contains(t, stderr.String(), "invalid port")
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
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

// TestServe runs the proxy on loopback in front of two backends, one of
// which fails its health check, with active probes every 20ms: requests
// all reach the healthy one once the probe has failed, with an affinity
// cookie honoured; cancelling the context stops it.
func TestServe(t *testing.T) {
	var healthy, sick = backendServer(t, "healthy", true), backendServer(t, "sick", false)
	c, err := parse([]string{
		"-listen", "127.0.0.1:0",
		"-backends", hostOf(healthy) + "," + hostOf(sick),
		"-algo", "ring", "-key", "cookie:session",
		"-health-path", "/healthz", "-health-interval", "20ms",
	}, io.Discard)
	require.NoError(t, err)

	var logs syncBuffer
	addr, stop := startServe(t, c, slog.New(slog.NewTextHandler(&logs, nil)))
	defer stop()

	// Wait (bounded) for the sick backend to be taken out by its probes.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String(), "backend="+hostOf(sick)) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.Contains(t, logs.String(), "backend="+hostOf(sick), "no state change logged for the sick backend")

	for i := range 20 {
		req, err := http.NewRequest("GET", "http://"+addr+"/", nil)
		require.NoError(t, err)
		req.AddCookie(&http.Cookie{Name: "session", Value: fmt.Sprint("s", i)})
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, "healthy", string(body))
	}
}

// startServe runs serve(c) until the returned stop is called; stop checks
// that serve returns, without error, within 15 seconds.
func startServe(t *testing.T, c config, log *slog.Logger) (addr string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	listening := make(chan string, 1)
	served := make(chan error, 1)
	go func() { served <- serve(ctx, c, log, listening) }()
	select {
	case addr = <-listening:
	case err := <-served:
		cancel()
		t.Fatalf("serve returned early: %v", err)
	case <-time.After(5 * time.Second):
		cancel()
		t.Fatal("not listening after 5s")
	}
	return addr, func() {
		cancel()
		select {
		case err := <-served:
			assert.NoError(t, err)
		case <-time.After(15 * time.Second):
			t.Error("serve did not return after its context ended")
		}
	}
}

func backendServer(t *testing.T, name string, healthy bool) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && !healthy {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, name)
	}))
	t.Cleanup(s.Close)
	return s
}

func hostOf(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

// TestMainExitStatus runs the real binary (this test binary, re-executed
// as main) with a bad flag, to check the status the process exits with.
func TestMainExitStatus(t *testing.T) {
	if os.Getenv("PROXY_RUN_MAIN") == "1" {
		os.Args = append([]string{"proxy"}, strings.Fields(os.Getenv("PROXY_ARGS"))...)
		main()
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMainExitStatus$")
	cmd.Env = append(os.Environ(), "PROXY_RUN_MAIN=1", "PROXY_ARGS=-algo nope -backends 127.0.0.1:1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	assert.Equal(t, exitUsage, exit.ExitCode())
	assert.Contains(t, stderr.String(), `proxy: -algo: unknown algorithm "nope"`)
}

// TestServeDNS runs the proxy with -dns on "localhost", which the system
// resolver answers from the hosts file: the backend set comes from the
// resolver, and requests reach the backend. (Where localhost also resolves
// to ::1, on which nothing listens, that address is refused, retried and
// ejected: the requests still succeed.)
func TestServeDNS(t *testing.T) {
	b := backendServer(t, "resolved", true)
	_, port, _ := strings.Cut(hostOf(b), ":")
	c, err := parse([]string{"-listen", "127.0.0.1:0", "-dns", "localhost:" + port, "-dns-interval", "1s"}, io.Discard)
	require.NoError(t, err)

	addr, stop := startServe(t, c, slog.New(slog.DiscardHandler))
	defer stop()
	for range 5 {
		resp, err := http.Get("http://" + addr + "/")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, "resolved", string(body))
	}
}
