package balancer_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
)

func TestHashKeyOf(t *testing.T) {
	e := balancer.NewEndpoint("10.0.0.1:80", 1)
	assert.Equal(t, "10.0.0.1:80", balancer.HashKeyOf(e), "no key: the ID")
	assert.Equal(t, "10.0.0.1:80", balancer.HashKeyOf(e.WithHashKey("")), "empty key: the ID")
	k := e.WithHashKey("cache-1")
	assert.Equal(t, "cache-1", balancer.HashKeyOf(k))
	assert.Equal(t, "10.0.0.1:80", k.ID(), "the ID stays")
	assert.Empty(t, e.HashKey(), "WithHashKey returns a copy")
	assert.Equal(t, "cache-1", k.At(balancer.Locality{Zone: "a"}).WithLabels(map[string]string{"x": "y"}).HashKey(), "kept by At and WithLabels")
	var nilE *balancer.Endpoint
	assert.Nil(t, nilE.WithHashKey("k"))
	assert.Empty(t, nilE.HashKey())
}

func TestHashKeys(t *testing.T) {
	set, err := balancer.NewSet(balancer.Endpoints("a:1", "b:1"))
	require.NoError(t, err)
	keys, err := balancer.HashKeys(set)
	require.NoError(t, err)
	assert.Equal(t, set.IDs, keys)

	set, err = balancer.NewSet([]balancer.Backend{
		balancer.NewEndpoint("a:1", 1).WithHashKey("x"),
		balancer.NewEndpoint("b:1", 1),
	})
	require.NoError(t, err)
	keys, err = balancer.HashKeys(set)
	require.NoError(t, err)
	assert.Equal(t, []string{"x", "b:1"}, keys)
	assert.Equal(t, []string{"a:1", "b:1"}, set.IDs, "the Set's IDs are not written")

	for _, bs := range [][]balancer.Backend{
		{balancer.NewEndpoint("a:1", 1).WithHashKey("x"), balancer.NewEndpoint("b:1", 1).WithHashKey("x")},
		{balancer.NewEndpoint("a:1", 1).WithHashKey("b:1"), balancer.NewEndpoint("b:1", 1)},
		{balancer.NewEndpoint("a:1", 1), balancer.NewEndpoint("b:1", 1).WithHashKey("a:1")},
	} {
		set, err := balancer.NewSet(bs)
		require.NoError(t, err)
		_, err = balancer.HashKeys(set)
		require.ErrorIs(t, err, balancer.ErrDuplicateHashKey)
		assert.Contains(t, err.Error(), `"a:1"`)
		assert.Contains(t, err.Error(), `"b:1"`)
	}
}
