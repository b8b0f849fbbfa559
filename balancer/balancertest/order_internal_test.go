package balancertest

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// positionLearner picks at random in proportion to weight, skipping a
// backend whose last latency was over 100 ms, and keeps that by position
// in the slice: the flaw orderLearned is there to find. Its InFlight
// counts, which Order also checks, it does not have, so only orderLearned
// can catch it.
type positionLearner struct {
	set   []balancer.Backend
	slow  []bool // by position
	learn bool   // false: learns nothing, a plain weighted random picker
}

func (p *positionLearner) Update(bs []balancer.Backend) error {
	p.set = slices.Clone(bs)
	if len(p.slow) != len(bs) {
		p.slow = make([]bool, len(bs))
	}
	return nil
}

func (p *positionLearner) Pick(balancer.Request) (balancer.Backend, error) {
	total := 0
	for _, b := range p.set {
		total += balancer.WeightOf(b)
	}
	for range 1000 {
		r := rand.IntN(total)
		for i, b := range p.set {
			if r -= balancer.WeightOf(b); r < 0 {
				if !p.slow[i] {
					return b, nil
				}
				break
			}
		}
	}
	return nil, balancer.ErrNoBackend
}

func (p *positionLearner) Done(b balancer.Backend, r balancer.Result) {
	for i, x := range p.set {
		if p.learn && x.ID() == b.ID() && r.Latency > 0 {
			p.slow[i] = r.Latency > 100*time.Millisecond
		}
	}
}

// TestOrderLearned checks orderLearned both ways: a learner that keeps
// what it learned by position fails once the set comes reversed, and
// neither it (given the same order) nor a picker that learns nothing
// fails in 300 runs. The slow backend is the heaviest: when it was the
// lightest, the position learner drew it 51 times of 600 after the
// reversal, one above the limit, and a picker that learns nothing
// (leastconn with two choices) crossed the limit about once in 100 runs.
func TestOrderLearned(t *testing.T) {
	bs := backends("o", 6, true)
	reversed := slices.Clone(bs)
	slices.Reverse(reversed)

	err := orderLearned(func() balancer.Balancer { return &positionLearner{learn: true} }, bs, reversed)
	require.Error(t, err, "a learner keeping its state by position")
	assert.Contains(t, err.Error(), "taught to be slow")

	for _, learn := range []bool{true, false} {
		failed := 0
		for range 300 {
			if err := orderLearned(func() balancer.Balancer { return &positionLearner{learn: learn} }, bs, bs); err != nil {
				failed++
			}
		}
		assert.Zero(t, failed, "learn=%v: the same order given again failed %d of 300 runs", learn, failed)
	}
}
