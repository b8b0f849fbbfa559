package iphash_test

import (
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/iphash"
)

// reference is iphash written the slow, obvious way on top of net/netip:
// parse with ParseAddr or ParseAddrPort, unmap, drop the zone, keep the
// prefix, xxhash the 4 or 16 bytes, and take the hash mod n over the IDs in
// sorted order. It reports false for a key net/netip refuses.
func reference(sorted []string, key string, v4Bits, v6Bits int) (string, bool) {
	var h uint64
	if key == "" {
		h = xxhash.Sum64(nil)
	} else {
		a, err := netip.ParseAddr(key)
		if err != nil {
			ap, err := netip.ParseAddrPort(key)
			if err != nil {
				return "", false
			}
			a = ap.Addr()
		}
		a = a.Unmap().WithZone("")
		if a.Is4() {
			pfx, _ := a.Prefix(v4Bits)
			b := pfx.Addr().As4()
			h = xxhash.Sum64(b[:])
		} else {
			pfx, _ := a.Prefix(v6Bits)
			b := pfx.Addr().As16()
			h = xxhash.Sum64(b[:])
		}
	}
	return sorted[h%uint64(len(sorted))], true
}

// FuzzPick checks Pick against reference: an error (wrapping ErrBadKey)
// exactly when net/netip refuses the key, else the same home backend; every
// retry in the set and away from home; Avoid honoured; never a panic. The
// set has a prime number of backends, 1009, so that a wrong hash almost
// never lands on the right backend by chance.
func FuzzPick(f *testing.F) {
	for _, k := range append(allocKeys, "192.0.2.1:0000080", "::1:80", "1.2.3.4:80:80", "[1.2.3.4]:80", "fe80::1%a:b]%") {
		f.Add(k, 0, false)
		f.Add(k, 3, true)
	}
	f.Add("192.0.2.1", -1, false)
	f.Add("192.0.2.1", 1<<62, true)
	ids := addrs(1009)
	sorted := slices.Sorted(slices.Values(ids))
	pickers := map[bool]*iphash.Picker{false: iphash.New(), true: iphash.New(iphash.WithPrefix())}
	for _, p := range pickers {
		if err := p.Update(balancer.Endpoints(ids...)); err != nil {
			f.Fatal(err)
		}
	}
	inSet := make(map[string]bool, len(ids))
	for _, id := range ids {
		inSet[id] = true
	}
	f.Fuzz(func(t *testing.T, key string, attempt int, prefix bool) {
		p := pickers[prefix]
		v4Bits, v6Bits := 32, 128
		if prefix {
			v4Bits, v6Bits = 24, 64
		}
		want, ok := reference(sorted, key, v4Bits, v6Bits)
		home, err := p.Pick(balancer.Request{Key: key})
		if !ok {
			if !errors.Is(err, balancer.ErrBadKey) || home != nil {
				t.Fatalf("key %q, which net/netip refuses: got (%v, %v), want ErrBadKey", key, home, err)
			}
			return
		}
		if err != nil || home.ID() != want {
			t.Fatalf("key %q: got (%v, %v), want %s", key, home, err, want)
		}
		got, err := p.Pick(balancer.Request{Key: key, Attempt: attempt})
		if err != nil || !inSet[got.ID()] {
			t.Fatalf("key %q attempt %d: got (%v, %v)", key, attempt, got, err)
		}
		if attempt > 0 && attempt%len(ids) != 0 && got.ID() == want {
			t.Fatalf("key %q attempt %d: got home %s again", key, attempt, want)
		}
		avoided, err := p.Pick(balancer.Request{Key: key, Attempt: attempt, Avoid: got.ID()})
		if err != nil || avoided.ID() == got.ID() || !inSet[avoided.ID()] {
			t.Fatalf("key %q attempt %d avoiding %s: got (%v, %v)", key, attempt, got.ID(), avoided, err)
		}
	})
}
