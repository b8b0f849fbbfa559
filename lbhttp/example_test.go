package lbhttp_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/lbhttp"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/route"
	"github.com/lbkit/lbkit/rr"
	"github.com/lbkit/lbkit/sticky"
)

// The quick start: a health-checked least-connections proxy in front of
// two backends. Compiled with the tests, not run (it serves for ever).
func Example_quickStart() {
	lb, err := health.New(leastconn.New(), health.Config{Probe: health.HTTP(health.HTTPCheck{Path: "/healthz"})})
	if err != nil {
		log.Fatal(err)
	}
	if err := lb.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080")); err != nil {
		log.Fatal(err)
	}
	if err := lb.Start(context.Background()); err != nil {
		log.Fatal(err)
	}
	defer lb.Close()
	proxy, err := lbhttp.NewProxy(lb, lbhttp.Config{})
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(http.ListenAndServe("127.0.0.1:8000", proxy))
}

// A proxy in front of a live backend and a dead one (its port refuses
// connections): every request is answered, those picked for the dead
// backend on their second attempt.
func ExampleNewProxy() {
	live := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "live")
	}))
	defer live.Close()
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := l.Addr().String()
	l.Close()

	p := rr.New()
	if err := p.Update(balancer.Endpoints(strings.TrimPrefix(live.URL, "http://"), dead)); err != nil {
		log.Fatal(err)
	}
	proxy, err := lbhttp.NewProxy(p, lbhttp.Config{})
	if err != nil {
		log.Fatal(err)
	}
	front := httptest.NewServer(proxy)
	defer front.Close()

	answers := map[string]int{}
	for range 6 {
		resp, err := http.Get(front.URL)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		answers[fmt.Sprint(resp.StatusCode, " ", string(body))]++
	}
	fmt.Println(answers)
	// Output:
	// map[200 live:6]
}

var discard = slog.New(slog.DiscardHandler)

// An empty set answers 503 with a message saying so.
func ExampleErrorHandler() {
	proxy, err := lbhttp.NewProxy(rr.New(), lbhttp.Config{ErrorLog: discard})
	if err != nil {
		log.Fatal(err)
	}
	front := httptest.NewServer(proxy)
	defer front.Close()
	resp, err := http.Get(front.URL)
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Printf("%d %s", resp.StatusCode, body)
	// Output:
	// 503 no backend available
}

// A Transport as an http.Client's: the client names the service, the
// Transport picks the replica.
func ExampleTransport() {
	replica := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s for %s", r.Method, r.URL.Path, r.Host)
	}))
	defer replica.Close()
	p := rr.New()
	if err := p.Update(balancer.Endpoints(strings.TrimPrefix(replica.URL, "http://"))); err != nil {
		log.Fatal(err)
	}
	t, err := lbhttp.NewTransport(p, lbhttp.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer t.CloseIdleConnections()
	client := &http.Client{Transport: t}
	resp, err := client.Get("http://api.internal/users/42")
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(string(body))
	// Output:
	// GET /users/42 for api.internal
}

// ClientIP believes X-Forwarded-For only from trusted proxies, and then
// takes the rightmost address that is not one of them.
func ExampleClientIP() {
	key := lbhttp.ClientIP(netip.MustParsePrefix("10.0.0.0/8"))
	for _, r := range []*http.Request{
		{RemoteAddr: "192.0.2.7:51000"},
		{RemoteAddr: "192.0.2.7:51000", Header: http.Header{"X-Forwarded-For": {"198.51.100.1"}}},
		{RemoteAddr: "10.1.1.1:40000", Header: http.Header{"X-Forwarded-For": {"203.0.113.66, 198.51.100.1, 10.2.2.2"}}},
		{RemoteAddr: "[2001:db8::1]:443"},
	} {
		fmt.Printf("%-18s %-40q -> %s\n", r.RemoteAddr, r.Header.Get("X-Forwarded-For"), key(r))
	}
	// Output:
	// 192.0.2.7:51000    ""                                       -> 192.0.2.7
	// 192.0.2.7:51000    "198.51.100.1"                           -> 192.0.2.7
	// 10.1.1.1:40000     "203.0.113.66, 198.51.100.1, 10.2.2.2"   -> 198.51.100.1
	// [2001:db8::1]:443  ""                                       -> 2001:db8::1
}

// staticResolver stands in for DNS.
type staticResolver []string

func (s staticResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

// A Refresher keeps a picker's set equal to what a name resolves to. In a
// service, leave Resolver nil (net.DefaultResolver), call Refresh once to
// fail fast, then Start.
func ExampleRefresher() {
	p := rr.New()
	r, err := lbhttp.NewRefresher(p, lbhttp.RefresherConfig{
		Host:     "api.internal",
		Port:     8080,
		Resolver: staticResolver{"10.0.0.2", "10.0.0.1", "2001:db8::1"},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := r.Refresh(context.Background()); err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.Addrs())
	// Output:
	// [10.0.0.1:8080 10.0.0.2:8080 [2001:db8::1]:8080]
}

// A Budget in virtual time, as a simulator drives it: 100 requests earn
// 20 retries at the default share, on top of the minimum of 10 a second
// over the 10 s window; the 121st retry is refused.
func ExampleBudget() {
	b, err := lbhttp.NewBudget(lbhttp.BudgetConfig{})
	if err != nil {
		log.Fatal(err)
	}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for range 100 {
		b.Request(now)
	}
	allowed := 0
	for b.Retry(now) {
		allowed++
	}
	fmt.Println("retries allowed:", allowed)
	// Ten seconds later, the window holds none of them.
	fmt.Println("a window later:", b.Retry(now.Add(10*time.Second)))
	// Output:
	// retries allowed: 120
	// a window later: true
}

// A Percentile fed a stream of latencies: the estimate errs long, by at
// most an eighth.
func ExamplePercentile() {
	p95, err := lbhttp.NewPercentile(95)
	if err != nil {
		log.Fatal(err)
	}
	for i := range 1000 {
		p95.Observe(time.Duration(1+i%100) * time.Millisecond) // 1 to 100 ms, evenly
	}
	d, ok := p95.Value()
	fmt.Println(ok, d.Round(time.Millisecond))
	// Output:
	// true 101ms
}

// Hedging, on top of the default timeouts and budget: a request still
// waiting at the 95th percentile of recent latencies gets a second
// attempt on another backend. A fixed delay would be HedgeAfter.
func ExampleConfig_hedging() {
	p := rr.New()
	if err := p.Update(balancer.Endpoints("10.0.0.1:8080", "10.0.0.2:8080")); err != nil {
		log.Fatal(err)
	}
	_, err := lbhttp.NewProxy(p, lbhttp.Config{HedgePercentile: 95})
	fmt.Println(err)
	_, err = lbhttp.NewProxy(p, lbhttp.Config{HedgePercentile: 100})
	fmt.Println(err)
	// Output:
	// <nil>
	// lbhttp: balancer: bad option: HedgePercentile 100 is not between 0 and 100
}

// A ReverseProxy of your own reuses its copy buffers with a BufferPool, as
// NewProxy's does.
func ExampleBufferPool() {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello")
	}))
	defer backend.Close()
	target, err := url.Parse(backend.URL)
	if err != nil {
		log.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.BufferPool = new(lbhttp.BufferPool)
	front := httptest.NewServer(proxy)
	defer front.Close()

	resp, err := http.Get(front.URL)
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(string(body))
	// Output: hello
}

// A canary by header: requests with X-Canary: v2 reach the backend
// labelled version=v2, the others the stable one (route's Default).
func ExampleConfig_routeHeader() {
	backend := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, name)
		}))
	}
	stable, canary := backend("stable"), backend("canary")
	defer stable.Close()
	defer canary.Close()
	r, err := route.New(func() balancer.Balancer { return rr.New() }, route.Config{Label: "version", Default: "v1"})
	if err != nil {
		log.Fatal(err)
	}
	h, err := health.New(r, health.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	if err := h.Update([]balancer.Backend{
		balancer.NewEndpoint(strings.TrimPrefix(stable.URL, "http://"), 1).WithLabels(map[string]string{"version": "v1"}),
		balancer.NewEndpoint(strings.TrimPrefix(canary.URL, "http://"), 1).WithLabels(map[string]string{"version": "v2"}),
	}); err != nil {
		log.Fatal(err)
	}
	proxy, err := lbhttp.NewProxy(h, lbhttp.Config{RouteHeader: "X-Canary"})
	if err != nil {
		log.Fatal(err)
	}
	front := httptest.NewServer(proxy)
	defer front.Close()
	for _, v := range []string{"", "v2", "v1", "v2"} {
		req, _ := http.NewRequest("GET", front.URL, nil)
		if v != "" {
			req.Header.Set("X-Canary", v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("X-Canary %q: %s\n", v, body)
	}
	// Output:
	// X-Canary "": stable
	// X-Canary "v2": canary
	// X-Canary "v1": stable
	// X-Canary "v2": canary
}

// Sticky sessions: the first answer sets the cookie, the next requests
// that carry it reach the same backend and get no new cookie; once that
// backend is drained, the session moves and its cookie is rewritten.
func ExampleStickyConfig() {
	var addrs []string
	for _, name := range []string{"a", "b", "c"} {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, name)
		}))
		defer s.Close()
		addrs = append(addrs, strings.TrimPrefix(s.URL, "http://"))
	}
	st, err := sticky.New(rr.New())
	if err != nil {
		log.Fatal(err)
	}
	h, err := health.New(st, health.Config{})
	if err != nil {
		log.Fatal(err)
	}
	defer h.Close()
	if err := h.Update(balancer.Endpoints(addrs...)); err != nil {
		log.Fatal(err)
	}
	proxy, err := lbhttp.NewProxy(h, lbhttp.Config{Sticky: &lbhttp.StickyConfig{}})
	if err != nil {
		log.Fatal(err)
	}
	front := httptest.NewServer(proxy)
	defer front.Close()
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar}
	get := func() (string, bool) {
		resp, err := client.Get(front.URL)
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(body), resp.Header.Get("Set-Cookie") != ""
	}
	first, set := get()
	fmt.Println("first request: cookie set:", set)
	same := true
	for range 5 {
		b, set := get()
		same = same && b == first && !set
	}
	fmt.Println("next five: same backend, no new cookie:", same)
	for i, name := range []string{"a", "b", "c"} {
		if name == first {
			if err := h.Drain(addrs[i]); err != nil {
				log.Fatal(err)
			}
		}
	}
	moved, set := get()
	fmt.Println("drained: moved:", moved != first, "cookie rewritten:", set)
	again, set := get()
	fmt.Println("then stays:", again == moved && !set)
	// Output:
	// first request: cookie set: true
	// next five: same backend, no new cookie: true
	// drained: moved: true cookie rewritten: true
	// then stays: true
}
