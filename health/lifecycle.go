package health

import (
	"context"
	"fmt"

	"github.com/lbkit/lbkit/balancer"
)

// Start starts the background work: one goroutine per backend probing it
// (if Config.Probe is set) and the applier, which applies pending changes
// and timed transitions as they come. Cancelling ctx or calling Close
// stops them all; Close also waits for them. Start returns an error
// wrapping balancer.ErrStarted if called twice, or balancer.ErrClosed
// after Close or after the context of an earlier Start ended. (Health's
// work is a goroutine per probed backend, started as backends join, and
// an applier that may also start lazily: more than balancer.Lifecycle's
// one goroutine, so it keeps a life of its own, by Lifecycle's rules.)
//
// Then, as every decorator does (see balancer's doc, "Decorators"), Start
// starts the inner picker with ctx if it has a Start method
// (balancer.Starter): a metrics decorator, or another decorator with work
// of its own. Its error is returned, wrapped; health's own work is running
// by then, and Close stops both.
func (h *Balancer) Start(ctx context.Context) error {
	h.life.Lock()
	switch {
	case h.closed:
		h.life.Unlock()
		return fmt.Errorf("health: start: %w", balancer.ErrClosed)
	case h.running:
		h.life.Unlock()
		return fmt.Errorf("health: start: %w", balancer.ErrStarted)
	}
	h.running = true
	h.started.Store(true)
	h.routines.Add(1)
	go h.run(ctx.Done(), true, stoppedTimer())
	h.life.Unlock()

	h.mu.Lock()
	for _, n := range h.cur.Load().nodes {
		h.startProber(n)
	}
	h.mu.Unlock()

	if err := balancer.StartInner(ctx, h.inner); err != nil {
		return fmt.Errorf("health: start: the inner picker: %w", err)
	}
	return nil
}

// Close stops every goroutine the Balancer started and waits for them to
// return: probes in progress are cancelled through their context. Then it
// closes the inner picker, if that has a Close method (io.Closer), once:
// a later Close does not close it again. It returns the inner Close's
// error, wrapped. Pick, Done, Update and Apply keep working after Close,
// with no background work: call Apply to apply changes. Close is
// idempotent. It must not be called from OnChange.
func (h *Balancer) Close() error {
	h.shutdown()
	h.routines.Wait()
	h.life.Lock()
	done := h.innerClosed
	h.innerClosed = true
	h.life.Unlock()
	if done {
		return nil
	}
	if err := balancer.CloseInner(h.inner); err != nil {
		return fmt.Errorf("health: close: the inner picker: %w", err)
	}
	return nil
}

// Unwrap returns the picker health wraps, so that balancer.As finds it, or
// a layer inside it, through health: for its admin methods. Give the set
// to health's Update, never to the inner picker's, and Start and Close
// health, which start and close the inner picker.
func (h *Balancer) Unwrap() balancer.Picker { return h.inner }

func (h *Balancer) shutdown() {
	h.life.Lock()
	h.closed = true
	h.cancel()
	h.life.Unlock()
}
