// Command lbkit-metrics-proxy is a load-balancing HTTP reverse proxy that
// exports its balancer's metrics to Prometheus: lbkit's examples/proxy with
// package lbmetrics wrapped around the health-checked picker, and /metrics
// served on a listener of its own.
//
//	go run ./cmd/lbkit-metrics-proxy -backends 127.0.0.1:9001,127.0.0.1:9002
//	curl -s 127.0.0.1:9464/metrics | grep '^lbkit_'
//
// Flags: examples/proxy's, and -metrics-listen.
//
//	-listen addr            where to serve the proxy (default 127.0.0.1:8000)
//	-metrics-listen addr    where to serve /metrics (default 127.0.0.1:9464)
//	-backends list          host:port[=weight],... a static set
//	-dns host:port          resolve host every -dns-interval instead (default 30s)
//	-algo name              rr, wrr, leastconn, iphash, ring, ring-bounded, maglev, lrt, ...
//	-key kind               affinity key: ip, header:NAME or cookie:NAME (default ip)
//	-trusted-proxies list   CIDRs or addresses whose X-Forwarded-For is believed
//	-health-path path       probe GET path on every backend ("" = no active checks)
//	-health-interval d      time between probes (default 5s)
//	-max-attempts n         backends tried per request (default 3)
//
// Every series carries the constant label algo="<name>". Besides the lbkit
// metrics (see package lbmetrics), /metrics has the Go runtime's and the
// process's (go_*, process_*). /metrics is on its own listener so that it
// neither shadows a backend path of the same name nor is reachable from
// wherever the proxy's clients are.
//
// A bad flag prints what is wrong on stderr and exits with status 2. The
// proxy stops on SIGINT or SIGTERM, letting requests in flight finish for
// up to 10 seconds.
//
// The flags, the wiring and the serving loop are package proxycmd's, as in
// examples/proxy; main.go adds -metrics-listen, and in options the three
// things the metrics need: lbmetrics.Metrics.HealthChanged as
// proxycmd.Options.OnChange, the decorator as Options.Wrap (outermost, so it
// sees every pick, retry and Done, and is given the backends), and the
// registry's handler as an extra Options.Servers entry.
package main
