package balancertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// Wrap puts a decorator around inner and returns it: health.New with a
// Config, lbmetrics' Wrap, one of your own.
type Wrap func(inner balancer.Balancer) (balancer.Balancer, error)

// decoratorChecks are the rules of balancer's doc, "Decorators", in the
// order RunDecorator reports them.
var decoratorChecks = []struct {
	name string
	run  func(Wrap) error
}{
	{"Start", checkDecoratorStart},
	{"Restart", checkDecoratorRestart},
	{"Close", checkDecoratorClose},
	{"Unwrap", checkDecoratorUnwrap},
	{"Plain", checkDecoratorPlain},
}

// TestDecorator checks that the decorators wrap makes are transparent, as
// balancer's doc ("Decorators") says every decorator is:
//
//   - Start: the decorator is a balancer.Starter, and its Start starts an
//     inner picker that has a Start, once, with a context that ends when
//     the one given to the decorator's Start ends.
//   - Restart: a second Start of the decorator returns an error wrapping
//     balancer.ErrStarted (the inner picker's, passed on, or its own),
//     and Start after Close one wrapping balancer.ErrClosed, so that a
//     caller can tell them through any stack with errors.Is.
//   - Close: the decorator is an io.Closer, and its Close, after Start,
//     closes an inner picker that has a Close.
//   - Unwrap: the decorator is a balancer.Unwrapper, and balancer.As finds
//     the inner picker through it.
//   - Plain: around a picker with neither Start nor Close, the decorator's
//     Start and Close succeed.
//
// It returns nil if all pass, or an error joining one error per failed
// check, each starting with the check's name. A panic, or a Start or Close
// that does not return within a minute, fails its check. What a decorator
// does with Pick, Done and Update, Test checks: run both on a decorator,
// Test with the decorator around an lbkit picker.
func TestDecorator(wrap Wrap) error {
	var errs []error
	for _, c := range decoratorChecks {
		if err := runDecoratorCheck(c.name, c.run, wrap); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RunDecorator runs each check of TestDecorator as a subtest of t, named
// after the check.
//
//	func TestDecorator(t *testing.T) {
//		balancertest.RunDecorator(t, func(inner balancer.Balancer) (balancer.Balancer, error) {
//			return health.New(inner, health.Config{})
//		})
//	}
func RunDecorator(t *testing.T, wrap Wrap) {
	t.Helper()
	for _, c := range decoratorChecks {
		t.Run(c.name, func(t *testing.T) {
			if err := runDecoratorCheck(c.name, c.run, wrap); err != nil {
				t.Error(err)
			}
		})
	}
}

// runDecoratorCheck runs one check as runCheck runs a Balancer's: in a
// goroutine of its own, bounded by checkTimeout.
func runDecoratorCheck(name string, run func(Wrap) error, wrap Wrap) error {
	return runCheck(check{name: name, run: func(func() balancer.Balancer) error { return run(wrap) }}, nil)
}

// lifecycle is the inner picker the checks wrap: a working Balancer (it
// picks the first backend of its set) with a Start and a Close that count
// their calls and keep Start's context. Start keeps balancer.Lifecycle's
// rules: balancer.ErrStarted after a first Start, balancer.ErrClosed
// after Close.
type lifecycle struct {
	mu             sync.Mutex // writers only
	set            atomic.Pointer[balancer.Set]
	starts, closes atomic.Int64
	ctx            atomic.Pointer[context.Context]
}

func (l *lifecycle) Update(bs []balancer.Backend) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, err := balancer.NewSet(bs)
	if err != nil {
		return fmt.Errorf("balancertest: %w", err)
	}
	l.set.Store(&s)
	return nil
}

func (l *lifecycle) Pick(balancer.Request) (balancer.Backend, error) {
	s := l.set.Load()
	if s == nil || s.Len() == 0 {
		return nil, balancer.ErrNoBackend
	}
	return s.Backends[0], nil
}

func (l *lifecycle) Start(ctx context.Context) error {
	switch l.starts.Add(1); {
	case l.closes.Load() > 0:
		return fmt.Errorf("balancertest: start: %w", balancer.ErrClosed)
	case l.ctx.Load() != nil:
		return fmt.Errorf("balancertest: start: %w", balancer.ErrStarted)
	}
	l.ctx.Store(&ctx)
	return nil
}

func (l *lifecycle) Close() error {
	l.closes.Add(1)
	return nil
}

// plainPicker has neither Start nor Close.
type plainPicker struct{ l lifecycle }

func (p *plainPicker) Update(bs []balancer.Backend) error { return p.l.Update(bs) }

func (p *plainPicker) Pick(r balancer.Request) (balancer.Backend, error) { return p.l.Pick(r) }

// decorate wraps inner, and refuses a nil decorator.
func decorate(wrap Wrap, inner balancer.Balancer) (balancer.Balancer, error) {
	d, err := wrap(inner)
	switch {
	case err != nil:
		return nil, fmt.Errorf("wrap: %w", err)
	case d == nil:
		return nil, errors.New("wrap returned a nil decorator")
	}
	return d, nil
}

// closeQuietly closes d if it can, for a check that has failed already.
func closeQuietly(d balancer.Balancer) {
	if c, ok := d.(io.Closer); ok {
		_ = c.Close()
	}
}

func checkDecoratorStart(wrap Wrap) error {
	inner := &lifecycle{}
	d, err := decorate(wrap, inner)
	if err != nil {
		return err
	}
	defer closeQuietly(d)
	s, ok := d.(balancer.Starter)
	if !ok {
		return fmt.Errorf("%T has no Start method: a caller holding only the decorator cannot start the picker inside", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err = s.Start(ctx)
	if n := inner.starts.Load(); n != 1 {
		return fmt.Errorf("Start started the inner picker %d times, want 1", n)
	}
	if err != nil {
		return fmt.Errorf("Start: %w", err)
	}
	got := *inner.ctx.Load()
	cancel()
	select {
	case <-got.Done():
	case <-time.After(time.Second):
		return errors.New("the inner picker's context did not end within 1s of the end of the one given to the decorator's Start")
	}
	return nil
}

func checkDecoratorRestart(wrap Wrap) error {
	inner := &lifecycle{}
	d, err := decorate(wrap, inner)
	if err != nil {
		return err
	}
	defer closeQuietly(d)
	s, ok := d.(balancer.Starter)
	c, ok2 := d.(io.Closer)
	if !ok || !ok2 {
		return fmt.Errorf("%T lacks Start or Close", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.Start(ctx); err != nil {
		return fmt.Errorf("Start: %w", err)
	}
	if err := s.Start(ctx); !errors.Is(err, balancer.ErrStarted) {
		return fmt.Errorf("a second Start returned %v, want an error wrapping balancer.ErrStarted (the inner picker's, passed on)", err)
	}
	if err := c.Close(); err != nil {
		return fmt.Errorf("Close: %w", err)
	}
	if err := s.Start(ctx); !errors.Is(err, balancer.ErrClosed) {
		return fmt.Errorf("Start after Close returned %v, want an error wrapping balancer.ErrClosed (the inner picker's, passed on)", err)
	}
	return nil
}

func checkDecoratorClose(wrap Wrap) error {
	inner := &lifecycle{}
	d, err := decorate(wrap, inner)
	if err != nil {
		return err
	}
	c, ok := d.(io.Closer)
	if !ok {
		return fmt.Errorf("%T has no Close method: a caller holding only the decorator cannot stop the picker inside", d)
	}
	if s, ok := d.(balancer.Starter); ok {
		if err := s.Start(context.Background()); err != nil {
			closeQuietly(d)
			return fmt.Errorf("Start: %w", err)
		}
	}
	if err := c.Close(); err != nil {
		return fmt.Errorf("Close: %w", err)
	}
	if inner.closes.Load() == 0 {
		return errors.New("Close did not close the inner picker")
	}
	return nil
}

func checkDecoratorUnwrap(wrap Wrap) error {
	inner := &lifecycle{}
	d, err := decorate(wrap, inner)
	if err != nil {
		return err
	}
	defer closeQuietly(d)
	if _, ok := d.(balancer.Unwrapper); !ok {
		return fmt.Errorf("%T has no Unwrap method: balancer.As cannot reach the picker inside, nor its admin methods", d)
	}
	got, ok := balancer.As[*lifecycle](d)
	if !ok {
		return errors.New("balancer.As did not find the inner picker through Unwrap")
	}
	if got != inner {
		return errors.New("balancer.As found another *lifecycle than the inner picker")
	}
	return nil
}

func checkDecoratorPlain(wrap Wrap) error {
	d, err := decorate(wrap, &plainPicker{})
	if err != nil {
		return err
	}
	if s, ok := d.(balancer.Starter); ok {
		if err := s.Start(context.Background()); err != nil {
			closeQuietly(d)
			return fmt.Errorf("Start around a picker without Start: %w", err)
		}
	}
	if c, ok := d.(io.Closer); ok {
		if err := c.Close(); err != nil {
			return fmt.Errorf("Close around a picker without Close: %w", err)
		}
	}
	return nil
}
