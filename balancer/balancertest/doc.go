// Package balancertest is a conformance kit for pickers: one call checks that
// a balancer.Balancer, lbkit's or your own, keeps the contracts of package
// balancer. It is to pickers what testing/fstest is to file systems. Use it
// when you write a picker or a decorator around one (metrics, health of your
// own), so that it can stand in for any lbkit picker behind a proxy.
//
// From a test (run it with -race, which the Concurrent check needs):
//
//	func TestConformance(t *testing.T) {
//		balancertest.Run(t, func() balancer.Balancer { return mypicker.New() })
//	}
//
//	func BenchmarkPickDone(b *testing.B) {
//		balancertest.Benchmark(b, func() balancer.Balancer { return mypicker.New() }, balancertest.BenchOptions{})
//	}
//
// What your picker must do to pass, in short: Pick never blocks, allocates
// nothing and returns one of the very Backend values given to Update (never
// a removed one, never Avoid when there is another); Update validates the
// set reading each weight once (balancer.NewSet does both), waits for any
// Update already running, validation included, keeps the previous set on
// error and never keeps the caller's slice; Done, if the picker implements
// balancer.Feedback, is harmless for any backend and learns nothing from a
// Result that measured nothing. Each constructor call must return a fresh
// Balancer: every check starts from one.
//
// Test returns the failures as an error instead, for use outside a
// *testing.T or to check that a deliberately broken picker fails.
// Benchmark measures Pick followed by Done, through the interfaces, at 4,
// 64 and 1024 backends by default, serial and parallel: the harness every
// lbkit algorithm and package bench use.
//
// A decorator (a picker that wraps another, as health does) also runs
// RunDecorator, which checks the rules of balancer's doc, "Decorators":
// its Start and Close reach the picker inside, and balancer.As finds that
// picker through its Unwrap (checks Start, Close, Unwrap and Plain; see
// TestDecorator):
//
//	func TestDecorator(t *testing.T) {
//		balancertest.RunDecorator(t, func(inner balancer.Balancer) (balancer.Balancer, error) {
//			return mydecorator.New(inner)
//		})
//	}
//
// # Checks
//
// The 15 checks, each a subtest of that name:
//
//   - Empty: before any Update, and after an empty one, Pick returns
//     balancer.ErrNoBackend itself (not a wrapped copy) and a nil backend.
//   - InSet: every pick is one of the very Backend values given to Update
//     (not a copy or a wrapper with the same ID), for sets of 1 to 64
//     backends, with and without weights, first tries and retries, with
//     requests in flight.
//   - Removed: once Update returns, a removed backend is never picked, on a
//     first try or a retry (Avoid and Attempt set), even while requests to
//     it are still in flight. It makes 30,000 picks after removals, enough
//     to catch a picker that errs once in 10,000 picks in 19 runs of 20.
//   - InvalidUpdate: a nil backend, a nil pointer, an empty or duplicate ID, a
//     weight outside [1, MaxWeight] are refused with an error wrapping the
//     matching sentinel, and the previous set stays in use.
//   - Slice: Update neither modifies the caller's slice (no sorting in
//     place) nor keeps it, at every size.
//   - Avoid: a request whose Avoid names a backend gets another one when the
//     set has another one, at every size up to 64 and every Attempt, and
//     the only one otherwise.
//   - Attempt: any Attempt, negative or huge, gives a pick in the set and
//     no panic.
//   - Retries: for a picker with key affinity (every first try of a key
//     returns the key's home, and keys have different homes), Attempts 0
//     to n−1 of a key reach its home and then each other backend once, in
//     sets of 3, 8 and 64, and a second Balancer with the same set walks
//     the same sequences. A picker without key affinity passes: it ignores
//     Attempt.
//   - DoneUnknown: Done for nil, a nil *balancer.Endpoint, unknown or
//     removed backends, with every shape of Result, is harmless.
//   - Abandoned: Results that carry no measurement (balancer.ErrAbandoned,
//     context.Canceled, the zero Result) teach nothing: a backend whose
//     every request is abandoned does not draw more than twice its share.
//   - WeightsOnce: a Backend whose Weight is valid when validated and zero,
//     negative or huge afterwards makes neither Update nor Pick panic,
//     divide by zero, loop or allocate more than 256 MiB.
//   - NeverBlocks: Pick returns while an Update is stopped in a backend's
//     ID or Weight method, at each of the first 16 calls Update makes.
//   - Serialised: an Update called while another is stopped half-way waits
//     for it (validation included), and its set is the one in place at
//     the end.
//   - Allocs: Pick followed by Done allocates nothing, counted in total over
//     2,000 calls for each request shape (no key, a key, Avoid with
//     Attempt 0, 1 and 2 or more) and with every shape of Result, in sets
//     of 3, 16 and 64, so that a picker allocating on one call in two does
//     not round down to zero as testing.AllocsPerRun would. The count is of
//     the whole process, so no backend gets two failures in a row: a
//     passive health check around the picker ejects nothing, and does no
//     background work, during the count. Under the race detector, whose
//     instrumentation allocates now and then where nothing else does, one
//     allocation per hundred pairs is let through; count without -race
//     for the strict check (lbkit's .ci/test does both).
//   - Concurrent: Pick and Done in four goroutines race with Updates from
//     two; run the tests with -race for this check to find data races.
//
// A panic in a check, in the kit's goroutine or in one it starts, and a
// (nil, nil) pick, fail that check with the stack; a check that does not
// finish in a minute (a picker stuck in a loop or a deadlock) fails too.
// None of them ends the test binary. Every check starts from new
// Balancers; those that implement io.Closer (health.Balancer does) are
// closed when the check ends, so that no background work of one check runs
// into the next.
//
// Request keys are client addresses ("192.0.2.7", "[2001:db8::1]:443", ...)
// so that pickers that parse keys, such as iphash, can run the kit too.
package balancertest
