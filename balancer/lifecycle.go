package balancer

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
)

// Errors of Start, for every lbkit type that has one (wrr's Reported,
// lrt/prequal, health, locality, lbhttp's Refresher, the sources in
// examples/) and for the decorators that pass Start on: a decorator
// returns the error of the layer that refused, wrapped, so that
// errors.Is(err, ErrStarted) tells a second Start of a stack whichever
// layer noticed it.
var (
	// ErrStarted is returned, wrapped, by a second Start.
	ErrStarted = errors.New("balancer: already started")
	// ErrClosed is returned, wrapped, by Start after Close.
	ErrClosed = errors.New("balancer: closed")
)

// A Lifecycle is the start-once, close-once life of a type with
// background work: one goroutine that Start begins and Close ends. The
// zero value is ready to use; embed one (as a field, not a pointer) and
// call it from the type's own Start and Close:
//
//	func (p *Picker) Start(ctx context.Context) error {
//		if err := p.life.Start(ctx, p.loop); err != nil {
//			return fmt.Errorf("mypicker: start: %w", err)
//		}
//		return nil
//	}
//
//	func (p *Picker) Close() error {
//		p.life.Close()
//		return nil
//	}
//
// The rules, which every lbkit type with a Start keeps:
//
//   - Start runs run on a goroutine of its own, with a context that ends
//     when ctx ends or Close is called, whichever is first; run returns
//     when it ends. A second Start returns ErrStarted, whether the first
//     one's run still runs or not, and Start after Close returns
//     ErrClosed; neither starts anything.
//   - Close cancels that context and waits for run to return. Before
//     Start it only makes later Starts fail. It is idempotent, and safe to
//     call concurrently; it must not be called from run, which it would
//     wait for.
//   - Nothing is left running after Close returns: the one goroutine is
//     run's, and it has returned.
//
// A type whose work is more than one goroutine (health's probes, one per
// backend, started as backends join) may keep a life of its own, with the
// same errors.
//
// A Lifecycle must not be copied after first use.
type Lifecycle struct {
	state atomic.Uint32 // lifeStarted | lifeClosed

	mu     sync.Mutex // Start and Close
	cancel context.CancelFunc
	done   chan struct{} // closed when run has returned
}

const (
	lifeStarted = 1 << iota
	lifeClosed
)

// Start starts run(ctx') on a goroutine of its own, ctx' being ctx ended
// also by Close. It returns ErrStarted if Start was called before, and
// ErrClosed after Close. A nil run starts a goroutine that returns at
// once.
//
// Cost: a context, a channel and a goroutine.
func (l *Lifecycle) Start(ctx context.Context, run func(context.Context)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s := l.state.Load(); {
	case s&lifeClosed != 0:
		return ErrClosed
	case s&lifeStarted != 0:
		return ErrStarted
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	l.cancel, l.done = cancel, done
	l.state.Store(lifeStarted)
	go func() {
		defer close(done)
		defer cancel()
		if run != nil {
			run(ctx)
		}
	}()
	return nil
}

// Close ends the context Start gave run and waits for run to return.
// Later Starts return ErrClosed. Close is idempotent.
func (l *Lifecycle) Close() {
	l.mu.Lock()
	l.state.Store(l.state.Load() | lifeClosed)
	cancel, done := l.cancel, l.done
	l.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// Started reports whether Start has started run, whether or not it has
// returned since. It takes no lock: one atomic load.
func (l *Lifecycle) Started() bool { return l.state.Load()&lifeStarted != 0 }

// Closed reports whether Close has been called. It takes no lock: one
// atomic load.
func (l *Lifecycle) Closed() bool { return l.state.Load()&lifeClosed != 0 }

// StartInner is the Start of a decorator with no work of its own, and
// the last step of one with some: it starts p, the picker the decorator
// wraps, if p has a Start method (Starter), and returns its error as it
// is (ErrStarted from a layer further in stays matchable); it returns nil
// for a p without one.
func StartInner(ctx context.Context, p Picker) error {
	if s, ok := p.(Starter); ok {
		return s.Start(ctx)
	}
	return nil
}

// CloseInner is StartInner's counterpart for Close: it closes p if p is
// an io.Closer and returns its error as it is, and returns nil for a p
// without Close.
func CloseInner(p Picker) error {
	if c, ok := p.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
