package wrr

import (
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// nginx runs scan, nginx's own loop, on ws: the reference the tournament
// is checked against.
func nginx(ws []int64) []uint64 {
	var total int64
	for _, w := range ws {
		total += w
	}
	return scan(ws, total)
}

// tourn runs the tournament on ws, whatever their number.
func tourn(ws []int64) []uint64 {
	var total int64
	for _, w := range ws {
		total += w
	}
	return tournament(ws, total)
}

// randomWeights returns n weights from 1 to hi, from r.
func randomWeights(r *rand.Rand, n int, hi int64) []int64 {
	ws := make([]int64, n)
	for i := range ws {
		ws[i] = 1 + r.Int64N(hi)
	}
	return ws
}

func TestBuildMatchesNginx(t *testing.T) {
	tests := []struct {
		name    string
		weights []int64
	}{
		{"5,1,1", []int64{5, 1, 1}},
		{"1,1,5", []int64{1, 1, 5}},
		{"one", []int64{1}},
		{"one heavy", []int64{7}},
		{"equal", []int64{1, 1, 1, 1}},
		{"equal heavy", []int64{3, 3, 3}},
		{"two", []int64{2, 1}},
		{"ties everywhere", []int64{4, 2, 4, 2, 1, 1, 4}},
		{"descending", []int64{9, 8, 7, 6, 5, 4, 3, 2, 1}},
		{"one giant", []int64{1, 1, 1, 1000, 1, 1}},
		{"coprime", []int64{97, 89, 83, 79, 73}},
		{"padding", []int64{3, 1, 4, 1, 5}}, // five leaves of eight
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, nginx(tt.weights), tourn(tt.weights))
		})
	}
	// And many random sets: sizes 1 to 300, weights from all-equal to
	// spread over three orders of magnitude.
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		n, hi := 1+r.IntN(40), []int64{1, 2, 3, 10, 100, 1000}[r.IntN(6)]
		if i%10 == 0 {
			n, hi = 1+r.IntN(300), 1+r.Int64N(20) // the naive loop is O(n²·hi)
		}
		ws := randomWeights(r, n, hi)
		want := nginx(ws)
		if !assert.Equal(t, want, tourn(ws), "weights %v", ws) || !assert.Equal(t, want, build(ws), "weights %v", ws) {
			return
		}
	}
}

// FuzzBuild checks build against nginx on any weights the fuzzer finds:
// each input byte is one backend's weight (0 read as 256).
func FuzzBuild(f *testing.F) {
	f.Add([]byte{5, 1, 1})
	f.Add([]byte{1})
	f.Add([]byte{2, 2, 2, 2})
	f.Add([]byte{255, 1, 0, 17, 17, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 || len(b) > 64 {
			return
		}
		ws := make([]int64, len(b))
		for i, x := range b {
			ws[i] = int64(x)
			if x == 0 {
				ws[i] = 256
			}
		}
		require.Equal(t, nginx(ws), tourn(ws), "weights %v", ws)
	})
}

// The drift events of the tournament all but vanish with leaves sorted by
// weight: the replays a step stay close to the log₂ n of the path, which is
// what makes build O(P log n).
func TestBuildReplays(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{64, 1024} {
		for _, hi := range []int64{100, 10000} {
			t.Run(fmt.Sprintf("n=%d/weights=1..%d", n, hi), func(t *testing.T) {
				s := slotCounts(randomWeights(r, n, hi), DefaultMaxSchedule)
				perStep := replaysPerStep(s)
				// The path alone is log₂ n replays; allow 10% for events.
				assert.LessOrEqual(t, perStep, 1.1*float64(bits.Len(uint(n-1))), "replays a step")
				t.Logf("%.2f replays a step", perStep)
			})
		}
	}
}

// replaysPerStep runs build's loop on s and counts node replays a step.
func replaysPerStep(s []int64) float64 {
	var total int64
	for _, w := range s {
		total += w
	}
	tr := newTourney(s, total)
	replays := 0
	var repair func(x int, step int64)
	repair = func(x int, step int64) {
		if c := 2 * x; c < tr.leaves {
			if tr.nodes[c].due <= step {
				repair(c, step)
			}
			if tr.nodes[c+1].due <= step {
				repair(c+1, step)
			}
		}
		tr.play(x, step)
		replays++
	}
	for step := int64(1); step <= total; step++ {
		if tr.nodes[1].due <= step {
			repair(1, step)
		}
		leaf := tr.leaves + int(tr.nodes[1].pos)
		tr.nodes[leaf].b += total
		for x := leaf / 2; x >= 1; x /= 2 {
			tr.play(x, step+1)
			replays++
		}
	}
	return float64(replays) / float64(total)
}

func TestLink(t *testing.T) {
	tests := []struct {
		name  string
		sched []uint64 // backends only
		want  []uint64 // the backend link stores for each slot
	}{
		// a a b a c a a: a's last run wraps around to the start, so its
		// next other backend is b, two slots into the next period.
		{"5,1,1", []uint64{0, 0, 1, 0, 2, 0, 0}, []uint64{1, 1, 0, 2, 0, 1, 1}},
		{"round robin", []uint64{0, 1, 2}, []uint64{1, 2, 0}},
		{"one backend", []uint64{0}, []uint64{0}},
		{"runs", []uint64{1, 1, 1, 0, 0}, []uint64{0, 0, 0, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sched := append([]uint64(nil), tt.sched...)
			link(sched)
			for i, v := range sched {
				assert.Equal(t, tt.sched[i], v&(1<<32-1), "slot %d keeps its backend", i)
				assert.Equal(t, tt.want[i], v>>32, "slot %d", i)
			}
		})
	}
}

func TestSlotCounts(t *testing.T) {
	tests := []struct {
		name    string
		weights []int64
		limit   int64
		want    []int64
	}{
		{"under the limit", []int64{5, 1, 1}, 100, []int64{5, 1, 1}},
		{"at the limit", []int64{5, 1, 1}, 7, []int64{5, 1, 1}},
		{"gcd", []int64{10, 2, 2}, 100, []int64{5, 1, 1}},
		{"equal", []int64{7, 7, 7}, 100, []int64{1, 1, 1}},
		{"gcd brings it under", []int64{600, 300, 300}, 5, []int64{2, 1, 1}},
		// 10 slots for 101:101:99 → 3.36, 3.36, 3.29: the remainders of the
		// first two tie, and the lower index takes the slot left.
		{"scaled, tied remainders", []int64{101, 101, 99}, 10, []int64{4, 3, 3}},
		// 10 slots for 50:30:20 → exactly 5:3:2.
		{"scaled exactly", []int64{50, 30, 20}, 10, []int64{5, 3, 2}},
		// 1 of 1001 is below 1/10 of the total: one slot, and 9 for the rest.
		{"rounded up to one slot", []int64{1000, 1}, 10, []int64{9, 1}},
		// 18 slots for eight 1s and a 100: each 1 is due 0.17 of a slot and
		// gets one; the 100 gets the ten left.
		{"most rounded up", []int64{1, 1, 1, 1, 1, 1, 1, 1, 100}, 18, []int64{1, 1, 1, 1, 1, 1, 1, 1, 10}},
		// 14 slots for five 1s and two 40s: the 1s take five, and the 40s
		// share the nine left, 4.5 each; the lower index takes the odd one.
		{"rounded up, then shared", []int64{1, 1, 1, 1, 1, 40, 40}, 14, []int64{1, 1, 1, 1, 1, 5, 4}},
		// 6 slots for 1,2,9: the 2 is due exactly one slot (2/12 of 6), but
		// once the 1 holds a slot it is due 2/11 of 5, under one, so it is
		// held to one slot too, rather than rounded down to none.
		{"held to one slot in turn", []int64{1, 2, 9}, 6, []int64{1, 1, 4}},
		// Scaled counts 4:2 reduce again.
		{"scaled then reduced", []int64{1999, 1001}, 6, []int64{2, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, slotCounts(tt.weights, tt.limit))
		})
	}
}

// TestScaledShareBound checks the bound of the package documentation on
// sets built to need scaling: for every backend,
//
//	|slots/P − w/W| < (k+1)/limit
//
// where k counts the backends with w/W < 1/limit, and every backend has at
// least one slot, and the period never exceeds the limit.
func TestScaledShareBound(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	shapes := []struct {
		name string
		make func() []int64
	}{
		{"uniform", func() []int64 { return randomWeights(r, 2+r.IntN(200), 10000) }},
		{"heavy tail", func() []int64 {
			ws := randomWeights(r, 2+r.IntN(200), 10)
			for i := range ws {
				ws[i] = int64(math.Pow(10, float64(ws[i])/2)) // 3 to 100000
			}
			return ws
		}},
		{"one giant, many tiny", func() []int64 {
			ws := randomWeights(r, 2+r.IntN(500), 3)
			ws[r.IntN(len(ws))] = 1_000_000
			return ws
		}},
		{"many at the threshold", func() []int64 {
			n := 2 + r.IntN(100)
			ws := make([]int64, n)
			for i := range ws {
				ws[i] = 100 + r.Int64N(3)
			}
			ws[0] = 100 * int64(n)
			return ws
		}},
	}
	worst := 0.0 // largest error as a fraction of the bound
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			for range 250 {
				ws := sh.make()
				limit := 2*int64(len(ws)) + r.Int64N(5000)
				var total int64
				for _, w := range ws {
					total += w
				}
				// A backend held to one slot has w/W < 1/(limit−k) ≤
				// 1/(limit−n), so counting those bounds k from above.
				k := 0
				for _, w := range ws {
					if float64(w)*float64(limit-int64(len(ws))) < float64(total) {
						k++
					}
				}
				s := slotCounts(ws, limit)
				var period int64
				for _, x := range s {
					period += x
				}
				require.LessOrEqual(t, period, limit)
				bound := float64(k+1) / float64(limit)
				for i := range ws {
					require.GreaterOrEqual(t, s[i], int64(1), "backend %d starved", i)
					err := math.Abs(float64(s[i])/float64(period) - float64(ws[i])/float64(total))
					require.Less(t, err, bound, "backend %d of %v, limit %d, k %d", i, ws, limit, k)
					worst = max(worst, err/bound)
				}
			}
		})
	}
	t.Logf("largest error: %.4f of the bound", worst)
}

// The case: 1000 backends with weights up to 10000 sum to about
// 5·10⁶, far over the default capacity; the schedule stays within it, and
// the shares stay close.
func TestMemoryBound(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	tests := []struct {
		name    string
		weights []int64
	}{
		{"1000 × up to 10000", randomWeights(r, 1000, 10000)},
		{"1000 × the max weight, one 1", func() []int64 {
			ws := make([]int64, 1000)
			for i := range ws {
				ws[i] = 1_000_000
			}
			ws[0] = 1
			return ws
		}()},
		{"1000 coprime-ish", func() []int64 {
			ws := make([]int64, 1000)
			for i := range ws {
				ws[i] = 9000 + int64(i)
			}
			return ws
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := slotCounts(tt.weights, DefaultMaxSchedule)
			sched := build(s)
			assert.LessOrEqual(t, len(sched), DefaultMaxSchedule)
			var total int64
			for _, w := range tt.weights {
				total += w
			}
			counts := make([]int, len(tt.weights))
			for _, i := range sched {
				counts[i]++
			}
			worstAbs, worstRel := 0.0, 0.0
			k := 0 // an upper bound on the backends held to one slot, as in TestScaledShareBound
			for i, w := range tt.weights {
				want := float64(w) / float64(total)
				got := float64(counts[i]) / float64(len(sched))
				worstAbs = max(worstAbs, math.Abs(got-want))
				if want*DefaultMaxSchedule >= 100 { // at least 100 slots due
					worstRel = max(worstRel, math.Abs(got-want)/want)
				}
				if w*(DefaultMaxSchedule-int64(len(tt.weights))) < total {
					k++
				}
			}
			assert.Less(t, worstAbs, float64(k+1)/DefaultMaxSchedule)
			assert.Less(t, worstRel, 0.01, "backends due 100 slots or more")
			t.Logf("period %d, k ≤ %d, largest share error %.2g absolute, %.2g%% relative", len(sched), k, worstAbs, 100*worstRel)
		})
	}
}

// cyclicRuns returns, for each backend, its longest run of consecutive
// picks, with the schedule repeating (as Pick repeats it).
func cyclicRuns(sched []uint64, n int) []int {
	runs := make([]int, n)
	p := len(sched)
	for start := range p {
		if p > 1 && sched[start] == sched[(start+p-1)%p] {
			continue // not the start of a run
		}
		l := 0
		for l < p && sched[(start+l)%p] == sched[start] {
			l++
		}
		runs[sched[start]] = max(runs[sched[start]], l)
	}
	return runs
}

// TestLongestRun: a backend of weight w among others weighing R in all is
// picked at best ⌈w/R⌉ times in a row somewhere (R gaps for w picks). The
// schedule's runs are nginx's, which reaches that bound for two backends
// and stays within twice it for more (measured on the random sets below; it
// is not ⌈w/R⌉+1 in general: nginx's light backends can bunch).
func TestLongestRun(t *testing.T) {
	best := func(w, rest int64) int { return int((w + rest - 1) / rest) }
	t.Run("5,1,1", func(t *testing.T) {
		// a a b a c a a, repeated: the a a at the end meets the a a at the
		// start, so the run is 4, one more than ⌈5/2⌉.
		assert.Equal(t, []int{4, 1, 1}, cyclicRuns(build([]int64{5, 1, 1}), 3))
	})
	t.Run("bunching", func(t *testing.T) {
		// R = 23 gaps could cut 763 picks into runs of 34; nginx's runs
		// reach 39.
		ws := []int64{763, 6, 17}
		assert.Equal(t, 39, cyclicRuns(build(ws), 3)[0])
		assert.Equal(t, 34, best(763, 23))
	})
	r := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{2, 3, 4, 8, 16, 64} {
		t.Run(fmt.Sprint("n=", n), func(t *testing.T) {
			worst := 0.0
			for range 2000 / n {
				ws := randomWeights(r, n, []int64{3, 10, 100, 1000}[r.IntN(4)])
				var total int64
				for _, w := range ws {
					total += w
				}
				got, ref := cyclicRuns(tourn(ws), n), cyclicRuns(nginx(ws), n)
				require.Equal(t, ref, got, "weights %v", ws)
				for i, w := range ws {
					opt := best(w, total-w)
					if n == 2 {
						// Two backends: h is picked when its current weight
						// reaches half the total, a Bresenham line, whose
						// runs are ⌊w/R⌋ or ⌈w/R⌉.
						require.Equal(t, opt, got[i], "weights %v backend %d", ws, i)
					}
					require.LessOrEqual(t, got[i], 2*opt, "weights %v backend %d", ws, i)
					worst = max(worst, float64(got[i])/float64(opt))
				}
			}
			t.Logf("longest run / ⌈w/R⌉: at most %.2f", worst)
		})
	}
}

// BenchmarkBuild compares the tournament with nginx's loop on the same slot
// counts: around scanMax with weights up to 10000 scaled to 2¹⁶ slots (where
// build switches from one to the other), and 1024 backends with weights up
// to 10000 scaled to the default 2¹⁸.
func BenchmarkBuild(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct {
		n     int
		hi    int64
		limit int64
	}{{16, 10000, 1 << 16}, {32, 10000, 1 << 16}, {64, 10000, 1 << 16}, {1024, 10000, DefaultMaxSchedule}} {
		s := slotCounts(randomWeights(r, c.n, c.hi), c.limit)
		b.Run(fmt.Sprintf("n=%d/weights=1..%d/build=tournament", c.n, c.hi), func(b *testing.B) {
			for b.Loop() {
				tourn(s)
			}
		})
		b.Run(fmt.Sprintf("n=%d/weights=1..%d/build=nginx", c.n, c.hi), func(b *testing.B) {
			for b.Loop() {
				nginx(s)
			}
		})
	}
}
