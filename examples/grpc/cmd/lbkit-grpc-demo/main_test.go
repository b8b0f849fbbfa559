package main

import (
	"fmt"
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
		{"-policy lbkit_wrr_orca -capacities 4,4,1", ""},
		{"-capacities 4,1", `-capacities: 2 capacities for 3 servers`},
		{"-capacities 4,0,1", `-capacities: "0" is not a capacity`},
		{"-rpcs 0", `-rpcs 0`},
		{"-concurrency 0", `-concurrency 0`},
		{"-stop 3", `-stop 3: want a server from 0 to 2`},
		{"-kill -2", `-kill -2: want a server from 0 to 2`},
		{"-kill 1 -stop 1", `one server cannot stop both ways`},
		{"-not-serving -2", `-not-serving -2`},
		{"-timeout 0s", `-timeout 0s`},
		{"-stall 3", `-stall 3: want a server from 0 to 2`},
		{"-stall 1 -kill 1", `-stall 1: that server already stops`},
		{"-deadline 0s", `-deadline 0s: want 1ms or more`},
		{"-eject -policy lbkit_maglev -config {\"key\":\"x\"}", `-eject with lbkit_maglev`},
		{"-eject -policy lbkit_lrt", ""},
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

// TestRun runs the demo as a user would first try it, with a server
// stopped gracefully and one marked NOT_SERVING: no RPC may fail. (-kill is
// run by TestKill.)
func TestRun(t *testing.T) {
	for _, args := range []string{
		"-rpcs 120 -delays 1ms,1ms,10ms",
		"-rpcs 150 -policy lbkit_ring_hash -stop 0 -delays 1ms,1ms,1ms",
		"-rpcs 150 -policy lbkit_least_conn -stop 2 -not-serving 1 -delays 1ms,1ms,1ms",
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

// TestKill kills a server mid-run: the demo succeeds, and any RPC that
// failed is one in flight on the dead server whose reply had begun, at
// most one per caller, which the demo reports.
func TestKill(t *testing.T) {
	o, err := parseFlags(strings.Fields("-rpcs 300 -concurrency 8 -policy lbkit_round_robin -kill 0 -delays 2ms,2ms,2ms"))
	require.NoError(t, err)
	var out strings.Builder
	require.NoError(t, run(o, &out))
	t.Log(out.String())
	assert.Contains(t, out.String(), "killing s0 after")
	if !strings.Contains(out.String(), ", 0 failed") {
		assert.Contains(t, out.String(), "had begun their reply when it died")
	}
}

// TestORCA runs the demo's servers reporting ORCA load through grpc-go's
// server recorder, with capacities 4, 4 and 1 for the same work: the
// third reports four times the utilisation for the RPCs it holds, and
// lbkit_wrr_orca, once its blackout has passed, sends it a quarter of
// what each other gets (A58's weight, qps / utilisation, is capacity /
// latency here).
func TestORCA(t *testing.T) {
	o, err := parseFlags(strings.Fields(`-rpcs 4000 -concurrency 8 -policy lbkit_wrr_orca -capacities 4,4,1 -delays 2ms,2ms,2ms` +
		` -config {"blackoutPeriod":"0.3s","weightUpdatePeriod":"0.1s"}`))
	require.NoError(t, err)
	var out strings.Builder
	require.NoError(t, run(o, &out))
	t.Log(out.String())
	assert.Contains(t, out.String(), ", 0 failed")
	var shares [3]float64
	for i := range shares {
		_, after, ok := strings.Cut(out.String(), fmt.Sprintf("s%d  delay 2ms    share", i))
		require.True(t, ok, out.String())
		_, err := fmt.Sscanf(after, "%f%%", &shares[i])
		require.NoError(t, err)
	}
	assert.Less(t, shares[2], shares[0]/2, "the third server, reporting 4x the utilisation, gets less")
}

// TestStall stalls a server mid-run, as a server that accepts RPCs and
// never answers them (its health service still says SERVING): its RPCs
// fail DEADLINE_EXCEEDED at the service config's timeout, which gRPC does
// not retry past. With -eject, lbkit's health decorator ejects it after
// five such failures in a row, so only the RPCs in flight on it then, about
// one per caller, fail; round robin without it would keep sending a third
// of the RPCs there.
func TestStall(t *testing.T) {
	o, err := parseFlags(strings.Fields("-rpcs 3000 -concurrency 8 -policy lbkit_round_robin -stall 0 -deadline 200ms -eject -delays 1ms,1ms,1ms"))
	require.NoError(t, err)
	var out strings.Builder
	require.NoError(t, run(o, &out))
	t.Log(out.String())
	assert.Contains(t, out.String(), "stalling s0 after")
	assert.Contains(t, out.String(), "up -> ejected (consecutive failures)")
	var failed int
	for line := range strings.SplitSeq(out.String(), "\n") {
		if strings.HasPrefix(line, "policy ") {
			_, rest, _ := strings.Cut(line, ", ")
			_, err := fmt.Sscanf(rest, "%d failed", &failed)
			require.NoError(t, err, line)
		}
	}
	assert.LessOrEqual(t, failed, 2*o.concurrency, "only the RPCs in flight on the stalled server, about one per caller")
}
