// Command lbkit-grpc-demo shows an lbkit algorithm balancing a gRPC channel.
// It starts a few echo servers on loopback (stand-ins for your backends,
// each answering after its own delay and serving the standard health
// service), dials them through an lbkit policy chosen by the service
// config, sends RPCs from concurrent callers, and prints each server's
// share. Optionally, a third of the way through, it marks one server
// NOT_SERVING or stops one gracefully (-stop: NOT_SERVING, then
// GracefulStop), and no RPC fails; or it kills one (-kill: an abrupt Stop,
// as in a crash), and RPCs in flight on it are retried elsewhere, except
// one whose reply had begun, which gRPC does not retry (at most one per
// caller; the demo says how many). Or it stalls one (-stall: it accepts
// RPCs and never answers, its health service still SERVING): each RPC
// sent there fails DEADLINE_EXCEEDED at the service config's timeout
// (-deadline), until the picker stops sending there: lbkit_lrt learns to,
// and -eject wraps the picker in lbkit's health decorator, which ejects
// the server after five such failures in a row.
//
//	go run ./cmd/lbkit-grpc-demo -policy lbkit_least_conn -delays 2ms,2ms,40ms
//	go run ./cmd/lbkit-grpc-demo -policy lbkit_ring_hash -stop 0
//	go run ./cmd/lbkit-grpc-demo -policy lbkit_ring_hash -kill 0
//	go run ./cmd/lbkit-grpc-demo -policy lbkit_round_robin -stall 0 -deadline 300ms -rpcs 6000 -concurrency 16 -eject
//	go run ./cmd/lbkit-grpc-demo -policy lbkit_wrr_orca -capacities 4,4,1 -delays 2ms,2ms,2ms \
//		-rpcs 4000 -config '{"blackoutPeriod": "0.3s", "weightUpdatePeriod": "0.1s"}'
//
// With -capacities each server reports its load the ORCA way, through
// grpc-go's orca package: a server recorder (orca.NewServerMetricsRecorder,
// served with orca.CallMetricsServerOption) that it keeps up to date with
// its RPCs per second and its utilisation, the mean RPCs in flight over
// its capacity, and a per-RPC named metric (rif). The ORCA policies weigh
// those reports: above, the third server reports four times the
// utilisation for the same work and gets a quarter of each other's share
// once lbkit_wrr_orca's blackout has passed (TestORCA holds its share
// below half of the first server's).
//
// The part to copy into a client is dial: lbpolicy.Register once, then a
// service config naming the policy (with healthCheckConfig for health,
// waitForReady plus a retryPolicy for idempotent methods, a timeout for
// every method, and retryThrottling to bound the retries).
package main
