package lbpolicy

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lbk "github.com/lbkit/lbkit/balancer"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// endpoint is the lbkit Backend for one READY endpoint: its ID (the first
// address), its weight, and the picker of its pick_first child, which
// holds the connection. lbkit's Pick returns the very value it was given,
// so the picker finds the child with a type assertion, not a map.
//
// The policy keeps one endpoint per ID for as long as it stays READY with
// the same weight and hash key, and swaps the child's picker in place when the child
// publishes a new one, so that a state change that leaves the READY set
// as it was needs no lbkit Update. id, weight and hashKey are immutable.
type endpoint struct {
	id      string
	weight  int
	hashKey string // gRFC A76's endpoint hash key (ringhash.HashKey), or ""
	child   atomic.Pointer[pickerBox]
}

// pickerBox boxes a child's picker for endpoint.child.
type pickerBox struct{ balancer.Picker }

func newEndpoint(id string, weight int, hashKey string, child balancer.Picker) *endpoint {
	e := &endpoint{id: id, weight: weight, hashKey: hashKey}
	e.child.Store(&pickerBox{child})
	return e
}

var (
	_ lbk.Backend   = (*endpoint)(nil)
	_ lbk.Weighter  = (*endpoint)(nil)
	_ lbk.HashKeyer = (*endpoint)(nil)
)

// ID returns the endpoint's first address.
func (e *endpoint) ID() string { return e.id }

// Weight returns the endpoint's weight (see SetWeight).
func (e *endpoint) Weight() int { return e.weight }

// HashKey returns the endpoint's hash key (see HashKeyOf): the hash
// pickers place it by this key, when not empty, instead of its address.
func (e *endpoint) HashKey() string { return e.hashKey }

// errCancelled is what the lbkit picker is told about an RPC that ended
// CANCELLED: abandoned, so no latency sample and no failure.
var errCancelled = fmt.Errorf("lbpolicy: rpc cancelled: %w", lbk.ErrAbandoned)

// picker is the channel's picker while at least one endpoint is READY. It
// asks the lbkit picker for an endpoint, then that endpoint's child for
// the connection, and arranges for the lbkit picker to hear how the RPC
// ended.
//
// A new picker is published on every change of the READY set, but all of
// a channel's pickers share one lbkit picker (which outlives them, and
// whose set is already the newest), and one pool of call records.
//
// A picker is immutable after newPicker and safe for concurrent use.
type picker struct {
	policy   *policy
	gen      uint64 // policy.gen when this picker was made
	lb       lbk.Picker
	fb       lbk.Feedback // nil: lb learns nothing, so nothing is tracked
	key      string       // metadata key of the affinity key, or ""
	header   string       // requestHashHeader (gRFC A76), or ""
	failures failureSet
	calls    *sync.Pool // *call

	// Prebuilt so that the error paths allocate nothing.
	errBadKey    error
	errForeign   error
	errNoBackend error
	errElsewhere error
}

var _ balancer.Picker = (*picker)(nil)

// newPicker returns the picker of generation gen over p's lbkit picker and
// config; call it with p.mu held.
func newPicker(p *policy, gen uint64) *picker {
	cfg := p.cfg
	return &picker{
		policy:   p,
		gen:      gen,
		lb:       p.lb,
		fb:       p.fb,
		key:      cfg.Key,
		header:   cfg.RequestHashHeader,
		failures: cfg.failures,
		calls:    &p.calls,
		errBadKey: status.Errorf(codes.Internal,
			"lbpolicy: %s: metadata %q does not hold a key the picker can use", p.builder.name, cfg.Key),
		errForeign: status.Errorf(codes.Internal,
			"lbpolicy: %s: picker returned a backend it was not given", p.builder.name),
		// Not a status error: gRPC fails a fail-fast RPC with UNAVAILABLE
		// and keeps a wait-for-ready one waiting for the next picker.
		errElsewhere: status.Errorf(codes.Unavailable,
			"lbpolicy: %s: no endpoint other than the one to avoid (Attempt.OnlyElsewhere)", p.builder.name),
		errNoBackend: fmt.Errorf("lbpolicy: %s: the lbkit picker has no backend to give (all drained, in maintenance or ejected?)",
			p.builder.name),
	}
}

// Pick picks an endpoint with lbkit and a connection with the endpoint's
// child. When the lbkit picker implements Feedback, the result's Done
// tells it how the RPC ended (see Config), measuring the latency from
// here, and then calls the child's Done if it had one.
//
// An Attempt in the RPC's context (WithAttempt) sets the lbkit Request's
// Attempt and Avoid, and learns the endpoint picked.
//
// Cost, beyond the lbkit Pick and the child's: the context lookup for an
// Attempt (a walk up the context's chain, no allocation); with a key or
// requestHashHeader configured, the metadata lookup, which copies the
// entry's values (one small allocation when the entry is present; a
// requestHashHeader with several values costs more, three in all, for the
// copies and the join; none when it is missing, as the random key is
// allocation-free); with Feedback, one time.Now and a call
// record from a sync.Pool, so no allocation once the pool is warm.
func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	var req lbk.Request
	switch {
	case p.header != "":
		req.Key = headerKey(info, p.header)
	case p.key != "" && info.Ctx != nil:
		if v := metadata.ValueFromOutgoingContext(info.Ctx, p.key); len(v) > 0 {
			req.Key = v[0]
		}
	}
	a := attemptOf(info.Ctx)
	if a != nil {
		req.Attempt, req.Avoid = a.N, a.Avoid
	}
	b, err := p.lb.Pick(req)
	if err != nil {
		return balancer.PickResult{}, p.pickError(err)
	}
	e, ok := b.(*endpoint)
	if !ok || e == nil {
		p.forget(b)
		return balancer.PickResult{}, p.errForeign
	}
	if a != nil && a.OnlyElsewhere && req.Avoid != "" && e.id == req.Avoid {
		// No other endpoint to send it to: an attempt that is worth
		// sending only elsewhere (a hedge) is not sent.
		p.forget(b)
		a.refused.Store(true)
		return balancer.PickResult{}, p.errElsewhere
	}
	res, err := e.child.Load().Pick(info)
	if err != nil {
		// No RPC goes out on this pick: take it off lbkit's count. gRPC
		// picks again when the error asks it to.
		p.forget(b)
		return res, err
	}
	if a != nil {
		a.picked.Store(&e.id) // e is immutable: no allocation
	}
	if p.fb == nil {
		return res, nil
	}
	c := p.calls.Get().(*call)
	c.p, c.e, c.childDone, c.start = p, e, res.Done, time.Now()
	res.Done = c.done
	return res, nil
}

// headerKey returns the affinity key of an RPC by gRFC A76's
// request_hash_header rules: the header's values, joined with "," if it
// has several; or, if it has none or only an empty one, a random key
// (randomKey), so that the RPC goes to a random endpoint.
func headerKey(info balancer.PickInfo, header string) string {
	var v []string
	if info.Ctx != nil {
		v = metadata.ValueFromOutgoingContext(info.Ctx, header)
	}
	switch {
	case len(v) == 1 && v[0] != "":
		return v[0]
	case len(v) > 1:
		return strings.Join(v, ",")
	}
	return randomKey()
}

// randomKeyLen is the length of a random key; randomKeys holds 2¹⁶ + 1
// distinct ones, every substring of that length.
const randomKeyLen = 16

// randomKeys is 2¹⁶ + randomKeyLen − 1 random bytes, made once: its
// substrings of randomKeyLen bytes are the keys randomKey draws from.
// Immutable once made.
var randomKeys = sync.OnceValue(func() string {
	b := make([]byte, 1<<16+randomKeyLen-1)
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return string(b)
})

// randomKey returns one of 2¹⁶ + 1 fixed random keys, chosen at random:
// the hash pickers hash it to a random place, so that the RPC goes to an
// endpoint with a probability of its share of the ring or table (to
// within a few tenths of a percent of that share, by the number of keys:
// the hash picker sees 65537 distinct keys). A substring of one string
// made once, it costs no allocation, where formatting a random number
// into a key would cost one per RPC.
func randomKey() string {
	s := randomKeys()
	i := rand.IntN(len(s) - randomKeyLen + 1)
	return s[i : i+randomKeyLen]
}

// forget tells the lbkit picker that a pick it made was not used.
func (p *picker) forget(b lbk.Backend) {
	if p.fb != nil {
		p.fb.Done(b, lbk.Result{})
	}
}

// pickError turns an lbkit Pick error into what gRPC expects of a picker.
func (p *picker) pickError(err error) error {
	switch {
	case err == lbk.ErrNoBackend && p.policy.gen.Load() != p.gen:
		// The READY set changed after this picker was published; the
		// picker that replaces it is on its way, and gRPC waits for it.
		return balancer.ErrNoSubConnAvailable
	case err == lbk.ErrNoBackend:
		// This picker is current, gRPC has READY endpoints, and the lbkit
		// picker still has none to give: a decorator (health) has taken
		// them all out. No state change of gRPC's will bring a new picker,
		// so the policy publishes one shortly, for the RPCs that wait for
		// ready to ask again; fail-fast RPCs fail now.
		p.policy.republishSoon(p.gen)
		return p.errNoBackend
	case errors.Is(err, lbk.ErrBadKey):
		// A status error ends the RPC at once, even a wait-for-ready one,
		// which would otherwise wait for a picker that cannot come.
		return p.errBadKey
	default:
		return status.Errorf(codes.Unavailable, "lbpolicy: pick: %v", err)
	}
}

// result says what an RPC's end tells the lbkit picker; see Config.
func (p *picker) result(info balancer.DoneInfo, start time.Time) lbk.Result {
	if info.Err == nil {
		if !info.BytesReceived {
			// gRPC found the picked connection gone and will pick again:
			// nothing was sent, nothing measured.
			return lbk.Result{}
		}
		return lbk.Result{Latency: time.Since(start)}
	}
	switch code := status.Code(info.Err); {
	case code == codes.Canceled:
		return lbk.Result{Err: errCancelled}
	case p.failures.has(code):
		return lbk.Result{Latency: time.Since(start), Err: info.Err}
	default:
		// An application error (NOT_FOUND, INVALID_ARGUMENT, ...): the
		// backend answered.
		return lbk.Result{Latency: time.Since(start)}
	}
}

// call carries one RPC from Pick to Done: what Done needs that the pick
// result cannot hold. Call records are pooled so that a pick allocates
// nothing; each is made once with its done func bound to it, which is what
// goes into PickResult.Done.
//
// gRPC calls Done at most once per pick, which is what makes the reuse
// safe: after finish a record belongs to the pool again.
type call struct {
	p         *picker
	e         *endpoint
	childDone func(balancer.DoneInfo)
	start     time.Time
	done      func(balancer.DoneInfo) // c.finish, bound once
}

func newCall() *call {
	c := new(call)
	c.done = c.finish
	return c
}

func (c *call) finish(info balancer.DoneInfo) {
	p, e, childDone, start := c.p, c.e, c.childDone, c.start
	c.p, c.e, c.childDone = nil, nil, nil
	p.calls.Put(c)
	res := p.result(info, start)
	res.Load = loadOf(info.ServerLoad)
	p.fb.Done(e, res)
	if childDone != nil {
		childDone(info)
	}
}
