// Package echo is a one-method gRPC service for the lbkit gRPC example and
// its tests, written by hand so that the example needs no protoc step: its
// messages are protobuf's wrapperspb.StringValue. The example's servers
// answer with their own name, so that a client can count which backend
// served each RPC. Replace it with your own generated service.
package echo
