package health

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// Prober checks one backend once. Probe returns nil if the backend is
// healthy. It must return when ctx is done (ctx carries Config.Timeout);
// the Balancer probes each backend from its own goroutine, so Probe may be
// called concurrently for different backends.
type Prober interface {
	Probe(ctx context.Context, b balancer.Backend) error
}

// Func adapts a function to a Prober, for checks HTTP and TCP do not cover:
// gRPC's health service, a database ping, a file on disk.
func Func(f func(ctx context.Context, b balancer.Backend) error) Prober {
	return funcProber(f)
}

type funcProber func(ctx context.Context, b balancer.Backend) error

func (f funcProber) Probe(ctx context.Context, b balancer.Backend) error { return f(ctx, b) }

func (f funcProber) validate() error {
	if f == nil {
		return errors.New("Func(nil)")
	}
	return nil
}

// TCPCheck configures TCP.
type TCPCheck struct {
	// Address returns the host:port to dial for a backend. Default: its ID.
	Address func(balancer.Backend) string
}

// TCP returns a Prober that passes when a TCP connection to the backend
// opens, and closes it at once (HAProxy's default check).
func TCP(c TCPCheck) Prober {
	return &tcpProber{addr: c.Address}
}

type tcpProber struct {
	addr   func(balancer.Backend) string
	dialer net.Dialer
}

func (p *tcpProber) Probe(ctx context.Context, b balancer.Backend) error {
	addr := b.ID()
	if p.addr != nil {
		addr = p.addr(b)
	}
	c, err := p.dialer.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("health: tcp probe: %w", err)
	}
	return c.Close()
}

// HTTPCheck configures HTTP. Its zero value checks "GET /" over plain HTTP
// to the backend's ID as host:port and accepts statuses 200 to 399.
type HTTPCheck struct {
	// Method, default GET.
	Method string
	// Path, default "/". Ignored when URL is set.
	Path string
	// URL returns the URL to check for a backend. Default:
	// "http://" + ID + Path, the ID being host:port.
	URL func(balancer.Backend) string
	// Host, if set, is sent as the Host header (a virtual host behind the
	// address).
	Host string
	// StatusMin and StatusMax are the accepted range of statuses, both
	// included. Default 200 to 399, as HAProxy's httpchk accepts 2xx and
	// 3xx. Redirects are not followed.
	StatusMin, StatusMax int
	// BodyContains, if set, must appear in the first MaxBody bytes of the
	// response body (HAProxy's http-check expect string).
	BodyContains string
	// MaxBody bounds how much of the body is read. Default 64 KiB.
	MaxBody int64
	// Client sends the probes. Default: a client of its own, without
	// proxies from the environment and without keep-alive, so that every
	// probe opens a fresh connection and tests that the backend still
	// accepts them. Its timeout comes from the context.
	Client *http.Client
}

// HTTP returns a Prober that sends one HTTP request per probe and passes
// when the status is in range and, if asked, the body holds the expected
// text. A status or body mismatch fails with an error wrapping ErrProbe.
// New reports a bad range.
func HTTP(c HTTPCheck) Prober {
	p := &httpProber{c: c}
	if p.c.Method == "" {
		p.c.Method = http.MethodGet
	}
	if p.c.Path == "" {
		p.c.Path = "/"
	} else if !strings.HasPrefix(p.c.Path, "/") {
		p.c.Path = "/" + p.c.Path
	}
	if p.c.StatusMin == 0 && p.c.StatusMax == 0 {
		p.c.StatusMin, p.c.StatusMax = 200, 399
	}
	if p.c.MaxBody == 0 {
		p.c.MaxBody = 64 << 10
	}
	if p.c.Client == nil {
		p.c.Client = &http.Client{
			Transport: &http.Transport{
				Proxy:             nil, // probes go to the backend, never through a proxy
				DisableKeepAlives: true,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	p.needBody = []byte(p.c.BodyContains)
	return p
}

type httpProber struct {
	c        HTTPCheck
	needBody []byte
}

func (p *httpProber) validate() error {
	if p.c.StatusMin < 100 || p.c.StatusMax > 599 || p.c.StatusMin > p.c.StatusMax {
		return fmt.Errorf("HTTP status range %d to %d, want 100 <= StatusMin <= StatusMax <= 599",
			p.c.StatusMin, p.c.StatusMax)
	}
	if p.c.MaxBody < 0 {
		return fmt.Errorf("HTTP MaxBody is %d, want 0 (the default) or more", p.c.MaxBody)
	}
	if int64(len(p.needBody)) > p.c.MaxBody {
		return fmt.Errorf("HTTP BodyContains is %d bytes, longer than MaxBody (%d)", len(p.needBody), p.c.MaxBody)
	}
	return nil
}

func (p *httpProber) Probe(ctx context.Context, b balancer.Backend) error {
	url := "http://" + b.ID() + p.c.Path
	if p.c.URL != nil {
		url = p.c.URL(b)
	}
	req, err := http.NewRequestWithContext(ctx, p.c.Method, url, nil)
	if err != nil {
		return fmt.Errorf("health: http probe: %w", err)
	}
	if p.c.Host != "" {
		req.Host = p.c.Host
	}
	resp, err := p.c.Client.Do(req)
	if err != nil {
		return fmt.Errorf("health: http probe: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < p.c.StatusMin || resp.StatusCode > p.c.StatusMax {
		return fmt.Errorf("%w: %s %s: status %d, want %d to %d",
			ErrProbe, p.c.Method, url, resp.StatusCode, p.c.StatusMin, p.c.StatusMax)
	}
	if len(p.needBody) == 0 {
		return nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, p.c.MaxBody))
	if err != nil {
		return fmt.Errorf("health: http probe: %s %s: reading body: %w", p.c.Method, url, err)
	}
	if !bytes.Contains(body, p.needBody) {
		return fmt.Errorf("%w: %s %s: body does not contain %q", ErrProbe, p.c.Method, url, p.c.BodyContains)
	}
	return nil
}

// Observe feeds one active-check result for the backend with this ID, as
// if the prober had produced it: nil is a pass, anything else a failure.
// It counts toward Rise and Fall exactly like a probe, and a change it
// causes is applied by the applier, or by the next Apply. Observe for an
// ID not in the set, or in maintenance, does nothing.
//
// The probers Start runs call the same code. The scenario simulator calls
// Observe directly, with a virtual Clock and no Start.
func (h *Balancer) Observe(id string, err error) {
	n := h.cur.Load().byID[id]
	if n == nil || n.flags.Load()&flagLive == 0 {
		return
	}
	h.observe(n, err)
}

func (h *Balancer) observe(n *node, err error) {
	f := n.flags.Load()
	if f&flagMaint != 0 {
		return
	}
	if err != nil {
		n.setErr(&n.probeErr, err)
		n.passes.Store(0)
	} else {
		n.setErr(&n.probeErr, nil)
		if f&flagEjected != 0 && n.passes.Add(1) == int64(h.s.rise) {
			h.request() // enough passes to un-eject
		}
	}
	for {
		old := n.verdict.Load()
		up := old&upBit != 0
		next := old & upBit // a result that agrees ends the streak
		flipped := false
		if (err == nil) != up {
			streak, need := old&streakMask+1, uint64(h.s.fall)
			if !up {
				need = uint64(h.s.rise)
			}
			if streak >= need {
				next, flipped = (old&upBit)^upBit, true
			} else {
				next = old&upBit | streak
			}
		}
		if old == next || n.verdict.CompareAndSwap(old, next) {
			if flipped {
				h.request()
			}
			return
		}
	}
}

// startProber starts probing n if probing is configured, Start was called,
// and n is not in maintenance. h.mu must be held.
func (h *Balancer) startProber(n *node) {
	if h.s.probe == nil || n.stopProbe != nil || n.admin == Maintenance {
		return
	}
	h.life.Lock()
	defer h.life.Unlock()
	if !h.running || h.closed {
		return
	}
	ctx, cancel := context.WithCancel(h.ctx)
	n.stopProbe = cancel
	h.routines.Add(1)
	go h.probeLoop(ctx, n)
}

// stopProber stops probing n. h.mu must be held.
func (h *Balancer) stopProber(n *node) {
	if n.stopProbe != nil {
		n.stopProbe()
		n.stopProbe = nil
	}
}

// probeLoop probes n at once, then every Interval ± Jitter after the end
// of the previous probe, until ctx ends.
func (h *Balancer) probeLoop(ctx context.Context, n *node) {
	defer h.routines.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, h.s.timeout)
		err := h.s.probe.Probe(pctx, n.be.Load().b)
		cancel()
		if ctx.Err() != nil {
			return // stopped mid-probe: the result says nothing of the backend
		}
		h.observe(n, err)
		t.Reset(h.nextWait())
	}
}

// nextWait returns Interval plus a uniform offset in [-Jitter, +Jitter],
// capped at the largest Duration: the sum, up to Interval+Jitter < 2⁶⁴, is
// taken in uint64.
func (h *Balancer) nextWait() time.Duration {
	j := h.s.jitter
	if j == 0 {
		return h.s.interval
	}
	w := uint64(h.s.interval-j) + h.s.rand()%(2*uint64(j)+1)
	return time.Duration(min(w, math.MaxInt64))
}
