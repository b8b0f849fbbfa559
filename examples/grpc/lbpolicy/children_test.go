package lbpolicy

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/endpointsharding"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
)

// versionedChild stands in for a pick_first child: every
// UpdateClientConnState makes it publish a new READY picker, whose picks
// carry its address and version in their metadata, so a test can tell
// which of the child's pickers a pick went through.
type versionedChild struct {
	cc balancer.ClientConn
	mu sync.Mutex
	n  int
}

func (c *versionedChild) UpdateClientConnState(s balancer.ClientConnState) error {
	c.mu.Lock()
	c.n++
	name := fmt.Sprintf("%s#%d", s.ResolverState.Endpoints[0].Addresses[0].Addr, c.n)
	c.mu.Unlock()
	c.cc.UpdateState(balancer.State{ConnectivityState: connectivity.Ready, Picker: namedPicker(name)})
	return nil
}
func (*versionedChild) ResolverError(error)                                        {}
func (*versionedChild) UpdateSubConnState(balancer.SubConn, balancer.SubConnState) {}
func (*versionedChild) Close()                                                     {}
func (*versionedChild) ExitIdle()                                                  {}

// namedPicker is a child's READY picker that names itself in each pick.
type namedPicker string

func (n namedPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	return balancer.PickResult{Metadata: metadata.Pairs("picker", string(n))}, nil
}

// stateRecorder is the channel above the policy: it keeps the last state.
type stateRecorder struct {
	balancer.ClientConn // nil: only UpdateState is called
	mu                  sync.Mutex
	last                balancer.State
}

func (r *stateRecorder) UpdateState(s balancer.State) {
	r.mu.Lock()
	r.last = s
	r.mu.Unlock()
}

func (r *stateRecorder) picker() balancer.Picker {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last.Picker
}

// TestChildPickerFollowsSetChange checks that an endpoint that stays READY
// through a change of the READY set goes on with its child's newest
// picker. endpointsharding sends one aggregated state for a whole resolver
// update, so a child's new picker can arrive together with another
// endpoint joining: the policy must not keep the endpoint's old picker
// then (it did, and RPCs to that endpoint went to a picker its child had
// replaced).
func TestChildPickerFollowsSetChange(t *testing.T) {
	var bld *Builder
	for _, b := range Builders() {
		if b.name == RoundRobin {
			bld = b
		}
	}
	require.NotNil(t, bld)
	cfg, err := bld.ParseConfig([]byte(`{}`))
	require.NoError(t, err)

	top := &stateRecorder{}
	p := newPolicy(bld, top, balancer.BuildOptions{})
	p.child.Close()
	p.child = endpointsharding.NewBalancer(p, balancer.BuildOptions{}, func(cc balancer.ClientConn, _ balancer.BuildOptions) balancer.Balancer {
		return &versionedChild{cc: cc}
	}, endpointsharding.Options{})
	t.Cleanup(p.Close)

	ep := func(addr string) resolver.Endpoint {
		return resolver.Endpoint{Addresses: []resolver.Address{{Addr: addr}}}
	}
	update := func(eps ...resolver.Endpoint) {
		t.Helper()
		require.NoError(t, p.UpdateClientConnState(balancer.ClientConnState{
			ResolverState:  resolver.State{Endpoints: eps},
			BalancerConfig: cfg,
		}))
	}
	seen := func() map[string]int {
		t.Helper()
		pk := top.picker()
		require.NotNil(t, pk)
		got := map[string]int{}
		for range 20 {
			res, err := pk.Pick(balancer.PickInfo{Ctx: context.Background()})
			require.NoError(t, err)
			got[res.Metadata.Get("picker")[0]]++
			if res.Done != nil {
				res.Done(balancer.DoneInfo{})
			}
		}
		return got
	}

	update(ep("10.0.0.1:1"))
	assert.Equal(t, map[string]int{"10.0.0.1:1#1": 20}, seen())

	// One aggregated state: 10.0.0.1:1's child has a new picker (#2) and
	// 10.0.0.2:1 joins.
	update(ep("10.0.0.1:1"), ep("10.0.0.2:1"))
	got := seen()
	assert.Zero(t, got["10.0.0.1:1#1"], "a pick went through a replaced child picker: %v", got)
	assert.Equal(t, 10, got["10.0.0.1:1#2"], "%v", got)
	assert.Equal(t, 10, got["10.0.0.2:1#1"], "%v", got)

	// And when the set stays as it was: the same path swaps pickers too.
	update(ep("10.0.0.1:1"), ep("10.0.0.2:1"))
	assert.Equal(t, map[string]int{"10.0.0.1:1#3": 10, "10.0.0.2:1#2": 10}, seen())
}
