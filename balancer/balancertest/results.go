package balancertest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"syscall"

	"github.com/lbkit/lbkit/balancer"
)

// errFailure is a failure of no particular kind, a 5xx say.
var errFailure = errors.New("balancertest: simulated failure")

// refused is the error net.Dial returns for a refused connection, which
// health's passive check ejects on at once.
var refused error = &net.OpError{
	Op: "dial", Net: "tcp",
	Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 9},
	Err:  os.NewSyscallError("connect", syscall.ECONNREFUSED),
}

// results are the shapes of Result a caller passes to Done (see
// balancer.Result), the first a success: success, failure, slow, timeouts,
// abandoned, unmeasured, a refused connection, and latencies a clock that
// stepped back or a request that never ended would give: negative, and
// as far either way as a time.Duration goes; then loadResults, Results
// that carry load reports.
var results = append([]balancer.Result{
	{Latency: 1e6},
	{Latency: 2e5, Err: errFailure},
	{Latency: 5e9},
	{Latency: 1e9, Err: context.DeadlineExceeded},
	{Err: balancer.ErrAbandoned},
	{Latency: 3e6, Err: fmt.Errorf("balancertest: client went away: %w", context.Canceled)},
	{},
	{Latency: 4e5, Err: refused},
	{Latency: 30e9, Err: &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}},
	{Latency: -5e6},
	{Latency: -1e6, Err: errFailure},
	{Latency: math.MinInt64},
	{Latency: math.MaxInt64},
	{Latency: math.MaxInt64, Err: context.DeadlineExceeded},
	{Latency: math.MaxInt64, Err: balancer.ErrAbandoned},
}, loadResults...)

// describe names a Result in messages.
func describe(r balancer.Result) string {
	if r.Load.Reported() {
		return fmt.Sprintf("Result{Latency: %v, Err: %v, Load: %s}", r.Latency, r.Err, describeLoad(r.Load))
	}
	return fmt.Sprintf("Result{Latency: %v, Err: %v}", r.Latency, r.Err)
}

// checkDoneUnknown: Done for nil, a nil pointer, unknown or removed
// backends, with every shape of result, is harmless.
func checkDoneUnknown(newBalancer func() balancer.Balancer) error {
	b := newBalancer()
	fb := feedback(b)
	old := backends("old", 3, false)
	if err := update(b, old); err != nil {
		return err
	}
	cur := backends("cur", 4, false)
	if err := update(b, cur); err != nil {
		return err
	}
	stranger := balancer.NewEndpoint("stranger.test:1", 1)
	for i := range 1000 {
		r := results[i%len(results)]
		fb.Done(nil, r)
		fb.Done(nilEndpoint, r)
		fb.Done(stranger, r)
		fb.Done(old[i%len(old)], r)
	}
	if _, err := pickIn(b, members(cur), 1000, false, false); err != nil {
		return fmt.Errorf("after Done for nil, unknown and removed backends: %w", err)
	}
	return nil
}

// countPicks gives a new Balancer the set bs and returns what tally
// counts on it.
func countPicks(newBalancer func() balancer.Balancer, bs []balancer.Backend, picks int, result func(p balancer.Backend, nth int) balancer.Result) (map[balancer.Backend]int, error) {
	b := newBalancer()
	if err := update(b, bs); err != nil {
		return nil, err
	}
	return tally(b, members(bs), picks, result)
}

// tally makes picks picks with the keys key(0), key(1), ..., each checked
// against want and followed by Done with the Result that result gives for
// the backend picked and the number of times it has been picked so far,
// and returns how often each backend was picked.
func tally(b balancer.Balancer, want map[string]balancer.Backend, picks int, result func(p balancer.Backend, nth int) balancer.Result) (map[balancer.Backend]int, error) {
	fb := feedback(b)
	count := map[balancer.Backend]int{}
	for i := range picks {
		p, err := b.Pick(balancer.Request{Key: key(i)})
		if err := member(p, err, want); err != nil {
			return nil, fmt.Errorf("pick %d: %w", i, err)
		}
		count[p]++
		fb.Done(p, result(p, count[p]))
	}
	return count, nil
}

// checkAbandoned: a Result that carries no measurement (abandoned, or
// zero) teaches nothing: a backend whose every request is abandoned or
// unmeasured must not look fast and draw the traffic of four.
//
// A first run, with every request measured, finds the backend the picker
// favours least (a hash picker's share is uneven by design); a second run
// makes the same requests of a fresh picker and abandons every request to
// that backend. Its share may grow to twice a fair share, or twice its
// first share, no more. The two runs are compared only if they pick the
// same backends, or Balancers of the constructor pick alike (see
// perInstance).
func checkAbandoned(newBalancer func() balancer.Balancer) error {
	const n, picks = 4, 2000
	bs := backends("ab", n, false)
	unmeasured := []balancer.Result{{Err: balancer.ErrAbandoned}, {}, {Err: context.Canceled}}
	run := func(quiet balancer.Backend) (map[balancer.Backend]int, error) {
		return countPicks(newBalancer, bs, picks, func(p balancer.Backend, nth int) balancer.Result {
			if p == quiet {
				return unmeasured[nth%len(unmeasured)]
			}
			return balancer.Result{Latency: 20e6}
		})
	}
	first, err := run(nil)
	if err != nil {
		return err
	}
	quiet := bs[0]
	for _, b := range bs {
		if first[b] < first[quiet] {
			quiet = b
		}
	}
	second, err := run(quiet)
	if err != nil {
		return err
	}
	if !sameSupport(sharesOf(first, picks), sharesOf(second, picks)) {
		if per, err := perInstance(newBalancer, bs); err != nil || per {
			return err // placed per instance: nothing to compare
		}
	}
	if got, limit := second[quiet], max(2*picks/n, 2*first[quiet]); got > limit {
		return fmt.Errorf("a backend whose requests were all abandoned or unmeasured got %d of %d picks, against %d when they were measured: abandoned and zero Results must not count as fast answers", got, picks, first[quiet])
	}
	return nil
}
