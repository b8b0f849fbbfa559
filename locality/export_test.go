package locality

import "github.com/lbkit/lbkit/balancer"

// SetLocate makes b read localities from f instead of the backends, so
// that the conformance kit's backends, which have none, can run in zones.
func SetLocate(b *Balancer, f func(balancer.Backend) balancer.Locality) { b.locate = f }

// Pickers returns how many pickers b holds, busy or idle.
func Pickers(b *Balancer) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.groups)
}

// Child returns the picker of zone at priority, or nil if b has none.
func Child(b *Balancer, priority int, zone string) balancer.Balancer {
	b.mu.Lock()
	defer b.mu.Unlock()
	if g := b.groups[groupKey{priority, zone}]; g != nil {
		return g.child
	}
	return nil
}
