package lbhedge

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/grpc/lbpolicy"
	"github.com/lbkit/lbkit/lbhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Defaults of Config.
const (
	// DefaultPercentile is the percentile of recent latencies after which
	// an RPC is hedged: the 95th, as "The Tail at Scale" advises (and
	// lbhttp's HedgePercentile examples use).
	DefaultPercentile = 95
	// DefaultMaxAttempts is gRFC A6's maxAttempts, counting the first: one
	// hedge per RPC, as lbhttp sends.
	DefaultMaxAttempts = 2
	// MaxAttempts is the most Config.MaxAttempts may be: gRFC A6 caps
	// maxAttempts at 5 (and lowers a larger one to 5; lbkit refuses it).
	MaxAttempts = 5
)

// DefaultNonFatalCodes returns the codes gRFC A6's nonFatalStatusCodes
// holds when Config.NonFatalCodes is nil: UNAVAILABLE, the code of a
// server that did not take the RPC (gone, draining, refusing), which is
// what gRPC's own retries are for. A6 has no default (an empty list:
// every error is fatal); with UNAVAILABLE, an attempt refused by one
// backend sends the next hedge at once instead of failing the RPC while
// another backend could answer.
func DefaultNonFatalCodes() []codes.Code { return []codes.Code{codes.Unavailable} }

// Config configures an Interceptor. Every field's zero value means the
// documented default, except that a method to hedge must be named.
type Config struct {
	// Methods lists the full names ("/package.Service/Method") of the
	// methods that may be hedged: idempotent ones, which a server may
	// receive twice. Nothing else is hedged.
	Methods []string
	// Hedge, if not nil, reports whether method (a full name) may be
	// hedged, for methods that Methods does not list: a predicate for a
	// naming rule ("every Get"). It must be safe for concurrent use and
	// fast; it runs on every RPC Methods does not list.
	Hedge func(method string) bool

	// MaxAttempts bounds the attempts of one RPC, the first included
	// (gRFC A6 maxAttempts): a hedge goes after each delay while fewer
	// are out. Zero: DefaultMaxAttempts (2). At least 2, at most
	// MaxAttempts (5).
	MaxAttempts int
	// Percentile sets the delay: that percentile of the latencies of
	// recent attempts, kept in an lbhttp.Percentile sketch; no RPC is
	// hedged until it has lbhttp.PercentileMinSamples of them. Zero:
	// DefaultPercentile (95). Negative: a fixed delay, MinDelay (gRFC A6
	// hedgingDelay). It must be below 100.
	Percentile float64
	// MinDelay is the least delay (the floor of the percentile's), or
	// the fixed delay when Percentile is negative, where it must be
	// positive. Zero: no floor. It must not be negative.
	MinDelay time.Duration
	// MaxDelay is the longest delay (the ceiling of the percentile's), so
	// that a percentile pushed up by a slow spell still hedges. Zero:
	// none. It must not be negative, nor below MinDelay.
	MaxDelay time.Duration
	// NonFatalCodes are the codes (gRFC A6 nonFatalStatusCodes) with
	// which an attempt that fails leaves the RPC to its other attempts
	// and sends the next hedge at once; any other code, and OK, ends the
	// RPC with that answer and cancels the rest. Nil:
	// DefaultNonFatalCodes() (UNAVAILABLE). Empty, not nil: none. OK is
	// not a code to list.
	NonFatalCodes []codes.Code

	// Budget bounds the hedges: each takes a retry from it, and a hedge
	// it refuses is not sent (nor any later one of that RPC). Share one
	// Budget with lbhttp Transports, or other Interceptors, to give them
	// one limit. Every RPC of a hedged method counts as a request. The
	// retry is taken before the hedge is picked, so a hedge lbpolicy's
	// picker refuses (no endpoint but the one to avoid) has spent one:
	// the budget has no refund. Nil:
	// a Budget of the Interceptor's own with lbhttp's defaults (20% of
	// requests plus 10 a second, over 10 s, Finagle's RetryBudget),
	// unless NoBudget is set.
	Budget *lbhttp.Budget
	// NoBudget turns the budget off: MaxAttempts alone bounds hedges.
	NoBudget bool
}

// Interceptor is a unary client interceptor that hedges the RPCs of the
// methods its Config names; see the package documentation. Install its
// Unary method with grpc.WithUnaryInterceptor.
//
// An Interceptor is safe for concurrent use, and may serve several
// channels (they then share its delay and budget).
type Interceptor struct {
	// Immutable after New.
	methods  map[string]struct{}
	hedge    func(string) bool
	attempts int
	sketch   *lbhttp.Percentile // nil: the fixed minDelay
	minDelay time.Duration
	maxDelay time.Duration // 0: none
	nonFatal uint64        // a bit per code
	budget   *lbhttp.Budget

	races sync.Pool // *race, reused when no hedge was sent

	// Atomic.
	sent atomic.Int64
	wins atomic.Int64
}

// New returns an Interceptor for cfg, or an error (wrapping
// balancer.ErrBadOption) that names the field at fault: no method named,
// a method name that is not a full name, MaxAttempts out of [2, 5], a
// Percentile of 100 or more (or not a number), a negative MinDelay or
// MaxDelay, a MaxDelay below MinDelay, a fixed delay of zero, or a
// NonFatalCodes entry that is OK or not a gRPC code.
func New(cfg Config) (*Interceptor, error) {
	h := &Interceptor{
		methods:  make(map[string]struct{}, len(cfg.Methods)),
		hedge:    cfg.Hedge,
		attempts: cfg.MaxAttempts,
		minDelay: cfg.MinDelay,
		maxDelay: cfg.MaxDelay,
		budget:   cfg.Budget,
	}
	if len(cfg.Methods) == 0 && cfg.Hedge == nil {
		return nil, fmt.Errorf("lbhedge: %w: no method to hedge: name the idempotent ones in Methods or Hedge", lbk.ErrBadOption)
	}
	for _, m := range cfg.Methods {
		if !strings.HasPrefix(m, "/") || strings.Count(m, "/") != 2 || strings.HasSuffix(m, "/") {
			return nil, fmt.Errorf("lbhedge: %w: method %q is not a full method name (/package.Service/Method)", lbk.ErrBadOption, m)
		}
		h.methods[m] = struct{}{}
	}
	switch {
	case h.attempts == 0:
		h.attempts = DefaultMaxAttempts
	case h.attempts < 2 || h.attempts > MaxAttempts:
		return nil, fmt.Errorf("lbhedge: %w: MaxAttempts %d is not between 2 and %d", lbk.ErrBadOption, h.attempts, MaxAttempts)
	}
	switch {
	case cfg.MinDelay < 0:
		return nil, fmt.Errorf("lbhedge: %w: MinDelay %v is negative", lbk.ErrBadOption, cfg.MinDelay)
	case cfg.MaxDelay < 0:
		return nil, fmt.Errorf("lbhedge: %w: MaxDelay %v is negative", lbk.ErrBadOption, cfg.MaxDelay)
	case cfg.MaxDelay > 0 && cfg.MaxDelay < cfg.MinDelay:
		return nil, fmt.Errorf("lbhedge: %w: MaxDelay %v is below MinDelay %v", lbk.ErrBadOption, cfg.MaxDelay, cfg.MinDelay)
	}
	p := cfg.Percentile
	switch {
	case math.IsNaN(p) || p >= 100:
		return nil, fmt.Errorf("lbhedge: %w: Percentile %v is not below 100", lbk.ErrBadOption, p)
	case p < 0 && cfg.MinDelay == 0:
		return nil, fmt.Errorf("lbhedge: %w: a fixed delay (Percentile %v) needs a positive MinDelay", lbk.ErrBadOption, p)
	case p < 0:
	default:
		if p == 0 {
			p = DefaultPercentile
		}
		h.sketch, _ = lbhttp.NewPercentile(p) // p is in (0, 100)
	}
	nonFatal := cfg.NonFatalCodes
	if nonFatal == nil {
		nonFatal = DefaultNonFatalCodes()
	}
	for _, c := range nonFatal {
		if c == codes.OK || c > codes.Unauthenticated {
			return nil, fmt.Errorf("lbhedge: %w: NonFatalCodes holds %v, not an error code", lbk.ErrBadOption, c)
		}
		h.nonFatal |= 1 << c
	}
	if cfg.NoBudget {
		h.budget = nil
	} else if h.budget == nil {
		h.budget, _ = lbhttp.NewBudget(lbhttp.BudgetConfig{}) // the defaults are valid
	}
	h.races.New = func() any {
		r := &race{h: h}
		r.timer = time.AfterFunc(time.Hour, r.fire)
		r.timer.Stop()
		return r
	}
	return h, nil
}

// Stats counts what an Interceptor did since New.
type Stats struct {
	// Hedges is how many hedges were sent: a hedge the picker refused,
	// having no other endpoint, is not counted; one cancelled (its race
	// won) before it reached its server is.
	Hedges int64
	// Wins is how many RPCs a hedge answered (OK or a fatal code) before
	// the attempts sent earlier.
	Wins int64
}

// Stats returns the counts so far. Cost: two atomic loads.
func (h *Interceptor) Stats() Stats {
	return Stats{Hedges: h.sent.Load(), Wins: h.wins.Load()}
}

// hedged reports whether method may be hedged.
func (h *Interceptor) hedged(method string) bool {
	if _, ok := h.methods[method]; ok {
		return true
	}
	return h.hedge != nil && h.hedge(method)
}

// Delay returns how long an RPC waits now for its first attempt before a
// hedge goes, and false while the percentile has too few samples (no RPC
// is hedged then). Cost: one atomic load.
func (h *Interceptor) Delay() (time.Duration, bool) {
	if h.sketch == nil {
		return h.minDelay, true
	}
	d, ok := h.sketch.Value()
	d = max(d, h.minDelay)
	if h.maxDelay > 0 {
		d = min(d, h.maxDelay)
	}
	return d, ok
}

// nonFatalErr reports whether err has one of the non-fatal codes.
func (h *Interceptor) nonFatalErr(err error) bool {
	c := status.Code(err)
	return c < 64 && h.nonFatal&(1<<c) != 0
}

// observe feeds the sketch with an attempt's latency when it says how
// long backends take: an answer (OK, or a fatal code other than
// CANCELLED, DEADLINE_EXCEEDED included), or an attempt that lost the
// race (lost), which waited at least that long: leaving the slow ones
// out would pull the percentile down, and hedge more. A fast non-fatal
// failure says nothing of latency.
func (h *Interceptor) observe(err error, d time.Duration, lost bool) {
	if h.sketch == nil {
		return
	}
	if !lost && err != nil && (status.Code(err) == codes.Canceled || h.nonFatalErr(err)) {
		return
	}
	h.sketch.Observe(d)
}

// Unary is the grpc.UnaryClientInterceptor: it sends an RPC of a method
// that may be hedged (see Config) as a race of attempts, and any other
// RPC as it is. An RPC is sent as it is, too, while the percentile has
// too few samples, when its deadline falls before the delay ends, or
// when reply is not a protobuf message (a hedge decodes into a message of
// its own, copied into reply if it wins).
//
// The first attempt runs on the caller's goroutine. If it has no answer
// after the delay, and lbpolicy's picker has picked its endpoint, a hedge
// goes (lbpolicy.Attempt N 1, avoiding that endpoint; then up to
// MaxAttempts, one per delay, each avoiding the one before). The first answer (OK or a fatal code) is the
// RPC's; the other attempts are cancelled. A hedge that wins has its
// header, trailer and peer copied to the caller's grpc.Header,
// grpc.Trailer and grpc.Peer options; other call options reach every
// attempt (grpc.OnFinish runs for each).
func (h *Interceptor) Unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if !h.hedged(method) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	start := time.Now()
	if h.budget != nil {
		h.budget.Request(start)
	}
	delay, ok := h.Delay()
	msg, isProto := reply.(proto.Message)
	deadline, hasDeadline := ctx.Deadline()
	if !ok || !isProto || (hasDeadline && !start.Add(delay).Before(deadline)) {
		err := invoker(ctx, method, req, reply, cc, opts...)
		h.observe(err, time.Since(start), false)
		return err
	}

	r := h.races.Get().(*race)
	ctx0, cancel0 := context.WithCancel(ctx)
	defer cancel0()
	r.ctx, r.method, r.req, r.reply, r.cc, r.invoker, r.opts = ctx, method, req, msg, cc, invoker, opts
	r.kind, r.delay, r.deadline = msg.ProtoReflect().Type(), delay, deadline
	r.sent, r.outstanding, r.cancels[0] = 1, 1, cancel0
	r.timer.Reset(delay)
	err := invoker(lbpolicy.WithAttempt(ctx0, &r.att[0]), method, req, reply, cc, opts...)
	return r.finish(err, time.Since(start))
}

// race is one RPC's attempts. The first runs on the caller's goroutine;
// the timer's function (fire) sends each hedge on its own goroutine. mu
// guards the outcome: the first answer decides it and cancels the other
// attempts; done is closed then, for a caller whose own attempt failed.
// A race whose timer never fired is reused; one that fired is dropped,
// since its hedges' goroutines may still hold it.
type race struct {
	// Immutable after the pool made it.
	h     *Interceptor
	timer *time.Timer // runs fire

	// Set before the timer is armed; read-only until the race ends.
	ctx      context.Context
	method   string
	req      any
	reply    proto.Message            // the caller's, into which attempt 0 decodes
	kind     protoreflect.MessageType // reply's, read before attempt 0 starts
	cc       *grpc.ClientConn
	invoker  grpc.UnaryInvoker
	opts     []grpc.CallOption
	delay    time.Duration
	deadline time.Time // the RPC's; zero for none

	att [MaxAttempts]lbpolicy.Attempt // N and Avoid set before attempt n starts

	mu          sync.Mutex
	sent        int // attempts started, or MaxAttempts once no more may
	outstanding int // attempts started that have not reported
	decided     bool
	stopped     bool // decide stopped the timer before it fired
	fired       bool // fire ran: the race may be shared, never reused
	winner      int
	err         error
	lastErr     error // the last non-fatal failure
	lastIdx     int
	ended       [MaxAttempts]bool // attempt i has reported
	cancels     [MaxAttempts]context.CancelFunc
	replies     [MaxAttempts]proto.Message // the hedges'
	outs        [MaxAttempts]*outputs      // the hedges' call outputs
	done        chan struct{}              // made once a hedge is sent, or attempt 0 failed first
}

// finish reports attempt 0, waits for the race to be decided if need be,
// and returns the RPC's error, with the winner's reply in r.reply.
func (r *race) finish(err error, elapsed time.Duration) error {
	r.mu.Lock()
	r.report(0, err, elapsed)
	if !r.decided {
		if r.done == nil {
			r.done = make(chan struct{})
		}
		done := r.done
		r.mu.Unlock()
		<-done // every attempt reports, and all end with r.ctx
		r.mu.Lock()
	}
	winner, err := r.winner, r.err
	reuse := r.stopped && !r.fired
	var reply proto.Message
	var out *outputs
	if winner != 0 {
		reply, out = r.replies[winner], r.outs[winner]
	}
	r.mu.Unlock()
	if winner != 0 {
		if err == nil || !r.h.nonFatalErr(err) {
			r.h.wins.Add(1)
		}
		if err == nil {
			proto.Reset(r.reply)
			proto.Merge(r.reply, reply)
		}
		out.copyTo(r.opts)
	}
	if reuse {
		r.reset()
		r.h.races.Put(r)
	}
	return err
}

// report settles attempt i's answer; call it with mu held.
func (r *race) report(i int, err error, elapsed time.Duration) {
	h := r.h
	r.outstanding--
	r.ended[i] = true
	if r.decided {
		if r.ctx.Err() == nil {
			h.observe(err, elapsed, true) // a loser, cancelled
		}
		return
	}
	if err == nil || !h.nonFatalErr(err) {
		h.observe(err, elapsed, false)
		r.decide(i, err)
		return
	}
	r.lastErr, r.lastIdx = err, i
	switch {
	case r.sent < h.attempts:
		r.timer.Reset(0) // gRFC A6: after a non-fatal failure, the next hedge goes now
	case r.outstanding == 0:
		r.decide(i, err) // every attempt failed: the last failure is the RPC's
	}
}

// decide makes attempt i's answer the RPC's and cancels the others; call
// it with mu held.
func (r *race) decide(i int, err error) {
	r.decided, r.winner, r.err = true, i, err
	for j, cancel := range r.cancels[:min(r.sent, MaxAttempts)] {
		if j != i && cancel != nil {
			cancel()
		}
	}
	r.stopped = r.timer.Stop()
	if r.done != nil {
		close(r.done)
	}
}

// fire is the timer's function: it sends the next hedge, unless the race
// is decided, the RPC has ended or run out of time, or the budget says
// no (which ends the race's hedging), and arms the timer for the one
// after.
func (r *race) fire() {
	r.mu.Lock()
	if r.decided {
		r.mu.Unlock()
		return
	}
	r.fired = true
	h := r.h
	if k := r.sent; k < h.attempts && !r.ended[k-1] && r.att[k-1].Picked() == "" {
		// The attempt before is not picked yet (waiting for a READY
		// endpoint, or not under lbpolicy): a hedge would not know where
		// not to go. Look again after another delay.
		r.timer.Reset(r.delay)
		r.mu.Unlock()
		return
	}
	now := time.Now()
	if r.sent >= h.attempts || r.ctx.Err() != nil || (!r.deadline.IsZero() && !now.Before(r.deadline)) ||
		(h.budget != nil && !h.budget.Retry(now)) {
		r.sent = h.attempts // no more hedges for this RPC
		if r.outstanding == 0 {
			r.decide(r.lastIdx, r.lastErr) // a shortcut that found none to send
		}
		r.mu.Unlock()
		return
	}
	k := r.sent
	r.sent++
	r.outstanding++
	ctx, cancel := context.WithCancel(r.ctx)
	defer cancel()
	r.cancels[k] = cancel
	a := &r.att[k]
	a.N, a.Avoid, a.OnlyElsewhere = k, r.att[k-1].Picked(), true
	reply := r.kind.New().Interface() // not from r.reply, which attempt 0 may be writing
	out := new(outputs)
	opts := out.redirect(r.opts)
	r.replies[k], r.outs[k] = reply, out
	if r.done == nil {
		r.done = make(chan struct{})
	}
	if r.sent < h.attempts {
		r.timer.Reset(r.delay)
	}
	r.mu.Unlock()

	start := time.Now()
	err := r.invoker(lbpolicy.WithAttempt(ctx, a), r.method, r.req, reply, r.cc, opts...)
	elapsed := time.Since(start)
	r.mu.Lock()
	defer r.mu.Unlock()
	if a.Refused() {
		// No endpoint but the one to avoid: not sent, and no other
		// hedge will find one either.
		r.outstanding--
		r.sent = h.attempts
		if !r.decided && r.outstanding == 0 {
			r.decide(r.lastIdx, r.lastErr)
		}
		return
	}
	h.sent.Add(1)
	r.report(k, err, elapsed)
}

// reset clears a race that is going back to the pool, whose timer never
// fired: only attempt 0 ran.
func (r *race) reset() {
	r.ctx, r.req, r.reply, r.kind, r.cc, r.invoker, r.opts = nil, nil, nil, nil, nil, nil, nil
	r.decided, r.stopped, r.err, r.lastErr, r.lastIdx, r.winner = false, false, nil, nil, 0, 0
	r.cancels[0], r.ended[0] = nil, false
	r.att[0] = lbpolicy.Attempt{}
}
