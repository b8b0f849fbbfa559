package live

import (
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// errStatus marks an answer other than 200 OK: the proxy's 502 when every
// attempt failed, its 503 when there was no backend to pick.
var errStatus = errors.New("live: proxy answered a status other than 200")

// user is one closed-loop virtual user: an HTTP client of its own, with
// one keep-alive connection to its proxy, sending GET requests that name
// its address in X-Forwarded-For.
type user struct {
	// Immutable after newUser.
	key    string
	url    string
	client *http.Client
	wake   chan struct{} // capacity 1: the profile has added the user

	active atomic.Bool // the profile wants it

	// Written by the user's goroutine only; read once it has ended.
	lat               []time.Duration // real latencies of successful requests
	ok, errs          int64
	okBefore, okAfter int64
	errAfter          int64         // failed requests during the first outage
	maxWait           time.Duration // the longest a request waited, success or error
}

// newUser returns a user of proxy p who gives up on a request after
// timeout (real time; zero for never), as sim.Scenario.ClientTimeout.
func newUser(key string, p *proxy, timeout time.Duration) *user {
	return &user{
		key:  key,
		url:  p.url,
		wake: make(chan struct{}, 1),
		client: &http.Client{Timeout: timeout, Transport: &http.Transport{
			DialContext:         (&net.Dialer{}).DialContext,
			MaxIdleConnsPerHost: 1, // one request at a time: one connection
			DisableCompression:  true,
		}},
	}
}

// loop is user u's life: it sends its first request at first (or waits to
// be added to the profile when first is negative), then sends, waits for
// the answer, thinks, and sends again while the profile wants it, until
// the run ends.
func (r *run) loop(u *user, first time.Duration) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	sleep := func(d time.Duration) bool {
		t.Reset(d)
		select {
		case <-t.C:
			return true
		case <-r.ctx.Done():
			return false
		}
	}
	if first >= 0 && !sleep(first) {
		return
	}
	for {
		if !u.active.Load() {
			select {
			case <-u.wake:
				continue
			case <-r.ctx.Done():
				return
			}
		}
		r.request(u)
		if !sleep(r.sc.Think) {
			return
		}
	}
}

// request sends one request and records its outcome, unless the run ended
// first: like the simulation, a run counts what finished within it.
func (r *run) request(u *user) {
	req, err := http.NewRequestWithContext(r.ctx, http.MethodGet, u.url, nil)
	if err != nil {
		return // not reached: the URL is the proxy's
	}
	req.Header["X-Forwarded-For"] = []string{u.key}
	from := r.elapsed()
	resp, err := u.client.Do(req)
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = errStatus
		}
	}
	to := r.elapsed()
	if r.ctx.Err() != nil || to >= r.length {
		return
	}
	u.maxWait = max(u.maxWait, time.Duration(to-from))
	if err != nil {
		u.errs++
		r.stepErrs[r.stepOf(to)].Add(1)
		if r.hasWindow && to >= r.window[0] && to < r.window[1] {
			u.errAfter++
		}
		return
	}
	u.ok++
	u.lat = append(u.lat, time.Duration(to-from))
	if r.hasWindow {
		switch {
		case to < r.window[0]:
			u.okBefore++
		case to < r.window[1]:
			u.okAfter++
		}
	}
}
