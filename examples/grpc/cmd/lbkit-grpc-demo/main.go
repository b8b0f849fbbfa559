package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/grpc/internal/echo"
	"github.com/lbkit/lbkit/examples/grpc/lbpolicy"
	lbhealth "github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/lrt"
	"github.com/lbkit/lbkit/rr"
	"github.com/lbkit/lbkit/wrr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
)

// options are the command's flags, checked.
type options struct {
	policy      string
	config      string // the policy's JSON config
	key         string // metadata key the demo sets per call, if the config names one
	delays      []time.Duration
	weights     []int
	capacities  []int // per server, for ORCA reports; nil: none report
	rpcs        int
	concurrency int
	stop        int // index of the server to stop gracefully, or -1
	kill        int // index of the server to stop abruptly, or -1
	notServing  int // index of the server to mark NOT_SERVING, or -1
	stall       int // index of the server to stall (accept RPCs, never answer), or -1
	deadline    time.Duration
	eject       bool // wrap the policy's picker in lbkit's health decorator
	timeout     time.Duration
}

func main() {
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "lbkit-grpc-demo:", err)
		os.Exit(2)
	}
	if err := run(opts, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "lbkit-grpc-demo:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (*options, error) {
	fs := flag.NewFlagSet("lbkit-grpc-demo", flag.ContinueOnError)
	var names []string
	for _, b := range lbpolicy.Builders() {
		names = append(names, b.Name())
	}
	policy := fs.String("policy", lbpolicy.LeastConn, "LB policy: "+strings.Join(names, ", "))
	config := fs.String("config", "", `the policy's JSON config; default {} or, for the hash policies, {"key": "x-user"} ({"key": "x-client-ip"} for lbkit_ip_hash)`)
	delays := fs.String("delays", "2ms,2ms,40ms", "one server per comma-separated delay")
	weights := fs.String("weights", "", "comma-separated endpoint weights, one per server (lbkit_wrr)")
	capacities := fs.String("capacities", "", "comma-separated capacities in RPCs in flight, one per server: each reports ORCA load, utilisation = mean RPCs in flight / capacity (lbkit_wrr_orca, lbkit_least_conn_orca)")
	rpcs := fs.Int("rpcs", 600, "RPCs to send")
	concurrency := fs.Int("concurrency", 8, "concurrent callers")
	stop := fs.Int("stop", -1, "stop this server (0-based) a third of the way through, as a deploy does: NOT_SERVING, then GracefulStop")
	kill := fs.Int("kill", -1, "stop this server (0-based) a third of the way through, abruptly, as a crash does")
	notServing := fs.Int("not-serving", -1, "mark this server NOT_SERVING a third of the way through")
	stall := fs.Int("stall", -1, "from a third of the way through, this server accepts RPCs and never answers them (its health service still says SERVING)")
	deadline := fs.Duration("deadline", time.Second, `each RPC's deadline: the service config's "timeout"`)
	eject := fs.Bool("eject", false, "wrap the policy's picker in lbkit's health decorator, whose passive checks eject a server after 5 failures in a row (lbkit_round_robin, lbkit_wrr, lbkit_least_conn, lbkit_lrt)")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}

	o := &options{policy: *policy, rpcs: *rpcs, concurrency: *concurrency, stop: *stop,
		kill: *kill, notServing: *notServing, stall: *stall, deadline: *deadline, eject: *eject, timeout: *timeout}
	var b *lbpolicy.Builder
	for _, c := range lbpolicy.Builders() {
		if c.Name() == o.policy {
			b = c
		}
	}
	if b == nil {
		return nil, fmt.Errorf("-policy %q: want one of %s", o.policy, strings.Join(names, ", "))
	}
	o.config = *config
	if o.config == "" {
		o.config = "{}"
		switch o.policy {
		case lbpolicy.IPHash:
			o.config = `{"key": "x-client-ip"}`
		case lbpolicy.RingHash, lbpolicy.Maglev:
			o.config = `{"key": "x-user"}`
		}
	}
	cfg, err := b.ParseConfig(json.RawMessage(o.config))
	if err != nil {
		return nil, fmt.Errorf("-config: %w", err)
	}
	o.key = cfg.(*lbpolicy.Config).Key

	for _, s := range strings.Split(*delays, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d < 0 {
			return nil, fmt.Errorf("-delays: %q is not a duration of 0 or more", s)
		}
		o.delays = append(o.delays, d)
	}
	if *weights != "" {
		for _, s := range strings.Split(*weights, ",") {
			w, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || w < 1 {
				return nil, fmt.Errorf("-weights: %q is not a weight of 1 or more", s)
			}
			o.weights = append(o.weights, w)
		}
		if len(o.weights) != len(o.delays) {
			return nil, fmt.Errorf("-weights: %d weights for %d servers", len(o.weights), len(o.delays))
		}
	}
	if *capacities != "" {
		for _, s := range strings.Split(*capacities, ",") {
			c, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || c < 1 {
				return nil, fmt.Errorf("-capacities: %q is not a capacity of 1 or more", s)
			}
			o.capacities = append(o.capacities, c)
		}
		if len(o.capacities) != len(o.delays) {
			return nil, fmt.Errorf("-capacities: %d capacities for %d servers", len(o.capacities), len(o.delays))
		}
	}
	switch {
	case o.rpcs < 1 || o.rpcs > 1_000_000:
		return nil, fmt.Errorf("-rpcs %d: want 1 to 1000000", o.rpcs)
	case o.concurrency < 1 || o.concurrency > 1000:
		return nil, fmt.Errorf("-concurrency %d: want 1 to 1000", o.concurrency)
	case o.stop < -1 || o.stop >= len(o.delays):
		return nil, fmt.Errorf("-stop %d: want a server from 0 to %d", o.stop, len(o.delays)-1)
	case o.kill < -1 || o.kill >= len(o.delays):
		return nil, fmt.Errorf("-kill %d: want a server from 0 to %d", o.kill, len(o.delays)-1)
	case o.kill >= 0 && o.kill == o.stop:
		return nil, fmt.Errorf("-kill %d and -stop %d: one server cannot stop both ways", o.kill, o.stop)
	case o.notServing < -1 || o.notServing >= len(o.delays):
		return nil, fmt.Errorf("-not-serving %d: want a server from 0 to %d", o.notServing, len(o.delays)-1)
	case o.stall < -1 || o.stall >= len(o.delays):
		return nil, fmt.Errorf("-stall %d: want a server from 0 to %d", o.stall, len(o.delays)-1)
	case o.stall >= 0 && (o.stall == o.stop || o.stall == o.kill):
		return nil, fmt.Errorf("-stall %d: that server already stops", o.stall)
	case o.deadline < time.Millisecond:
		return nil, fmt.Errorf("-deadline %v: want 1ms or more", o.deadline)
	case o.eject && ejecting[o.policy] == nil:
		return nil, fmt.Errorf("-eject with %s: want one of lbkit_round_robin, lbkit_wrr, lbkit_least_conn, lbkit_lrt", o.policy)
	case o.timeout <= 0:
		return nil, fmt.Errorf("-timeout %v: want more than 0", o.timeout)
	}
	return o, nil
}

// ejecting are the algorithms -eject wraps in lbkit's health decorator,
// by policy name.
var ejecting = map[string]func() lbk.Balancer{
	lbpolicy.RoundRobin:         func() lbk.Balancer { return rr.New() },
	lbpolicy.WeightedRoundRobin: func() lbk.Balancer { return wrr.New() },
	lbpolicy.LeastConn:          func() lbk.Balancer { return leastconn.New() },
	lbpolicy.LeastResponseTime:  func() lbk.Balancer { return lrt.New() },
}

// ejectingPolicy registers, under the policy's name and "_eject", the
// policy's algorithm inside lbkit's health decorator: passive checks
// only (the channel's healthCheckConfig probes), so five failures in a
// row, DEADLINE_EXCEEDED among them, eject a server for 30 s. The policy
// closes the decorator with the channel. It returns the name.
func ejectingPolicy(policy string, changes func(lbhealth.Change)) (string, error) {
	name := policy + "_eject"
	b, err := lbpolicy.NewBuilder(name, func() lbk.Balancer {
		h, err := lbhealth.New(ejecting[policy](), lbhealth.Config{OnChange: changes})
		if err != nil {
			panic(err) // the zero Config is valid
		}
		return h
	})
	if err != nil {
		return "", err
	}
	balancer.Register(b)
	return name, nil
}

// server is one stand-in backend.
type server struct {
	name    string
	addr    string
	grpc    *grpc.Server
	health  *health.Server
	served  atomic.Int64
	stalled atomic.Bool // accept RPCs, answer none
	done    chan struct{}

	// With ORCA reports (capacity > 0).
	inFlight atomic.Int64  // RPCs being served
	busy     atomic.Int64  // nanoseconds spent serving, summed over RPCs
	report   chan struct{} // closed to stop the reporter
}

// reportEvery is how often a server brings its ORCA recorder up to date.
const reportEvery = 100 * time.Millisecond

func startServer(name string, delay time.Duration, capacity int) (*server, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	var opts []grpc.ServerOption
	var rec orca.ServerMetricsRecorder
	if capacity > 0 {
		// The backend side of ORCA: a server-wide recorder whose metrics
		// go in every RPC's trailer.
		rec = orca.NewServerMetricsRecorder()
		opts = append(opts, orca.CallMetricsServerOption(rec))
	}
	s := &server{name: name, addr: lis.Addr().String(), grpc: grpc.NewServer(opts...), health: health.NewServer(),
		done: make(chan struct{}), report: make(chan struct{})}
	echo.Register(s.grpc, func(ctx context.Context, _ string) (string, error) {
		start := time.Now()
		n := s.inFlight.Add(1)
		defer func() {
			s.inFlight.Add(-1)
			s.busy.Add(int64(time.Since(start)))
		}()
		// The per-RPC side: the orca interceptor sends a trailer only for
		// an RPC whose handler asked for its recorder. The server-wide
		// metrics go with this one.
		if r := orca.CallMetricsRecorderFromContext(ctx); r != nil {
			r.SetNamedMetric("rif", float64(n))
		}
		s.served.Add(1)
		wait := time.After(delay)
		if s.stalled.Load() {
			wait = nil // until the RPC's deadline
		}
		select {
		case <-wait:
			return s.name, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	})
	if rec != nil {
		go s.reportLoad(rec, capacity)
	}
	healthpb.RegisterHealthServer(s.grpc, s.health)
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	go func() {
		defer close(s.done)
		_ = s.grpc.Serve(lis)
	}()
	return s, nil
}

// reportLoad keeps rec up to date until the server stops: the RPCs per
// second and the utilisation, the mean number of RPCs in flight (busy
// time over elapsed time, by Little's law) over capacity, each smoothed
// over about a second.
func (s *server) reportLoad(rec orca.ServerMetricsRecorder, capacity int) {
	t := time.NewTicker(reportEvery)
	defer t.Stop()
	var qps, util float64
	lastServed, lastBusy := s.served.Load(), s.busy.Load()
	for {
		select {
		case <-s.report:
			return
		case <-t.C:
		}
		served, busy := s.served.Load(), s.busy.Load()
		rate := float64(served-lastServed) / reportEvery.Seconds()
		inFlight := float64(busy-lastBusy) / float64(reportEvery)
		lastServed, lastBusy = served, busy
		const keep = 0.7 // of the previous value, every tick: about a second's memory
		qps = keep*qps + (1-keep)*rate
		util = keep*util + (1-keep)*inFlight/float64(capacity)
		rec.SetQPS(qps)
		rec.SetApplicationUtilization(util)
	}
}

func (s *server) stop() {
	s.grpc.Stop()
	<-s.done
	select {
	case <-s.report:
	default:
		close(s.report)
	}
}

// drain stops s the way a server should stop on purpose: its health
// service says NOT_SERVING (clients with healthCheckConfig take it out of
// their pickers), then GracefulStop refuses new RPCs and returns when
// those in flight have finished. No RPC fails.
func (s *server) drain() {
	s.health.Shutdown()
	s.grpc.GracefulStop()
}

// dial is the part to copy: register the policies (once, before the first
// dial), and name one in the service config. With a real service, the
// target is "dns:///my-service.example:50051" (each address an endpoint)
// and no manual resolver is needed; weights then come from a resolver of
// your own that calls lbpolicy.SetWeight.
//
// The rest of the service config is gRPC's own, and what lbhttp's
// defaults do for HTTP: "timeout" is each RPC's deadline (gRPC has no
// per-attempt timeout: the deadline covers every attempt); the
// retryPolicy retries UNAVAILABLE (a server that refused or dropped the
// RPC) up to 4 attempts; retryThrottling is the retry budget (every
// failed RPC costs a token, every success earns a tenth of one, and with
// half the 10 tokens gone retries stop until successes earn them back).
func dial(r *manual.Resolver, policy, config string, deadline time.Duration) (*grpc.ClientConn, error) {
	serviceConfig := fmt.Sprintf(`{
		"loadBalancingConfig": [{%q: %s}],
		"healthCheckConfig": {"serviceName": ""},
		"methodConfig": [{
			"name": [{"service": "lbkit.example.Echo"}],
			"waitForReady": true,
			"timeout": %q,
			"retryPolicy": {
				"maxAttempts": 4,
				"initialBackoff": "0.01s",
				"maxBackoff": "0.2s",
				"backoffMultiplier": 2,
				"retryableStatusCodes": ["UNAVAILABLE"]
			}
		}],
		"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}
	}`, policy, config, fmt.Sprintf("%.3fs", deadline.Seconds()))
	return grpc.NewClient(r.Scheme()+":///demo",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(serviceConfig),
	)
}

func run(o *options, out io.Writer) error {
	lbpolicy.Register()
	if balancer.Get(o.policy) == nil {
		return fmt.Errorf("policy %q is not registered", o.policy)
	}

	servers := make([]*server, 0, len(o.delays))
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	eps := make([]resolver.Endpoint, len(o.delays))
	for i, d := range o.delays {
		capacity := 0
		if o.capacities != nil {
			capacity = o.capacities[i]
		}
		s, err := startServer(fmt.Sprintf("s%d", i), d, capacity)
		if err != nil {
			return err
		}
		servers = append(servers, s)
		eps[i] = resolver.Endpoint{Addresses: []resolver.Address{{Addr: s.addr}}}
		if o.weights != nil {
			eps[i] = lbpolicy.SetWeight(eps[i], o.weights[i])
		}
	}

	policy := o.policy
	var ejected atomic.Int32
	if o.eject {
		var err error
		if policy, err = ejectingPolicy(o.policy, func(c lbhealth.Change) {
			if c.New == lbhealth.Ejected {
				ejected.Add(1)
				fmt.Fprintf(out, "lbkit health: %v\n", c)
			}
		}); err != nil {
			return err
		}
	}
	r := manual.NewBuilderWithScheme("demo")
	r.InitialState(resolver.State{Endpoints: eps})
	cc, err := dial(r, policy, o.config, o.deadline)
	if err != nil {
		return err
	}
	defer cc.Close()

	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	var (
		next, finished, failed atomic.Int64
		firstErr               atomic.Pointer[error]
		deadlines              atomic.Int64 // RPCs that failed DEADLINE_EXCEEDED
		disturb                sync.Once
		wg                     sync.WaitGroup
	)
	start := time.Now()
	for range o.concurrency {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(o.rpcs) || ctx.Err() != nil {
					return
				}
				callCtx := ctx
				if o.key != "" {
					v := fmt.Sprintf("user-%d", i%100)
					if o.policy == lbpolicy.IPHash {
						v = fmt.Sprintf("192.0.2.%d", i%100)
					}
					callCtx = metadata.AppendToOutgoingContext(ctx, o.key, v)
				}
				if _, err := echo.Call(callCtx, cc, "hi"); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, &err)
					if status.Code(err) == codes.DeadlineExceeded {
						deadlines.Add(1)
					}
				}
				if finished.Add(1) >= int64(o.rpcs/3) {
					disturb.Do(func() {
						if o.stop >= 0 {
							fmt.Fprintf(out, "stopping %s gracefully after %d RPCs\n", servers[o.stop].name, finished.Load())
							go servers[o.stop].drain()
						}
						if o.kill >= 0 {
							fmt.Fprintf(out, "killing %s after %d RPCs\n", servers[o.kill].name, finished.Load())
							servers[o.kill].grpc.Stop()
						}
						if o.notServing >= 0 {
							fmt.Fprintf(out, "marking %s NOT_SERVING after %d RPCs\n", servers[o.notServing].name, finished.Load())
							servers[o.notServing].health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
						}
						if o.stall >= 0 {
							fmt.Fprintf(out, "stalling %s after %d RPCs\n", servers[o.stall].name, finished.Load())
							servers[o.stall].stalled.Store(true)
						}
					})
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)

	fmt.Fprintf(out, "policy %s %s: %d RPCs in %v, %d failed\n", policy, o.config, finished.Load(), elapsed.Round(time.Millisecond), failed.Load())
	total := int64(0)
	for _, s := range servers {
		total += s.served.Load()
	}
	for i, s := range servers {
		fmt.Fprintf(out, "  %s  delay %-6v share %5.1f%%  (%d RPCs)\n", s.name, o.delays[i], 100*float64(s.served.Load())/float64(max(total, 1)), s.served.Load())
	}
	if e := firstErr.Load(); e != nil {
		fmt.Fprintf(out, "first error: %v\n", *e)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("ran out of time after %v (-timeout)", o.timeout)
	}
	n := failed.Load()
	if o.stall >= 0 && n > 0 && n == deadlines.Load() {
		// A stalled server's RPCs end at their deadline, which gRPC does
		// not retry past: the deadline is the whole RPC's.
		fmt.Fprintf(out, "%d RPCs sent to %s failed DEADLINE_EXCEEDED after %v (%d ejections)\n", n, servers[o.stall].name, o.deadline, ejected.Load())
		return nil
	}
	if o.kill >= 0 && n > 0 && n <= int64(o.concurrency) {
		// gRPC retries an RPC cut by a dead server only if no reply had
		// begun: one whose response headers had arrived is committed. At
		// most one RPC per caller was in flight when the server died.
		fmt.Fprintf(out, "%d RPCs in flight on %s had begun their reply when it died: gRPC does not retry those\n", n, servers[o.kill].name)
		return nil
	}
	if n > 0 {
		return fmt.Errorf("%d of %d RPCs failed", n, o.rpcs)
	}
	return nil
}
