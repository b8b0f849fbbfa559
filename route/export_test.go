package route

import "github.com/lbkit/lbkit/balancer"

// SetLabel replaces how b reads a backend's label value, so that the
// conformance kit's backends, which carry no labels, can be spread over
// sets.
func SetLabel(b *Balancer, f func(balancer.Backend) string) { b.labelOf = f }
