package lbpolicy

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	lbk "github.com/lbkit/lbkit/balancer"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/endpointsharding"
	"google.golang.org/grpc/balancer/pickfirst"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/grpclog"
)

var logger = grpclog.Component("lbkit")

// policy is the balancer.Balancer of one channel. It sits between gRPC and
// an endpointsharding balancer that keeps one pick_first child per
// endpoint: calls from gRPC go down to the child unchanged (the resolver
// state with the health listener enabled), and the child's aggregated
// state comes back up through UpdateState, where the READY endpoints are
// handed to the lbkit picker and a picker wrapping it is published.
//
// gRPC serialises the calls it makes from above (UpdateClientConnState,
// ResolverError, ExitIdle, Close); UpdateState comes from the children,
// under endpointsharding's own lock, so also one at a time, but possibly
// concurrently with a call from above. mu orders the two.
type policy struct {
	balancer.ClientConn // embedded to intercept UpdateState from the child

	// Immutable after newPolicy.
	builder *Builder
	child   balancer.Balancer
	calls   sync.Pool // *call, reused across pickers (see picker.Pick)

	// gen counts the lbkit Updates and picker publications: bumped before
	// each, so that a picker whose lbkit Pick finds no backend can tell a
	// set emptied under it (a newer picker is on its way) from a current
	// picker whose lbkit picker has nothing to give (see picker.pickError).
	gen atomic.Uint64
	// retry is the republication scheduled by republishSoon, if any.
	retry        atomic.Pointer[time.Timer]
	retryPending atomic.Bool

	// Guarded by mu.
	mu      sync.Mutex
	cfg     *Config
	lb      lbk.Balancer
	fb      lbk.Feedback // lb's Feedback, or nil
	serving bool         // the last state published holds a picker of ours
	closed  bool
	ready   map[string]*endpoint // the READY set lbkit has, by ID
}

// republishAfter is how long a picker that found the lbkit picker's set
// empty waits before the policy publishes a fresh one, so that RPCs
// waiting for ready ask lbkit again.
const republishAfter = 250 * time.Millisecond

var _ balancer.Balancer = (*policy)(nil)

func newPolicy(b *Builder, cc balancer.ClientConn, opts balancer.BuildOptions) *policy {
	p := &policy{ClientConn: cc, builder: b}
	p.calls.New = func() any { return newCall() }
	p.child = endpointsharding.NewBalancer(p, opts, balancer.Get(pickfirst.Name).Build, endpointsharding.Options{})
	return p
}

// UpdateClientConnState takes a new resolver state and config. A config of
// the wrong type, an endpoint list lbkit would refuse (see SetWeight and
// checkEndpoints), or a picker that cannot be built is refused with an
// error and the previous state stays in use.
func (p *policy) UpdateClientConnState(s balancer.ClientConnState) error {
	cfg, ok := s.BalancerConfig.(*Config)
	if !ok {
		return fmt.Errorf("lbpolicy: %s: config of type %T, want *lbpolicy.Config: %w",
			p.builder.name, s.BalancerConfig, balancer.ErrBadResolverState)
	}
	rs := s.ResolverState
	rs.Endpoints = scaleWeights(rs.Endpoints)
	if err := checkEndpoints(rs.Endpoints, p.builder.placed); err != nil {
		logger.Warningf("%v", err)
		return fmt.Errorf("%w (%w)", err, balancer.ErrBadResolverState)
	}

	var old lbk.Balancer // replaced, to close
	p.mu.Lock()
	if p.lb == nil || !p.cfg.samePicker(cfg) {
		// A new picker only when what it is made from changes; otherwise
		// the one in use keeps what it has learned.
		lb, err := p.builder.newBalancer(cfg)
		if err == nil && lb == nil {
			err = errors.New("newBalancer returned a nil Balancer")
		}
		if err != nil {
			p.mu.Unlock()
			return fmt.Errorf("lbpolicy: %s: %w", p.builder.name, err)
		}
		old = p.lb
		p.lb = lb
		p.fb, _ = lb.(lbk.Feedback)
		p.ready = nil // the new picker has no set yet: the next UpdateState gives it one
	}
	p.cfg = cfg
	p.mu.Unlock()

	// Not under mu: the child answers with UpdateState, synchronously.
	// pick_first reads no config of ours, so none goes down.
	err := p.child.UpdateClientConnState(balancer.ClientConnState{
		ResolverState: pickfirst.EnableHealthListener(rs),
	})
	// The replaced picker's last picks may still be running; what is left
	// of it is its background work, if any.
	closeBalancer(old)
	return err
}

// closeBalancer closes lb if it is an io.Closer (health.Balancer and
// lbmetrics.Balancer are), logging a failure.
func closeBalancer(lb lbk.Balancer) {
	if err := lbk.CloseInner(lb); err != nil {
		logger.Warningf("lbpolicy: closing the lbkit balancer: %v", err)
	}
}

// ResolverError passes the error to the children; endpointsharding
// answers with a new state if it has no endpoints.
func (p *policy) ResolverError(err error) { p.child.ResolverError(err) }

// UpdateSubConnState is never called: the children own their SubConns.
func (p *policy) UpdateSubConnState(sc balancer.SubConn, s balancer.SubConnState) {
	logger.Errorf("lbpolicy: UpdateSubConnState(%v, %+v) called unexpectedly", sc, s)
}

// ExitIdle asks the children to connect.
func (p *policy) ExitIdle() { p.child.ExitIdle() }

// Close closes the children, and the lbkit balancer if it is an
// io.Closer.
func (p *policy) Close() {
	p.child.Close()
	p.mu.Lock()
	p.closed = true
	lb := p.lb
	p.mu.Unlock()
	if t := p.retry.Load(); t != nil {
		t.Stop()
	}
	closeBalancer(lb)
}

// republishSoon publishes a new picker after republishAfter, unless one
// is already scheduled or a newer picker than gen's has been published by
// then: RPCs that wait for ready then ask the lbkit picker again. It is
// called from Pick, so it takes no lock (the scheduled func does).
func (p *policy) republishSoon(gen uint64) {
	if !p.retryPending.CompareAndSwap(false, true) {
		return
	}
	p.retry.Store(time.AfterFunc(republishAfter, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		p.retryPending.Store(false)
		if p.closed || !p.serving || p.gen.Load() != gen {
			return
		}
		p.publishLocked()
	}))
}

// publishLocked publishes a READY state with a new picker over p.lb.
func (p *policy) publishLocked() {
	gen := p.gen.Add(1)
	p.serving = true
	p.ClientConn.UpdateState(balancer.State{
		ConnectivityState: connectivity.Ready,
		Picker:            newPicker(p, gen),
	})
}

// UpdateState receives endpointsharding's aggregated state. With at least
// one READY endpoint, the READY ones become the lbkit picker's set and the
// channel gets a picker that asks lbkit; with none, lbkit's set is emptied
// and endpointsharding's own picker (CONNECTING, IDLE or
// TRANSIENT_FAILURE, which queues or fails RPCs as gRPC should) goes up
// as it is.
func (p *policy) UpdateState(s balancer.State) {
	children := endpointsharding.ChildStatesFromPicker(s.Picker)

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	// The READY endpoints, reusing the endpoint of an ID that stays READY
	// with the same weight and hash key: same means no lbkit Update is
	// needed.
	ready := make([]lbk.Backend, 0, len(children))
	byID := make(map[string]*endpoint, len(children))
	same := true
	for _, c := range children {
		if c.State.ConnectivityState != connectivity.Ready {
			continue
		}
		id, w, k := endpointID(c.Endpoint), WeightOf(c.Endpoint), HashKeyOf(c.Endpoint)
		e := p.ready[id]
		if e == nil || e.weight != w || e.hashKey != k {
			e, same = newEndpoint(id, w, k, c.State.Picker), false
		} else {
			// Kept: its child may have a new picker in this same state
			// (endpointsharding aggregates a whole resolver update), which
			// must replace the old one whether or not the set changes.
			e.child.Store(&pickerBox{c.State.Picker})
		}
		ready = append(ready, e)
		byID[id] = e
	}
	same = same && len(byID) == len(p.ready) && p.lb != nil && p.serving
	if same {
		// Only the children's pickers changed (swapped in above): publish
		// a picker so that gRPC picks again.
		p.publishLocked()
		return
	}
	if p.lb == nil {
		// No config yet, so no picker: nothing but endpointsharding's
		// state can go up. (Not reached through gRPC, which sends a config
		// first.)
		p.ClientConn.UpdateState(s)
		return
	}
	p.gen.Add(1) // before lbkit's set changes: pickers before it are stale
	p.serving = false
	p.ready = nil
	if err := p.lb.Update(ready); err != nil {
		// checkEndpoints makes this unreachable for lbkit's pickers; a
		// custom picker may refuse a set for reasons of its own.
		logger.Errorf("lbpolicy: %s: update of %d ready endpoints: %v", p.builder.name, len(ready), err)
		p.ClientConn.UpdateState(balancer.State{
			ConnectivityState: connectivity.TransientFailure,
			Picker:            errPicker{err: err},
		})
		return
	}
	p.ready = byID
	if len(ready) == 0 {
		p.ClientConn.UpdateState(s)
		return
	}
	p.publishLocked()
}

// errPicker fails every pick with err.
type errPicker struct{ err error }

func (e errPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{}, e.err
}
