package lbhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/lbhttp"
)

// reportingBackend is a backend behind a Reporter (probes on probePath,
// "" for DefaultProbePath), which counts the requests its handler got
// and answers "ok", or 204 on /empty.
func reportingBackend(t *testing.T, probePath string, served *atomic.Int64) *httptest.Server {
	t.Helper()
	rep, err := lbhttp.NewReporter(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if r.URL.Path == "/empty" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}), lbhttp.ReporterConfig{Capacity: 4, ProbePath: probePath})
	require.NoError(t, err)
	s := httptest.NewServer(rep)
	t.Cleanup(s.Close)
	return s
}

// TestProxyProbePath checks what a client of NewProxy can ask of the
// backends' Reporters: by default nothing, since the probe path, which
// tells a backend's requests in flight and latency, is the proxy's to
// answer, 404, for any method and any spelling that names it (an escaped
// letter is the same path to the backend), and no backend is picked for
// it. With ForwardProbes the probe goes through. A backend's own path is
// ProbePath's to say.
func TestProxyProbePath(t *testing.T) {
	_, err := lbhttp.NewProxy(&scripted{}, lbhttp.Config{ProbePath: "load"})
	require.ErrorContains(t, err, `ProbePath "load" does not start with /`)

	tests := []struct {
		name      string
		cfg       lbhttp.Config
		reporter  string // the backends' ProbePath
		method    string
		path      string
		status    int
		forwarded bool
	}{
		{name: "default GET", method: "GET", path: lbhttp.DefaultProbePath, status: http.StatusNotFound},
		{name: "default HEAD", method: "HEAD", path: lbhttp.DefaultProbePath, status: http.StatusNotFound},
		{name: "default escaped", method: "GET", path: "/lbkit/%70robe", status: http.StatusNotFound},
		{name: "default other path", method: "GET", path: "/lbkit/probe/x", status: http.StatusOK, forwarded: true},
		{name: "own path, default", reporter: "/_load", method: "GET", path: "/_load", status: http.StatusNoContent, forwarded: true},
		{name: "own path, ProbePath", cfg: lbhttp.Config{ProbePath: "/_load"}, reporter: "/_load", method: "GET", path: "/_load", status: http.StatusNotFound},
		{name: "own path, ProbePath, default path", cfg: lbhttp.Config{ProbePath: "/_load"}, reporter: "/_load", method: "GET", path: lbhttp.DefaultProbePath, status: http.StatusOK, forwarded: true},
		{name: "ForwardProbes", cfg: lbhttp.Config{ForwardProbes: true}, method: "GET", path: lbhttp.DefaultProbePath, status: http.StatusNoContent, forwarded: true},
		{name: "ForwardProbes, own path", cfg: lbhttp.Config{ForwardProbes: true, ProbePath: "/_load"}, reporter: "/_load", method: "HEAD", path: "/_load", status: http.StatusNoContent, forwarded: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var served atomic.Int64
			s := reportingBackend(t, tt.reporter, &served)
			rec := newRecorder(&scripted{})
			require.NoError(t, rec.Update(balancer.Endpoints(hostOf(s))))
			proxy := startProxy(t, rec, tt.cfg)
			req, err := http.NewRequest(tt.method, proxy.URL+tt.path, nil)
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			assert.Equal(t, tt.status, resp.StatusCode)
			picks, _ := rec.snapshot()
			if tt.forwarded {
				assert.Len(t, picks, 1, "sent to a backend")
			} else {
				assert.Empty(t, picks, "no backend picked for a probe the proxy answers")
				assert.Empty(t, resp.Header.Values(lbhttp.LoadHeader), "and no report")
			}
			rec.waitDone(t)
		})
	}
}

// TestProxyLoadHeader checks that the backends' load reports stay inside
// the proxy by default: the Transport reads them, for the picker's Done,
// and the client's response has neither report header, with a body or
// without; with ForwardLoadReports they reach the client too.
func TestProxyLoadHeader(t *testing.T) {
	var served atomic.Int64
	s := reportingBackend(t, "", &served)
	direct, err := http.Get(s.URL)
	require.NoError(t, err)
	_ = direct.Body.Close()
	require.NotEmpty(t, direct.Header.Get(lbhttp.LoadHeader), "the backend reports")
	tests := []struct {
		name    string
		cfg     lbhttp.Config
		reaches bool
	}{
		{"default", lbhttp.Config{}, false},
		{"ForwardLoadReports", lbhttp.Config{ForwardLoadReports: true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(&scripted{})
			require.NoError(t, rec.Update(balancer.Endpoints(hostOf(s))))
			proxy := startProxy(t, rec, tt.cfg)
			for _, path := range []string{"/", "/empty"} {
				resp, err := http.Get(proxy.URL + path)
				require.NoError(t, err)
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if path == "/" {
					assert.Equal(t, "ok", strings.TrimSpace(string(body)))
				} else {
					assert.Equal(t, http.StatusNoContent, resp.StatusCode)
				}
				if tt.reaches {
					assert.NotEmpty(t, resp.Header.Get(lbhttp.LoadHeader), "%s: the report reaches the client", path)
				} else {
					assert.Empty(t, resp.Header.Values(lbhttp.LoadHeader), "%s: the report stays in the proxy", path)
					assert.Empty(t, resp.Header.Values(lbhttp.LoadHeaderBin), "%s", path)
				}
			}
			rec.waitDone(t)
			picks, _ := rec.snapshot()
			require.NotEmpty(t, picks)
			for _, p := range picks {
				assert.True(t, p.result().Load.Reported(), "the picker still gets the report")
			}
		})
	}
}
