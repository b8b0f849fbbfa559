//go:build race

package lbhttp_test

// raceEnabled reports whether the race detector is on. Under it,
// sync.Pool drops a share of what is put back (on purpose, to shake out
// code that relies on getting it back), so the Transport makes a guard
// anew now and then where it reuses one without it; the allocation tests
// allow for that under -race and are exact without it (.ci/test runs them
// both ways).
const raceEnabled = true
