package balancer

import (
	"errors"
	"fmt"
)

// ErrDuplicateHashKey reports two backends of one set that would take the
// same place on a hash picker's ring or table: the same hash key, or one's
// hash key equal to the other's ID when the other has none (see
// HashKeys).
var ErrDuplicateHashKey = errors.New("balancer: duplicate hash key")

// HashKeyer is implemented by backends that give the hash pickers
// (package consistent) their own placement key, instead of their ID:
// a backend whose address changes (a Kubernetes StatefulSet pod
// rescheduled, a VM given a new IP) but whose key stays keeps its place on
// the ring or table, and so its keys. This is Envoy's ring_hash and
// Maglev hash_key (the "envoy.lb" metadata of an EDS endpoint) and gRPC's
// endpoint hash key (gRFC A76). The ID stays what Done, Avoid and
// per-backend state use; only the placement changes.
//
// Pickers read it with HashKeys once per Update, as weights are read;
// the empty key, and a Backend that does not implement HashKeyer, mean
// the ID. Endpoint implements it (WithHashKey); discovery sources fill it
// from the system's metadata.
type HashKeyer interface {
	HashKey() string
}

// HashKeyOf returns b's placement key: b.HashKey() if b is a HashKeyer
// and that is not empty, else b.ID().
func HashKeyOf(b Backend) string {
	if h, ok := b.(HashKeyer); ok {
		if k := h.HashKey(); k != "" {
			return k
		}
	}
	return b.ID()
}

// HashKeys returns the placement key of each backend of a validated set,
// keys[i] for s.Backends[i]: its hash key (HashKeyer), read once, or
// s.IDs[i] when it has none. Two backends with the same placement key
// would share every point of the ring, so HashKeys refuses them with an
// error wrapping ErrDuplicateHashKey that names both; a hash picker's
// Update returns it and keeps its previous set. A set without hash keys
// gets s.IDs itself, which Validate made unique.
//
// Cost: O(n): one type assertion per backend, and a map of the keys and
// a slice of n when some backend has a hash key.
func HashKeys(s Set) ([]string, error) {
	var keys []string
	for i, b := range s.Backends {
		h, ok := b.(HashKeyer)
		if !ok {
			continue
		}
		if k := h.HashKey(); k != "" {
			if keys == nil {
				keys = append([]string(nil), s.IDs...)
			}
			keys[i] = k
		}
	}
	if keys == nil {
		return s.IDs, nil
	}
	seen := make(map[string]int, len(keys))
	for i, k := range keys {
		if j, dup := seen[k]; dup {
			return nil, fmt.Errorf("%w %q: backends %q (position %d) and %q (position %d); a backend without a hash key is placed by its ID",
				ErrDuplicateHashKey, k, s.IDs[j], j, s.IDs[i], i)
		}
		seen[k] = i
	}
	return keys, nil
}
