package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseFlags(t *testing.T) {
	tests := []struct {
		args    string
		wantErr string
	}{
		{"", ""},
		{"-policy lbkit_ring_hash", ""},
		{"-policy lbkit_wrr -weights 3,1,1", ""},
		{"-policy nope", `-policy "nope": want one of lbkit_round_robin`},
		{"-policy lbkit_maglev -config {}", `"key" is required`},
		{"-config {\"kye\":\"x\"}", `unknown field "kye"`},
		{"-delays 2ms,fast", `-delays: "fast" is not a duration`},
		{"-delays 1ms,-1ms", `-delays: "-1ms"`},
		{"-weights 1,2", `-weights: 2 weights for 3 servers`},
		{"-weights 1,0,1", `-weights: "0" is not a weight`},
		{"-rpcs 0", `-rpcs 0`},
		{"-concurrency 0", `-concurrency 0`},
		{"-stop 3", `-stop 3: want a server from 0 to 2`},
		{"-not-serving -2", `-not-serving -2`},
		{"-timeout 0s", `-timeout 0s`},
		{"extra", `unexpected arguments`},
		{"-bogus", `flag provided but not defined`},
	}
	for _, tt := range tests {
		t.Run(tt.args, func(t *testing.T) {
			o, err := parseFlags(strings.Fields(tt.args))
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.NotNil(t, o)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

// TestRun runs the demo as a user would first try it, and with a server
// stopped and one marked NOT_SERVING: no RPC may fail.
func TestRun(t *testing.T) {
	for _, args := range []string{
		"-rpcs 120 -delays 1ms,1ms,10ms",
		"-rpcs 150 -policy lbkit_ring_hash -stop 0 -delays 1ms,1ms,1ms",
		"-rpcs 150 -policy lbkit_wrr -weights 2,1,1 -not-serving 1 -delays 1ms,1ms,1ms",
	} {
		t.Run(args, func(t *testing.T) {
			o, err := parseFlags(strings.Fields(args))
			require.NoError(t, err)
			var out strings.Builder
			assert.NoError(t, run(o, &out))
			t.Log(out.String())
			assert.Contains(t, out.String(), ", 0 failed")
		})
	}
}
