package lbhttp

import (
	"net/netip"
	"testing"
)

// FuzzParseHop checks parseHop against net/netip: whatever netip accepts
// as an address or an address and port, parseHop accepts with the same
// address (unmapped, without zone), and what parseHop returns is always
// the canonical text of a valid address. It never panics.
func FuzzParseHop(f *testing.F) {
	for _, s := range []string{
		"192.0.2.7", "192.0.2.7:80", "2001:db8::1", "[2001:db8::1]:443", "[fe80::1%eth0]:1",
		"::ffff:192.0.2.7", "[::ffff:192.0.2.7]:9", "unknown", "_hidden", "", "[", "[]:", "1.2.3.4:",
		"1.2.3.4:99999", "[1.2.3.4]:80", "01.2.3.4", "2001:DB8::1",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		key, a, ok := parseHop(s)
		var want netip.Addr
		if ap, err := netip.ParseAddrPort(s); err == nil {
			want = ap.Addr()
		} else if ad, err := netip.ParseAddr(s); err == nil {
			want = ad
		}
		want = want.Unmap().WithZone("")
		if want.IsValid() {
			if !ok || a != want {
				t.Fatalf("parseHop(%q) = %q, %v, %v; netip says %v", s, key, a, ok, want)
			}
		}
		if !ok {
			return
		}
		if !a.IsValid() || a.Zone() != "" || a.Is4In6() || key != a.String() {
			t.Fatalf("parseHop(%q) = %q, %v: not canonical", s, key, a)
		}
	})
}
