package balancer

import (
	"fmt"
	"reflect"
)

// Validate checks a set before it is published: no nil backends (nor nil
// pointers typed as Backend), no empty or duplicate IDs, every weight in
// [1, MaxWeight] and every priority (see Locality) in [0, MaxPriority].
// Weight 0 is refused rather than read as "drain": to stop sending to a
// backend, remove it from the set.
//
// The error wraps ErrNilBackend, ErrEmptyID, ErrDuplicateID, ErrBadWeight
// or ErrBadLocality and names the position and ID at fault. Every Update in lbkit validates
// through NewSet, which checks the same and also returns the IDs and
// weights it read, under the mutex that serialises its Updates; pickers
// written outside lbkit should do the same.
//
// Cost: that of NewSet, whose copy it drops: O(n), one map of the IDs and
// four slices of n.
func Validate(bs []Backend) error {
	_, err := NewSet(bs)
	return err
}

// Set is a validated copy of a set of backends, with each backend's ID,
// weight and locality read exactly once. Build a picker's snapshot from it, not from the
// caller's slice: the copy is the picker's own (Update must not keep or
// modify the caller's slice), and a weight read once cannot change between
// validation and use, so a Backend whose Weight answers differently on each
// call cannot slip a zero or a negative weight past Validate.
type Set struct {
	// Backends are the caller's backends, in the caller's order, in a slice
	// of the Set's own.
	Backends []Backend
	// IDs[i] is Backends[i].ID().
	IDs []string
	// Weights[i] is Backends[i]'s weight (see WeightOf), in [1, MaxWeight].
	Weights []int
	// Localities[i] is Backends[i]'s locality (see LocalityOf), its
	// priority in [0, MaxPriority].
	Localities []Locality
}

// NewSet validates bs as Validate does and returns the validated copy. On
// error the Set is empty.
//
// Cost: O(n), one map of the IDs and four slices of n.
func NewSet(bs []Backend) (Set, error) {
	s := Set{
		Backends:   make([]Backend, len(bs)),
		IDs:        make([]string, len(bs)),
		Weights:    make([]int, len(bs)),
		Localities: make([]Locality, len(bs)),
	}
	seen := make(map[string]int, len(bs))
	for i, b := range bs {
		if isNil(b) {
			return Set{}, fmt.Errorf("%w at position %d", ErrNilBackend, i)
		}
		id := b.ID()
		if id == "" {
			return Set{}, fmt.Errorf("%w at position %d", ErrEmptyID, i)
		}
		if j, dup := seen[id]; dup {
			return Set{}, fmt.Errorf("%w %q at positions %d and %d", ErrDuplicateID, id, j, i)
		}
		seen[id] = i
		w := WeightOf(b)
		if w < 1 || w > MaxWeight {
			return Set{}, fmt.Errorf("%w: %q at position %d has weight %d, want 1 to %d",
				ErrBadWeight, id, i, w, MaxWeight)
		}
		l := LocalityOf(b)
		if l.Priority < 0 || l.Priority > MaxPriority {
			return Set{}, fmt.Errorf("%w: %q at position %d has priority %d, want 0 to %d",
				ErrBadLocality, id, i, l.Priority, MaxPriority)
		}
		s.Backends[i], s.IDs[i], s.Weights[i], s.Localities[i] = b, id, w, l
	}
	return s, nil
}

// Len returns the number of backends.
func (s Set) Len() int { return len(s.Backends) }

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
