package live

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/bench/sim"
	"github.com/lbkit/lbkit/catalog"
	"github.com/lbkit/lbkit/health"
	"github.com/lbkit/lbkit/lbhttp"
)

// loopback is what the proxies trust to report a client's address in
// X-Forwarded-For: every virtual user connects from 127.0.0.1 and names
// its own address (sim.UserAddr) in the header.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// proxy is one balancer: the algorithm's picker, wrapped in health as the
// variant asks, behind a real lbhttp.NewProxy on its own loopback port.
type proxy struct {
	url    string // http://127.0.0.1:port/
	meter  *meter
	health *health.Balancer // nil for the bare picker
	base   *http.Transport
	srv    *http.Server
	conns  sync.WaitGroup
}

// startProxy builds and starts one proxy for algorithm a under variant v.
func (r *run) startProxy(a catalog.Algorithm, v sim.Variant) (*proxy, error) {
	p := &proxy{}
	// The algorithm lives in the scenario's time, as in the simulation:
	// its clock runs 1/scale times as fast as the real one, and the
	// latencies it learns are divided by the scale (meter.Done), so that
	// lrt's decay time (10 s) is 10 s of the scenario.
	var bal balancer.Balancer
	if a.Sim != nil {
		bal = a.Sim(nil, r.now)
	} else {
		bal = a.New()
	}
	if v.Health() {
		cfg := health.Config{
			NoEjection:       v&sim.Passive == 0,
			BaseEjectionTime: r.scaled(health.DefaultBaseEjectionTime),
			MaxEjectionTime:  r.scaled(health.DefaultMaxEjectionTime),
		}
		if v&sim.Active != 0 {
			// Probes go through the same address mapping as requests,
			// one fresh connection each, as health.HTTP's own client does.
			cfg.Probe = health.HTTP(health.HTTPCheck{Path: healthPath, Client: &http.Client{
				Transport:     &http.Transport{DialContext: r.dial, DisableKeepAlives: true},
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
			}})
			cfg.Interval = r.sc.Interval()
			cfg.Timeout = min(cfg.Interval, max(r.scaled(health.DefaultTimeout), minProbeTimeout))
		}
		h, err := health.New(bal, cfg)
		if err != nil {
			return nil, fmt.Errorf("live: %s: %w", a.Name, err)
		}
		p.health, bal = h, h
	}
	p.meter = &meter{inner: bal, r: r}
	p.meter.fb, _ = bal.(balancer.Feedback)
	if err := bal.Update(r.endpoints(a)); err != nil {
		return nil, fmt.Errorf("live: %s: update: %w", a.Name, err)
	}
	if p.health != nil {
		if err := p.health.Start(r.ctx); err != nil {
			return nil, fmt.Errorf("live: %s: %w", a.Name, err)
		}
	}

	// Pickers see the simulator's backend IDs (10.0.0.1:8080, ...), so
	// that the hash pickers place them as in the simulation; the base
	// transport dials the backend's real loopback address instead.
	p.base = lbhttp.NewBase()
	p.base.DialContext = r.dial
	p.base.MaxIdleConnsPerHost = max(lbhttp.DefaultMaxIdleConnsPerHost, r.sc.PeakUsers())
	cfg, err := r.transportConfig(v)
	if err != nil {
		p.close()
		return nil, err
	}
	cfg.Base = p.base
	cfg.TrustedProxies = loopback
	cfg.ErrorLog = slog.New(slog.NewTextHandler(io.Discard, nil))
	rp, err := lbhttp.NewProxy(p.meter, cfg)
	if err != nil {
		p.close()
		return nil, fmt.Errorf("live: %s: %w", a.Name, err)
	}
	rp.ErrorLog = discardLog
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		p.close()
		return nil, fmt.Errorf("live: proxy: %w", err)
	}
	p.url = "http://" + ln.Addr().String() + "/"
	p.srv = &http.Server{
		Handler:           rp,
		ConnState:         countConns(&p.conns),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          discardLog,
	}
	p.conns.Go(func() { _ = p.srv.Serve(ln) })
	return p, nil
}

// transportConfig returns the lbhttp.Config of a proxy under variant v, as
// the simulator plays it: MaxAttempts sim.MaxAttempts with Retry, else
// one; lbhttp's timeouts (scaled) with Timeout, else none; a Budget of
// lbhttp's defaults (its window scaled, its minimum per second divided by
// the scale) with Budget, else none; hedging at sim.HedgePercentile with
// Hedge.
func (r *run) transportConfig(v sim.Variant) (lbhttp.Config, error) {
	cfg := lbhttp.Config{MaxAttempts: 1, AttemptTimeout: -1, RequestTimeout: -1, IdleTimeout: -1, NoBudget: true}
	if v&sim.Retry != 0 {
		cfg.MaxAttempts = sim.MaxAttempts
	}
	if v&sim.Timeout != 0 {
		cfg.AttemptTimeout = r.scaled(lbhttp.DefaultAttemptTimeout)
		cfg.RequestTimeout = r.scaled(lbhttp.DefaultRequestTimeout)
		cfg.IdleTimeout = r.scaled(lbhttp.DefaultIdleTimeout)
	}
	if v&sim.Budget != 0 {
		b, err := lbhttp.NewBudget(lbhttp.BudgetConfig{
			Window:       r.scaled(lbhttp.DefaultBudgetWindow),
			MinPerSecond: lbhttp.DefaultBudgetMinPerSecond / r.scale,
		})
		if err != nil {
			return cfg, fmt.Errorf("live: budget: %w", err)
		}
		cfg.Budget, cfg.NoBudget = b, false
	}
	if v&sim.Hedge != 0 {
		cfg.HedgePercentile = sim.HedgePercentile
	}
	return cfg, nil
}

// minProbeTimeout keeps a scaled probe timeout above the scheduling noise
// of a busy machine: a probe of a live backend on loopback must not time
// out.
const minProbeTimeout = 100 * time.Millisecond

// close stops the proxy: its server and connections, its health checks,
// its idle connections to the backends. Users must have stopped first.
func (p *proxy) close() {
	if p.srv != nil {
		_ = p.srv.Close()
	}
	p.conns.Wait()
	if p.health != nil {
		p.health.Close()
	}
	p.base.CloseIdleConnections()
}

// meter is the picker a proxy's Transport sees: it passes Pick and Done
// to the (health-wrapped) algorithm, counting on the way what the
// simulation counts per backend: attempts sent, and attempts refused or
// broken off after they were sent (not timeouts or 5xx answers, which the
// simulation does not count there either), within the scenario (as in
// the simulation, what happens after its end is not measured). Done
// converts the latency to the scenario's time base before it passes it
// on.
type meter struct {
	inner   balancer.Picker
	fb      balancer.Feedback // nil when inner learns nothing
	r       *run
	retries atomic.Int64
}

var (
	_ balancer.Picker   = (*meter)(nil)
	_ balancer.Feedback = (*meter)(nil)
)

func (m *meter) Pick(req balancer.Request) (balancer.Backend, error) {
	b, err := m.inner.Pick(req)
	if err != nil {
		return b, err
	}
	t := m.r.elapsed()
	if t >= m.r.length {
		return b, nil // after the scenario's end: not measured
	}
	if req.Attempt > 0 {
		m.retries.Add(1)
	}
	if m.r.hasWindow && t >= m.r.window[0] && t < m.r.window[1] {
		m.r.sentDuring.Add(1)
	}
	if be := m.r.byID[b.ID()]; be != nil {
		be.sent.Add(1)
		be.stepSent[m.r.stepOf(t)].Add(1)
	}
	return b, nil
}

func (m *meter) Done(b balancer.Backend, res balancer.Result) {
	if b != nil && res.Err != nil && !res.Abandoned() && m.r.elapsed() < m.r.length {
		if be := m.r.byID[b.ID()]; be != nil {
			var status *lbhttp.StatusError
			switch {
			case errors.Is(res.Err, syscall.ECONNREFUSED):
				be.refused.Add(1)
			case errors.Is(res.Err, lbhttp.ErrAttemptTimeout), errors.Is(res.Err, lbhttp.ErrRequestTimeout),
				errors.Is(res.Err, lbhttp.ErrIdleTimeout), errors.As(res.Err, &status):
			default:
				be.reset.Add(1)
			}
		}
	}
	if m.fb != nil {
		if res.Latency > 0 {
			res.Latency = max(time.Duration(float64(res.Latency)/m.r.scale), 1)
		}
		m.fb.Done(b, res)
	}
}

// dial connects to the real address of the backend whose simulated ID is
// addr; any other address is refused without a packet sent, so that the
// proxies reach nothing but the run's loopback backends.
func (r *run) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	be := r.byID[addr]
	if be == nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: fmt.Errorf("live: %s is not a backend of this run", addr)}
	}
	return r.dialer.DialContext(ctx, network, be.addr)
}
