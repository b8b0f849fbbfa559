package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/lbkit/lbkit/lbhttp"
)

// serveProxy serves a bare httputil.ReverseProxy that sends each request
// to the next of -backends in turn: Go's floor, which lbkit's proxy is set
// beside. With Go's defaults (no BufferPool, http.DefaultTransport's two
// idle connections per host), or with -tuned as a careful user sets it: a
// BufferPool and 256 idle connections per backend.
func serveProxy(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flags("proxy")
	listen := fs.String("listen", "", "address to serve on")
	list := fs.String("backends", "", "backends' host:port, comma-separated")
	tuned := fs.Bool("tuned", false, "a BufferPool and 256 idle connections per backend")
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if *listen == "" || *list == "" {
		return usageError{errors.New("proxy: -listen and -backends are required")}
	}
	rp, base, err := bareProxy(*list, *tuned, stderr)
	if err != nil {
		return err
	}
	defer base.CloseIdleConnections()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	s := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stderr, "lbload: proxy (tuned %v) on %s to %s\n", *tuned, ln.Addr(), *list)
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ln) }()
	select {
	case <-ctx.Done():
		s.Close()
		return nil
	case err := <-errc:
		return err
	}
}

// bareProxy returns the ReverseProxy serveProxy serves, over the
// comma-separated backends of list, and its base transport.
func bareProxy(list string, tuned bool, errLog io.Writer) (*httputil.ReverseProxy, *http.Transport, error) {
	var targets []*url.URL
	for hp := range strings.SplitSeq(list, ",") {
		if _, _, err := net.SplitHostPort(hp); err != nil {
			return nil, nil, usageError{fmt.Errorf("proxy: backend %q: %w", hp, err)}
		}
		targets = append(targets, &url.URL{Scheme: "http", Host: hp})
	}
	var next atomic.Uint64
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(targets[next.Add(1)%uint64(len(targets))])
			pr.SetXForwarded()
		},
		ErrorLog: log.New(errLog, "lbload proxy: ", 0),
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	if tuned {
		base.MaxIdleConnsPerHost = 256
		rp.BufferPool = new(lbhttp.BufferPool)
	}
	rp.Transport = base
	return rp, base, nil
}
