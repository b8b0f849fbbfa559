package balancertest_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/balancer/balancertest"
)

// decoFlaw is one way a decorator can break balancer's rules for
// decorators.
type decoFlaw int

const (
	decoSound       decoFlaw = iota
	decoNoStart              // Close but no Start, as lbmetrics' once was
	decoKeepsStart           // Start that does not pass Start on
	decoTwice                // Start that starts the inner picker twice
	decoOwnContext           // Start that passes on a context that never ends
	decoKeepsClose           // Close that does not pass Close on
	decoNoClose              // no Close at all
	decoNoUnwrap             // no Unwrap
	decoWrongUnwrap          // Unwrap returns something else than the inner picker
	decoNeedsStart           // Start fails around a picker without Start
	decoPanics               // Start panics
	decoSwallows             // Start that passes Start on and drops its error
)

// deco is a decorator that passes Pick and Update on, with the flaw f.
type deco struct {
	inner balancer.Balancer
	f     decoFlaw
}

func (d *deco) Pick(r balancer.Request) (balancer.Backend, error) { return d.inner.Pick(r) }
func (d *deco) Update(bs []balancer.Backend) error                { return d.inner.Update(bs) }

func (d *deco) start(ctx context.Context) error {
	s, ok := d.inner.(balancer.Starter)
	switch {
	case d.f == decoPanics:
		panic("deco: start")
	case !ok && d.f == decoNeedsStart:
		return errors.New("deco: the inner picker has no Start")
	case !ok || d.f == decoKeepsStart:
		return nil
	case d.f == decoOwnContext:
		return s.Start(context.Background())
	case d.f == decoTwice:
		_ = s.Start(ctx)
	case d.f == decoSwallows:
		_ = s.Start(ctx)
		return nil
	}
	return s.Start(ctx)
}

func (d *deco) close() error {
	if c, ok := d.inner.(interface{ Close() error }); ok && d.f != decoKeepsClose {
		return c.Close()
	}
	return nil
}

func (d *deco) unwrap() balancer.Picker {
	if d.f == decoWrongUnwrap {
		return &deco{inner: d.inner}
	}
	return d.inner
}

// The method sets the flaws call for: each combination is a type.
type (
	full     struct{ *deco } // Start, Close, Unwrap
	noStart  struct{ *deco } // Close, Unwrap
	noClose  struct{ *deco } // Start, Unwrap
	noUnwrap struct{ *deco } // Start, Close
)

func (d full) Start(ctx context.Context) error     { return d.start(ctx) }
func (d full) Close() error                        { return d.close() }
func (d full) Unwrap() balancer.Picker             { return d.unwrap() }
func (d noStart) Close() error                     { return d.close() }
func (d noStart) Unwrap() balancer.Picker          { return d.unwrap() }
func (d noClose) Start(ctx context.Context) error  { return d.start(ctx) }
func (d noClose) Unwrap() balancer.Picker          { return d.unwrap() }
func (d noUnwrap) Start(ctx context.Context) error { return d.start(ctx) }
func (d noUnwrap) Close() error                    { return d.close() }

func wrapWith(f decoFlaw) balancertest.Wrap {
	return func(inner balancer.Balancer) (balancer.Balancer, error) {
		d := &deco{inner: inner, f: f}
		switch f {
		case decoNoStart:
			return noStart{d}, nil
		case decoNoClose:
			return noClose{d}, nil
		case decoNoUnwrap:
			return noUnwrap{d}, nil
		}
		return full{d}, nil
	}
}

func TestDecoratorKitPassesSoundDecorator(t *testing.T) {
	balancertest.RunDecorator(t, wrapWith(decoSound))
}

// TestDecoratorKitCatchesFlaws proves each decorator check can fail: a
// decorator broken in one way fails the check for that rule, and names it.
func TestDecoratorKitCatchesFlaws(t *testing.T) {
	tests := []struct {
		flaw decoFlaw
		name string
		want string // the check that must fail, and what it says
	}{
		{decoNoStart, "no Start", "Start: balancertest_test.noStart has no Start method"},
		{decoKeepsStart, "keeps Start", "Start: Start started the inner picker 0 times, want 1"},
		{decoTwice, "starts twice", "Start: Start started the inner picker 2 times, want 1"},
		{decoOwnContext, "a context of its own", "Start: the inner picker's context did not end"},
		{decoKeepsClose, "keeps Close", "Close: Close did not close the inner picker"},
		{decoNoClose, "no Close", "Close: balancertest_test.noClose has no Close method"},
		{decoNoUnwrap, "no Unwrap", "Unwrap: balancertest_test.noUnwrap has no Unwrap method"},
		{decoWrongUnwrap, "Unwrap to another", "Unwrap: balancer.As did not find the inner picker"},
		{decoNeedsStart, "Start needs an inner Start", "Plain: Start around a picker without Start: deco: the inner picker has no Start"},
		{decoPanics, "Start panics", "Start: panic: deco: start"},
		{decoSwallows, "Start drops the inner error", "Restart: a second Start returned <nil>, want an error wrapping balancer.ErrStarted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := balancertest.TestDecorator(wrapWith(tt.flaw))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// A wrap that fails, or returns nil, fails every check with that.
func TestDecoratorKitWrapFails(t *testing.T) {
	err := balancertest.TestDecorator(func(balancer.Balancer) (balancer.Balancer, error) { return nil, errors.New("boom") })
	require.Error(t, err)
	assert.Equal(t, 5, strings.Count(err.Error(), "wrap: boom"))
	err = balancertest.TestDecorator(func(balancer.Balancer) (balancer.Balancer, error) { return nil, nil })
	require.Error(t, err)
	assert.Equal(t, 5, strings.Count(err.Error(), "wrap returned a nil decorator"))
}
