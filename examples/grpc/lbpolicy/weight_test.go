package lbpolicy

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/experimental/balancer/weight"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/ringhash"
)

// TestCheckEndpointsAliases checks that two spellings of one address, in
// two endpoints or in one, are refused with both spellings named: gRPC
// would dial each, and the server would get two connections and a double
// share. Addresses that are not host:port (a unix socket) are compared as
// they are.
func TestCheckEndpointsAliases(t *testing.T) {
	eps := func(addrs ...[]string) []resolver.Endpoint {
		out := make([]resolver.Endpoint, len(addrs))
		for i, as := range addrs {
			for _, a := range as {
				out[i].Addresses = append(out[i].Addresses, resolver.Address{Addr: a})
			}
		}
		return out
	}
	refused := []struct {
		name string
		eps  []resolver.Endpoint
		want string
	}{
		{"port with a leading zero", eps([]string{"127.0.0.1:80"}, []string{"127.0.0.1:080"}),
			`lbpolicy: "127.0.0.1:80" in endpoint "127.0.0.1:80" and "127.0.0.1:080" in endpoint "127.0.0.1:080" are both 127.0.0.1:80`},
		{"IPv6 spelled long", eps([]string{"[::1]:80"}, []string{"[0:0::1]:80"}),
			`"[::1]:80" in endpoint "[::1]:80" and "[0:0::1]:80" in endpoint "[0:0::1]:80" are both [::1]:80`},
		{"a second address", eps([]string{"10.0.0.1:80"}, []string{"10.0.0.2:80", "[::ffff:10.0.0.1]:80"}),
			`"10.0.0.1:80" in endpoint "10.0.0.1:80" and "[::ffff:10.0.0.1]:80" in endpoint "10.0.0.2:80" are both 10.0.0.1:80`},
		{"within one endpoint", eps([]string{"Backend:80", "backend:80"}),
			`"Backend:80" in endpoint "Backend:80" and "backend:80" in endpoint "Backend:80" are both backend:80`},
		{"one endpoint listed twice, spelled two ways", eps([]string{"10.0.0.1:80"}, []string{"10.0.0.1:0080"}),
			`are both 10.0.0.1:80`},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			err := checkEndpoints(tt.eps, false)
			require.ErrorIs(t, err, lbk.ErrDuplicateID)
			assert.Contains(t, err.Error(), tt.want)
		})
	}

	accepted := []struct {
		name string
		eps  []resolver.Endpoint
	}{
		{"distinct", eps([]string{"10.0.0.1:80"}, []string{"10.0.0.1:81"}, []string{"[::1]:80"})},
		{"listed twice exactly", eps([]string{"10.0.0.1:80"}, []string{"10.0.0.1:80"})},
		{"unix sockets", eps([]string{"/run/a.sock"}, []string{"/run/b.sock"})},
	}
	for _, tt := range accepted {
		t.Run(tt.name, func(t *testing.T) {
			assert.NoError(t, checkEndpoints(tt.eps, false))
		})
	}
}

// TestScaleWeights: gRPC's weights above MaxWeight (xDS sets fractions of
// 2³¹) are brought down together, their ratios kept; anything else is
// left as it was.
func TestScaleWeights(t *testing.T) {
	ep := func(port int, w uint32) resolver.Endpoint {
		e := resolver.Endpoint{Addresses: []resolver.Address{{Addr: fmt.Sprintf("10.0.0.1:%d", port)}}}
		if w > 0 {
			e = weight.Set(e, weight.EndpointInfo{Weight: w})
		}
		return e
	}
	const one = 1 << 31 // 1.0 in gRPC's fixed point (gRFC A113)
	tests := []struct {
		name string
		eps  []resolver.Endpoint
		want []int
	}{
		{"three equal, one locality", []resolver.Endpoint{ep(1, one/3), ep(2, one/3), ep(3, one/3)}, []int{1, 1, 1}},
		{"3:1", []resolver.Endpoint{ep(1, one/4*3), ep(2, one/4)}, []int{3, 1}},
		{"localities 3:1, the second with two", []resolver.Endpoint{ep(1, one/4*3), ep(2, one/8), ep(3, one/8)}, []int{6, 1, 1}},
		{"coprime: scaled, rounded (499,999.75)", []resolver.Endpoint{ep(1, 2_000_001), ep(2, 1_000_000)}, []int{1_000_000, 500_000}},
		{"a tiny share is 1", []resolver.Endpoint{ep(1, 4_000_000_001), ep(2, 1)}, []int{1_000_000, 1}},
		{"in range: unchanged", []resolver.Endpoint{ep(1, 6), ep(2, 4)}, []int{6, 4}},
		{"unset: 1", []resolver.Endpoint{ep(1, 0), ep(2, one)}, []int{1, 1}},
		{"SetWeight wins", []resolver.Endpoint{SetWeight(ep(1, one/2), 7), ep(2, one/2)}, []int{7, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.eps)
			out := scaleWeights(tt.eps)
			got := make([]int, len(out))
			for i, e := range out {
				got[i] = WeightOf(e)
				assert.Equal(t, tt.eps[i].Addresses, e.Addresses)
			}
			assert.Equal(t, tt.want, got)
			assert.Equal(t, in, tt.eps, "the resolver's slice is not modified")
			assert.NoError(t, checkEndpoints(out, false))
		})
	}
}

// TestCheckEndpointsHashKeys checks that, for the hash policies, two
// endpoints with one placement key (the same hash key, or a hash key
// equal to another endpoint's first address) are refused, as lbkit's
// Update would refuse them, and that other policies, which place nothing,
// take them.
func TestCheckEndpointsHashKeys(t *testing.T) {
	ep := func(addr, key string) resolver.Endpoint {
		return ringhash.SetHashKey(resolver.Endpoint{Addresses: []resolver.Address{{Addr: addr}}}, key)
	}
	refused := []struct {
		name string
		eps  []resolver.Endpoint
		want string
	}{
		{"one hash key", []resolver.Endpoint{ep("10.0.0.1:80", "n1"), ep("10.0.0.2:80", "n1")},
			`endpoints "10.0.0.1:80" and "10.0.0.2:80" are both placed at "n1"`},
		{"a hash key that is another's address", []resolver.Endpoint{ep("10.0.0.1:80", ""), ep("10.0.0.2:80", "10.0.0.1:80")},
			`are both placed at "10.0.0.1:80"`},
		{"listed twice with two hash keys", []resolver.Endpoint{ep("10.0.0.1:80", "n1"), ep("10.0.0.1:80", "n2")},
			`share address "10.0.0.1:80"`},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			err := checkEndpoints(tt.eps, true)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
			if !errors.Is(err, lbk.ErrDuplicateID) {
				assert.ErrorIs(t, err, lbk.ErrDuplicateHashKey)
			}
			if tt.name != "listed twice with two hash keys" {
				assert.NoError(t, checkEndpoints(tt.eps, false), "a policy that places nothing takes them")
			}
		})
	}
	assert.NoError(t, checkEndpoints([]resolver.Endpoint{ep("10.0.0.1:80", "n1"), ep("10.0.0.1:80", "n1"), ep("10.0.0.2:80", "n2")}, true),
		"listed twice exactly, hash key included")
	assert.Equal(t, "n1", HashKeyOf(ep("10.0.0.1:80", "n1")))
	assert.Empty(t, HashKeyOf(ep("10.0.0.1:80", "")))
}
