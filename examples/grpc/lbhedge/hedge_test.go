package lbhedge_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/grpc/internal/echo"
	"github.com/lbkit/lbkit/examples/grpc/lbhedge"
	"github.com/lbkit/lbkit/lbhttp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// TestHedgeTail is the point of hedging: two servers answering in base,
// one of which answers one call in twenty at twenty times that (2.5% of
// all calls, so the unhedged p99 is a slow one). The same load goes
// through a channel without the interceptor and one with it (p95 delay,
// at most twice the servers' latency), in alternating rounds, in one run: hedging must cut the p99 at least
// threefold for at most 10% more RPCs, as the servers count them. Each
// RPC carries its own message, and no server may see one twice: every
// hedge went to the other server.
func TestHedgeTail(t *testing.T) {
	const base, rounds, calls, workers = 200 * time.Millisecond, 4, 150, 8
	tail := func(_ *backend, n int64, _ string) time.Duration {
		if n%20 == 0 {
			return 20 * base
		}
		return base
	}
	bs := startBackends(t, tail, fixed(base))
	// The default delay, the 95th percentile, with a ceiling of twice the
	// servers' latency: on a loaded machine its own stalls, not the
	// servers', set the percentile, and without a ceiling they push the
	// delay up with them.
	h, err := lbhedge.New(lbhedge.Config{Methods: []string{echo.Method}, MaxDelay: 2 * base})
	require.NoError(t, err)
	plain := dial(t, roundRobin, bs, nil)
	hedged := dial(t, roundRobin, bs, h)
	warmAll(t, plain, bs)
	warmAll(t, hedged, bs)

	// Warm the sketch: no hedge before PercentileMinSamples answers.
	run(t, hedged, echo.Method, "sketch", workers, 2*lbhttp.PercentileMinSamples)
	settle(t, bs)

	var without, with []time.Duration
	var rpcsWithout, rpcsWith int64
	for r := range rounds {
		before := total(bs)
		without = append(without, run(t, plain, echo.Method, fmt.Sprintf("plain%d", r), workers, calls)...)
		settle(t, bs)
		rpcsWithout += total(bs) - before
		before = total(bs)
		with = append(with, run(t, hedged, echo.Method, fmt.Sprintf("hedged%d", r), workers, calls)...)
		settle(t, bs)
		rpcsWith += total(bs) - before
	}
	p99Without, p99With := quantile(without, 0.99), quantile(with, 0.99)
	extra := float64(rpcsWith-int64(len(with))) / float64(len(with))
	d, _ := h.Delay()
	t.Logf("delay now %v; p95 without %v, with %v", d, quantile(without, .95), quantile(with, .95))
	t.Logf("without hedging: p50 %v p99 %v, %d RPCs for %d calls", quantile(without, 0.5), p99Without, rpcsWithout, len(without))
	t.Logf("with hedging:    p50 %v p99 %v, %d RPCs for %d calls (%.1f%% more), stats %+v",
		quantile(with, 0.5), p99With, rpcsWith, len(with), 100*extra, h.Stats())
	assert.Equal(t, int64(len(without)), rpcsWithout, "no interceptor, no extra RPC")
	assert.GreaterOrEqual(t, float64(p99Without), 3*float64(p99With), "hedging cuts the p99 threefold")
	assert.LessOrEqual(t, extra, 0.10, "for at most 10% more RPCs")
	assert.Positive(t, h.Stats().Wins, "hedges answered")
	for _, b := range bs {
		assert.Equal(t, 1, b.maxTimes(), "%s saw a message twice: a hedge went to the same server", b.name)
	}
}

// TestNotIdempotentNeverHedged sends RPCs of a method the Config does not
// name to a slow server: each reaches one server once, however long it
// waits. Echo RPCs over the same channel, which are named, are hedged,
// so the setup would show a hedge if Store got one.
func TestNotIdempotentNeverHedged(t *testing.T) {
	const n = 20
	bs := startBackends(t, fixed(300*time.Millisecond), fixed(0))
	h, err := lbhedge.New(lbhedge.Config{Methods: []string{echo.Method}, Percentile: -1, MinDelay: 10 * time.Millisecond})
	require.NoError(t, err)
	cc := dial(t, roundRobin, bs, h)
	warmAll(t, cc, bs)

	run(t, cc, echo.StoreMethod, "store", 4, n)
	settle(t, bs)
	assert.Equal(t, int64(n), bs[0].stores.Load()+bs[1].stores.Load(), "one Store RPC per call")
	assert.Equal(t, int64(n), total(bs))
	assert.Positive(t, bs[0].stores.Load(), "some went to the slow server, and waited there")
	for i := range n {
		msg := fmt.Sprintf("store-%d", i)
		assert.Equal(t, 1, bs[0].times(msg)+bs[1].times(msg), msg)
	}
	assert.Zero(t, h.Stats().Hedges)

	run(t, cc, echo.Method, "echo", 4, n)
	settle(t, bs)
	assert.Greater(t, total(bs), int64(2*n), "Echo, named, is hedged")
	assert.Positive(t, h.Stats().Hedges)
}

// TestLoserCancelled sends RPCs over a slow server and a fast one: those
// whose first attempt goes to the slow one are answered by the hedge, and
// the slow server sees each of its calls cancelled. The winner's header
// and peer reach the caller's options.
func TestLoserCancelled(t *testing.T) {
	const n = 20
	const slow = 5 * time.Second
	bs := startBackends(t, fixed(slow), fixed(0))
	h, err := lbhedge.New(lbhedge.Config{Methods: []string{echo.Method}, Percentile: -1, MinDelay: 20 * time.Millisecond})
	require.NoError(t, err)
	cc := dial(t, roundRobin, bs, h)
	warmAll(t, cc, bs)

	for i := range n {
		var md metadata.MD
		var p peer.Peer
		reply, took, err := call(cc, echo.Method, fmt.Sprintf("m%d", i), grpc.Header(&md), grpc.Peer(&p))
		require.NoError(t, err)
		assert.Equal(t, "b1", reply, "the fast server answers")
		assert.Less(t, took, slow/5, "no wait for the slow server")
		assert.Equal(t, []string{"b1"}, md.Get("server"), "the winner's header")
		require.NotNil(t, p.Addr)
		assert.Equal(t, bs[1].addr, p.Addr.String(), "the winner's peer")
	}
	settle(t, bs)
	t.Logf("slow server: %d calls, %d cancelled; stats %+v", bs[0].calls.Load(), bs[0].cancelled.Load(), h.Stats())
	assert.Positive(t, bs[0].calls.Load(), "round robin sent first attempts to the slow server")
	assert.Equal(t, bs[0].calls.Load(), bs[0].cancelled.Load(), "every loser saw its context end")
	// A first attempt to the fast server that the machine delays past the
	// hedge delay sends a hedge to the slow one, which loses: the slow
	// server's calls are the wins plus those (less any cancelled before
	// it reached the server).
	st := h.Stats()
	assert.LessOrEqual(t, total(bs), int64(n)+st.Hedges, "one call per RPC, plus at most the hedges")
	assert.GreaterOrEqual(t, total(bs), int64(n)+st.Wins)
	assert.Positive(t, st.Wins)
	assert.LessOrEqual(t, st.Wins, bs[0].calls.Load())
}

// TestBudgetStopsHedges sends RPCs whose first attempts are all slow
// through a budget of a tenth of the requests (and no reserve to speak
// of): hedges go until it is spent, at most a tenth of the RPCs, and no
// more. A budget spent elsewhere (by an lbhttp Transport sharing it, say)
// stops hedges but for what the new RPCs earn (a tenth of each).
func TestBudgetStopsHedges(t *testing.T) {
	const n, ratio = 60, 0.1
	slow := newFirstSlow(300*time.Millisecond, 1)
	bs := startBackends(t, slow.delay, slow.delay)
	budget, err := lbhttp.NewBudget(lbhttp.BudgetConfig{Ratio: ratio, MinPerSecond: 1e-9, Window: time.Minute})
	require.NoError(t, err)
	h, err := lbhedge.New(lbhedge.Config{Methods: []string{echo.Method}, Percentile: -1, MinDelay: 10 * time.Millisecond, Budget: budget})
	require.NoError(t, err)
	cc := dial(t, roundRobin, bs, h)
	warmAll(t, cc, bs)

	run(t, cc, echo.Method, "a", 6, n)
	settle(t, bs)
	hedges := total(bs) - n
	t.Logf("%d RPCs, %d hedges; stats %+v", n, hedges, h.Stats())
	assert.Positive(t, hedges, "the budget allowed some")
	assert.LessOrEqual(t, float64(h.Stats().Hedges), ratio*n, "no more than it allowed")
	assert.LessOrEqual(t, hedges, h.Stats().Hedges, "the servers saw at most the hedges sent")

	// Spend what is left, as another user of the budget would.
	for i := 0; i < 1000 && budget.Retry(time.Now()); i++ {
	}
	require.False(t, budget.Retry(time.Now()))
	const m = 20
	before, sent := total(bs), h.Stats().Hedges
	run(t, cc, echo.Method, "b", 6, m)
	settle(t, bs)
	later := total(bs) - before - m
	t.Logf("budget spent elsewhere: %d RPCs, %d hedges", m, later)
	assert.LessOrEqual(t, float64(later), ratio*m, "no hedge but what the new RPCs earned, of %d slow ones", m)
	assert.LessOrEqual(t, float64(h.Stats().Hedges-sent), ratio*m)
}

// TestHedgeAvoidsEndpoint sends every RPC with one ring-hash key, so that
// each first attempt goes to the key's home, and makes every first
// attempt slow: the hedges must all go elsewhere, which takes
// Request.Avoid reaching the ring (without it, the hedge would hash home
// too).
func TestHedgeAvoidsEndpoint(t *testing.T) {
	const n = 20
	slow := newFirstSlow(300*time.Millisecond, 1)
	bs := startBackends(t, slow.delay, slow.delay, slow.delay)
	h, err := lbhedge.New(lbhedge.Config{Methods: []string{echo.Method}, Percentile: -1, MinDelay: 10 * time.Millisecond})
	require.NoError(t, err)
	cc := dial(t, `{"lbkit_ring_hash": {"key": "x-user"}}`, bs, h)
	send := func(user, msg string) string {
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-user", user), 10*time.Second)
		defer cancel()
		reply, err := echo.Call(ctx, cc, msg)
		require.NoError(t, err)
		return reply
	}
	// Until every server is READY, the ring holds fewer and the key's
	// home may move: warm up with many keys until each has served.
	for i := 0; i < 300 && (bs[0].calls.Load() == 0 || bs[1].calls.Load() == 0 || bs[2].calls.Load() == 0); i++ {
		send(fmt.Sprintf("user-%d", i), fmt.Sprintf("warm-%d", i))
	}
	settle(t, bs)
	wins := h.Stats().Wins

	home := ""
	for i := range n {
		msg := fmt.Sprintf("m%d", i)
		reply := send("alice", msg)
		settle(t, bs)
		for _, b := range bs {
			if b.times(msg) == 1 && b.name != reply {
				if home == "" {
					home = b.name
				}
				assert.Equal(t, home, b.name, "%s: the first attempt went to the key's home", msg)
			}
		}
		assert.NotEqual(t, home, reply, "%s: a hedge elsewhere answered", msg)
	}
	for _, b := range bs {
		assert.LessOrEqual(t, b.maxTimes(), 1, "%s saw a message twice", b.name)
	}
	assert.Equal(t, int64(n), h.Stats().Wins-wins, "a hedge answered every RPC")
}

// TestThreeAttempts: with MaxAttempts 3 and the first two attempts of
// every RPC slow, the second hedge answers, one delay after the first
// hedge, and both earlier attempts are cancelled.
func TestThreeAttempts(t *testing.T) {
	const n = 10
	const slow = 5 * time.Second
	first2 := newFirstSlow(slow, 2)
	bs := startBackends(t, first2.delay, first2.delay, first2.delay)
	h, err := lbhedge.New(lbhedge.Config{Methods: []string{echo.Method}, MaxAttempts: 3, Percentile: -1, MinDelay: 20 * time.Millisecond})
	require.NoError(t, err)
	cc := dial(t, roundRobin, bs, h)
	warmAll(t, cc, bs)
	before, wins := total(bs), h.Stats().Wins
	for i := range n {
		_, took, err := call(cc, echo.Method, fmt.Sprintf("m%d", i))
		require.NoError(t, err)
		assert.Less(t, took, slow/5, "the third attempt answered")
	}
	settle(t, bs)
	assert.Equal(t, before+3*n, total(bs), "three attempts per RPC")
	assert.Equal(t, wins+n, h.Stats().Wins)
	// Each hedge avoids the endpoint of the attempt before it only (one
	// Request.Avoid), so under round robin the third may go back to the
	// first's server: no check that a server saw a message once.
	cancelled := int64(0)
	for _, b := range bs {
		cancelled += b.cancelled.Load()
	}
	assert.Equal(t, int64(2*n), cancelled, "both slow attempts of every RPC cancelled")
}

// TestSingleEndpointNoHedge: with one server, a hedge could only go where
// the first attempt is; the picker refuses it, and nothing is sent.
func TestSingleEndpointNoHedge(t *testing.T) {
	const n = 10
	bs := startBackends(t, fixed(100*time.Millisecond))
	h, err := lbhedge.New(lbhedge.Config{Methods: []string{echo.Method}, Percentile: -1, MinDelay: 10 * time.Millisecond})
	require.NoError(t, err)
	cc := dial(t, roundRobin, bs, h)
	run(t, cc, echo.Method, "m", 2, n)
	settle(t, bs)
	assert.Equal(t, int64(n), total(bs))
	assert.Zero(t, bs[0].cancelled.Load())
	assert.Zero(t, h.Stats().Hedges)
}

// TestOtherPolicyNoHedge: under gRPC's own round_robin nothing tells the
// interceptor where an attempt went, so it sends no hedge, however slow
// the server.
func TestOtherPolicyNoHedge(t *testing.T) {
	const n = 10
	bs := startBackends(t, fixed(200*time.Millisecond), fixed(200*time.Millisecond))
	h, err := lbhedge.New(lbhedge.Config{Methods: []string{echo.Method}, Percentile: -1, MinDelay: 10 * time.Millisecond})
	require.NoError(t, err)
	cc := dial(t, `{"round_robin": {}}`, bs, h)
	warmAll(t, cc, bs)
	run(t, cc, echo.Method, "m", 4, n)
	settle(t, bs)
	assert.Equal(t, int64(n), total(bs))
	assert.Zero(t, h.Stats().Hedges)
}

// TestNonFatalCodes: a first attempt that fails UNAVAILABLE (non-fatal by
// default) sends the hedge at once, long before the delay; one that fails
// with a fatal code ends the RPC with it, with no hedge.
func TestNonFatalCodes(t *testing.T) {
	const n = 20
	const delay = 5 * time.Second
	bs := startBackends(t, fixed(0), fixed(0))
	h, err := lbhedge.New(lbhedge.Config{Methods: []string{echo.Method}, Percentile: -1, MinDelay: delay})
	require.NoError(t, err)
	cc := dial(t, roundRobin, bs, h)
	warmAll(t, cc, bs)

	unavailable := status.Error(codes.Unavailable, "going away")
	bs[0].fail.Store(&unavailable)
	for i := range n {
		reply, took, err := call(cc, echo.Method, fmt.Sprintf("u%d", i))
		require.NoError(t, err)
		assert.Equal(t, "b1", reply)
		assert.Less(t, took, delay/5, "the next hedge went at once")
	}
	assert.Positive(t, h.Stats().Wins, "hedges answered for b0")

	settle(t, bs)
	before := total(bs)
	invalid := status.Error(codes.InvalidArgument, "no")
	bs[0].fail.Store(&invalid)
	failed := 0
	for i := range n {
		_, took, err := call(cc, echo.Method, fmt.Sprintf("f%d", i))
		if err != nil {
			failed++
			assert.Equal(t, codes.InvalidArgument, status.Code(err))
			assert.Less(t, took, delay/5)
		}
	}
	settle(t, bs)
	assert.Positive(t, failed, "round robin sent some to b0")
	assert.Equal(t, before+n, total(bs), "a fatal code sends no hedge")
}

// TestConfig checks that New refuses bad settings, naming the field, and
// takes the zero values as the defaults.
func TestConfig(t *testing.T) {
	ok := []string{echo.Method}
	bad := []struct {
		name string
		cfg  lbhedge.Config
		want string
	}{
		{"no method", lbhedge.Config{}, "no method"},
		{"not a full name", lbhedge.Config{Methods: []string{"Echo"}}, `method "Echo"`},
		{"service only", lbhedge.Config{Methods: []string{"/lbkit.example.Echo/"}}, "full method name"},
		{"one attempt", lbhedge.Config{Methods: ok, MaxAttempts: 1}, "MaxAttempts 1"},
		{"six attempts", lbhedge.Config{Methods: ok, MaxAttempts: 6}, "MaxAttempts 6"},
		{"percentile 100", lbhedge.Config{Methods: ok, Percentile: 100}, "Percentile 100"},
		{"fixed without delay", lbhedge.Config{Methods: ok, Percentile: -1}, "MinDelay"},
		{"negative floor", lbhedge.Config{Methods: ok, MinDelay: -1}, "MinDelay -1ns"},
		{"negative ceiling", lbhedge.Config{Methods: ok, MaxDelay: -1}, "MaxDelay -1ns"},
		{"ceiling below floor", lbhedge.Config{Methods: ok, MinDelay: time.Second, MaxDelay: time.Millisecond}, "below MinDelay"},
		{"OK non-fatal", lbhedge.Config{Methods: ok, NonFatalCodes: []codes.Code{codes.OK}}, "OK"},
		{"no such code", lbhedge.Config{Methods: ok, NonFatalCodes: []codes.Code{99}}, "NonFatalCodes"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			h, err := lbhedge.New(tt.cfg)
			assert.Nil(t, h)
			require.Error(t, err)
			assert.True(t, errors.Is(err, lbk.ErrBadOption), "%v", err)
			assert.True(t, strings.HasPrefix(err.Error(), "lbhedge: "), "%v", err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	for _, cfg := range []lbhedge.Config{
		{Methods: ok},
		{Hedge: func(m string) bool { return strings.HasSuffix(m, "/Echo") }},
		{Methods: ok, MaxAttempts: lbhedge.MaxAttempts, Percentile: 99.9, MinDelay: time.Millisecond, MaxDelay: time.Second,
			NonFatalCodes: []codes.Code{}, NoBudget: true},
	} {
		_, err := lbhedge.New(cfg)
		assert.NoError(t, err)
	}
}
