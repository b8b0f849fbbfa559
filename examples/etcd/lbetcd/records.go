package lbetcd

import (
	"fmt"
	"slices"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/discovery"
)

// Problem is a key the Watcher skipped, and why.
type Problem struct {
	// Key is the etcd key.
	Key string
	// Err wraps ErrBadRecord: the value's fault, or
	// balancer.ErrDuplicateID for an address another key also holds.
	Err error
}

// String returns "key: error".
func (p Problem) String() string { return p.Key + ": " + p.Err.Error() }

// record is one key's value, parsed.
type record struct {
	ep  discovery.Endpoint // the key's last good endpoint
	id  string             // ep's canonical ID; "" if the key never held one
	rev int64              // the ModRevision of ep's write
	err error              // why the key's value is no endpoint, or nil
}

// records is the Watcher's view of the prefix: every key, parsed once,
// when it is written. It is owned by one goroutine.
type records struct {
	format Format
	byKey  map[string]record
}

func newRecords(f Format, n int) *records {
	return &records{format: f, byKey: make(map[string]record, n)}
}

// put records key's value, written at revision rev. A value that is no
// endpoint, written over one that was, leaves the key's last good record
// in use (a bad write changes nothing but the report); from is where that
// record is looked up (rs itself, or the records a list replaces), or nil.
func (rs *records) put(from *records, key string, value []byte, rev int64) {
	e, err := Parse(rs.format, value)
	if err != nil {
		var r record
		if from != nil {
			r = from.byKey[key]
		}
		if r.id == "" {
			rs.byKey[key] = record{rev: rev, err: err}
			return
		}
		r.err = fmt.Errorf("%w (its last good record, %s, stays in use)", err, r.id)
		rs.byKey[key] = r
		return
	}
	id, _ := e.ID() // Parse checked it
	rs.byKey[key] = record{ep: e, id: id, rev: rev}
}

// del forgets key.
func (rs *records) del(key string) { delete(rs.byKey, key) }

// endpoints returns the endpoint of each key that holds one or held one
// last (see put), in the order of the keys, and the problems of the
// keys, sorted by key. An address
// held by two keys (a backend registered again under a new key while its
// old one waits for its lease to expire) is one endpoint, the record of
// the key written last; the other key is a problem.
//
// Cost: O(k log k) for k keys, and a slice of each.
func (rs *records) endpoints() ([]discovery.Endpoint, []Problem) {
	keys := make([]string, 0, len(rs.byKey))
	for k := range rs.byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	// The key that holds each address: the one written last, or of two
	// written in one transaction, the first in key order.
	best := make(map[string]string, len(keys))
	for _, k := range keys {
		r := rs.byKey[k]
		if b, ok := best[r.id]; r.id != "" && (!ok || r.rev > rs.byKey[b].rev) {
			best[r.id] = k
		}
	}
	eps := make([]discovery.Endpoint, 0, len(best))
	var problems []Problem
	for _, k := range keys {
		r := rs.byKey[k]
		if r.err != nil {
			problems = append(problems, Problem{Key: k, Err: r.err})
		}
		switch {
		case r.id == "":
		case best[r.id] != k:
			problems = append(problems, Problem{Key: k, Err: fmt.Errorf("%w: %w: %s is also under %q, the key written last", ErrBadRecord, balancer.ErrDuplicateID, r.id, best[r.id])})
		default:
			eps = append(eps, r.ep)
		}
	}
	return eps, problems
}
