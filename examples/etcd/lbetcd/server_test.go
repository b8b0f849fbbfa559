package lbetcd_test

import (
	"io"
	"net"
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// server is a real etcd, embedded in the test process, listening on
// loopback ports chosen free when it is made, its data in a temporary
// directory. Stop and Start keep both, so that a restarted server has the
// same address, revisions and leases.
//
// Clients reach it through a relay on a port of its own, which Stop
// closes with every connection through it before it stops etcd, as a
// crashed server's connections end: etcd's own Close stops gRPC
// gracefully, and waits its request timeout (7 s) for the watch streams
// that clients keep open.
type server struct {
	dir                string
	clientURL, peerURL url.URL
	relay              relay

	mu sync.Mutex
	e  *embed.Etcd // nil while stopped
}

// relay copies TCP connections from addr to target.
type relay struct {
	addr, target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

// open listens on r.addr again, trying for a while if the port is still
// held by a connection closing.
func (r *relay) open(tb testing.TB) {
	tb.Helper()
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if ln, err = net.Listen("tcp", r.addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	require.NoError(tb, err, "relay listening on %s again", r.addr)
	r.mu.Lock()
	r.ln, r.conns = ln, map[net.Conn]bool{}
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.wg.Add(1)
			go func() {
				defer r.wg.Done()
				r.serve(c)
			}()
		}
	}()
}

// serve copies c to and from a new connection to the target.
func (r *relay) serve(c net.Conn) {
	u, err := net.Dial("tcp", r.target)
	if err != nil {
		c.Close()
		return
	}
	r.mu.Lock()
	if r.conns == nil { // closed meanwhile
		r.mu.Unlock()
		c.Close()
		u.Close()
		return
	}
	r.conns[c], r.conns[u] = true, true
	r.mu.Unlock()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(u, c)
	go cp(c, u)
	<-done
	c.Close()
	u.Close()
	<-done
	r.mu.Lock()
	delete(r.conns, c)
	delete(r.conns, u)
	r.mu.Unlock()
}

// close stops listening, cuts every connection and waits for the copies.
func (r *relay) close() {
	r.mu.Lock()
	ln, conns := r.ln, r.conns
	r.ln, r.conns = nil, nil
	r.mu.Unlock()
	if ln == nil {
		return
	}
	ln.Close()
	for c := range conns {
		c.Close()
	}
	r.wg.Wait()
}

// freePort returns a loopback port nothing listens on now.
func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(tb, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// newServer starts an etcd for tb, stopped at tb's end.
func newServer(tb testing.TB) *server {
	tb.Helper()
	s := &server{
		dir:       tb.TempDir(),
		clientURL: url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(freePort(tb))},
		peerURL:   url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(freePort(tb))},
	}
	s.relay = relay{addr: "127.0.0.1:" + strconv.Itoa(freePort(tb)), target: s.clientURL.Host}
	s.Start(tb)
	tb.Cleanup(func() { s.Stop(tb) })
	return s
}

// Start starts the server, or does nothing if it runs, and waits until it
// serves.
func (s *server) Start(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e != nil {
		return
	}
	cfg := embed.NewConfig()
	cfg.Name = "lbetcd-test"
	cfg.Dir = s.dir
	cfg.ListenClientUrls = []url.URL{s.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{s.clientURL}
	cfg.ListenPeerUrls = []url.URL{s.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{s.peerURL}
	cfg.InitialCluster = cfg.Name + "=" + s.peerURL.String()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	require.NoError(tb, err, "starting etcd")
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		e.Close()
		tb.Fatal("etcd did not become ready in 60 s")
	}
	s.e = e
	s.relay.open(tb)
}

// Stop stops the server, or does nothing if it is stopped.
func (s *server) Stop(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e == nil {
		return
	}
	s.relay.close()
	s.e.Close()
	<-s.e.Server.StopNotify()
	s.e = nil
}

// Partition cuts every client of s but those of direct from it, and
// refuses their connections, until Heal; etcd runs on.
func (s *server) Partition() { s.relay.close() }

// Heal ends a Partition.
func (s *server) Heal(tb testing.TB) { s.relay.open(tb) }

// Endpoint is the server's client address, the relay's.
func (s *server) Endpoint() string { return s.relay.addr }

// client returns a client of s, through the relay, closed at tb's end.
func (s *server) client(tb testing.TB) *clientv3.Client { return s.dial(tb, s.Endpoint()) }

// direct returns a client of s that does not go through the relay, so
// that Partition does not cut it: a writer on the far side of a
// partition. It is closed at tb's end.
func (s *server) direct(tb testing.TB) *clientv3.Client { return s.dial(tb, s.clientURL.Host) }

func (s *server) dial(tb testing.TB, addr string) *clientv3.Client {
	tb.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{addr},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	require.NoError(tb, err)
	tb.Cleanup(func() { c.Close() })
	return c
}
