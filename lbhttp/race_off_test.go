//go:build !race

package lbhttp_test

import "testing"

// skipCountUnderRace does nothing without -race: see race_on_test.go.
func skipCountUnderRace(*testing.T, float64) {}
