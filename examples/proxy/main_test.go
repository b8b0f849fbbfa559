package main

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/examples/proxy/proxycmd"
)

// TestBadFlags checks that a mistake gets one message naming the flag, on
// stderr, and exit status 2, without serving anything. Every message
// proxycmd gives is checked in its TestParseErrors.
func TestBadFlags(t *testing.T) {
	tests := []struct{ args, want string }{ // args split at spaces
		{"", "-backends or -dns is required"},
		{"-backend a:1", "flag provided but not defined: -backend"},
		{"-backends a:1=x", `-backends: "a:1=x": weight "x" is not a whole number from 1 to 1000000`},
		{"-backends a:1 -algo iphash -key header:X-User", "iphash hashes client addresses"},
		{"-backends a:1 -trusted-proxies 10.0.0.0/8,corp", `-trusted-proxies: "corp" is neither an address nor a CIDR prefix`},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			var stderr bytes.Buffer
			assert.Equal(t, proxycmd.ExitUsage, run(t.Context(), strings.Fields(tt.args), &stderr))
			assert.Contains(t, stderr.String(), tt.want)
			assert.True(t, strings.HasPrefix(stderr.String(), "proxy: "), "one message, not the usage: %q", stderr.String())
			assert.True(t, strings.HasSuffix(stderr.String(), "\nRun proxy -h for the flags.\n"), "%q", stderr.String())
		})
	}
}

func TestHelp(t *testing.T) {
	var stderr bytes.Buffer
	assert.Equal(t, proxycmd.ExitOK, run(t.Context(), []string{"-h"}, &stderr))
	assert.Contains(t, stderr.String(), "Usage: proxy")
	assert.Contains(t, stderr.String(), "-trusted-proxies")
}

// TestEveryAlgorithmAccepted checks that -algo takes every name the bench
// lists, so the proxy never lags behind the library: each gets as far as
// listening, on an address that cannot be listened on.
func TestEveryAlgorithmAccepted(t *testing.T) {
	for _, a := range catalog.Algorithms() {
		var stderr bytes.Buffer
		code := run(t.Context(), []string{"-backends", "127.0.0.1:1=2,127.0.0.1:2", "-algo", a.Name, "-listen", "127.0.0.1:99999"}, &stderr)
		assert.Equal(t, proxycmd.ExitError, code, a.Name)
		assert.Contains(t, stderr.String(), "invalid port", a.Name)
	}
}

func TestListenFails(t *testing.T) {
	var stderr bytes.Buffer
	code := run(t.Context(), []string{"-backends", "127.0.0.1:1", "-listen", "127.0.0.1:99999"}, &stderr)
	assert.Equal(t, proxycmd.ExitError, code)
	assert.Contains(t, stderr.String(), "proxy: listen tcp")
	assert.Contains(t, stderr.String(), "invalid port")
}

// TestServe runs the proxy on loopback in front of two backends, one of
// which fails its health check, with active probes every 20ms: requests
// all reach the healthy one once the probe has failed, with an affinity
// cookie honoured; cancelling the context stops it.
func TestServe(t *testing.T) {
	var healthy, sick = backendServer(t, "healthy", true), backendServer(t, "sick", false)
	addr, logs, stop := startRun(t,
		"-listen", "127.0.0.1:0",
		"-backends", hostOf(healthy)+","+hostOf(sick),
		"-algo", "ring", "-key", "cookie:session",
		"-health-path", "/healthz", "-health-interval", "20ms",
	)
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
	assert.Equal(t, proxycmd.ExitUsage, exit.ExitCode())
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
	addr, logs, stop := startRun(t, "-listen", "127.0.0.1:0", "-dns", "localhost:"+port, "-dns-interval", "1s")
	defer stop()
	assert.Contains(t, logs.String(), "dns=localhost")
	for range 5 {
		resp, err := http.Get("http://" + addr + "/")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, "resolved", string(body))
	}
}

// TestOneLogger checks that everything the proxy logs goes through its one
// logger, on run's stderr, as slog's text lines: the ReverseProxy's own
// complaints (here a backend that breaks off a body) and the servers'
// included, none through the standard library's log package.
func TestOneLogger(t *testing.T) {
	var plain syncBuffer
	log.SetOutput(&plain)
	defer log.SetOutput(os.Stderr)

	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		_, _ = io.WriteString(w, "0123456789")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler) // the connection closes, 90 bytes short
	}))
	t.Cleanup(broken.Close)
	// The hold off (-hold-bytes 0): with it, a body broken within its first
	// 64 KiB is an attempt's failure, answered 502 before any body is
	// copied, and ReverseProxy has no copy to complain of.
	addr, logs, stop := startRun(t, "-listen", "127.0.0.1:0", "-backends", hostOf(broken), "-hold-bytes", "0")
	// The client sees the break as an error, before or in the body.
	if resp, err := http.Get("http://" + addr + "/"); err == nil {
		_, err = io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Error(t, err, "the body should break off")
	}
	// The proxy logs the broken copy once the handler returns; wait for
	// it (bounded), then stop.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(logs.String()+plain.String(), "body copy") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	stop()

	assert.Empty(t, plain.String(), "lines logged through package log, not the proxy's logger")
	assert.Contains(t, logs.String(), "body copy", "the ReverseProxy's complaint is in the proxy's log")
	for _, line := range strings.Split(strings.TrimSuffix(logs.String(), "\n"), "\n") {
		assert.True(t, strings.HasPrefix(line, "time="), "not a slog line: %q", line)
	}
}

// TestListensWhereTheQuickStartDoes keeps the ready proxy on the address
// the README's quick start serves on, so that a user who tries one and
// then the other finds both in the same place.
func TestListensWhereTheQuickStartDoes(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	m := regexp.MustCompile(`http\.ListenAndServe\("([^"]+)", proxy\)`).FindSubmatch(readme)
	require.NotNil(t, m, "README.md's quick start no longer calls http.ListenAndServe(addr, proxy)")
	assert.Equal(t, string(m[1]), proxycmd.DefaultListen)
}
