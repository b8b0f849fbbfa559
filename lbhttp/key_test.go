package lbhttp_test

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/lbkit/lbkit/lbhttp"
)

func reqFrom(remote string, header ...string) *http.Request {
	r := &http.Request{RemoteAddr: remote, Header: http.Header{}}
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

var (
	lbNet  = netip.MustParsePrefix("10.0.0.0/8")
	cdnNet = netip.MustParsePrefix("2001:db8:cd0::/48")
)

func TestClientIP(t *testing.T) {
	tests := []struct {
		name    string
		trusted []netip.Prefix
		req     *http.Request
		want    string
	}{
		{"peer, no trust", nil, reqFrom("192.0.2.7:51000"), "192.0.2.7"},
		{"peer v6", nil, reqFrom("[2001:db8::1]:443"), "2001:db8::1"},
		{"peer v4-mapped folds to v4", nil, reqFrom("[::ffff:192.0.2.7]:443"), "192.0.2.7"},
		{"peer with zone drops zone", nil, reqFrom("[fe80::1%eth0]:443"), "fe80::1"},
		{"peer non-canonical v6", nil, reqFrom("[2001:DB8:0::1]:443"), "2001:db8::1"},
		{"peer without port", nil, reqFrom("192.0.2.7"), "192.0.2.7"},
		{"unix socket peer", nil, reqFrom("@"), ""},
		{"empty RemoteAddr", nil, reqFrom(""), ""},

		{"spoofed XFF, no trust", nil, reqFrom("192.0.2.7:1", "X-Forwarded-For", "198.51.100.1"), "192.0.2.7"},
		{"spoofed XFF, untrusted peer", []netip.Prefix{lbNet}, reqFrom("192.0.2.7:1", "X-Forwarded-For", "198.51.100.1"), "192.0.2.7"},
		{"trusted peer, one hop", []netip.Prefix{lbNet}, reqFrom("10.1.1.1:1", "X-Forwarded-For", "198.51.100.1"), "198.51.100.1"},
		{"trusted peer, client spoofs left of itself", []netip.Prefix{lbNet},
			reqFrom("10.1.1.1:1", "X-Forwarded-For", "203.0.113.66, 198.51.100.1"), "198.51.100.1"},
		{"two trusted hops", []netip.Prefix{lbNet},
			reqFrom("10.1.1.1:1", "X-Forwarded-For", "203.0.113.66, 198.51.100.1, 10.2.2.2"), "198.51.100.1"},
		{"several header lines, in order", []netip.Prefix{lbNet},
			reqFrom("10.1.1.1:1", "X-Forwarded-For", "203.0.113.66", "X-Forwarded-For", "198.51.100.1,10.2.2.2"), "198.51.100.1"},
		{"every hop trusted: leftmost", []netip.Prefix{lbNet},
			reqFrom("10.1.1.1:1", "X-Forwarded-For", "10.3.3.3, 10.2.2.2"), "10.3.3.3"},
		{"trusted peer, no header", []netip.Prefix{lbNet}, reqFrom("10.1.1.1:1"), "10.1.1.1"},
		{"garbage hop ends the walk", []netip.Prefix{lbNet},
			reqFrom("10.1.1.1:1", "X-Forwarded-For", "198.51.100.1, unknown, 10.2.2.2"), "10.2.2.2"},
		{"garbage right after peer", []netip.Prefix{lbNet},
			reqFrom("10.1.1.1:1", "X-Forwarded-For", "not-an-ip"), "10.1.1.1"},
		{"hop with port", []netip.Prefix{lbNet}, reqFrom("10.1.1.1:1", "X-Forwarded-For", "198.51.100.1:4711"), "198.51.100.1"},
		{"v6 hop bracketed", []netip.Prefix{cdnNet},
			reqFrom("[2001:db8:cd0::9]:1", "X-Forwarded-For", "[2001:db8:beef::1]:4711"), "2001:db8:beef::1"},
		{"v4 peer through dual-stack socket is trusted", []netip.Prefix{lbNet},
			reqFrom("[::ffff:10.1.1.1]:1", "X-Forwarded-For", "198.51.100.1"), "198.51.100.1"},
		{"v4-mapped trusted prefix", []netip.Prefix{netip.MustParsePrefix("::ffff:10.0.0.0/104")},
			reqFrom("10.1.1.1:1", "X-Forwarded-For", "198.51.100.1"), "198.51.100.1"},
		{"Forwarded ignored by ClientIP", []netip.Prefix{lbNet},
			reqFrom("10.1.1.1:1", "Forwarded", "for=198.51.100.1"), "10.1.1.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, lbhttp.ClientIP(tt.trusted...)(tt.req))
		})
	}
}

func TestForwardedClientIP(t *testing.T) {
	tests := []struct {
		name string
		req  *http.Request
		want string
	}{
		{"untrusted peer", reqFrom("192.0.2.7:1", "Forwarded", "for=198.51.100.1"), "192.0.2.7"},
		{"one hop", reqFrom("10.1.1.1:1", "Forwarded", "for=198.51.100.1;proto=https"), "198.51.100.1"},
		{"quoted v6 with port", reqFrom("10.1.1.1:1", "Forwarded", `for="[2001:db8:cafe::17]:4711"`), "2001:db8:cafe::17"},
		{"case and spaces", reqFrom("10.1.1.1:1", "Forwarded", "proto=http; For=198.51.100.1 ;by=10.1.1.1"), "198.51.100.1"},
		{"spoof left of the client", reqFrom("10.1.1.1:1", "Forwarded", "for=203.0.113.66, for=198.51.100.1, for=10.2.2.2"), "198.51.100.1"},
		{"element without for is skipped", reqFrom("10.1.1.1:1", "Forwarded", "for=198.51.100.1, by=10.2.2.2"), "198.51.100.1"},
		{"obfuscated identifier ends the walk", reqFrom("10.1.1.1:1", "Forwarded", "for=198.51.100.1, for=_hidden, for=10.2.2.2"), "10.2.2.2"},
		{"unknown", reqFrom("10.1.1.1:1", "Forwarded", "for=unknown"), "10.1.1.1"},
		{"X-Forwarded-For ignored", reqFrom("10.1.1.1:1", "X-Forwarded-For", "198.51.100.1"), "10.1.1.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, lbhttp.ForwardedClientIP(lbNet)(tt.req))
		})
	}
}

func TestHeaderCookieFirst(t *testing.T) {
	tests := []struct {
		name string
		key  lbhttp.KeyFunc
		req  *http.Request
		want string
	}{
		{"header", lbhttp.Header("x-session"), reqFrom("192.0.2.7:1", "X-Session", "s-1"), "s-1"},
		{"header first value", lbhttp.Header("X-Session"), reqFrom("192.0.2.7:1", "X-Session", "s-1", "X-Session", "s-2"), "s-1"},
		{"header absent", lbhttp.Header("X-Session"), reqFrom("192.0.2.7:1"), ""},
		{"cookie", lbhttp.Cookie("sid"), reqFrom("192.0.2.7:1", "Cookie", "a=1; sid=abc; b=2"), "abc"},
		{"cookie quoted", lbhttp.Cookie("sid"), reqFrom("192.0.2.7:1", "Cookie", `sid="abc"`), "abc"},
		{"cookie second line", lbhttp.Cookie("sid"), reqFrom("192.0.2.7:1", "Cookie", "a=1", "Cookie", "sid=xyz"), "xyz"},
		{"cookie name is exact", lbhttp.Cookie("sid"), reqFrom("192.0.2.7:1", "Cookie", "xsid=1; sidx=2"), ""},
		{"cookie absent", lbhttp.Cookie("sid"), reqFrom("192.0.2.7:1"), ""},
		{"first: cookie wins", lbhttp.First(lbhttp.Cookie("sid"), lbhttp.ClientIP()), reqFrom("192.0.2.7:1", "Cookie", "sid=abc"), "abc"},
		{"first: falls back", lbhttp.First(lbhttp.Cookie("sid"), lbhttp.ClientIP()), reqFrom("192.0.2.7:1"), "192.0.2.7"},
		{"first: nothing", lbhttp.First(), reqFrom("192.0.2.7:1"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.key(tt.req))
		})
	}
}

// TestTrustedPrefixesCopied checks that changing the caller's slice after
// making the KeyFunc changes nothing.
func TestTrustedPrefixesCopied(t *testing.T) {
	trusted := []netip.Prefix{lbNet}
	key := lbhttp.ClientIP(trusted...)
	trusted[0] = netip.MustParsePrefix("192.0.2.0/24")
	r := reqFrom("10.1.1.1:1", "X-Forwarded-For", "198.51.100.1")
	assert.Equal(t, "198.51.100.1", key(r))
	r = reqFrom("192.0.2.7:1", "X-Forwarded-For", "198.51.100.1")
	assert.Equal(t, "192.0.2.7", key(r))
}

// TestKeyAllocs checks that the common keys cost no allocation.
func TestKeyAllocs(t *testing.T) {
	tests := []struct {
		name string
		key  lbhttp.KeyFunc
		req  *http.Request
	}{
		{"ClientIP v4", lbhttp.ClientIP(), reqFrom("192.0.2.7:51000")},
		{"ClientIP v6", lbhttp.ClientIP(), reqFrom("[2001:db8::1]:443")},
		{"ClientIP through two trusted hops", lbhttp.ClientIP(lbNet),
			reqFrom("10.1.1.1:1", "X-Forwarded-For", "203.0.113.66, 198.51.100.1, 10.2.2.2")},
		{"ForwardedClientIP", lbhttp.ForwardedClientIP(lbNet),
			reqFrom("10.1.1.1:1", "Forwarded", `for="[2001:db8:cafe::17]:4711";proto=https, for=10.2.2.2`)},
		{"Header", lbhttp.Header("X-Session"), reqFrom("192.0.2.7:1", "X-Session", "s-1")},
		{"Cookie", lbhttp.Cookie("sid"), reqFrom("192.0.2.7:1", "Cookie", "a=1; sid=abc; b=2")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Zero(t, testing.AllocsPerRun(100, func() { _ = tt.key(tt.req) }))
		})
	}
}
