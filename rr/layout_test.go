package rr

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// The Picker is laid out in whole cache lines: the snapshot pointer, read
// by every Pick, on the first; the counter, written by every Pick, alone
// on the second.
func TestLayout(t *testing.T) {
	assert.Zero(t, unsafe.Sizeof(Picker{})%64, "size")
	assert.Zero(t, unsafe.Offsetof(Picker{}.snap))
	assert.Equal(t, uintptr(64), unsafe.Offsetof(Picker{}.next))
}
