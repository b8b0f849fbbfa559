package prequal

import (
	"context"
	"sync"
)

// ProbeNow runs one turn of the probe loop, as a tick does, and waits for
// the probes it sent, so that tests fill the pool without a running loop.
func (p *Picker) ProbeNow() {
	sem := make(chan struct{}, PoolSize)
	var probes sync.WaitGroup
	p.tick(context.Background(), sem, &probes)
	probes.Wait()
}
