package xdspolicy_test

import (
	"encoding/json"
	"testing"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	wrrlocalityv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/wrr_locality/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/examples/grpc/lbpolicy"
	"github.com/lbkit/lbkit/examples/grpcxds/xdspolicy"
)

// badConfigs are lbkit policy configs the policy refuses: each makes a
// client NACK the Cluster with the policy's own reason, and makes
// xdspolicy.Policy refuse it first.
var badConfigs = []struct {
	name, policy, config, reason string
}{
	{"ring without a key", lbpolicy.RingHash, `{"boundedLoad": 1.25}`, `"key" is required`},
	{"bounded load below 1", lbpolicy.RingHash, `{"key": "x-user", "boundedLoad": 0.5}`, "lbkit_ring_hash config"},
	{"misspelt field", lbpolicy.LeastConn, `{"failureCode": ["UNAVAILABLE"]}`, `unknown field "failureCode"`},
	{"key on a policy without affinity", lbpolicy.LeastConn, `{"key": "x-user"}`, `"key" is only for the hash policies`},
	{"OK as a failure", lbpolicy.RoundRobin, `{"failureCodes": ["OK"]}`, `"failureCodes" cannot list OK`},
	{"negative penalty", lbpolicy.ReportedWRR, `{"errorUtilizationPenalty": -1}`, `"errorUtilizationPenalty" -1 is negative`},
}

// Policy puts the config in a TypedStruct whose type_url ends in the
// policy's name, and the JSON a client makes of it is the config.
func TestPolicy(t *testing.T) {
	tests := []struct {
		name, config, want string
	}{
		{lbpolicy.LeastConn, "", `{}`},
		{lbpolicy.RoundRobin, `{}`, `{}`},
		{lbpolicy.RingHash, `{"key": "x-user", "boundedLoad": 1.25}`, `{"boundedLoad": 1.25, "key": "x-user"}`},
		{lbpolicy.LeastConn, `{"failureCodes": ["UNAVAILABLE", 4]}`, `{"failureCodes": ["UNAVAILABLE", 4]}`},
		{lbpolicy.ReportedWRR, `{"blackoutPeriod": "0.5s", "errorUtilizationPenalty": 1.5}`,
			`{"blackoutPeriod": "0.5s", "errorUtilizationPenalty": 1.5}`},
	}
	for _, tt := range tests {
		t.Run(tt.name+" "+tt.config, func(t *testing.T) {
			p, err := xdspolicy.Policy(tt.name, tt.config)
			require.NoError(t, err)
			ext := p.GetTypedExtensionConfig()
			assert.Equal(t, tt.name, ext.GetName())
			ts := &xdstypev3.TypedStruct{}
			require.NoError(t, ext.GetTypedConfig().UnmarshalTo(ts))
			assert.Equal(t, "type.googleapis.com/"+tt.name, ts.GetTypeUrl())
			js, err := json.Marshal(ts.GetValue()) // as gRPC's converter does
			require.NoError(t, err)
			assert.JSONEq(t, tt.want, string(js))
		})
	}
}

// Policy refuses what a client would NACK, an unknown name, and a config
// that is not a JSON object, each with an error that says which.
func TestPolicyRefuses(t *testing.T) {
	for _, tt := range badConfigs {
		t.Run(tt.name, func(t *testing.T) {
			p, err := xdspolicy.Policy(tt.policy, tt.config)
			require.Error(t, err)
			assert.Nil(t, p)
			assert.Contains(t, err.Error(), "xdspolicy: a client would refuse this Cluster: lbpolicy: "+tt.policy+" config: ")
			assert.Contains(t, err.Error(), tt.reason)
		})
	}
	others := []struct{ name, policy, config, want string }{
		{"unknown name", "lbkit_nope", "", `xdspolicy: "lbkit_nope" is not one of lbpolicy's built-in policies`},
		{"gRPC's own name", "round_robin", "", `"round_robin" is not one of lbpolicy's built-in policies`},
		{"an array", lbpolicy.LeastConn, `[]`, "xdspolicy: lbkit_least_conn config [] is not a JSON object"},
		{"not JSON", lbpolicy.LeastConn, `{`, "xdspolicy: lbkit_least_conn config { is not a JSON object"},
	}
	for _, tt := range others {
		t.Run(tt.name, func(t *testing.T) {
			_, err := xdspolicy.Policy(tt.policy, tt.config)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	_, err := xdspolicy.PolicyFor(nil, "")
	assert.EqualError(t, err, "xdspolicy: nil Builder")
}

// WRRLocality wraps the entries, in order, as wrr_locality's endpoint
// picking policy; RoundRobin is Envoy's extension, with an empty config.
func TestWRRLocalityAndRoundRobin(t *testing.T) {
	p, err := xdspolicy.Policy(lbpolicy.LeastConn, "")
	require.NoError(t, err)
	wl, err := xdspolicy.WRRLocality(p, xdspolicy.RoundRobin())
	require.NoError(t, err)
	assert.Equal(t, "envoy.load_balancing_policies.wrr_locality", wl.GetTypedExtensionConfig().GetName())
	m := &wrrlocalityv3.WrrLocality{}
	require.NoError(t, wl.GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(m))
	inner := m.GetEndpointPickingPolicy().GetPolicies()
	require.Len(t, inner, 2)
	assert.Equal(t, lbpolicy.LeastConn, inner[0].GetTypedExtensionConfig().GetName())
	rr := inner[1].GetTypedExtensionConfig().GetTypedConfig()
	assert.Equal(t, "type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin", rr.GetTypeUrl())
	assert.Empty(t, rr.GetValue())
}
