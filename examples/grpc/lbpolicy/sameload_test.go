package lbpolicy_test

import (
	"context"
	"encoding/base64"
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/grpc/internal/echo"
	"github.com/lbkit/lbkit/examples/grpc/lbpolicy"
	"github.com/lbkit/lbkit/lbhttp"
	"github.com/lbkit/lbkit/rr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// seen is what a sameCatcher's Done saw of one RPC's Load: its fixed
// fields, and the named metrics it was asked for, looked up during Done.
type seen struct {
	fixed lbk.Load
	named map[string]float64
}

// sameCatcher is round robin, sending what each Done's Load holds on a
// channel.
type sameCatcher struct {
	*rr.Picker
	names atomic.Pointer[[]string] // the named metrics to look up
	out   chan seen
}

var lastSame atomic.Pointer[sameCatcher]

func (c *sameCatcher) Done(_ lbk.Backend, r lbk.Result) {
	s := seen{fixed: r.Load, named: map[string]float64{}}
	s.fixed.Named = nil
	for _, n := range *c.names.Load() {
		if v, ok := r.Load.Metric(n); ok {
			s.named[n] = v
		}
	}
	c.out <- s
}

// reportHeader is the metadata key by which a test's call tells the
// backend the report to send back, as the bytes of an OrcaLoadReport.
const reportHeader = "x-test-report-bin"

// echoReport is a server interceptor that sends the report the call asked
// for in the trailer gRPC's orca package reads, endpoint-load-metrics-bin,
// as it is: a backend may send any bytes there, a recorder's checks or
// not.
func echoReport(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(reportHeader); len(v) == 1 {
		if err := grpc.SetTrailer(ctx, metadata.Pairs("endpoint-load-metrics-bin", v[0])); err != nil {
			return nil, err
		}
	}
	return h(ctx, req)
}

// The same ORCA report gives the same Load whichever way it comes: as an
// HTTP header through lbhttp's parser (BIN, the same bytes; TEXT where the
// report can be written in it) and in a real gRPC trailer through the
// policy, read in the lbkit picker's Done. Good reports give their
// values; a report with one bad value is no report on both paths (the
// zero Load), not a report with that field dropped or clamped.
func TestSameLoadOverHTTPAndGRPC(t *testing.T) {
	checkNoLeaks(t)
	many := func(n int) map[string]float64 {
		m := make(map[string]float64, n)
		for i := range n {
			m["m"+strconv.Itoa(i)] = float64(i)
		}
		return m
	}
	tests := []struct {
		name   string
		report *v3orcapb.OrcaLoadReport
		text   string   // the same report as TEXT, if it can be written
		want   lbk.Load // without Named; zero for a refused report
		named  map[string]float64
	}{
		{
			name: "envoy's example",
			report: &v3orcapb.OrcaLoadReport{CpuUtilization: 0.7, ApplicationUtilization: 0.8, MemUtilization: 0.9,
				Eps: 2, RpsFractional: 1000, NamedMetrics: map[string]float64{"foo": 123, "bar": 0.2}},
			text:  "TEXT cpu_utilization:0.7,application_utilization:0.8,mem_utilization:0.9,eps:2,rps_fractional:1000,named_metrics.foo:123,named_metrics.bar:0.2",
			want:  lbk.Load{CPU: 0.7, Application: 0.8, Memory: 0.9, EPS: 2, RPS: 1000},
			named: map[string]float64{"foo": 123, "bar": 0.2},
		},
		{
			name:   "in flight and latency",
			report: &v3orcapb.OrcaLoadReport{NamedMetrics: map[string]float64{lbk.MetricInFlight: 3, lbk.MetricLatency: 4.5}},
			text:   "TEXT named_metrics.rif:3,named_metrics.latency_ms:4.5",
			want:   lbk.Load{InFlight: 3, Latency: 4500 * time.Microsecond},
			named:  map[string]float64{"rif": 3, "latency_ms": 4.5},
		},
		{
			name: "deprecated integer rps",
			//lint:ignore SA1019 servers that send only the deprecated rps
			report: &v3orcapb.OrcaLoadReport{Rps: 7},
			want:   lbk.Load{RPS: 7},
		},
		{
			name: "rps_fractional wins over rps",
			//lint:ignore SA1019 a server that sends both
			report: &v3orcapb.OrcaLoadReport{Rps: 7, RpsFractional: 7.5},
			want:   lbk.Load{RPS: 7.5},
		},
		{
			name: "maps, negative where the proto allows it",
			report: &v3orcapb.OrcaLoadReport{CpuUtilization: 1.5, RequestCost: map[string]float64{"db": -1},
				Utilization: map[string]float64{"gpu": 0.5}, NamedMetrics: map[string]float64{"q": -1}},
			text:  "TEXT cpu_utilization:1.5,request_cost.db:-1,utilization.gpu:0.5,named_metrics.q:-1",
			want:  lbk.Load{CPU: 1.5},
			named: map[string]float64{"q": -1},
		},
		{
			name:   "empty",
			report: &v3orcapb.OrcaLoadReport{},
			text:   "TEXT ",
		},
		{
			name:   "64 named metrics",
			report: &v3orcapb.OrcaLoadReport{CpuUtilization: 0.5, NamedMetrics: many(lbk.MaxNamedMetrics)},
			want:   lbk.Load{CPU: 0.5},
			named:  many(lbk.MaxNamedMetrics),
		},
		// Refused, whole.
		{name: "negative cpu", report: &v3orcapb.OrcaLoadReport{CpuUtilization: -0.1, RpsFractional: 10}, text: "TEXT cpu_utilization:-0.1,rps_fractional:10"},
		{name: "NaN application", report: &v3orcapb.OrcaLoadReport{ApplicationUtilization: math.NaN(), CpuUtilization: 0.5, RpsFractional: 10}},
		{name: "infinite eps", report: &v3orcapb.OrcaLoadReport{Eps: math.Inf(1), RpsFractional: 10}},
		{name: "memory above 1", report: &v3orcapb.OrcaLoadReport{MemUtilization: 1.5, CpuUtilization: 0.5}, text: "TEXT mem_utilization:1.5,cpu_utilization:0.5"},
		{name: "negative rps_fractional", report: &v3orcapb.OrcaLoadReport{RpsFractional: -5, CpuUtilization: 0.5}},
		{name: "negative rif", report: &v3orcapb.OrcaLoadReport{NamedMetrics: map[string]float64{lbk.MetricInFlight: -1}}, text: "TEXT named_metrics.rif:-1"},
		{name: "latency out of range", report: &v3orcapb.OrcaLoadReport{NamedMetrics: map[string]float64{lbk.MetricLatency: 1e300}}},
		{name: "NaN named metric", report: &v3orcapb.OrcaLoadReport{CpuUtilization: 0.5, NamedMetrics: map[string]float64{"q": math.NaN()}}},
		{name: "utilization above 1", report: &v3orcapb.OrcaLoadReport{CpuUtilization: 0.5, Utilization: map[string]float64{"gpu": 1.5}}, text: "TEXT cpu_utilization:0.5,utilization.gpu:1.5"},
		{name: "NaN request cost", report: &v3orcapb.OrcaLoadReport{CpuUtilization: 0.5, RequestCost: map[string]float64{"db": math.NaN()}}},
		{name: "empty name", report: &v3orcapb.OrcaLoadReport{CpuUtilization: 0.5, NamedMetrics: map[string]float64{"": 1}}},
		{name: "65 named metrics", report: &v3orcapb.OrcaLoadReport{CpuUtilization: 0.5, NamedMetrics: many(lbk.MaxNamedMetrics + 1)}},
	}

	const policy = "lbkit_test_same_load"
	b, err := lbpolicy.NewBuilder(policy, func() lbk.Balancer {
		c := &sameCatcher{Picker: rr.New(), out: make(chan seen, 16)}
		c.names.Store(&[]string{})
		lastSame.Store(c)
		return c
	})
	require.NoError(t, err)
	balancer.Register(b)
	bs := startBackendsWith(t, func(int) []grpc.ServerOption {
		return []grpc.ServerOption{grpc.ChainUnaryInterceptor(echoReport)}
	}, 0)
	cc, _ := dial(t, serviceConfig(policy, ""), endpoints(bs))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(tt.report)
			require.NoError(t, err)
			names := []string{"absent"}
			for n := range tt.named {
				names = append(names, n)
			}

			// HTTP: the same bytes in the BIN form, and TEXT.
			hl, herr := lbhttp.ParseLoad("BIN " + base64.StdEncoding.EncodeToString(raw))
			switch {
			case len(raw) == 0:
				// An empty report is no BIN header at all; the zero Load.
			case tt.want == (lbk.Load{}) && tt.named == nil:
				require.ErrorIs(t, herr, lbk.ErrBadLoad, "HTTP refuses it")
				t.Logf("HTTP: %v", herr)
			default:
				require.NoError(t, herr)
			}
			httpSeen := look(hl, names)
			if tt.text != "" {
				tl, _ := lbhttp.ParseLoad(tt.text)
				assert.Equal(t, httpSeen, look(tl, names), "TEXT and BIN agree")
			}

			// gRPC: a real trailer, read by the policy.
			_, err = echo.Call(metadata.AppendToOutgoingContext(ctx, reportHeader, string(raw)), cc, "hi")
			require.NoError(t, err)
			c := lastSame.Load()
			require.NotNil(t, c)
			c.names.Store(&names)
			// The Done of the call above may have run before names were
			// stored: call again, and take the second Done.
			select {
			case <-c.out:
			case <-ctx.Done():
				t.Fatal("no Done")
			}
			_, err = echo.Call(metadata.AppendToOutgoingContext(ctx, reportHeader, string(raw)), cc, "hi")
			require.NoError(t, err)
			var grpcSeen seen
			select {
			case grpcSeen = <-c.out:
			case <-ctx.Done():
				t.Fatal("no Done")
			}

			want := seen{fixed: tt.want, named: map[string]float64{}}
			for k, v := range tt.named {
				want.named[k] = v
			}
			assert.Equal(t, want, httpSeen, "HTTP")
			assert.Equal(t, want, grpcSeen, "gRPC")
		})
	}
}

// look is what a Done would see of l: its fixed fields and the named
// metrics among names that it has.
func look(l lbk.Load, names []string) seen {
	s := seen{fixed: l, named: map[string]float64{}}
	s.fixed.Named = nil
	for _, n := range names {
		if v, ok := l.Metric(n); ok {
			s.named[n] = v
		}
	}
	return s
}
