package lbpolicy

import (
	"context"
	"sync/atomic"
)

// Attempt carries one attempt of an RPC between the code that sends it (a
// client interceptor, such as lbhedge's) and the policy's picker, through
// the RPC's context (WithAttempt). gRPC tells a picker nothing of
// attempts, so without one every pick is a first attempt: Request.Attempt
// and Avoid stay zero. With one, the picker passes N and Avoid to the
// lbkit picker as Request.Attempt and Request.Avoid (so that a hedge, or a
// retry of the caller's own, reaches another endpoint, hash policies
// included), and records the endpoint it picked, which Picked returns.
//
// The caller sets the exported fields before the RPC starts and does not
// change them while it runs. An Attempt is safe for concurrent use (gRPC
// may pick more than once for one RPC: a transparent retry, a pick
// repeated while no connection is ready) and must not be copied.
type Attempt struct {
	// N is the attempt's number, 0 for the first: Request.Attempt.
	N int
	// Avoid is the ID of an endpoint (its first address, as Picked
	// returns it) not to pick if the set has another: Request.Avoid.
	Avoid string
	// OnlyElsewhere, with Avoid set, fails the RPC at the pick, before
	// anything is sent, when the lbkit picker returns Avoid anyway (a set
	// of one): the pick fails UNAVAILABLE and Refused reports it. For an
	// attempt that is worth sending only to another endpoint, a hedge.
	OnlyElsewhere bool

	picked  atomic.Pointer[string] // the picked endpoint's ID, immutable
	refused atomic.Bool
}

// Picked returns the ID of the endpoint the policy's picker last picked
// for this attempt, or "" before the pick, or when the channel's policy is
// not one of this package's.
func (a *Attempt) Picked() string {
	if id := a.picked.Load(); id != nil {
		return *id
	}
	return ""
}

// Refused reports whether a pick failed because of OnlyElsewhere: the RPC
// was not sent.
func (a *Attempt) Refused() bool { return a.refused.Load() }

// attemptKey is the context key of an *Attempt.
type attemptKey struct{}

// WithAttempt returns a child of ctx that carries a to the policy's
// picker; the RPC sent with it is that attempt. Cost: one context value
// (an allocation); the picker's lookup allocates nothing.
func WithAttempt(ctx context.Context, a *Attempt) context.Context {
	return context.WithValue(ctx, attemptKey{}, a)
}

// attemptOf returns the Attempt ctx carries, or nil.
func attemptOf(ctx context.Context) *Attempt {
	if ctx == nil {
		return nil
	}
	a, _ := ctx.Value(attemptKey{}).(*Attempt)
	return a
}
