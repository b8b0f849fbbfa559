package lbhttp_test

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/lbhttp"
)

// envoyLoad is Envoy's example report (test/common/orca/orca_parser_test.cc:
// cpu 0.7, application 0.8, mem 0.9, eps 2, rps_fractional 1000, named
// foo 123 and bar 0.2), as ParseLoad's fixed fields hold it.
var envoyLoad = balancer.Load{CPU: 0.7, Application: 0.8, Memory: 0.9, EPS: 2, RPS: 1000}

// binGolden is a serialised OrcaLoadReport made by the proto library
// (google.golang.org/protobuf, deterministic marshal, in examples/grpc's
// module): cpu 0.7, mem 0.9, rps 5, request_cost {db: 3}, utilization
// {gpu: 0.5}, rps_fractional 1000, eps 2, named_metrics {foo: 123,
// latency_ms: 12.5, rif: 7}, application 0.8.
const binGolden = "CWZmZmZmZuY/Ec3MzMzMzOw/GAUiDQoCZGIRAAAAAAAACEAqDgoDZ3B1EQAAAAAAAOA/MQAAAAAAQI9AOQAAAAAAAABAQg4KA2ZvbxEAAAAAAMBeQEIVCgpsYXRlbmN5X21zEQAAAAAAAClAQg4KA3JpZhEAAAAAAAAcQEmamZmZmZnpPw=="

func fixed(l balancer.Load) balancer.Load {
	l.Named = nil
	return l
}

func TestParseLoad(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		want  balancer.Load
		named map[string]float64 // looked up through Named; nil: Named must be nil
	}{
		{
			name:  "envoy text",
			in:    "TEXT cpu_utilization:0.7,application_utilization:0.8,mem_utilization:0.9,rps_fractional:1000,eps:2,named_metrics.foo:123,named_metrics.bar:0.2",
			want:  envoyLoad,
			named: map[string]float64{"foo": 123, "bar": 0.2},
		},
		{
			name:  "envoy json",
			in:    `JSON {"cpu_utilization": 0.7, "application_utilization": 0.8, "mem_utilization": 0.9, "rps_fractional": 1000, "eps": 2, "named_metrics": {"foo": 123,"bar": 0.2}}`,
			want:  envoyLoad,
			named: map[string]float64{"foo": 123, "bar": 0.2},
		},
		{
			name: "text with spaces and equals",
			in:   "TEXT  cpu_utilization = 0.25 , , rps_fractional=10\t",
			want: balancer.Load{CPU: 0.25, RPS: 10},
		},
		{
			name:  "text in-flight and latency",
			in:    "TEXT named_metrics.rif:3,named_metrics.latency_ms:4.5",
			want:  balancer.Load{InFlight: 3, Latency: 4500 * time.Microsecond},
			named: map[string]float64{"rif": 3, "latency_ms": 4.5},
		},
		{
			name:  "json camel case and maps",
			in:    `JSON {"cpuUtilization":0.5,"rpsFractional":2e1,"requestCost":{"db":1},"utilization":{"gpu":0.1},"namedMetrics":{"q":-1}}`,
			want:  balancer.Load{CPU: 0.5, RPS: 20},
			named: map[string]float64{"q": -1},
		},
		{
			name: "json deprecated integer rps",
			in:   `JSON {"rps": 7}`,
			want: balancer.Load{RPS: 7},
		},
		{
			name: "json rps_fractional wins over rps",
			in:   `JSON {"rps": 7, "rps_fractional": 7.5}`,
			want: balancer.Load{RPS: 7.5},
		},
		{
			name: "empty text",
			in:   "TEXT ",
			want: balancer.Load{},
		},
		{
			name: "empty json",
			in:   "JSON {}",
			want: balancer.Load{},
		},
		{
			name:  "bin",
			in:    "BIN " + binGolden,
			want:  balancer.Load{CPU: 0.7, Memory: 0.9, Application: 0.8, RPS: 1000, EPS: 2, InFlight: 7, Latency: 12500 * time.Microsecond},
			named: map[string]float64{"foo": 123, "rif": 7, "latency_ms": 12.5},
		},
		{
			name:  "bin unpadded",
			in:    "BIN " + base64.RawStdEncoding.EncodeToString(mustDecode(t, binGolden)),
			want:  balancer.Load{CPU: 0.7, Memory: 0.9, Application: 0.8, RPS: 1000, EPS: 2, InFlight: 7, Latency: 12500 * time.Microsecond},
			named: map[string]float64{"foo": 123},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := lbhttp.ParseLoad(tt.in)
			require.NoError(t, err)
			assert.Equal(t, tt.want, fixed(got))
			if tt.named == nil {
				assert.Nil(t, got.Named)
				return
			}
			require.NotNil(t, got.Named)
			for k, v := range tt.named {
				x, ok := got.Metric(k)
				assert.True(t, ok, k)
				assert.InDelta(t, v, x, 1e-12, k)
			}
			_, ok := got.Metric("absent")
			assert.False(t, ok)
		})
	}
}

func mustDecode(t *testing.T, s string) []byte {
	b, err := base64.StdEncoding.DecodeString(s)
	require.NoError(t, err)
	return b
}

// Every refusal wraps balancer.ErrBadLoad and returns the zero Load.
func TestParseLoadRefuses(t *testing.T) {
	tests := []struct{ name, in string }{
		{"no format", "cpu_utilization:0.7"},
		{"unknown format", "BAD random-value"},
		{"empty", ""},
		{"lower-case format", "text cpu_utilization:0.7"},
		{"quoted value", `TEXT cpu_utilization:"0.7"`},
		{"nan", "TEXT cpu_utilization:NaN"},
		{"inf", "TEXT cpu_utilization:inf"},
		{"overflow", "TEXT cpu_utilization:1e400"},
		{"hex", "TEXT cpu_utilization:0x1p-2"},
		{"duplicate", "TEXT cpu_utilization:0.7,cpu_utilization:0.8"},
		{"duplicate named", "TEXT named_metrics.foo:123,named_metrics.dup:1,named_metrics.dup:0.2"},
		{"empty named key", "TEXT named_metrics.:123"},
		{"unsupported name", "TEXT cpu_utilization:0.7,unsupported_metric:0.8"},
		{"not a pair", "TEXT not-a-list-of-key-value-pairs"},
		{"empty value", "TEXT cpu_utilization:"},
		{"negative", "TEXT eps:-1"},
		{"negative rif", "TEXT named_metrics.rif:-1"},
		{"memory above 1", "TEXT mem_utilization:1.5"},
		{"latency out of range", "TEXT named_metrics.latency_ms:1e300"},
		{"json not json", "JSON not-a-valid-json-string"},
		{"json unknown field", `JSON {"cpu_utilization": 0.7, "unknown_field": 2}`},
		{"json string value", `JSON {"cpu_utilization": "0.7"}`},
		{"json unterminated", `JSON {"cpu_utilization": 0.7`},
		{"json trailing data", `JSON {"eps": 1} x`},
		{"json snake and camel", `JSON {"cpu_utilization": 0.7, "cpuUtilization": 0.7}`},
		{"json map twice", `JSON {"named_metrics": {"a": 1}, "namedMetrics": {"b": 2}}`},
		{"json duplicate named", `JSON {"named_metrics": {"a": 1, "a": 2}}`},
		{"json escape", `JSON {"named_metrics": {"a\"b": 1}}`},
		{"json leading zero", `JSON {"eps": 01}`},
		{"json bare point", `JSON {"eps": .5}`},
		{"json nested", `JSON {"named_metrics": {"a": {"b": 1}}}`},
		{"bin not base64", "BIN not-a-valid-binary-proto"},
		{"bin empty", "BIN "},
		{"bin truncated", "BIN " + base64.StdEncoding.EncodeToString(mustDecode(t, binGolden)[:17])},
		{"bin wrong wire type", "BIN " + base64.StdEncoding.EncodeToString([]byte{0x08, 0x01})},
		{"utilization above 1", "TEXT utilization.gpu:1.5"},
		{"json negative utilization", `JSON {"utilization": {"gpu": -0.1}}`},
		{"json empty named key", `JSON {"named_metrics": {"": 1}}`},
		{"negative application", "TEXT application_utilization:-0.5,rps_fractional:10"},
		{"json negative rps", `JSON {"rps": -3}`},
		{"too many named", loadReport(balancer.MaxNamedMetrics + 1)},
		{"too long", "TEXT cpu_utilization:0.5" + strings.Repeat(" ", lbhttp.MaxLoadHeader)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := lbhttp.ParseLoad(tt.in)
			require.ErrorIs(t, err, balancer.ErrBadLoad)
			assert.Equal(t, balancer.Load{}, got)
		})
	}
}

func TestLoadOf(t *testing.T) {
	bin := http.Header{}
	bin.Set(lbhttp.LoadHeader, "TEXT cpu_utilization:0.1")
	bin.Set(lbhttp.LoadHeaderBin, binGolden)
	text := http.Header{}
	text.Set(lbhttp.LoadHeader, "TEXT cpu_utilization:0.1")
	bad := http.Header{}
	bad.Set(lbhttp.LoadHeader, "TEXT cpu_utilization:x")

	l, err := lbhttp.LoadOf(bin)
	require.NoError(t, err)
	assert.Equal(t, 0.7, l.CPU, "the binary header takes precedence, as in Envoy")

	l, err = lbhttp.LoadOf(text)
	require.NoError(t, err)
	assert.Equal(t, balancer.Load{CPU: 0.1}, l)

	l, err = lbhttp.LoadOf(http.Header{})
	require.NoError(t, err)
	assert.False(t, l.Reported())

	l, err = lbhttp.LoadOf(bad)
	require.ErrorIs(t, err, balancer.ErrBadLoad)
	assert.False(t, l.Reported())
}

// AppendLoad writes what ParseLoad reads back, in both formats.
func TestAppendLoadRoundTrip(t *testing.T) {
	loads := []balancer.Load{
		{},
		envoyLoad,
		{CPU: 1.25, RPS: 0.5},
		{InFlight: 12, Latency: 3 * time.Millisecond, Application: 0.4},
		{Latency: 1234567 * time.Nanosecond},
	}
	for _, f := range []lbhttp.Format{lbhttp.FormatText, lbhttp.FormatJSON} {
		for _, l := range loads {
			v := string(lbhttp.AppendLoad(nil, l, f))
			got, err := lbhttp.ParseLoad(v)
			require.NoError(t, err, v)
			assert.Equal(t, l, fixed(got), v)
		}
	}
	assert.Equal(t, "TEXT cpu_utilization:0.5,named_metrics.rif:2", string(lbhttp.AppendLoad(nil, balancer.Load{CPU: 0.5, InFlight: 2}, lbhttp.FormatText)))
	assert.Equal(t, `JSON {"cpu_utilization":0.5,"named_metrics":{"rif":2}}`, string(lbhttp.AppendLoad(nil, balancer.Load{CPU: 0.5, InFlight: 2}, lbhttp.FormatJSON)))
}

// A report is bounded: MaxNamedMetrics named metrics and MaxLoadHeader
// bytes are taken, one more of either is refused, and every one of the
// metrics taken is found. In BIN a name repeated keeps the last value and
// counts once, as in proto.
func TestParseLoadBounds(t *testing.T) {
	v := loadReport(balancer.MaxNamedMetrics)
	l, err := lbhttp.ParseLoad(v)
	require.NoError(t, err)
	for i := range balancer.MaxNamedMetrics {
		x, ok := l.Metric("m" + strconv.Itoa(i))
		assert.True(t, ok, i)
		assert.Equal(t, float64(i*7), x, i)
	}
	_, err = lbhttp.ParseLoad(loadReport(balancer.MaxNamedMetrics + 1))
	require.ErrorIs(t, err, balancer.ErrBadLoad)
	t.Log(err)

	long := "TEXT cpu_utilization:0.5,"
	long += strings.Repeat(" ", lbhttp.MaxLoadHeader-len(long))
	l, err = lbhttp.ParseLoad(long)
	require.NoError(t, err, "exactly MaxLoadHeader bytes")
	assert.Equal(t, 0.5, l.CPU)
	_, err = lbhttp.ParseLoad(long + " ")
	require.ErrorIs(t, err, balancer.ErrBadLoad)
	t.Log(err)
	h := http.Header{}
	h.Set(lbhttp.LoadHeaderBin, strings.Repeat("A", lbhttp.MaxLoadHeader+1))
	_, err = lbhttp.LoadOf(h)
	require.ErrorIs(t, err, balancer.ErrBadLoad, "the binary header too")

	// BIN: 64 distinct names, the first given a second time with another
	// value.
	var pb []byte
	entry := func(name string, v float64) {
		e := append([]byte{0x0a, byte(len(name))}, name...)
		e = append(e, 0x11)
		e = binary.LittleEndian.AppendUint64(e, math.Float64bits(v))
		pb = append(pb, 0x42, byte(len(e)))
		pb = append(pb, e...)
	}
	for i := range balancer.MaxNamedMetrics {
		entry("m"+strconv.Itoa(i), float64(i))
	}
	entry("m0", 42)
	l, err = lbhttp.ParseLoad("BIN " + base64.StdEncoding.EncodeToString(pb))
	require.NoError(t, err, "64 names, one of them twice")
	x, ok := l.Metric("m0")
	assert.True(t, ok)
	assert.Equal(t, 42.0, x, "the last value wins")
	x, _ = l.Metric("m63")
	assert.Equal(t, 63.0, x)
	entry("m64", 64)
	_, err = lbhttp.ParseLoad("BIN " + base64.StdEncoding.EncodeToString(pb))
	require.ErrorIs(t, err, balancer.ErrBadLoad, "65 names")
}

// Named costs one allocation up to 4 named metrics and two past them,
// up to the bound, and a lookup none: the index is built once, while
// parsing.
func TestParseLoadNamedAllocs(t *testing.T) {
	for _, n := range []int{1, 2, 4, 5, 16, 17, balancer.MaxNamedMetrics} {
		v := loadReport(n)
		name := "m" + strconv.Itoa(n-1)
		allocs := testing.AllocsPerRun(200, func() {
			l, err := lbhttp.ParseLoad(v)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := l.Metric(name); !ok {
				t.Fatal("not found")
			}
		})
		want := 2.0
		if n <= 4 {
			want = 1
		}
		assert.Equal(t, want, allocs, "%d named metrics", n)
	}
	l, err := lbhttp.ParseLoad(loadReport(balancer.MaxNamedMetrics))
	require.NoError(t, err)
	assert.Zero(t, testing.AllocsPerRun(200, func() { l.Metric("m63") }))
}

// TEXT and JSON reports without named metrics parse without allocating,
// so that the Transport can read one from every response for free.
func TestParseLoadAllocs(t *testing.T) {
	for _, v := range []string{
		"TEXT cpu_utilization:0.7,application_utilization:0.8,rps_fractional:1000,eps:2",
		`JSON {"cpu_utilization":0.7,"application_utilization":0.8,"rps_fractional":1000,"eps":2}`,
	} {
		allocs := testing.AllocsPerRun(1000, func() {
			if _, err := lbhttp.ParseLoad(v); err != nil {
				t.Fatal(err)
			}
		})
		assert.Zero(t, allocs, v)
	}
}

// FuzzParseLoad: ParseLoad never panics; what it accepts, AppendLoad
// writes back to the same fixed fields, and its named metrics can be
// looked up; what it refuses wraps ErrBadLoad.
func FuzzParseLoad(f *testing.F) {
	for _, s := range []string{
		"TEXT cpu_utilization:0.7,application_utilization:0.8,mem_utilization:0.9,rps_fractional:1000,eps:2,named_metrics.foo:123",
		`JSON {"cpu_utilization": 0.7, "named_metrics": {"foo": 123, "rif": 2}}`,
		"BIN " + binGolden,
		"TEXT named_metrics.rif=3, named_metrics.latency_ms=0.25",
		`JSON {"rps": 3, "requestCost": {}}`,
		"TEXT ",
		"BIN AA",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		l, err := lbhttp.ParseLoad(v)
		if err != nil {
			if !assert.ErrorIs(t, err, balancer.ErrBadLoad) {
				return
			}
			assert.Equal(t, balancer.Load{}, l)
			return
		}
		for _, x := range []float64{l.CPU, l.Memory, l.Application, l.RPS, l.EPS, l.InFlight} {
			assert.GreaterOrEqual(t, x, 0.0)
		}
		assert.GreaterOrEqual(t, l.Latency, time.Duration(0))
		if l.Named != nil {
			l.Named.Metric("foo")
			l.Named.Metric("")
		}
		for _, f := range []lbhttp.Format{lbhttp.FormatText, lbhttp.FormatJSON} {
			out := string(lbhttp.AppendLoad(nil, l, f))
			back, err := lbhttp.ParseLoad(out)
			if !assert.NoError(t, err, out) {
				return
			}
			want := fixed(l)
			// Latency travels in milliseconds: allow the rounding.
			assert.InDelta(t, float64(want.Latency), float64(back.Latency), 1+float64(want.Latency)*1e-12, out)
			want.Latency, back.Latency = 0, 0
			assert.Equal(t, want, fixed(back), out)
		}
	})
}

// loadReport returns a TEXT report with the fixed fields and n named
// metrics m0 … m(n-1).
func loadReport(n int) string {
	v := "TEXT cpu_utilization:0.7,application_utilization:0.8,rps_fractional:1000,eps:2"
	for i := range n {
		v += ",named_metrics.m" + strconv.Itoa(i) + ":" + strconv.Itoa(i*7)
	}
	return v
}

// BenchmarkParseLoad parses a report with n named metrics and looks the
// last up through Named, as a picker does in Done; allocs/op and B/op are
// ParseLoad's cost for each size. named=1000 is past the bound
// (balancer.MaxNamedMetrics): ParseLoad refuses it.
func BenchmarkParseLoad(b *testing.B) {
	for _, n := range []int{0, 2, 16, 64, 1000} {
		v := loadReport(n)
		name := "m" + strconv.Itoa(n-1)
		b.Run("named="+strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(v)))
			for b.Loop() {
				l, err := lbhttp.ParseLoad(v)
				if err != nil {
					if n <= 64 {
						b.Fatal(err)
					}
					continue
				}
				if n > 0 {
					if _, ok := l.Metric(name); !ok {
						b.Fatal("no metric")
					}
				}
			}
		})
	}
}

// BenchmarkLoadMetric looks up one named metric, the last, in a parsed
// report of 64.
func BenchmarkLoadMetric(b *testing.B) {
	l, err := lbhttp.ParseLoad(loadReport(64))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := l.Metric("m63"); !ok {
			b.Fatal("no metric")
		}
	}
}
