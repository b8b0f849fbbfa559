//go:build race

package main

// raceEnabled reports whether the race detector is on. Under it the
// simulator runs many times slower, and regenerating docs/results.md
// takes minutes of CPU where it takes seconds without: TestResultsFile
// compares the whole file only without -race (.ci/test runs it so).
const raceEnabled = true
