package consistent_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/consistent"
)

// keyed returns n backends at addresses made by addr, each with the hash
// key "cache-<i>", weights cycling 1..3.
func keyed(n int, addr func(i int) string) []balancer.Backend {
	bs := make([]balancer.Backend, n)
	for i := range bs {
		bs[i] = balancer.NewEndpoint(addr(i), 1+i%3).WithHashKey(fmt.Sprint("cache-", i))
	}
	return bs
}

// placements returns, for each key, the hash key of the backend a first
// try and a retry (Attempt 1) reach, each done at once.
func placements(t *testing.T, p balancer.Balancer, ks []string) (first, retry []string) {
	t.Helper()
	first, retry = make([]string, len(ks)), make([]string, len(ks))
	fb, _ := p.(balancer.Feedback)
	for i, k := range ks {
		for a, out := range [][]string{first, retry} {
			b, err := p.Pick(balancer.Request{Key: k, Attempt: a})
			require.NoError(t, err)
			if fb != nil {
				fb.Done(b, balancer.Result{})
			}
			out[i] = balancer.HashKeyOf(b)
		}
	}
	return first, retry
}

func differ(a, b []string) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

// A backend whose address (its ID) changes but whose hash key stays keeps
// its keys, and its place in every retry sequence: on the ring, the
// bounded ring and Maglev, for one backend moving and for all of them (a
// StatefulSet whose pods all came back on new IPs). Without hash keys the
// same move sends the mover's keys elsewhere, as the contrast shows.
func TestHashKeyKeepsPlace(t *testing.T) {
	const n = 64
	ks := keys(20000)
	at := func(i int) string { return fmt.Sprintf("10.0.0.%d:6379", i) }
	for _, p := range pickers {
		t.Run(p.name, func(t *testing.T) {
			before := keyed(n, at)
			lb := p.new()
			require.NoError(t, lb.Update(before))
			first, retry := placements(t, lb, ks)

			one := keyed(n, at)
			one[7] = balancer.NewEndpoint("10.9.9.9:6379", 1+7%3).WithHashKey("cache-7")
			require.NoError(t, lb.Update(one))
			f1, r1 := placements(t, lb, ks)
			owned := 0
			for i := range ks {
				if first[i] == "cache-7" {
					owned++
					got, err := lb.Pick(balancer.Request{Key: ks[i]})
					require.NoError(t, err)
					if fb, ok := lb.(balancer.Feedback); ok {
						fb.Done(got, balancer.Result{})
					}
					assert.Equal(t, "10.9.9.9:6379", got.ID(), "key %q", ks[i])
				}
			}
			require.Positive(t, owned)
			assert.Zero(t, differ(first, f1), "one moved: first tries that changed backend")
			assert.Zero(t, differ(retry, r1), "one moved: retries that changed backend")

			all := keyed(n, func(i int) string { return fmt.Sprintf("10.1.%d.%d:6379", i%7, i) })
			require.NoError(t, lb.Update(all))
			f2, r2 := placements(t, lb, ks)
			assert.Zero(t, differ(first, f2), "all moved: first tries that changed backend")
			assert.Zero(t, differ(retry, r2), "all moved: retries that changed backend")

			// The contrast: the same move without hash keys.
			plain := p.new()
			byID := balancer.Endpoints(addrs(n)...)
			require.NoError(t, plain.Update(byID))
			a := assign(t, plain, ks)
			byID[7] = balancer.NewEndpoint("10.9.9.9:6379", 1)
			require.NoError(t, plain.Update(byID))
			b := assign(t, plain, ks)
			t.Logf("one of %d moved: %d of %d keys changed backend without hash keys, %d with (it owned %d)",
				n, differ(a, b), len(ks), differ(first, f1), owned)
			assert.Positive(t, differ(a, b))
		})
	}
}

// A backend with a hash key is placed exactly as a backend whose ID is
// that key: the golden set's addresses given as hash keys to backends
// elsewhere reproduce every golden vector, first tries and retries.
// WithHashKey("") is the ID itself.
func TestHashKeyAsID(t *testing.T) {
	moved := goldenSet()
	empty := goldenSet()
	for i, b := range goldenSet() {
		moved[i] = balancer.NewEndpoint(fmt.Sprintf("192.0.2.%d:7000", 9-i), balancer.WeightOf(b)).WithHashKey(b.ID())
		empty[i] = b.(*balancer.Endpoint).WithHashKey("")
	}
	for _, set := range []struct {
		name string
		bs   []balancer.Backend
	}{{"moved", moved}, {"empty key", empty}} {
		t.Run(set.name, func(t *testing.T) {
			ring, mag := consistent.NewRing(), consistent.NewMaglev()
			require.NoError(t, ring.Update(set.bs))
			require.NoError(t, mag.Update(set.bs))
			place := func(p balancer.Balancer, req balancer.Request) string {
				b, err := p.Pick(req)
				require.NoError(t, err)
				return balancer.HashKeyOf(b)
			}
			for _, g := range golden {
				assert.Equal(t, g.ring, place(ring, balancer.Request{Key: g.key}), "ring, key %q", g.key)
				assert.Equal(t, g.ringRetry, place(ring, balancer.Request{Key: g.key, Attempt: 1}), "ring retry, key %q", g.key)
				assert.Equal(t, g.maglev, place(mag, balancer.Request{Key: g.key}), "maglev, key %q", g.key)
				assert.Equal(t, g.maglevRetry, place(mag, balancer.Request{Key: g.key, Attempt: 1}), "maglev retry, key %q", g.key)
			}
		})
	}
}

// Two backends with one placement key are refused, naming both, and the
// previous set stays, its mapping intact.
func TestDuplicateHashKey(t *testing.T) {
	ks := keys(2000)
	at := func(i int) string { return fmt.Sprintf("10.0.0.%d:6379", i) }
	dupKey := keyed(8, at)
	dupKey[5] = balancer.NewEndpoint("10.0.0.5:6379", 1).WithHashKey("cache-2")
	dupID := keyed(8, at)
	dupID[3] = balancer.NewEndpoint("cache-1", 1) // no hash key: placed by its ID, which is cache-1's key
	for _, p := range pickers {
		t.Run(p.name, func(t *testing.T) {
			lb := p.new()
			require.NoError(t, lb.Update(keyed(8, at)))
			before, _ := placements(t, lb, ks)
			for _, bad := range []struct {
				bs   []balancer.Backend
				want []string
			}{
				{dupKey, []string{`"cache-2"`, `"10.0.0.2:6379"`, `"10.0.0.5:6379"`}},
				{dupID, []string{`"cache-1"`, `"10.0.0.1:6379"`}},
			} {
				err := lb.Update(bad.bs)
				require.ErrorIs(t, err, balancer.ErrDuplicateHashKey)
				for _, w := range bad.want {
					assert.Contains(t, err.Error(), w)
				}
				t.Log(err)
				after, _ := placements(t, lb, ks)
				assert.Zero(t, differ(before, after), "keys moved after a refused Update")
			}
		})
	}
}

// Pick allocates nothing with hash keys either: they are read at Update.
func TestHashKeyPickAllocs(t *testing.T) {
	bs := keyed(64, func(i int) string { return fmt.Sprintf("10.0.0.%d:6379", i) })
	for _, p := range pickers {
		lb := p.new()
		require.NoError(t, lb.Update(bs))
		fb, _ := lb.(balancer.Feedback)
		allocs := testing.AllocsPerRun(1000, func() {
			b, _ := lb.Pick(balancer.Request{Key: "user-1", Attempt: 1})
			if fb != nil {
				fb.Done(b, balancer.Result{})
			}
		})
		assert.Zero(t, allocs, p.name)
	}
}
