package lbhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/lbhttp"
	"github.com/lbkit/lbkit/leastconn"
)

// BenchmarkProxy compares a request through a plain ReverseProxy (Rewrite
// with SetURL to one backend, the same base transport) with one through
// NewProxy (leastconn over that backend, the key in the context, Done
// when the body ends), client, proxy and backend all on loopback in this
// process. The difference in allocs/op is what lbhttp adds per request.
func BenchmarkProxy(b *testing.B) {
	backend := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer backend.Close()
	target, _ := url.Parse(backend.URL)

	plainBase := lbhttp.NewBase()
	defer plainBase.CloseIdleConnections()
	plain := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
		},
		Transport: plainBase,
	}
	p := leastconn.New()
	if err := p.Update(balancer.Endpoints(target.Host)); err != nil {
		b.Fatal(err)
	}
	lb, err := lbhttp.NewProxy(p, lbhttp.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer lb.Transport.(*lbhttp.Transport).CloseIdleConnections()

	for _, bc := range []struct {
		name  string
		proxy http.Handler
	}{{"proxy=plain", plain}, {"proxy=lbhttp", lb}} {
		b.Run(bc.name, func(b *testing.B) {
			front := httptest.NewServer(bc.proxy)
			defer front.Close()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
			defer client.CloseIdleConnections()
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.Get(front.URL)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	}
}
