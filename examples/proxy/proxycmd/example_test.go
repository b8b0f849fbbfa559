package proxycmd_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/proxy/proxycmd"
)

// A command adds its own flag to the lbkit ones, parses, and gets a checked
// Config.
func Example() {
	f := proxycmd.NewFlags("myproxy")
	admin := f.FlagSet.String("admin-listen", "127.0.0.1:9000", "`address` of the admin page")
	c, err := f.Parse([]string{
		"-backends", "10.0.0.1:8080,10.0.0.2:8080=3",
		"-algo", "wrr", "-key", "cookie:session", "-trusted-proxies", "10.0.0.0/8,192.0.2.1",
		"-admin-listen", ":9000",
	}, os.Stderr)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("listen:", c.Listen, "admin:", *admin)
	for _, b := range c.Backends {
		fmt.Println("backend:", b.ID(), "weight", balancer.WeightOf(b))
	}
	fmt.Println("algo:", c.Algorithm.Name, "key:", c.Key, "trusted:", c.TrustedProxies)
	fmt.Println("health:", c.HealthPath == "", c.HealthInterval, "attempts:", c.MaxAttempts)
	// Output:
	// listen: 127.0.0.1:8000 admin: :9000
	// backend: 10.0.0.1:8080 weight 1
	// backend: 10.0.0.2:8080 weight 3
	// algo: wrr key: cookie:session trusted: [10.0.0.0/8 192.0.2.1/32]
	// health: true 5s attempts: 3
}

// Start runs the proxy in front of a backend until its context ends.
// Listening on port 0 and reading the port from Addrs is for tests; a
// command listens where -listen says, and calls Serve, or Start and Wait.
func ExampleStart() {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello from the backend")
	}))
	defer backend.Close()
	c, err := proxycmd.NewFlags("myproxy").Parse([]string{
		"-listen", "127.0.0.1:0", "-backends", strings.TrimPrefix(backend.URL, "http://"), "-algo", "rr",
	}, os.Stderr)
	if err != nil {
		fmt.Println(err)
		return
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	p, err := proxycmd.Start(ctx, c, slog.New(slog.DiscardHandler), proxycmd.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	resp, err := http.Get("http://" + p.Addrs[0] + "/")
	if err != nil {
		fmt.Println(err)
	} else {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body))
	}
	stop()
	fmt.Println("stopped:", p.Wait())
	// Output:
	// 200 hello from the backend
	// stopped: <nil>
}
