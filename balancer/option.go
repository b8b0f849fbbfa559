package balancer

import (
	"errors"
	"fmt"
)

// ErrBadOption is wrapped by the error that reports an option or a
// configuration field given a value it does not take: a negative
// duration, a count of zero, a factor out of range, a nil function. The
// rule every lbkit package keeps (see the package doc, "Options"): a
// constructor that returns an error returns this one; a constructor that
// cannot (rr.New(opts...)) keeps it, and every Update returns it while
// the picker keeps its empty set. No value is clamped or ignored.
var ErrBadOption = errors.New("balancer: bad option")

// BadOption returns an error wrapping ErrBadOption that names a
// functional option, the value it was given, and what it takes:
//
//	balancer.BadOption("WithDecay", 500*time.Microsecond, "at least 1ms")
//	// balancer: bad option: WithDecay(500µs): want at least 1ms
//
// Packages keep the first such error of a constructor's options and
// return it, wrapped with their name, from every Update.
func BadOption(option string, value any, want string) error {
	return fmt.Errorf("%w: %s(%v): want %s", ErrBadOption, option, value, want)
}
