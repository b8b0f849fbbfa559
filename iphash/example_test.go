package iphash_test

import (
	"errors"
	"fmt"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/iphash"
)

func Example() {
	p := iphash.New()
	if err := p.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080")); err != nil {
		panic(err)
	}
	// The port does not count, and an IPv4 client seen through a
	// dual-stack socket maps like the same client seen over IPv4.
	for _, client := range []string{"192.0.2.1:51000", "192.0.2.1:51001", "[::ffff:192.0.2.1]:443", "203.0.113.9:51000", "[2001:db8::1]:443"} {
		b, _ := p.Pick(balancer.Request{Key: client})
		fmt.Printf("%-24s -> %s\n", client, b.ID())
	}
	// Output:
	// 192.0.2.1:51000          -> 10.0.0.3:8080
	// 192.0.2.1:51001          -> 10.0.0.3:8080
	// [::ffff:192.0.2.1]:443   -> 10.0.0.3:8080
	// 203.0.113.9:51000        -> 10.0.0.2:8080
	// [2001:db8::1]:443        -> 10.0.0.1:8080
}

// With WithPrefix, a client's whole /24 (or IPv6 /64) shares a backend, as
// with nginx's ip_hash.
func ExampleWithPrefix() {
	p := iphash.New(iphash.WithPrefix())
	_ = p.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"))
	for _, client := range []string{"192.0.2.1", "192.0.2.200", "198.51.100.7", "2001:db8:1:2::1", "2001:db8:1:2::abcd", "2001:db8:1:3::1"} {
		b, _ := p.Pick(balancer.Request{Key: client})
		fmt.Printf("%-20s -> %s\n", client, b.ID())
	}
	// Output:
	// 192.0.2.1            -> 10.0.0.1:8080
	// 192.0.2.200          -> 10.0.0.1:8080
	// 198.51.100.7         -> 10.0.0.2:8080
	// 2001:db8:1:2::1      -> 10.0.0.3:8080
	// 2001:db8:1:2::abcd   -> 10.0.0.3:8080
	// 2001:db8:1:3::1      -> 10.0.0.2:8080
}

// A retry sets Attempt, and Avoid to the backend that failed: each attempt
// reaches a backend the key has not tried, the same one in every process.
func ExamplePicker_Pick_retry() {
	p := iphash.New()
	_ = p.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.3:8080"))
	failed := ""
	for attempt := range 3 {
		b, _ := p.Pick(balancer.Request{Key: "192.0.2.1:51000", Attempt: attempt, Avoid: failed})
		fmt.Printf("attempt %d -> %s\n", attempt, b.ID())
		failed = b.ID()
	}
	// Output:
	// attempt 0 -> 10.0.0.3:8080
	// attempt 1 -> 10.0.0.2:8080
	// attempt 2 -> 10.0.0.1:8080
}

// A key that is not a client address is an error, never a silent pick.
func ExamplePicker_Pick_badKey() {
	p := iphash.New()
	_ = p.Update(balancer.Endpoints("10.0.0.1:8080"))
	_, err := p.Pick(balancer.Request{Key: "client.example"})
	fmt.Println(errors.Is(err, balancer.ErrBadKey))
	fmt.Println(err)
	// Output:
	// true
	// iphash: balancer: bad affinity key: want ip, ip:port or [ipv6]:port
}

// Behind httputil.ReverseProxy, the key is the connection's remote address.
// Behind another proxy, take the client from X-Forwarded-For instead, and
// only when the request came from a proxy you trust. (Compiled, not run: it
// would listen on a port.)
func Example_reverseProxy() {
	p := iphash.New()
	if err := p.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080")); err != nil {
		log.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		b, err := p.Pick(balancer.Request{Key: r.In.RemoteAddr})
		if err != nil {
			return // no host set: the transport fails and the proxy answers 502
		}
		r.SetURL(&url.URL{Scheme: "http", Host: b.ID()})
		r.SetXForwarded()
	}}
	log.Fatal(http.ListenAndServe("127.0.0.1:8000", proxy))
}
