package balancer

import (
	"fmt"
	"reflect"
)

// Validate checks a set before it is published: no nil backends (nor nil
// pointers typed as Backend), no empty or duplicate IDs, and every weight in
// [1, MaxWeight]. Weight 0 is refused rather than read as "drain": to stop
// sending to a backend, remove it from the set.
//
// The error wraps ErrNilBackend, ErrEmptyID, ErrDuplicateID or ErrBadWeight
// and names the position and ID at fault. Every Update in lbkit calls
// Validate first; pickers written outside lbkit should too.
//
// Cost: O(n) with one map of the IDs.
func Validate(bs []Backend) error {
	seen := make(map[string]int, len(bs))
	for i, b := range bs {
		if isNil(b) {
			return fmt.Errorf("%w at position %d", ErrNilBackend, i)
		}
		id := b.ID()
		if id == "" {
			return fmt.Errorf("%w at position %d", ErrEmptyID, i)
		}
		if j, dup := seen[id]; dup {
			return fmt.Errorf("%w %q at positions %d and %d", ErrDuplicateID, id, j, i)
		}
		seen[id] = i
		if w := WeightOf(b); w < 1 || w > MaxWeight {
			return fmt.Errorf("%w: %q at position %d has weight %d, want 1 to %d",
				ErrBadWeight, id, i, w, MaxWeight)
		}
	}
	return nil
}

// isNil reports whether b is nil or holds a nil pointer, map, func, chan or
// slice, whose ID method would likely panic. Update is not a hot path, so
// reflection is acceptable here.
func isNil(b Backend) bool {
	if b == nil {
		return true
	}
	v := reflect.ValueOf(b)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Func, reflect.Chan, reflect.Slice, reflect.Interface:
		return v.IsNil()
	}
	return false
}
