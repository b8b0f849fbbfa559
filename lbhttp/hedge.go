package lbhttp

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// hedgeRace is one request's race between an attempt and its hedge. It
// lives in the first attempt's guard, so that a request answered before
// the hedge delay (the common case) allocates nothing for it; a guard
// whose hedge timer fired is dropped rather than reused.
//
// The hedge runs on the hedge timer's own goroutine. Until it starts,
// state alone decides who goes on: the first attempt when it answers
// (raceSettled), the hedge when the timer fires (raceHedging). From then
// on, mu guards the outcome: the first usable answer wins and ends the
// other attempt; an answer that failed is handed to the first attempt's
// goroutine, which settles it, and waits for the hedge's when its own
// failed.
type hedgeRace struct {
	// Set before the hedge timer is armed; read-only after.
	ctx      context.Context
	req      *http.Request
	base     balancer.Request // the request's Key and Route
	n        int              // the first attempt's number
	first    balancer.Backend
	deadline time.Time

	state atomic.Int32

	mu        sync.Mutex
	winner    int
	firstDone bool   // the first attempt has its answer
	hedgeDone bool   // the hedge has its answer, or was not sent
	hg        *guard // the hedge's guard, once it is sent
	handed    bool   // the hedge's answer is in result, for the first attempt's goroutine
	result    chan answer
}

// The race's state, before the hedge starts.
const (
	raceWaiting = iota // the first attempt is in flight, the timer armed
	raceSettled        // the first attempt answered first: no hedge
	raceHedging        // the timer fired first: the hedge is on
)

// Who won.
const (
	winFirst = iota + 1
	winHedge
)

// hedgeDelay returns how long a request waits for its first attempt
// before hedging, and false while HedgePercentile has too few samples.
func (t *Transport) hedgeDelay() (time.Duration, bool) {
	if t.sketch == nil {
		return t.hedgeAfter, true
	}
	d, ok := t.sketch.Value()
	return max(d, t.hedgeAfter), ok
}

// usable reports whether ans can be the request's answer: a response that
// would not be retried.
func (t *Transport) usable(ans answer) bool {
	return ans.err == nil && !t.retryOn(ans.resp)
}

// race sends attempt n, a, to b and, if it has no answer after the hedge
// delay, a hedge (attempt n+1) to another backend; the first usable
// answer is returned, the other attempt is cancelled and reported
// abandoned. It returns the response or error for the caller as try
// would, the backend that gave it, and how many attempts were sent.
func (t *Transport) race(ctx context.Context, req *http.Request, base balancer.Request, n int, b balancer.Backend, a *attempt, start, deadline time.Time) (*http.Response, balancer.Backend, int, error) {
	g := t.newGuard()
	delay, ok := t.hedgeDelay()
	if !ok || (!deadline.IsZero() && !start.Add(delay).Before(deadline)) {
		resp, err := t.settle(ctx, t.launch(ctx, b, a, g, start, deadline))
		return resp, b, 1, err
	}
	r := &g.race
	r.ctx, r.req, r.base, r.n, r.first, r.deadline = ctx, req, base, n, b, deadline
	r.winner, r.firstDone, r.hedgeDone, r.hg, r.handed = 0, false, false, nil, false
	r.state.Store(raceWaiting)
	if r.result == nil {
		r.result = make(chan answer, 1)
		g.hedgeTimer = time.AfterFunc(time.Hour, g.hedge)
	}
	g.hedgeTimer.Reset(delay)

	p := t.launch(ctx, b, a, g, start, deadline)
	if r.state.CompareAndSwap(raceWaiting, raceSettled) {
		if !g.hedgeTimer.Stop() {
			g.raced = true // it fired and found the race settled; drop g all the same
		}
		resp, err := t.settle(ctx, p)
		return resp, b, 1, err
	}
	g.raced = true

	usable := t.usable(p)
	r.mu.Lock()
	r.firstDone = true
	switch {
	case r.winner == winHedge:
		r.mu.Unlock()
		t.lose(ctx, p)
		h := <-r.result
		resp, err := t.settle(ctx, h)
		return resp, h.b, 2, err
	case usable:
		r.winner = winFirst
		sent := r.hg != nil
		if sent && !r.hedgeDone {
			r.hg.end(endLost)
		}
		handed := r.handed
		r.mu.Unlock()
		if handed {
			// The hedge failed, or was not sent, before this answer
			// came: report it.
			t.lose(ctx, <-r.result)
		}
		resp, err := t.settle(ctx, p)
		return resp, b, 1 + btoi(sent), err
	}
	// This attempt failed: the hedge decides.
	r.mu.Unlock()
	resp, err := t.settle(ctx, p)
	h := <-r.result
	if h.b == nil {
		return resp, b, 1, err // no hedge was sent
	}
	if resp != nil {
		resp.Body.Close() // a failed response: reports itself
	}
	resp, err = t.settle(ctx, h)
	return resp, h.b, 2, err
}

// hedge is the hedge timer's function: it sends the hedge, unless the
// first attempt answered first, and hands its answer on.
func (g *guard) hedge() {
	r := &g.race
	if !r.state.CompareAndSwap(raceWaiting, raceHedging) {
		return
	}
	t := g.t
	h := t.sendHedge(r)
	r.mu.Lock()
	r.hedgeDone = true
	switch {
	case r.winner == winFirst:
		r.mu.Unlock()
		t.lose(r.ctx, h)
	case h.b != nil && t.usable(h):
		r.winner = winHedge
		if !r.firstDone {
			g.end(endLost)
		}
		r.result <- h
		r.mu.Unlock()
	default:
		// A failure, or no hedge sent: the first attempt's goroutine
		// settles it.
		r.handed = true
		r.result <- h
		r.mu.Unlock()
	}
}

// sendHedge picks a backend other than the first attempt's, and sends the
// hedge there if the request still waits, its deadline is not past, and
// the budget allows. Its answer has no backend if it was not sent.
func (t *Transport) sendHedge(r *hedgeRace) answer {
	now := time.Now()
	if r.ctx.Err() != nil || (!r.deadline.IsZero() && !now.Before(r.deadline)) {
		return answer{}
	}
	b, err := t.picker.Pick(balancer.Request{Key: r.base.Key, Route: r.base.Route, Attempt: r.n + 1, Avoid: r.first.ID()})
	if err != nil || b == nil {
		return answer{}
	}
	var a *attempt
	if b.ID() != r.first.ID() && (t.budget == nil || t.budget.Retry(now)) {
		a, err = t.attempt(r.req, b, r.n+1, nil, nil)
		if a != nil {
			a.hold = t.holdBytes > 0 && !asksStream(r.req.Header) // a hedge may be sent twice
		}
	}
	if a == nil || err != nil {
		// The same backend (a set of one), no budget left, or a body
		// that cannot be fetched again: not sent.
		t.feedback.Done(b, balancer.Result{Err: balancer.ErrAbandoned})
		return answer{}
	}
	hg := t.newGuard()
	r.mu.Lock()
	if r.winner == winFirst {
		r.mu.Unlock()
		t.feedback.Done(b, balancer.Result{Err: balancer.ErrAbandoned})
		hg.release()
		return answer{}
	}
	r.hg = hg
	r.mu.Unlock()
	return t.launch(r.ctx, b, a, hg, now, r.deadline)
}

// lose settles an answer that came after the race was won, or that is
// of no use: a usable response is closed unread and its attempt reported
// abandoned (a race lost teaches nothing of the backend, unless the
// attempt had outlived the attempt timeout), a failure as itself.
func (t *Transport) lose(ctx context.Context, ans answer) {
	if ans.b == nil {
		return // a hedge that was not sent
	}
	if ans.err == nil && t.usable(ans) {
		t.drop(&ans)
		t.feedback.Done(ans.b, t.abandoned(time.Since(ans.start), errHedgeLost))
		ans.g.release()
		return
	}
	if resp, _ := t.settle(ctx, ans); resp != nil {
		resp.Body.Close()
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
