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
// NewProxy (leastconn over two backends, the key in the context, Done
// when the body ends), client, proxy and backends all on loopback in this
// process, with lbhttp's timeouts and budget off, on (the default), and
// with hedging at the 95th percentile on top. The difference in allocs/op
// is what lbhttp adds per request.
func BenchmarkProxy(b *testing.B) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})
	backend, other := httptest.NewServer(handler), httptest.NewServer(handler)
	defer backend.Close()
	defer other.Close()
	target, _ := url.Parse(backend.URL)
	second, _ := url.Parse(other.URL)

	plainBase := lbhttp.NewBase()
	defer plainBase.CloseIdleConnections()
	plain := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
		},
		Transport: plainBase,
	}
	rows := []struct {
		name  string
		proxy http.Handler
	}{{"proxy=plain", plain}}
	for _, row := range []struct {
		name string
		cfg  lbhttp.Config
	}{
		{"proxy=lbhttp/timeouts=off/budget=off", lbhttp.Config{AttemptTimeout: -1, RequestTimeout: -1, IdleTimeout: -1, NoBudget: true}},
		{"proxy=lbhttp/timeouts=on/budget=on", lbhttp.Config{}},
		{"proxy=lbhttp/timeouts=on/budget=on/hedge=p95", lbhttp.Config{HedgePercentile: 95}},
	} {
		p := leastconn.New()
		if err := p.Update(balancer.Endpoints(target.Host, second.Host)); err != nil {
			b.Fatal(err)
		}
		lb, err := lbhttp.NewProxy(p, row.cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer lb.Transport.(*lbhttp.Transport).CloseIdleConnections()
		rows = append(rows, struct {
			name  string
			proxy http.Handler
		}{row.name, lb})
	}

	for _, bc := range rows {
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
