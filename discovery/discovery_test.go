package discovery_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/consistent"
	"github.com/lbkit/lbkit/discovery"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/locality"
	"github.com/lbkit/lbkit/rr"
)

// recorder is a target that keeps what it was given, and refuses an
// Update when refuse is set.
type recorder struct {
	sets   [][]string
	up     [][]bool
	refuse error
}

func (r *recorder) Update(bs []balancer.Backend) error {
	if r.refuse != nil {
		return r.refuse
	}
	ids := make([]string, len(bs))
	for i, b := range bs {
		ids[i] = b.ID()
	}
	r.sets = append(r.sets, ids)
	return nil
}

func (r *recorder) last() []string {
	if len(r.sets) == 0 {
		return nil
	}
	return r.sets[len(r.sets)-1]
}

// hrecorder is a recorder that takes health too.
type hrecorder struct{ recorder }

func (r *hrecorder) UpdateHealth(bs []balancer.Backend, up []bool) error {
	if err := r.Update(bs); err != nil {
		return err
	}
	r.up = append(r.up, slices.Clone(up))
	return nil
}

func TestPublishCanonicalIDs(t *testing.T) {
	var r recorder
	p, err := discovery.New(&r, discovery.Config{})
	require.NoError(t, err)
	rep, err := p.Publish([]discovery.Endpoint{
		{Addr: "10.0.0.1:080"},
		{Addr: "[::ffff:10.0.0.2]:80"},
		{Addr: "API.Internal:8080", Weight: 3},
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.1:80", "10.0.0.2:80", "api.internal:8080"}, r.last())
	assert.Equal(t, []string{"10.0.0.1:80", "10.0.0.2:80", "api.internal:8080"}, rep.Healthy)
}

func TestPublishRefuses(t *testing.T) {
	good := []discovery.Endpoint{{Addr: "10.0.0.1:80"}, {Addr: "10.0.0.2:80"}}
	for _, tc := range []struct {
		name string
		eps  []discovery.Endpoint
		is   error
	}{
		{"bad address", []discovery.Endpoint{{Addr: "10.0.0.1"}}, balancer.ErrBadAddr},
		{"port 0", []discovery.Endpoint{{Addr: "10.0.0.1:0"}}, balancer.ErrBadAddr},
		{"hex host", []discovery.Endpoint{{Addr: "0x0a.0.0.1:80"}}, balancer.ErrBadAddr},
		{"duplicate", []discovery.Endpoint{{Addr: "10.0.0.1:80"}, {Addr: "10.0.0.1:80"}}, balancer.ErrDuplicateID},
		{"two spellings", []discovery.Endpoint{{Addr: "10.0.0.1:80"}, {Addr: "[::ffff:10.0.0.1]:080"}}, balancer.ErrDuplicateID},
		{"negative weight", []discovery.Endpoint{{Addr: "10.0.0.1:80", Weight: -1}}, balancer.ErrBadWeight},
		{"weight too large", []discovery.Endpoint{{Addr: "10.0.0.1:80", Weight: balancer.MaxWeight + 1}}, balancer.ErrBadWeight},
		{"priority", []discovery.Endpoint{{Addr: "10.0.0.1:80", Locality: balancer.Locality{Priority: -1}}}, balancer.ErrBadLocality},
		{"state", []discovery.Endpoint{{Addr: "10.0.0.1:80", State: discovery.State(9)}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r recorder
			p, err := discovery.New(&r, discovery.Config{})
			require.NoError(t, err)
			_, err = p.Publish(good)
			require.NoError(t, err)
			// A good endpoint beside the bad one: the whole update is refused.
			_, err = p.Publish(append([]discovery.Endpoint{{Addr: "10.0.0.9:80"}}, tc.eps...))
			require.ErrorIs(t, err, discovery.ErrRefused)
			if tc.is != nil {
				assert.ErrorIs(t, err, tc.is)
			}
			assert.Len(t, r.sets, 1, "the target was not updated")
			assert.Equal(t, []string{"10.0.0.1:80", "10.0.0.2:80"}, r.last())
		})
	}
}

// Every fault is named, not only the first.
func TestPublishNamesEveryFault(t *testing.T) {
	var r recorder
	p, _ := discovery.New(&r, discovery.Config{})
	_, err := p.Publish([]discovery.Endpoint{{Addr: "nope"}, {Addr: "10.0.0.1:80", Weight: -2}, {Addr: "10.0.0.2:80"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"nope"`)
	assert.Contains(t, err.Error(), "10.0.0.1:80")
	assert.Contains(t, err.Error(), "-2")
}

func TestPublishTargetRefuses(t *testing.T) {
	r := recorder{refuse: errors.New("no")}
	p, _ := discovery.New(&r, discovery.Config{})
	_, err := p.Publish([]discovery.Endpoint{{Addr: "10.0.0.1:80"}})
	require.Error(t, err)
	assert.NotErrorIs(t, err, discovery.ErrRefused)
	assert.Contains(t, err.Error(), "no")
}

func TestPublishEmpty(t *testing.T) {
	var r recorder
	p, _ := discovery.New(&r, discovery.Config{})
	_, err := p.Publish([]discovery.Endpoint{{Addr: "10.0.0.1:80"}})
	require.NoError(t, err)
	_, err = p.Publish(nil)
	require.NoError(t, err)
	assert.Empty(t, r.last(), "told the set is empty, the Publisher publishes it")
	assert.Len(t, r.sets, 2)
}

// Unhealthy endpoints reach a HealthUpdater marked unhealthy, and are left
// out for any other target.
func TestPublishUnhealthy(t *testing.T) {
	eps := []discovery.Endpoint{{Addr: "10.0.0.1:80"}, {Addr: "10.0.0.2:80", State: discovery.Unhealthy}, {Addr: "10.0.0.3:80"}}

	var h hrecorder
	p, _ := discovery.New(&h, discovery.Config{})
	rep, err := p.Publish(eps)
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80"}, h.last())
	assert.Equal(t, []bool{true, false, true}, h.up[0])
	assert.Equal(t, []string{"10.0.0.2:80"}, rep.Unhealthy)

	var r recorder
	p, _ = discovery.New(&r, discovery.Config{})
	rep, err = p.Publish(eps)
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.1:80", "10.0.0.3:80"}, r.last())
	assert.Empty(t, rep.Unhealthy)

	// Through a real locality Balancer: the unhealthy one gets no pick.
	lb, err := locality.New(func() balancer.Balancer { return rr.New() }, locality.Config{})
	require.NoError(t, err)
	p, _ = discovery.New(lb, discovery.Config{})
	_, err = p.Publish(eps)
	require.NoError(t, err)
	for range 100 {
		b, err := lb.Pick(balancer.Request{})
		require.NoError(t, err)
		assert.NotEqual(t, "10.0.0.2:80", b.ID())
	}
}

// A draining endpoint the target serves stays in its set, drained: its
// requests in flight finish and it gets no new ones. It leaves the set
// when the source stops listing it; one never served is left out.
func TestPublishDrain(t *testing.T) {
	lb, err := health.New(leastconn.New(), health.Config{})
	require.NoError(t, err)
	defer lb.Close()
	p, err := discovery.New(lb, discovery.Config{})
	require.NoError(t, err)
	_, err = p.Publish([]discovery.Endpoint{{Addr: "10.0.0.1:80"}, {Addr: "10.0.0.2:80"}})
	require.NoError(t, err)

	// A request in flight on .2, then .2 drains and .3 arrives draining.
	var inflight balancer.Backend
	for inflight == nil {
		b, err := lb.Pick(balancer.Request{})
		require.NoError(t, err)
		if b.ID() == "10.0.0.2:80" {
			inflight = b
		} else {
			lb.Done(b, balancer.Result{Latency: time.Millisecond})
		}
	}
	rep, err := p.Publish([]discovery.Endpoint{{Addr: "10.0.0.1:80"}, {Addr: "10.0.0.2:80", State: discovery.Draining}, {Addr: "10.0.0.3:80", State: discovery.Draining}})
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.2:80"}, rep.Draining)
	assert.Equal(t, []string{"10.0.0.3:80"}, rep.Left)
	v := lb.View()
	require.Len(t, v.Backends, 2)
	assert.Equal(t, health.Draining, stateOf(v, "10.0.0.2:80"))
	for range 50 {
		b, err := lb.Pick(balancer.Request{})
		require.NoError(t, err)
		assert.Equal(t, "10.0.0.1:80", b.ID(), "no new request to a draining endpoint")
		lb.Done(b, balancer.Result{Latency: time.Millisecond})
	}
	lb.Done(inflight, balancer.Result{Latency: time.Millisecond}) // its request finishes
	assert.Zero(t, lb.InFlight("10.0.0.2:80"))

	// Healthy again: enabled.
	_, err = p.Publish([]discovery.Endpoint{{Addr: "10.0.0.1:80"}, {Addr: "10.0.0.2:80"}})
	require.NoError(t, err)
	assert.Equal(t, health.Up, stateOf(lb.View(), "10.0.0.2:80"))

	// Draining, then gone.
	_, err = p.Publish([]discovery.Endpoint{{Addr: "10.0.0.1:80"}, {Addr: "10.0.0.2:80", State: discovery.Draining}})
	require.NoError(t, err)
	_, err = p.Publish([]discovery.Endpoint{{Addr: "10.0.0.1:80"}})
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.1:80"}, idsOf(lb.View()))
}

// Without an Admin layer a draining endpoint leaves at once.
func TestPublishDrainWithoutAdmin(t *testing.T) {
	var r recorder
	p, _ := discovery.New(&r, discovery.Config{})
	_, _ = p.Publish([]discovery.Endpoint{{Addr: "10.0.0.1:80"}, {Addr: "10.0.0.2:80"}})
	rep, err := p.Publish([]discovery.Endpoint{{Addr: "10.0.0.1:80"}, {Addr: "10.0.0.2:80", State: discovery.Draining}})
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.1:80"}, r.last())
	assert.Equal(t, []string{"10.0.0.2:80"}, rep.Left)
}

func TestPublishBackendHook(t *testing.T) {
	var got []discovery.Endpoint
	var r recorder
	p, _ := discovery.New(&r, discovery.Config{Backend: func(id string, e discovery.Endpoint) balancer.Backend {
		got = append(got, e)
		return balancer.NewEndpoint(id, 7)
	}})
	_, err := p.Publish([]discovery.Endpoint{{Addr: "10.0.0.1:80", Labels: map[string]string{"version": "v2"}}})
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "v2", got[0].Labels["version"])
}

func TestNewNilTarget(t *testing.T) {
	_, err := discovery.New(nil, discovery.Config{})
	assert.Error(t, err)
}

func TestBackoff(t *testing.T) {
	mid := discovery.Backoff{Rand: func() float64 { return 0.5 }} // factor 1
	assert.Equal(t, time.Second, mid.Delay(0))
	assert.Equal(t, 1600*time.Millisecond, mid.Delay(1))
	assert.Equal(t, 2560*time.Millisecond, mid.Delay(2))
	assert.Equal(t, 120*time.Second, mid.Delay(30), "capped")
	assert.Equal(t, 120*time.Second, mid.Delay(1<<30), "no overflow")
	assert.Equal(t, time.Second, mid.Delay(-1))
	lo := discovery.Backoff{Base: 100 * time.Millisecond, Max: time.Second, Rand: func() float64 { return 0 }}
	assert.Equal(t, 80*time.Millisecond, lo.Delay(0))
	hi := discovery.Backoff{Base: 100 * time.Millisecond, Max: time.Second, Rand: func() float64 { return 0.999999 }}
	assert.Equal(t, time.Second, hi.Delay(10), "never above Max, jitter included")
	// The default jitter spreads.
	seen := map[time.Duration]bool{}
	for range 20 {
		seen[discovery.Backoff{}.Delay(3)] = true
	}
	assert.Greater(t, len(seen), 1)
	for d := range seen {
		assert.InDelta(t, float64(4096*time.Millisecond), float64(d), float64(4096*time.Millisecond)*0.2)
	}
}

func stateOf(v health.View, id string) health.State {
	for _, s := range v.Backends {
		if s.ID == id {
			return s.State
		}
	}
	return health.State(255)
}

func idsOf(v health.View) []string {
	var out []string
	for _, s := range v.Backends {
		out = append(out, s.ID)
	}
	return out
}

// The default backend carries the endpoint's hash key, so a source's
// endpoint that comes back at another address with the same key keeps its
// keys on a hash picker; two endpoints with one hash key are the target's
// to refuse, and the last good set stays.
func TestPublishHashKey(t *testing.T) {
	r := consistent.NewRing()
	p, err := discovery.New(r, discovery.Config{})
	require.NoError(t, err)
	set := func(addr1 string) []discovery.Endpoint {
		return []discovery.Endpoint{
			{Addr: "10.0.0.1:80", HashKey: "node-0"},
			{Addr: addr1, HashKey: "node-1"},
			{Addr: "10.0.0.3:80"},
		}
	}
	homes := func() []string {
		var out []string
		for i := range 200 {
			b, err := r.Pick(balancer.Request{Key: fmt.Sprint("user-", i)})
			require.NoError(t, err)
			out = append(out, balancer.HashKeyOf(b))
		}
		return out
	}
	_, err = p.Publish(set("10.0.0.2:80"))
	require.NoError(t, err)
	before := homes()
	require.Contains(t, before, "node-1")
	_, err = p.Publish(set("10.0.9.9:80"))
	require.NoError(t, err)
	assert.Equal(t, before, homes(), "node-1 moved address and kept its keys")

	_, err = p.Publish([]discovery.Endpoint{{Addr: "10.0.0.1:80", HashKey: "n"}, {Addr: "10.0.0.2:80", HashKey: "n"}})
	require.ErrorIs(t, err, balancer.ErrDuplicateHashKey)
	assert.Equal(t, before, homes(), "the last good set stays")
}
