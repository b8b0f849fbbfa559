package health

import (
	"fmt"
	"time"
)

// Drain takes the backend out of the inner picker's set gently: it gets
// no new requests, those in flight finish, and its probes go on. Enable
// brings it back. Drain returns an error wrapping ErrUnknownBackend if id
// is not in the set. The state survives Update while the backend stays.
//
// Drain, Maintenance and Enable for a backend in the set apply everything
// pending or due before they return, as Apply does, whether or not the
// backend's own state changes.
func (h *Balancer) Drain(id string) error { return h.setAdmin(id, Draining) }

// Maintenance takes the backend out as Drain does and also pauses its
// probes; results fed to Observe are ignored. Enable brings it back.
func (h *Balancer) Maintenance(id string) error { return h.setAdmin(id, Maintenance) }

// Enable ends Drain or Maintenance. The backend returns if its probes and
// passive checks allow, ramping up under slow start.
func (h *Balancer) Enable(id string) error { return h.setAdmin(id, Up) }

func (h *Balancer) setAdmin(id string, a State) error {
	h.mu.Lock()
	n := h.cur.Load().byID[id]
	if n == nil {
		h.mu.Unlock()
		return fmt.Errorf("%w %q", ErrUnknownBackend, id)
	}
	now := h.s.clock.Now()
	if n.admin != a {
		n.admin = a
		n.setFlag(flagMaint, a == Maintenance)
		if a == Maintenance {
			h.stopProber(n)
		} else {
			h.startProber(n)
		}
		h.note(n, now, ReasonAdmin, nil, time.Time{})
	}
	h.applyLocked(now) // what is pending or due, whether or not n changed
	h.mu.Unlock()
	h.deliver()
	h.poke()
	return nil
}

// InFlight returns the inner picker's count of requests in flight on the
// backend with this ID, if the inner picker counts them (it implements
// balancer.InFlightCounter: leastconn, lrt, consistent's bounded Ring),
// and 0 otherwise. Health counts nothing itself; this passes the inner
// count through, so that metrics and the conformance kit read it through
// the decorator. No lock, no allocation.
func (h *Balancer) InFlight(id string) int64 {
	if h.counter == nil {
		return 0
	}
	return h.counter.InFlight(id)
}

// View returns a snapshot of every backend's state.
func (h *Balancer) View() View {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.s.clock.Now()
	cur := h.cur.Load()
	v := View{Backends: make([]Status, len(cur.nodes)), Panic: h.panicking, InnerErr: h.innerErr}
	inSet := make(map[*node]bool, len(h.handed))
	for _, n := range h.handed {
		inSet[n] = true
	}
	for i, n := range cur.nodes {
		st := Status{
			ID:           n.id,
			State:        n.state,
			Reason:       n.reason,
			Since:        n.since,
			InSet:        inSet[n],
			ProbeUp:      n.up,
			Ejections:    n.decayed(now, h.s.baseEject),
			Ramp:         1,
			LastProbeErr: n.getErr(&n.probeErr),
			Trial:        !n.ejected && n.flags.Load()&flagTrial != 0,
		}
		if n.ejected {
			st.EjectedUntil = n.until
		}
		if n.ramping {
			st.Ramp = n.factor
		}
		v.Backends[i] = st
	}
	return v
}
