package leastconn_test

import (
	"container/heap"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/leastconn"
)

// sim is a discrete-event simulation of closed-loop clients in virtual
// time: each user picks a backend, holds the request for the backend's
// service time, calls Done, thinks, and picks again. Nothing sleeps; a run
// of minutes of virtual time takes milliseconds.
type sim struct {
	backends []balancer.Backend
	// service returns how long backend b takes to answer one request.
	service func(r *rand.Rand, b int) time.Duration
	users   int
	think   time.Duration
	length  time.Duration // virtual time simulated
	seed    uint64
	opts    []leastconn.Option
	// onPick, if set, is called after every pick with the in-flight counts
	// the picker reports, in set order, and the index picked.
	onPick func(counts []int64, picked int)
}

// simResult is what a run measured.
type simResult struct {
	picks    int
	perPick  []int     // picks per backend
	meanLoad []float64 // time-averaged in-flight per backend
}

type event struct {
	at      time.Duration
	seq     int // breaks ties in time, so the run is deterministic
	user    int
	backend int // -1 for "user picks", else "request to backend ends"
}

type events []event

func (q events) Len() int { return len(q) }
func (q events) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q events) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *events) Push(x any)   { *q = append(*q, x.(event)) }
func (q *events) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func (s sim) run(t testing.TB) simResult {
	t.Helper()
	r := rand.New(rand.NewPCG(s.seed, 1))
	opts := append([]leastconn.Option{leastconn.WithRand(r.Uint64)}, s.opts...)
	p := leastconn.New(opts...)
	require.NoError(t, p.Update(s.backends))
	index := map[string]int{}
	for i, b := range s.backends {
		index[b.ID()] = i
	}

	n := len(s.backends)
	res := simResult{perPick: make([]int, n), meanLoad: make([]float64, n)}
	counts := make([]int64, n)
	// The simulator's own count of each backend's requests, and when it
	// last changed, for the time average.
	inFlight := make([]int64, n)
	changed := make([]time.Duration, n)
	account := func(i int, now time.Duration, delta int64) {
		res.meanLoad[i] += float64(inFlight[i]) * float64(now-changed[i])
		inFlight[i] += delta
		changed[i] = now
	}
	var q events
	seq := 0
	push := func(at time.Duration, user, backend int) {
		heap.Push(&q, event{at: at, seq: seq, user: user, backend: backend})
		seq++
	}
	// Users start spread over the first think time, as a load generator
	// ramps up, rather than all at the same instant.
	for u := range s.users {
		push(s.think*time.Duration(u)/time.Duration(s.users), u, -1)
	}
	var last time.Duration
	for q.Len() > 0 {
		ev := heap.Pop(&q).(event)
		if ev.at > s.length {
			break
		}
		last = ev.at
		if ev.backend >= 0 {
			p.Done(s.backends[ev.backend], balancer.Result{})
			account(ev.backend, ev.at, -1)
			push(ev.at+s.think, ev.user, -1)
			continue
		}
		b, err := p.Pick(balancer.Request{})
		require.NoError(t, err)
		i := index[b.ID()]
		account(i, ev.at, +1)
		res.picks++
		res.perPick[i]++
		if s.onPick != nil {
			for j, b := range s.backends {
				counts[j] = p.InFlight(b.ID())
			}
			s.onPick(counts, i)
		}
		push(ev.at+s.service(r, i), ev.user, i)
	}
	for i := range res.meanLoad {
		account(i, last, 0)
		res.meanLoad[i] /= float64(last)
	}
	return res
}

func spread(counts []int64) int64 {
	lo, hi := counts[0], counts[0]
	for _, c := range counts {
		lo, hi = min(lo, c), max(hi, c)
	}
	return hi - lo
}

// jittered returns service times of base·(1±spread), uniform: real backends
// do not answer in exactly the same time twice, and without jitter the
// requests that a fixed-time backend answers together come back together
// forever, a lockstep no real system keeps.
func jittered(spread float64, base ...time.Duration) func(*rand.Rand, int) time.Duration {
	return func(r *rand.Rand, b int) time.Duration {
		return time.Duration(float64(base[b]) * (1 - spread + 2*spread*r.Float64()))
	}
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// The study's backends (50, 150, 300 and 500 ms) under 100 closed-loop
// users. Without think time every answer is followed at once by a new
// pick, so the counts must stay within one of each other at every pick;
// with the study's 100 ms think time they drift apart between picks (a
// fast backend loses several requests before the next pick arrives), but
// every pick still goes to a least-loaded backend and the mean in-flight per
// backend is equal to within one request, as the study saw (14/14/14/14).
func TestSimulationStudy(t *testing.T) {
	tests := []struct {
		name      string
		think     time.Duration
		wantMean  float64 // time-averaged in-flight per backend
		maxSpread int64   // at every pick, after it; -1: not checked
	}{
		{"no think time", 0, 25, 1},
		{"100ms think time", ms(100), 14, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hist := map[int64]int{}
			notLeast := 0
			s := sim{
				backends: balancer.Endpoints("fast:1", "medium:1", "slow:1", "slowest:1"),
				service:  jittered(0.1, ms(50), ms(150), ms(300), ms(500)),
				users:    100,
				think:    tt.think,
				length:   3 * time.Minute,
				seed:     1,
				onPick: func(counts []int64, picked int) {
					hist[spread(counts)]++
					for _, c := range counts {
						if counts[picked]-1 > c {
							notLeast++ // another backend had fewer before this pick
							break
						}
					}
				},
			}
			res := s.run(t)
			t.Logf("picks %d, per backend %v; mean in flight %.2f; spread after pick: %v",
				res.picks, res.perPick, res.meanLoad, hist)
			assert.Zero(t, notLeast, "picks that went to a backend with more in flight than another")
			if tt.maxSpread >= 0 {
				for s := range hist {
					assert.LessOrEqual(t, s, tt.maxSpread, "spread of in-flight counts at a pick")
				}
			}
			for i, m := range res.meanLoad {
				assert.InDelta(t, tt.wantMean, m, 1, "mean in flight on backend %d", i)
			}
			// The fast backend answers ten times as often as the slowest.
			assert.InDelta(t, 10, float64(res.perPick[0])/float64(res.perPick[3]), 1.5)
		})
	}
}

// With weights 1, 2, 3, 4 and every answer followed by a new pick, the
// scan keeps in-flight/weight within one of its fair value (total/10) at
// every pick, and the mean in flight is 10/20/30/40. Service times are the
// same for all, with jitter, so only the picker's rule sets the shares.
func TestSimulationWeighted(t *testing.T) {
	weights := []int{1, 2, 3, 4}
	bs := make([]balancer.Backend, len(weights))
	for i, w := range weights {
		bs[i] = balancer.NewEndpoint(fmt.Sprintf("w%d:1", w), w)
	}
	for _, users := range []int{10, 100, 1000} {
		t.Run(fmt.Sprint("users=", users), func(t *testing.T) {
			worst := 0.0
			s := sim{
				backends: bs,
				service:  jittered(0.5, ms(100), ms(100), ms(100), ms(100)),
				users:    users,
				length:   10 * time.Second,
				seed:     2,
				onPick: func(counts []int64, _ int) {
					var total int64
					for _, c := range counts {
						total += c
					}
					for i, c := range counts {
						worst = max(worst, math.Abs(float64(c)/float64(weights[i])-float64(total)/10))
					}
				},
			}
			res := s.run(t)
			t.Logf("mean in flight %.2f; worst |in-flight/weight − fair| at a pick: %.2f", res.meanLoad, worst)
			assert.LessOrEqual(t, worst, 1.0)
			for i, m := range res.meanLoad {
				assert.InDelta(t, float64(users*weights[i])/10, m, float64(weights[i]))
			}
		})
	}
}

// The power of two choices on 64 backends with weights cycling 1, 1, 1, 8:
// candidates drawn in proportion to weight keep the mean in flight per unit
// of weight within 10% of its fair value for every backend. Drawn
// uniformly they could not: a backend is a candidate in at most 2/n of the
// picks, and a weight-8 backend needs 8/2.75 ≈ 2.9 times the mean share.
func TestSimulationWeightedChoices(t *testing.T) {
	weight := func(i int) int { return []int{1, 1, 1, 8}[i%4] }
	bs := make([]balancer.Backend, 64)
	for i := range bs {
		bs[i] = balancer.NewEndpoint(fmt.Sprintf("b%d:1", i), weight(i))
	}
	const users = 1760 // total weight 176: fair is 10 per unit of weight
	s := sim{
		backends: bs,
		service:  func(r *rand.Rand, _ int) time.Duration { return time.Duration(float64(ms(100)) * (0.5 + r.Float64())) },
		users:    users,
		length:   5 * time.Second,
		seed:     3,
		opts:     []leastconn.Option{leastconn.WithChoices(2)},
	}
	res := s.run(t)
	perUnit := make([]float64, len(bs))
	for i, m := range res.meanLoad {
		perUnit[i] = m / float64(weight(i))
	}
	t.Logf("mean in flight per unit of weight: min %.2f, max %.2f", slices.Min(perUnit), slices.Max(perUnit))
	for i, u := range perUnit {
		assert.InDelta(t, 10, u, 1, "backend %d (weight %d)", i, weight(i))
	}
}
