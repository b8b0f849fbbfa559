package main

import (
	"context"
	"io"

	"github.com/lbkit/lbkit/examples/proxy/proxycmd"
)

func main() { proxycmd.Main(run) }

// run is the whole program but its exit: it parses args, serves until ctx
// ends (main: SIGINT or SIGTERM), and returns the exit status. The flags,
// the health-checked picker, the proxy and the shutdown are proxycmd's; a
// command that needs more passes proxycmd.Options instead of nil, as
// lbkit-metrics-proxy does for its metrics.
func run(ctx context.Context, args []string, stderr io.Writer) int {
	return proxycmd.NewFlags("proxy").Run(ctx, args, stderr, nil)
}
