package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseStat(t *testing.T) {
	// A command name with a space and a parenthesis, as /proc shows it.
	line := "4242 (nginx: (worker) x) S 4241 4241 4241 0 -1 4194624 100 0 0 0 1234 567 3 4 20 0 1 0 100 1000 10 18446744073709551615"
	st, err := parseStat(line)
	require.NoError(t, err)
	assert.Equal(t, 4241, st.ppid)
	assert.Equal(t, 12340*time.Millisecond, st.user)
	assert.Equal(t, 5670*time.Millisecond, st.sys)

	for _, bad := range []string{"", "4242 nginx S 1", "4242 (x) S 1 2", "4242 (x) S one 2 3 4 5 6 7 8 9 10 11 12 13"} {
		_, err := parseStat(bad)
		assert.Error(t, err, "%q", bad)
	}
}

// The tool's own process, read from /proc, agrees with getrusage on how
// much CPU a busy loop in it spent: the loop runs until getrusage counts
// 300 ms more (however long a loaded machine makes that take), and the
// figure from /proc must be the same within two clock ticks and 10%.
func TestProcessTreeCPU(t *testing.T) {
	rusage := func() time.Duration {
		var ru syscall.Rusage
		require.NoError(t, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	before, err := processTreeCPU(os.Getpid())
	require.NoError(t, err)
	r0 := rusage()
	for deadline := time.Now().Add(time.Minute); rusage()-r0 < 300*time.Millisecond && time.Now().Before(deadline); {
	}
	r1 := rusage()
	after, err := processTreeCPU(os.Getpid())
	require.NoError(t, err)
	want := r1 - r0
	require.GreaterOrEqual(t, want, 300*time.Millisecond, "the loop never got 300 ms of CPU in a minute")
	d := after.sub(before)
	assert.InDelta(t, float64(want), float64(d.user+d.sys), float64(2*clockTick+want/10),
		"/proc says %v, getrusage %v", d.user+d.sys, want)

	_, err = processTreeCPU(1 << 30)
	assert.Error(t, err, "no such process")
}

// run sends exactly -n measured requests after the warm-up, reports them,
// and appends a line that report reads back.
func TestRun(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	tsv := filepath.Join(t.TempDir(), "runs.tsv")
	var out, errOut bytes.Buffer
	args := []string{"run", "-url", srv.URL, "-n", "3000", "-c", "8", "-warmup", "500", "-pid", "me=" + strconv.Itoa(os.Getpid()), "-label", "direct", "-tsv", tsv}
	code := run(context.Background(), args, &out, &errOut)
	require.Equal(t, 0, code, "stderr: %s", errOut.String())
	assert.Equal(t, int64(3500), hits.Load(), "warm-up and measured requests")
	assert.Contains(t, out.String(), "direct: 3000 requests, 8 connections")
	assert.Contains(t, out.String(), "me (pid ")

	b, err := os.ReadFile(tsv)
	require.NoError(t, err)
	fields := strings.Split(strings.TrimSpace(string(b)), "\t")
	require.Len(t, fields, 12)
	assert.Equal(t, []string{"direct", "me", "3000", "8"}, fields[:4])

	out.Reset()
	require.Equal(t, 0, run(context.Background(), []string{"report", tsv}, &out, &errOut), errOut.String())
	assert.Contains(t, out.String(), "direct")
}

// A backend that answers 500 makes the run fail with exit status 1 and
// says how many requests failed.
func TestRunErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	defer srv.Close()
	var errOut bytes.Buffer
	code := run(context.Background(), []string{"run", "-url", srv.URL, "-n", "100", "-c", "2", "-warmup", "0"}, io.Discard, &errOut)
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut.String(), "100 of 100 requests failed")
	assert.Contains(t, errOut.String(), "500 Internal Server Error")
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short.tsv")
	require.NoError(t, os.WriteFile(short, []byte("a\tb\n"), 0o644))
	notNum := filepath.Join(dir, "nan.tsv")
	require.NoError(t, os.WriteFile(notNum, []byte("a\tb\t1\t1\t1\tfast\t1\t1\t1\t1\t1\t0\n"), 0o644))
	empty := filepath.Join(dir, "empty.tsv")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	tests := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage"},
		{[]string{"fly"}, 2, `unknown command "fly"`},
		{[]string{"run"}, 2, "-url is required"},
		{[]string{"run", "-url", "http://x/", "-n", "4", "-c", "8"}, 2, "-c 8 is more than -n 4"},
		{[]string{"run", "-url", "http://x/", "-pid", "me=zero"}, 2, "want name=PID"},
		{[]string{"backends"}, 2, "-listen is required"},
		{[]string{"report"}, 2, "want one file"},
		{[]string{"report", short}, 1, "short.tsv:1: want 12 tab-separated fields, got 2"},
		{[]string{"report", notNum}, 1, `nan.tsv:1: field 6: "fast" is not a positive number`},
		{[]string{"report", empty}, 1, "no runs"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.args), func(t *testing.T) {
			var errOut bytes.Buffer
			assert.Equal(t, tt.code, run(context.Background(), tt.args, io.Discard, &errOut))
			assert.Contains(t, errOut.String(), tt.want)
		})
	}
}

// The bare proxy sends requests to its backends in turn, Go's defaults or
// tuned, and a bad backend is a usage error.
func TestBareProxy(t *testing.T) {
	var hits [2]atomic.Int64
	var hosts []string
	for i := range hits {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits[i].Add(1)
			_, _ = io.WriteString(w, "ok")
		}))
		t.Cleanup(s.Close)
		hosts = append(hosts, strings.TrimPrefix(s.URL, "http://"))
	}
	for _, tuned := range []bool{false, true} {
		rp, base, err := bareProxy(strings.Join(hosts, ","), tuned, io.Discard)
		require.NoError(t, err)
		t.Cleanup(base.CloseIdleConnections)
		assert.Equal(t, tuned, rp.BufferPool != nil)
		front := httptest.NewServer(rp)
		t.Cleanup(front.Close)
		for range 4 {
			resp, err := http.Get(front.URL)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Equal(t, "ok", string(body))
		}
	}
	assert.EqualValues(t, 4, hits[0].Load())
	assert.EqualValues(t, 4, hits[1].Load())

	_, _, err := bareProxy("127.0.0.1:1,nonsense", false, io.Discard)
	var ue usageError
	assert.ErrorAs(t, err, &ue)
}

// TestReportRatios checks how report sets a row beside the first: the
// median of the rounds' ratios when every row has a run in each round, so
// that a round the machine slowed throughout counts as one; the ratio of
// the medians when the rows have different numbers of runs.
func TestReportRatios(t *testing.T) {
	line := func(label string, cpu float64) string {
		return fmt.Sprintf("%s\tp\t100\t1\t1.000\t100.0\t1.000\t2.000\t%.2f\t1.000\t1.000\t0\n", label, cpu)
	}
	tests := []struct {
		name string
		runs []string
		want string // the second row's CPU ratio
	}{
		// Rounds (10, 12), (20, 21), (30, 33): ratios 1.2, 1.05 and 1.1,
		// where the medians, 20 and 21, would say 1.05.
		{"paired", []string{line("a", 10), line("b", 12), line("a", 20), line("b", 21), line("a", 30), line("b", 33)}, "1.10"},
		// a: 10, 20, 30 (median 20); b: 11 and 33 (median 22).
		{"unpaired", []string{line("a", 10), line("b", 11), line("a", 20), line("a", 30), line("b", 33)}, "1.10"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tsv := filepath.Join(t.TempDir(), "runs.tsv")
			require.NoError(t, os.WriteFile(tsv, []byte(strings.Join(tt.runs, "")), 0o644))
			var out bytes.Buffer
			require.NoError(t, report([]string{tsv}, &out))
			rows := strings.Split(strings.TrimSpace(out.String()), "\n")
			require.Len(t, rows, 3)
			f := strings.Fields(rows[2])
			assert.Equal(t, tt.want, f[8], "%s", out.String())
		})
	}
}
