package health

import (
	"fmt"
	"time"
)

// State is what health makes of one backend. When several conditions hold
// at once, the first in this order is reported: Maintenance, Draining,
// Down, Ejected, Up.
type State uint8

const (
	// Up: eligible; the inner picker has it.
	Up State = iota
	// Ejected: taken out by passive checks until its ejection time ends or
	// its probes pass Rise times.
	Ejected
	// Down: taken out by active checks until its probes pass Rise times.
	Down
	// Draining: taken out by Drain; requests in flight finish, probes go on.
	Draining
	// Maintenance: taken out by Maintenance; probes are paused.
	Maintenance
)

var stateNames = [...]string{"up", "ejected", "down", "draining", "maintenance"}

// String returns the state's lower-case name.
func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// Reason says why a backend's state changed.
type Reason uint8

const (
	// ReasonNone is the reason of a backend that has not changed state
	// since it joined the set.
	ReasonNone Reason = iota
	// ReasonProbe: active probes failed Fall times, or passed Rise times.
	ReasonProbe
	// ReasonRefused: a request's connection was refused.
	ReasonRefused
	// ReasonFailures: ConsecutiveFailures requests in a row failed.
	ReasonFailures
	// ReasonEjectionEnded: the ejection time ran out.
	ReasonEjectionEnded
	// ReasonAdmin: Drain, Maintenance or Enable.
	ReasonAdmin
	// ReasonTrial: a request to a backend on trial after an ejection
	// failed (see Config.NoTrial).
	ReasonTrial
	// ReasonSource: the set's source said the backend is unhealthy, or
	// healthy again, through UpdateHealth (an xDS control plane's
	// health_status, say).
	ReasonSource
	// ReasonFailureRate: the backend's share of failed requests in one
	// interval reached FailureRateCheck.Threshold (see Config.FailureRate).
	ReasonFailureRate
)

var reasonNames = [...]string{"none", "probe", "connection refused", "consecutive failures", "ejection ended", "admin", "trial failed", "source", "failure rate"}

// String returns a short description of the reason.
func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// Change is one change of a backend's state, as passed to Config.OnChange.
type Change struct {
	ID       string
	Old, New State
	Reason   Reason
	// Err is the failing probe's error for ReasonProbe towards Down, the
	// request's error for ReasonRefused, ReasonFailures and ReasonTrial,
	// one that gives the counts for ReasonFailureRate, else nil.
	Err error
	// At is the Clock's time when the change was applied.
	At time.Time
	// Until is when an ejection ends, for a change to Ejected.
	Until time.Time
}

// String formats the change for a log line.
func (c Change) String() string {
	s := fmt.Sprintf("%s: %s -> %s (%s)", c.ID, c.Old, c.New, c.Reason)
	if c.Err != nil {
		s += ": " + c.Err.Error()
	}
	return s
}

// Status is one backend's state in a View.
type Status struct {
	ID    string
	State State
	// Reason and Since tell why and when State was last entered.
	Reason Reason
	Since  time.Time
	// InSet reports whether the inner picker has this backend: the
	// eligible ones, or in panic mode every backend not drained or in
	// maintenance. An inner balancer.HealthUpdater (package locality) has
	// every backend not drained or in maintenance, told which are
	// eligible.
	InSet bool
	// ProbeUp is the active checks' verdict (true without probes unless
	// Config.InitialDown).
	ProbeUp bool
	// Ejections is the multiplier of the next ejection's time, less one:
	// how many ejections in a row the backend has had, decayed while it
	// stays in.
	Ejections int
	// EjectedUntil is when the current ejection ends; zero if not ejected.
	EjectedUntil time.Time
	// Ramp is the slow-start factor, in (0, 1]: 1 when not ramping up.
	Ramp float64
	// Trial reports that the backend is back from an ejection on trial:
	// it takes one request at a time until one succeeds (see
	// Config.NoTrial).
	Trial bool
	// LastProbeErr is the error of the last failing probe since the last
	// passing one, or nil.
	LastProbeErr error
}

// View is a read-only snapshot of a Balancer's state.
type View struct {
	// Backends holds every backend of the set, in the order given to Update.
	Backends []Status
	// Panic reports that no backend is eligible, so the inner picker has
	// every backend not drained or in maintenance. It is always false
	// for an inner balancer.HealthUpdater, which panics by its own rule.
	Panic bool
	// InnerErr is the error of the last inner Update the Balancer made on
	// its own (from Apply or the applier), if it failed: the inner picker
	// then still has its previous set, until the next change. nil otherwise.
	InnerErr error
}
