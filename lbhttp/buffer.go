package lbhttp

import (
	"net/http/httputil"
	"sync"
)

// BufferSize is the size of BufferPool's buffers: 32 KB, the buffer
// httputil.ReverseProxy allocates for every response body it copies when
// it has no BufferPool.
const BufferSize = 32 << 10

// BufferPool is an httputil.BufferPool of BufferSize buffers, reused
// through a sync.Pool. NewProxy sets one on its ReverseProxy; give one to a
// ReverseProxy of your own:
//
//	proxy.BufferPool = new(lbhttp.BufferPool)
//
// Without one, ReverseProxy allocates and clears 32 KB per request, most
// of what a small request allocates: through BenchmarkProxy's bare
// ReverseProxy, 45 KB a request without a pool, 12 KB with one. Get and
// Put allocate
// nothing once the pool is warm (the buffers are kept by pointer, so that
// Put does not box the slice). The zero value is ready to use; a
// BufferPool is safe for concurrent use and must not be copied.
type BufferPool struct {
	p sync.Pool // of *[BufferSize]byte
}

var _ httputil.BufferPool = (*BufferPool)(nil)

// Get returns a buffer of BufferSize bytes, from the pool or new.
func (bp *BufferPool) Get() []byte {
	if b, ok := bp.p.Get().(*[BufferSize]byte); ok {
		return b[:]
	}
	return make([]byte, BufferSize)
}

// Put returns b to the pool. A buffer of another size than BufferSize
// (not one Get returned) is dropped.
func (bp *BufferPool) Put(b []byte) {
	if len(b) == BufferSize {
		bp.p.Put((*[BufferSize]byte)(b))
	}
}
