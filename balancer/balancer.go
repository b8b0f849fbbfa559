package balancer

import (
	"context"
	"errors"
	"time"
)

// Errors shared by every picker. Pick returns ErrNoBackend itself (never a
// wrapped copy, so that Pick allocates nothing); Update and the helpers here
// wrap the others with %w and say which backend is at fault, so test them
// with errors.Is.
var (
	// ErrNoBackend is returned by Pick when the set is empty.
	ErrNoBackend = errors.New("balancer: no backend available")
	// ErrNilBackend reports a nil Backend, or a nil pointer stored in one, in an update.
	ErrNilBackend = errors.New("balancer: nil backend")
	// ErrEmptyID reports a backend whose ID is the empty string.
	ErrEmptyID = errors.New("balancer: empty backend ID")
	// ErrDuplicateID reports two backends with the same ID in one update.
	ErrDuplicateID = errors.New("balancer: duplicate backend ID")
	// ErrBadWeight reports a weight outside [1, MaxWeight].
	ErrBadWeight = errors.New("balancer: weight out of range")
	// ErrBadAddr reports an address given as text that is not host:port
	// with a port from 1 to 65535, or whose host is neither an IP address
	// nor a name (see CanonicalAddr).
	ErrBadAddr = errors.New("balancer: bad address")
	// ErrBadKey reports an affinity key a picker cannot use, such as a
	// client address that does not parse.
	ErrBadKey = errors.New("balancer: bad affinity key")
	// ErrAbandoned marks the Result of a request the caller gave up on
	// before the backend's answer was known: the client went away, or its
	// context was cancelled. Pass Result{Err: ErrAbandoned} (or any error
	// wrapping it or context.Canceled) to Done for such a request. See
	// Result.Abandoned.
	ErrAbandoned = errors.New("balancer: request abandoned")
	// ErrBadLoad reports a load report (see Load) that does not parse or
	// holds a value out of range.
	ErrBadLoad = errors.New("balancer: bad load report")
	// ErrUnknownBackend reports an ID given to an Admin method (Drain,
	// Maintenance, Enable) that is not in the picker's current set.
	ErrUnknownBackend = errors.New("balancer: unknown backend")
)

// MaxWeight is the largest weight Validate accepts. The bound keeps sums of
// weights and weight-proportional tables (wrr's schedule, consistent's ring)
// far from overflow; algorithms that build tables reduce weights further, as
// their docs say.
const MaxWeight = 1_000_000

// Backend is one upstream: a server address, a gRPC SubConn, anything a
// request can be sent to.
//
// ID must be stable for the life of the backend and unique within a set;
// per-backend state (in-flight counts, latency estimates, health) is keyed
// by it and carried across updates, and hash pickers place a backend by it,
// so the same ID maps the same keys in every process. An address such as
// "10.0.0.1:8080" is the usual choice.
//
// A Backend may also implement Weighter. Endpoint is a ready implementation.
type Backend interface {
	ID() string
}

// Weighter is implemented by backends that carry a weight. Algorithms that
// use weights (wrr, leastconn, iphash, consistent) read it with WeightOf once per
// Update; a Backend that does not implement Weighter weighs 1.
type Weighter interface {
	// Weight returns the backend's relative capacity, in [1, MaxWeight].
	Weight() int
}

// WeightOf returns b's weight: b.Weight() if b is a Weighter, else 1. It does
// not validate; Validate does.
func WeightOf(b Backend) int {
	if w, ok := b.(Weighter); ok {
		return w.Weight()
	}
	return 1
}

// Request describes one selection. It is a small value passed by copy; a
// Picker must not keep it.
type Request struct {
	// Key is the affinity key: the client address for iphash, any string
	// (session ID, user ID, URL path) for consistent. Pickers without
	// affinity ignore it.
	Key string

	// Attempt is 0 for a request's first try and n for its n-th retry. Hash
	// pickers return the n-th distinct backend after the key's own, walking
	// their ring or table, so that each retry of one key reaches a different
	// backend, and the same one in every process. Other pickers ignore it.
	Attempt int

	// Avoid, when not empty, is the ID of a backend to skip, usually the one
	// the previous attempt failed on. Every picker returns another backend
	// when the set holds one; with a single backend it returns that one, and
	// the caller decides whether to send.
	Avoid string

	// Route, when not empty, names the set of backends the request asks
	// for, by the value of a label ("canary", "v2"): package route sends
	// it to the backends whose label has that value, and falls back by its
	// policy when there are none. Pickers other than route ignore it.
	Route string

	// Prefer, when not empty, is the ID of a backend the request would
	// rather go to: the one its session is pinned to (lbhttp's sticky
	// cookie). Package sticky returns that backend when it is in its set,
	// which health keeps to the eligible ones, and otherwise picks as if
	// Prefer were empty. Pickers other than sticky ignore it; a retry
	// leaves it empty, so that it moves on.
	Prefer string
}

// Result is what the caller learned from one request to a picked backend.
// What to pass, case by case:
//
//   - The backend answered and the caller counts it a success:
//     Result{Latency: d}, d measured from sending the request to the end of
//     the response.
//   - It failed (a transport error, a timeout, a 5xx the caller counts as a
//     failure): Result{Latency: d, Err: err}, d measured up to the failure.
//     A timeout (context.DeadlineExceeded) is a failure: the backend was
//     too slow.
//   - The caller gave up before the outcome was known (the client went
//     away, its context was cancelled): Result{Err: ErrAbandoned}, or any
//     error wrapping ErrAbandoned or context.Canceled. The request leaves
//     the in-flight count; nothing is learned about the backend: no latency
//     sample, and not a failure for health checks.
//   - Nothing was measured: Result{}. The request leaves the in-flight
//     count and no latency sample is taken (a zero or negative Latency is
//     never a sample); health counts it as a success.
type Result struct {
	// Latency is the time from sending the request to the response, or to
	// the failure. Zero means not measured.
	Latency time.Duration
	// Err is nil on success. Otherwise it is the transport error or an error
	// the caller made for a response it counts as a failure (a 5xx, say).
	// Health's passive checks look for a refused connection with
	// errors.Is(err, syscall.ECONNREFUSED).
	Err error
	// Load is the backend's own report of its load, when the answer
	// carried one (an ORCA endpoint-load-metrics header or trailer); the
	// zero Load otherwise. It may come with any of the cases above, an
	// abandoned request's too when the answer had begun: what it says is
	// the backend's, not the caller's. Pickers that weigh by reports
	// (wrr's Reported, leastconn's WithReports) read it; the others
	// ignore it. See Load.
	Load Load
}

// Abandoned reports whether r is for a request the caller gave up on: its
// Err wraps ErrAbandoned or context.Canceled. Learners take no sample from
// such a Result and health does not count it as a failure.
//
// Cost: nothing when Err is nil; otherwise two walks of Err's chain, with
// no allocation.
func (r Result) Abandoned() bool {
	return r.Err != nil && (errors.Is(r.Err, ErrAbandoned) || errors.Is(r.Err, context.Canceled))
}

// Sample reports whether r carries a latency worth learning from: it was
// not abandoned and its Latency is positive. Pickers that learn latency
// (lrt) and anything else that averages it (metrics) skip Results for
// which it is false.
func (r Result) Sample() bool {
	return r.Latency > 0 && !r.Abandoned()
}

// Picker selects a backend for a request.
//
// Pick never blocks, takes no lock and allocates nothing, so it is safe and
// cheap to call from any number of goroutines. It returns ErrNoBackend when
// the set is empty, and may return another error (wrapping ErrBadKey) when
// the request cannot be served as asked, never a nil Backend with a nil error.
type Picker interface {
	Pick(Request) (Backend, error)
}

// Feedback is implemented by pickers and decorators that learn from finished
// requests: in-flight counting (leastconn, consistent's bounded loads, lrt),
// latency estimates (lrt), passive health checks.
//
// Call Done exactly once for every backend Pick returned, when the request
// to it has finished, failed or been abandoned (see Result for what to pass
// in each case): for an HTTP request, when the response body has been read
// to the end or closed, not when the headers arrive, so that a slow or
// streamed body still counts as in flight. Done for a backend that has
// since left the set, or was never in it, or for nil, is harmless. Find
// Feedback with a type assertion, once, when wiring:
//
//	fb, _ := picker.(balancer.Feedback) // nil if the picker learns nothing
type Feedback interface {
	Done(Backend, Result)
}

// InFlightCounter is implemented by pickers that count the requests in
// flight on each backend (leastconn, lrt, consistent's Ring with bounded
// loads) and by decorators that pass the count on from the picker they
// wrap (health). It is for observability (metrics, tests, an admin page)
// and for the conformance kit, which checks through it that counts follow
// IDs and come back to exactly zero. Find it with a type assertion, as
// Feedback:
//
//	c, ok := picker.(balancer.InFlightCounter)
type InFlightCounter interface {
	// InFlight returns the number of requests to the backend with this
	// ID that Pick has counted and Done has not yet counted down, never
	// below zero. A removed backend reports its count while requests to
	// it are in flight. An unknown ID reports 0, and so does every ID of
	// a picker that counts nothing (a Ring without bounded loads, a
	// decorator around a picker that does not count). It allocates
	// nothing and takes no lock.
	InFlight(id string) int64
}

// Updater replaces the set of backends a picker chooses from.
//
// Update validates the whole set first (see Validate); on error it returns
// it and the previous set stays in use. On success it publishes an immutable
// snapshot, and every Pick that starts after Update returns sees the new set.
// Update does not keep the caller's slice: changing it afterwards has no
// effect. An empty or nil set is valid; Pick then returns ErrNoBackend.
// Calls to Update are serialised; they never block Pick.
type Updater interface {
	Update([]Backend) error
}

// Balancer is a Picker whose set can be replaced. Every algorithm in lbkit is
// one, and so is the health decorator.
type Balancer interface {
	Picker
	Updater
}
