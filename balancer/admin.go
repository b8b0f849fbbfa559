package balancer

// Admin is implemented by pickers from which an operator can take a
// backend out by hand: health.Balancer, and the decorators that pass the
// calls on to one inside them (package subset, package locality), so that
// a stack of decorators can be driven from the top. Each method returns
// an error for an ID the picker does not know.
type Admin interface {
	// Drain stops new requests to the backend; those in flight finish.
	Drain(id string) error
	// Maintenance takes the backend out as Drain does and pauses its
	// probes.
	Maintenance(id string) error
	// Enable ends Drain or Maintenance.
	Enable(id string) error
}
