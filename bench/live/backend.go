package live

import (
	"context"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lbkit/lbkit/bench/sim"
)

// healthPath is what the backends answer at once, outside their latency
// and capacity: the active checks' target.
const healthPath = "/healthz"

// okBody is every backend's answer.
var okBody = []byte("ok\n")

// discardLog silences net/http's and httputil's own error logs: a killed
// backend makes them report every broken connection, which the run counts
// instead.
var discardLog = log.New(io.Discard, "", 0)

// span is one request's stay at a backend, queueing included, in real
// nanoseconds since the run started.
type span struct{ from, to int64 }

// backend is one real HTTP server on 127.0.0.1 playing a scenario backend:
// it waits the (scaled) service time before answering, serves at most
// Capacity requests at once and queues the rest first come, first served,
// and can be killed (its listener and every connection closed) and
// revived on the same address.
type backend struct {
	// Immutable after start.
	r     *run
	index int
	spec  sim.Backend   // scaled
	addr  string        // 127.0.0.1:port, the same for every life
	sem   chan struct{} // Capacity slots; nil when unlimited
	conns sync.WaitGroup

	// Atomic: counted by the proxies' meters.
	sent, refused, reset atomic.Int64
	stepSent             []atomic.Int32

	// Atomic: answering 503 (sim.Backend.Unavailable).
	unavailable atomic.Bool

	// Guarded by mu.
	mu      sync.Mutex
	rng     *rand.Rand
	srv     *http.Server  // the current life; nil while dead
	stalled chan struct{} // closed when the stall ends; nil when not stalled
	spans   []span
	// The service times' timers: how late they fired in all (real ns),
	// and how many fired.
	late  int64
	fired int64
}

// start listens on a fresh loopback port and serves.
func (b *backend) start() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("live: backend %d: %w", b.index+1, err)
	}
	b.addr = ln.Addr().String()
	b.serve(ln)
	return nil
}

// serve starts a life of the backend on ln. The goroutine it starts and
// every connection's are counted in conns.
func (b *backend) serve(ln net.Listener) {
	srv := &http.Server{
		Handler:           b,
		ConnState:         countConns(&b.conns),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          discardLog,
	}
	b.mu.Lock()
	b.srv = srv
	b.mu.Unlock()
	b.conns.Go(func() { _ = srv.Serve(ln) })
}

// countConns returns a ConnState hook that counts a server's open
// connections in wg: one Add per new connection, one Done when it is
// closed or hijacked. net/http runs the hook on the goroutine that
// accepted the connection, which wg already counts, so Add never races
// with Wait.
func countConns(wg *sync.WaitGroup) func(net.Conn, http.ConnState) {
	return func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			wg.Add(1)
		case http.StateClosed, http.StateHijacked:
			wg.Done()
		}
	}
}

// kill closes the listener, so new connections are refused, and every
// connection, so requests in service or queued fail.
func (b *backend) kill() {
	b.mu.Lock()
	srv := b.srv
	b.srv = nil
	b.mu.Unlock()
	if srv != nil {
		_ = srv.Close()
	}
}

// revive listens again on the backend's address.
func (b *backend) revive() error {
	b.mu.Lock()
	alive := b.srv != nil
	b.mu.Unlock()
	if alive {
		return nil
	}
	ln, err := net.Listen("tcp", b.addr)
	if err != nil {
		return fmt.Errorf("live: reviving backend %d on %s: %w", b.index+1, b.addr, err)
	}
	b.serve(ln)
	return nil
}

// apply makes the change c to the backend.
func (b *backend) apply(c change) error {
	switch c {
	case kill:
		b.kill()
	case revive:
		return b.revive()
	case stall:
		b.mu.Lock()
		if b.stalled == nil {
			b.stalled = make(chan struct{})
		}
		b.mu.Unlock()
	case resume:
		b.mu.Lock()
		if b.stalled != nil {
			close(b.stalled)
			b.stalled = nil
		}
		b.mu.Unlock()
	case storm, calm:
		b.unavailable.Store(c == storm)
	}
	return nil
}

// hold waits while the backend is stalled, and reports whether the
// request is still wanted then (its connection not closed: the proxy did
// not give up on it, the backend was not killed).
func (b *backend) hold(ctx context.Context) bool {
	b.mu.Lock()
	ch := b.stalled
	b.mu.Unlock()
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// stalledNow reports whether the backend is stalled.
func (b *backend) stalledNow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stalled != nil
}

// close kills the backend and waits for its goroutines.
func (b *backend) close() {
	b.kill()
	b.conns.Wait()
}

// ServeHTTP answers the health check at once, and any other request after
// a capacity slot and the service time. As in the simulation, a stalled
// backend holds every answer, the health check's included, until the
// stall ends (or the connection closes), and one answering 503 answers
// every request so after the (scaled) sim.UnavailableTime, without a slot,
// and fails its health check.
func (b *backend) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	ctx := req.Context()
	if req.URL.Path == healthPath {
		switch {
		case !b.hold(ctx):
		case b.unavailable.Load():
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.WriteHeader(http.StatusOK)
		}
		return
	}
	from := b.r.elapsed()
	defer func() { b.record(span{from, b.r.elapsed()}) }()
	if b.unavailable.Load() && !b.stalledNow() {
		t := time.NewTimer(b.r.scaled(sim.UnavailableTime))
		defer t.Stop()
		select {
		case <-t.C:
			w.WriteHeader(http.StatusServiceUnavailable)
		case <-ctx.Done():
		}
		return
	}
	if b.sem != nil {
		// Waiting senders on a channel are served in arrival order: FIFO.
		select {
		case b.sem <- struct{}{}:
			defer func() { <-b.sem }()
		case <-ctx.Done():
			return // killed, or the proxy gave up, while queued
		}
	}
	b.mu.Lock()
	d := b.spec.ServiceTime(b.rng)
	b.mu.Unlock()
	asleep := time.Now()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return // killed, or the proxy gave up, while in service
	}
	late := time.Since(asleep) - d
	b.mu.Lock()
	b.late += int64(max(late, 0))
	b.fired++
	b.mu.Unlock()
	if !b.hold(ctx) {
		return // stalled, and the proxy gave up
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write(okBody)
}

func (b *backend) record(s span) {
	b.mu.Lock()
	b.spans = append(b.spans, s)
	b.mu.Unlock()
}
