package iphash

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/lbkit/lbkit/balancer"
)

// benchForms are one key of each form, valid and not.
var benchForms = []struct{ name, key string }{
	{"empty", ""},
	{"v4", "198.51.100.27"},
	{"v4port", "198.51.100.27:51234"},
	{"v6", "2001:db8:85a3::8a2e:370:7334"},
	{"v6port", "[2001:db8:85a3::8a2e:370:7334]:443"},
	{"v4mapped", "::ffff:198.51.100.27"},
	{"v6zone", "[fe80::1ff:fe23:4567:890a%eth0]:443"},
	{"bad", "not-an-address"},
}

// BenchmarkParse compares parseKey with net/netip (ParseAddr, then
// ParseAddrPort when that fails, as a caller must do to accept both forms).
func BenchmarkParse(b *testing.B) {
	for _, fm := range benchForms[1:] { // the empty key is not parsed
		b.Run("form="+fm.name+"/parser=iphash", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				parseKey(fm.key)
			}
		})
		b.Run("form="+fm.name+"/parser=netip", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := netip.ParseAddr(fm.key); err != nil {
					_, _ = netip.ParseAddrPort(fm.key)
				}
			}
		})
	}
}

// BenchmarkPickForm measures one Pick on a *Picker of 64 backends for each
// form of key: the parse, the hash and the modulo, and nothing else.
func BenchmarkPickForm(b *testing.B) {
	set := make([]balancer.Backend, 64)
	for i := range set {
		set[i] = balancer.NewEndpoint(fmt.Sprintf("10.0.0.%d:8080", i), 1)
	}
	p := New()
	if err := p.Update(set); err != nil {
		b.Fatal(err)
	}
	for _, fm := range benchForms {
		b.Run("form="+fm.name, func(b *testing.B) {
			b.ReportAllocs()
			req := balancer.Request{Key: fm.key}
			for b.Loop() {
				_, _ = p.Pick(req)
			}
		})
	}
}
