package lbhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/lbhttp"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/sticky"
)

// BenchmarkProxy is the cost of one request through the proxy path, client,
// proxy and backends all on loopback in this process, one request at a
// time over a keep-alive connection:
//
//   - proxy=plain: a bare httputil.ReverseProxy with Go's defaults (Rewrite
//     with SetURL to one backend and SetXForwarded; a clone of
//     http.DefaultTransport; no BufferPool, so a 32 KB copy buffer per
//     request);
//   - proxy=plain-tuned: the same, tuned as a careful user would: a
//     BufferPool (lbhttp's, a sync.Pool of 32 KB buffers), and 256 idle
//     connections per host;
//   - proxy=lbhttp/...: NewProxy (leastconn over two backends, the key in
//     the context, Done when the body ends), with lbhttp's timeouts and
//     budget off, on (the default), on with the hold of the start of each
//     response off (HoldBytes: -1), the same two with a body of 64 KiB
//     (the whole default hold) instead of 2 bytes, and with hedging at the
//     95th percentile on top;
//   - proxy=lbhttp/cookie=.../sticky=...: NewProxy with its defaults over
//     health ▶ sticky ▶ leastconn, with sticky cookies off and on
//     (Config.Sticky), from a client that sends a valid sticky cookie
//     with every request (cookie=sent: each is pinned, its cookie
//     verified and stripped; with sticky off it is forwarded as any
//     cookie) and from one that sends none (cookie=none: with sticky on,
//     every request is a new session, picked afresh and given a
//     Set-Cookie). Compare with benchstat -col /sticky;
//   - client=plain and client=lbhttp: no proxy, an http.Client sending to
//     a backend through a clone of http.DefaultTransport, and through a
//     Transport with its defaults over the same two backends.
//
// The difference between a proxy=lbhttp row and proxy=plain-tuned is what
// lbhttp adds to a tuned proxy; client=lbhttp against client=plain, what
// the Transport adds to a client. cpu-ns/op is the CPU time the process
// (client, proxy and backends) spent per request, from getrusage: on a
// machine shared with other work it moves much less than ns/op, which
// counts the time waiting for a core too. The rows run one after the
// other in one process, so a row's garbage is partly collected during the
// next (proxy=plain's 32 KB a request, during proxy=plain-tuned's): set a
// row's cpu-ns/op beside the same row's in another run (benchstat), and
// rows against each other by bench/cmd/lbload, a process per proxy.
func BenchmarkProxy(b *testing.B) {
	big := make([]byte, 64<<10)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawQuery == "big" {
			_, _ = w.Write(big)
			return
		}
		_, _ = io.WriteString(w, "ok")
	})
	backend, other := httptest.NewServer(handler), httptest.NewServer(handler)
	defer backend.Close()
	defer other.Close()
	target, _ := url.Parse(backend.URL)
	second, _ := url.Parse(other.URL)
	rewrite := func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		pr.SetXForwarded()
	}

	type row struct {
		name   string
		proxy  http.Handler      // nil: no proxy, client sends to url
		rt     http.RoundTripper // the client's transport, nil: its own default
		url    string
		query  string // "big": a body of 64 KiB instead of 2 bytes
		cookie string // the Cookie header the client sends, if any
	}
	defaultBase := http.DefaultTransport.(*http.Transport).Clone()
	defer defaultBase.CloseIdleConnections()
	tunedBase := http.DefaultTransport.(*http.Transport).Clone()
	tunedBase.MaxIdleConnsPerHost = 256
	defer tunedBase.CloseIdleConnections()
	rows := []row{
		{name: "proxy=plain", proxy: &httputil.ReverseProxy{Rewrite: rewrite, Transport: defaultBase}},
		{name: "proxy=plain-tuned", proxy: &httputil.ReverseProxy{Rewrite: rewrite, Transport: tunedBase, BufferPool: new(lbhttp.BufferPool)}},
	}
	newPicker := func() balancer.Picker {
		p := leastconn.New()
		if err := p.Update(balancer.Endpoints(target.Host, second.Host)); err != nil {
			b.Fatal(err)
		}
		return p
	}
	for _, r := range []struct {
		name  string
		cfg   lbhttp.Config
		query string
	}{
		{"proxy=lbhttp/timeouts=off/budget=off", off, ""},
		{"proxy=lbhttp/timeouts=on/budget=on", lbhttp.Config{}, ""},
		{"proxy=lbhttp/timeouts=on/budget=on/hold=off", lbhttp.Config{HoldBytes: -1}, ""},
		{"proxy=lbhttp/timeouts=on/budget=on/body=64k", lbhttp.Config{}, "big"},
		{"proxy=lbhttp/timeouts=on/budget=on/hold=off/body=64k", lbhttp.Config{HoldBytes: -1}, "big"},
		{"proxy=lbhttp/timeouts=on/budget=on/hedge=p95", lbhttp.Config{HedgePercentile: 95}, ""},
	} {
		lb, err := lbhttp.NewProxy(newPicker(), r.cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer lb.Transport.(*lbhttp.Transport).CloseIdleConnections()
		rows = append(rows, row{name: r.name, proxy: lb, query: r.query})
	}
	stickyKey := []byte("BenchmarkProxy's sticky key, 32B")
	var stickyCookie string // a valid cookie of stickyKey's, from the first proxy with sticky on
	for _, cookie := range []bool{false, true} {
		for _, on := range []bool{false, true} {
			st, err := sticky.New(leastconn.New())
			if err != nil {
				b.Fatal(err)
			}
			h, err := health.New(st, health.Config{})
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			if err := h.Update(balancer.Endpoints(target.Host, second.Host)); err != nil {
				b.Fatal(err)
			}
			cfg := lbhttp.Config{}
			if on {
				cfg.Sticky = &lbhttp.StickyConfig{Key: stickyKey}
			}
			lb, err := lbhttp.NewProxy(h, cfg)
			if err != nil {
				b.Fatal(err)
			}
			defer lb.Transport.(*lbhttp.Transport).CloseIdleConnections()
			if on && stickyCookie == "" {
				w := httptest.NewRecorder()
				lb.ServeHTTP(w, httptest.NewRequest("GET", "http://svc/", nil))
				c, err := http.ParseSetCookie(w.Result().Header.Get("Set-Cookie"))
				if err != nil {
					b.Fatal(err)
				}
				stickyCookie = c.Name + "=" + c.Value
			}
			r := row{name: fmt.Sprintf("proxy=lbhttp/cookie=%s/sticky=%s", map[bool]string{false: "none", true: "sent"}[cookie], onOff(on)), proxy: lb}
			if cookie {
				r.cookie = "pending" // filled in below, once a proxy has made one
			}
			rows = append(rows, r)
		}
	}
	for i := range rows {
		if rows[i].cookie != "" {
			rows[i].cookie = stickyCookie
		}
	}
	clientBase := http.DefaultTransport.(*http.Transport).Clone()
	defer clientBase.CloseIdleConnections()
	tr, err := lbhttp.NewTransport(newPicker(), lbhttp.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	rows = append(rows,
		row{name: "client=plain", rt: clientBase, url: backend.URL},
		row{name: "client=lbhttp", rt: tr, url: "http://svc/"},
	)

	for _, bc := range rows {
		b.Run(bc.name, func(b *testing.B) {
			client := &http.Client{Transport: bc.rt}
			u := bc.url
			if bc.proxy != nil {
				front := httptest.NewServer(bc.proxy)
				defer front.Close()
				client.Transport = &http.Transport{MaxIdleConnsPerHost: 8}
				u = front.URL
			}

			if bc.query != "" {
				u += "/?" + bc.query
			}
			defer client.CloseIdleConnections()
			b.ReportAllocs()
			cpu0, ok := processCPU()
			req, err := http.NewRequest("GET", u, nil)
			if err != nil {
				b.Fatal(err)
			}
			if bc.cookie != "" {
				req.Header.Set("Cookie", bc.cookie)
			}
			for b.Loop() {
				resp, err := client.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
			if cpu1, _ := processCPU(); ok {
				b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
			}
		})
	}
}

func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}
