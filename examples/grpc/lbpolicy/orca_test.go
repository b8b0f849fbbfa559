package lbpolicy_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/grpc/internal/echo"
	"github.com/lbkit/lbkit/examples/grpc/lbpolicy"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/wrr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/orca"
)

// orcaServer returns the server options of a backend that reports load
// the ORCA way: a server-wide orca.ServerMetricsRecorder with the given
// utilisation, rate and errors, sent in every RPC's trailer, and per-call
// named metrics recorded by an interceptor on the call's recorder.
func orcaServer(rec orca.ServerMetricsRecorder, named map[string]float64) []grpc.ServerOption {
	perCall := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if r := orca.CallMetricsRecorderFromContext(ctx); r != nil {
			for k, v := range named {
				r.SetNamedMetric(k, v)
			}
		}
		return h(ctx, req)
	}
	// The ORCA option first: its interceptor puts the call's recorder in
	// the context the next one sees.
	return []grpc.ServerOption{orca.CallMetricsServerOption(rec), grpc.ChainUnaryInterceptor(perCall)}
}

func recorderWith(cpu, app, mem, qps, eps float64) orca.ServerMetricsRecorder {
	r := orca.NewServerMetricsRecorder()
	r.SetCPUUtilization(cpu)
	r.SetApplicationUtilization(app)
	r.SetMemoryUtilization(mem)
	r.SetQPS(qps)
	r.SetEPS(eps)
	return r
}

// loadCatcher is leastconn, keeping the Load of every Done and looking up
// one named metric during Done, where Named is valid.
type loadCatcher struct {
	*leastconn.Picker
	mu    sync.Mutex
	loads []lbk.Load
	queue []float64
}

var lastCatcher atomic.Pointer[loadCatcher]

func (c *loadCatcher) Done(b lbk.Backend, r lbk.Result) {
	q, _ := r.Load.Metric("queue")
	c.mu.Lock()
	c.loads = append(c.loads, r.Load)
	c.queue = append(c.queue, q)
	c.mu.Unlock()
	c.Picker.Done(b, r)
}

// Real servers record ORCA metrics with grpc-go's orca package; the policy
// hands each RPC's report, from its trailer, to the lbkit picker's Done.
func TestORCAReachesPicker(t *testing.T) {
	checkNoLeaks(t)
	const policy = "lbkit_test_orca_catcher"
	b, err := lbpolicy.NewBuilder(policy, func() lbk.Balancer {
		c := &loadCatcher{Picker: leastconn.New()}
		lastCatcher.Store(c)
		return c
	})
	require.NoError(t, err)
	balancer.Register(b)

	rec := recorderWith(0.4, 0.3, 0.5, 120, 2)
	bs := startBackendsWith(t, func(int) []grpc.ServerOption {
		return orcaServer(rec, map[string]float64{"rif": 3, "latency_ms": 7.5, "queue": 9})
	}, time.Millisecond)
	cc, _ := dial(t, serviceConfig(policy, ""), endpoints(bs))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		_, err := echo.Call(ctx, cc, "hi")
		require.NoError(t, err)
	}
	c := lastCatcher.Load()
	require.NotNil(t, c)
	eventually(t, "three Dones", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.loads) >= 3
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, l := range c.loads {
		assert.Equal(t, 0.4, l.CPU, i)
		assert.Equal(t, 0.3, l.Application, i)
		assert.Equal(t, 0.5, l.Memory, i)
		assert.Equal(t, 120.0, l.RPS, i)
		assert.Equal(t, 2.0, l.EPS, i)
		assert.Equal(t, 3.0, l.InFlight, i)
		assert.Equal(t, 7500*time.Microsecond, l.Latency, i)
		assert.Equal(t, 9.0, c.queue[i], "a named metric, looked up during Done")
	}
}

// A backend that reports more utilisation for the same rate gets less
// traffic, through real gRPC servers recording ORCA metrics:
//
//   - lbkit_wrr_orca (A58): three backends serving 100 RPCs a second by
//     their reports, at utilisation 0.2, 0.2 and 0.8, weigh 500, 500 and
//     125, so the third should get 1/9 of the RPCs;
//   - lbkit_least_conn_orca: at 0.3, 0.3 and 0.9, the third wins a pair
//     only while the other holds three or more RPCs of this client's.
func TestORCAShiftsTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for a few seconds")
	}
	for _, tc := range []struct {
		policy, config string
		utils          []float64
		check          func(t *testing.T, share float64)
	}{
		{lbpolicy.ReportedWRR, `{"blackoutPeriod": "0.2s", "weightUpdatePeriod": "0.1s"}`, []float64{0.2, 0.2, 0.8},
			func(t *testing.T, share float64) { assert.InDelta(t, 1.0/9, share, 0.06) }},
		{lbpolicy.LeastConnORCA, `{}`, []float64{0.3, 0.3, 0.9},
			func(t *testing.T, share float64) { assert.Less(t, share, 0.22) }},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			checkNoLeaks(t)
			bs := startBackendsWith(t, func(i int) []grpc.ServerOption {
				return orcaServer(recorderWith(0, tc.utils[i], 0, 100, 0), nil)
			}, 2*time.Millisecond, 2*time.Millisecond, 2*time.Millisecond)
			cc, _ := dial(t, serviceConfig(tc.policy, tc.config), endpoints(bs))
			load(t, cc, 8, 300, nil) // reports flow; the blackout passes
			time.Sleep(400 * time.Millisecond)
			load(t, cc, 8, 100, nil) // so that reports are fresh after the pause
			c := load(t, cc, 8, 900, nil)
			t.Log(c)
			assert.Zero(t, c.failed)
			tc.check(t, c.share("b2"))
			assert.InDelta(t, c.share("b0"), c.share("b1"), 0.15, "the two alike")
		})
	}
}

// NewBuilder wraps a Reported configured in code as well; its Close is
// called with the channel's, which ends the weight loop.
func TestORCACustomReported(t *testing.T) {
	checkNoLeaks(t)
	const policy = "lbkit_test_orca_reported"
	var made atomic.Pointer[wrr.Reported]
	b, err := lbpolicy.NewBuilder(policy, func() lbk.Balancer {
		p := wrr.NewReported(wrr.WithBlackout(0), wrr.WithWeightPeriod(wrr.MinWeightPeriod))
		made.Store(p)
		return p
	})
	require.NoError(t, err)
	balancer.Register(b)
	bs := startBackendsWith(t, func(i int) []grpc.ServerOption {
		return orcaServer(recorderWith(0, []float64{0.1, 0.4}[i], 0, 100, 0), nil)
	}, time.Millisecond, time.Millisecond)
	cc, _ := dial(t, serviceConfig(policy, ""), endpoints(bs))
	load(t, cc, 4, 100, nil)
	p := made.Load()
	require.NotNil(t, p)
	eventually(t, "weights 4:1 scheduled", func() bool { return p.Period() == 5 })
	w0, ok0 := p.Weight(bs[0].addr)
	w1, ok1 := p.Weight(bs[1].addr)
	assert.True(t, ok0 && ok1)
	assert.InDelta(t, 1000, w0, 1e-9, "100 rps at 0.1")
	assert.InDelta(t, 250, w1, 1e-9)
}
