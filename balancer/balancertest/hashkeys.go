package balancertest

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/lbkit/lbkit/balancer"
)

// placed is a backend with a hash key (balancer.HashKeyer) that counts
// how often it is read.
type placed struct {
	*balancer.Endpoint
	key   string
	reads *atomic.Int64
}

// HashKey returns the key, counting the read.
func (p *placed) HashKey() string {
	p.reads.Add(1)
	return p.key
}

// placedSet returns n backends with hash keys "place-0" to "place-(n-1)"
// and IDs named by prefix, the one with key place-i named for n−1−i when
// reversed, so that the order of the IDs is not that of the keys.
func placedSet(prefix string, n int, reversed bool, reads *atomic.Int64) []balancer.Backend {
	bs := make([]balancer.Backend, n)
	for i := range bs {
		j := i
		if reversed {
			j = n - 1 - i
		}
		e := balancer.NewEndpoint(fmt.Sprintf("%s-%02d.test:8080", prefix, j), 1+i%3)
		bs[i] = &placed{Endpoint: e, key: fmt.Sprintf("place-%d", i), reads: reads}
	}
	return bs
}

// checkHashKeys: a picker that reads its backends' hash keys
// (balancer.HashKeyer) reads them in Update only, never in Pick or Done;
// and a picker (not a decorator, which may group backends by ID) with key
// affinity places backends by them: after an Update that gives every
// backend a new ID, in another order, but keeps each one's hash key and
// weight, every key's first try reaches the backend with the hash key it
// reached before. A set in which two backends share a placement key (two
// equal hash keys, or a hash key equal to the ID of a backend without
// one) is refused with an error wrapping balancer.ErrDuplicateHashKey,
// and the previous set, with its placement, stays. A picker that never
// reads a hash key passes without further look.
func checkHashKeys(newBalancer func() balancer.Balancer) error {
	const n, nkeys = 12, 400
	var reads atomic.Int64
	b := newBalancer()
	fb := feedback(b)
	before := placedSet("hk-a", n, false, &reads)
	if err := update(b, before); err != nil {
		return err
	}
	if reads.Load() == 0 {
		return nil // hash keys are not this picker's business
	}
	// homes picks every key once, first tries only, each done before the
	// next, and returns each key's home's hash key.
	homes := func(want map[string]balancer.Backend) ([]string, error) {
		r0 := reads.Load()
		hs := make([]string, nkeys)
		for k := range nkeys {
			got, err := b.Pick(balancer.Request{Key: key(k)})
			if err := member(got, err, want); err != nil {
				return nil, fmt.Errorf("key %q: %w", key(k), err)
			}
			fb.Done(got, balancer.Result{Latency: 1e6})
			hs[k] = got.(*placed).key
		}
		if d := reads.Load() - r0; d != 0 {
			return nil, fmt.Errorf("%d picks and Dones read HashKey %d times: read it once per backend in Update, as weights are read", nkeys, d)
		}
		return hs, nil
	}
	first, err := homes(members(before))
	if err != nil {
		return err
	}
	if _, ok := b.(balancer.Unwrapper); ok {
		return nil // a decorator: placement is the inner picker's
	}
	again, err := homes(members(before))
	if err != nil {
		return err
	}
	distinct := map[string]bool{}
	for k := range first {
		if again[k] != first[k] {
			return nil // no key affinity: nothing is placed
		}
		distinct[first[k]] = true
	}
	if len(distinct) < 2 {
		return nil // every key on one backend: no key affinity
	}

	moved := placedSet("hk-b", n, true, &reads)
	if err := update(b, moved); err != nil {
		return err
	}
	after, err := homes(members(moved))
	if err != nil {
		return err
	}
	if i := firstDiff(first, after); i >= 0 {
		wrong := 0
		for k := range first {
			if after[k] != first[k] {
				wrong++
			}
		}
		return fmt.Errorf("after an Update that kept every hash key and weight and changed every ID, %d of %d keys reached a backend of another hash key than before (key %q: %s, was %s): place backends by balancer.HashKeyOf, not by ID",
			wrong, nkeys, key(i), after[i], first[i])
	}

	dupKey := placedSet("hk-c", n, false, &reads)
	dupKey[n-1].(*placed).key = dupKey[0].(*placed).key
	dupID := placedSet("hk-d", n, false, &reads)
	dupID[1] = balancer.NewEndpoint("place-0", 1) // no hash key: placed by its ID, place-0's key
	for _, bad := range []struct {
		what string
		bs   []balancer.Backend
	}{
		{"two backends with one hash key", dupKey},
		{"a hash key equal to the ID of a backend without one", dupID},
	} {
		err := b.Update(bad.bs)
		if !errors.Is(err, balancer.ErrDuplicateHashKey) {
			return fmt.Errorf("Update of %s: got %v, want an error wrapping balancer.ErrDuplicateHashKey", bad.what, err)
		}
		still, err := homes(members(moved))
		if err != nil {
			return fmt.Errorf("after the refused Update of %s (the previous set must stay): %w", bad.what, err)
		}
		if i := firstDiff(after, still); i >= 0 {
			return fmt.Errorf("after the refused Update of %s: key %q moved from %s to %s; the previous set must stay as it was",
				bad.what, key(i), after[i], still[i])
		}
	}
	return nil
}

// firstDiff returns the first index at which a and b differ, or -1.
func firstDiff(a, b []string) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}
