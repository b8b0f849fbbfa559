package balancer_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
)

// placed is a Backend with a locality and no weight.
type placed struct {
	id  string
	loc balancer.Locality
}

func (p placed) ID() string                  { return p.id }
func (p placed) Locality() balancer.Locality { return p.loc }

// wanderer answers a valid locality the first time it is asked, and
// another one afterwards.
type wanderer struct {
	calls int
}

func (w *wanderer) ID() string { return "w:1" }
func (w *wanderer) Locality() balancer.Locality {
	w.calls++
	if w.calls == 1 {
		return balancer.Locality{Zone: "a", Priority: 1}
	}
	return balancer.Locality{Zone: "elsewhere", Priority: -5}
}

func TestLocalityOf(t *testing.T) {
	assert.Equal(t, balancer.Locality{}, balancer.LocalityOf(plain("a")), "a Backend without Locality is at the zero Locality")
	l := balancer.Locality{Zone: "us-east-1a", Priority: 2}
	assert.Equal(t, l, balancer.LocalityOf(placed{"a", l}))
	assert.Equal(t, balancer.Locality{}, balancer.LocalityOf(balancer.NewEndpoint("a", 1)))
}

func TestEndpointAt(t *testing.T) {
	e := balancer.NewEndpoint("10.0.0.1:80", 3)
	l := balancer.Locality{Zone: "b", Priority: 1}
	at := e.At(l)
	assert.Equal(t, l, at.Locality())
	assert.Equal(t, "10.0.0.1:80", at.ID())
	assert.Equal(t, 3, at.Weight())
	assert.Equal(t, balancer.Locality{}, e.Locality(), "At returns a copy: the Endpoint is immutable")

	var nilEndpoint *balancer.Endpoint
	assert.NotPanics(t, func() {
		assert.Equal(t, balancer.Locality{}, nilEndpoint.Locality())
		assert.Nil(t, nilEndpoint.At(l))
	})

	ws := balancer.WeightedEndpoints(balancer.Weighted{Addr: "a:1", Weight: 2, Locality: l})
	assert.Equal(t, l, balancer.LocalityOf(ws[0]))
}

func TestValidateLocality(t *testing.T) {
	tests := []struct {
		name string
		set  []balancer.Backend
		msg  string // "" for a valid set
	}{
		{"zero locality", []balancer.Backend{placed{"a", balancer.Locality{}}}, ""},
		{"top priority", []balancer.Backend{placed{"a", balancer.Locality{Zone: "z", Priority: balancer.MaxPriority}}}, ""},
		{"negative priority", []balancer.Backend{plain("x"), placed{"a", balancer.Locality{Priority: -1}}},
			`balancer: locality out of range: "a" at position 1 has priority -1, want 0 to 127`},
		{"priority too large", []balancer.Backend{balancer.NewEndpoint("a", 1).At(balancer.Locality{Priority: 8080})},
			`balancer: locality out of range: "a" at position 0 has priority 8080, want 0 to 127`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := balancer.Validate(tt.set)
			if tt.msg == "" {
				assert.NoError(t, err)
				return
			}
			assert.True(t, errors.Is(err, balancer.ErrBadLocality), "got %v", err)
			assert.EqualError(t, err, tt.msg)
		})
	}
}

func TestNewSetReadsLocalityOnce(t *testing.T) {
	w := &wanderer{}
	s, err := balancer.NewSet([]balancer.Backend{plain("a"), w})
	require.NoError(t, err)
	assert.Equal(t, 1, w.calls, "locality read once")
	assert.Equal(t, []balancer.Locality{{}, {Zone: "a", Priority: 1}}, s.Localities, "the value validated is the value kept")
}
