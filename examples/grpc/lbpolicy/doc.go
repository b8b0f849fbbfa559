// Package lbpolicy is a gRPC load-balancing policy that wraps lbkit pickers.
package lbpolicy
