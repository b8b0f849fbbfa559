package lbhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/lbhttp"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/sticky"
)

// cookieBackends are n loopback backends that answer with their name and
// the Cookie lines they were sent, in X-Seen-Cookie.
func cookieBackends(t *testing.T, n int) []*backend {
	t.Helper()
	bs := make([]*backend, n)
	for i := range bs {
		b := &backend{name: fmt.Sprintf("b%d", i)}
		b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b.hits.Add(1)
			w.Header().Set("X-Seen-Cookie", strings.Join(r.Header.Values("Cookie"), " | "))
			_, _ = io.WriteString(w, b.name)
		}))
		t.Cleanup(b.srv.Close)
		bs[i] = b
	}
	return bs
}

// stuck is health ▶ sticky ▶ leastconn over bs, and the proxy in front.
func stuck(t *testing.T, bs []*backend, cfg lbhttp.Config) (*health.Balancer, *httptest.Server) {
	t.Helper()
	st, err := sticky.New(leastconn.New())
	require.NoError(t, err)
	h, err := health.New(st, health.Config{})
	require.NoError(t, err)
	var eps []balancer.Backend
	for _, b := range bs {
		eps = append(eps, balancer.NewEndpoint(hostOf(b.srv), 1))
	}
	require.NoError(t, h.Update(eps))
	t.Cleanup(func() { _ = h.Close() })
	if cfg.Sticky == nil {
		cfg.Sticky = &lbhttp.StickyConfig{}
	}
	return h, startProxy(t, h, cfg)
}

// session is one client with its own cookie jar, over a shared transport.
type session struct {
	c    *http.Client
	home string // the backend that answered its last request
}

// reply is what one request of a session saw.
type reply struct {
	backend   string
	setCookie []string // the response's Set-Cookie lines
	seen      string   // the Cookie lines the backend was sent
	status    int
	err       error
}

func newSessions(t *testing.T, n int) []*session {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 16}
	t.Cleanup(tr.CloseIdleConnections)
	ss := make([]*session, n)
	for i := range ss {
		jar, err := cookiejar.New(nil)
		require.NoError(t, err)
		ss[i] = &session{c: &http.Client{Transport: tr, Jar: jar, Timeout: 10 * time.Second}}
	}
	return ss
}

func (s *session) get(u string) reply {
	req, _ := http.NewRequest("GET", u, nil)
	req.Header.Set("Cookie", "app=1") // the application's own, which the backend must see
	resp, err := s.c.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	a := reply{backend: string(body), setCookie: resp.Header.Values("Set-Cookie"), seen: resp.Header.Get("X-Seen-Cookie"), status: resp.StatusCode, err: err}
	if resp.StatusCode != 200 && err == nil {
		a.err = fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	return a
}

// each runs f for every session, from 16 goroutines, and returns the
// answers in session order.
func each(ss []*session, f func(i int, s *session) reply) []reply {
	out := make([]reply, len(ss))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ss) {
					return
				}
				out[i] = f(i, ss[i])
			}
		})
	}
	wg.Wait()
	return out
}

// round sends one request per session and records its home.
func round(t *testing.T, ss []*session, u string) []reply {
	t.Helper()
	return each(ss, func(_ int, s *session) reply {
		a := s.get(u)
		if a.err == nil {
			s.home = a.backend
		}
		return a
	})
}

// TestSticky1000Sessions is issue 27.2's first test: 1,000 sessions, each
// with its own cookie jar, behind NewProxy with sticky cookies over four
// backends. The first answer of each sets the cookie; its next four go to
// the same backend and set none (nothing to rewrite); the backends never
// see the proxy's cookie, only the application's; the sessions spread
// over the four backends.
func TestSticky1000Sessions(t *testing.T) {
	bs := cookieBackends(t, 4)
	_, proxy := stuck(t, bs, lbhttp.Config{})
	ss := newSessions(t, 1000)
	first := round(t, ss, proxy.URL)
	homes := map[string]int{}
	for i, a := range first {
		require.NoError(t, a.err, "session %d", i)
		require.Len(t, a.setCookie, 1, "session %d", i)
		assert.True(t, strings.HasPrefix(a.setCookie[0], lbhttp.DefaultStickyCookie+"="), a.setCookie[0])
		homes[a.backend]++
	}
	t.Logf("sessions per backend: %v", homes)
	assert.Len(t, homes, 4)
	for b, n := range homes {
		assert.Greater(t, n, 100, "backend %s has %d of 1000 sessions", b, n)
	}
	for r := range 4 {
		got := each(ss, func(i int, s *session) reply { return s.get(proxy.URL) })
		moved := 0
		for i, a := range got {
			require.NoError(t, a.err, "round %d session %d", r, i)
			if a.backend != ss[i].home {
				moved++
			}
			assert.Empty(t, a.setCookie, "round %d session %d: nothing to rewrite", r, i)
			assert.Equal(t, "app=1", a.seen, "the backend sees the application's cookie only")
		}
		assert.Zero(t, moved, "round %d", r)
	}
}

// TestStickyKill: a backend killed (its server closed): its sessions
// move, each rewritten once to its new backend and kept there, none
// failing; every other session stays on its backend.
func TestStickyKill(t *testing.T) {
	bs := cookieBackends(t, 4)
	_, proxy := stuck(t, bs, lbhttp.Config{})
	ss := newSessions(t, 1000)
	for i, a := range round(t, ss, proxy.URL) {
		require.NoError(t, a.err, "session %d", i)
	}
	homes := make([]string, len(ss))
	for i, s := range ss {
		homes[i] = s.home
	}
	bs[0].kill()
	movers := 0
	for r := range 3 {
		got := round(t, ss, proxy.URL)
		for i, a := range got {
			require.NoError(t, a.err, "round %d session %d", r, i)
			switch {
			case homes[i] != "b0":
				assert.Equal(t, homes[i], a.backend, "round %d session %d stays", r, i)
				assert.Empty(t, a.setCookie)
			case r == 0:
				movers++
				assert.NotEqual(t, "b0", a.backend)
				assert.Len(t, a.setCookie, 1, "session %d is re-pinned", i)
				homes[i] = a.backend
			default:
				assert.Equal(t, homes[i], a.backend, "round %d: moved session %d keeps its new backend", r, i)
				assert.Empty(t, a.setCookie)
			}
		}
	}
	t.Logf("%d sessions moved off the killed backend", movers)
	assert.Greater(t, movers, 100)
}

// TestStickyDrain: a drained backend's sessions move, none failing, and
// stay where they moved once it is enabled again; the others never move.
// An ejected backend is out of the set just as a drained one is (health
// hands sticky the eligible backends), which TestStickyKill covers.
func TestStickyDrain(t *testing.T) {
	bs := cookieBackends(t, 3)
	h, proxy := stuck(t, bs, lbhttp.Config{})
	ss := newSessions(t, 300)
	for i, a := range round(t, ss, proxy.URL) {
		require.NoError(t, a.err, "session %d", i)
	}
	homes := make([]string, len(ss))
	for i, s := range ss {
		homes[i] = s.home
	}
	require.NoError(t, h.Drain(hostOf(bs[1].srv)))
	moved := 0
	for i, a := range round(t, ss, proxy.URL) {
		require.NoError(t, a.err, "session %d", i)
		if homes[i] == "b1" {
			moved++
			assert.NotEqual(t, "b1", a.backend)
			assert.Len(t, a.setCookie, 1)
			homes[i] = a.backend
			continue
		}
		assert.Equal(t, homes[i], a.backend)
	}
	assert.Greater(t, moved, 30)
	require.NoError(t, h.Enable(hostOf(bs[1].srv)))
	for i, a := range round(t, ss, proxy.URL) {
		require.NoError(t, a.err, "session %d", i)
		assert.Equal(t, homes[i], a.backend, "session %d", i)
	}
}

// TestStickyForged: a cookie the proxy did not make (garbage, a valid
// one with a character changed, one made by a proxy with another key, an
// address in clear) is ignored: the request is picked afresh, answered
// 200, and the cookie rewritten to one that then holds.
func TestStickyForged(t *testing.T) {
	bs := cookieBackends(t, 4)
	_, proxy := stuck(t, bs, lbhttp.Config{Sticky: &lbhttp.StickyConfig{Key: []byte("0123456789abcdef-proxy-a")}})
	_, other := stuck(t, bs, lbhttp.Config{Sticky: &lbhttp.StickyConfig{Key: []byte("0123456789abcdef-proxy-b")}})
	valueOf := func(line string) string {
		c, err := http.ParseSetCookie(line)
		require.NoError(t, err)
		return c.Value
	}
	raw := func(u, cookie string) *http.Response {
		req, _ := http.NewRequest("GET", u, nil)
		if cookie != "" {
			req.Header.Set("Cookie", lbhttp.DefaultStickyCookie+"="+cookie)
		}
		resp, err := http.DefaultTransport.RoundTrip(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	good := valueOf(raw(proxy.URL, "").Header.Get("Set-Cookie"))
	assert.NotContains(t, good, "127.0.0.1", "the cookie does not name the address")
	flip := []byte(good)
	flip[len(flip)/2] ^= 1
	if flip[len(flip)/2] == '-' || flip[len(flip)/2] == '_' {
		flip[len(flip)/2] = 'A'
	}
	forged := map[string]string{
		"garbage":     "not-a-cookie",
		"tampered":    string(flip),
		"truncated":   good[:len(good)-3],
		"other key":   valueOf(raw(other.URL, "").Header.Get("Set-Cookie")),
		"address":     hostOf(bs[2].srv),
		"long":        strings.Repeat("A", 4000),
		"empty tag":   "AAAA",
		"not base64!": "***",
	}
	for name, v := range forged {
		t.Run(name, func(t *testing.T) {
			resp := raw(proxy.URL, v)
			require.Equal(t, 200, resp.StatusCode)
			lines := resp.Header.Values("Set-Cookie")
			require.Len(t, lines, 1, "rewritten")
			fresh := valueOf(lines[0])
			assert.NotEqual(t, v, fresh)
			again := raw(proxy.URL, fresh)
			assert.Equal(t, 200, again.StatusCode)
			assert.Empty(t, again.Header.Values("Set-Cookie"), "the rewritten cookie holds")
		})
	}
	// An empty cookie of the name is removed before forwarding too.
	req, _ := http.NewRequest("GET", proxy.URL, nil)
	req.Header.Set("Cookie", "a=1; "+lbhttp.DefaultStickyCookie+"=; b=2")
	resp, err := http.DefaultTransport.RoundTrip(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, "a=1; b=2", resp.Header.Get("X-Seen-Cookie"))
	// The valid one holds too, on every request.
	for range 10 {
		assert.Empty(t, raw(proxy.URL, good).Header.Values("Set-Cookie"))
	}
}

// TestStickyCookieAttributes: HttpOnly, Path=/, SameSite=Lax, a session
// cookie by default; Max-Age, Secure and the name when configured.
func TestStickyCookieAttributes(t *testing.T) {
	bs := cookieBackends(t, 1)
	for _, tt := range []struct {
		name string
		cfg  lbhttp.StickyConfig
		want http.Cookie
	}{
		{"default", lbhttp.StickyConfig{}, http.Cookie{Name: lbhttp.DefaultStickyCookie}},
		{"max-age, secure, name", lbhttp.StickyConfig{Name: "srv", MaxAge: time.Hour, Secure: true},
			http.Cookie{Name: "srv", MaxAge: 3600, Secure: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			_, proxy := stuck(t, bs, lbhttp.Config{Sticky: &cfg})
			resp, err := http.Get(proxy.URL)
			require.NoError(t, err)
			resp.Body.Close()
			line := resp.Header.Get("Set-Cookie")
			c, err := http.ParseSetCookie(line)
			require.NoError(t, err, line)
			assert.Equal(t, tt.want.Name, c.Name)
			assert.Equal(t, "/", c.Path)
			assert.True(t, c.HttpOnly)
			assert.Equal(t, http.SameSiteLaxMode, c.SameSite)
			assert.Equal(t, tt.want.MaxAge, c.MaxAge)
			assert.Equal(t, tt.want.Secure, c.Secure)
			assert.Empty(t, c.Domain)
			t.Log(line)
		})
	}
}

func TestStickyRefused(t *testing.T) {
	st, err := sticky.New(leastconn.New())
	require.NoError(t, err)
	tests := []struct {
		name string
		p    balancer.Picker
		cfg  lbhttp.StickyConfig
		msg  string
	}{
		{"no sticky layer", leastconn.New(), lbhttp.StickyConfig{}, "Sticky needs a sticky.Balancer"},
		{"bad name", st, lbhttp.StickyConfig{Name: "a b"}, `Sticky.Name "a b" is not a cookie name`},
		{"short key", st, lbhttp.StickyConfig{Key: []byte("short")}, "Sticky.Key is 5 bytes, want at least 16"},
		{"negative max-age", st, lbhttp.StickyConfig{MaxAge: -time.Second}, "Sticky.MaxAge -1s"},
		{"fractional max-age", st, lbhttp.StickyConfig{MaxAge: 1500 * time.Millisecond}, "Sticky.MaxAge 1.5s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := tt.cfg
			proxy, err := lbhttp.NewProxy(tt.p, lbhttp.Config{Sticky: &cfg})
			assert.Nil(t, proxy)
			assert.ErrorIs(t, err, balancer.ErrBadOption)
			assert.ErrorContains(t, err, tt.msg)
		})
	}
}

// TestStickyProxyAllocs: a request carrying a valid sticky cookie (and no
// other) costs the proxy no allocation more than one without sticky
// sessions: the cookie is verified by a map read, stripped by deleting
// its line, and the pinned Pick allocates nothing.
func TestStickyProxyAllocs(t *testing.T) {
	base := fixedBase(200, "ok")
	st, err := sticky.New(leastconn.New())
	require.NoError(t, err)
	require.NoError(t, st.Update(balancer.Endpoints("10.0.0.1:80", "10.0.0.2:80")))
	on, err := lbhttp.NewProxy(st, lbhttp.Config{Base: base, Sticky: &lbhttp.StickyConfig{}})
	require.NoError(t, err)
	off, err := lbhttp.NewProxy(st, lbhttp.Config{Base: base})
	require.NoError(t, err)
	serve := func(h http.Handler, cookie string) func() {
		return func() {
			in := httptest.NewRequest("GET", "http://svc/", nil)
			if cookie != "" {
				in.Header.Set("Cookie", cookie)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, in)
		}
	}
	// The cookie of the first answer.
	w := httptest.NewRecorder()
	on.ServeHTTP(w, httptest.NewRequest("GET", "http://svc/", nil))
	line := w.Result().Header.Get("Set-Cookie")
	require.NotEmpty(t, line)
	c, err := http.ParseSetCookie(line)
	require.NoError(t, err)
	cookie := c.Name + "=" + c.Value
	plain := testing.AllocsPerRun(200, serve(off, ""))
	pinned := testing.AllocsPerRun(200, serve(on, cookie))
	skipCountUnderRace(t, pinned-plain)
	// httptest.NewRequest's Header.Set of the cookie is the test's own
	// allocation: count it on the plain side too.
	withCookie := testing.AllocsPerRun(200, serve(off, "other=1"))
	t.Logf("allocations per request: sticky off %v (with a cookie %v), sticky on and pinned %v", plain, withCookie, pinned)
	assert.Equal(t, withCookie, pinned, "sticky on, pinned: %v allocations; off: %v (no cookie %v)", pinned, withCookie, plain)
}
