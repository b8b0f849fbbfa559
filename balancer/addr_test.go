package balancer_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
)

func TestCanonicalAddr(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"127.0.0.1:80", "127.0.0.1:80"},
		{"127.0.0.1:080", "127.0.0.1:80"},
		{"127.0.0.1:00080", "127.0.0.1:80"},
		{"[127.0.0.1]:80", "127.0.0.1:80"},
		{"[::1]:80", "[::1]:80"},
		{"[0:0::1]:80", "[::1]:80"},
		{"[0000:0000:0000:0000:0000:0000:0000:0001]:80", "[::1]:80"},
		{"[2001:DB8::A]:443", "[2001:db8::a]:443"},
		{"[::ffff:10.0.0.1]:80", "10.0.0.1:80"},
		{"[::ffff:a00:1]:80", "10.0.0.1:80"},
		{"[fe80::1%eth0]:80", "[fe80::1%eth0]:80"},
		{"api.internal:8080", "api.internal:8080"},
		{"API.Internal:08080", "api.internal:8080"},
		{"api.internal.:80", "api.internal.:80"},
		{"a:1", "a:1"},
		{"localhost:65535", "localhost:65535"},
		{"x-1.example:80", "x-1.example:80"},
		{"1a.example:80", "1a.example:80"},
		{"0x.example:80", "0x.example:80"},
		{"api.0xg:80", "api.0xg:80"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := balancer.CanonicalAddr(tt.in)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
			again, err := balancer.CanonicalAddr(got)
			require.NoError(t, err)
			assert.Equal(t, got, again, "canonical twice is canonical once")
		})
	}
}

func TestCanonicalAddrErrors(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"10.0.0.1", `balancer: bad address "10.0.0.1": not host:port`},
		{":80", `balancer: bad address ":80": not host:port`},
		{"", `balancer: bad address "": not host:port`},
		{"::1:80", `balancer: bad address "::1:80": not host:port`},
		{"10.0.0.1:http", `port "http" is not a number from 1 to 65535`},
		{"10.0.0.1:0", `port "0" is not a number from 1 to 65535`},
		{"10.0.0.1:65536", `port "65536" is not a number from 1 to 65535`},
		{"10.0.0.1:-1", `port "-1" is not a number from 1 to 65535`},
		{"10.0.0.1:+80", `port "+80" is not a number from 1 to 65535`},
		{"[::g]:80", `host "::g" is not an IPv6 address`},
		{"[::1%]:80", `host "::1%" is not an IPv6 address`},
		// What the C resolver reads as 127.0.0.1: octal, one number, hex, three parts.
		{"127.0.0.01:80", `host "127.0.0.01" is neither an IPv4 address`},
		{"2130706433:80", `host "2130706433" is neither an IPv4 address`},
		{"0x7f.0.0.1:80", `host "0x7f.0.0.1" is neither an IPv4 address`},
		{"127.1:80", `host "127.1" is neither an IPv4 address`},
		{"127.0.0.1.:80", `host "127.0.0.1." is neither an IPv4 address`},
		{"256.0.0.1:80", `host "256.0.0.1" is neither an IPv4 address`},
		// Hexadecimal, which the C resolver reads too: one number, or a last part.
		{"0x7f000001:80", `host "0x7f000001" is neither an IPv4 address`},
		{"0X7F000001:80", `host "0X7F000001" is neither an IPv4 address`},
		{"127.0.0.0x1:80", `host "127.0.0.0x1" is neither an IPv4 address`},
		{"127.0x1:80", `host "127.0x1" is neither an IPv4 address`},
		{"0x7f.1.:80", `host "0x7f.1." is neither an IPv4 address`},
		{"127.0.0.0x:80", `host "127.0.0.0x" is neither an IPv4 address`},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := balancer.CanonicalAddr(tt.in)
			require.ErrorIs(t, err, balancer.ErrBadAddr)
			assert.Contains(t, err.Error(), tt.want)
			assert.Empty(t, got)
		})
	}
}

// TestCanonicalAddrMatchesNetip checks that an address built from a
// netip.Addr, as lbhttp's Refresher builds its IDs, is canonical as it is.
func TestCanonicalAddrMatchesNetip(t *testing.T) {
	for _, s := range []string{"10.0.0.1", "::1", "2001:db8::1:0:0:1", "fe80::1%eth0", "::", "0.0.0.0", "::ffff:10.0.0.1"} {
		ap := netip.AddrPortFrom(netip.MustParseAddr(s).Unmap(), 8080).String()
		got, err := balancer.CanonicalAddr(ap)
		require.NoError(t, err, s)
		assert.Equal(t, ap, got, s)
	}
}

func TestCanonicalAddrs(t *testing.T) {
	ids, err := balancer.CanonicalAddrs([]string{"10.0.0.1:080", "[0:0::1]:80", "API:1"})
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.1:80", "[::1]:80", "api:1"}, ids)

	ids, err = balancer.CanonicalAddrs(nil)
	require.NoError(t, err)
	assert.Empty(t, ids)

	tests := []struct {
		name  string
		addrs []string
		is    error
		want  string
	}{
		{"port alias", []string{"127.0.0.1:80", "a:1", "127.0.0.1:080"}, balancer.ErrDuplicateID,
			`balancer: duplicate backend ID: "127.0.0.1:80" at position 0 and "127.0.0.1:080" at position 2 are both 127.0.0.1:80`},
		{"IPv6 alias", []string{"[::1]:80", "[0:0::1]:80"}, balancer.ErrDuplicateID,
			`balancer: duplicate backend ID: "[::1]:80" at position 0 and "[0:0::1]:80" at position 1 are both [::1]:80`},
		{"hexadecimal alias", []string{"127.0.0.1:80", "0x7f000001:80"}, balancer.ErrBadAddr,
			`balancer: bad address "0x7f000001:80": host "0x7f000001" is neither an IPv4 address (four decimal numbers from 0 to 255, without leading zeros) nor a name (at position 1)`},
		{"mapped alias", []string{"[::ffff:127.0.0.1]:80", "127.0.0.1:80"}, balancer.ErrDuplicateID,
			`balancer: duplicate backend ID: "[::ffff:127.0.0.1]:80" at position 0 and "127.0.0.1:80" at position 1 are both 127.0.0.1:80`},
		{"name alias", []string{"Api:80", "api:80"}, balancer.ErrDuplicateID,
			`balancer: duplicate backend ID: "Api:80" at position 0 and "api:80" at position 1 are both api:80`},
		{"same spelling", []string{"a:1", "a:1"}, balancer.ErrDuplicateID,
			`balancer: duplicate backend ID "a:1" at positions 0 and 1`},
		{"bad address", []string{"a:1", "b"}, balancer.ErrBadAddr,
			`balancer: bad address "b": not host:port (at position 1)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ids, err := balancer.CanonicalAddrs(tt.addrs)
			require.ErrorIs(t, err, tt.is)
			assert.EqualError(t, err, tt.want)
			assert.Nil(t, ids)
		})
	}
}

// FuzzCanonicalAddr checks that what CanonicalAddr returns is canonical
// (a second call returns it unchanged) and that an address it accepts and
// net/netip parses keeps its IP and port.
func FuzzCanonicalAddr(f *testing.F) {
	for _, s := range []string{"127.0.0.1:080", "[0:0::1]:80", "API.x:1", "[::ffff:1.2.3.4]:9", "1.2:3", "[fe80::1%Eth0]:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := balancer.CanonicalAddr(s)
		if err != nil {
			return
		}
		again, err := balancer.CanonicalAddr(got)
		require.NoError(t, err, "%q gave %q", s, got)
		assert.Equal(t, got, again, "%q", s)
		if ap, err := netip.ParseAddrPort(s); err == nil {
			assert.Equal(t, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String(), got, "%q", s)
		}
	})
}
