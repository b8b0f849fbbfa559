package lbhttp

import (
	"context"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
	"sync/atomic"
)

// A KeyFunc returns the affinity key of a request: the balancer.Request.Key
// a hash picker (iphash, consistent) maps to a backend. Pickers without
// affinity ignore the key. A KeyFunc must be safe for concurrent use and
// must not modify the request.
//
// NewProxy calls it on the incoming request, in the proxy's Rewrite, and
// hands the key to the Transport in the request context (WithKey); a
// Transport given Config.Key calls it on the request passed to RoundTrip.
type KeyFunc func(*http.Request) string

// keyCtx is the context key under which WithKey stores an affinity key.
type keyCtx struct{}

// keyContext carries an affinity key. It is context.WithValue in one
// allocation instead of two: WithValue would also box the string. The one
// NewProxy's Rewrite makes also holds the request's first attempt (see
// proxyContext), for the Transport to take once.
type keyContext struct {
	context.Context
	key    string
	prefer string   // the backend the sticky cookie names, verified; NewProxy's only
	spare  *attempt // nil for WithKey's
	taken  atomic.Bool
}

// proxyContext is what NewProxy's Rewrite allocates: the key's context and
// the block of the request's first attempt, together, so that lbkit's
// wiring costs a proxied request one allocation in all.
type proxyContext struct {
	keyContext
	first attempt
}

// withProxyKey is WithKey for NewProxy's Rewrite.
func withProxyKey(ctx context.Context, key, prefer string) context.Context {
	p := &proxyContext{keyContext: keyContext{Context: ctx, key: key, prefer: prefer}}
	p.spare = &p.first
	return &p.keyContext
}

// takeSpare returns the first attempt's block withProxyKey made, the
// first time it is asked, and nil otherwise or for WithKey's context.
func (c *keyContext) takeSpare() *attempt {
	if c == nil || c.spare == nil || !c.taken.CompareAndSwap(false, true) {
		return nil
	}
	return c.spare
}

// Value returns the keyContext itself for keyCtx, so that KeyFrom reads the
// key without boxing it.
func (c *keyContext) Value(k any) any {
	if _, ok := k.(keyCtx); ok {
		return c
	}
	return c.Context.Value(k)
}

// WithKey returns a copy of ctx carrying key as the affinity key for the
// Transport. Use it when you build requests yourself:
//
//	req = req.WithContext(lbhttp.WithKey(req.Context(), "user-42"))
func WithKey(ctx context.Context, key string) context.Context {
	return &keyContext{Context: ctx, key: key}
}

// KeyFrom returns the affinity key WithKey stored in ctx, and whether there
// was one. It allocates nothing.
func KeyFrom(ctx context.Context) (string, bool) {
	if c := keyContextOf(ctx); c != nil {
		return c.key, true
	}
	return "", false
}

// keyContextOf returns the keyContext WithKey or withProxyKey put in ctx,
// or nil.
func keyContextOf(ctx context.Context) *keyContext {
	c, _ := ctx.Value(keyCtx{}).(*keyContext)
	return c
}

// ClientIP returns a KeyFunc whose key is the address of the client that
// sent the request, without port: "192.0.2.7", "2001:db8::1". It is the key
// iphash needs, and a good one for consistent hashing by client.
//
// With no trusted proxies the key is the address of the immediate peer,
// from Request.RemoteAddr, and X-Forwarded-For is ignored: anyone can write
// that header, and a key read from it would let a client pick its backend.
//
// When the peer is inside one of the trusted prefixes (your own load
// balancers or CDN ranges), the key is read from X-Forwarded-For, walking
// it from the right, the hop nearest to this server, and skipping hops
// inside the trusted prefixes: the first untrusted hop is the client. This
// is the rightmost untrusted address, the only one a client cannot forge
// (what it writes itself ends up to the left of it). Several
// X-Forwarded-For lines count as one list, in order. When every hop is
// trusted the leftmost is the key. A hop that does not parse as an address
// ("unknown", garbage) ends the walk: the key is then the last trusted hop
// read, the proxy that reported it.
//
// ClientIP allocates nothing for a canonical IPv4 or IPv6 address without
// zone; an IPv4-mapped IPv6 address ("::ffff:192.0.2.7") is reported as
// the IPv4 address, at the cost of one allocation, so that a dual-stack
// listener gives a client the same key as a plain IPv4 one. A RemoteAddr
// that is not an IP address (a Unix socket) gives the empty key.
func ClientIP(trusted ...netip.Prefix) KeyFunc {
	t := trustListOf(trusted)
	return func(r *http.Request) string {
		return clientIP(r, t, "X-Forwarded-For", xffHop)
	}
}

// ForwardedClientIP is ClientIP reading the RFC 7239 Forwarded header
// ("Forwarded: for=192.0.2.7, for=\"[2001:db8::1]:4711\"") instead of
// X-Forwarded-For. Use it only when your trusted proxies write Forwarded:
// a proxy that writes X-Forwarded-For passes a client's own Forwarded
// header through untouched, and trusting it would let the client choose
// its key. Elements without a for= parameter are skipped.
func ForwardedClientIP(trusted ...netip.Prefix) KeyFunc {
	t := trustListOf(trusted)
	return func(r *http.Request) string {
		return clientIP(r, t, "Forwarded", forwardedHop)
	}
}

// Header returns a KeyFunc whose key is the first value of the named
// request header, or "" when it is absent. Use it with consistent hashing
// for a session, tenant or user header your own front end sets. Every
// request without the header shares one key, so one backend: combine with
// First to fall back to another key.
func Header(name string) KeyFunc {
	canon := textproto.CanonicalMIMEHeaderKey(name)
	return func(r *http.Request) string {
		if v := r.Header[canon]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
}

// Cookie returns a KeyFunc whose key is the value of the named cookie, or
// "" when the request has none. It reads the Cookie header itself rather
// than through Request.Cookie, which parses every cookie into a new slice.
// Surrounding double quotes are removed from the value.
func Cookie(name string) KeyFunc {
	return func(r *http.Request) string { return cookieValue(r.Header, name) }
}

// cookieValue returns the value of the first cookie named name in h's
// Cookie lines, unquoted, or "". It allocates nothing.
func cookieValue(h http.Header, name string) string {
	for _, line := range h["Cookie"] {
		for line != "" {
			var part string
			part, line, _ = strings.Cut(line, ";")
			k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
			if !ok || k != name {
				continue
			}
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			return v
		}
	}
	return ""
}

// First returns a KeyFunc whose key is the first non-empty key among fs,
// or "" if they are all empty:
//
//	lbhttp.First(lbhttp.Cookie("session"), lbhttp.ClientIP())
func First(fs ...KeyFunc) KeyFunc {
	fs = append([]KeyFunc(nil), fs...)
	return func(r *http.Request) string {
		for _, f := range fs {
			if k := f(r); k != "" {
				return k
			}
		}
		return ""
	}
}

// trustList is a set of trusted proxy prefixes. Prefixes are masked and
// IPv4-mapped IPv6 prefixes folded to IPv4 so that Contains matches the
// unmapped addresses parseHop returns.
type trustList []netip.Prefix

func (t trustList) contains(a netip.Addr) bool {
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// trustListOf builds the list once, when a KeyFunc is made, so that the
// caller's slice can change afterwards without effect. Invalid prefixes
// (the zero netip.Prefix) are dropped.
func trustListOf(ps []netip.Prefix) trustList {
	t := make(trustList, 0, len(ps))
	for _, p := range ps {
		if !p.IsValid() {
			continue
		}
		a := p.Addr()
		bits := p.Bits()
		if a.Is4In6() && bits >= 96 {
			a, bits = a.Unmap(), bits-96
		}
		t = append(t, netip.PrefixFrom(a.WithZone(""), bits).Masked())
	}
	return t
}

// hopFunc extracts the address text from one comma-separated element of a
// forwarding header, reporting false for an element that names no hop
// (a Forwarded element without for=).
type hopFunc func(elem string) (string, bool)

// xffHop: an X-Forwarded-For element is the address itself, perhaps with
// a port.
func xffHop(elem string) (string, bool) { return strings.TrimSpace(elem), true }

// forwardedHop returns the for= value of a Forwarded element, unquoted.
func forwardedHop(elem string) (string, bool) {
	for elem != "" {
		var pair string
		pair, elem, _ = strings.Cut(elem, ";")
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(k, "for") {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
		}
		return v, true
	}
	return "", false
}

// clientIP walks the lines of the forwarding header named header (in
// canonical form) from the right while hops are trusted; see ClientIP. It
// looks the header up only for a trusted peer.
func clientIP(r *http.Request, t trustList, header string, hop hopFunc) string {
	key, peer, ok := parseHop(r.RemoteAddr)
	if !ok || len(t) == 0 || !t.contains(peer) {
		return key
	}
	lines := r.Header[header]
	for i := len(lines) - 1; i >= 0; i-- {
		line := lines[i]
		for line != "" {
			elem := line
			if j := strings.LastIndexByte(line, ','); j >= 0 {
				elem, line = line[j+1:], line[:j]
			} else {
				line = ""
			}
			text, named := hop(elem)
			if !named {
				continue
			}
			k, a, ok := parseHop(text)
			if !ok {
				return key
			}
			key = k
			if !t.contains(a) {
				return key
			}
		}
	}
	return key
}

// parseHop parses an address with or without port ("192.0.2.7",
// "192.0.2.7:80", "2001:db8::1", "[2001:db8::1]:443") and returns the key
// text (the address without port, zone or IPv4 mapping) and the address.
func parseHop(s string) (key string, a netip.Addr, ok bool) {
	host := s
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", netip.Addr{}, false
		}
		host = s[1:end]
		if rest := s[end+1:]; rest != "" && !validPort(rest) {
			return "", netip.Addr{}, false
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.LastIndexByte(s, ':') == i {
		// One colon: IPv4 (or a name) with a port. Two or more: bare IPv6.
		host = s[:i]
		if !validPort(s[i:]) {
			return "", netip.Addr{}, false
		}
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return "", netip.Addr{}, false
	}
	if a.Zone() != "" || a.Is4In6() {
		a = a.Unmap().WithZone("")
	}
	// Return host itself when it is already the canonical text, so that
	// the common case allocates nothing; else a.String() ("2001:DB8::1",
	// "::ffff:192.0.2.7" and zoned addresses are rare).
	var buf [64]byte
	if string(a.AppendTo(buf[:0])) == host {
		return host, a, true
	}
	return a.String(), a, true
}

// validPort reports whether s is ":" followed by 1 to 5 digits.
func validPort(s string) bool {
	if len(s) < 2 || len(s) > 6 || s[0] != ':' {
		return false
	}
	for _, c := range []byte(s[1:]) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
