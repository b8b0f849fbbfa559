package balancer

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// CanonicalAddr returns the network address addr ("host:port") spelled the
// one way lbkit spells it, so that two spellings of one address are not
// taken for two backends: 127.0.0.1:080 is 127.0.0.1:80, [0:0::1]:80 is
// [::1]:80. Use it where addresses arrive as text (flags, configuration
// files, a resolver that answers in text) before they become Endpoint IDs,
// or use CanonicalAddrs, which also refuses aliases.
//
// The port is written in decimal without leading zeros, and must be from 1
// to 65535. An IP host is written as net/netip writes it: IPv4 dotted,
// IPv6 compressed, in lower case and in brackets, an IPv4-mapped IPv6
// address as the IPv4 address it maps (a dual-stack socket dialling
// [::ffff:10.0.0.1] reaches 10.0.0.1), an IPv6 zone kept as given. Any
// other host is a name, lower-cased (DNS names are case-insensitive, RFC
// 4343); a trailing dot is kept, since with a resolver's search list
// "api" and "api." can be two hosts. A name whose last label is a number
// as inet_aton reads one, all digits or 0x and hexadecimal digits
// ("127.0.0.01", "2130706433", "0x7f.0.0.1", "127.1", "0x7f000001",
// "127.0.0.0x1"), is refused, not rewritten: no DNS name ends so (RFC
// 3696 section 2), and the C resolver (getaddrinfo, inet_aton) reads such
// hosts as IPv4 addresses in octal, hexadecimal or fewer than four parts
// while Go's resolver looks them up as names, so each would be an alias
// that only some processes see. Two names for one
// server ("localhost" and "127.0.0.1") cannot be told apart without a
// lookup, and are not.
//
// The error wraps ErrBadAddr and names addr. The netip form is the one
// netip.AddrPort.String writes, so an address built from a netip.Addr
// (as lbhttp's Refresher builds its IDs) is canonical already.
//
// Cost: one parse, and for a name one lower-cased copy; not for the Pick
// path.
func CanonicalAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return "", fmt.Errorf("%w %q: not host:port", ErrBadAddr, addr)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return "", fmt.Errorf("%w %q: port %q is not a number from 1 to 65535", ErrBadAddr, addr, port)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return netip.AddrPortFrom(ip.Unmap(), uint16(p)).String(), nil
	}
	if strings.Contains(host, ":") {
		return "", fmt.Errorf("%w %q: host %q is not an IPv6 address", ErrBadAddr, addr, host)
	}
	if name := strings.TrimSuffix(host, "."); numeric(name[strings.LastIndexByte(name, '.')+1:]) {
		return "", fmt.Errorf("%w %q: host %q is neither an IPv4 address (four decimal numbers from 0 to 255, without leading zeros) nor a name", ErrBadAddr, addr, host)
	}
	return net.JoinHostPort(lowerASCII(host), strconv.FormatUint(p, 10)), nil
}

// CanonicalAddrs returns CanonicalAddr of each address, in order. It
// refuses a set in which two addresses are one: the error wraps
// ErrDuplicateID and names both, as given, with their positions and the
// address they both are. Any other error is CanonicalAddr's, with the
// position of the address at fault.
//
//	ids, err := balancer.CanonicalAddrs([]string{"127.0.0.1:80", "127.0.0.1:080"})
//	// err: balancer: duplicate backend ID: "127.0.0.1:80" at position 0 and
//	//      "127.0.0.1:080" at position 1 are both 127.0.0.1:80
//
// Cost: O(n), a map of n and a slice of n.
func CanonicalAddrs(addrs []string) ([]string, error) {
	ids := make([]string, len(addrs))
	seen := make(map[string]int, len(addrs))
	for i, a := range addrs {
		id, err := CanonicalAddr(a)
		if err != nil {
			return nil, fmt.Errorf("%w (at position %d)", err, i)
		}
		if j, dup := seen[id]; dup {
			if addrs[j] == a {
				return nil, fmt.Errorf("%w %q at positions %d and %d", ErrDuplicateID, a, j, i)
			}
			return nil, fmt.Errorf("%w: %q at position %d and %q at position %d are both %s", ErrDuplicateID, addrs[j], j, a, i, id)
		}
		seen[id] = i
		ids[i] = id
	}
	return ids, nil
}

// numeric reports whether s is a number as inet_aton reads one: decimal
// or octal digits, or 0x (or 0X) and hexadecimal digits, none included.
func numeric(s string) bool {
	if len(s) >= 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') {
		for i := 2; i < len(s); i++ {
			if c := s[i] | 0x20; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
		return true
	}
	return allDigits(s)
}

// allDigits reports whether s is not empty and holds only ASCII digits.
func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// lowerASCII lower-cases the ASCII letters of s, and only those: DNS
// compares names case-insensitively in ASCII alone (RFC 4343).
func lowerASCII(s string) string {
	for i := range len(s) {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}
