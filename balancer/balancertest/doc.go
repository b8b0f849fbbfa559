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
// error, never keeps the caller's slice, and takes new Backend values and
// weights for IDs it knew; what the picker keeps about a backend (a count,
// a latency, a place on a ring) is keyed by its ID, not by its position;
// Done, if the picker implements balancer.Feedback, is harmless for any
// backend and any Result, learns nothing from a Result that measured
// nothing, and takes an abandoned request for neither a failure nor a
// sample. A picker that counts requests in flight and says so
// (balancer.InFlightCounter) must count them exactly. Each constructor
// call must return a fresh Balancer: every check starts from one.
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
// The kit takes one to two seconds per Balancer under -race on a 2-core
// machine at a load of 3 (consistent's Ring: 1.9 s), several times that on
// a busier one. Maglev, whose Update builds a 65,537-slot table, takes
// the longest, 7 s there (18 s at a load of 20), most of it in
// Concurrent, Removed and Avoid, which make 24, 28 and 22 Updates.
//
// # Checks
//
// The 21 checks, each a subtest of that name:
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
//     to catch a picker that errs once in 10,000 picks in 19 runs of 20,
//     then runs 22 more Updates on the same Balancer, over sets of 1 to 256
//     backends that each keep about half of the set before, so that a flaw
//     that shows only in large sets or after many Updates shows too.
//   - InvalidUpdate: a nil backend, a nil pointer, an empty or duplicate ID, a
//     weight outside [1, MaxWeight], a priority outside [0, MaxPriority]
//     are refused with an error wrapping the matching sentinel, and the
//     previous set stays in use.
//   - Slice: Update neither modifies the caller's slice (no sorting in
//     place) nor keeps it, at every size.
//   - HealthUpdate: for a balancer.HealthUpdater (package locality's
//     Balancer; any other Balancer passes at once), a backend marked
//     unhealthy while the other seven of eight are healthy is never
//     picked, first tries and retries; UpdateHealth keeps neither the
//     caller's set nor its health flags; health flags of another length
//     than the set, or an invalid set, are refused and leave the previous
//     set and health in place; and Update means every backend healthy:
//     the backend marked unhealthy is picked again.
//   - NewValues: an Update that keeps every ID but brings new Backend
//     values and new weights takes them: picks return the new values, and
//     every backend draws the share of picks (within 0.1) that a new
//     Balancer given the same set gives it.
//   - Order: the same set given again in reverse order moves nothing: a
//     picker with key affinity keeps every key's first three attempts, a
//     backend taught to be slow draws no more picks than before, and the
//     counts of a balancer.InFlightCounter stay with their IDs.
//   - Avoid: a request whose Avoid names a backend gets another one when the
//     set has another one, at every Attempt, and the only one otherwise,
//     through a run of 22 Updates over sets of 1 to 256 backends on one
//     Balancer.
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
//   - Results: Done with each shape of Result (success; failure; slow; a
//     context and a network timeout; a refused connection, the
//     *net.OpError net.Dial returns, wrapping syscall.ECONNREFUSED;
//     abandoned; unmeasured; negative latencies and the largest and
//     smallest time.Duration) neither panics nor allocates, 2,000 times
//     each, counted as Allocs counts, and Pick keeps picking from the set.
//   - Abandoned: Results that carry no measurement (balancer.ErrAbandoned,
//     context.Canceled, the zero Result) teach nothing: a backend whose
//     every request is abandoned does not draw more than twice its share.
//   - AbandonedNeutral: nor are abandoned Results failures or latency
//     samples, whatever latency they carry: a backend whose every request
//     is abandoned after a long wait (5 s to the largest time.Duration, a
//     refused connection in one's chain) draws at least half the picks it
//     draws when its requests end unmeasured, less 1/32 of all picks for
//     noise. A learner that took the wait for a sample, or a passive
//     health check that counted it as a failure and ejected, would not.
//   - WeightsOnce: a Backend whose Weight is valid when validated and zero,
//     negative or huge afterwards makes neither Update nor Pick panic,
//     divide by zero, loop or allocate more than 256 MiB.
//   - NeverBlocks: Pick returns while an Update is stopped in a backend's
//     ID or Weight method, at each of the first 16 calls Update makes,
//     and fast: the fastest of 8 Picks made then takes under 2 ms. A sound
//     Pick takes microseconds, and a loaded machine can slow some of eight
//     Picks made back to back, not all of them, while a Pick that waits on
//     the Update takes its wait every time.
//   - Serialised: an Update called while another is stopped half-way waits
//     for it (validation included), and its set is the one in place at
//     the end.
//   - Allocs: Pick followed by Done allocates nothing, over 2,000 pairs for
//     each request shape (no key, a key, Avoid with Attempt 0, 1 and 2 or
//     more) with every shape of Result but the refused connection (on
//     which a passive health check ejects at once: Results has it), in
//     sets of 3, 16 and 64. Every allocation under Pick or Done counts, as
//     the heap profile records it (runtime.MemProfileRate is 1 while the
//     kit counts, and restored after), in total over the check, so that
//     one allocation in 30,000 pairs fails, with or without -race, and the
//     error names where it was made. Allocations elsewhere in the process
//     do not count, and neither does the runtime growing the cache of a
//     type assertion (in errors.Is, say) for an error type it meets: what
//     the race detector was once thought to allocate. Each shape also
//     needs one round of 2,000 pairs in which the whole process allocates
//     nothing, within 10 rounds, so that allocations the profile misses
//     (under 16 bytes, without pointers) are caught when they are
//     frequent. No backend gets two failures in a row, so that a passive
//     health check around the picker does no background work.
//   - InFlight: for a balancer.InFlightCounter (the Balancer, or the
//     first layer that is one down a stack of decorators, found through
//     their Unwrap() balancer.Picker, while Pick and Done go to the top),
//     InFlight(id) is exactly the number of requests picked from that
//     backend and not yet done: after 40 picks; after 20 of their Dones,
//     in every shape of Result; after a storm of 12 Updates (each to 3 of
//     the set and 32 new backends, evicting idle counters) under
//     concurrent Picks and Dones, with the other 20 requests held
//     throughout; and every count is exactly zero once every Pick has had
//     its Done. A Balancer with no such layer, or whose counts stay zero
//     while requests are held (a decorator around a picker that counts
//     nothing), passes.
//   - Concurrent: Pick and Done in four goroutines race with Updates from
//     two; run the tests with -race for this check to find data races.
//
// NewValues, Abandoned and AbandonedNeutral compare a Balancer with a new
// one of the same constructor. They skip the comparison when the two do
// not pick the same backends at all: a subset decorator that draws a
// random salt per instance, as gRFC A68's random subsetting does, serves
// each instance its own subset, and another instance cannot show what one
// should do. What the checks look for changes how often a backend is
// picked, not whether: every weight is at least 1, and a learner picks a
// backend once before it learns anything. NewValues still checks the
// values such a Balancer returns.
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
