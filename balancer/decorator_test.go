package balancer_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
)

// layer is a decorator with a name, for As to find.
type layer struct {
	name  string
	inner balancer.Picker
}

func (l *layer) Pick(req balancer.Request) (balancer.Backend, error) { return l.inner.Pick(req) }
func (l *layer) Unwrap() balancer.Picker                             { return l.inner }
func (l *layer) Name() string                                        { return l.name }

// opaque is a decorator without Unwrap: As cannot see past it.
type opaque struct{ balancer.Picker }

// core is an innermost picker.
type core struct{}

func (core) Pick(balancer.Request) (balancer.Backend, error) { return nil, balancer.ErrNoBackend }

func TestAs(t *testing.T) {
	inner := &layer{name: "inner", inner: core{}}
	outer := &layer{name: "outer", inner: inner}

	got, ok := balancer.As[*layer](outer)
	require.True(t, ok)
	assert.Same(t, outer, got, "the outermost match first")

	c, ok := balancer.As[core](outer)
	require.True(t, ok, "found through two layers")
	assert.Equal(t, core{}, c)

	named, ok := balancer.As[interface{ Name() string }](inner)
	require.True(t, ok, "T may be an interface")
	assert.Equal(t, "inner", named.Name())

	_, ok = balancer.As[*opaque](outer)
	assert.False(t, ok, "no layer is one")
	_, ok = balancer.As[core](&opaque{Picker: core{}})
	assert.False(t, ok, "no Unwrap, no way in")
	_, ok = balancer.As[core](nil)
	assert.False(t, ok, "nil is no layer")
	_, ok = balancer.As[core](&layer{name: "hollow"})
	assert.False(t, ok, "a decorator whose Unwrap returns nil ends the walk")
}
