package lbhttp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/sticky"
)

// NewProxy returns an httputil.ReverseProxy that sends each request to a
// backend picked by p, through a Transport built from cfg:
//
//   - Rewrite (not the deprecated Director) computes the affinity key from
//     the incoming request with cfg.Key (default: ClientIP of
//     cfg.TrustedProxies) and passes it to the Transport in the request
//     context; it sets X-Forwarded-For, -Host and -Proto, forwarding the
//     earlier X-Forwarded-For hops only when the peer is a trusted proxy;
//     and it sets the outgoing Host header to the backend's address, as
//     ProxyRequest.SetURL does. With cfg.Sticky it reads the sticky
//     cookie, passes the backend it names on (Request.Prefer) when it
//     holds, and removes it from the outgoing request; the Transport then
//     sets a new one on a response from any other backend (see "Sticky
//     sessions" in the package documentation).
//   - Transport is NewTransport(p, cfg): picks, timeouts, retries within
//     the budget, hedges if asked, and Done when the body has been copied
//     to the client. Two differences. The body of a
//     101 Switching Protocols response is also closed when the incoming
//     request's context ends, as ReverseProxy itself does once it has
//     hijacked the client's connection, so that a session it cannot
//     hijack (it answers 502) still closes the backend's connection and
//     gets its Done. And the end of the incoming request's context (its
//     client has gone) ends an attempt only once the attempt has run
//     100 ms, which spares the attempts that end sooner the two
//     allocations of watching it (see "Cost" in the package
//     documentation).
//   - ErrorHandler is ErrorHandler(cfg.ErrorLog): 503 when there is no
//     backend, 504 on a timeout, 502 otherwise.
//   - BufferPool is a BufferPool of its own: the buffers that copy
//     response bodies to the clients are reused, not allocated per
//     request.
//
// What a backend tells the proxy stays in the proxy unless cfg says
// otherwise: a request for the backends' probe path (cfg.ProbePath,
// DefaultProbePath by default), where a Reporter answers with the
// backend's requests in flight and its latency, gets 404 from the proxy
// itself unless cfg.ForwardProbes; and the backends' load report headers
// (LoadHeader, LoadHeaderBin), once the Transport has read them, are
// removed from the responses unless cfg.ForwardLoadReports.
//
// Change the returned proxy's fields as you would any ReverseProxy's. To do
// more in Rewrite, wrap it:
//
//	rw := proxy.Rewrite
//	proxy.Rewrite = func(pr *httputil.ProxyRequest) {
//		rw(pr)
//		pr.Out.Host = pr.In.Host // keep the client's Host header
//	}
//
// NewProxy returns NewTransport's errors, one for a ProbePath that does
// not start with "/", and, wrapping balancer.ErrBadOption, one for a
// cfg.Sticky whose fields are refused (see StickyConfig) or with no
// sticky.Balancer in p's stack.
func NewProxy(p balancer.Picker, cfg Config) (*httputil.ReverseProxy, error) {
	key := cfg.Key
	if key == nil {
		key = ClientIP(cfg.TrustedProxies...)
	}
	scheme := cfg.Scheme
	if scheme == "" {
		scheme = "http"
	}
	if cfg.ProbePath != "" && !strings.HasPrefix(cfg.ProbePath, "/") {
		return nil, fmt.Errorf("lbhttp: ProbePath %q does not start with /", cfg.ProbePath)
	}
	var codec *stickyCodec
	if cfg.Sticky != nil {
		if _, ok := balancer.As[*sticky.Balancer](p); !ok {
			return nil, fmt.Errorf("lbhttp: %w: Sticky needs a sticky.Balancer in the picker's stack (health ▶ sticky ▶ algorithm)", balancer.ErrBadOption)
		}
		var err error
		if codec, err = newStickyCodec(*cfg.Sticky); err != nil {
			return nil, err
		}
	}
	trusted := trustListOf(cfg.TrustedProxies)
	tcfg := cfg
	tcfg.Key = nil // the key travels in the context
	t, err := NewTransport(p, tcfg)
	if err != nil {
		return nil, err
	}
	t.proxied = true
	t.linkAfter = proxyLinkAfter
	if !cfg.ForwardProbes {
		t.probePath = cmp.Or(cfg.ProbePath, DefaultProbePath)
	}
	t.stripReports = !cfg.ForwardLoadReports
	t.sticky = codec
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = scheme
			pr.Out.URL.Host = "" // the Transport sets the backend's
			pr.Out.Host = ""     // Host header: the backend's address
			if len(trusted) > 0 {
				if _, peer, ok := parseHop(pr.In.RemoteAddr); ok && trusted.contains(peer) {
					if prior := pr.In.Header["X-Forwarded-For"]; len(prior) > 0 {
						pr.Out.Header["X-Forwarded-For"] = append([]string(nil), prior...)
					}
				}
			}
			pr.SetXForwarded()
			prefer := ""
			if codec != nil {
				if v := cookieValue(pr.In.Header, codec.name); v != "" {
					prefer = codec.verify(v) // "": forged or stale, picked afresh
				}
				stripCookie(pr.Out.Header, codec.name) // the backend sees the application's cookies only
			}
			// In place: WithContext's copy stays on the stack.
			*pr.Out = *pr.Out.WithContext(withProxyKey(pr.Out.Context(), key(pr.In), prefer))
		},
		Transport:    t,
		ErrorHandler: ErrorHandler(cfg.ErrorLog),
		BufferPool:   new(BufferPool),
	}, nil
}

// ErrorHandler returns a ReverseProxy.ErrorHandler that answers with a
// status saying what went wrong instead of ReverseProxy's blanket 502:
//
//   - 503 Service Unavailable, "no backend available", when the picker
//     had no backend (balancer.ErrNoBackend: an empty set), rather than
//     the "unsupported protocol scheme" a request without a host gets;
//   - 504 Gateway Timeout when the request's deadline passed or the base
//     transport timed out (a net.Error whose Timeout is true, such as
//     http.Transport's ResponseHeaderTimeout);
//   - 502 Bad Gateway for any other failure, such as every attempt's
//     connection being refused.
//
// Each failure is logged on log (nil: slog.Default()), at Warn, or at
// Debug when the client itself went away (context.Canceled).
func ErrorHandler(log *slog.Logger) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		l := log
		if l == nil {
			l = slog.Default()
		}
		status, msg := http.StatusBadGateway, "bad gateway"
		level := slog.LevelWarn
		switch {
		case errors.Is(err, balancer.ErrNoBackend):
			status, msg = http.StatusServiceUnavailable, "no backend available"
		case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
			status, msg = http.StatusGatewayTimeout, "backend timed out"
		case errors.Is(err, context.Canceled):
			level = slog.LevelDebug
		}
		l.Log(r.Context(), level, "lbhttp: proxy error", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
		http.Error(w, msg, status)
	}
}

// isTimeout reports whether err is a net.Error that timed out.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
