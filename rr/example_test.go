package rr_test

import (
	"fmt"
	"log"
	"net/http"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/lbhttp"
	"github.com/lbkit/lbkit/rr"
)

func Example() {
	// A fixed start makes the output repeatable; leave WithRand out in
	// production so that proxies start at different backends.
	p := rr.New(rr.WithRand(func() uint64 { return 0 }))
	if err := p.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080")); err != nil {
		panic(err)
	}
	for range 4 {
		b, _ := p.Pick(balancer.Request{})
		fmt.Println(b.ID())
	}
	// Output:
	// 10.0.0.1:8080
	// 10.0.0.2:8080
	// 10.0.0.3:8080
	// 10.0.0.1:8080
}

// A retry names the backend that failed in Avoid; round robin skips it when
// its turn comes.
func ExamplePicker_Pick_retry() {
	p := rr.New(rr.WithRand(func() uint64 { return 0 }))
	_ = p.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080"))
	for range 2 {
		b, _ := p.Pick(balancer.Request{Attempt: 1, Avoid: "10.0.0.1:8080"})
		fmt.Println(b.ID())
	}
	// Output:
	// 10.0.0.2:8080
	// 10.0.0.2:8080
}

// Round robin behind a reverse proxy. lbhttp.NewProxy does the wiring a
// hand-written Rewrite would miss: a refused connection is retried on the
// next backend, an empty set answers 503, and a picker that learns from
// Done (not round robin) hears of every request when its body ends.
// (Compiled, not run: it would listen on a port.)
func Example_reverseProxy() {
	p := rr.New()
	if err := p.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080")); err != nil {
		log.Fatal(err)
	}
	proxy, err := lbhttp.NewProxy(p, lbhttp.Config{})
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:8000", proxy))
}
