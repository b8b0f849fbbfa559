package lbpolicy_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/grpc/internal/echo"
	"github.com/lbkit/lbkit/examples/grpc/lbpolicy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/ringhash"
)

// call sends one echo with the metadata kv (key, value, ...) and returns
// the name of the server that answered.
func call(t *testing.T, cc *grpc.ClientConn, kv ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(metadataContext(context.Background(), kv), 5*time.Second)
	defer cancel()
	name, err := echo.Call(ctx, cc, "hi")
	require.NoError(t, err)
	return name
}

// TestRequestHashHeader checks gRFC A76's request_hash_header on real
// servers: every RPC with one header value reaches one server, values
// spread over all three, several values of the header are hashed joined
// with ",", and RPCs without the header, or with an empty value, go to a
// random server each (where the "key" setting sends them all to one).
func TestRequestHashHeader(t *testing.T) {
	for _, name := range []string{lbpolicy.RingHash, lbpolicy.Maglev} {
		t.Run(name, func(t *testing.T) {
			checkNoLeaks(t)
			bs := startBackends(t, 0, 0, 0)
			md := func(i int) []string { return []string{"x-session", fmt.Sprint("s-", i%200)} }
			cc, _ := dial(t, serviceConfig(name, `{"requestHashHeader": "X-Session"}`), endpoints(bs))
			warm(t, cc, bs, md)

			homes := map[string]bool{}
			for k := range 40 {
				seen := map[string]bool{}
				for range 5 {
					home := call(t, cc, md(k)...)
					seen[home], homes[home] = true, true
				}
				assert.Len(t, seen, 1, "header value %v reached %v", md(k), seen)
			}
			assert.Len(t, homes, 3, "40 values should reach all 3 servers")

			for k := range 20 {
				a, b := fmt.Sprint("a-", k), fmt.Sprint("b-", k)
				joined := call(t, cc, "x-session", a+","+b)
				for range 3 {
					assert.Equal(t, joined, call(t, cc, "x-session", a, "x-session", b),
						"the values %q and %q are hashed as %q", a, b, a+","+b)
				}
			}

			for _, kv := range [][]string{nil, {"x-session", ""}} {
				spread := map[string]int{}
				for range 300 {
					spread[call(t, cc, kv...)]++
				}
				t.Logf("300 RPCs with header %q: %v", kv, spread)
				for _, b := range bs {
					// A third expected; below 40 of 300 has a chance
					// under 10⁻¹⁵.
					assert.GreaterOrEqual(t, spread[b.name], 40, "RPCs without a header value go to a random server: %v", spread)
				}
			}

			// The contrast: the same calls under "key" share one server.
			cc2, _ := dial(t, serviceConfig(name, `{"key": "x-session"}`), endpoints(bs))
			for _, b := range bs {
				b.served.Store(0) // counted by cc's RPCs: warm must see cc2's
			}
			warm(t, cc2, bs, md)
			one := map[string]int{}
			for range 60 {
				one[call(t, cc2)]++
			}
			assert.Len(t, one, 1, "under \"key\", RPCs without it are hashed as the empty key: %v", one)
		})
	}
}

// placedEndpoints lists the backends as endpoints with the hash keys
// given, in order.
func placedEndpoints(bs []*backend, keys ...string) []resolver.Endpoint {
	eps := endpoints(bs)
	for i := range eps {
		eps[i] = ringhash.SetHashKey(eps[i], keys[i])
	}
	return eps
}

// TestEndpointHashKey checks gRFC A76's endpoint hash key on real servers:
// an endpoint whose address changes (its server replaced by one elsewhere)
// but whose hash key stays keeps every key it had, and no other key
// moves; and a resolver update with two endpoints of one hash key is
// refused, the previous endpoints staying in use with their keys.
func TestEndpointHashKey(t *testing.T) {
	for _, name := range []string{lbpolicy.RingHash, lbpolicy.Maglev} {
		t.Run(name, func(t *testing.T) {
			checkNoLeaks(t)
			bs := startBackends(t, 0, 0, 0, 0) // b3 is where node-1 moves
			md := func(i int) []string { return []string{"x-user", fmt.Sprint("u-", i)} }
			cc, r := dial(t, serviceConfig(name, `{"key": "x-user"}`),
				placedEndpoints(bs[:3], "node-0", "node-1", "node-2"))
			warm(t, cc, bs[:3], md)

			const keys = 90
			before := make([]string, keys)
			for k := range keys {
				before[k] = call(t, cc, md(k)...)
			}
			require.Contains(t, before, "b1")

			var mu sync.Mutex
			var got error
			r.UpdateStateCallback = func(err error) {
				mu.Lock()
				got = err
				mu.Unlock()
			}
			moved := placedEndpoints([]*backend{bs[0], bs[3], bs[2]}, "node-0", "node-1", "node-2")
			r.UpdateState(resolver.State{Endpoints: moved})
			mu.Lock()
			require.NoError(t, got)
			mu.Unlock()
			eventually(t, "b3 to take node-1's keys", func() bool {
				for k, home := range before {
					if home == "b1" {
						return call(t, cc, md(k)...) == "b3"
					}
				}
				return false
			})
			changed := 0
			for k, home := range before {
				want := home
				if home == "b1" {
					want = "b3"
				}
				if got := call(t, cc, md(k)...); got != want {
					changed++
					t.Errorf("key %v: reached %s, want %s (was %s)", md(k), got, want, home)
				}
			}
			t.Logf("node-1 moved from b1 to b3: %d of %d keys did not follow their hash key", changed, keys)

			dup := placedEndpoints([]*backend{bs[0], bs[3], bs[1]}, "node-0", "node-1", "node-1")
			r.UpdateState(resolver.State{Endpoints: dup})
			mu.Lock()
			err := got
			mu.Unlock()
			assert.ErrorIs(t, err, lbk.ErrDuplicateHashKey)
			for k, home := range before {
				want := home
				if home == "b1" {
					want = "b3"
				}
				assert.Equal(t, want, call(t, cc, md(k)...), "after the refused update, key %v", md(k))
			}
		})
	}
}
