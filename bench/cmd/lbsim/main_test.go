package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func runArgs(args ...string) (code int, stdout, stderr string) {
	var out, errs bytes.Buffer
	code = run(args, &out, &errs)
	return code, out.String(), errs.String()
}

func TestBadFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // in the message on stderr
	}{
		{"unknown flag", []string{"-nope"}, "flag provided but not defined"},
		{"argument", []string{"steady"}, `unexpected argument "steady"`},
		{"unknown scenario", []string{"-scenarios", "steady,calm"}, `unknown scenario "calm"`},
		{"unknown algorithm", []string{"-algos", "random"}, `unknown algorithm "random"`},
		{"bad variant", []string{"-variants", "active+magic"}, `variant "active+magic"`},
		{"bad proxies", []string{"-proxies", "1,0"}, `-proxies: "0"`},
		{"proxies not a number", []string{"-proxies", "ten"}, `-proxies: "ten"`},
		{"negative duration", []string{"-duration", "-1s"}, "-duration"},
		{"bad duration", []string{"-duration", "soon"}, "invalid value"},
		{"zero users", []string{"-users", "0"}, "-users: 0"},
		{"negative think", []string{"-think", "-1ms"}, "-think"},
		{"zero interval", []string{"-interval", "0s"}, "-interval"},
		{"malformed backends", []string{"-backends", "50ms:w"}, `option "w": want key=value`},
		{"bad latency", []string{"-backends", "fast"}, "latency"},
		{"invalid backend", []string{"-backends", "50ms:j=60ms"}, "jitter 60ms outside"},
		{"malformed stages", []string{"-stages", "3m"}, "want DURATION:TARGET"},
		{"stage without users", []string{"-stages", "0,1m:0"}, "no users"},
		{"kill after the end", []string{"-scenarios", "failure", "-stages", "30s:10"}, "outside the scenario"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runArgs(tc.args...)
			assert.Equal(t, 2, code)
			assert.Empty(t, out)
			assert.Contains(t, errs, tc.want)
		})
	}
}

func TestHelp(t *testing.T) {
	code, _, errs := runArgs("-help")
	assert.Equal(t, 0, code)
	for _, want := range []string{"-backends", "steady, burst, failure, steady-cap", "lrt-naive", "-proxies"} {
		assert.Contains(t, errs, want)
	}
}

// Two runs with one seed print the same bytes; the tables name every
// algorithm asked for; the progress line goes to stderr.
func TestRun(t *testing.T) {
	args := []string{"-scenarios", "steady,failure", "-algos", "rr,leastconn,lrt", "-duration", "20s", "-proxies", "1,10", "-seed", "7"}
	code, out, errs := runArgs(args...)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, "\rlbsim: 1/30 ")
	assert.Contains(t, errs, "lbsim: 30 runs in ")
	for _, want := range []string{"steady, 1 proxy:", "steady, 10 proxies:", "failure, 10 proxies:", "active+passive+retry", "leastconn", "lrt"} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "maglev")
	code, again, _ := runArgs(args...)
	require.Equal(t, 0, code)
	assert.Equal(t, out, again, "same seed, same bytes")
}

func TestMarkdownAndHTML(t *testing.T) {
	path := filepath.Join(t.TempDir(), "report.html")
	code, out, errs := runArgs("-scenarios", "burst", "-algos", "wrr", "-duration", "5s", "-users", "20", "-markdown", "-html", path)
	require.Equal(t, 0, code, errs)
	assert.True(t, strings.HasPrefix(out, "### burst, 1 proxy\n"), out)
	assert.Contains(t, out, "| algorithm | RPS |")
	page, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(page), "<svg")
	assert.NotContains(t, string(page), "<script")
	for _, external := range []string{"src=", "<link", `href="http`, "url("} {
		assert.NotContains(t, string(page), external, "no external asset")
	}
}

func TestOverrides(t *testing.T) {
	code, out, errs := runArgs("-scenarios", "steady", "-algos", "rr", "-backends", "20ms:c=2,20ms:name=b", "-stages", "0,2s:4,2s:4",
		"-think", "0s", "-variants", "retry")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "users 0 → 4 over 2s → 4 over 2s (4s), think 0s")
	assert.Contains(t, out, "backends 20ms:c=2,20ms:name=b")
	assert.Contains(t, out, "20ms/b")
	assert.Contains(t, out, "\nretry    rr ")
}

func TestUnwritableHTML(t *testing.T) {
	code, _, errs := runArgs("-scenarios", "steady", "-algos", "rr", "-duration", "1s", "-html", filepath.Join(t.TempDir(), "no", "such", "dir.html"))
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "no such file or directory")
}
