package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/lbkit/lbkit/examples/proxy/proxycmd"
)

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

// listeningLine is the log line run writes once it serves, with the
// proxy's address.
var listeningLine = regexp.MustCompile(`msg=listening .*proxy=(\S+)`)

// startRun runs the command with args until the returned stop is called,
// and returns the address it serves on, read from its log as a user would;
// stop checks that run returns ExitOK within 15 seconds.
func startRun(t *testing.T, args ...string) (addr string, logs *syncBuffer, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	logs = &syncBuffer{}
	exited := make(chan int, 1)
	go func() { exited <- run(ctx, args, logs) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		if m := listeningLine.FindStringSubmatch(logs.String()); m != nil {
			addr = m[1]
			break
		}
		select {
		case code := <-exited:
			cancel()
			t.Fatalf("run exited with %d before listening: %s", code, logs)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("not listening after 5s: %s", logs)
		}
	}
	return addr, logs, func() {
		cancel()
		select {
		case code := <-exited:
			assert.Equal(t, proxycmd.ExitOK, code, "%s", logs)
		case <-time.After(15 * time.Second):
			t.Error("run did not return after its context ended")
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
