package lbhttp

import (
	"context"
	"net/http"
)

// routeCtx is the context key under which WithRoute stores a route.
type routeCtx struct{}

// routeContext carries a route: context.WithValue in one allocation
// instead of two, as keyContext.
type routeContext struct {
	context.Context
	route string
}

// Value returns the routeContext itself for routeCtx, so that RouteFrom
// reads the route without boxing it.
func (c *routeContext) Value(k any) any {
	if _, ok := k.(routeCtx); ok {
		return c
	}
	return c.Context.Value(k)
}

// WithRoute returns a copy of ctx carrying route as the
// balancer.Request.Route of the requests sent with it: the label value of
// the set of backends they ask for (package route). It goes before
// Config.RouteHeader. Behind NewProxy, set it in a wrapped Rewrite:
//
//	rw := proxy.Rewrite
//	proxy.Rewrite = func(pr *httputil.ProxyRequest) {
//		rw(pr)
//		if isBetaUser(pr.In) {
//			*pr.Out = *pr.Out.WithContext(lbhttp.WithRoute(pr.Out.Context(), "canary"))
//		}
//	}
func WithRoute(ctx context.Context, route string) context.Context {
	return &routeContext{Context: ctx, route: route}
}

// RouteFrom returns the route WithRoute stored in ctx, and whether there
// was one. It allocates nothing.
func RouteFrom(ctx context.Context) (string, bool) {
	if c, _ := ctx.Value(routeCtx{}).(*routeContext); c != nil {
		return c.route, true
	}
	return "", false
}

// routeOf returns the Route of a request: WithRoute's, else the first
// value of Config.RouteHeader, else "".
func (t *Transport) routeOf(ctx context.Context, h http.Header) string {
	if r, ok := RouteFrom(ctx); ok {
		return r
	}
	if t.routeHeader != "" {
		if v := h[t.routeHeader]; len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// validToken reports whether s is an RFC 9110 token, as header and
// cookie names must be.
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c < 0x80 && c > ' ' && c != 0x7f && !isSeparator(c):
		default:
			return false
		}
	}
	return true
}

func isSeparator(c byte) bool {
	switch c {
	case '(', ')', '<', '>', '@', ',', ';', ':', '\\', '"', '/', '[', ']', '?', '=', '{', '}':
		return true
	}
	return false
}
