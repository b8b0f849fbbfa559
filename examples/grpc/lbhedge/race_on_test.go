//go:build race

package lbhedge_test

// raceEnabled reports whether the race detector is on. Under it,
// sync.Pool drops a share of what is put back, so the Interceptor makes a
// race record (and its timer) anew now and then where it reuses one
// without it; TestAllocs asserts its counts only without -race
// (.ci/test runs it both ways).
const raceEnabled = true
