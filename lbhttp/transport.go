package lbhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// DefaultMaxAttempts is how many backends a request is tried on when
// Config.MaxAttempts is zero: the first pick and two retries.
const DefaultMaxAttempts = 3

// Defaults of the timeouts, for the zero fields of Config. None comes near
// a healthy backend of the study lbkit grew out of (answers in 50 to 500
// ms); each bounds what a stalled one costs.
const (
	// DefaultAttemptTimeout is ten times the slowest of those backends,
	// and a third of DefaultRequestTimeout, so that the three attempts of
	// DefaultMaxAttempts fit in it: Envoy's per_try_timeout, which falls
	// back to the route's 15 s when unset, and HAProxy's timeout server,
	// which has no default and which its documentation sets in seconds.
	DefaultAttemptTimeout = 5 * time.Second
	// DefaultRequestTimeout is Envoy's route timeout.
	DefaultRequestTimeout = 15 * time.Second
	// DefaultIdleTimeout is nginx's proxy_read_timeout: the longest a
	// backend may leave a reader of its response waiting.
	DefaultIdleTimeout = 60 * time.Second
)

// DefaultHoldBytes is how much of a response the Transport holds by
// default (Config.HoldBytes): 64 KiB, as much as HTTP/2 lets a stream
// send before its receiver grants more (RFC 9113's initial flow-control
// window, 65,535 bytes), and what nginx's default proxy_buffers (8 × 8k)
// keep in memory for a response on 64-bit platforms.
const DefaultHoldBytes = 64 << 10

// MaxHoldBytes is the largest Config.HoldBytes NewTransport accepts: a
// held response keeps a buffer this large until its held part is read,
// and one per response in flight is the proxy's memory.
const MaxHoldBytes = 16 << 20

// DefaultMaxIdleConnsPerHost is the idle keep-alive connections NewBase
// keeps per backend. Go's default is 2: a proxy with more than two
// requests in flight to a backend closes every connection beyond the
// second as soon as its response is read, and opens a new one for the
// next request, paying a TCP handshake per request and leaving a socket
// in TIME_WAIT each time; under sustained load those can use up the
// proxy's local ports.
const DefaultMaxIdleConnsPerHost = 256

// Config configures a Transport and NewProxy. The zero value is ready to
// use: every field says what its zero value means.
type Config struct {
	// Base sends each attempt to the picked backend. Nil: NewBase().
	Base http.RoundTripper

	// Feedback gets Done for every backend picked. Nil: the picker
	// itself, if it implements balancer.Feedback (every lbkit picker that
	// learns does, and so does health.Balancer); set it to put a decorator
	// (metrics) between the transport and the picker.
	Feedback balancer.Feedback

	// Key returns the affinity key of a request. For a Transport it is
	// called with the request passed to RoundTrip, when that request's
	// context carries no key from WithKey; nil means the key is "". For
	// NewProxy it is called with the incoming request, in the proxy's
	// Rewrite; nil means ClientIP(TrustedProxies...).
	Key KeyFunc

	// TrustedProxies are the peers whose X-Forwarded-For header NewProxy
	// believes: for the default Key, and to forward the header's earlier
	// hops to the backends. Nil: none, and the proxy sends only the
	// immediate peer's address in X-Forwarded-For. Transport ignores it.
	TrustedProxies []netip.Prefix

	// Classify says whether a response counts as a failure, for the
	// picker's feedback and for health's passive checks: it returns nil
	// for a success and an error describing the failure otherwise. The
	// response is still returned to the caller either way; Classify must
	// not read or close its body. Nil: DefaultClassify, which counts every
	// 5xx as a failure.
	Classify func(*http.Response) error

	// MaxAttempts bounds how many backends one request is tried on,
	// counting the first and any hedge. Zero: DefaultMaxAttempts. One: no
	// retries and no hedges.
	MaxAttempts int

	// AttemptTimeout bounds each attempt, from the moment it is sent to
	// its response headers and, for a response held (HoldBytes), to the
	// end of its held part. An attempt that reaches it is cancelled and
	// fails with ErrAttemptTimeout, a failure of that backend (a gateway
	// timeout): health counts it towards an ejection, lrt takes it as a
	// latency sample, and an idempotent request is tried again on another
	// backend. Zero: DefaultAttemptTimeout (5 s). Negative: none.
	AttemptTimeout time.Duration
	// RequestTimeout bounds a request from the start of RoundTrip to its
	// response headers, over every attempt and hedge: the attempt in
	// flight when it passes fails with ErrRequestTimeout, and no other
	// starts. The request's own context may end it sooner. Zero:
	// DefaultRequestTimeout (15 s). Negative: none.
	RequestTimeout time.Duration
	// IdleTimeout bounds how long a read of a response body may wait for
	// the backend to send something: past it, the read fails with an
	// error that matches ErrIdleTimeout and names the backend, a failure
	// of that backend. Only time spent waiting
	// in Read counts, not the time a slow reader takes between reads. It
	// does not apply to a 101 Switching Protocols session. Zero:
	// DefaultIdleTimeout (60 s). Negative: none.
	IdleTimeout time.Duration

	// HoldBytes is how much of a response the Transport holds, for a
	// request that may be sent twice (see the package documentation,
	// "Retries"), before it returns the response: it reads the first
	// HoldBytes of the body, or the whole body when that is shorter,
	// within the attempt timeout, so that a backend that stalls or breaks
	// off inside it fails the attempt, as a stall before the headers
	// does, and the request goes on to another backend. Past it the
	// response is the caller's: IdleTimeout applies, and a stall fails
	// the request. A response is not held when neither AttemptTimeout
	// nor RequestTimeout is on, when it has no body, is a 101 Switching
	// Protocols or will be retried (RetryOn), when its Content-Type is
	// text/event-stream or it carries X-Accel-Buffering: no (the header
	// by which a backend asks nginx not to buffer it), or when the
	// request's Accept asks for text/event-stream. Turn it off (or set it
	// small) where a healthy backend sends its headers and then its body
	// a little at a time, more slowly than HoldBytes per attempt timeout:
	// long polls that answer at once with their headers, streams of
	// events under another content type (a watch API, NDJSON, gRPC-Web).
	// They would fail as stalls. Each held response keeps a buffer of
	// HoldBytes, from a pool, until its held part has been read. Zero:
	// DefaultHoldBytes (64 KiB). Negative: off. At most MaxHoldBytes.
	HoldBytes int

	// Budget bounds the retries and hedges: when it says no, a request
	// fails with its last error at once rather than adding load to
	// backends that are already failing. Share one Budget between
	// Transports to give them one limit. Nil: a Budget of the Transport's
	// own with the defaults of BudgetConfig (20% of requests plus 10
	// retries a second, over 10 s), unless NoBudget is set.
	Budget *Budget
	// NoBudget turns the budget off: MaxAttempts alone bounds retries and
	// hedges.
	NoBudget bool
	// RetryOn says whether a response is worth trying again on another
	// backend, for a request that may be sent twice (see the package
	// documentation); its body is then closed and its attempt reported
	// as Classify judged it. It must not read or close the body. Nil:
	// DefaultRetryOn, a 503 Service Unavailable.
	RetryOn func(*http.Response) bool

	// HedgeAfter, when positive, turns hedging on: a request that may be
	// sent twice and has not had its response headers this long after its
	// first attempt started gets a second attempt on another backend, and
	// the first usable answer wins. With HedgePercentile set, it is the
	// least delay instead. Zero: no hedging unless HedgePercentile is set.
	HedgeAfter time.Duration
	// HedgePercentile, when positive, turns hedging on with a delay that
	// follows the backends: that percentile of the latencies to response
	// headers of recent attempts (95: "The Tail at Scale"), and no hedge
	// until PercentileMinSamples attempts have answered. It must be below
	// 100. Zero: the fixed HedgeAfter, if set.
	HedgePercentile float64

	// Scheme is the scheme NewProxy sends to backends with, "http" or
	// "https". Empty: "http". A Transport keeps the request's scheme and
	// uses "http" when it has none.
	Scheme string

	// H2C sends to the backends over HTTP/2 rather than HTTP/1.1: without
	// TLS for the http scheme (h2c with prior knowledge, RFC 9113 section
	// 3.3), and over TLS only for https. Every backend must speak it; each
	// then gets one connection, or a few, carrying many requests at once
	// instead of one connection per request in flight. It sets the
	// Protocols of the default base (UnencryptedHTTP2 and HTTP2, not
	// HTTP1), and cannot be combined with Base: set your own base's
	// Protocols instead. False: HTTP/1.1 for http; https negotiates
	// HTTP/2 when the backend offers it.
	H2C bool

	// ErrorLog is where NewProxy's ErrorHandler logs failed requests. Nil:
	// slog.Default().
	ErrorLog *slog.Logger

	// ForwardProbes makes NewProxy forward requests for ProbePath to the
	// backends like any other. False: NewProxy answers them itself, 404
	// Not Found, and picks no backend: a backend's Reporter answers its
	// probes there with its requests in flight and its latency, which
	// are the proxy's to know, not its clients'. Transport ignores it.
	ForwardProbes bool
	// ProbePath is the path the backends' Reporters answer probes on
	// (ReporterConfig.ProbePath), which NewProxy does not forward unless
	// ForwardProbes is set. It is compared with the request's decoded
	// path, as the backend's server decodes it. It must start with "/".
	// Empty: DefaultProbePath.
	ProbePath string
	// RouteHeader names the request header whose value is the request's
	// balancer.Request.Route: the set of backends it asks for, by label
	// value, when the picker is a route.Balancer ("X-Canary: v2" reaches
	// the backends labelled v2). A route set with WithRoute goes first. It
	// is forwarded to the backends as it came. Empty: off, and only
	// WithRoute sets a Route. Anyone who can send the header chooses the
	// set: strip it at your edge, or set the Route with WithRoute from
	// your own rules, where clients must not.
	RouteHeader string

	// Sticky turns on sticky sessions by a cookie NewProxy inserts (see
	// StickyConfig and the package documentation, "Sticky sessions"). It
	// needs a sticky.Balancer in the picker's stack, inside health.
	// Nil: off. Transport ignores it.
	Sticky *StickyConfig

	// ForwardLoadReports makes NewProxy pass the backends' load reports
	// (the LoadHeader and LoadHeaderBin response headers) on to its
	// clients. False: the Transport reads them, for the picker's Done,
	// and removes them from the response. Transport ignores it.
	ForwardLoadReports bool
}

// StatusError is the error DefaultClassify reports for a 5xx response.
type StatusError struct {
	Code int // the HTTP status code, 500 to 599
}

// Error reports the status, as "lbhttp: backend answered 503 Service
// Unavailable".
func (e *StatusError) Error() string {
	return fmt.Sprintf("lbhttp: backend answered %d %s", e.Code, http.StatusText(e.Code))
}

// DefaultRetryOn is the RetryOn of a Config that sets none: it retries a
// 503 Service Unavailable, which a backend answers when it cannot take
// the request now (overloaded, starting or stopping), as gRPC retries
// UNAVAILABLE and as Envoy's retriable-status-codes and nginx's
// proxy_next_upstream http_503 can be set to.
func DefaultRetryOn(resp *http.Response) bool {
	return resp.StatusCode == http.StatusServiceUnavailable
}

// DefaultClassify counts a response with a 5xx status as a failure,
// returning a *StatusError, and any other response as a success. 4xx
// answers are the client's fault, not the backend's.
func DefaultClassify(resp *http.Response) error {
	if resp.StatusCode >= 500 && resp.StatusCode <= 599 {
		return &StatusError{Code: resp.StatusCode}
	}
	return nil
}

// NewBase returns the http.Transport a Transport sends with by default: a
// clone of http.DefaultTransport with MaxIdleConnsPerHost raised to
// DefaultMaxIdleConnsPerHost, no overall cap on idle connections (the
// per-backend cap bounds them), and no proxy from the environment
// (HTTP_PROXY is for a program's outbound traffic, not for a load
// balancer's backends). Change it and pass it as Config.Base to tune
// timeouts or TLS.
func NewBase() *http.Transport {
	var t *http.Transport
	if dt, ok := http.DefaultTransport.(*http.Transport); ok {
		t = dt.Clone()
	} else {
		t = &http.Transport{
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
	}
	t.Proxy = nil
	t.MaxIdleConns = 0
	t.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
	return t
}

// Transport is an http.RoundTripper that sends each request to a backend
// chosen by a picker, retries on another backend when that is safe, and
// reports every attempt to the picker's Feedback exactly once, when its
// response body is finished. See the package documentation for the rules.
//
// A Transport is immutable after NewTransport and safe for concurrent use.
type Transport struct {
	picker   balancer.Picker
	feedback balancer.Feedback
	base     http.RoundTripper
	key      KeyFunc
	classify func(*http.Response) error
	retryOn  func(*http.Response) bool
	attempts int
	proxied  bool // made by NewProxy: an upgraded body closes when the request's context ends

	// Behind NewProxy: the probe path answered 404 ("" when forwarded),
	// and whether load reports are removed from responses.
	probePath    string
	stripReports bool
	// sticky signs and reads the sticky cookie, behind NewProxy with
	// Config.Sticky; nil otherwise.
	sticky *stickyCodec

	routeHeader string // Config.RouteHeader, canonical; "" when off

	// linkAfter is how long an attempt runs before its guard registers
	// with the request's context (see guard): 0, at once, for a
	// Transport; proxyLinkAfter behind NewProxy.
	linkAfter time.Duration

	attemptTimeout time.Duration // 0: none (a negative Config value)
	requestTimeout time.Duration
	idleTimeout    time.Duration
	guarded        bool    // a timeout or hedging is on: attempts run under a guard
	budget         *Budget // nil: no budget
	hedgeAfter     time.Duration
	sketch         *Percentile // HedgePercentile's; nil for a fixed delay
	hedging        bool
	epoch          time.Time // nanotime's origin
	holdBytes      int       // 0: none (a negative Config value)

	heldPool sync.Pool // of *[]byte, holdBytes long: the held parts of responses

	guards sync.Pool // of *guard
}

var _ http.RoundTripper = (*Transport)(nil)

// NewTransport returns a Transport picking backends from p. The backends'
// IDs are their host:port addresses, as with balancer.Endpoint. It returns
// an error for a nil picker, and one wrapping balancer.ErrBadOption for a
// negative MaxAttempts or HedgeAfter, a HedgePercentile outside [0, 100),
// a HoldBytes above MaxHoldBytes, a Scheme other than "", "http" and
// "https", H2C with a Base, or a TrustedProxies entry that is not a valid
// prefix.
func NewTransport(p balancer.Picker, cfg Config) (*Transport, error) {
	if p == nil {
		return nil, errors.New("lbhttp: nil picker")
	}
	if cfg.MaxAttempts < 0 {
		return nil, fmt.Errorf("lbhttp: %w: MaxAttempts %d is negative", balancer.ErrBadOption, cfg.MaxAttempts)
	}
	if cfg.Scheme != "" && cfg.Scheme != "http" && cfg.Scheme != "https" {
		return nil, fmt.Errorf("lbhttp: %w: Scheme %q is neither http nor https", balancer.ErrBadOption, cfg.Scheme)
	}
	if cfg.HedgeAfter < 0 {
		return nil, fmt.Errorf("lbhttp: %w: HedgeAfter %v is negative", balancer.ErrBadOption, cfg.HedgeAfter)
	}
	if cfg.HoldBytes > MaxHoldBytes {
		return nil, fmt.Errorf("lbhttp: HoldBytes %d is above MaxHoldBytes (%d)", cfg.HoldBytes, MaxHoldBytes)
	}
	if cfg.H2C && cfg.Base != nil {
		return nil, fmt.Errorf("lbhttp: %w: H2C sets the default base's protocols; with a Base of your own, set its Protocols", balancer.ErrBadOption)
	}
	if cfg.RouteHeader != "" && !validToken(cfg.RouteHeader) {
		return nil, fmt.Errorf("lbhttp: %w: RouteHeader %q is not a header name", balancer.ErrBadOption, cfg.RouteHeader)
	}
	for i, p := range cfg.TrustedProxies {
		if !p.IsValid() {
			return nil, fmt.Errorf("lbhttp: %w: TrustedProxies[%d] is not a valid prefix", balancer.ErrBadOption, i)
		}
	}
	t := &Transport{
		picker:         p,
		feedback:       cfg.Feedback,
		base:           cfg.Base,
		key:            cfg.Key,
		classify:       cfg.Classify,
		retryOn:        cfg.RetryOn,
		attempts:       cfg.MaxAttempts,
		attemptTimeout: timeout(cfg.AttemptTimeout, DefaultAttemptTimeout),
		requestTimeout: timeout(cfg.RequestTimeout, DefaultRequestTimeout),
		idleTimeout:    timeout(cfg.IdleTimeout, DefaultIdleTimeout),
		budget:         cfg.Budget,
		hedgeAfter:     cfg.HedgeAfter,
		epoch:          time.Now(),
	}
	if cfg.RouteHeader != "" {
		t.routeHeader = textproto.CanonicalMIMEHeaderKey(cfg.RouteHeader)
	}
	switch {
	case cfg.HoldBytes == 0:
		t.holdBytes = DefaultHoldBytes
	case cfg.HoldBytes > 0:
		t.holdBytes = cfg.HoldBytes
	}
	if cfg.HedgePercentile != 0 {
		var err error
		if t.sketch, err = NewPercentile(cfg.HedgePercentile); err != nil {
			return nil, fmt.Errorf("lbhttp: %w: HedgePercentile %v is not between 0 and 100", balancer.ErrBadOption, cfg.HedgePercentile)
		}
	}
	if cfg.NoBudget {
		t.budget = nil
	} else if t.budget == nil {
		t.budget, _ = NewBudget(BudgetConfig{}) // the defaults are valid
	}
	if t.retryOn == nil {
		t.retryOn = DefaultRetryOn
	}
	if t.feedback == nil {
		if fb, ok := p.(balancer.Feedback); ok {
			t.feedback = fb
		} else {
			t.feedback = nopFeedback{}
		}
	}
	if t.base == nil {
		b := NewBase()
		if cfg.H2C {
			b.Protocols = new(http.Protocols)
			b.Protocols.SetUnencryptedHTTP2(true)
			b.Protocols.SetHTTP2(true)
		}
		t.base = b
	}
	if t.classify == nil {
		t.classify = DefaultClassify
	}
	if t.attempts == 0 {
		t.attempts = DefaultMaxAttempts
	}
	t.hedging = (t.hedgeAfter > 0 || t.sketch != nil) && t.attempts > 1
	t.guarded = t.attemptTimeout > 0 || t.requestTimeout > 0 || t.idleTimeout > 0 || t.hedging
	return t, nil
}

// timeout returns the timeout a Config field asks for: def for zero, none
// (0) for a negative value.
func timeout(v, def time.Duration) time.Duration {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

type nopFeedback struct{}

func (nopFeedback) Done(balancer.Backend, balancer.Result) {}

// attempt is everything one try of a request needs, allocated together so
// that a try costs one allocation: the shallow copy of the request sent to
// the backend, its URL (the request's, with the backend's address as
// host), the context it is sent with when a guard bounds it, and the
// wrapper of its response body.
type attempt struct {
	req  http.Request
	url  url.URL
	ctx  attemptCtx
	body upgradeBody
	hold bool // the response may be held (Config.HoldBytes)
}

// RoundTrip sends req to a picked backend and returns its response, or
// the error of the last attempt. It does not modify req. The request's
// URL keeps its scheme ("http" if empty), path and query; its host is
// replaced by the backend's ID. The Host header stays req.Host when set.
//
// When Pick fails on the first attempt, the error wraps it (so
// errors.Is(err, balancer.ErrNoBackend) reports an empty set).
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, errors.New("lbhttp: nil Request.URL")
	}
	if t.probePath != "" && req.URL.Path == t.probePath {
		return notFound(req), nil
	}
	ctx := req.Context()
	kc := keyContextOf(ctx)
	var base balancer.Request // what every attempt's Pick asks
	switch {
	case kc != nil:
		base.Key = kc.key
	case t.key != nil:
		base.Key = t.key(req)
	}
	base.Route = t.routeOf(ctx, req.Header)
	var prefer string // the first attempt's only: a retry moves on
	if kc != nil {
		prefer = kc.prefer
	}
	hasBody := req.Body != nil && req.Body != http.NoBody
	// A body that cannot be fetched again (no GetBody) is held back from
	// the base transport's Close, so that a connection refused before a
	// byte of it was read can still send it to another backend.
	var held *heldBody
	if hasBody && req.GetBody == nil {
		held = &heldBody{rc: req.Body}
		defer held.release()
	}
	idempotent := isIdempotent(req)
	// Sent twice if need be: a retry after the backend saw the request,
	// or a hedge.
	twice := idempotent && held == nil
	hedge := t.hedging && twice && upgradeType(req.Header) == ""
	hold := twice && t.holdBytes > 0 && !asksStream(req.Header)

	now := time.Now()
	if t.budget != nil {
		t.budget.Request(now)
	}
	var deadline time.Time
	if t.requestTimeout > 0 {
		deadline = now.Add(t.requestTimeout)
	}
	var lastErr error
	avoid := ""
	for n := 0; n < t.attempts; {
		if n > 0 {
			now = time.Now()
		}
		pr := base
		pr.Attempt, pr.Avoid = n, avoid
		if n == 0 {
			pr.Prefer = prefer
		}
		b, err := t.picker.Pick(pr)
		if err == nil && b == nil {
			err = balancer.ErrNoBackend // a picker breaking its contract
		}
		if err != nil {
			if n == 0 {
				// The body was never handed to a base transport, which
				// would have closed it: the RoundTripper contract is
				// ours to keep.
				if hasBody && held == nil {
					req.Body.Close() // a held body is closed by release
				}
				return nil, fmt.Errorf("lbhttp: %w", err)
			}
			break
		}
		var spare *attempt
		if n == 0 {
			spare = kc.takeSpare()
		}
		a, err := t.attempt(req, b, n, held, spare)
		if err != nil {
			t.feedback.Done(b, balancer.Result{Err: balancer.ErrAbandoned}) // never sent
			return nil, err
		}
		a.hold = hold
		var resp *http.Response
		if hedge && n+1 < t.attempts {
			var tried int
			resp, b, tried, err = t.race(ctx, req, base, n, b, a, now, deadline)
			n += tried
		} else {
			var g *guard
			if t.guarded {
				g = t.newGuard()
			}
			resp, err = t.settle(ctx, t.launch(ctx, b, a, g, now, deadline))
			n++
		}
		if err != nil {
			lastErr = err
			if !t.retryable(err, idempotent, held) || !t.again(ctx, n, deadline) {
				break
			}
			avoid = b.ID()
			continue
		}
		if twice && t.retryOn(resp) && t.again(ctx, n, deadline) {
			// A backend that could not take the request now: another
			// may. Closing the body reports the attempt.
			resp.Body.Close()
			lastErr = fmt.Errorf("lbhttp: backend %s answered %d %s", b.ID(), resp.StatusCode, http.StatusText(resp.StatusCode))
			avoid = b.ID()
			continue
		}
		if t.sticky != nil && kc != nil && b.ID() != prefer {
			// A new session, or one whose backend could not take it:
			// pinned to the backend that answered.
			if line := t.sticky.setCookie(b.ID()); line != "" {
				if resp.Header == nil {
					resp.Header = http.Header{} // a base breaking its contract
				}
				resp.Header.Add("Set-Cookie", line)
			}
		}
		return resp, nil
	}
	return nil, lastErr
}

// again reports whether attempt n (counting from 0) may start: one is
// left, the caller is still waiting, the request timeout has not passed,
// and the budget allows it, which then counts it.
func (t *Transport) again(ctx context.Context, n int, deadline time.Time) bool {
	if n >= t.attempts || ctx.Err() != nil {
		return false
	}
	now := time.Now()
	if !deadline.IsZero() && !now.Before(deadline) {
		return false
	}
	return t.budget == nil || t.budget.Retry(now)
}

// attempt builds the n-th attempt of req, to backend b, in spare if not
// nil (a zero attempt NewProxy's Rewrite allocated with the key) or in a
// new block: the request's copy, its URL with b's address, and its body:
// the held one, the request's own for the first attempt, a fresh copy from
// GetBody for the others.
func (t *Transport) attempt(req *http.Request, b balancer.Backend, n int, held *heldBody, spare *attempt) (*attempt, error) {
	a := spare
	if a == nil {
		a = new(attempt)
	}
	a.url = *req.URL
	if t.guarded {
		// Sent with the attempt's own context, which launch fills in.
		a.req = *req.WithContext(&a.ctx)
	} else {
		a.req = *req
	}
	a.url.Host = b.ID()
	if a.url.Scheme == "" {
		a.url.Scheme = "http"
	}
	a.req.URL = &a.url
	switch {
	case held != nil:
		// A retry only follows an attempt that never read the body
		// and whose Close came back synchronously with its error:
		// the hold starts afresh.
		held.state.Store(heldOpen)
		a.req.Body = held
		held.sent = true
	case n > 0 && req.Body != nil && req.Body != http.NoBody:
		body, err := req.GetBody()
		if err != nil {
			return nil, fmt.Errorf("lbhttp: replaying the request body: %w", err)
		}
		a.req.Body = body
	}
	return a, nil
}

// answer is an attempt that has been sent and has its response headers,
// or its error, but has not yet been settled: no Done reported, its body
// not wrapped.
type answer struct {
	b     balancer.Backend
	a     *attempt
	g     *guard // nil when no guard bounds the attempt
	start time.Time
	resp  *http.Response
	fail  error // Classify's verdict on resp
	err   error

	// The held start of resp's body, if it was held: the buffer (from
	// Transport.heldPool), how much of it is the body's, and whether that is
	// the whole body.
	held  *[]byte
	heldN int
	whole bool
}

// drop closes ans's response unread, and puts back its held part's
// buffer, which nothing else has.
func (t *Transport) drop(ans *answer) {
	ans.resp.Body.Close()
	if ans.held != nil {
		t.heldPool.Put(ans.held)
		ans.held = nil
	}
}

// launch sends attempt a to backend b, under guard g if not nil: the
// attempt timeout, or what is left before deadline if that is sooner,
// and the end of ctx cancel it. An attempt its guard ended gets the
// guard's error, whatever the base transport returned.
func (t *Transport) launch(ctx context.Context, b balancer.Backend, a *attempt, g *guard, start, deadline time.Time) answer {
	ans := answer{b: b, a: a, g: g, start: start}
	if g != nil {
		d, why := t.attemptTimeout, int32(endAttempt)
		if !deadline.IsZero() {
			if left := deadline.Sub(start); d <= 0 || left < d {
				d, why = max(left, 1), endRequest
			}
		}
		g.start(ctx, start, d, why)
		a.ctx = attemptCtx{own: g.own, caller: ctx} // a.req's context since attempt made it
		if d > 0 {
			a.ctx.deadline = start.Add(d)
		}
	}
	ans.resp, ans.fail, ans.err = t.send(b, &a.req)
	if g == nil {
		return ans
	}
	if ans.err == nil && a.hold && g.armed && t.holds(ans.resp, a.req.Method) {
		// The header timer still runs: a stall inside the held part ends
		// the attempt as a stall before the headers would.
		t.hold(&ans)
	}
	if ans.err == nil && !g.headers() {
		// The guard's timer fired as the headers came, or something else
		// ended the attempt: the end stands, and the body it cut off is
		// of no use. The timer's function may not have run yet: ending
		// the attempt here makes its end the one that counts.
		t.drop(&ans)
		ans.resp, ans.fail = nil, nil
		g.end(g.first.Load())
		if ans.err = g.cause(); ans.err == nil {
			ans.err = context.Cause(ctx) // the caller ended it
		}
	} else if ans.err != nil {
		if c := g.cause(); c != nil {
			ans.err = c
		}
	}
	if t.sketch != nil {
		t.observe(ans)
	}
	return ans
}

// settle reports ans to the feedback, at once for an attempt that got no
// response, a 101 Switching Protocols it refuses, or a response without a
// body, and otherwise arranges for its body to report when it ends; and it
// releases the attempt's guard once it has no more use. It returns the
// response for the caller, or the attempt's error.
func (t *Transport) settle(ctx context.Context, ans answer) (*http.Response, error) {
	b, a, g, start := ans.b, ans.a, ans.g, ans.start
	if ans.err != nil {
		t.feedback.Done(b, t.failure(ctx, g, ans.err, time.Since(start)))
		g.release()
		return nil, ans.err
	}
	resp, fail := ans.resp, ans.fail
	var load *balancer.Load
	if !noBody(resp, a.req.Method) && resp.StatusCode != http.StatusSwitchingProtocols {
		load = reportOf(resp.Header) // held until the body ends
	}
	if t.stripReports {
		// Read (for a response without a body, below), then kept from
		// the client.
		defer delete(resp.Header, LoadHeader)
		defer delete(resp.Header, LoadHeaderBin)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// The guard has no more to do: the connection now belongs to
		// whoever reads the body.
		g.release()
		if err := checkUpgrade(&a.req, resp); err != nil {
			// ReverseProxy would drop this response without closing
			// it: its connection and its Done would be lost.
			resp.Body.Close()
			t.feedback.Done(b, balancer.Result{Latency: time.Since(start), Err: err})
			return nil, err
		}
		// An upgraded connection (WebSocket): ReverseProxy needs the
		// body to be writable, and its lifetime is a session's, not a
		// latency: Result{} at Close.
		u := &a.body
		u.respBody = respBody{rc: resp.Body, t: t, b: b, ctx: ctx, upgraded: true}
		if t.proxied {
			// ReverseProxy returns without closing the body when the
			// client's connection cannot be hijacked; the end of the
			// incoming request closes it then.
			u.stop = context.AfterFunc(ctx, func() { _ = u.shut() })
		}
		resp.Body = u
		return resp, nil
	}
	if noBody(resp, a.req.Method) {
		// Nothing more will come, and callers close such a body unread:
		// the attempt is over.
		t.feedback.Done(b, balancer.Result{Latency: time.Since(start), Err: fail, Load: loadOf(resp.Header)})
		g.release()
		return resp, nil
	}
	rb := &a.body.respBody
	*rb = respBody{rc: resp.Body, t: t, b: b, ctx: ctx, start: start, fail: fail, load: load, g: g,
		held: ans.held, heldN: ans.heldN, whole: ans.whole}
	if g != nil && t.idleTimeout > 0 && !ans.whole {
		g.stream(rb, t.idleTimeout)
	}
	resp.Body = rb
	return resp, nil
}

// notFound is NewProxy's answer to a request for the backends' probe
// path, as http.NotFound writes it. It closes the request's body, as a
// RoundTripper must.
func notFound(req *http.Request) *http.Response {
	if req.Body != nil {
		req.Body.Close()
	}
	const body = "404 page not found\n"
	return &http.Response{
		Status:     "404 Not Found",
		StatusCode: http.StatusNotFound,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header: http.Header{
			"Content-Type":           {"text/plain; charset=utf-8"},
			"X-Content-Type-Options": {"nosniff"},
		},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// observe feeds the hedge delay's Percentile with ans's latency to its
// response headers, when it says how long backends take: a usable
// answer, or an attempt still waiting when it timed out or another
// attempt beat it (its latency is at least that: leaving it out would
// pull the percentile down, and hedge more).
func (t *Transport) observe(ans answer) {
	switch {
	case ans.err == nil && ans.fail == nil,
		errors.Is(ans.err, ErrAttemptTimeout), errors.Is(ans.err, ErrRequestTimeout), ans.err == errHedgeLost:
		t.sketch.Observe(time.Since(ans.start))
	}
}

// holds reports whether resp, the answer to a request with method that
// may be held, is one to hold: it has a body, is neither an upgrade nor
// a response RetryOn will retry, and does not say it streams.
func (t *Transport) holds(resp *http.Response, method string) bool {
	if resp.ContentLength == 0 || resp.StatusCode == http.StatusSwitchingProtocols || noBody(resp, method) {
		return false
	}
	h := resp.Header
	if v := h["X-Accel-Buffering"]; len(v) > 0 && strings.EqualFold(strings.TrimSpace(v[0]), "no") {
		return false
	}
	if v := h["Content-Type"]; len(v) > 0 && isEventStream(v[0]) {
		return false
	}
	return !t.retryOn(resp)
}

// asksStream reports whether a request's Accept header asks for
// server-sent events.
func asksStream(h http.Header) bool {
	for _, v := range h["Accept"] {
		for tok := range strings.SplitSeq(v, ",") {
			if isEventStream(tok) {
				return true
			}
		}
	}
	return false
}

// isEventStream reports whether a media type, with or without
// parameters, is text/event-stream.
func isEventStream(mt string) bool {
	mt = strings.TrimLeft(mt, " \t")
	const es = "text/event-stream"
	if len(mt) < len(es) || !strings.EqualFold(mt[:len(es)], es) {
		return false
	}
	rest := mt[len(es):]
	return rest == "" || rest[0] == ';' || rest[0] == ' ' || rest[0] == '\t'
}

// hold reads the start of ans's response body, up to holdBytes or its
// Content-Length, into a buffer from the pool. If the body ends there, it
// is whole. If the read fails, the attempt fails with its error (the
// guard's, when the guard ended it): the response is closed and the
// buffer put back.
func (t *Transport) hold(ans *answer) {
	want := t.holdBytes
	if cl := ans.resp.ContentLength; cl > 0 && cl < int64(want) {
		want = int(cl)
	}
	buf, _ := t.heldPool.Get().(*[]byte)
	if buf == nil {
		b := make([]byte, t.holdBytes)
		buf = &b
	}
	p := (*buf)[:want]
	n := 0
	var err error
	for n < want && err == nil {
		var m int
		m, err = ans.resp.Body.Read(p[n:])
		n += m
	}
	ans.held, ans.heldN = buf, n
	switch err {
	case nil:
	case io.EOF:
		ans.whole = true
	default:
		t.drop(ans)
		ans.resp, ans.fail, ans.err = nil, nil, err
	}
}

// errPanicked is the Result.Err of an attempt whose base transport or
// Classify panicked. It wraps balancer.ErrAbandoned: a panic is a bug in
// the program, not news of the backend, and counting it a failure would
// let a Classify bug eject every backend.
var errPanicked = fmt.Errorf("lbhttp: the base transport or Classify panicked: %w", balancer.ErrAbandoned)

// errNoResponse is the error of an attempt whose base transport returned
// neither a response nor an error, against the RoundTripper contract.
var errNoResponse = errors.New("lbhttp: base RoundTrip returned no response and no error")

// send runs the base transport and Classify for one attempt to b. If
// either panics (or calls runtime.Goexit), send reports the attempt to the
// feedback with errPanicked and closes the response body, if there is
// one, before the panic goes on, so that the pick still gets its Done and
// the connection is not left open. A nil Body is replaced by http.NoBody.
func (t *Transport) send(b balancer.Backend, req *http.Request) (resp *http.Response, fail, err error) {
	finished := false
	defer func() {
		if finished {
			return
		}
		if resp != nil && resp.Body != nil {
			resp.Body.Close()
		}
		t.feedback.Done(b, balancer.Result{Err: errPanicked})
	}()
	resp, err = t.base.RoundTrip(req)
	switch {
	case err != nil:
		resp = nil
	case resp == nil:
		err = errNoResponse
	default:
		if resp.Body == nil {
			resp.Body = http.NoBody // not allowed by the contract, but cheap to survive
		}
		fail = t.classify(resp)
	}
	finished = true
	return resp, fail, err
}

// noBody reports whether resp, the answer to a request with method, has no
// body to wait for: http.NoBody, which http.Transport returns for HEAD,
// 204, 304 and Content-Length: 0, or a HEAD, 204 or 304 answer whatever
// the base put in Body.
func noBody(resp *http.Response, method string) bool {
	return resp.Body == http.NoBody || method == http.MethodHead ||
		resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
}

// checkUpgrade returns an error unless resp, a 101 Switching Protocols
// answer to req, is one ReverseProxy carries: to the protocol req asked
// for (compared without regard to case), named in printable ASCII, with a
// body that can be written. RFC 9110 section 7.8: a server switches only
// to a protocol the client listed.
func checkUpgrade(req *http.Request, resp *http.Response) error {
	asked, given := upgradeType(req.Header), upgradeType(resp.Header)
	switch {
	case asked == "":
		return fmt.Errorf("lbhttp: backend switched protocols (to %q) when the request asked for no upgrade", given)
	case !printable(asked) || !printable(given):
		return fmt.Errorf("lbhttp: backend switched to protocol %q, not printable ASCII", given)
	case !strings.EqualFold(asked, given):
		return fmt.Errorf("lbhttp: backend switched to protocol %q when %q was requested", given, asked)
	}
	if _, ok := resp.Body.(io.Writer); !ok {
		return errors.New("lbhttp: backend switched protocols with a response body that cannot be written")
	}
	return nil
}

// upgradeType returns the protocol h's Upgrade header names when its
// Connection header lists "upgrade", and "" otherwise, as ReverseProxy
// reads it.
func upgradeType(h http.Header) string {
	for _, v := range h["Connection"] {
		for tok := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.Trim(tok, " \t"), "upgrade") {
				return h.Get("Upgrade")
			}
		}
	}
	return ""
}

// printable reports whether s is printable ASCII.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// CloseIdleConnections closes the base transport's idle connections, if
// it has a CloseIdleConnections method (http.Transport does), so that
// http.Client.CloseIdleConnections reaches them.
func (t *Transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// retryable reports whether an attempt that failed with err may be sent
// again to another backend: always when nothing was sent (the connection
// was refused, or could not be made), as long as a held body was not
// touched; otherwise only for idempotent requests whose body can be sent
// again.
func (t *Transport) retryable(err error, idempotent bool, held *heldBody) bool {
	if held != nil && held.touched.Load() {
		return false
	}
	if notSent(err) {
		return true
	}
	return idempotent && held == nil
}

// notSent reports whether err means the request never left: a refused
// connection, or any failure to dial (no route, a dial timeout, a DNS
// failure for a backend named by host).
func notSent(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// isIdempotent reports whether a request may be sent twice: its method is
// idempotent by RFC 9110 section 9.2.2 (GET, HEAD, OPTIONS, TRACE, PUT,
// DELETE), or it carries an Idempotency-Key or X-Idempotency-Key header, as
// net/http's own retry rule accepts.
func isIdempotent(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	_, k1 := req.Header["Idempotency-Key"]
	_, k2 := req.Header["X-Idempotency-Key"]
	return k1 || k2
}

// failure is the Result of an attempt, bounded by guard g if not nil,
// that failed with err after d and got no response:
//
//   - one its guard ended: a timeout is a failure with latency d, a lost
//     race is abandoned unless it had outlived the attempt timeout;
//   - one the caller gave up on (context.Canceled, or another error once
//     the caller's context is cancelled) is abandoned, unless the caller
//     had waited longer than the attempt timeout: then it was as slow as
//     a timeout, and counts as one;
//   - anything else, a request deadline of the caller's included, is a
//     failure with latency d.
func (t *Transport) failure(ctx context.Context, g *guard, err error, d time.Duration) balancer.Result {
	if g != nil {
		switch c := g.cause(); c {
		case nil:
		case errHedgeLost:
			return t.abandoned(d, c)
		default:
			return balancer.Result{Latency: d, Err: c}
		}
	}
	switch {
	case errors.Is(err, context.Canceled):
		return t.abandoned(d, err)
	case errors.Is(ctx.Err(), context.Canceled):
		// The caller's cancellation surfaced as another error ("net/http:
		// request canceled"): still not the backend's fault.
		return t.abandoned(d, balancer.ErrAbandoned)
	}
	return balancer.Result{Latency: d, Err: err}
}

// abandoned is the Result of an attempt given up on after d, by its
// caller or by a race it lost: abandoned with err, unless it had waited
// the attempt timeout or longer, which makes it as slow as a timeout and
// a failure of its backend with that latency.
func (t *Transport) abandoned(d time.Duration, err error) balancer.Result {
	if t.attemptTimeout > 0 && d >= t.attemptTimeout {
		return balancer.Result{Latency: d, Err: ErrAttemptTimeout}
	}
	return balancer.Result{Err: err}
}

// errClosedEarly marks a response body closed before its end.
var errClosedEarly = errors.New("lbhttp: body closed before EOF")

// respBody wraps a response body and calls Done once, when the body ends:
// at EOF, at a read error, or at Close, whichever comes first.
//
// Its fields are set before the body is handed out and read-only after,
// except done.
type respBody struct {
	rc       io.ReadCloser
	t        *Transport
	b        balancer.Backend
	ctx      context.Context
	start    time.Time
	fail     error          // Classify's verdict on the status, nil for a success
	load     *balancer.Load // the backend's report (see LoadOf), or nil
	g        *guard         // the attempt's, until finish releases it; nil if none
	upgraded bool
	done     atomic.Bool
	waiting  atomic.Int64 // the Transport's nanotime when the Read in progress began; 0 if none

	// The held start of the body, until Read has returned it all: see
	// answer. Read's goroutine only, once the body is handed out.
	held   *[]byte
	heldN  int
	heldAt int  // how much of it Read has returned
	whole  bool // the held part is the whole body
}

func (r *respBody) Read(p []byte) (int, error) {
	if r.held != nil {
		return r.readHeld(p)
	}
	if r.whole {
		return 0, io.EOF // after the held part, which was all of it
	}
	if r.g == nil {
		n, err := r.rc.Read(p)
		if err != nil {
			r.finish(err)
		}
		return n, err
	}
	r.waiting.Store(r.t.nanotime())
	n, err := r.rc.Read(p)
	r.waiting.Store(0)
	if err != nil && !r.done.Load() {
		// The guard is still this body's: if it ended the attempt,
		// its reason is the error, not the cancellation it caused.
		if c := r.g.cause(); c != nil {
			err = c
		}
		r.finish(err)
		if err == ErrIdleTimeout {
			// Named, for the reader's log (ReverseProxy's says only
			// what Read returned): which backend stalled.
			err = &stallError{id: r.b.ID()}
		}
	}
	return n, err
}

// readHeld returns what is left of the held part of the body, and when
// it is all read puts its buffer back (here: Close, which may run on
// another goroutine, leaves a buffer not yet read to the garbage
// collector), and reports the end of the body if it was the whole body.
func (r *respBody) readHeld(p []byte) (int, error) {
	if r.done.Load() {
		return 0, http.ErrBodyReadAfterClose // closed before the held part was read
	}
	n := copy(p, (*r.held)[r.heldAt:r.heldN])
	r.heldAt += n
	if r.heldAt < r.heldN {
		return n, nil
	}
	r.t.heldPool.Put(r.held)
	r.held = nil
	if r.whole {
		r.finish(io.EOF)
		return n, io.EOF
	}
	return n, nil
}

// stallError is the error a reader of a body gets from Read when the
// idle timeout ended it: ErrIdleTimeout, with the backend's ID in its
// message.
type stallError struct{ id string }

func (e *stallError) Error() string   { return ErrIdleTimeout.Error() + " (backend " + e.id + ")" }
func (e *stallError) Unwrap() error   { return ErrIdleTimeout }
func (*stallError) Timeout() bool     { return true }
func (*stallError) Temporary() bool   { return true }
func (*stallError) Is(err error) bool { return err == context.DeadlineExceeded }

func (r *respBody) Close() error {
	err := r.rc.Close()
	r.finish(errClosedEarly)
	return err
}

// finish reports the attempt to the feedback, the first time only.
func (r *respBody) finish(err error) {
	if !r.done.CompareAndSwap(false, true) {
		return
	}
	var res balancer.Result
	switch {
	case r.upgraded:
		// Result{}: nothing measured, not a failure.
	case err == ErrIdleTimeout:
		res = balancer.Result{Latency: time.Since(r.start), Err: err}
	case err == io.EOF || r.fail != nil:
		// The whole body arrived, or the status already said failure.
		res = balancer.Result{Latency: time.Since(r.start), Err: r.fail}
	case err == errClosedEarly, errors.Is(err, context.Canceled), errors.Is(r.ctx.Err(), context.Canceled):
		// The caller stopped reading or gave up: nothing learned.
		res = balancer.Result{Err: balancer.ErrAbandoned}
	default:
		// The body broke off: the backend failed mid-response.
		res = balancer.Result{Latency: time.Since(r.start), Err: err}
	}
	if r.load != nil {
		res.Load = *r.load
	}
	r.t.feedback.Done(r.b, res)
	r.g.release()
}

// upgradeBody is a respBody that can also be written to, for the body of
// a 101 Switching Protocols response. It closes the base's body once,
// whether the caller closes it or, behind NewProxy, the request's context
// ends.
type upgradeBody struct {
	respBody
	stop   func() bool // cancels the context.AfterFunc closing the body; nil if none
	closed atomic.Bool
}

func (u *upgradeBody) Write(p []byte) (int, error) {
	return u.rc.(io.Writer).Write(p)
}

func (u *upgradeBody) Close() error {
	if u.stop != nil {
		u.stop()
	}
	return u.shut()
}

// shut closes the body the first time only. It does not read stop, which
// is written after the AfterFunc that calls shut is registered.
func (u *upgradeBody) shut() error {
	if !u.closed.CompareAndSwap(false, true) {
		return nil
	}
	return u.respBody.Close()
}

// heldBody is a request body the base transport may read but not close
// until the Transport is done with it: Close is deferred until release,
// and after release it closes at once. touched records whether anything
// was read, after which the body cannot be sent again.
type heldBody struct {
	rc      io.ReadCloser
	sent    bool // handed to the base at least once; RoundTrip's goroutine only
	touched atomic.Bool
	state   atomic.Int32 // heldOpen, heldCloseAsked, heldReleased
}

const (
	heldOpen       = iota // nobody asked to close yet
	heldCloseAsked        // the base closed it while held
	heldReleased          // the Transport let go: Close closes
)

func (h *heldBody) Read(p []byte) (int, error) {
	n, err := h.rc.Read(p)
	if n > 0 {
		h.touched.Store(true)
	}
	return n, err
}

func (h *heldBody) Close() error {
	if h.state.CompareAndSwap(heldOpen, heldCloseAsked) {
		return nil
	}
	if h.state.Load() == heldReleased {
		return h.rc.Close()
	}
	return nil
}

// release ends the hold: closes the body now if the base already asked
// to or never had it, or lets the base's own Close do it later.
func (h *heldBody) release() {
	if !h.sent {
		h.state.Store(heldReleased)
		h.rc.Close()
		return
	}
	if h.state.CompareAndSwap(heldOpen, heldReleased) {
		return
	}
	if h.state.CompareAndSwap(heldCloseAsked, heldReleased) {
		h.rc.Close()
	}
}
