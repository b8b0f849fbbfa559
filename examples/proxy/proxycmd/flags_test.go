package proxycmd

import (
	"bytes"
	"flag"
	"io"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/lbhttp"
)

// TestParseErrors checks that each mistake gets an error naming the flag
// and saying what is accepted.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no backends", nil, "-backends or -dns is required"},
		{"both sources", []string{"-backends", "a:1", "-dns", "b:2"}, "-backends and -dns exclude each other"},
		{"unknown flag", []string{"-backend", "a:1"}, "flag provided but not defined: -backend"},
		{"stray argument", []string{"-backends", "a:1", "extra"}, `unexpected argument "extra"`},
		{"backend without port", []string{"-backends", "10.0.0.1"}, `-backends: "10.0.0.1" is not host:port`},
		{"backend without host", []string{"-backends", ":80"}, `-backends: ":80" is not host:port`},
		{"backend bad port", []string{"-backends", "10.0.0.1:http"}, `-backends: "10.0.0.1:http": port "http" is not a number from 1 to 65535`},
		{"backend port zero", []string{"-backends", "10.0.0.1:0"}, `port "0" is not a number from 1 to 65535`},
		{"backend port too big", []string{"-backends", "10.0.0.1:65536"}, `port "65536" is not a number from 1 to 65535`},
		{"empty item", []string{"-backends", "a:1,,b:2"}, `-backends: "" is not host:port`},
		{"bad weight", []string{"-backends", "a:1=x"}, `-backends: "a:1=x": weight "x" is not a whole number from 1 to 1000000`},
		{"zero weight", []string{"-backends", "a:1=0"}, `-backends: "a:1=0": weight "0" is not a whole number from 1 to 1000000`},
		{"weight too big", []string{"-backends", "a:1=1000001"}, `weight "1000001" is not a whole number`},
		{"duplicate", []string{"-backends", "a:1,a:1"}, "-backends: balancer: duplicate backend ID"},
		{"octal host", []string{"-backends", "127.0.0.01:80"}, `-backends: balancer: bad address "127.0.0.01:80": host "127.0.0.01" is neither an IPv4 address`},
		{"bad IPv6 host", []string{"-backends", "[::g]:80"}, `-backends: balancer: bad address "[::g]:80": host "::g" is not an IPv6 address`},
		{"bad dns", []string{"-dns", "api.internal"}, `-dns: "api.internal" is not host:port`},
		{"bad dns port", []string{"-dns", "api.internal:x"}, `-dns: "api.internal:x": port "x" is not a number`},
		{"bad dns interval", []string{"-dns", "api.internal:80", "-dns-interval", "0s"}, "-dns-interval: 0s is below the minimum of 1s"},
		{"dns interval too short", []string{"-dns", "api.internal:80", "-dns-interval", "1ms"}, "-dns-interval: 1ms is below the minimum of 1s"},
		{"unknown algo", []string{"-backends", "a:1", "-algo", "random"}, `-algo: unknown algorithm "random"; one of rr, wrr, leastconn`},
		{"bad key", []string{"-backends", "a:1", "-key", "query:x"}, `-key: "query:x" is not ip, header:NAME or cookie:NAME`},
		{"key without name", []string{"-backends", "a:1", "-key", "header:"}, `-key: "header:" is not ip`},
		{"iphash with header key", []string{"-backends", "a:1", "-algo", "iphash", "-key", "header:X-User"}, "iphash hashes client addresses"},
		{"bad trusted", []string{"-backends", "a:1", "-trusted-proxies", "10.0.0.0/8,corp"}, `-trusted-proxies: "corp" is neither an address nor a CIDR prefix`},
		{"bad cidr", []string{"-backends", "a:1", "-trusted-proxies", "10.0.0.0/33"}, `-trusted-proxies: "10.0.0.0/33" is not a CIDR prefix`},
		{"bad health path", []string{"-backends", "a:1", "-health-path", "healthz"}, `-health-path: "healthz" does not start with /`},
		{"bad health interval", []string{"-backends", "a:1", "-health-interval", "0s"}, "-health-interval: 0s is below the minimum"},
		{"bad duration", []string{"-backends", "a:1", "-health-interval", "5"}, `invalid value "5" for flag -health-interval`},
		{"bad attempts", []string{"-backends", "a:1", "-max-attempts", "0"}, "-max-attempts: 0 is below 1"},
		{"negative attempt timeout", []string{"-backends", "a:1", "-attempt-timeout", "-1s"}, "-attempt-timeout: -1s is negative; 0 turns it off"},
		{"negative request timeout", []string{"-backends", "a:1", "-request-timeout", "-1s"}, "-request-timeout: -1s is negative; 0 turns it off"},
		{"negative idle timeout", []string{"-backends", "a:1", "-idle-timeout", "-5ms"}, "-idle-timeout: -5ms is negative; 0 turns it off"},
		{"negative hold", []string{"-backends", "a:1", "-hold-bytes", "-1"}, "-hold-bytes: -1 is negative; 0 turns it off"},
		{"hold too large", []string{"-backends", "a:1", "-hold-bytes", "16777217"}, "-hold-bytes: 16777217 is above 16777216"},
		{"negative budget", []string{"-backends", "a:1", "-retry-budget", "-0.1"}, "-retry-budget: -0.1 is not a share of 0 (no budget) or more"},
		{"budget without a minimum", []string{"-backends", "a:1", "-retry-budget-min", "0"}, "-retry-budget-min: 0 is not a positive rate"},
		{"negative hedge delay", []string{"-backends", "a:1", "-hedge-after", "-1ms"}, "-hedge-after: -1ms is negative; 0 turns hedging off"},
		{"hedge percentile 100", []string{"-backends", "a:1", "-hedge-percentile", "100"}, "-hedge-percentile: 100 is not between 0 (off) and 100"},
		{"route header with a space", []string{"-backends", "a:1", "-route-header", "X Canary"}, `-route-header: "X Canary" is not a token`},
		{"sticky cookie with =", []string{"-backends", "a:1", "-sticky-cookie", "a=b"}, `-sticky-cookie: "a=b" is not a token`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			c, err := NewFlags("p").Parse(tt.args, &stderr)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			assert.Zero(t, c.Algorithm.Name, "no half-filled Config")
			assert.Empty(t, stderr.String(), "Parse prints only the usage, on -h")
		})
	}
}

// TestParse checks that every flag lands in its Config field, and the
// defaults when a flag is left out.
func TestParse(t *testing.T) {
	c, err := NewFlags("p").Parse([]string{
		"-listen", "[::1]:9000", "-backends", " 10.0.0.1:80 ,host.internal:81=7",
		"-algo", "ring", "-key", "header:X-User", "-trusted-proxies", "10.1.2.3/8, 192.0.2.1,2001:db8::1",
		"-health-path", "/healthz", "-health-interval", "2s", "-max-attempts", "1",
		"-attempt-timeout", "2s", "-request-timeout", "0", "-idle-timeout", "30s", "-hold-bytes", "4096",
		"-retry-budget", "0.1", "-retry-budget-min", "2", "-hedge-percentile", "95", "-hedge-after", "5ms", "-h2c",
		"-route-header", "X-Canary", "-sticky-cookie", "srv",
	}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "[::1]:9000", c.Listen)
	assert.Equal(t, balancer.WeightedEndpoints(
		balancer.Weighted{Addr: "10.0.0.1:80", Weight: 1}, balancer.Weighted{Addr: "host.internal:81", Weight: 7},
	), c.Backends)
	assert.Empty(t, c.DNSHost)
	assert.Equal(t, "ring", c.Algorithm.Name)
	assert.Equal(t, "header:X-User", c.Key)
	assert.Equal(t, []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.1/32"), netip.MustParsePrefix("2001:db8::1/128"),
	}, c.TrustedProxies)
	assert.Equal(t, "/healthz", c.HealthPath)
	assert.Equal(t, 2*time.Second, c.HealthInterval)
	assert.Equal(t, 1, c.MaxAttempts)
	assert.Equal(t, 2*time.Second, c.AttemptTimeout)
	assert.Negative(t, c.RequestTimeout, "0 turns it off: negative for lbhttp")
	assert.Equal(t, 30*time.Second, c.IdleTimeout)
	assert.Equal(t, 4096, c.HoldBytes)
	assert.Equal(t, 0.1, c.RetryBudget)
	assert.Equal(t, 2.0, c.RetryBudgetMin)
	assert.False(t, c.NoBudget)
	assert.Equal(t, 95.0, c.HedgePercentile)
	assert.Equal(t, 5*time.Millisecond, c.HedgeAfter)
	assert.True(t, c.H2C)
	assert.Equal(t, "X-Canary", c.RouteHeader)
	assert.Equal(t, "srv", c.StickyCookie)

	c, err = NewFlags("p").Parse([]string{"-backends", "a:1", "-retry-budget", "0", "-attempt-timeout", "0", "-hold-bytes", "0"}, io.Discard)
	require.NoError(t, err)
	assert.True(t, c.NoBudget)
	assert.Negative(t, c.AttemptTimeout)
	assert.Negative(t, c.HoldBytes, "0 turns it off: negative for lbhttp")

	c, err = NewFlags("p").Parse([]string{"-dns", "api.internal:8080"}, io.Discard)
	require.NoError(t, err)
	assert.Nil(t, c.Backends)
	assert.Equal(t, "api.internal", c.DNSHost)
	assert.Equal(t, uint16(8080), c.DNSPort)
	assert.Equal(t, lbhttp.DefaultRefreshInterval, c.DNSInterval)
	assert.Equal(t, DefaultListen, c.Listen)
	assert.Equal(t, "leastconn", c.Algorithm.Name)
	assert.Equal(t, "ip", c.Key)
	assert.Nil(t, c.TrustedProxies)
	assert.Empty(t, c.HealthPath)
	assert.Equal(t, health.DefaultInterval, c.HealthInterval)
	assert.Equal(t, lbhttp.DefaultMaxAttempts, c.MaxAttempts)
	// Timeouts and the budget are on by default, hedging off.
	assert.Equal(t, lbhttp.DefaultAttemptTimeout, c.AttemptTimeout)
	assert.Equal(t, lbhttp.DefaultRequestTimeout, c.RequestTimeout)
	assert.Equal(t, lbhttp.DefaultIdleTimeout, c.IdleTimeout)
	assert.Equal(t, lbhttp.DefaultHoldBytes, c.HoldBytes)
	assert.Equal(t, lbhttp.DefaultBudgetRatio, c.RetryBudget)
	assert.Equal(t, float64(lbhttp.DefaultBudgetMinPerSecond), c.RetryBudgetMin)
	assert.False(t, c.NoBudget)
	assert.Zero(t, c.HedgeAfter)
	assert.Zero(t, c.HedgePercentile)
	assert.False(t, c.H2C, "HTTP/1.1 to the backends by default")
}

// TestEveryAlgorithmAccepted checks that -algo takes every name the bench
// lists, so the commands never lag behind the library.
func TestEveryAlgorithmAccepted(t *testing.T) {
	for _, a := range catalog.Algorithms() {
		c, err := NewFlags("p").Parse([]string{"-backends", "127.0.0.1:1=2,127.0.0.1:2", "-algo", a.Name}, io.Discard)
		require.NoError(t, err, a.Name)
		assert.Equal(t, a.Name, c.Algorithm.Name)
		assert.Len(t, c.Backends, 2)
		assert.NotNil(t, c.Algorithm.New(), a.Name)
	}
}

// TestOwnFlags checks that a command's own flag is parsed with lbkit's,
// listed in the usage, and that -h prints the usage with the command's name.
func TestOwnFlags(t *testing.T) {
	f := NewFlags("myproxy")
	admin := f.FlagSet.String("admin-listen", "127.0.0.1:9000", "`address` of the admin page")
	_, err := f.Parse([]string{"-admin-listen", "127.0.0.1:1", "-backends", "a:1"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1:1", *admin)

	var stderr bytes.Buffer
	_, err = NewFlags("myproxy").Parse([]string{"-admin-listen", "x"}, &stderr)
	assert.EqualError(t, err, "flag provided but not defined: -admin-listen", "another Flags does not have it")
	assert.Empty(t, stderr.String())

	f = NewFlags("myproxy")
	f.FlagSet.String("admin-listen", "", "`address` of the admin page")
	_, err = f.Parse([]string{"-h"}, &stderr)
	require.ErrorIs(t, err, flag.ErrHelp)
	for _, want := range []string{"Usage: myproxy -backends", "or: myproxy -dns", "-admin-listen address", "-trusted-proxies", "-max-attempts"} {
		assert.Contains(t, stderr.String(), want)
	}
}

// TestKeyFunc checks the keys -key gives: the client address by default,
// from X-Forwarded-For only behind a trusted proxy, and a header or cookie
// falling back to the address.
func TestKeyFunc(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	tests := []struct {
		key, remote, xff, header, cookie string
		want                             string
	}{
		{key: "ip", remote: "192.0.2.7:1234", want: "192.0.2.7"},
		{key: "ip", remote: "192.0.2.7:1234", xff: "198.51.100.1", want: "192.0.2.7"},
		{key: "ip", remote: "10.0.0.1:1234", xff: "198.51.100.1", want: "198.51.100.1"},
		{key: "header:X-User", remote: "192.0.2.7:1234", header: "u42", want: "u42"},
		{key: "header:X-User", remote: "192.0.2.7:1234", want: "192.0.2.7"},
		{key: "cookie:sid", remote: "192.0.2.7:1234", cookie: "s1", want: "s1"},
		{key: "cookie:sid", remote: "10.0.0.1:1234", xff: "198.51.100.1", want: "198.51.100.1"},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tt.remote
		if tt.xff != "" {
			r.Header.Set("X-Forwarded-For", tt.xff)
		}
		if tt.header != "" {
			r.Header.Set("X-User", tt.header)
		}
		if tt.cookie != "" {
			r.Header.Set("Cookie", "sid="+tt.cookie)
		}
		c := Config{Key: tt.key, TrustedProxies: trusted}
		assert.Equal(t, tt.want, c.KeyFunc()(r), "%+v", tt)
	}
}

// TestParseAliases checks that two spellings of one address are refused as
// one backend listed twice, with both spellings named: otherwise the server
// behind them gets a double share and two health records.
func TestParseAliases(t *testing.T) {
	tests := []struct {
		name, backends string
		want           []string
	}{
		{"port with a leading zero", "127.0.0.1:80,127.0.0.1:080", []string{`"127.0.0.1:80"`, `"127.0.0.1:080"`}},
		{"IPv6 spelled long", "[::1]:80,[0:0::1]:80", []string{`"[::1]:80"`, `"[0:0::1]:80"`}},
		{"IPv6 in capitals", "[2001:db8::a]:80,[2001:DB8::A]:80", []string{`"[2001:db8::a]:80"`, `"[2001:DB8::A]:80"`}},
		{"IPv4-mapped IPv6", "10.0.0.1:80,[::ffff:10.0.0.1]:80", []string{`"10.0.0.1:80"`, `"[::ffff:10.0.0.1]:80"`}},
		{"name in capitals", "api.internal:80,API.Internal:80", []string{`"api.internal:80"`, `"API.Internal:80"`}},
		{"weights differ", "127.0.0.1:80=2,127.0.0.1:0080=3", []string{`"127.0.0.1:80"`, `"127.0.0.1:0080"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewFlags("p").Parse([]string{"-backends", tt.backends}, io.Discard)
			require.ErrorIs(t, err, balancer.ErrDuplicateID)
			for _, w := range tt.want {
				assert.Contains(t, err.Error(), w)
			}
		})
	}

	// One spelling of each is accepted, and becomes the canonical ID.
	c, err := NewFlags("p").Parse([]string{"-backends", "127.0.0.1:080,[0:0::1]:80=2,[::ffff:10.0.0.1]:81,API.Internal:82"}, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, balancer.WeightedEndpoints(
		balancer.Weighted{Addr: "127.0.0.1:80", Weight: 1}, balancer.Weighted{Addr: "[::1]:80", Weight: 2},
		balancer.Weighted{Addr: "10.0.0.1:81", Weight: 1}, balancer.Weighted{Addr: "api.internal:82", Weight: 1},
	), c.Backends)
}
