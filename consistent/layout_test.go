package consistent

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
)

// The pickers are laid out in whole cache lines, so that what Pick reads
// shares a line with nothing the caller allocated next to it, and the
// bounded ring's total, written by every Pick and Done, stays off the line
// of the snapshot pointer.
func TestLayout(t *testing.T) {
	assert.Zero(t, unsafe.Sizeof(Maglev{})%64, "Maglev size")
	assert.Zero(t, unsafe.Sizeof(Ring{})%64, "Ring size")
	assert.Zero(t, unsafe.Offsetof(Ring{}.snap))
	assert.Equal(t, uintptr(64), unsafe.Offsetof(Ring{}.total), "the total starts the second line")
	assert.Zero(t, unsafe.Offsetof(Maglev{}.snap))
}
