//go:build race

package sim_test

// raceEnabled reports whether the race detector is on. Under it the
// simulator runs about 20 times slower (246 s for this package's tests
// alone, against 13 s without), and the whole simulation is one goroutine
// per run: the race detector has little to find in a scenario run that a
// smaller one would not show. So under -race the scenario tests that run
// every algorithm run a representative of each family (raceAlgorithms),
// and .ci/test runs the package once more without -race, every
// algorithm at full size.
const raceEnabled = true
