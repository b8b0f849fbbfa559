// Command lbkit-grpc-demo shows an lbkit algorithm balancing a gRPC channel.
// It starts a few echo servers on loopback (stand-ins for your backends,
// each answering after its own delay and serving the standard health
// service), dials them through an lbkit policy chosen by the service
// config, sends RPCs from concurrent callers, and prints each server's
// share. Optionally it stops one server, or marks one NOT_SERVING, a third
// of the way through, to show that no RPC fails.
//
//	go run ./cmd/lbkit-grpc-demo -policy lbkit_least_conn -delays 2ms,2ms,40ms
//	go run ./cmd/lbkit-grpc-demo -policy lbkit_ring_hash -stop 0
//
// The part to copy into a client is dial: lbpolicy.Register once, then a
// service config naming the policy (with healthCheckConfig for health, and
// waitForReady plus a retryPolicy for idempotent methods).
package main
