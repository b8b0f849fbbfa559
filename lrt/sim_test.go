package lrt_test

import (
	"container/heap"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/lrt"
)

// sim is a discrete-event simulation in virtual time: closed-loop users
// send a request, wait for the answer, think, and send again, through a
// real Picker whose clock is the simulation's. Each backend answers in a
// fixed service time; with slots > 0 it serves that many requests at once
// and queues the rest first come, first served, so that its latency grows
// with its load, as a real server's does.
type sim struct {
	service []time.Duration // per backend
	slots   int             // requests a backend serves at once; 0: any number
	users   int
	think   time.Duration // between an answer and the user's next request
	length  time.Duration // virtual time simulated
	warmup  time.Duration // requests sent before this are not counted
	opts    []lrt.Option  // beyond the clock and a seeded rand
}

// simResult is what a run measured over the requests sent after warm-up.
type simResult struct {
	picks      []int // requests per backend
	requests   int
	mean, p99  time.Duration
	rate       float64   // requests per second
	inflight   []float64 // mean requests in flight per backend, queued ones included
	maxInQueue []int     // the longest queue each backend had
}

func (r simResult) share(i int) float64 { return float64(r.picks[i]) / float64(r.requests) }

func (r simResult) String() string {
	var b strings.Builder
	for i := range r.picks {
		fmt.Fprintf(&b, "%5.1f%% ", 100*r.share(i))
	}
	fmt.Fprintf(&b, "| mean %v p99 %v | %.0f requests/s | in flight", r.mean.Round(time.Millisecond),
		r.p99.Round(time.Millisecond), r.rate)
	for _, n := range r.inflight {
		fmt.Fprintf(&b, " %.1f", n)
	}
	return b.String()
}

type event struct {
	at      time.Duration
	seq     uint64 // ties in time go in scheduling order: deterministic
	user    int
	backend int // -1: the user sends; otherwise the backend finishes the user's request
}

type events []event

func (e events) Len() int { return len(e) }
func (e events) Less(i, j int) bool {
	return e[i].at < e[j].at || e[i].at == e[j].at && e[i].seq < e[j].seq
}
func (e events) Swap(i, j int) { e[i], e[j] = e[j], e[i] }
func (e *events) Push(x any)   { *e = append(*e, x.(event)) }
func (e *events) Pop() any {
	old := *e
	x := old[len(old)-1]
	*e = old[:len(old)-1]
	return x
}

func (s sim) run(seed uint64) simResult {
	var now time.Duration
	start := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	opts := append([]lrt.Option{
		lrt.WithClock(func() time.Time { return start.Add(now) }),
		lrt.WithRand(r.Uint64),
	}, s.opts...)
	p := lrt.New(opts...)
	ids := make([]string, len(s.service))
	for i := range ids {
		ids[i] = fmt.Sprintf("b%d", i)
	}
	bs := balancer.Endpoints(ids...)
	if err := p.Update(bs); err != nil {
		panic(err)
	}
	index := make(map[string]int, len(bs))
	for i, b := range bs {
		index[b.ID()] = i
	}

	var q events
	var seq uint64
	schedule := func(at time.Duration, user, backend int) {
		seq++
		heap.Push(&q, event{at: at, seq: seq, user: user, backend: backend})
	}
	sent := make([]time.Duration, s.users) // when each user's request was sent
	busy := make([]int, len(bs))           // requests being served
	queue := make([][]int, len(bs))        // users waiting, per backend
	res := simResult{picks: make([]int, len(bs)), maxInQueue: make([]int, len(bs)), inflight: make([]float64, len(bs))}
	var lat []time.Duration
	for u := range s.users {
		// Spread the first requests over one think time.
		schedule(time.Duration(u)*s.think/time.Duration(s.users), u, -1)
	}
	for q.Len() > 0 {
		ev := heap.Pop(&q).(event)
		if ev.at > s.length {
			break
		}
		if now >= s.warmup {
			for i := range bs {
				res.inflight[i] += float64(busy[i]+len(queue[i])) * (ev.at - now).Seconds()
			}
		}
		now = ev.at
		if ev.backend < 0 { // a user sends
			b, err := p.Pick(balancer.Request{})
			if err != nil {
				panic(err)
			}
			i := index[b.ID()]
			sent[ev.user] = now
			if now >= s.warmup {
				res.picks[i]++
			}
			if s.slots == 0 || busy[i] < s.slots {
				busy[i]++
				schedule(now+s.service[i], ev.user, i)
			} else {
				queue[i] = append(queue[i], ev.user)
				res.maxInQueue[i] = max(res.maxInQueue[i], len(queue[i]))
			}
			continue
		}
		i := ev.backend // a backend answers
		d := now - sent[ev.user]
		p.Done(bs[i], balancer.Result{Latency: d})
		if sent[ev.user] >= s.warmup {
			lat = append(lat, d)
		}
		schedule(now+s.think, ev.user, -1)
		if len(queue[i]) > 0 {
			next := queue[i][0]
			queue[i] = queue[i][1:]
			schedule(now+s.service[i], next, i)
		} else {
			busy[i]--
		}
	}
	for _, n := range res.picks {
		res.requests += n
	}
	res.rate = float64(res.requests) / (s.length - s.warmup).Seconds()
	for i := range res.inflight {
		res.inflight[i] /= (now - s.warmup).Seconds()
	}
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	if len(lat) > 0 {
		res.mean = sum / time.Duration(len(lat))
		res.p99 = lat[(len(lat)*99+99)/100-1]
	}
	return res
}

// study is the setting of the study lbkit grew out of: four backends
// answering in 50, 150, 300 and 500 ms; closed-loop users who wait 100 ms
// between an answer and their next request.
var study = []time.Duration{50 * time.Millisecond, 150 * time.Millisecond, 300 * time.Millisecond, 500 * time.Millisecond}

// TestHerding reproduces the study's finding and checks the fix.
//
// With unlimited capacity (a backend answers any number of requests at once
// in its fixed time, the study's setting), the naive mode sends nearly all
// requests to the fastest backend: the study measured 100%. There that is
// harmless, the fastest never slows down. With bounded capacity (each
// backend serves k requests at once and queues the rest) and more load
// than the fastest can take, the herd queues on it, its latency jumps, the
// herd moves to the next, and so on; the Balanced mode spreads the load by
// estimate × in flight and gets lower mean and p99 latency, while still
// giving the fastest backend the most.
func TestHerding(t *testing.T) {
	run := func(t *testing.T, s sim, m lrt.Mode) simResult {
		s.opts = []lrt.Option{lrt.WithMode(m)}
		r := s.run(1)
		t.Logf("%-8v shares %v", m, r)
		return r
	}
	t.Run("unlimited", func(t *testing.T) {
		s := sim{service: study, users: 100, think: 100 * time.Millisecond, length: 3 * time.Minute}
		naive := run(t, s, lrt.Naive)
		assert.Greater(t, naive.share(0), 0.90, "naive herds onto the fastest")
		balanced := run(t, s, lrt.Balanced)
		assert.Greater(t, balanced.share(0), balanced.share(1), "balanced: the fastest takes most")
	})
	for _, tt := range []struct {
		slots, users int
	}{
		{8, 40},  // the fastest takes 160/s; 40 users ask 267/s of it; all four take 256/s
		{4, 100}, // every backend saturated: the fastest takes 80/s, all four 128/s
	} {
		t.Run(fmt.Sprintf("slots=%d/users=%d", tt.slots, tt.users), func(t *testing.T) {
			s := sim{service: study, slots: tt.slots, users: tt.users, think: 100 * time.Millisecond,
				length: 3 * time.Minute, warmup: 10 * time.Second}
			naive := run(t, s, lrt.Naive)
			balanced := run(t, s, lrt.Balanced)
			assert.Less(t, balanced.mean, naive.mean, "mean latency")
			assert.Less(t, balanced.p99, naive.p99, "p99 latency")
			for i := range study {
				assert.Greater(t, balanced.share(i), 0.005, "backend %d gets some traffic", i)
				if i > 0 {
					assert.Greater(t, balanced.share(0), balanced.share(i), "the fastest is the busiest")
				}
			}
		})
	}
}

// The simulation is deterministic for a seed, so the figures above are
// reproducible.
func TestSimDeterministic(t *testing.T) {
	s := sim{service: study, slots: 4, users: 30, think: 100 * time.Millisecond, length: 20 * time.Second}
	assert.Equal(t, s.run(7), s.run(7))
}

// Among four backends Balanced compares all four. Two random choices would
// cap any backend at half the picks (it is in half the pairs), though the
// fastest can serve more than half: in the bounded settings of TestHerding
// that costs latency.
func TestScanOrTwoChoices(t *testing.T) {
	for _, tt := range []struct{ slots, users int }{{8, 40}, {4, 100}} {
		t.Run(fmt.Sprintf("slots=%d/users=%d", tt.slots, tt.users), func(t *testing.T) {
			s := sim{service: study, slots: tt.slots, users: tt.users, think: 100 * time.Millisecond,
				length: 3 * time.Minute, warmup: 10 * time.Second}
			scan := s.run(1)
			s.opts = []lrt.Option{lrt.WithScanMax(1)}
			two := s.run(1)
			t.Logf("scan        %v", scan)
			t.Logf("two choices %v", two)
			assert.LessOrEqual(t, two.share(0), 0.51, "two choices cap a backend at half")
			assert.Greater(t, scan.share(0), 0.6)
			assert.Less(t, scan.mean, two.mean, "mean latency")
			// Not Less: with the scan the slowest backend takes 1.0 to
			// 1.3% of requests over seeds 1 to 8, right at the 1% the p99
			// reads, so its p99 is 300 ms for some seeds and 500 ms for
			// others; two choices give it 6% and a p99 of 500 ms always.
			assert.LessOrEqual(t, scan.p99, two.p99, "p99 latency")
		})
	}
}
