package iphash

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/stretchr/testify/assert"
)

// netipParse is the reference grammar: what net/netip accepts as an address
// or as an address and port, unmapped and without its zone.
func netipParse(s string) (addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		ap, err := netip.ParseAddrPort(s)
		if err != nil {
			return addr{}, false
		}
		a = ap.Addr()
	}
	a = a.Unmap().WithZone("")
	if a.Is4() {
		b := a.As4()
		return addr{lo: uint64(binary.BigEndian.Uint32(b[:])), is4: true}, true
	}
	b := a.As16()
	return addr{hi: binary.BigEndian.Uint64(b[:8]), lo: binary.BigEndian.Uint64(b[8:])}, true
}

func v4(a, b, c, d byte) addr {
	return addr{lo: uint64(binary.BigEndian.Uint32([]byte{a, b, c, d})), is4: true}
}

func v6(hi, lo uint64) addr { return addr{hi: hi, lo: lo} }

// parseCases are the key forms, valid and not, with the address each must
// give. They seed FuzzParseKey too.
var parseCases = []struct {
	key  string
	want addr
	ok   bool
}{
	// IPv4.
	{"192.0.2.1", v4(192, 0, 2, 1), true},
	{"0.0.0.0", v4(0, 0, 0, 0), true},
	{"255.255.255.255", v4(255, 255, 255, 255), true},
	{"192.0.2.1:8080", v4(192, 0, 2, 1), true},
	{"192.0.2.1:0", v4(192, 0, 2, 1), true},
	{"192.0.2.1:65535", v4(192, 0, 2, 1), true},
	{"192.0.2.1:0000080", v4(192, 0, 2, 1), true}, // leading zeros in a port, as strconv allows
	// IPv6.
	{"2001:db8::1", v6(0x20010db800000000, 1), true},
	{"2001:DB8::1", v6(0x20010db800000000, 1), true},
	{"::", v6(0, 0), true},
	{"::1", v6(0, 1), true},
	{"1::", v6(0x0001000000000000, 0), true},
	{"1:2:3:4:5:6:7:8", v6(0x0001000200030004, 0x0005000600070008), true},
	{"1:2:3:4:5:6::8", v6(0x0001000200030004, 0x0005000600000008), true},
	{"[2001:db8::1]:443", v6(0x20010db800000000, 1), true},
	{"[::1]:0", v6(0, 1), true},
	{"64:ff9b::192.0.2.1", v6(0x0064ff9b00000000, 0xc0000201), true},
	{"1:2:3:4:5:6:1.2.3.4", v6(0x0001000200030004, 0x0005000601020304), true},
	{"::1.2.3.4", v6(0, 0x01020304), true}, // IPv4-compatible, deprecated: stays IPv6
	// An unbracketed IPv6 address swallows what looks like a port.
	{"::1:80", v6(0, 0x00010080), true},
	{"2001:db8::1:443", v6(0x20010db800000000, 0x0000000000010443), true},
	// IPv4-mapped IPv6 folds into IPv4.
	{"::ffff:192.0.2.1", v4(192, 0, 2, 1), true},
	{"::FFFF:c000:0201", v4(192, 0, 2, 1), true},
	{"[::ffff:192.0.2.1]:8080", v4(192, 0, 2, 1), true},
	{"0:0:0:0:0:ffff:192.0.2.1", v4(192, 0, 2, 1), true},
	// Zones are accepted and dropped.
	{"fe80::1%eth0", v6(0xfe80000000000000, 1), true},
	{"[fe80::1%eth0]:80", v6(0xfe80000000000000, 1), true},
	{"fe80::1%a:b]%", v6(0xfe80000000000000, 1), true}, // a zone may hold anything
	{"::ffff:192.0.2.1%3", v4(192, 0, 2, 1), true},

	// Not addresses.
	{"abc", addr{}, false},
	{"localhost:80", addr{}, false},
	{"1.2.3", addr{}, false},
	{"1.2.3.4.5", addr{}, false},
	{"1.2.3.", addr{}, false},
	{".1.2.3", addr{}, false},
	{"1..2.3", addr{}, false},
	{"256.1.1.1", addr{}, false},
	{"1.2.3.1000", addr{}, false},
	{"01.2.3.4", addr{}, false}, // leading zero: octal to some parsers
	{" 1.2.3.4", addr{}, false},
	{"1.2.3.4 ", addr{}, false},
	{"1.2.3.4%eth0", addr{}, false},
	{"1.2.3.4:", addr{}, false},
	{":80", addr{}, false},
	{":", addr{}, false},
	{"1.2.3.4:notaport", addr{}, false},
	{"1.2.3.4:65536", addr{}, false},
	{"1.2.3.4:99999", addr{}, false},
	{"1.2.3.4:+80", addr{}, false},
	{"1.2.3.4:8_0", addr{}, false},
	{"1.2.3.4:80:80", addr{}, false},
	{"[::1", addr{}, false},
	{"[::1]", addr{}, false},
	{"[::1]:", addr{}, false},
	{"[::1]80", addr{}, false},
	{"[]:80", addr{}, false},
	{"[1.2.3.4]:80", addr{}, false}, // brackets are for IPv6 only
	{"::1]:80", addr{}, false},
	{"fe80::1%", addr{}, false},
	{"%eth0", addr{}, false},
	{"[%eth0]:80", addr{}, false},
	{"1:2:3:4:5:6:7:8:9", addr{}, false},
	{"1:2:3:4:5:6:7", addr{}, false},
	{"1:2:3:4:5:6:7::8", addr{}, false}, // "::" must stand for a group
	{"1::2::3", addr{}, false},
	{"12345::1", addr{}, false},
	{"1:2:3:4:5:6:7:1.2.3.4", addr{}, false},
	{"1.2.3.4::", addr{}, false},
	{"::1.2.3", addr{}, false},
	{"::g", addr{}, false},
	{":1", addr{}, false},
	{"1:", addr{}, false},
	{"2001:db8::1:notaport", addr{}, false},
}

func TestParseKey(t *testing.T) {
	for _, tt := range parseCases {
		t.Run(tt.key, func(t *testing.T) {
			got, ok := parseKey(tt.key)
			assert.Equal(t, tt.ok, ok)
			assert.Equal(t, tt.want, got)
			// The table itself agrees with net/netip.
			ref, refOK := netipParse(tt.key)
			assert.Equal(t, refOK, ok, "net/netip disagrees")
			assert.Equal(t, ref, got, "net/netip disagrees")
		})
	}
}

func TestParseKeyAllocs(t *testing.T) {
	for _, tt := range parseCases {
		assert.Zero(t, testing.AllocsPerRun(100, func() { parseKey(tt.key) }), tt.key)
	}
}

// FuzzParseKey checks that parseKey accepts exactly what net/netip accepts,
// and gives the same address.
func FuzzParseKey(f *testing.F) {
	for _, tt := range parseCases {
		f.Add(tt.key)
	}
	f.Fuzz(func(t *testing.T, key string) {
		got, ok := parseKey(key)
		want, wantOK := netipParse(key)
		if ok != wantOK || got != want {
			t.Fatalf("parseKey(%q) = %+v, %v; net/netip gives %+v, %v", key, got, ok, want, wantOK)
		}
	})
}

// sum4 is xxhash64 of 4 bytes, written out: it must agree with the library
// on every input, or every IPv4 mapping would change.
func TestSum4MatchesXXHash(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	for i := range 100000 {
		v := r.Uint32()
		if i < 3 {
			v = []uint32{0, 0xffffffff, 0xc0000201}[i]
		}
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], v)
		if got, want := sum4(v), xxhash.Sum64(b[:]); got != want {
			t.Fatalf("sum4(%#x) = %#x, xxhash.Sum64 = %#x", v, got, want)
		}
	}
}

// sum16 is xxhash64 of 16 bytes, written out: it must agree with the
// library on every input, or every IPv6 mapping would change.
func TestSum16MatchesXXHash(t *testing.T) {
	r := rand.New(rand.NewPCG(16, 16))
	for i := range 100000 {
		hi, lo := r.Uint64(), r.Uint64()
		if i < 3 {
			hi, lo = []uint64{0, ^uint64(0), 0x20010db800000000}[i], []uint64{0, ^uint64(0), 1}[i]
		}
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], hi)
		binary.BigEndian.PutUint64(b[8:], lo)
		if got, want := sum16(hi, lo), xxhash.Sum64(b[:]); got != want {
			t.Fatalf("sum16(%#x, %#x) = %#x, xxhash.Sum64 = %#x", hi, lo, got, want)
		}
	}
}

// The IPv4 fast path gives the general path's hash for every key it takes,
// and takes none the general path refuses.
func TestFastPathMatches(t *testing.T) {
	for _, bits := range []int{32, 24, 16} {
		p := New(WithPrefixBits(bits, 64))
		for _, key := range []string{
			"192.0.2.1", "192.0.2.1:80", "192.0.2.1:65535", "255.255.255.255:0", "0.0.0.0",
			"192.0.2.1:", "192.0.2.1:65536", "192.0.2.1:x", "192.0.2.01", "1.2.3", "1.2.3.4.5",
			"1:2::3", "1.2.3.4%eth0", "::ffff:192.0.2.1", "[::ffff:192.0.2.1]:80", "",
		} {
			got, gok := p.hash(key)
			want, wok := p.hashSlow(key)
			assert.Equal(t, wok, gok, "%q /%d", key, bits)
			assert.Equal(t, want, got, "%q /%d", key, bits)
		}
	}
}

func TestDivisor(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 5))
	ds := []uint64{1, 2, 3, 4, 5, 7, 8, 10, 64, 1000, 1024, 1 << 32, 1<<32 + 1, 1<<63 - 1, 1 << 63, ^uint64(0), 1_000_000 * 1024}
	for range 200 {
		ds = append(ds, 1+r.Uint64N(1<<20), r.Uint64()|1)
	}
	for _, d := range ds {
		v := newDivisor(d)
		for i := range 2000 {
			h := r.Uint64()
			switch i {
			case 0:
				h = 0
			case 1:
				h = ^uint64(0)
			case 2:
				h = d - 1
			case 3:
				h = d
			}
			if got, want := v.mod(h), h%d; got != want {
				t.Fatalf("%d mod %d = %d, want %d", h, d, got, want)
			}
		}
	}
}

func FuzzDivisor(f *testing.F) {
	f.Add(uint64(12345), uint64(7))
	f.Add(^uint64(0), uint64(3))
	f.Fuzz(func(t *testing.T, h, d uint64) {
		if d == 0 {
			return
		}
		if got, want := newDivisor(d).mod(h), h%d; got != want {
			t.Fatalf("%d mod %d = %d, want %d", h, d, got, want)
		}
	})
}
