package lbhttp

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// DefaultReportWindow is the span over which a Reporter measures its
// rates and its utilisation: 10 s, gRPC's default period for out-of-band
// ORCA reports and A58's blackout period, so that a report-driven wrr
// sees a backend's first trustworthy weight as its blackout ends.
const DefaultReportWindow = 10 * time.Second

// DefaultProbePath is the path a Reporter answers probes on, and a Prober
// asks.
const DefaultProbePath = "/lbkit/probe"

// latencySamples is how many recent latencies a Reporter keeps for its
// latency estimate: the median of the last 64 requests moves within a
// few requests of a change and is not thrown by one slow answer.
const latencySamples = 64

// reportBuckets is the number of slices a window is kept in: its rates
// move in steps of a tenth of the window.
const reportBuckets = 10

// ReporterConfig configures a Reporter. The zero value reports rates and
// errors but no utilisation; every field says what its zero value means.
type ReporterConfig struct {
	// Capacity is how many requests in flight the backend serves at full
	// utilisation: its worker pool, its connection limit, a load test's
	// knee. With it, application_utilization is the mean number of
	// requests in flight over the window divided by Capacity, so that a
	// report-driven wrr weighs the backend by Capacity over its latency
	// (qps / utilisation, by Little's law). Zero: not reported, unless
	// Utilization is set.
	Capacity int

	// Utilization, when set, is called for every report and its value
	// sent as application_utilization instead of the one Capacity gives:
	// a CPU gauge, a queue's fill, whatever the backend knows of itself.
	// It must be safe for concurrent use and quick; negative, NaN and
	// infinite values are sent as 0.
	Utilization func() float64

	// Window is the span of the rates (rps_fractional, eps) and of the
	// utilisation from Capacity. Zero: DefaultReportWindow.
	Window time.Duration

	// Format is the form of the endpoint-load-metrics header. Zero:
	// FormatText, the one Envoy documents first.
	Format Format

	// ProbePath is where GET and HEAD requests are answered by the
	// Reporter itself, for a probing picker (lrt/prequal through a
	// Prober): 204 No Content with a report that adds the requests in
	// flight and the latency estimate as named metrics. Probes are not
	// counted as requests. Empty: DefaultProbePath.
	ProbePath string

	// Failure says whether a response status counts as an error for eps.
	// Nil: 5xx, as DefaultClassify.
	Failure func(status int) bool

	// Now is the clock. Nil: time.Now. Tests pass their own.
	Now func() time.Time
}

// Reporter is an http.Handler middleware for a backend: it serves every
// request through the handler it wraps and sends, in the response's
// endpoint-load-metrics header, an ORCA load report of the backend as a
// whole (every client's traffic, not the one asking): application
// utilisation (see ReporterConfig.Capacity and Utilization), rps_fractional
// and eps over the window. lbhttp's Transport reads the header into
// balancer.Result.Load for the pickers that weigh by reports (wrr's
// Reported, leastconn's WithReports), and Envoy reads it too.
//
// On ProbePath it answers probes: the requests in flight now (without the
// probe) and its latency estimate, the median of the last 64 requests'
// times through the wrapped handler, as the named metrics rif and
// latency_ms.
//
// The header is set when the wrapped handler writes its status (or its
// first byte, or returns having written nothing); a status written by
// other means (a hijacked connection writing its own) carries none.
//
// A Reporter is safe for concurrent use. Each request takes its mutex
// three times, briefly (as it starts, for its report, as it ends), and a
// report costs a few small allocations; it is meant for backends, not for
// the proxy's hot path.
type Reporter struct {
	// Immutable after NewReporter.
	next     http.Handler
	capacity float64
	util     func() float64
	window   time.Duration
	slot     time.Duration // window / reportBuckets
	format   Format
	probe    string
	failure  func(int) bool
	now      func() time.Time
	born     time.Time

	// Guarded by mu.
	mu       sync.Mutex
	inFlight int
	last     time.Time // when busy was last brought up to date
	cur      int       // the bucket now being filled
	curStart time.Time // its start
	buckets  [reportBuckets]bucket
	lat      [latencySamples]time.Duration // recent latencies, a ring
	latN     int                           // latencies recorded, up to latencySamples
	latNext  int                           // where the next goes
}

// bucket is one slice of the window.
type bucket struct {
	done, errs int
	busy       float64 // request-seconds in flight
}

var _ http.Handler = (*Reporter)(nil)

// NewReporter returns a Reporter serving through next. It returns an
// error for a nil next, a negative Capacity or Window, a Window under
// 10 ms, an unknown Format or a ProbePath that does not start with "/".
func NewReporter(next http.Handler, cfg ReporterConfig) (*Reporter, error) {
	switch {
	case next == nil:
		return nil, errors.New("lbhttp: reporter: nil handler")
	case cfg.Capacity < 0:
		return nil, fmt.Errorf("lbhttp: reporter: %w: Capacity %d is negative", balancer.ErrBadOption, cfg.Capacity)
	case cfg.Window < 0 || (cfg.Window > 0 && cfg.Window < 10*time.Millisecond):
		return nil, fmt.Errorf("lbhttp: reporter: %w: Window %v is not at least 10ms", balancer.ErrBadOption, cfg.Window)
	case cfg.Format != FormatText && cfg.Format != FormatJSON:
		return nil, fmt.Errorf("lbhttp: reporter: %w: unknown %v", balancer.ErrBadOption, cfg.Format)
	case cfg.ProbePath != "" && !strings.HasPrefix(cfg.ProbePath, "/"):
		return nil, fmt.Errorf("lbhttp: reporter: %w: ProbePath %q does not start with /", balancer.ErrBadOption, cfg.ProbePath)
	}
	r := &Reporter{
		next:     next,
		capacity: float64(cfg.Capacity),
		util:     cfg.Utilization,
		window:   cmp.Or(cfg.Window, DefaultReportWindow),
		format:   cfg.Format,
		probe:    cmp.Or(cfg.ProbePath, DefaultProbePath),
		failure:  cfg.Failure,
		now:      cfg.Now,
	}
	if r.failure == nil {
		r.failure = func(s int) bool { return s >= 500 && s <= 599 }
	}
	if r.now == nil {
		r.now = time.Now
	}
	r.slot = r.window / reportBuckets
	r.born = r.now()
	r.last, r.curStart = r.born, r.born
	return r, nil
}

// ServeHTTP answers probes on ProbePath and serves everything else
// through the wrapped handler, with a load report in the response header.
func (r *Reporter) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path == r.probe && (req.Method == http.MethodGet || req.Method == http.MethodHead) {
		r.answerProbe(w)
		return
	}
	start := r.now()
	r.mu.Lock()
	r.advance(start)
	r.inFlight++
	r.mu.Unlock()

	rw := &reportWriter{ResponseWriter: w, r: r, status: http.StatusOK}
	panicked := true
	defer func() {
		status := rw.status
		if panicked {
			status = http.StatusInternalServerError // what net/http makes of it
		}
		r.finish(start, status)
	}()
	r.next.ServeHTTP(rw, req)
	if !rw.wrote {
		rw.WriteHeader(http.StatusOK) // as net/http would, but with the report
	}
	panicked = false
}

// answerProbe writes the probe answer.
func (r *Reporter) answerProbe(w http.ResponseWriter) {
	h := w.Header()
	h[LoadHeader] = []string{string(appendLoad(nil, r.Load(), r.format, true))}
	h["Cache-Control"] = []string{"no-store"}
	w.WriteHeader(http.StatusNoContent)
}

// finish counts a request that ended with status.
func (r *Reporter) finish(start time.Time, status int) {
	end := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.advance(end)
	r.inFlight--
	b := &r.buckets[r.cur]
	b.done++
	if r.failure(status) {
		b.errs++
	}
	r.lat[r.latNext] = max(end.Sub(start), 0)
	r.latNext = (r.latNext + 1) % latencySamples
	r.latN = min(r.latN+1, latencySamples)
}

// advance brings the window up to now: the time since the last event
// counts inFlight requests busy, slot by slot, and slots that have passed
// are emptied for reuse. A clock that steps back counts as no time. Call
// it with mu held.
func (r *Reporter) advance(now time.Time) {
	if !now.After(r.last) {
		return
	}
	if now.Sub(r.curStart) >= r.window+r.slot {
		// Idle for more than a window: nothing of it is left.
		r.buckets = [reportBuckets]bucket{}
		r.curStart = now.Add(-now.Sub(r.curStart) % r.slot)
		r.last = r.curStart
	}
	for {
		end := r.curStart.Add(r.slot)
		if now.Before(end) {
			break
		}
		r.buckets[r.cur].busy += float64(r.inFlight) * end.Sub(r.last).Seconds()
		r.cur = (r.cur + 1) % reportBuckets
		r.buckets[r.cur] = bucket{}
		r.curStart, r.last = end, end
	}
	r.buckets[r.cur].busy += float64(r.inFlight) * now.Sub(r.last).Seconds()
	r.last = now
}

// Load returns the report the Reporter would send now, with the requests
// in flight and the latency estimate that probes get (InFlight, Latency).
// Rates are over the window, or over the time since NewReporter while
// that is shorter.
func (r *Reporter) Load() balancer.Load { return r.load(true) }

// load is Load, or with probe false the report of a response, which
// leaves InFlight and Latency to probe answers and so skips the copy and
// sort of the recent latencies.
func (r *Reporter) load(probe bool) balancer.Load {
	now := r.now()
	var lat [latencySamples]time.Duration
	n := 0
	r.mu.Lock()
	r.advance(now)
	var done, errs int
	var busy float64
	for _, b := range r.buckets {
		done += b.done
		errs += b.errs
		busy += b.busy
	}
	// The window covers the slots before this one, and this one so far.
	covered := min(r.window-r.slot+now.Sub(r.curStart), now.Sub(r.born)).Seconds()
	var l balancer.Load
	if probe {
		l.InFlight = float64(r.inFlight)
		n = copy(lat[:], r.lat[:r.latN])
	}
	r.mu.Unlock()

	if covered > 0 {
		l.RPS = float64(done) / covered
		l.EPS = float64(errs) / covered
		if r.capacity > 0 {
			l.Application = busy / covered / r.capacity
		}
	}
	if r.util != nil {
		u := r.util()
		if !(u >= 0) || math.IsInf(u, 1) { // NaN, negative or infinite
			u = 0
		}
		l.Application = u
	}
	if n > 0 {
		s := lat[:n]
		slices.Sort(s)
		l.Latency = s[n/2]
	}
	return l
}

// reportWriter sets the report header when the status is written.
type reportWriter struct {
	http.ResponseWriter
	r      *Reporter
	status int
	wrote  bool
}

func (w *reportWriter) WriteHeader(code int) {
	if w.wrote {
		w.ResponseWriter.WriteHeader(code) // net/http logs the superfluous call
		return
	}
	if code >= 200 || code == http.StatusSwitchingProtocols {
		w.wrote, w.status = true, code
		if l := w.r.load(false); l.Reported() {
			w.Header()[LoadHeader] = []string{string(AppendLoad(nil, l, w.r.format))}
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *reportWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(p)
}

// Flush writes the status, if not yet written, and flushes, when the
// underlying writer can.
func (w *reportWriter) Flush() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack hands the connection over, for handlers that assert
// http.Hijacker rather than use http.ResponseController (WebSocket
// libraries do); it fails, as the underlying writer would, where hijacking
// is not supported (HTTP/2). A hijacked response carries no report.
func (w *reportWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, buf, err := http.NewResponseController(w.ResponseWriter).Hijack()
	if err == nil {
		// The connection is the handler's now: ServeHTTP must not write
		// a status to it when the handler returns. The request counts as
		// served with whatever status was written before, else 200.
		w.wrote = true
	}
	return conn, buf, err
}

// Unwrap lets http.ResponseController reach the underlying writer
// (Hijack, deadlines).
func (w *reportWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ProberConfig configures a Prober. The zero value is ready to use.
type ProberConfig struct {
	// Client sends the probes. Nil: a client on NewBase(). Its Timeout
	// bounds a probe beyond the context the picker gives.
	Client *http.Client
	// Scheme is "http" or "https". Empty: "http".
	Scheme string
	// Path is the path probed. Empty: DefaultProbePath.
	Path string
}

// Prober asks backends for their load, for a probing picker: pass its
// Probe method to lrt/prequal's New. The backends' IDs are their
// host:port addresses, and they answer through a Reporter (or anything
// that sends an endpoint-load-metrics header with the named metric rif).
//
// A Prober is immutable and safe for concurrent use.
type Prober struct {
	client *http.Client
	prefix string // scheme://
	path   string
}

// NewProber returns a Prober. It returns an error for a Scheme other than
// "", "http" and "https", or a Path that does not start with "/".
func NewProber(cfg ProberConfig) (*Prober, error) {
	if cfg.Scheme != "" && cfg.Scheme != "http" && cfg.Scheme != "https" {
		return nil, fmt.Errorf("lbhttp: prober: %w: Scheme %q is neither http nor https", balancer.ErrBadOption, cfg.Scheme)
	}
	if cfg.Path != "" && !strings.HasPrefix(cfg.Path, "/") {
		return nil, fmt.Errorf("lbhttp: prober: %w: Path %q does not start with /", balancer.ErrBadOption, cfg.Path)
	}
	p := &Prober{client: cfg.Client, prefix: cmp.Or(cfg.Scheme, "http") + "://", path: cmp.Or(cfg.Path, DefaultProbePath)}
	if p.client == nil {
		p.client = &http.Client{Transport: NewBase()}
	}
	return p, nil
}

// errNoInFlight is a probe answer without the requests in flight.
var errNoInFlight = fmt.Errorf("%w: probe answer without the named metric %q", balancer.ErrBadLoad, balancer.MetricInFlight)

// Probe sends GET Path to b and returns the load report of its answer.
// It fails for a transport error, a status other than 2xx, or an answer
// whose report does not parse (wrapping balancer.ErrBadLoad) or lacks the
// named metric rif. An idle backend reports rif 0: the answer must name
// it, so that a backend without a Reporter is not taken for an idle one.
func (p *Prober) Probe(ctx context.Context, b balancer.Backend) (balancer.Load, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.prefix+b.ID()+p.path, nil)
	if err != nil {
		return balancer.Load{}, fmt.Errorf("lbhttp: probe %s: %w", b.ID(), err)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return balancer.Load{}, fmt.Errorf("lbhttp: probe: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096)) // so the connection is kept
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return balancer.Load{}, fmt.Errorf("lbhttp: probe %s: status %d", b.ID(), resp.StatusCode)
	}
	l, err := LoadOf(resp.Header)
	if err != nil {
		return balancer.Load{}, fmt.Errorf("lbhttp: probe %s: %w", b.ID(), err)
	}
	if _, ok := l.Metric(balancer.MetricInFlight); !ok {
		return balancer.Load{}, fmt.Errorf("lbhttp: probe %s: %w", b.ID(), errNoInFlight)
	}
	return l, nil
}
