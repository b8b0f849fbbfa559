package iphash

import "strings"

// addr is a parsed client address in its canonical form: for IPv4 (and
// IPv4-mapped IPv6, which is folded into IPv4) the address is in the low 32
// bits of lo and hi is 0; for IPv6 hi and lo are the big-endian halves of the
// 16 bytes. The zone and the port are dropped.
type addr struct {
	hi, lo uint64
	is4    bool
}

// parseKey parses a client address without allocating. It accepts exactly
// the strings that net/netip.ParseAddr or net/netip.ParseAddrPort accept
// (TestParseKey and FuzzParseKey check this against net/netip itself):
//
//	192.0.2.1                IPv4, dotted decimal, no leading zeros
//	192.0.2.1:8080           IPv4 and port
//	2001:db8::1              IPv6, also with an embedded IPv4 tail (::ffff:192.0.2.1)
//	[2001:db8::1]:8080       IPv6 in brackets and port
//	fe80::1%eth0             IPv6 with a zone, bare or in brackets
//
// A port is 1 to any number of decimal digits with a value of at most
// 65535. As in net/netip, an unbracketed IPv6 address followed by ":port"
// reads as one longer address ("2001:db8::1:443" is 2001:db8::1:443), or
// fails to parse; only brackets separate an IPv6 address from a port.
//
// net/netip is not used because it allocates on every failure (its errors
// quote the input) and, for a zone, on first sight of the zone, and because
// trying ParseAddr and then ParseAddrPort would make "ip:port", the most
// common form of a remote address, pay for a failed parse first.
func parseKey(s string) (addr, bool) {
	if len(s) > 0 && s[0] == '[' {
		// "[ipv6]:port": the port follows the last colon, and the part
		// before it must be a bracketed IPv6 address (an IPv4 address in
		// brackets is refused, as net/netip does).
		host, ok := cutPort(s)
		if !ok || len(host) < 2 || host[len(host)-1] != ']' {
			return addr{}, false
		}
		return parseIPv6(host[1 : len(host)-1])
	}
	// Like net/netip.ParseAddr, tell the families apart by the first '.',
	// ':' or '%'.
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '.':
			// "a.b.c.d" or "a.b.c.d:port", in one pass: the address
			// ends at the first byte that is neither digit nor dot,
			// and only a colon and a port may follow it.
			v4, n, ok := parseIPv4(s)
			if !ok || (n < len(s) && (s[n] != ':' || !validPort(s[n+1:]))) {
				return addr{}, false
			}
			return addr{lo: uint64(v4), is4: true}, true
		case ':':
			// A bare IPv6 address. "ip:port" cannot start this way: its
			// IP would have to be IPv4, whose first separator is a dot.
			return parseIPv6(s)
		case '%':
			return addr{}, false // a zone with no address before it
		}
	}
	return addr{}, false
}

// cutPort splits "host:port" at the last colon, as net/netip does, and
// reports whether there is a host and a valid port.
func cutPort(s string) (host string, ok bool) {
	i := len(s) - 1
	for i >= 0 && s[i] != ':' {
		i--
	}
	if i <= 0 || !validPort(s[i+1:]) {
		return "", false
	}
	return s[:i], true
}

// validPort reports whether s is a port: one or more decimal digits, at
// most 65535, leading zeros allowed (the grammar of
// strconv.ParseUint(s, 10, 16), which net/netip.ParseAddrPort uses).
func validPort(s string) bool {
	port := 0
	for i := 0; i < len(s); i++ {
		d := s[i] - '0'
		if d > 9 {
			return false
		}
		if port = port*10 + int(d); port > 0xffff {
			return false
		}
	}
	return len(s) > 0
}

// parseIPv4 parses the dotted-decimal IPv4 address "a.b.c.d" at the start
// of s: four fields of one to three digits, each at most 255, without
// leading zeros (which some parsers read as octal; net/netip refuses them,
// and so do we). It returns the address and how many bytes it took, which
// end after the fourth field's digits: the caller decides what may follow
// (nothing, or ":port").
//
// It reads each field as up to three digits in straight-line code rather
// than a loop over bytes that tests every byte for a digit, a dot and the
// field count, which a throwaway benchmark beside BenchmarkVsJump found
// the slower on addresses like "198.51.3.17"; BenchmarkParse measures
// this one. Parsing is most of an IPv4 Pick.
func parseIPv4(s string) (v4 uint32, n int, ok bool) {
	for f := 0; f < 4; f++ {
		if f > 0 {
			if n >= len(s) || s[n] != '.' {
				return 0, 0, false
			}
			n++
		}
		if n >= len(s) {
			return 0, 0, false
		}
		val := uint32(s[n]) - '0'
		if val > 9 {
			return 0, 0, false
		}
		n++
		if n < len(s) {
			if d := uint32(s[n]) - '0'; d <= 9 {
				if val == 0 {
					return 0, 0, false // leading zero
				}
				val = val*10 + d
				n++
				if n < len(s) {
					if d := uint32(s[n]) - '0'; d <= 9 {
						val = val*10 + d
						n++
					}
				}
			}
		}
		if val > 255 {
			return 0, 0, false
		}
		v4 = v4<<8 | val
	}
	return v4, n, true
}

// parseIPv6 parses an IPv6 address in RFC 4291 text form, with an optional
// "%zone" suffix, which must not be empty and is then ignored: a zone names
// the local interface the address was seen on, not the client, so
// fe80::1%eth0 and fe80::1%eth1 hash alike. An IPv4-mapped address
// (::ffff:a.b.c.d) is returned as IPv4. It follows net/netip's parseIPv6 step
// for step, so that both accept the same strings.
//
// The groups are shifted into a 128-bit register (hi, lo) as they are read,
// rather than written into a 16-byte array that is expanded at the "::" and
// read back as two words: the groups after a "::" end up right-aligned, the
// ones before it are kept aside and shifted into place once at the end.
// BenchmarkParse measures it (form=v6, v6port, v4mapped, v6zone).
func parseIPv6(s string) (addr, bool) {
	if i := strings.IndexByte(s, '%'); i >= 0 {
		if i == len(s)-1 {
			return addr{}, false // empty zone
		}
		s = s[:i]
	}

	var hi, lo uint64       // the groups read so far, right-aligned
	var preHi, preLo uint64 // the groups before the "::", right-aligned
	ellipsis := -1          // byte position of "::" in the address, if any
	if len(s) >= 2 && s[0] == ':' && s[1] == ':' {
		ellipsis = 0
		s = s[2:]
		if len(s) == 0 {
			return addr{}, true // "::"
		}
	}

	i := 0 // bytes of the address filled
	for i < 16 {
		// One group of 1 to 4 hex digits.
		off, acc := 0, uint64(0)
	digits:
		for ; off < len(s); off++ {
			c := s[off]
			d := c - '0'
			if d > 9 {
				// c|0x20 folds 'A'-'F' onto 'a'-'f'.
				if d = (c | 0x20) - 'a'; d > 5 {
					break digits
				}
				d += 10
			}
			acc = acc<<4 | uint64(d)
			if off > 3 {
				return addr{}, false // a fifth digit
			}
		}
		if off == 0 {
			return addr{}, false
		}
		if off < len(s) && s[off] == '.' {
			// An embedded IPv4 tail: it fills the last 4 bytes, so it
			// must come at byte 12 or after a "::" that leaves room.
			if (ellipsis < 0 && i != 12) || i+4 > 16 {
				return addr{}, false
			}
			v4, n, ok := parseIPv4(s)
			if !ok || n != len(s) {
				return addr{}, false
			}
			hi, lo = hi<<32|lo>>32, lo<<32|uint64(v4)
			s = ""
			i += 4
			break
		}
		hi, lo = hi<<16|lo>>48, lo<<16|acc
		i += 2
		s = s[off:]
		if len(s) == 0 {
			break
		}
		// A colon and more must follow; a second colon is the ellipsis.
		if s[0] != ':' || len(s) == 1 {
			return addr{}, false
		}
		s = s[1:]
		if s[0] == ':' {
			if ellipsis >= 0 {
				return addr{}, false // a second "::"
			}
			ellipsis = i
			preHi, preLo, hi, lo = hi, lo, 0, 0
			if s = s[1:]; len(s) == 0 {
				break // "::" at the end
			}
		}
	}
	if len(s) != 0 {
		return addr{}, false // trailing characters after 8 groups
	}
	if i < 16 {
		// The "::" stands for the missing groups: move the groups
		// before it to the top, 16 − ellipsis bytes up.
		if ellipsis < 0 {
			return addr{}, false
		}
		if sh := uint(16-ellipsis) * 8; sh >= 64 {
			preHi, preLo = preLo<<(sh-64), 0
		} else {
			preHi, preLo = preHi<<sh|preLo>>(64-sh), preLo<<sh
		}
		hi, lo = hi|preHi, lo|preLo
	} else if ellipsis >= 0 {
		return addr{}, false // "::" must stand for at least one group
	}

	a := addr{hi: hi, lo: lo}
	if a.hi == 0 && a.lo>>32 == 0xffff {
		// ::ffff:a.b.c.d is an IPv4 client seen through a dual-stack
		// socket: fold it into the IPv4 address so that it maps alike.
		return addr{lo: a.lo & 0xffffffff, is4: true}, true
	}
	return a, true
}
