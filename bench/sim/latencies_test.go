package sim_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/bench/sim"
)

func open(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

// A CSV of measured latencies gives one backend per name, in order of
// first appearance, with every sample and their median; the simulator
// then draws service times from the samples: a backend serving one
// request at a time, with its users never thinking, has the samples'
// mean as its mean service time.
func TestReadLatencies(t *testing.T) {
	bs, err := sim.ReadLatencies(open(t, "latencies.csv"))
	require.NoError(t, err)
	require.Len(t, bs, 3)
	var names []string
	total := 0
	for _, b := range bs {
		names = append(names, b.Name)
		total += len(b.Samples)
		assert.Equal(t, b.Samples[(len(b.Samples)-1)/2], b.Latency, "%s: the median", b.Name)
	}
	assert.Equal(t, []string{"api-2", "api-1", "api-3"}, names, "as they first appear")
	assert.Equal(t, 600, total, "one sample per line but the header")

	fast := bs[1] // 20 ms, with a 2% tail at 400 to 600 ms
	var mean time.Duration
	for _, d := range fast.Samples {
		mean += d
	}
	mean /= time.Duration(len(fast.Samples))
	fast.Capacity = 1
	sc := sim.Scenario{Name: "one", Backends: []sim.Backend{fast}, Users: 1, Stages: []sim.Stage{{10 * time.Minute, 1}}}
	r, err := sim.Simulate(sc, sim.None, algo(t, "rr"), 1, 1)
	require.NoError(t, err)
	within(t, r.Mean.Seconds(), mean.Seconds(), 0.05, "mean service time drawn from the samples")
	assert.Greater(t, r.P99, 3*r.Median, "the samples' 2% tail shows in the p99")
	assert.Contains(t, sc.DescribeBackends(), ":samples=")
}

// An nginx access log, with the log_format that wrote it, gives one
// backend per upstream address and one sample per upstream tried, retries
// included; a line that nginx answered itself gives none.
func TestReadAccessLog(t *testing.T) {
	format, err := os.ReadFile(filepath.Join("testdata", "access.log.format"))
	require.NoError(t, err)
	bs, err := sim.ReadAccessLog(open(t, "access.log"), strings.TrimSpace(string(format)))
	require.NoError(t, err)
	require.Len(t, bs, 3)
	samples := 0
	for _, b := range bs {
		samples += len(b.Samples)
		assert.Equal(t, b.Name, b.Addr, "an address names the backend and is its ID")
	}
	log, err := os.ReadFile(filepath.Join("testdata", "access.log"))
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	retried := strings.Count(string(log), ":8080, ")
	self := strings.Count(string(log), " - -\n")
	assert.Equal(t, len(lines)-self+retried, samples, "one sample per upstream tried")
	assert.Equal(t, "10.0.0.1:8080", bs[0].Name)
	assert.InDelta(t, 20, bs[0].Latency.Seconds()*1000, 3, "median of the 20 ms backend")
	assert.InDelta(t, 150, bs[2].Latency.Seconds()*1000, 20, "median of the 150 ms backend")

	sc := sim.Defaults(bs)[0]
	require.NoError(t, sc.Validate())
}

// Malformed input is refused with the line that is wrong, and wraps
// ErrScenario.
func TestReadLatenciesErrors(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"three fields", "backend,latency_ms\napi-1,10\napi-1,10,3\n", "line 3: \"api-1,10,3\": want backend,latency_ms"},
		{"not a number", "api-1,10\napi-2,fast\n", `line 2: "fast" is not a number`},
		{"negative", "api-1,-4\n", `line 1: latency "-4" outside`},
		{"NaN", "api-1,NaN\n", `line 1: latency "NaN" outside`},
		{"no name", "api-1,4\n,5\n", "line 2: empty backend name"},
		{"empty", "# nothing\n\n", "no latencies"},
		{"header only", "backend,latency_ms\n", "no latencies"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sim.ReadLatencies(strings.NewReader(tc.in))
			require.ErrorIs(t, err, sim.ErrScenario)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	bad, err := sim.ReadLatencies(open(t, "latencies-bad.csv"))
	require.ErrorIs(t, err, sim.ErrScenario)
	assert.Nil(t, bad)
	assert.Contains(t, err.Error(), `line 4: "130.2ms" is not a number`)

	const format = `$remote_addr [$time_local] "$request" $status $upstream_addr $upstream_response_time`
	for _, tc := range []struct {
		name, format, in, want string
	}{
		{"no upstream in format", `$remote_addr $status`, "", "want $upstream_addr and $upstream_response_time"},
		{"no match", format, "1.2.3.4 [x] \"GET /\" 200 10.0.0.1:80 0.010\nhello\n", "line 2: does not match the log format"},
		{"lists differ", format, "1.2.3.4 [x] \"GET /\" 502 10.0.0.1:80, 10.0.0.2:80 0.010\n", "line 1: 2 upstream addresses"},
		{"bad time", format, "1.2.3.4 [x] \"GET /\" 200 10.0.0.1:80 0.010\n1.2.3.4 [x] \"GET /\" 200 10.0.0.1:80 1.2.3\n", "line 2: upstream_response_time: \"1.2.3\" is not a number"},
		{"nothing upstream", format, "1.2.3.4 [x] \"GET /\" 200 - -\n", "no upstream response times"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sim.ReadAccessLog(strings.NewReader(tc.in), tc.format)
			require.ErrorIs(t, err, sim.ErrScenario)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	bs, err := sim.ReadAccessLog(strings.NewReader("1.2.3.4 [x] \"GET / x\" 200 10.0.0.1:80 : 10.0.0.2:80 0.010 : 0.020\n"), format)
	require.NoError(t, err, "an internal redirect lists upstreams with \" : \"")
	assert.Len(t, bs, 2)
	_, err = sim.ParseBackends("50ms:samples=3")
	assert.ErrorContains(t, err, "-backends-file")
}
