//go:build race

package health_test

// raceEnabled reports whether the race detector is on. Under it the
// conformance runs take one algorithm of each family inside the
// decorator (conformanceAlgorithms): the race detector looks at the
// decorator's code, which every algorithm drives alike, and each
// algorithm's own package runs the kit on it under -race. .ci/test's
// allocation pass runs TestConformance without -race over every
// algorithm.
const raceEnabled = true
