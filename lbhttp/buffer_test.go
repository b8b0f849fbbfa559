package lbhttp_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/lbkit/lbkit/lbhttp"
)

// TestBufferPoolAllocs checks that Get gives BufferSize bytes, that a buffer
// put back is handed out again without allocating, and that a buffer of
// another size is not kept.
func TestBufferPoolAllocs(t *testing.T) {
	var bp lbhttp.BufferPool
	b := bp.Get()
	assert.Len(t, b, lbhttp.BufferSize)
	bp.Put(b)
	bp.Put(make([]byte, 10)) // dropped
	got := testing.AllocsPerRun(1000, func() {
		b := bp.Get()
		if len(b) != lbhttp.BufferSize {
			panic("short buffer")
		}
		bp.Put(b)
	})
	skipCountUnderRace(t, got)
	assert.Zero(t, got)
}
