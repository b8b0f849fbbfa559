//go:build race

package lbhttp_test

import "testing"

// skipCountUnderRace ends an allocation test under -race once its code
// has run (so the race detector has seen it), logging the count it got.
// Under -race sync.Pool drops a quarter of what is put back, on purpose,
// so the Transport makes a guard anew now and then where it reuses one
// without it: the count is then a random variable with no bound a test
// could hold (a +3 allowance failed once in CI at +4). .ci/test runs every
// allocation test again without -race, where the counts are exact and
// asserted.
func skipCountUnderRace(t *testing.T, got float64) {
	t.Helper()
	t.Skipf("allocation count %v under -race: asserted only without it (.ci/test's allocation pass)", got)
}
