package lbhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/lbhttp"
)

// h2cServer serves h with HTTP/1.1 and h2c with prior knowledge.
func h2cServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	s := httptest.NewUnstartedServer(h)
	s.Config.Protocols = new(http.Protocols)
	s.Config.Protocols.SetHTTP1(true)
	s.Config.Protocols.SetUnencryptedHTTP2(true)
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// TestH2C checks that H2C sends to the backends over HTTP/2 without TLS,
// through NewProxy, and that the timeouts hold over it: an attempt whose
// headers do not come fails at AttemptTimeout, and so does one whose body
// stalls inside the part the Transport holds; a body that stalls once it
// is the caller's (here, with the hold off) fails at IdleTimeout; each is
// a failure of its backend.
func TestH2C(t *testing.T) {
	const timeout = 100 * time.Millisecond
	quit := make(chan struct{})
	t.Cleanup(func() { close(quit) })
	s := h2cServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/stall":
		case "/stall-body":
			_, _ = io.WriteString(w, "first")
			w.(http.Flusher).Flush()
		default:
			_, _ = io.WriteString(w, r.Proto)
			return
		}
		select {
		case <-r.Context().Done():
		case <-quit:
		}
	})
	tests := []struct {
		name    string
		path    string
		hold    int
		status  int
		body    string
		wantErr error
	}{
		{"answer", "/", 0, http.StatusOK, "HTTP/2.0", nil},
		{"no headers", "/stall", 0, http.StatusGatewayTimeout, "backend timed out\n", lbhttp.ErrAttemptTimeout},
		{"body stalls, held", "/stall-body", 0, http.StatusGatewayTimeout, "backend timed out\n", lbhttp.ErrAttemptTimeout},
		{"body stalls, not held", "/stall-body", -1, http.StatusOK, "first", lbhttp.ErrIdleTimeout},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := newRecorder(&scripted{})
			require.NoError(t, rec.Update(balancer.Endpoints(hostOf(s))))
			proxy := startProxy(t, rec, lbhttp.Config{H2C: true, AttemptTimeout: timeout, IdleTimeout: timeout, MaxAttempts: 1, HoldBytes: tt.hold})
			start := time.Now()
			resp, err := http.Get(proxy.URL + tt.path)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			assert.Less(t, time.Since(start), timeout+margin)
			assert.Equal(t, tt.status, resp.StatusCode)
			assert.Equal(t, tt.body, string(body))
			rec.waitDone(t)
			picks, _ := rec.snapshot()
			require.Len(t, picks, 1)
			if tt.wantErr == nil {
				assert.NoError(t, picks[0].result().Err)
			} else {
				assert.ErrorIs(t, picks[0].result().Err, tt.wantErr)
			}
		})
	}
}
