// Command lbload measures what a proxy costs per request. It sends a fixed
// number of requests at a fixed concurrency over keep-alive connections on
// loopback and reports requests per second, latency percentiles and,
// above all, the CPU time the named processes spent per request: a figure
// that depends on how loaded the machine is much less than throughput
// does, so two proxies measured one after the other on a shared machine
// can be compared by it.
//
//	lbload backends -listen 127.0.0.1:9101,127.0.0.1:9102    # HTTP backends that answer "ok" at once
//	lbload proxy -listen 127.0.0.1:9202 -backends 127.0.0.1:9101,127.0.0.1:9102 -tuned
//	lbload run -url http://127.0.0.1:8000/ -n 200000 -c 64 -pid proxy=12345
//
// The backends speak HTTP/1.1, and HTTP/2 without TLS (h2c) to a client
// that starts with it. proxy is a bare httputil.ReverseProxy sending to
// the backends in turn, the Go floor a proxy built on lbkit is set
// beside: with Go's defaults (no BufferPool, so a 32 KB copy buffer per
// request; http.DefaultTransport's two idle connections per host), or
// with -tuned as a careful user sets it (a BufferPool, 256 idle
// connections per backend).
//
// run warms up first (-warmup requests, not counted), then sends -n
// requests from -c workers, each worker on its own keep-alive connection
// (an http.Transport with -c connections at most), and reads every body
// to its end. A request that fails or answers anything but 200 counts as
// an error; run exits 1 if any did.
//
// CPU time is read from /proc: user and system time of each process
// given with -pid (name=PID, repeatable), of all its threads and of every
// process descended from it (nginx's workers under its master), as
// getrusage counts them, sampled when the measured requests start and
// when they end. It is exact to the kernel's tick (USER_HZ, 10 ms on
// Linux), small against the seconds of CPU a run of 100,000 requests
// takes.
//
// With -tsv FILE, run also appends one tab-separated line per process to
// FILE (label, name, requests, concurrency, seconds, rps, p50, p99, cpu
// µs per request, user, system, errors); `lbload report FILE` prints
// them as a table with each row's CPU per request and requests per second
// as a ratio of the first row's: when the rows have a run in every round,
// the median over the rounds of the ratio between runs of the same round,
// which the machine's load at the time touched alike.
// bench/sidebyside/run.sh uses both to set lbkit's ready proxy beside
// nginx.
//
// Run the load generator on another core than the proxy (taskset), or
// its own CPU use competes with the proxy's and lowers the throughput of
// both; the CPU per request of the proxy is affected much less.
package main
