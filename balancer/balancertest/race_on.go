//go:build race

package balancertest

// raceEnabled reports whether the race detector is on. Its instrumentation
// makes a few allocations of its own on paths that make none without it
// (seen in errors.Is on a Done path), so Allocs allows a trace of them
// under -race; see checkAllocs.
const raceEnabled = true
