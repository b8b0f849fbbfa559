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
// a removed one, never Avoid when there is another), and every backend of
// the set draws some picks; Update validates the set reading each weight
// once (balancer.NewSet does both), waits for any Update already running,
// validation included, publishes before it lets the next one run, keeps
// the previous set on error, never keeps the caller's slice, takes new
// Backend values and weights for IDs it knew, and moves nothing when it
// brings the set in force again; what the picker keeps about a backend (a
// count, a latency, a place on a ring) is keyed by its ID, not by its
// position; Done, if the picker implements balancer.Feedback, is harmless
// for any backend and any Result (load reports included), learns nothing
// from a Result that measured nothing, and takes an abandoned request for
// neither a failure nor a sample. Every layer that counts requests in
// flight and says so (balancer.InFlightCounter) must count them exactly.
// A balancer.HealthUpdater keeps unhealthy backends and later priority
// levels out as its doc says. Each constructor call must return a fresh
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
// A discovery source (package discovery: lbhttp's Refresher, lbkube, the
// xDS and etcd clients) runs RunSource, with a SourceHarness that drives
// the outside system it reads: Lifecycle (one Start, ErrStarted and
// ErrClosed, Close idempotent, no goroutine left), Canonical (IDs as
// balancer.CanonicalAddr spells them), KeepsOnFailure (the last good set
// stays while the system fails, never an empty one), Empty (an empty
// listing empties the target, unless the source keeps its set by rule)
// and Closed (nothing reaches the target after Close).
//
// Cost: the kit makes a few hundred Updates per Balancer, so a Balancer
// whose Update is costly takes the longest: Maglev, which builds a
// 65,537-slot table at every Update, and most of all locality with a
// Maglev in each zone. Concurrent, Removed, Avoid, PublishOrder and Order
// make the most Updates. The conformance tests of package consistent and
// locality show how long it takes (go test -race -v, per check).
//
// # Checks
//
// The checks, each a subtest of that name:
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
//   - HealthLevels: for a balancer.HealthUpdater, over layouts of one
//     level at every healthy share above half (sets of 3 to 33) and of
//     two and three priority levels (priorities with gaps, a level of
//     one, degraded levels), backends of weight 1 spread over zones "a",
//     "b" and "c", the set shuffled: a backend marked unhealthy gets no
//     picks, first tries or retries, while more than half of its level is
//     healthy, and while every backend of the levels before priority p is
//     healthy no first try goes to priority p (retries may). A
//     HealthUpdater that gives up on health below a share other than
//     half, or spreads over the healthy backends of every level, fails.
//   - NewValues: an Update that keeps every ID but brings new Backend
//     values and new weights takes them: picks return the new values, and
//     every backend draws the share of picks (within 0.1) that a new
//     Balancer given the same set gives it.
//   - Order: an Update that brings the set in force again moves nothing,
//     whether the set comes in the same order, reversed, shuffled or as
//     new Backend values of the same IDs and weights, in sets of 6 and
//     40: the backends that draw picks stay the same (a subset picker
//     keeps its subset; judged when two looks before the Update agree), a
//     picker with key affinity keeps every key's first three attempts,
//     a backend taught to be slow (the heaviest) draws no more picks than
//     before (in the set of 6), and the counts of every
//     balancer.InFlightCounter layer stay with their IDs.
//   - Spread: every backend draws first tries, whatever its ID or its
//     position in the slice: sets of 2, 3, 8 (weights 1, and 1 to 4) and
//     33, each given in the order of its IDs, reversed and shuffled,
//     64 first tries per backend (at least 256) with varied keys, each
//     done at once with Result{}; the backends all in zone "a" at
//     priority 0, so that a picker routing by locality has no reason to
//     leave one out. A Balancer that serves a part of each set and says
//     which, through a method Subset() []string (package subset's; found
//     through Unwrap), must spread over every backend of its subset.
//     Then, for each of the load reports Results passes, a new Balancer
//     whose 8 backends all report that load (nothing else measured),
//     taught for 64 picks per backend and given the set again, must still
//     spread over all of them: a picker that weighs reports must not
//     overflow, underflow or divide its way to starving a backend.
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
//   - HashKeys: a picker that reads its backends' hash keys
//     (balancer.HashKeyer) reads them in Update, never in Pick or Done. A
//     picker with key affinity that reads them (not a decorator, which may
//     group backends by ID) places backends by them: after an Update that
//     gives every backend of 12 a new ID, in another order, with the same
//     hash key and weight, each of 400 keys reaches the backend with the
//     hash key it reached before; and an Update with two backends of one
//     placement key (two equal hash keys, or a hash key equal to another
//     backend's ID) fails with balancer.ErrDuplicateHashKey, the previous
//     set staying as it was. A picker that reads no hash key passes.
//   - DoneUnknown: Done for nil, a nil *balancer.Endpoint, unknown or
//     removed backends, with every shape of Result, is harmless.
//   - Results: Done with each shape of Result (success; failure; slow; a
//     context and a network timeout; a refused connection, the
//     *net.OpError net.Dial returns, wrapping syscall.ECONNREFUSED;
//     abandoned; unmeasured; negative latencies and the largest and
//     smallest time.Duration; and load reports at their edges, on
//     successes, a failure and an abandoned request: a utilisation
//     without a rate (a zero qps), a rate below one, a rate without a
//     utilisation, the smallest and the largest float64 in every field,
//     a tiny utilisation with a huge rate and the reverse, more errors
//     than requests, every named metric at the largest float64) neither
//     panics nor allocates, 2,000 times each, counted as Allocs counts,
//     and Pick keeps picking from the set. The other checks that pass
//     Results to Done (DoneUnknown, Allocs, InFlight, Concurrent) pass
//     these too.
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
//   - WeightsOnce: Backends whose Weight is valid when validated and
//     zero, negative or huge afterwards, first, in the middle and last of
//     sets of 5, 8, 17, 64 and 256, make neither Update nor Pick panic,
//     divide by zero, loop or allocate more than 256 MiB.
//   - NeverBlocks: Pick returns while an Update is stopped in a backend's
//     ID or Weight method: the last backend's, at each of the first 16
//     calls to it in an Update of 3 backends and of the first 4 in
//     Updates of 17 and 257; and fast: the fastest of 8 Picks made
//     then takes under 2 ms. A sound Pick takes microseconds, and a loaded
//     machine can slow some of eight Picks made back to back, not all of
//     them, while a Pick that waits on the Update takes its wait every
//     time.
//   - Serialised: an Update called while another is stopped half-way waits
//     for it (validation included), and its set is the one in place at
//     the end.
//   - PublishOrder: Updates take effect in the order they run. Updates
//     run one at a time, in the order of their first calls to one of
//     their backends' ID or Weight (made under the writers' mutex, as
//     Serialised requires), so a Pick made at an Update's first call
//     returns a backend of the set of the Update that ran before it, and
//     once concurrent Updates have returned, the set in force is that of
//     the one that ran last (not of the one that returned last: a sound
//     Update may publish, unlock and be descheduled before it returns).
//     An Update that publishes after releasing its mutex breaks both
//     when another runs in between. The check makes that happen: on one
//     processor, an Update that has waited on a sync.Mutex for over a
//     millisecond and wakes to find it taken starves the mutex, whose
//     Unlock then hands the processor to it before the unlocking Update
//     goes on (3 such hand-offs, sets of 1 to 256); then 4 rounds of three
//     concurrent Updates, a large set beside small ones, on every
//     processor.
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
//   - InFlight: every layer that is a balancer.InFlightCounter (the
//     Balancer, and each layer down a stack of decorators that is one,
//     found through their Unwrap() balancer.Picker, while Pick and Done go
//     to the top) counts exactly the requests picked from each backend and
//     not yet done, in sets of 1, 3, 8 and 65: after max(40, 2n) picks;
//     after half of their Dones, in every shape of Result; in the set of
//     8, after a storm of 12 Updates (each to 3 of the set and 32 new
//     backends, evicting idle counters) under concurrent Picks and Dones,
//     with the other requests held throughout; and every count is exactly
//     zero once every Pick has had its Done. Reading every layer catches a
//     decorator that counts for itself and drops the Done of some requests
//     instead of passing it on: its own counts are right, those inside
//     are not. A layer whose counts stay zero while requests are held (a
//     decorator around a picker that counts nothing) is not judged, and a
//     Balancer with no counting layer passes.
//   - Concurrent: Pick and Done in four goroutines race with Updates from
//     two; run the tests with -race for this check to find data races.
//
// NewValues, Abandoned and AbandonedNeutral compare a Balancer with a new
// one of the same constructor. When the two do not pick the same
// backends at all, they ask whether Balancers of the constructor pick
// alike: four new ones given the set. If those differ (a subset decorator
// that draws a random salt per instance, as gRFC A68's random subsetting
// does, serves each instance its own subset, and another instance cannot
// show what one should do), the comparison is skipped; if they agree, the
// difference is the flaw (every key sent to one backend after an Update
// that changed only weights, a backend ejected for abandoned requests)
// and is judged. NewValues still checks the values such a Balancer
// returns.

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
