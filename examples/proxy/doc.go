// Command proxy is a load-balancing HTTP reverse proxy built from lbkit's
// pieces, to run as is or to copy: any algorithm of catalog.Algorithms(),
// health checks (active probes of a path, passive ejection of failing
// backends), the lbhttp Transport (Done when the response body ends, a
// refused connection retried on another backend), client-IP or
// header/cookie affinity keys, and a static or DNS-resolved backend list.
//
//	go run ./examples/proxy -backends 127.0.0.1:9001,127.0.0.1:9002=3 -algo wrr
//	go run ./examples/proxy -dns api.internal:8080 -algo leastconn -health-path /healthz
//	go run ./examples/proxy -backends ... -algo ring -key cookie:session
//
// Flags:
//
//	-listen addr            where to serve (default 127.0.0.1:8000)
//	-backends list          host:port[=weight],... a static set; two spellings of
//	                        one address (127.0.0.1:80, 127.0.0.1:080) are refused
//	-dns host:port          resolve host every -dns-interval instead (default 30s,
//	                        at least 1s)
//	-algo name              a name of catalog.Algorithms(): rr, wrr, leastconn,
//	                        leastconn-p2c, iphash, ring, ring-bounded, maglev,
//	                        lrt, lrt-naive
//	-key kind               affinity key: ip, header:NAME or cookie:NAME (default ip)
//	-trusted-proxies list   CIDRs or addresses whose X-Forwarded-For is believed
//	-health-path path       probe GET path on every backend ("" = no active checks)
//	-health-interval d      time between probes (default 5s)
//	-max-attempts n         backends tried per request (default 3)
//	-attempt-timeout d      longest wait for a backend's response headers, per
//	                        attempt (default 5s; 0: none)
//	-request-timeout d      longest wait for the headers over every attempt
//	                        (default 15s; 0: none)
//	-idle-timeout d         longest a backend may leave a response body
//	                        waiting (default 60s; 0: none)
//	-hold-bytes n           read this much of a response to an idempotent
//	                        request within -attempt-timeout before passing it
//	                        on, so that a stall inside it is retried
//	                        (default 65536; 0: none, for streams)
//	-retry-budget share     retries and hedges at most this share of requests
//	                        (default 0.2; 0: no budget)
//	-retry-budget-min n     plus this many a second (default 10)
//	-hedge-after d          hedge a request to another backend after this
//	                        wait (default 0: no hedging)
//	-hedge-percentile p     hedge after this percentile of recent latencies,
//	                        95 say (default 0: no hedging)
//	-h2c                    send to the backends over HTTP/2 without TLS (h2c);
//	                        every backend must accept it (default HTTP/1.1)
//	-route-header name      the header whose value names the set of backends
//	                        a request asks for (lbhttp.Config.RouteHeader),
//	                        for a picker that routes by label (default off)
//	-sticky-cookie name     pin each client session to a backend by a cookie
//	                        of this name, re-pinned when that backend is no
//	                        longer eligible; the key is drawn at start, so
//	                        cookies hold for this process (default off)
//
// A bad flag prints what is wrong on stderr and exits with status 2. The
// proxy stops on SIGINT or SIGTERM, letting requests in flight finish for
// up to 10 seconds. Everything it logs goes to stderr as log/slog's text
// lines, the ReverseProxy's and the servers' own complaints included:
// where it listens, every backend state change, DNS failures, failed
// requests.
//
// The command is package proxycmd and nothing else: main.go is the whole of
// it. proxycmd holds the flags, the wiring (algorithm, health, lbhttp) and
// the serving loop, so that another command can reuse them with flags and
// servers of its own: lbkit-metrics-proxy in examples/prometheus adds
// Prometheus metrics that way. To change what the proxy does (TLS, another
// key), copy proxycmd's Start, or pass proxycmd.Options.
//
// A backend that stops answering costs a client at most -attempt-timeout
// per attempt (and -request-timeout in all) before another backend
// answers or the proxy says 504; passive ejection takes it out after five
// such timeouts in a row.
package main
