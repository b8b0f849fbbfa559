package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func runArgs(args ...string) (code int, stdout, stderr string) {
	var out, errs bytes.Buffer
	code = run(context.Background(), args, &out, &errs)
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
		{"hedge without retry", []string{"-scenarios", "tail", "-variants", "timeout+hedge"}, "budget and hedge need retry"},
		{"stall after the end", []string{"-scenarios", "stall", "-stages", "30s:10"}, "stall at 1m0s outside the scenario's 30s"},
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
		{"scale without live", []string{"-scale", "0.5"}, "-scale: only with -live"},
		{"zero scale", []string{"-live", "-scale", "0"}, "-scale: 0 is not in (0, 10]"},
		{"scale too large", []string{"-live", "-scale", "11"}, "-scale: 11 is not in (0, 10]"},
		{"too many live users", []string{"-live", "-users", "2001"}, "-live: steady peaks at 2001 users, more than the 2000"},
		{"scaled interval too short", []string{"-live", "-scale", "0.0001", "-scenarios", "failure", "-interval", "5s"}, "check interval"},
		// A profile is checked as given, before -duration and -users scale
		// it (scaling clamped a stage to 1ms and a count to 1).
		{"zero stage, scaled", []string{"-scenarios", "steady", "-algos", "rr", "-stages", "0s:10", "-duration", "1s"}, "stage 1: duration 0s is not positive"},
		{"negative stage, scaled", []string{"-scenarios", "steady", "-algos", "rr", "-stages", "2s:10,-1s:20", "-duration", "1s"}, "stage 2: duration -1s is not positive"},
		{"negative start", []string{"-scenarios", "steady", "-algos", "rr", "-stages", "-5,1s:10"}, "negative number of users -5"},
		{"negative target, scaled", []string{"-scenarios", "steady", "-algos", "rr", "-stages", "1s:10,1s:-5", "-users", "20"}, "stage 2: negative target -5"},
		{"profile too long", []string{"-scenarios", "steady", "-algos", "rr", "-stages", "2000000h:10,2000000h:10"}, "lasts more than 10000h"},
		{"duration too long", []string{"-scenarios", "steady", "-algos", "rr", "-duration", "10001h"}, "-duration: 10001h0m0s is more than 10000h0m0s"},
		{"think too long", []string{"-scenarios", "steady", "-algos", "rr", "-think", "10001h"}, "think time 10001h0m0s outside"},
		{"outage outside one scenario", []string{"-algos", "rr", "-backends", "50ms:down=2m30s,150ms"}, "burst: backend 1 (50ms): outage at 2m30s outside the scenario's 2m20s"},
		{"two backend lists", []string{"-backends", "50ms", "-backends-file", "x.csv"}, "-backends and -backends-file: give one"},
		{"log format alone", []string{"-log-format", "$upstream_addr $upstream_response_time"}, "-log-format: only with -backends-file"},
		{"no backends file", []string{"-backends-file", "testdata/none.csv"}, "no such file"},
		{"malformed backends file", []string{"-backends-file", "../../sim/testdata/latencies-bad.csv"}, `latencies-bad.csv: sim: bad scenario: line 4: "130.2ms" is not a number`},
		{"nginx log without its format", []string{"-backends-file", "../../sim/testdata/access.log"}, "want backend,latency_ms; for an nginx access log, give the log_format that wrote it with -log-format"},
		{"log format without upstream", []string{"-backends-file", "../../sim/testdata/access.log", "-log-format", "$remote_addr $status"}, "want $upstream_addr and $upstream_response_time"},
		{"zero max requests", []string{"-max-requests", "0"}, "-max-requests: 0 is not positive"},
		{"report delay too long", []string{"-scenarios", "hetero-95", "-report-delay", "2m"}, "report delay 2m0s outside [0, 1m0s]"},
		{"negative report delay", []string{"-report-delay", "-1s"}, "report delay -1s outside"},
		{"negative probe round trip", []string{"-probe-rtt", "-1ms"}, "probe round trip -1ms outside"},
		{"unknown group", []string{"-scenarios", "antagonists"}, `unknown scenario "antagonists"`},
		{"neighbour live", []string{"-live", "-scenarios", "antagonist-70", "-algos", "rr"}, "backend 1 (50ms#1) has a neighbour, which only the simulator plays"},
		{"load-aware live", []string{"-live", "-scenarios", "steady", "-algos", "rr,prequal"}, "prequal weighs load reports or probes"},
		{"neighbour without capacity", []string{"-scenarios", "steady", "-backends", "50ms:nb=1@1m"}, "a neighbour takes part of a capacity"},
		{"fleet with backends", []string{"-scenarios", "steady,zones", "-backends", "10ms"}, "-scenarios zones: it has backends and proxies of its own"},
		{"fleet live", []string{"-live", "-scenarios", "fleet"}, "fleet: zones, fleets of proxies and the locality and subset variants are simulated only"},
		{"locality live", []string{"-live", "-scenarios", "steady", "-variants", "locality"}, "simulated only"},
		{"probing picker in locality", []string{"-scenarios", "zones,hetero-70", "-duration", "5s"}, "zones: wrr-reported runs a loop of its own"},
		// A million users in every default scenario: hours, refused before
		// anything starts, with the estimate.
		{"too much work", []string{"-users", "1000000"}, "refusing to start: 120 runs would simulate up to 1.3e+11 requests (1000000 users at the peak)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runArgs(tc.args...)
			assert.Equal(t, 2, code)
			assert.Empty(t, out)
			assert.Contains(t, errs, tc.want)
		})
	}
}

// Values at the edge of what Validate accepts run rather than panic: a
// first send at u·Think/Users once overflowed.
func TestLongThink(t *testing.T) {
	code, out, errs := runArgs("-scenarios", "steady", "-algos", "rr", "-think", "3000h", "-users", "1000")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "think 3000h0m0s")
}

func TestHelp(t *testing.T) {
	code, _, errs := runArgs("-help")
	assert.Equal(t, 0, code)
	for _, want := range []string{"-backends", "steady, burst, failure, steady-cap", "lrt-naive", "-proxies",
		"antagonist-70, antagonist-95, hetero-70, hetero-95", "wrr-reported, leastconn-reports, prequal", "-report-delay", "nb=TAKES@AT",
		"stall, storm, tail", "timeout, budget, hedge", "stall=AT", "tail=SHARE%xFACTOR"} {
		assert.Contains(t, errs, want)
	}
}

// Two runs with one seed print the same bytes; the tables name every
// algorithm asked for; the progress line goes to stderr.
func TestRun(t *testing.T) {
	args := []string{"-scenarios", "steady,failure", "-algos", "rr,leastconn,lrt", "-duration", "20s", "-proxies", "1,10", "-seed", "7"}
	code, out, errs := runArgs(args...)
	require.Equal(t, 0, code, errs)
	assert.NotContains(t, errs, "\r", "stderr is not a terminal: no redrawn line")
	assert.Contains(t, errs, "lbsim: 30 runs in ")
	for _, want := range []string{"steady, 1 proxy:", "steady, 10 proxies:", "failure, 10 proxies:", "active+passive+retry", "leastconn", "lrt"} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "maglev")
	code, again, _ := runArgs(args...)
	require.Equal(t, 0, code)
	assert.Equal(t, out, again, "same seed, same bytes")
}

// The load scenarios run on request, a name standing for both shares,
// with every algorithm, catalog.LoadAware's included, unless -algos says
// otherwise; the verdict sets the report-driven and probing pickers
// against the local ones.
func TestLoadScenarios(t *testing.T) {
	code, out, errs := runArgs("-scenarios", "hetero,antagonist-95", "-duration", "10s", "-proxies", "1,10")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, "lbsim: 78 runs in ", "3 scenarios, 2 proxy counts, 13 algorithms")
	for _, want := range []string{"hetero-70, 1 proxy: 126 users", "hetero-95, 10 proxies: 171 users", "antagonist-95, 1 proxy: 160 users",
		"backends 50ms:c=16:nb=8@3.333s,3x50ms:c=16", "probes/req", "\nprequal ", "\nwrr-reported ", "\nleastconn-reports ",
		"  report-driven or probing against local: ", "summary, 10 proxies, over 3 scenarios (hetero-70, hetero-95, antagonist-95)"} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "steady")
	assert.Regexp(t, `\nprequal +[0-9.]+ .* 1\.0[0-9]\n`, out, "one probe a pick, about one a request")
	assert.Regexp(t, `\nlrt +[0-9.]+ .* 0\.00\n`, out, "no probe")

	// Named algorithms only; the delay and the round trip reach the JSON.
	path := filepath.Join(t.TempDir(), "out.json")
	code, out, errs = runArgs("-scenarios", "hetero-95", "-duration", "10s", "-algos", "lrt,wrr-reported", "-report-delay", "2s", "-probe-rtt", "3ms", "-json", path)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, "lbsim: 2 runs in ")
	assert.Contains(t, out, "report-driven or probing against local: wrr-reported's p99 is ")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(data), `"report_delay_ms": 2000`)
	assert.Contains(t, string(data), `"probe_rtt_ms": 3`)
	assert.Contains(t, string(data), `"versus": "report-driven or probing against local: wrr-reported's p99 is `)
}

// The fleet scenarios run by name, each once with its own proxies
// whatever -proxies says, their figures in the table and the contrast in
// the verdict.
func TestFleetScenarios(t *testing.T) {
	code, out, errs := runArgs("-scenarios", "zones,fleet", "-algos", "rr,leastconn", "-duration", "6s", "-proxies", "1,2")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, "lbsim: 8 runs in ")
	for _, want := range []string{
		"zones, 10 proxies: 700 users for 6s, think 100ms, checks every 5s, proxies in zones a×5, b×3, c×2, 2ms more across zones",
		"  backends 7x10ms:c=4:s=0.5:down=3s:name=a:zone=a,7x10ms:c=4:s=0.5:name=a:zone=a,10x10ms:c=4:s=0.5:name=b:zone=b,",
		"in zone % before", "max load % during", "leastconn with locality against without: in zone % before: ",
		"fleet, 100 proxies: 1000 users for 6s, think 100ms, subsets of 20",
		"  backends 300x10ms:c=4:s=0.5\n",
		"conns/backend", "rr with subset against without: conns/backend: 6.7 against 100.0; conns max: 7 against 100;",
	} {
		assert.Contains(t, out, want)
	}
	assert.NotContains(t, out, "zones, 2 proxies")
	assert.NotContains(t, out, "fleet, 1 proxy")
}

// The slow scenarios run on request, each under its own variants, with
// the columns and the verdict's lines of their own, and a summary over
// them alone.
func TestSlowScenarios(t *testing.T) {
	code, out, errs := runArgs("-scenarios", "stall,storm,tail", "-algos", "rr,leastconn,lrt")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, "lbsim: 30 runs in ", "stall 4 variants, storm 3, tail 3; 3 algorithms")
	for _, want := range []string{"stall, 1 proxy: 100 users for 3m0s", "backends 50ms:w=6:stall=1m0s,150ms:w=3",
		"storm, 1 proxy:", ":503=1m0s-1m30s", "tail, 1 proxy:", "50ms:w=6:tail=1%x20",
		"att/req", "att/req during", "max wait s", "p99.9 ms",
		"\nactive+passive+retry+timeout+budget+hedge  lrt ", "\nnone ",
		"  load amplification during the outage, by variant (the algorithms' range): none ",
		"  the longest wait, by variant (the algorithms' range): active+passive+retry ",
		"  lowest p99.9: ", "summary, 1 proxy, over 3 scenarios (stall, storm, tail; "} {
		assert.Contains(t, out, want)
	}
	assert.Regexp(t, `judged under active\+passive\+retry\+timeout\+budget\n.*\n  load amplification during the outage, by variant \(the algorithms' range\): `+
		`none 0\.99[0-9] to 0\.99[0-9], active\+passive\+retry 2\.99[0-9] to 2\.99[0-9], active\+passive\+retry\+timeout\+budget 1\.20[0-9] to 1\.2[01][0-9]\n`,
		out, "storm: the retries triple the load, the budget bounds it, and the verdict judges the budget")
	assert.NotContains(t, out, "steady")
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

// A short live run prints the live tables, said to be live and converted,
// then the simulated-vs-live table, with a progress line on stderr.
//
// At scale 2 the 50 ms backend answers in 100 ms of real time, so that
// the rig's own overhead stays far from the refusal (half of it) even
// under -race on a loaded machine, where smaller scales were refused. The
// run lasts 1 s of the scenario, 2 s of real time.
func TestLive(t *testing.T) {
	path := filepath.Join(t.TempDir(), "live.html")
	code, out, errs := runArgs("-live", "-scale", "2", "-scenarios", "steady", "-algos", "rr", "-duration", "1s", "-users", "10", "-html", path)
	require.Equal(t, 0, code, errs)
	page, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Contains(t, string(page), "<h3>Simulated vs live</h3>", "the page has the side-by-side table")
	assert.Contains(t, string(page), "<svg")
	assert.Contains(t, errs, "lbsim: live: 1 run, one at a time, about 2s; up to 33 requests/s of real time")
	assert.NotContains(t, errs, "\r", "stderr is not a terminal: no redrawn line")
	assert.Contains(t, errs, "lbsim: 1 live run in ")
	assert.Contains(t, errs, "lbsim: live: the rig adds ", "the rig's overhead, measured first")
	assert.True(t, strings.HasPrefix(out, "source: live, "), out)
	assert.Contains(t, out, "every duration ×2")
	assert.Contains(t, out, "steady, 1 proxy: 10 users for 1s, think 100ms")
	assert.Contains(t, out, "steady, 1 proxy: simulated vs live (ratio = live/sim)")
	assert.Contains(t, out, "RPS sim  RPS live  ratio")
	assert.Contains(t, out, "\nrr ")
}

// A scale at which the rig's own overhead is a large part of the
// backends' latencies is refused before anything is simulated: at 0.001
// the 50 ms backend answers in 50 µs of real time, less than a request
// through the proxy takes on loopback, and the message says which scale
// would do.
func TestLiveRefused(t *testing.T) {
	code, out, errs := runArgs("-live", "-scale", "0.001", "-scenarios", "steady", "-algos", "rr", "-duration", "10s", "-users", "5")
	assert.Equal(t, 2, code)
	assert.Empty(t, out)
	assert.Contains(t, errs, "lbsim: live: the rig adds ")
	assert.Regexp(t, `lbsim: -live: sim: bad scenario: at scale 0.001 the rig's own overhead, \S+ a request at light load \(measured just now\), is \d+% of the fastest backend's 50µs of real time: live figures would mean nothing; -scale \S+ or more would keep it under 10%`, errs)
	assert.NotContains(t, errs, "runs in", "nothing was simulated")
}

// An interrupted live run stops and says so, with status 1.
func TestLiveInterrupted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var out, errs bytes.Buffer
	start := time.Now()
	code := run(ctx, []string{"-live", "-scale", "1", "-scenarios", "steady", "-algos", "rr", "-duration", "1m", "-users", "5"}, &out, &errs)
	assert.Equal(t, 1, code)
	assert.Contains(t, errs.String(), "context deadline exceeded")
	assert.Less(t, time.Since(start), 20*time.Second, "it stopped long before the minute")
	assert.Empty(t, out.String())
}

// An interrupt stops a simulation too: the runs under way stop, no other
// starts, and lbsim says so with status 1 instead of printing the tables.
// The two runs asked for would take seconds each (5 hours of the steady
// scenario, some 5 million requests).
func TestInterrupted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	var out, errs bytes.Buffer
	start := time.Now()
	code := run(ctx, []string{"-scenarios", "steady", "-algos", "rr,leastconn", "-duration", "5h"}, &out, &errs)
	took := time.Since(start)
	assert.Equal(t, 1, code)
	assert.Contains(t, errs.String(), "lbsim: stopped: context deadline exceeded")
	assert.Less(t, took, 10*time.Second, "it stopped long before the runs' end")
	assert.Empty(t, out.String())
}

// On a terminal the progress line is redrawn in place and erased at the
// end; elsewhere lbsim writes a plain line when plainEvery has passed, and
// never a carriage return.
func TestProgress(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(0, 0)
	p := &progress{w: &buf, tty: true, every: plainEvery, now: func() time.Time { return now }}
	p.show("lbsim: 1/3 steady/none/rr")
	p.show("lbsim: 2/3 x")
	p.clear()
	first, second := "lbsim: 1/3 steady/none/rr", "lbsim: 2/3 x"
	assert.Equal(t, "\r"+first+"\r"+second+strings.Repeat(" ", len(first)-len(second))+"\r"+strings.Repeat(" ", len(second))+"\r", buf.String(),
		"each line drawn over the last, padded to cover it, then erased")

	buf.Reset()
	p = &progress{w: &buf, every: plainEvery, now: func() time.Time { return now }, last: now}
	for i := range 30 {
		now = now.Add(time.Second)
		p.show(fmt.Sprintf("lbsim: %d/30", i+1))
	}
	p.clear()
	assert.Equal(t, "lbsim: 10/30\nlbsim: 20/30\nlbsim: 30/30\n", buf.String(), "a line every 10 s")
}

// -json and -csv write what the tables print, and more, to files that
// read back: the command line, every flag, each figure.
func TestJSONAndCSV(t *testing.T) {
	dir := t.TempDir()
	jsonPath, csvPath := filepath.Join(dir, "out.json"), filepath.Join(dir, "out.csv")
	code, out, errs := runArgs("-scenarios", "steady", "-algos", "rr,lrt", "-duration", "10s", "-json", jsonPath, "-csv", csvPath)
	require.Equal(t, 0, code, errs)
	data, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var doc struct {
		Format  string            `json:"format"`
		Command []string          `json:"command"`
		Flags   map[string]string `json:"flags"`
		Reports []struct {
			Scenarios []struct {
				Results []struct {
					Algorithm string             `json:"algorithm"`
					Figures   map[string]float64 `json:"figures"`
				} `json:"results"`
			} `json:"scenarios"`
		} `json:"reports"`
	}
	require.NoError(t, json.Unmarshal(data, &doc))
	assert.Equal(t, "lbsim/1", doc.Format)
	assert.Equal(t, []string{"lbsim", "-scenarios", "steady", "-algos", "rr,lrt", "-duration", "10s", "-json", jsonPath, "-csv", csvPath}, doc.Command)
	assert.Equal(t, "1", doc.Flags["seed"], "defaults too")
	assert.Equal(t, "10s", doc.Flags["duration"])
	res := doc.Reports[0].Scenarios[0].Results
	require.Len(t, res, 2)
	rps := strconv.FormatFloat(res[1].Figures["rps"], 'f', 1, 64)
	assert.Contains(t, out, "\nlrt  ", "the table")
	assert.Regexp(t, `\nlrt +`+regexp.QuoteMeta(rps)+` `, out, "the table prints the JSON's figure")

	f, err := os.Open(csvPath)
	require.NoError(t, err)
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	require.Len(t, rows, 1+2*(1+4), "header, then per run a row and 4 backends")
	assert.Equal(t, "lrt", rows[6][4])
	v, err := strconv.ParseFloat(rows[6][6], 64)
	require.NoError(t, err)
	assert.Equal(t, res[1].Figures["rps"], v)
}

// -backends-file gives the comparison for measured latencies: a CSV, or
// an nginx access log with its log_format.
func TestBackendsFile(t *testing.T) {
	code, out, errs := runArgs("-scenarios", "steady", "-algos", "rr,leastconn", "-duration", "10s", "-backends-file", "../../sim/testdata/latencies.csv")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "per backend (share of attempts, mean and peak in flight): api-2/api-1/api-3")
	assert.Regexp(t, `backends [0-9.]+ms:samples=[0-9]+:name=api-2,`, out)

	format, err := os.ReadFile("../../sim/testdata/access.log.format")
	require.NoError(t, err)
	code, out, errs = runArgs("-scenarios", "steady", "-algos", "rr", "-duration", "10s",
		"-backends-file", "../../sim/testdata/access.log", "-log-format", strings.TrimSpace(string(format)))
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "10.0.0.1:8080/10.0.0.2:8080/10.0.0.3:8080")
}
