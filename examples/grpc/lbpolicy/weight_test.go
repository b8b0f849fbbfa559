package lbpolicy

import (
	"testing"

	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/resolver"
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
			err := checkEndpoints(tt.eps)
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
			assert.NoError(t, checkEndpoints(tt.eps))
		})
	}
}
