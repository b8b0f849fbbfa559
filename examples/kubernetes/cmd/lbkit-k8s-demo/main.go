package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/kubernetes/lbkube"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/lbhttp"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/locality"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stderr, fromKubeconfig, nil))
}

// fromKubeconfig builds a client from a kubeconfig file, or from the
// usual places (KUBECONFIG, ~/.kube/config, in-cluster) when path is "".
func fromKubeconfig(path string) (kubernetes.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if path != "" {
		rules.ExplicitPath = path
	}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// run is the whole program but its exit: it parses args, serves until ctx
// ends, and returns the exit status. ready, if not nil, gets the proxy's
// address once it listens.
func run(ctx context.Context, args []string, stderr io.Writer, client func(string) (kubernetes.Interface, error), ready chan<- string) int {
	fs := flag.NewFlagSet("lbkit-k8s-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kubeconfig := fs.String("kubeconfig", "", "`path` of a kubeconfig file (default: KUBECONFIG, ~/.kube/config, or in-cluster)")
	namespace := fs.String("namespace", "default", "the Service's `namespace`")
	service := fs.String("service", "", "the Service's `name` (required)")
	port := fs.String("port", "", "the Service port's `name` (default: its only port)")
	zone := fs.String("zone", "", "this proxy's `zone`, for zone-aware routing (default: none)")
	listen := fs.String("listen", "127.0.0.1:8000", "`address` to serve the proxy on")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *service == "" {
		fmt.Fprintln(stderr, "lbkit-k8s-demo: -service is required")
		return 2
	}
	if err := serve(ctx, stderr, client, ready, *kubeconfig, *namespace, *service, *port, *zone, *listen); err != nil {
		fmt.Fprintln(stderr, "lbkit-k8s-demo:", err)
		return 1
	}
	return 0
}

func serve(ctx context.Context, stderr io.Writer, client func(string) (kubernetes.Interface, error), ready chan<- string,
	kubeconfig, namespace, service, port, zone, listen string) error {
	c, err := client(kubeconfig)
	if err != nil {
		return err
	}
	// health ▶ locality ▶ leastconn: health sees every backend and tells
	// locality which are healthy; locality keeps the traffic in -zone.
	l, err := locality.New(func() balancer.Balancer { return leastconn.New() }, locality.Config{Zone: zone})
	if err != nil {
		return err
	}
	h, err := health.New(l, health.Config{
		OnChange: func(ch health.Change) { fmt.Fprintln(stderr, "health:", ch) },
	})
	if err != nil {
		return err
	}
	if err := h.Start(ctx); err != nil {
		return err
	}
	defer h.Close()
	w, err := lbkube.New(c, h, lbkube.Config{
		Namespace: namespace, Service: service, Port: port,
		OnSync: func(s lbkube.Sync) {
			fmt.Fprintf(stderr, "sync: %d slices, %d ready, %d draining, hinted %v\n", s.Slices, len(s.Eligible), len(s.Draining), s.Hinted)
			for _, p := range s.Problems {
				fmt.Fprintln(stderr, "  skipped:", p)
			}
			if s.Err != nil {
				fmt.Fprintln(stderr, "  error:", s.Err)
			}
		},
	})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer w.Close()

	proxy, err := lbhttp.NewProxy(h, lbhttp.Config{})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintln(stderr, "proxy: listening on", ln.Addr())
	if ready != nil {
		ready <- ln.Addr().String()
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
