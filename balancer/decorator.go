package balancer

import "context"

// Starter is implemented by pickers and decorators that have background
// work: health's probes and its applier. Start begins it; it ends when ctx
// ends or when the picker's Close (io.Closer) is called. A decorator has
// Start whether or not it has work of its own, and passes it on (see
// Unwrapper), so that a caller starts the outermost layer only.
type Starter interface {
	Start(ctx context.Context) error
}

// Unwrapper is implemented by decorators: Unwrap returns the picker the
// decorator wraps, so that what only an inner layer offers (health's Drain,
// Maintenance, Enable and View; a metrics decorator's own methods) can be
// found through any stack of decorators with As. It is the analogue of an
// error's Unwrap and of the Unwrap of the http.ResponseWriter wrappers that
// http.ResponseController looks through.
//
// The picker Unwrap returns is for its admin methods: Pick, Done and
// Update go to the outermost layer, which passes them on.
type Unwrapper interface {
	Unwrap() Picker
}

// As returns the first layer of p that is a T: p itself, else what p's
// Unwrap returns, and so on through the stack of decorators. It reports
// false if no layer is a T. Like errors.AsType, it finds a layer by its
// type, whatever sits around it:
//
//	lb, _ := m.Wrap(h) // metrics around health around an algorithm
//	if h, ok := balancer.As[*health.Balancer](lb); ok {
//		err = h.Drain("10.0.0.1:8080")
//	}
//
// T may be an interface: As[interface{ View() health.View }](lb) finds the
// first layer with that method.
//
// Cost: one type assertion per layer; not for the Pick path.
func As[T any](p Picker) (T, bool) {
	for p != nil {
		if t, ok := p.(T); ok {
			return t, true
		}
		u, ok := p.(Unwrapper)
		if !ok {
			break
		}
		p = u.Unwrap()
	}
	var zero T
	return zero, false
}
