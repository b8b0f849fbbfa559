package lbpolicy

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/consistent"
	"github.com/lbkit/lbkit/iphash"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/rr"
	"github.com/lbkit/lbkit/wrr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// childPicker stands in for a pick_first child's picker: it returns its
// error, or a result whose Done (if done is set) is done and whose
// metadata (if name is set) names it.
type childPicker struct {
	err  error
	done func(balancer.DoneInfo)
	name string
}

func (c *childPicker) Pick(balancer.PickInfo) (balancer.PickResult, error) {
	if c.err != nil {
		return balancer.PickResult{}, c.err
	}
	res := balancer.PickResult{Done: c.done}
	if c.name != "" {
		res.Metadata = metadata.Pairs("child", c.name)
	}
	return res, nil
}

// feedback wraps a Balancer and keeps the Results Done gets.
type feedback struct {
	lbk.Balancer
	onDone  func() // if set, called at each Done
	mu      sync.Mutex
	results []lbk.Result
}

func (f *feedback) Done(b lbk.Backend, r lbk.Result) {
	if f.onDone != nil {
		f.onDone()
	}
	f.mu.Lock()
	f.results = append(f.results, r)
	f.mu.Unlock()
	if fb, ok := f.Balancer.(lbk.Feedback); ok {
		fb.Done(b, r)
	}
}

func (f *feedback) last(t *testing.T) lbk.Result {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NotEmpty(t, f.results)
	return f.results[len(f.results)-1]
}

// testPicker returns a picker over lb, whose set is one endpoint per
// child, named a, b, c, ...; cfgJSON configures it as policy name.
func testPicker(t testing.TB, name, cfgJSON string, lb lbk.Balancer, children ...balancer.Picker) *picker {
	t.Helper()
	var bld *Builder
	for _, b := range Builders() {
		if b.name == name {
			bld = b
		}
	}
	if bld == nil {
		var err error
		bld, err = NewBuilder(name, func() lbk.Balancer { return lb })
		require.NoError(t, err)
	}
	cfg, err := bld.ParseConfig([]byte(cfgJSON))
	require.NoError(t, err)
	bs := make([]lbk.Backend, len(children))
	for i, c := range children {
		bs[i] = newEndpoint(string(rune('a'+i)), 1, "", c)
	}
	require.NoError(t, lb.Update(bs))
	p := newPolicy(bld, nil, balancer.BuildOptions{})
	p.lb, p.cfg = lb, cfg.(*Config)
	p.fb, _ = lb.(lbk.Feedback)
	return newPicker(p, p.gen.Load())
}

func TestResult(t *testing.T) {
	unavailable := status.Error(codes.Unavailable, "gone")
	tests := []struct {
		name     string
		cfg      string
		info     balancer.DoneInfo
		failure  bool
		abandon  bool
		measured bool
	}{
		{"ok", `{}`, balancer.DoneInfo{BytesSent: true, BytesReceived: true}, false, false, true},
		{"not sent: gRPC picks again", `{}`, balancer.DoneInfo{}, false, false, false},
		{"unavailable", `{}`, balancer.DoneInfo{Err: unavailable, BytesSent: true}, true, false, true},
		{"deadline", `{}`, balancer.DoneInfo{Err: status.Error(codes.DeadlineExceeded, "slow"), BytesSent: true}, true, false, true},
		{"internal", `{}`, balancer.DoneInfo{Err: status.Error(codes.Internal, "x"), BytesSent: true, BytesReceived: true}, true, false, true},
		{"not a status: unknown", `{}`, balancer.DoneInfo{Err: errors.New("odd"), BytesSent: true}, true, false, true},
		{"not found is an answer", `{}`, balancer.DoneInfo{Err: status.Error(codes.NotFound, "x"), BytesSent: true, BytesReceived: true}, false, false, true},
		{"cancelled", `{}`, balancer.DoneInfo{Err: status.Error(codes.Canceled, "bye"), BytesSent: true}, false, true, false},
		{"custom codes: not found fails", `{"failureCodes": ["NOT_FOUND"]}`, balancer.DoneInfo{Err: status.Error(codes.NotFound, "x"), BytesSent: true, BytesReceived: true}, true, false, true},
		{"custom codes: unavailable answers", `{"failureCodes": ["NOT_FOUND"]}`, balancer.DoneInfo{Err: unavailable, BytesSent: true, BytesReceived: true}, false, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fb := &feedback{Balancer: leastconn.New()}
			p := testPicker(t, LeastConn, tt.cfg, fb, &childPicker{})
			res, err := p.Pick(balancer.PickInfo{Ctx: context.Background()})
			require.NoError(t, err)
			require.NotNil(t, res.Done)
			time.Sleep(time.Millisecond) // so that a measured latency is > 0 on any clock
			res.Done(tt.info)
			r := fb.last(t)
			assert.Equal(t, tt.measured, r.Sample(), "sample: %+v", r)
			assert.Equal(t, tt.failure, r.Err != nil && !r.Abandoned(), "failure: %+v", r)
			assert.Equal(t, tt.abandon, r.Abandoned(), "abandoned: %+v", r)
			assert.Equal(t, tt.measured, r.Latency > 0, "latency: %+v", r)
			if tt.abandon {
				assert.ErrorIs(t, r.Err, lbk.ErrAbandoned)
			}
			if tt.failure {
				assert.Equal(t, tt.info.Err, r.Err, "the RPC's own error goes to the picker")
			}
		})
	}
}

// TestDoneOnce checks that Done reaches the lbkit picker once and then the
// child's own Done, with the same DoneInfo, and leaves nothing in flight.
func TestDoneOnce(t *testing.T) {
	var (
		order      []string
		childInfos []balancer.DoneInfo
	)
	child := &childPicker{done: func(i balancer.DoneInfo) {
		order = append(order, "child")
		childInfos = append(childInfos, i)
	}}
	lc := leastconn.New()
	fb := &feedback{Balancer: lc, onDone: func() { order = append(order, "lbkit") }}
	p := testPicker(t, LeastConn, `{}`, fb, child)
	infos := []balancer.DoneInfo{
		{BytesSent: true, BytesReceived: true},
		{Err: status.Error(codes.Unavailable, "gone"), BytesSent: true},
		{Err: status.Error(codes.NotFound, "no"), BytesSent: true, BytesReceived: true, ServerLoad: "load"},
	}
	for i, info := range infos {
		res, err := p.Pick(balancer.PickInfo{Ctx: context.Background()})
		require.NoError(t, err)
		assert.Equal(t, int64(1), lc.InFlight("a"), "pick %d counted", i)
		res.Done(info)
		assert.Zero(t, lc.InFlight("a"), "pick %d uncounted by its Done", i)
	}
	assert.Len(t, fb.results, len(infos), "one lbkit Done per pick")
	assert.Equal(t, infos, childInfos, "the child's Done gets the very DoneInfo")
	assert.Equal(t, []string{"lbkit", "child", "lbkit", "child", "lbkit", "child"}, order)
}

// TestForget checks that a pick the child cannot serve is taken off the
// lbkit picker's count, and the child's error goes to gRPC unchanged.
func TestForget(t *testing.T) {
	fb := &feedback{Balancer: leastconn.New()}
	p := testPicker(t, LeastConn, `{}`, fb, &childPicker{err: balancer.ErrNoSubConnAvailable})
	_, err := p.Pick(balancer.PickInfo{Ctx: context.Background()})
	assert.ErrorIs(t, err, balancer.ErrNoSubConnAvailable)
	assert.Equal(t, lbk.Result{}, fb.last(t))
}

// foreign is a picker that breaks the contract: it returns a backend it
// was never given.
type foreign struct{ lbk.Balancer }

func (foreign) Pick(lbk.Request) (lbk.Backend, error) {
	return lbk.NewEndpoint("10.9.9.9:1", 1), nil
}

func TestPickErrors(t *testing.T) {
	t.Run("set emptied under a stale picker: wait for the next", func(t *testing.T) {
		p := testPicker(t, RoundRobin, `{}`, rr.New())
		p.policy.gen.Add(1) // as UpdateState does before the lbkit Update
		_, err := p.Pick(balancer.PickInfo{Ctx: context.Background()})
		assert.Equal(t, balancer.ErrNoSubConnAvailable, err)
	})
	t.Run("empty set under the current picker: fail fast, wait for ready", func(t *testing.T) {
		p := testPicker(t, RoundRobin, `{}`, rr.New())
		_, err := p.Pick(balancer.PickInfo{Ctx: context.Background()})
		require.Error(t, err)
		assert.NotEqual(t, balancer.ErrNoSubConnAvailable, err, "that would hold even fail-fast RPCs until some unrelated change")
		_, isStatus := status.FromError(err)
		assert.False(t, isStatus, "a status error would end wait-for-ready RPCs too: %v", err)
		assert.Contains(t, err.Error(), "no backend")
		assert.True(t, p.policy.retryPending.Load(), "a new picker is scheduled for the RPCs that wait")
	})
	t.Run("bad key fails at once", func(t *testing.T) {
		p := testPicker(t, IPHash, `{"key": "x-client-ip"}`, iphash.New(), &childPicker{})
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-client-ip", "not-an-ip")
		_, err := p.Pick(balancer.PickInfo{Ctx: ctx})
		st, ok := status.FromError(err)
		require.True(t, ok, "a status error ends even a wait-for-ready RPC: %v", err)
		assert.Equal(t, codes.Internal, st.Code())
		assert.Contains(t, st.Message(), `"x-client-ip"`)
		assert.NotContains(t, st.Message(), "not-an-ip", "client data stays out of errors")
	})
	t.Run("good key", func(t *testing.T) {
		p := testPicker(t, IPHash, `{"key": "X-Client-IP"}`, iphash.New(), &childPicker{}, &childPicker{})
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-client-ip", "192.0.2.1")
		_, err := p.Pick(balancer.PickInfo{Ctx: ctx})
		assert.NoError(t, err, "metadata keys are case-insensitive")
	})
	t.Run("foreign backend", func(t *testing.T) {
		lb := &feedback{Balancer: foreign{leastconn.New()}}
		p := testPicker(t, "lbkit_test_foreign", `{}`, lb, &childPicker{})
		_, err := p.Pick(balancer.PickInfo{Ctx: context.Background()})
		assert.Equal(t, codes.Internal, status.Code(err))
		assert.Equal(t, lbk.Result{}, lb.last(t), "the pick is forgotten")
	})
}

// TestKeyReachesPicker checks that the configured metadata entry's first
// value is the affinity key: the policy picks what the lbkit picker picks
// for that key.
func TestKeyReachesPicker(t *testing.T) {
	children := make([]balancer.Picker, 8)
	for i := range children {
		children[i] = &childPicker{name: string(rune('a' + i))}
	}
	p := testPicker(t, Maglev, `{"key": "x-user"}`, consistent.NewMaglev(), children...)
	pick := func(vals ...string) string {
		ctx := context.Background()
		for _, v := range vals {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-user", v)
		}
		res, err := p.Pick(balancer.PickInfo{Ctx: ctx})
		require.NoError(t, err)
		return res.Metadata.Get("child")[0]
	}
	seen := map[string]bool{}
	for _, u := range []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"} {
		want, err := p.lb.Pick(lbk.Request{Key: u})
		require.NoError(t, err)
		assert.Equal(t, want.ID(), pick(u), u)
		assert.Equal(t, want.ID(), pick(u, "other"), "only the first value counts")
		seen[want.ID()] = true
	}
	assert.Greater(t, len(seen), 1, "keys spread")
}

// TestPickAllocs checks that Pick and Done together allocate nothing once
// the pool is warm, with and without Feedback, and measures the cost of a
// configured key (the metadata lookup copies the entry's values).
func TestPickAllocs(t *testing.T) {
	info := balancer.PickInfo{Ctx: context.Background()}
	done := balancer.DoneInfo{BytesSent: true, BytesReceived: true}
	tests := []struct {
		name   string
		policy string
		cfg    string
		lb     lbk.Balancer
		info   balancer.PickInfo
		max    float64
	}{
		{"rr, no feedback", RoundRobin, `{}`, rr.New(), info, 0},
		{"leastconn, feedback", LeastConn, `{}`, leastconn.New(), info, 0},
		{"leastconn, attempt in context", LeastConn, `{}`, leastconn.New(),
			balancer.PickInfo{Ctx: WithAttempt(context.Background(), &Attempt{N: 1, Avoid: "a", OnlyElsewhere: true})}, 0},
		{"ring with key", RingHash, `{"key": "x-user", "boundedLoad": 1.25}`, nil,
			balancer.PickInfo{Ctx: metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice")}, 1},
		{"ring with requestHashHeader", RingHash, `{"requestHashHeader": "x-user", "boundedLoad": 1.25}`, nil,
			balancer.PickInfo{Ctx: metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice")}, 1},
		{"maglev, requestHashHeader missing: a random key", Maglev, `{"requestHashHeader": "x-user"}`, consistent.NewMaglev(), info, 0},
		{"maglev, requestHashHeader with two values: joined", Maglev, `{"requestHashHeader": "x-user"}`, consistent.NewMaglev(),
			balancer.PickInfo{Ctx: metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice", "x-user", "bob")}, 3},
		{"wrr_orca, report in Done", ReportedWRR, `{}`, nil, info, 0},
		{"least_conn_orca, report in Done", LeastConnORCA, `{}`, leastconn.New(leastconn.WithReports()), info, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lb := tt.lb
			done := done
			switch {
			case tt.policy == ReportedWRR:
				// Started, so that the first report starts no lazy weight
				// loop, whose goroutine would count.
				w := wrr.NewReported()
				require.NoError(t, w.Start(context.Background()))
				t.Cleanup(func() { _ = w.Close() })
				lb = w
			case lb == nil:
				r, err := newRing(&Config{BoundedLoad: 1.25})
				require.NoError(t, err)
				lb = r
			}
			if tt.policy == ReportedWRR || tt.policy == LeastConnORCA {
				// A report as gRPC parses it from the trailer, with named
				// metrics, so that loadOf's Named is counted too.
				done.ServerLoad = &v3orcapb.OrcaLoadReport{ApplicationUtilization: 0.5, RpsFractional: 100,
					NamedMetrics: map[string]float64{"rif": 2}}
			}
			p := testPicker(t, tt.policy, tt.cfg, lb, &childPicker{}, &childPicker{}, &childPicker{})
			allocs := testing.AllocsPerRun(1000, func() {
				res, err := p.Pick(tt.info)
				if err != nil {
					panic(err)
				}
				if res.Done != nil {
					res.Done(done)
				}
			})
			t.Logf("%s: %v allocations per pick and done", tt.name, allocs)
			assert.LessOrEqual(t, allocs, tt.max)
		})
	}
}

// TestConcurrentPickDone races picks and dones over a shared pool, with
// child Dones, under -race.
func TestConcurrentPickDone(t *testing.T) {
	lc := leastconn.New()
	children := []balancer.Picker{&childPicker{done: func(balancer.DoneInfo) {}}, &childPicker{}, &childPicker{}}
	p := testPicker(t, LeastConn, `{}`, lc, children...)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 2000 {
				res, err := p.Pick(balancer.PickInfo{Ctx: context.Background()})
				if err != nil {
					t.Error(err)
					return
				}
				res.Done(balancer.DoneInfo{BytesSent: true, BytesReceived: true})
			}
		})
	}
	wg.Wait()
	// Every pick was done: nothing left in flight, so the next picks
	// still rotate over all three (least connections ties break fairly).
	seen := map[string]bool{}
	for range 30 {
		b, err := lc.Pick(lbk.Request{})
		require.NoError(t, err)
		seen[b.ID()] = true
		lc.Done(b, lbk.Result{})
	}
	assert.Len(t, seen, 3)
}

func BenchmarkPick(b *testing.B) {
	for _, bc := range []struct {
		name, policy, cfg string
		lb                func() lbk.Balancer
		ctx               context.Context
	}{
		{"algo=rr", RoundRobin, `{}`, func() lbk.Balancer { return rr.New() }, context.Background()},
		{"algo=leastconn", LeastConn, `{}`, func() lbk.Balancer { return leastconn.New() }, context.Background()},
		{"algo=maglev/key", Maglev, `{"key": "x-user"}`, func() lbk.Balancer { return consistent.NewMaglev() },
			metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice")},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := testPicker(b, bc.policy, bc.cfg, bc.lb(), &childPicker{}, &childPicker{}, &childPicker{}, &childPicker{})
			info := balancer.PickInfo{Ctx: bc.ctx}
			done := balancer.DoneInfo{BytesSent: true, BytesReceived: true}
			b.ReportAllocs()
			for b.Loop() {
				res, err := p.Pick(info)
				if err != nil {
					b.Fatal(err)
				}
				if res.Done != nil {
					res.Done(done)
				}
			}
		})
	}
}

// A NewBuilder func that returns nil is refused when the config arrives,
// rather than leaving the channel on endpointsharding's round robin.
func TestNilBalancerRefused(t *testing.T) {
	bld, err := NewBuilder("lbkit_test_nil", func() lbk.Balancer { return nil })
	require.NoError(t, err)
	cfg, err := bld.ParseConfig([]byte(`{}`))
	require.NoError(t, err)
	p := newPolicy(bld, nil, balancer.BuildOptions{})
	err = p.UpdateClientConnState(balancer.ClientConnState{BalancerConfig: cfg})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nil Balancer")
}
