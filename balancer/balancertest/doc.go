// Package balancertest is a conformance kit for pickers: one call checks that
// a balancer.Balancer, lbkit's or your own, keeps the contracts of package
// balancer. It is to pickers what testing/fstest is to file systems.
//
// From a test:
//
//	func TestConformance(t *testing.T) {
//		balancertest.Run(t, func() balancer.Balancer { return mypicker.New() })
//	}
//
// The checks, each a subtest of that name:
//
//   - Empty: before any Update, and after an empty one, Pick returns
//     balancer.ErrNoBackend and a nil backend.
//   - InSet: every pick is in the current set, for sets of 1 to 64 backends,
//     with and without weights, with requests in flight.
//   - Removed: once Update returns, a removed backend is never picked, even
//     while requests to it are still in flight.
//   - InvalidUpdate: a nil backend, a nil pointer, an empty or duplicate ID, a
//     weight outside [1, MaxWeight] are refused with an error wrapping the
//     matching sentinel, and the previous set stays in use.
//   - NoRetain: overwriting the slice passed to Update changes nothing.
//   - Avoid: a request whose Avoid names a backend gets another one when the
//     set has another one, and the only one otherwise.
//   - DoneUnknown: Done for nil, unknown or removed backends is harmless.
//   - Allocs: Pick followed by Done allocates nothing (testing.AllocsPerRun).
//   - Concurrent: Pick and Done in four goroutines race with Update; run the
//     tests with -race for this check to find data races.
//
// Request keys are client addresses ("192.0.2.7", "[2001:db8::1]:443", ...)
// so that pickers that parse keys, such as iphash, can run the kit too.
//
// Test returns the failures as an error instead, for use outside a
// *testing.T or to check that a deliberately broken picker fails.
package balancertest
