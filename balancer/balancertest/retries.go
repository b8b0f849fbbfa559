package balancertest

import (
	"fmt"
	"math"
	"slices"

	"github.com/lbkit/lbkit/balancer"
)

// checkAvoid: a retry that names a backend to avoid gets another one, when
// there is another one, at every size and attempt, through a run of Updates
// over sets of 1 to 256 backends on one Balancer; a set of one gives its
// only backend.
func checkAvoid(newBalancer func() balancer.Balancer) error {
	ks := keys(40)
	attempts := []int{0, 1, 2, 3, 7}
	b := newBalancer()
	fb := feedback(b)
	for u, bs := range churn("v", runSizes, 12) {
		if err := update(b, bs); err != nil {
			return err
		}
		n := len(bs)
		want := members(bs)
		// Every backend of small sets; eight spread over larger ones.
		step := max(1, n/8)
		for a := 0; a < n; a += step {
			avoid := bs[a].ID()
			for i, k := range ks {
				req := balancer.Request{Key: k, Attempt: attempts[i%len(attempts)], Avoid: avoid}
				got, err := b.Pick(req)
				if err := member(got, err, want); err != nil {
					return fmt.Errorf("after Update %d of %d, n=%d: %+v: %w", u+1, len(runSizes), n, req, err)
				}
				if n > 1 && got.ID() == avoid {
					return fmt.Errorf("after Update %d of %d, n=%d: %+v: got the backend to avoid", u+1, len(runSizes), n, req)
				}
				fb.Done(got, balancer.Result{Latency: 1e6})
			}
		}
	}
	return nil
}

// checkAttempt: Attempt may be any int, negative or huge, without a panic
// or a pick outside the set.
func checkAttempt(newBalancer func() balancer.Balancer) error {
	attempts := []int{-1, -2, -1000, math.MinInt, math.MinInt + 1, 1 << 20, 1 << 40, math.MaxInt - 1, math.MaxInt}
	for _, n := range []int{1, 2, 3, 8, 64} {
		b := newBalancer()
		fb := feedback(b)
		bs := backends("t", n, true)
		if err := update(b, bs); err != nil {
			return err
		}
		want := members(bs)
		for i, attempt := range attempts {
			for _, avoid := range []string{"", bs[i%n].ID()} {
				req := balancer.Request{Key: key(i), Attempt: attempt, Avoid: avoid}
				got, err := b.Pick(req)
				if err := member(got, err, want); err != nil {
					return fmt.Errorf("n=%d: %+v: %w", n, req, err)
				}
				if n > 1 && got.ID() == avoid {
					return fmt.Errorf("n=%d: %+v: got the backend to avoid", n, req)
				}
				fb.Done(got, balancer.Result{Latency: 1e6})
			}
		}
	}
	return nil
}

// checkRetries: a picker with key affinity (each key has a home it returns
// on every first try, and different keys have different homes) walks a
// retry sequence as balancer.Request's Attempt says: Attempts 0 to n−1 of
// one key reach the key's home and then every other backend, once each,
// and a second Balancer given the same set walks the same sequence (the
// same one in every process). A picker without key affinity ignores
// Attempt, and the check passes it without looking further.
func checkRetries(newBalancer func() balancer.Balancer) error {
	const nkeys, tries = 16, 4
	for _, n := range []int{3, 8, 64} {
		bs := backends("r", n, false)
		sequences := func() ([][]string, error) {
			b := newBalancer()
			fb := feedback(b)
			if err := update(b, bs); err != nil {
				return nil, err
			}
			pick := func(k, attempt int) (string, error) {
				got, err := b.Pick(balancer.Request{Key: key(k), Attempt: attempt})
				if err != nil {
					return "", err
				}
				if got == nil {
					return "", fmt.Errorf("n=%d: key %q attempt %d: nil backend without an error", n, key(k), attempt)
				}
				fb.Done(got, balancer.Result{Latency: 1e6})
				return got.ID(), nil
			}
			homes := map[string]bool{}
			for k := range nkeys {
				home, err := pick(k, 0)
				if err != nil {
					return nil, err
				}
				for range tries - 1 {
					again, err := pick(k, 0)
					if err != nil {
						return nil, err
					}
					if again != home {
						return nil, nil // no affinity: Attempt is not for this picker
					}
				}
				homes[home] = true
			}
			if len(homes) < 2 {
				return nil, nil // one backend for every key: no key affinity
			}
			seqs := make([][]string, nkeys)
			for k := range nkeys {
				for a := range n {
					id, err := pick(k, a)
					if err != nil {
						return nil, err
					}
					seqs[k] = append(seqs[k], id)
				}
			}
			return seqs, nil
		}
		first, err := sequences()
		if err != nil || first == nil {
			return err
		}
		for k, seq := range first {
			seen := map[string]int{}
			for a, id := range seq {
				if prev, ok := seen[id]; ok {
					return fmt.Errorf("n=%d: key %q: attempts %d and %d both reach %s; attempts 0 to n−1 must reach n different backends",
						n, key(k), prev, a, id)
				}
				seen[id] = a
			}
		}
		second, err := sequences()
		if err != nil {
			return err
		}
		if second == nil {
			return fmt.Errorf("n=%d: a second Balancer with the same set shows no key affinity, the first did", n)
		}
		for k := range first {
			if !slices.Equal(first[k], second[k]) {
				return fmt.Errorf("n=%d: key %q: two Balancers with the same set walk different retry sequences: %v and %v",
					n, key(k), first[k], second[k])
			}
		}
	}
	return nil
}
