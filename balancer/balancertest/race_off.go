//go:build !race

package balancertest

// raceEnabled reports whether the race detector is on; see race_on.go.
const raceEnabled = false
