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
	"net/url"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// DefaultMaxAttempts is how many backends a request is tried on when
// Config.MaxAttempts is zero: the first pick and two retries.
const DefaultMaxAttempts = 3

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
	// counting the first. Zero: DefaultMaxAttempts. One: no retries.
	MaxAttempts int

	// Scheme is the scheme NewProxy sends to backends with, "http" or
	// "https". Empty: "http". A Transport keeps the request's scheme and
	// uses "http" when it has none.
	Scheme string

	// ErrorLog is where NewProxy's ErrorHandler logs failed requests. Nil:
	// slog.Default().
	ErrorLog *slog.Logger
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
	attempts int
	proxied  bool // made by NewProxy: an upgraded body closes when the request's context ends
}

var _ http.RoundTripper = (*Transport)(nil)

// NewTransport returns a Transport picking backends from p. The backends'
// IDs are their host:port addresses, as with balancer.Endpoint. It returns
// an error for a nil picker, a negative MaxAttempts or a Scheme other than
// "", "http" and "https".
func NewTransport(p balancer.Picker, cfg Config) (*Transport, error) {
	if p == nil {
		return nil, errors.New("lbhttp: nil picker")
	}
	if cfg.MaxAttempts < 0 {
		return nil, fmt.Errorf("lbhttp: MaxAttempts %d is negative", cfg.MaxAttempts)
	}
	if cfg.Scheme != "" && cfg.Scheme != "http" && cfg.Scheme != "https" {
		return nil, fmt.Errorf("lbhttp: Scheme %q is neither http nor https", cfg.Scheme)
	}
	t := &Transport{
		picker:   p,
		feedback: cfg.Feedback,
		base:     cfg.Base,
		key:      cfg.Key,
		classify: cfg.Classify,
		attempts: cfg.MaxAttempts,
	}
	if t.feedback == nil {
		if fb, ok := p.(balancer.Feedback); ok {
			t.feedback = fb
		} else {
			t.feedback = nopFeedback{}
		}
	}
	if t.base == nil {
		t.base = NewBase()
	}
	if t.classify == nil {
		t.classify = DefaultClassify
	}
	if t.attempts == 0 {
		t.attempts = DefaultMaxAttempts
	}
	return t, nil
}

type nopFeedback struct{}

func (nopFeedback) Done(balancer.Backend, balancer.Result) {}

// attempt is everything one try of a request needs, allocated together so
// that a try costs one allocation: the shallow copy of the request sent to
// the backend, its URL (the request's, with the backend's address as
// host), and the wrapper of its response body.
type attempt struct {
	req  http.Request
	url  url.URL
	body upgradeBody
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
	ctx := req.Context()
	key, ok := KeyFrom(ctx)
	if !ok && t.key != nil {
		key = t.key(req)
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

	var lastErr error
	avoid := ""
	for n := 0; n < t.attempts; n++ {
		if n > 0 && ctx.Err() != nil {
			break // the caller gave up: no more attempts, lastErr stands
		}
		b, err := t.picker.Pick(balancer.Request{Key: key, Attempt: n, Avoid: avoid})
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
		a := &attempt{req: *req, url: *req.URL}
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
		case hasBody && n > 0:
			body, err := req.GetBody()
			if err != nil {
				return nil, fmt.Errorf("lbhttp: replaying the request body: %w", err)
			}
			a.req.Body = body
		}

		resp, err := t.try(ctx, b, a)
		if err != nil {
			lastErr = err
			if !t.retryable(err, idempotent, held) {
				break
			}
			avoid = b.ID()
			continue
		}
		return resp, nil
	}
	return nil, lastErr
}

// try sends attempt a to backend b and arranges its Done: at once for an
// attempt that gets no response, a 101 Switching Protocols it refuses, or
// a response without a body; otherwise when the body it returns ends. An
// error means the attempt failed and its Done is reported.
func (t *Transport) try(ctx context.Context, b balancer.Backend, a *attempt) (*http.Response, error) {
	start := time.Now()
	resp, fail, err := t.send(b, &a.req)
	if err != nil {
		t.feedback.Done(b, failure(ctx, err, time.Since(start)))
		return nil, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
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
		return resp, nil
	}
	rb := &a.body.respBody
	*rb = respBody{rc: resp.Body, t: t, b: b, ctx: ctx, start: start, fail: fail, load: reportOf(resp.Header)}
	resp.Body = rb
	return resp, nil
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

// failure is the Result of an attempt that got no response.
func failure(ctx context.Context, err error, d time.Duration) balancer.Result {
	if errors.Is(err, context.Canceled) {
		return balancer.Result{Err: err}
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		// The caller's cancellation surfaced as another error ("net/http:
		// request canceled"): still not the backend's fault.
		return balancer.Result{Err: balancer.ErrAbandoned}
	}
	return balancer.Result{Latency: d, Err: err}
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
	upgraded bool
	done     atomic.Bool
}

func (r *respBody) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	if err != nil {
		r.finish(err)
	}
	return n, err
}

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
