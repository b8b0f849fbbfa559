package lbhttp

import "time"

// SetLinkAfter sets how long t's attempts run before their guards
// register with the request's context (proxyLinkAfter behind NewProxy),
// for tests that cannot wait that long.
func SetLinkAfter(t *Transport, d time.Duration) { t.linkAfter = d }

// EpochOf is epochOf, for a test against a reference in math/big.
func EpochOf(t time.Time, w int64) int64 { return epochOf(t, w) }
