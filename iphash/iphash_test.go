package iphash_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
	"github.com/lbkit/lbkit/iphash"
)

func TestConformance(t *testing.T) {
	t.Run("whole addresses", func(t *testing.T) {
		balancertest.Run(t, func() balancer.Balancer { return iphash.New() })
	})
	t.Run("prefix", func(t *testing.T) {
		balancertest.Run(t, func() balancer.Balancer { return iphash.New(iphash.WithPrefix()) })
	})
}

// addrs returns n backend addresses, in order.
func addrs(n int) []string {
	a := make([]string, n)
	for i := range a {
		a[i] = fmt.Sprintf("10.0.%d.%d:8080", i/256, i%256)
	}
	return a
}

// newPicker returns a Picker over n unweighted backends.
func newPicker(t testing.TB, n int, opts ...iphash.Option) *iphash.Picker {
	t.Helper()
	p := iphash.New(opts...)
	require.NoError(t, p.Update(balancer.Endpoints(addrs(n)...)))
	return p
}

func pickID(t testing.TB, p *iphash.Picker, req balancer.Request) string {
	t.Helper()
	b, err := p.Pick(req)
	require.NoError(t, err, "%+v", req)
	return b.ID()
}

// sequence returns the backends of attempts 0 to k-1 for key.
func sequence(t testing.TB, p *iphash.Picker, key string, k int) []string {
	t.Helper()
	seq := make([]string, k)
	for a := range seq {
		seq[a] = pickID(t, p, balancer.Request{Key: key, Attempt: a})
	}
	return seq
}

// randomV4 returns n distinct-looking random IPv4 keys from a fixed seed.
func randomV4(n int, seed uint64) []string {
	r := rand.New(rand.NewPCG(seed, 1))
	ks := make([]string, n)
	for i := range ks {
		x := r.Uint32()
		ks[i] = fmt.Sprintf("%d.%d.%d.%d", x>>24, x>>16&255, x>>8&255, x&255)
	}
	return ks
}

// TestKeyForms checks which keys hash alike. Two keys hash alike when they
// get the same home and the same retry start among 1009 backends, which two
// different hashes do about once in a million.
func TestKeyForms(t *testing.T) {
	tests := []struct {
		name string
		opts []iphash.Option
		a, b string
		same bool
	}{
		{"v4 and v4:port", nil, "192.0.2.1", "192.0.2.1:8080", true},
		{"ports do not count", nil, "192.0.2.1:1", "192.0.2.1:65535", true},
		{"v4 and v4-mapped v6", nil, "192.0.2.1", "::ffff:192.0.2.1", true},
		{"v4 and v4-mapped v6 in hex", nil, "192.0.2.1", "::FFFF:c000:201", true},
		{"v4:port and [v4-mapped]:port", nil, "192.0.2.1:80", "[::ffff:192.0.2.1]:443", true},
		{"v6 and [v6]:port", nil, "2001:db8::1", "[2001:db8::1]:443", true},
		{"v6 long and short forms", nil, "2001:0DB8:0000:0000:0000:0000:0000:0001", "2001:db8::1", true},
		{"zones do not count", nil, "fe80::1%eth0", "[fe80::1%eth1]:80", true},
		{"zone and none", nil, "fe80::1%eth0", "fe80::1", true},
		{"distinct v4", nil, "192.0.2.1", "192.0.2.2", false},
		{"distinct v6", nil, "2001:db8::1", "2001:db8::2", false},
		{"v4 and v4-compatible v6 (not folded)", nil, "192.0.2.1", "::192.0.2.1", false},
		{"v4 and NAT64 v6 (not folded)", nil, "192.0.2.1", "64:ff9b::192.0.2.1", false},
		{"empty key is not 0.0.0.0", nil, "", "0.0.0.0", false},
		{"empty key is not ::", nil, "", "::", false},
		{"0.0.0.0 is not ::", nil, "0.0.0.0", "::", false},
		{"whole addresses: /24 not grouped", nil, "192.0.2.1", "192.0.2.200", false},

		{"prefix: same /24", []iphash.Option{iphash.WithPrefix()}, "192.0.2.1", "192.0.2.200:443", true},
		{"prefix: other /24", []iphash.Option{iphash.WithPrefix()}, "192.0.2.1", "192.0.3.1", false},
		{"prefix: v4-mapped joins its /24", []iphash.Option{iphash.WithPrefix()}, "::ffff:192.0.2.1", "192.0.2.99:80", true},
		{"prefix: same /64", []iphash.Option{iphash.WithPrefix()}, "2001:db8:1:2::1", "[2001:db8:1:2:ffff:ffff:ffff:ffff]:443", true},
		{"prefix: other /64", []iphash.Option{iphash.WithPrefix()}, "2001:db8:1:2::1", "2001:db8:1:3::1", false},
		{"bits 16/48: same /16", []iphash.Option{iphash.WithPrefixBits(16, 48)}, "10.1.2.3", "10.1.200.200", true},
		{"bits 16/48: other /16", []iphash.Option{iphash.WithPrefixBits(16, 48)}, "10.1.2.3", "10.2.2.3", false},
		{"bits 16/48: same /48", []iphash.Option{iphash.WithPrefixBits(16, 48)}, "2001:db8:1::1", "2001:db8:1:ffff::1", true},
		{"bits 16/48: other /48", []iphash.Option{iphash.WithPrefixBits(16, 48)}, "2001:db8:1::1", "2001:db8:2::1", false},
		{"bits 20: not on an octet", []iphash.Option{iphash.WithPrefixBits(20, 128)}, "10.1.0.1", "10.1.15.255", true},
		{"bits 20: next /20", []iphash.Option{iphash.WithPrefixBits(20, 128)}, "10.1.0.1", "10.1.16.0", false},
		{"bits 0: one v4 group", []iphash.Option{iphash.WithPrefixBits(0, 128)}, "1.2.3.4", "200.1.1.1", true},
		{"bits 128: whole v6", []iphash.Option{iphash.WithPrefixBits(0, 128)}, "2001:db8::1", "2001:db8::2", false},
		{"bits 0 for v6", []iphash.Option{iphash.WithPrefixBits(32, 0)}, "2001:db8::1", "fe80::1", true},
		{"bits 0: families stay apart", []iphash.Option{iphash.WithPrefixBits(0, 0)}, "1.2.3.4", "::1", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newPicker(t, 1009, tt.opts...)
			sa, sb := sequence(t, p, tt.a, 2), sequence(t, p, tt.b, 2)
			if tt.same {
				assert.Equal(t, sa, sb)
			} else {
				assert.NotEqual(t, sa, sb)
			}
		})
	}
}

// WithPrefixBits(32, 128) is the default: the same mapping.
func TestFullPrefixIsDefault(t *testing.T) {
	def, full := newPicker(t, 97), newPicker(t, 97, iphash.WithPrefixBits(32, 128))
	for i, k := range randomV4(1000, 3) {
		k6 := fmt.Sprintf("2001:db8::%x", i)
		assert.Equal(t, sequence(t, def, k, 2), sequence(t, full, k, 2), k)
		assert.Equal(t, sequence(t, def, k6, 2), sequence(t, full, k6, 2), k6)
	}
}

func TestBadKeys(t *testing.T) {
	bad := []string{
		"abc", "1.2.3", "1.2.3.4.5", "01.2.3.4", "256.0.0.1", " 192.0.2.1", "192.0.2.1\n",
		"[::1", "[::1]", "[::1]:", "[1.2.3.4]:80", "1.2.3.4:", ":80",
		"1.2.3.4:notaport", "1.2.3.4:99999", "1.2.3.4:65536", "1.2.3.4%eth0", "fe80::1%",
		"2001:db8::1:notaport", "localhost", "example.com:443", "1::2::3", "\x00",
	}
	sets := map[string][]balancer.Backend{
		"one backend": balancer.Endpoints("10.0.0.1:80"),
		"unweighted":  balancer.Endpoints(addrs(8)...),
		"weighted":    {balancer.NewEndpoint("a:80", 1), balancer.NewEndpoint("b:80", 3)},
	}
	for name, set := range sets {
		for _, opts := range [][]iphash.Option{nil, {iphash.WithPrefix()}} {
			p := iphash.New(opts...)
			require.NoError(t, p.Update(set))
			for _, k := range bad {
				t.Run(fmt.Sprintf("%s/prefix=%v/%q", name, opts != nil, k), func(t *testing.T) {
					for _, req := range []balancer.Request{{Key: k}, {Key: k, Attempt: 2, Avoid: "a:80"}} {
						b, err := p.Pick(req)
						assert.True(t, errors.Is(err, balancer.ErrBadKey), "err = %v", err)
						assert.Nil(t, b)
						require.Error(t, err)
						assert.True(t, strings.HasPrefix(err.Error(), "iphash: "), err.Error())
					}
				})
			}
		}
	}
}

// An empty set answers ErrNoBackend before looking at the key.
func TestEmptySetWinsOverBadKey(t *testing.T) {
	p := iphash.New()
	b, err := p.Pick(balancer.Request{Key: "abc"})
	assert.Nil(t, b)
	assert.Same(t, balancer.ErrNoBackend, err)
}

// The empty key stands for a client without an IP address: all such
// requests share one backend, the same in every process, and retry like any
// other key.
func TestEmptyKey(t *testing.T) {
	p, q := newPicker(t, 16), newPicker(t, 16)
	seq := sequence(t, p, "", 16)
	assert.Equal(t, seq, sequence(t, q, "", 16))
	assert.ElementsMatch(t, addrs(16), seq)
}

// Golden vectors, generated once from this implementation and then frozen:
// a change here changes which backend real clients reach, in every process
// that upgrades, so it must be deliberate and announced. Do not regenerate
// them to make a test pass.
var (
	goldenSet = []string{"10.0.0.7:80", "10.0.0.3:80", "10.0.0.1:80", "10.0.0.5:80", "10.0.0.2:80", "10.0.0.6:80", "10.0.0.4:80"}

	goldenWhole = []struct{ key, want string }{
		{"192.0.2.1", "10.0.0.2:80"},
		{"192.0.2.2", "10.0.0.5:80"},
		{"192.0.2.200", "10.0.0.2:80"},
		{"198.51.100.7:443", "10.0.0.7:80"},
		{"203.0.113.9:51234", "10.0.0.6:80"},
		{"10.1.2.3", "10.0.0.2:80"},
		{"172.16.0.1:80", "10.0.0.6:80"},
		{"0.0.0.0", "10.0.0.2:80"},
		{"255.255.255.255", "10.0.0.1:80"},
		{"2001:db8::1", "10.0.0.7:80"},
		{"[2001:db8::2]:443", "10.0.0.6:80"},
		{"2001:db8:85a3::8a2e:370:7334", "10.0.0.4:80"},
		{"fe80::1%eth0", "10.0.0.7:80"},
		{"::1", "10.0.0.3:80"},
		{"::ffff:192.0.2.1", "10.0.0.2:80"},
		{"[::ffff:198.51.100.7]:8080", "10.0.0.7:80"},
		{"2001:db8:1:2::ab", "10.0.0.2:80"},
		{"64:ff9b::c000:201", "10.0.0.6:80"},
		{"", "10.0.0.7:80"},
		{"100.64.0.1:1", "10.0.0.7:80"},
	}

	goldenPrefix = []struct{ key, want string }{
		{"192.0.2.1", "10.0.0.2:80"},
		{"192.0.2.2", "10.0.0.2:80"},
		{"192.0.2.200", "10.0.0.2:80"},
		{"198.51.100.7:443", "10.0.0.5:80"},
		{"203.0.113.9:51234", "10.0.0.5:80"},
		{"10.1.2.3", "10.0.0.3:80"},
		{"172.16.0.1:80", "10.0.0.4:80"},
		{"0.0.0.0", "10.0.0.2:80"},
		{"255.255.255.255", "10.0.0.1:80"},
		{"2001:db8::1", "10.0.0.7:80"},
		{"[2001:db8::2]:443", "10.0.0.7:80"},
		{"2001:db8:85a3::8a2e:370:7334", "10.0.0.7:80"},
		{"fe80::1%eth0", "10.0.0.4:80"},
		{"::1", "10.0.0.3:80"},
		{"::ffff:192.0.2.1", "10.0.0.2:80"},
		{"[::ffff:198.51.100.7]:8080", "10.0.0.5:80"},
		{"2001:db8:1:2::ab", "10.0.0.1:80"},
		{"64:ff9b::c000:201", "10.0.0.1:80"},
		{"", "10.0.0.7:80"},
		{"100.64.0.1:1", "10.0.0.1:80"},
	}

	// Weights 5, 1, 2, listed out of order.
	goldenWeighted = []struct{ key, want string }{
		{"192.0.2.1", "c:80"},
		{"198.51.100.7:443", "b:80"},
		{"203.0.113.9:51234", "c:80"},
		{"10.1.2.3", "b:80"},
		{"2001:db8::1", "a:80"},
		{"[2001:db8::2]:443", "c:80"},
		{"2001:db8:85a3::8a2e:370:7334", "a:80"},
		{"[::ffff:198.51.100.7]:8080", "b:80"},
		{"", "b:80"},
	}

	// Attempts 0 to 7 over goldenSet: every backend once, then home again.
	goldenRetries = []struct {
		key  string
		want []string
	}{
		{"192.0.2.1", []string{"10.0.0.2:80", "10.0.0.6:80", "10.0.0.7:80", "10.0.0.1:80", "10.0.0.3:80", "10.0.0.4:80", "10.0.0.5:80", "10.0.0.2:80"}},
		{"2001:db8::1", []string{"10.0.0.7:80", "10.0.0.4:80", "10.0.0.5:80", "10.0.0.6:80", "10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.7:80"}},
	}
)

func TestGolden(t *testing.T) {
	whole := iphash.New()
	require.NoError(t, whole.Update(balancer.Endpoints(goldenSet...)))
	prefix := iphash.New(iphash.WithPrefix())
	require.NoError(t, prefix.Update(balancer.Endpoints(goldenSet...)))
	weighted := iphash.New()
	require.NoError(t, weighted.Update([]balancer.Backend{
		balancer.NewEndpoint("c:80", 5), balancer.NewEndpoint("a:80", 1), balancer.NewEndpoint("b:80", 2),
	}))
	for _, g := range goldenWhole {
		assert.Equal(t, g.want, pickID(t, whole, balancer.Request{Key: g.key}), "whole addresses: %q", g.key)
	}
	for _, g := range goldenPrefix {
		assert.Equal(t, g.want, pickID(t, prefix, balancer.Request{Key: g.key}), "prefix: %q", g.key)
	}
	for _, g := range goldenWeighted {
		assert.Equal(t, g.want, pickID(t, weighted, balancer.Request{Key: g.key}), "weighted: %q", g.key)
	}
	for _, g := range goldenRetries {
		assert.Equal(t, g.want, sequence(t, whole, g.key, 8), "retries: %q", g.key)
	}
}

// The mapping depends on the set, not on the order Update lists it in.
func TestOrderDoesNotMatter(t *testing.T) {
	bs := balancer.Endpoints(addrs(50)...)
	bs[7] = balancer.NewEndpoint(bs[7].ID(), 4) // and with a weight
	p := iphash.New()
	require.NoError(t, p.Update(bs))
	r := rand.New(rand.NewPCG(5, 5))
	for range 5 {
		shuffled := append([]balancer.Backend(nil), bs...)
		r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		q := iphash.New()
		require.NoError(t, q.Update(shuffled))
		for _, k := range randomV4(500, 9) {
			assert.Equal(t, sequence(t, p, k, 3), sequence(t, q, k, 3), k)
		}
	}
}

// shares counts the home backend of each key, as fractions of len(keys).
func shares(t *testing.T, p *iphash.Picker, keys []string) map[string]float64 {
	t.Helper()
	counts := map[string]int{}
	for _, k := range keys {
		counts[pickID(t, p, balancer.Request{Key: k})]++
	}
	out := make(map[string]float64, len(counts))
	for id, c := range counts {
		out[id] = float64(c) / float64(len(keys))
	}
	return out
}

// Keys spread evenly: random IPv4 and IPv6 clients, and a dense block of
// consecutive addresses (which a weak hash, or none, would stripe). With
// 100k keys over 8 backends, one share's standard deviation is 0.8% of
// 1/8, so a 2% tolerance is 2.4σ: loose enough for a good hash, tight
// enough to catch a biased one.
func TestDistribution(t *testing.T) {
	const n, keys = 8, 100_000
	v6 := make([]string, keys)
	r := rand.New(rand.NewPCG(11, 1))
	for i := range v6 {
		v6[i] = fmt.Sprintf("[2001:db8:%x:%x::%x]:443", r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint32()&0xffff)
	}
	block := make([]string, 1<<16)
	for i := range block {
		block[i] = fmt.Sprintf("10.20.%d.%d:40000", i>>8, i&255)
	}
	tests := []struct {
		name string
		opts []iphash.Option
		keys []string
		tol  float64 // relative to 1/n
	}{
		{"random v4", nil, randomV4(keys, 1), 0.02},
		{"random v6", nil, v6, 0.02},
		{"a /16, address by address", nil, block, 0.02},
		// With /24 prefixes, the 65536 addresses are only 256 keys:
		// σ is 7.4% of 1/8, so the tolerance is looser.
		{"a /16 with prefix", []iphash.Option{iphash.WithPrefix()}, block, 0.25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := shares(t, newPicker(t, n, tt.opts...), tt.keys)
			require.Len(t, got, n)
			worst := 0.0
			for id, s := range got {
				dev := s*n - 1
				worst = max(worst, dev, -dev)
				assert.InDelta(t, 1.0/n, s, tt.tol/n, id)
			}
			t.Logf("worst share off 1/%d by %.2f%% of it", n, 100*worst)
		})
	}
}

func TestWeightedShares(t *testing.T) {
	p := iphash.New()
	require.NoError(t, p.Update([]balancer.Backend{
		balancer.NewEndpoint("a:80", 1), balancer.NewEndpoint("b:80", 2), balancer.NewEndpoint("c:80", 5),
	}))
	got := shares(t, p, randomV4(100_000, 2))
	for id, want := range map[string]float64{"a:80": 1.0 / 8, "b:80": 2.0 / 8, "c:80": 5.0 / 8} {
		assert.InEpsilon(t, want, got[id], 0.02, id)
	}
}

// Weights count only in proportion: scaling them all, or making them all
// equal, gives the unweighted mapping's equivalent.
func TestWeightsReduce(t *testing.T) {
	set := func(ws ...int) []balancer.Backend {
		bs := make([]balancer.Backend, len(ws))
		for i, w := range ws {
			bs[i] = balancer.NewEndpoint(fmt.Sprintf("b%d:80", i), w)
		}
		return bs
	}
	tests := []struct {
		name string
		a, b []balancer.Backend
	}{
		{"scaled by 2", set(1, 2, 5), set(2, 4, 10)},
		{"scaled by 1000", set(3, 1), set(3000, 1000)},
		{"equal weights are no weights", set(1, 1, 1, 1), set(7, 7, 7, 7)},
		{"max weights", set(1, 1), set(balancer.MaxWeight, balancer.MaxWeight)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, q := iphash.New(), iphash.New()
			require.NoError(t, p.Update(tt.a))
			require.NoError(t, q.Update(tt.b))
			for _, k := range randomV4(2000, 4) {
				assert.Equal(t, sequence(t, p, k, 2), sequence(t, q, k, 2), k)
			}
		})
	}
}

// moved returns the fraction of keys whose home differs between p and q.
func moved(t *testing.T, p, q *iphash.Picker, keys []string) float64 {
	t.Helper()
	n := 0
	for _, k := range keys {
		if pickID(t, p, balancer.Request{Key: k}) != pickID(t, q, balancer.Request{Key: k}) {
			n++
		}
	}
	return float64(n) / float64(len(keys))
}

// Hash mod n remaps most clients when the set changes size: with 10
// backends, about 9 in 10 move when one leaves or one joins (a key stays
// only if h mod 10 and h mod 9 happen to name the same backend). This is
// what consistent hashing avoids (there about 1 in 10 move), and why
// iphash suits sets that rarely change.
func TestRemapOnMembershipChange(t *testing.T) {
	keys := randomV4(100_000, 7)
	ten := newPicker(t, 10)
	all := addrs(11)
	tests := []struct {
		name string
		set  []string
	}{
		{"first of 10 leaves", all[1:10]},
		{"middle of 10 leaves", append(append([]string(nil), all[:5]...), all[6:10]...)},
		{"last of 10 leaves", all[:9]},
		{"an 11th joins", all},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := iphash.New()
			require.NoError(t, q.Update(balancer.Endpoints(tt.set...)))
			f := moved(t, ten, q, keys)
			t.Logf("%.1f%% of clients moved", 100*f)
			assert.Greater(t, f, 0.80)
		})
	}
}

// Attempts 0 to n-1 visit every backend once; attempt n is home again.
func TestRetrySequence(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8, 10, 64} {
		t.Run(fmt.Sprint("n=", n), func(t *testing.T) {
			p := newPicker(t, n)
			for _, k := range append(randomV4(200, 6), "", "2001:db8::1") {
				seq := sequence(t, p, k, 2*n+1)
				assert.ElementsMatch(t, addrs(n), seq[:n], k)
				assert.Equal(t, seq[:n], seq[n:2*n], "the sequence repeats: %s", k)
				assert.Equal(t, seq[0], pickID(t, p, balancer.Request{Key: k, Attempt: -3}), "negative attempt: %s", k)
			}
		})
	}
}

// The first retry of a failed backend's clients spreads over all the other
// backends instead of landing on one neighbour.
func TestRetrySpreads(t *testing.T) {
	const n = 10
	p := newPicker(t, n)
	failed := addrs(n)[3]
	counts := map[string]int{}
	total := 0
	for _, k := range randomV4(200_000, 8) {
		if pickID(t, p, balancer.Request{Key: k}) != failed {
			continue
		}
		counts[pickID(t, p, balancer.Request{Key: k, Attempt: 1})]++
		total++
	}
	require.Len(t, counts, n-1)
	for id, c := range counts {
		// About 20k keys over 9: σ is 2% of the mean; allow 10%.
		assert.InEpsilon(t, 1.0/(n-1), float64(c)/float64(total), 0.10, id)
	}
}

func TestAvoid(t *testing.T) {
	const n = 6
	p := newPicker(t, n)
	for _, k := range randomV4(100, 12) {
		seq := sequence(t, p, k, n+1)
		// Avoiding the pick gives the next of the sequence.
		for a := range n {
			got := pickID(t, p, balancer.Request{Key: k, Attempt: a, Avoid: seq[a]})
			assert.Equal(t, seq[a+1], got, "%s attempt %d", k, a)
		}
		// Avoiding another backend changes nothing.
		assert.Equal(t, seq[0], pickID(t, p, balancer.Request{Key: k, Avoid: seq[1]}))
		assert.Equal(t, seq[0], pickID(t, p, balancer.Request{Key: k, Avoid: "not-a-backend:1"}))
	}
	one := newPicker(t, 1)
	assert.Equal(t, addrs(1)[0], pickID(t, one, balancer.Request{Key: "192.0.2.1", Avoid: addrs(1)[0]}))
}

func TestUpdateErrors(t *testing.T) {
	p := iphash.New()
	good := balancer.Endpoints("a:1", "b:1")
	require.NoError(t, p.Update(good))
	tests := []struct {
		name string
		set  []balancer.Backend
		want error
		msg  string
	}{
		{"duplicate", balancer.Endpoints("x:1", "y:1", "x:1"), balancer.ErrDuplicateID, `iphash: update: balancer: duplicate backend ID "x:1" at positions 0 and 2`},
		{"nil", []balancer.Backend{good[0], nil}, balancer.ErrNilBackend, "iphash: update: balancer: nil backend at position 1"},
		{"zero weight", []balancer.Backend{balancer.NewEndpoint("z:1", 0)}, balancer.ErrBadWeight, `iphash: update: balancer: weight out of range: "z:1" at position 0 has weight 0, want 1 to 1000000`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := p.Update(tt.set)
			require.Error(t, err)
			assert.True(t, errors.Is(err, tt.want))
			assert.EqualError(t, err, tt.msg)
			for _, k := range randomV4(20, 13) {
				assert.Contains(t, []string{"a:1", "b:1"}, pickID(t, p, balancer.Request{Key: k}))
			}
		})
	}
}

// allocKeys are one key of every form, valid or not.
var allocKeys = []string{
	"", "192.0.2.1", "192.0.2.1:8080", "2001:db8::1", "[2001:db8::1]:443", "::ffff:192.0.2.1",
	"[::ffff:192.0.2.1]:80", "fe80::1%eth0", "[fe80::1%eth7]:80", "abc", "1.2.3.4:99999", "[::1",
}

func TestPickAllocs(t *testing.T) {
	weighted := []balancer.Backend{balancer.NewEndpoint("a:80", 1), balancer.NewEndpoint("b:80", 3), balancer.NewEndpoint("c:80", 2)}
	for _, opts := range [][]iphash.Option{nil, {iphash.WithPrefix()}} {
		for name, set := range map[string][]balancer.Backend{"unweighted": balancer.Endpoints(addrs(64)...), "weighted": weighted} {
			p := iphash.New(opts...)
			require.NoError(t, p.Update(set))
			for _, k := range allocKeys {
				for _, req := range []balancer.Request{{Key: k}, {Key: k, Attempt: 2, Avoid: "b:80"}} {
					allocs := testing.AllocsPerRun(200, func() { _, _ = p.Pick(req) })
					assert.Zero(t, allocs, "%s, prefix=%v: %+v", name, opts != nil, req)
				}
			}
		}
	}
}

// Pick races with Update under -race; every pick is in one of the sets, and
// after the last Update only in it.
func TestConcurrentPickUpdate(t *testing.T) {
	sets := [][]balancer.Backend{
		balancer.Endpoints(addrs(5)...),
		{balancer.NewEndpoint("w1:80", 3), balancer.NewEndpoint("w2:80", 1)},
		balancer.Endpoints(addrs(64)...),
	}
	union := map[string]bool{}
	for _, s := range sets {
		for _, b := range s {
			union[b.ID()] = true
		}
	}
	p := iphash.New(iphash.WithPrefix())
	require.NoError(t, p.Update(sets[0]))
	keys := append(randomV4(256, 14), allocKeys[:9]...)
	var wg sync.WaitGroup
	errc := make(chan error, 5)
	for g := range 4 {
		wg.Go(func() {
			for i := range 5000 {
				k := keys[(g*5000+i)%len(keys)]
				b, err := p.Pick(balancer.Request{Key: k, Attempt: i % 3, Avoid: "w1:80"})
				if err != nil || !union[b.ID()] {
					errc <- fmt.Errorf("key %q: got %v, %v", k, b, err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 300 {
			if err := p.Update(sets[i%len(sets)]); err != nil {
				errc <- err
				return
			}
		}
	})
	wg.Wait()
	close(errc)
	require.NoError(t, <-errc)
	require.NoError(t, p.Update(sets[1]))
	for _, k := range keys {
		assert.Contains(t, []string{"w1:80", "w2:80"}, pickID(t, p, balancer.Request{Key: k}))
	}
}
