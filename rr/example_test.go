package rr_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/lbkit/lbkit/balancer"
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

// The README's quick start: round robin behind httputil.ReverseProxy.
// (Compiled, not run: it would listen on a port.)
func Example_reverseProxy() {
	p := rr.New()
	if err := p.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080")); err != nil {
		log.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		b, err := p.Pick(balancer.Request{})
		if err != nil {
			return // no host set: the transport fails and the proxy answers 502
		}
		r.SetURL(&url.URL{Scheme: "http", Host: b.ID()})
		r.SetXForwarded()
	}}
	log.Fatal(http.ListenAndServe("127.0.0.1:8000", proxy))
}
