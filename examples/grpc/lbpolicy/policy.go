package lbpolicy

import (
	"fmt"
	"sync"

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

	// Guarded by mu.
	mu  sync.Mutex
	cfg *Config
	lb  lbk.Balancer
	fb  lbk.Feedback // lb's Feedback, or nil
}

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
	if err := checkEndpoints(s.ResolverState.Endpoints); err != nil {
		logger.Warningf("%v", err)
		return fmt.Errorf("%w (%w)", err, balancer.ErrBadResolverState)
	}

	p.mu.Lock()
	if p.lb == nil || p.cfg.BoundedLoad != cfg.BoundedLoad {
		// A new picker only when what it is made from changes; otherwise
		// the one in use keeps what it has learned.
		lb, err := p.builder.newBalancer(cfg)
		if err != nil {
			p.mu.Unlock()
			return fmt.Errorf("lbpolicy: %s: %w", p.builder.name, err)
		}
		p.lb = lb
		p.fb, _ = lb.(lbk.Feedback)
	}
	p.cfg = cfg
	p.mu.Unlock()

	// Not under mu: the child answers with UpdateState, synchronously.
	// pick_first reads no config of ours, so none goes down.
	return p.child.UpdateClientConnState(balancer.ClientConnState{
		ResolverState: pickfirst.EnableHealthListener(s.ResolverState),
	})
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

// Close closes the children.
func (p *policy) Close() { p.child.Close() }

// UpdateState receives endpointsharding's aggregated state. With at least
// one READY endpoint, the READY ones become the lbkit picker's set and the
// channel gets a picker that asks lbkit; with none, lbkit's set is emptied
// and endpointsharding's own picker (CONNECTING, IDLE or
// TRANSIENT_FAILURE, which queues or fails RPCs as gRPC should) goes up
// as it is.
func (p *policy) UpdateState(s balancer.State) {
	children := endpointsharding.ChildStatesFromPicker(s.Picker)
	ready := make([]lbk.Backend, 0, len(children))
	for _, c := range children {
		if c.State.ConnectivityState != connectivity.Ready {
			continue
		}
		ready = append(ready, &endpoint{
			id:     endpointID(c.Endpoint),
			weight: WeightOf(c.Endpoint),
			child:  c.State.Picker,
		})
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lb == nil {
		// No config yet, so no picker: nothing but endpointsharding's
		// state can go up. (Not reached through gRPC, which sends a config
		// first.)
		p.ClientConn.UpdateState(s)
		return
	}
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
	if len(ready) == 0 {
		p.ClientConn.UpdateState(s)
		return
	}
	p.ClientConn.UpdateState(balancer.State{
		ConnectivityState: connectivity.Ready,
		Picker:            newPicker(p, p.lb, p.fb, p.cfg),
	})
}

// errPicker fails every pick with err.
type errPicker struct{ err error }

func (e errPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{}, e.err
}
