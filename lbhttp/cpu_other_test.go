//go:build !unix

package lbhttp_test

import "time"

// processCPU reports that this system gives no process CPU time.
func processCPU() (time.Duration, bool) { return 0, false }
