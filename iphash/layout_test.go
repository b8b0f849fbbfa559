package iphash

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// The Picker fills one cache line, so that the snapshot pointer every Pick
// reads shares it with nothing the caller allocated next to it.
func TestLayout(t *testing.T) {
	assert.Equal(t, uintptr(64), unsafe.Sizeof(Picker{}))
	assert.Zero(t, unsafe.Offsetof(Picker{}.snap))
}
