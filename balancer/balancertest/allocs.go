package balancertest

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/lbkit/lbkit/balancer"
)

// How Allocs and Results count.
//
// The process-wide count testing.AllocsPerRun reads charges a picker with
// whatever else the process allocates meanwhile (the runtime, the testing
// package, a background goroutine of the picker's own); taking the best of
// several rounds, as this kit once did, forgives that, but also a picker
// that allocates once in a few thousand calls, whose rounds are mostly
// clean. So the checks count twice:
//
//   - Every heap allocation made under kitPick or kitDone, the frames
//     through which the kit calls Pick and Done, as the heap profile
//     records them with runtime.MemProfileRate set to 1 for the counted
//     rounds: exact, and summed over every round, so that one allocation
//     in 30,000 calls fails the check. Allocations on other goroutines do
//     not count, and neither do those of the runtime's caches of type
//     assertions (below).
//   - Every heap allocation of the process (runtime.MemStats.Mallocs), round
//     by round: a round with none stops the rounds. A picker whose
//     allocations the profile misses (objects under 16 bytes without
//     pointers, which the runtime packs into shared blocks and profiles
//     only when a block is started) still spoils every round, and fails.
//
// What used to look like the race detector allocating on the request path
// (this kit let one allocation in 100 calls through under -race) is the
// runtime filling the caches of errors.Is's type assertion and type
// switch: after about one miss in 1024 at a call site, runtime.typeAssert
// and runtime.interfaceSwitch build a larger cache that holds the dynamic
// type just met (runtime.buildTypeAssertCache, buildInterfaceSwitchCache).
// The heap profile of the Allocs rounds of every lbkit picker, alone and
// under health, showed nothing else under Pick or Done, with -race or
// without: 0 to 5 of those per picker over 60,000 calls, bounded by the
// number of error types a call site meets, once per process. Those are
// forgiven, by name; nothing else is, with or without -race.

// kitPick is Pick as Allocs and Results call it: a frame of its own, which
// the heap profile's stacks show, so that an allocation under it is the
// picker's whatever else the process does meanwhile.
//
//go:noinline
func kitPick(b balancer.Picker, req balancer.Request) (balancer.Backend, error) {
	return b.Pick(req)
}

// kitDone is Done as Allocs and Results call it; see kitPick.
//
//go:noinline
func kitDone(fb balancer.Feedback, got balancer.Backend, r balancer.Result) {
	fb.Done(got, r)
}

var (
	kitPickEntry = funcEntry(kitPick)
	kitDoneEntry = funcEntry(kitDone)
)

func funcEntry(f any) uintptr {
	return runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Entry()
}

// runtimeCaches are the runtime functions that grow a call site's cache of
// type assertions, allocating a new cache for a dynamic type the site has
// not met often (see the note above).
var runtimeCaches = []string{"runtime.buildTypeAssertCache", "runtime.buildInterfaceSwitchCache"}

// allocRounds is how many rounds a series may take before its process-wide
// count is judged: a stray allocation elsewhere in the process can spoil a
// round, but not every round, while a picker that allocates spoils them
// all. A passing picker usually needs one round; on a loaded machine CI
// once saw three rounds in a row spoiled by one allocation each.
const allocRounds = 10

// allocPairs is how many Pick+Done pairs one round of a series makes.
const allocPairs = 2000

// measureMu serialises the counting of Balancers checked at the same time
// (parallel tests): the processor count and the profiling rate it sets are
// the process's.
var measureMu sync.Mutex

// allocSeries is one way of calling Pick and Done, repeated round after
// round to count what it allocates. run calls them through kitPick and
// kitDone.
type allocSeries struct {
	name string
	run  func() error
}

// call runs s once, turning a panic into an error that names the series.
func (s allocSeries) call() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return s.run()
}

// measureAllocs runs every series once to warm it up (first calls may fill
// caches), then counts each, as the note above says, and reports the
// first series that allocates.
func measureAllocs(series []allocSeries) error {
	for _, s := range series {
		if err := s.call(); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	measureMu.Lock()
	defer measureMu.Unlock()
	// One processor, so that other goroutines hardly run during a round.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	base := published()
	for _, s := range series {
		best, rounds := uint64(math.MaxUint64), 0
		for best > 0 && rounds < allocRounds {
			n, err := countRound(s)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			best = min(best, n)
			rounds++
		}
		if rounds == 1 && best == 0 {
			continue // nothing allocated anywhere: nothing to attribute
		}
		now := published()
		mine, cached, where := attribute(base, now)
		base = now
		pairs := allocPairs * rounds
		switch {
		case mine > 0:
			return fmt.Errorf("%s: %d Pick+Done pairs made %d allocations under Pick or Done, the first at %s; want none", s.name, pairs, mine, where)
		case best > uint64(cached):
			return fmt.Errorf("%s: the process allocated at least %d times in each of %d rounds of %d Pick+Done pairs, and the heap profile finds none of it under Pick or Done: an allocation of under 16 bytes without pointers, which the profile mostly misses, or a goroutine allocating all along; want a round with none", s.name, best, allocRounds, allocPairs)
		}
	}
	return nil
}

// countRound runs s once with every allocation profiled and returns how
// many heap allocations the process made meanwhile. It collects first, so
// that no collection starts during the count: a collection may start the
// runtime's own worker goroutines, whose allocations the count would
// charge to s.
func countRound(s allocSeries) (uint64, error) {
	runtime.GC()
	rate := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = rate }()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := s.call()
	runtime.ReadMemStats(&after)
	return after.Mallocs - before.Mallocs, err
}

// stack is a heap profile record's call stack.
type stack = [32]uintptr

// published collects twice, which publishes every allocation made so far
// in the heap profile (a record reaches it two cycles after it is made),
// and returns the allocations counted so far under kitPick or kitDone, by
// stack.
func published() map[stack]int64 {
	runtime.GC()
	runtime.GC()
	var recs []runtime.MemProfileRecord
	n, _ := runtime.MemProfile(nil, true)
	for {
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
	}
	out := map[stack]int64{}
	for i := range recs {
		if underKit(recs[i].Stack()) {
			out[recs[i].Stack0] += recs[i].AllocObjects
		}
	}
	return out
}

// underKit reports whether a stack passes through kitPick or kitDone.
func underKit(pcs []uintptr) bool {
	for _, pc := range pcs {
		if f := runtime.FuncForPC(pc - 1); f != nil {
			if e := f.Entry(); e == kitPickEntry || e == kitDoneEntry {
				return true
			}
		}
	}
	return false
}

// attribute returns the allocations under kitPick or kitDone between two
// readings of published: the picker's own, with the stack of one of them,
// and the runtime's caches of type assertions, apart.
func attribute(before, after map[stack]int64) (mine, cached int64, where string) {
	for st, n := range after {
		d := n - before[st]
		if d <= 0 {
			continue
		}
		frames := framesOf(st)
		if slices.ContainsFunc(frames, func(f frame) bool { return slices.Contains(runtimeCaches, f.function) }) {
			cached += d
			continue
		}
		mine += d
		if where == "" {
			where = site(frames)
		}
	}
	return mine, cached, where
}

// frame is one frame of a recorded stack, resolved.
type frame struct {
	function string
	file     string
	line     int
}

func framesOf(st stack) []frame {
	n := 0
	for n < len(st) && st[n] != 0 {
		n++
	}
	var out []frame
	fs := runtime.CallersFrames(st[:n])
	for {
		f, more := fs.Next()
		out = append(out, frame{f.Function, f.File, f.Line})
		if !more {
			return out
		}
	}
}

// site describes where an allocation was made: the frames from the first
// outside the runtime's allocator down to Pick or Done.
func site(frames []frame) string {
	var parts []string
	for _, f := range frames {
		if strings.HasPrefix(f.function, "runtime.") && len(parts) == 0 {
			continue
		}
		if strings.HasSuffix(f.function, ".kitPick") || strings.HasSuffix(f.function, ".kitDone") {
			break
		}
		parts = append(parts, fmt.Sprintf("%s (%s:%d)", f.function, filepath.Base(f.file), f.line))
		if len(parts) == 5 {
			break
		}
	}
	return strings.Join(parts, " ← ")
}

// pairer makes Pick+Done pairs on one Balancer through kitPick and
// kitDone, and gives no backend two failures in a row, so that a passive
// health check around the picker ejects nothing (but on a refused
// connection, which ejects at once): an ejection's work (a new set for
// the inner picker, a change reported) is done off the request path and
// allocates, legitimately, and a process-wide count would see it. An
// abandoned request is neither success nor failure: it does not end a run
// of failures.
type pairer struct {
	b      balancer.Balancer
	fb     balancer.Feedback
	want   map[string]balancer.Backend
	failed map[balancer.Backend]bool
}

func newPairer(b balancer.Balancer, bs []balancer.Backend) *pairer {
	p := &pairer{b: b, fb: feedback(b), want: members(bs), failed: make(map[balancer.Backend]bool, len(bs))}
	for _, x := range bs {
		p.failed[x] = false // every key present: writes will not allocate
	}
	return p
}

// pairs makes one pair per request, passing rs in turn to Done.
func (p *pairer) pairs(reqs []balancer.Request, rs []balancer.Result) error {
	for i, req := range reqs {
		got, err := kitPick(p.b, req)
		if err := member(got, err, p.want); err != nil {
			return fmt.Errorf("pick %d %+v: %w", i, req, err)
		}
		r := rs[i%len(rs)]
		switch fails := r.Err != nil && !r.Abandoned(); {
		case fails && p.failed[got]:
			r = results[0] // a success instead
			p.failed[got] = false
		case !r.Abandoned():
			p.failed[got] = fails
		}
		kitDone(p.fb, got, r)
	}
	return nil
}

// allocResults are the results Allocs passes to Done: all but the refused
// connection, on which a passive health check ejects at once (Results
// passes it).
var allocResults = func() []balancer.Result {
	var rs []balancer.Result
	for _, r := range results {
		if !errors.Is(r.Err, syscall.ECONNREFUSED) {
			rs = append(rs, r)
		}
	}
	return rs
}()

// requestShapes are the kinds of Request the allocation checks make, over
// the keys ks and the set bs.
func requestShapes(ks []string, bs []balancer.Backend) []struct {
	name string
	req  func(i int) balancer.Request
} {
	n := len(bs)
	return []struct {
		name string
		req  func(i int) balancer.Request
	}{
		{"no key", func(int) balancer.Request { return balancer.Request{} }},
		{"key", func(i int) balancer.Request { return balancer.Request{Key: ks[i%len(ks)]} }},
		{"avoid, attempt 0", func(i int) balancer.Request {
			return balancer.Request{Key: ks[i%len(ks)], Avoid: bs[i%n].ID()}
		}},
		{"avoid, attempt 1", func(i int) balancer.Request {
			return balancer.Request{Key: ks[i%len(ks)], Attempt: 1, Avoid: bs[i%n].ID()}
		}},
		{"avoid, attempt 2+", func(i int) balancer.Request {
			return balancer.Request{Key: ks[i%len(ks)], Attempt: 2 + i%5, Avoid: bs[i%n].ID()}
		}},
	}
}

// requests returns allocPairs requests of one shape, made ahead so that
// making them is not counted.
func requests(shape func(i int) balancer.Request) []balancer.Request {
	reqs := make([]balancer.Request, allocPairs)
	for i := range reqs {
		reqs[i] = shape(i)
	}
	return reqs
}

// checkAllocs: Pick followed by Done allocates nothing, in every request
// shape and with every shape of result, in sets of 3, 16 and 64, counted
// as the note above says: a single allocation under Pick or Done in the
// 30,000 counted pairs fails.
func checkAllocs(newBalancer func() balancer.Balancer) error {
	ks := keys(64)
	var series []allocSeries
	for _, n := range []int{3, 16, 64} {
		b := newBalancer()
		bs := backends("m", n, true)
		if err := update(b, bs); err != nil {
			return err
		}
		p := newPairer(b, bs)
		for _, sh := range requestShapes(ks, bs) {
			reqs := requests(sh.req)
			series = append(series, allocSeries{
				name: fmt.Sprintf("n=%d, %s", n, sh.name),
				run:  func() error { return p.pairs(reqs, allocResults) },
			})
		}
	}
	return measureAllocs(series)
}

// checkResults: Done with each shape of Result, a refused connection and
// negative and huge latencies included, neither panics nor allocates, and
// Pick keeps picking from the set: allocPairs pairs per shape, with keys,
// retries and Avoid, counted as Allocs counts.
func checkResults(newBalancer func() balancer.Balancer) error {
	b := newBalancer()
	bs := backends("res", 16, true)
	if err := update(b, bs); err != nil {
		return err
	}
	p := newPairer(b, bs)
	ks := keys(64)
	reqs := requests(func(i int) balancer.Request {
		req := balancer.Request{Key: ks[i%len(ks)], Attempt: i % 4}
		if i%3 == 0 {
			req.Avoid = bs[i%len(bs)].ID()
		}
		return req
	})
	var series []allocSeries
	for _, r := range results {
		rs := []balancer.Result{r}
		series = append(series, allocSeries{
			name: "Done with " + describe(r),
			run:  func() error { return p.pairs(reqs, rs) },
		})
	}
	return measureAllocs(series)
}
