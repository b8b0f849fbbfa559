package lbpolicy_test

import (
	"encoding/json"
	"strings"
	"testing"

	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/grpc/lbpolicy"
	"github.com/lbkit/lbkit/rr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/experimental/balancer/weight"
	"google.golang.org/grpc/resolver"
)

func builder(t *testing.T, name string) *lbpolicy.Builder {
	t.Helper()
	for _, b := range lbpolicy.Builders() {
		if b.Name() == name {
			return b
		}
	}
	t.Fatalf("no built-in policy %q", name)
	return nil
}

func TestParseConfig(t *testing.T) {
	tests := []struct {
		policy, js string
		wantErr    string // "" for valid
		key        string
		codes      []codes.Code // as given; nil for the defaults
	}{
		{policy: lbpolicy.RoundRobin, js: ``},
		{policy: lbpolicy.RoundRobin, js: `null`},
		{policy: lbpolicy.LeastConn, js: `{}`},
		{policy: lbpolicy.LeastConn, js: `{"failureCodes": ["UNAVAILABLE", 4]}`,
			codes: []codes.Code{codes.Unavailable, codes.DeadlineExceeded}},
		{policy: lbpolicy.RingHash, js: `{"key": "x-user"}`, key: "x-user"},
		{policy: lbpolicy.RingHash, js: `{"key": "x-user", "boundedLoad": 1.25}`, key: "x-user"},
		{policy: lbpolicy.IPHash, js: `{"key": "x-client-ip"}`, key: "x-client-ip"},
		{policy: lbpolicy.ReportedWRR, js: `{}`},
		{policy: lbpolicy.ReportedWRR, js: `{"blackoutPeriod": "0s", "weightExpirationPeriod": "1m", "weightUpdatePeriod": "0.5s", "errorUtilizationPenalty": 0}`},
		{policy: lbpolicy.ReportedWRR, js: `{"weightUpdatePeriod": "0.1s"}`},
		{policy: lbpolicy.LeastConnORCA, js: `{}`},
		{policy: lbpolicy.RingHash, js: `{"requestHashHeader": "x-session"}`},
		{policy: lbpolicy.RingHash, js: `{"requestHashHeader": "x-session", "boundedLoad": 1.25}`},
		{policy: lbpolicy.Maglev, js: `{"requestHashHeader": "X-Session.ID_2"}`},

		{policy: lbpolicy.RingHash, js: `{}`, wantErr: `"key" is required`},
		{policy: lbpolicy.Maglev, js: `{"boundedLoad": 1.5, "key": "k"}`, wantErr: `"boundedLoad" is only for lbkit_ring_hash`},
		{policy: lbpolicy.WeightedRoundRobin, js: `{"key": "x-user"}`, wantErr: `"key" is only for the hash policies`},
		{policy: lbpolicy.RingHash, js: `{"key": "k", "boundedLoad": 1}`, wantErr: `want a factor above 1`},
		{policy: lbpolicy.RingHash, js: `{"key": "k", "boundedLoad": 101}`, wantErr: `want a factor above 1`},
		{policy: lbpolicy.RoundRobin, js: `{"failureCodes": ["OK"]}`, wantErr: `cannot list OK`},
		{policy: lbpolicy.RoundRobin, js: `{"failureCodes": ["CANCELLED"]}`, wantErr: `cannot list Canceled`},
		{policy: lbpolicy.RoundRobin, js: `{"failureCodes": ["NOPE"]}`, wantErr: `invalid code`},
		{policy: lbpolicy.RoundRobin, js: `{"failureCodes": [17]}`, wantErr: `invalid code`},
		{policy: lbpolicy.RoundRobin, js: `{"choices": 2}`, wantErr: `unknown field "choices"`},
		{policy: lbpolicy.RoundRobin, js: `{"key": 3`, wantErr: `lbpolicy: lbkit_round_robin config`},
		{policy: lbpolicy.LeastConnORCA, js: `{"blackoutPeriod": "1s"}`, wantErr: `only for lbkit_wrr_orca`},
		{policy: lbpolicy.ReportedWRR, js: `{"blackoutPeriod": 10}`, wantErr: `a duration is a string`},
		{policy: lbpolicy.ReportedWRR, js: `{"blackoutPeriod": "-1s"}`, wantErr: `not a duration of 0 or more`},
		{policy: lbpolicy.ReportedWRR, js: `{"weightExpirationPeriod": "0s"}`, wantErr: `must be more than 0`},
		{policy: lbpolicy.ReportedWRR, js: `{"errorUtilizationPenalty": -1}`, wantErr: `is negative`},
		{policy: lbpolicy.ReportedWRR, js: `{"weightUpdatePeriod": "0.05s"}`, wantErr: `"weightUpdatePeriod" 50ms is below 100ms`},
		{policy: lbpolicy.ReportedWRR, js: `{"weightUpdatePeriod": "0s"}`, wantErr: `"weightUpdatePeriod" 0s is below 100ms`},
		{policy: lbpolicy.ReportedWRR, js: `{"enableOobLoadReport": true}`, wantErr: `unknown field`},
		{policy: lbpolicy.ReportedWRR, js: `{"key": "x"}`, wantErr: `"key" is only for the hash policies`},
		{policy: lbpolicy.RingHash, js: `{"requestHashHeader": "x-session-bin"}`, wantErr: `is a binary header`},
		{policy: lbpolicy.Maglev, js: `{"requestHashHeader": "x session"}`, wantErr: `"x session" is not a header name`},
		{policy: lbpolicy.Maglev, js: `{"requestHashHeader": ":authority"}`, wantErr: `is not a header name`},
		{policy: lbpolicy.RingHash, js: `{"requestHashHeader": "x-a", "key": "x-b"}`, wantErr: `give one`},
		{policy: lbpolicy.RingHash, js: `{"requestHashHeader": "x-a", "boundedLoad": 1}`, wantErr: `want a factor above 1`},
		{policy: lbpolicy.IPHash, js: `{"requestHashHeader": "x-client-ip"}`, wantErr: `"requestHashHeader" is only for lbkit_ring_hash and lbkit_maglev`},
		{policy: lbpolicy.RoundRobin, js: `{"requestHashHeader": "x-a"}`, wantErr: `"requestHashHeader" is only for`},
	}
	for _, tt := range tests {
		t.Run(tt.policy+" "+tt.js, func(t *testing.T) {
			got, err := builder(t, tt.policy).ParseConfig([]byte(tt.js))
			if tt.wantErr != "" {
				require.ErrorIs(t, err, lbk.ErrBadOption)
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.True(t, strings.HasPrefix(err.Error(), "lbpolicy: "+tt.policy+" config: "), err.Error())
				return
			}
			require.NoError(t, err)
			cfg := got.(*lbpolicy.Config)
			assert.Equal(t, tt.key, cfg.Key)
			assert.Equal(t, tt.codes, cfg.FailureCodes, "defaults are applied, not written into the config")

			// A parent policy passes its child's config on as the JSON of
			// the parsed config, which the child parses again (gRPC's xDS
			// policies do, from the Cluster down to the endpoint picking
			// policy): it must come back the same.
			js, err := json.Marshal(cfg)
			require.NoError(t, err)
			again, err := builder(t, tt.policy).ParseConfig(js)
			require.NoError(t, err, "its own JSON %s", js)
			assert.Equal(t, cfg, again, "its own JSON %s", js)
		})
	}
}

func TestBuilders(t *testing.T) {
	want := []string{
		lbpolicy.RoundRobin, lbpolicy.WeightedRoundRobin, lbpolicy.LeastConn, lbpolicy.LeastResponseTime,
		lbpolicy.IPHash, lbpolicy.RingHash, lbpolicy.Maglev, lbpolicy.ReportedWRR, lbpolicy.LeastConnORCA,
	}
	var got []string
	for _, b := range lbpolicy.Builders() {
		got = append(got, b.Name())
		assert.Equal(t, strings.ToLower(b.Name()), b.Name())
		assert.True(t, strings.HasPrefix(b.Name(), "lbkit_"))
		reg, ok := balancer.Get(b.Name()).(*lbpolicy.Builder)
		if assert.True(t, ok, "Register (in TestMain) registered %s", b.Name()) {
			assert.Equal(t, b.Name(), reg.Name())
		}
	}
	assert.Equal(t, want, got)
}

func TestNewBuilder(t *testing.T) {
	newRR := func() lbk.Balancer { return rr.New() }
	tests := []struct {
		name    string
		f       func() lbk.Balancer
		wantErr string
	}{
		{"my_rr", newRR, ""},
		{"", newRR, "empty name"},
		{"My_RR", newRR, `name "My_RR" is not lower case`},
		{"my_rr", nil, "nil newBalancer"},
	}
	for _, tt := range tests {
		t.Run(tt.name+tt.wantErr, func(t *testing.T) {
			b, err := lbpolicy.NewBuilder(tt.name, tt.f)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				assert.Nil(t, b)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.name, b.Name())
			cfg, err := b.ParseConfig([]byte(`{"key": "x-anything"}`))
			require.NoError(t, err, "a custom policy takes a key if given one")
			assert.Equal(t, "x-anything", cfg.(*lbpolicy.Config).Key)
			_, err = b.ParseConfig([]byte(`{"boundedLoad": 2}`))
			assert.Error(t, err)
		})
	}
}

func TestWeight(t *testing.T) {
	ep := resolver.Endpoint{Addresses: []resolver.Address{{Addr: "10.0.0.1:50051"}}}
	tests := []struct {
		name string
		ep   resolver.Endpoint
		want int
	}{
		{"unset", ep, 1},
		{"SetWeight", lbpolicy.SetWeight(ep, 7), 7},
		{"SetWeight out of range is kept, to be refused", lbpolicy.SetWeight(ep, 0), 0},
		{"gRPC's attribute", weight.Set(ep, weight.EndpointInfo{Weight: 5}), 5},
		{"gRPC's attribute, 0 is unset", weight.Set(ep, weight.EndpointInfo{Weight: 0}), 1},
		{"gRPC's attribute, capped", weight.Set(ep, weight.EndpointInfo{Weight: 1 << 31}), lbk.MaxWeight},
		{"SetWeight wins", lbpolicy.SetWeight(weight.Set(ep, weight.EndpointInfo{Weight: 5}), 2), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, lbpolicy.WeightOf(tt.ep))
		})
	}
	assert.Equal(t, 1, lbpolicy.WeightOf(ep), "SetWeight copies; the original is unchanged")
}
