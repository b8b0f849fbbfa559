package balancer

// Admin is implemented by pickers from which an operator can take a
// backend out by hand: health.Balancer. In a stack of decorators it is
// found through their Unwrap (subset's returns the picker inside), as
// examples/kubernetes finds it to drain terminating pods. Each method
// returns an error wrapping ErrUnknownBackend for an ID the picker does
// not know.
type Admin interface {
	// Drain stops new requests to the backend; those in flight finish.
	Drain(id string) error
	// Maintenance takes the backend out as Drain does and pauses its
	// probes.
	Maintenance(id string) error
	// Enable ends Drain or Maintenance.
	Enable(id string) error
}
