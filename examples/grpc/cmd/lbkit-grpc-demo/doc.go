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
//
// The part to copy into a client is dial: lbpolicy.Register once, then a
// service config naming the policy (with healthCheckConfig for health,
// waitForReady plus a retryPolicy for idempotent methods, a timeout for
// every method, and retryThrottling to bound the retries).
package main
