package lbhttp

import (
	"encoding/base64"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/lbkit/lbkit/balancer"
)

// The response headers that carry a backend's load report, as Envoy reads
// them (source/common/orca/orca_parser.cc). LoadHeader's value starts with
// its format: "TEXT ", "JSON " or "BIN ". LoadHeaderBin is the older form,
// gRPC's: the base64 of a serialised OrcaLoadReport, without a prefix.
const (
	LoadHeader    = "Endpoint-Load-Metrics"
	LoadHeaderBin = "Endpoint-Load-Metrics-Bin"
)

// MaxLoadHeader is the longest load report header value ParseLoad and
// LoadOf take, in bytes: a longer one is refused with ErrBadLoad before it
// is read. It is nginx's limit for one request header line
// (large_client_header_buffers 4 8k) and the larger of its defaults for
// the whole of a response's header (proxy_buffer_size, 4k or 8k): a
// report beyond it would not pass nginx either. 64 named metrics with
// names of 60 bytes fit in it.
const MaxLoadHeader = 8 << 10

// Format is how Reporter writes LoadHeader.
type Format int

const (
	// FormatText is "TEXT name:value,name:value", as Envoy parses it;
	// named metrics are written "named_metrics.name:value".
	FormatText Format = iota
	// FormatJSON is "JSON " and the proto3 JSON of an OrcaLoadReport.
	FormatJSON
)

// String returns "TEXT" or "JSON".
func (f Format) String() string {
	switch f {
	case FormatText:
		return "TEXT"
	case FormatJSON:
		return "JSON"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// LoadOf returns the load report of a response's headers: LoadHeaderBin
// when present (Envoy gives it precedence), else LoadHeader, each from its
// first line; the zero Load and no error when there is neither. A report
// that does not parse gives the zero Load and an error wrapping
// balancer.ErrBadLoad. The Transport calls it for every response, ignores
// the error, and passes the Load in Result.Load.
//
// Cost: see ParseLoad.
func LoadOf(h http.Header) (balancer.Load, error) {
	if v := h[LoadHeaderBin]; len(v) > 0 {
		if err := checkSize(v[0]); err != nil {
			return balancer.Load{}, err
		}
		return parseLoad(v[0], formatBin)
	}
	if v := h[LoadHeader]; len(v) > 0 {
		return ParseLoad(v[0])
	}
	return balancer.Load{}, nil
}

// loadOf is LoadOf without its error: the Transport passes a report it
// cannot parse as no report.
func loadOf(h http.Header) balancer.Load {
	l, _ := LoadOf(h)
	return l
}

// reportOf is loadOf for a response body to hold until its end: nil when
// there is no report, so that a response without one costs the attempt no
// bytes (a Load in place, 72 bytes, would take every attempt's block from
// 648 bytes, allocated as 704, to 720, allocated as 768).
func reportOf(h http.Header) *balancer.Load {
	l := loadOf(h)
	if !l.Reported() {
		return nil
	}
	p := new(balancer.Load) // here, so that l itself stays on the stack
	*p = l
	return p
}

// ParseLoad parses the value of an endpoint-load-metrics header, in any of
// its three forms:
//
//	TEXT cpu_utilization:0.3,rps_fractional:120,named_metrics.queue:4
//	JSON {"cpu_utilization":0.3,"rps_fractional":120,"named_metrics":{"queue":4}}
//	BIN CAEQ...        (base64 of a serialised OrcaLoadReport)
//
// TEXT follows Envoy: comma-separated name:value pairs (name=value is also
// taken), whitespace around them ignored, the fields cpu_utilization,
// mem_utilization, application_utilization, rps_fractional and eps, and
// named metrics as named_metrics.name. JSON takes the same fields (snake
// or lowerCamel case, as proto3 JSON does), the deprecated integer rps,
// and the maps named_metrics, request_cost and utilization; its keys may
// not hold backslash escapes. BIN takes any valid OrcaLoadReport.
// request_cost and utilization (utilization.name in TEXT) are checked and
// not kept.
//
// ParseLoad refuses the whole report, with an error wrapping
// balancer.ErrBadLoad and the zero Load, for what does not parse (an
// unknown format or field, a name given twice in TEXT or JSON, a number
// that is not decimal: no hex, inf or NaN, as in JSON), for a value that
// breaks the rule every lbkit source keeps (balancer.LoadBuilder: a
// negative utilisation or rate, a mem_utilization above 1, and so on;
// the gRPC policy in examples/grpc gives the same Load for the same
// report), for more than balancer.MaxNamedMetrics named metrics, and for
// a value longer than MaxLoadHeader bytes.
//
// The named metrics balancer.MetricInFlight and MetricLatency also fill
// the Load's InFlight and Latency. When the report has named metrics, the
// Load's Named looks them up in an index ParseLoad builds: the names
// point into v (into the decoded bytes for BIN), and a lookup compares
// them, at most balancer.MaxNamedMetrics, without parsing v again.
//
// Cost: O(len(v)), and O(n²) name comparisons for n named metrics (at
// most 64²/2) to refuse a name given twice. TEXT and JSON allocate
// nothing unless the report has named metrics; then one allocation for
// Named, of 128 bytes, when it has up to 4, and two past 4 (the index
// apart, 24 bytes a metric, room for 64 past 16). BIN also allocates its
// decoded bytes.
// BenchmarkParseLoad measures each size.
func ParseLoad(v string) (balancer.Load, error) {
	if err := checkSize(v); err != nil {
		return balancer.Load{}, err
	}
	switch {
	case strings.HasPrefix(v, "TEXT "):
		return parseLoad(v[len("TEXT "):], formatText)
	case strings.HasPrefix(v, "JSON "):
		return parseLoad(v[len("JSON "):], formatJSON)
	case strings.HasPrefix(v, "BIN "):
		return parseLoad(v[len("BIN "):], formatBin)
	}
	p := v[:min(len(v), 5)]
	if i := strings.IndexByte(p, ' '); i >= 0 {
		p = p[:i]
	}
	return balancer.Load{}, fmt.Errorf("%w: unsupported format %q (want TEXT, JSON or BIN)", balancer.ErrBadLoad, p)
}

// checkSize refuses a header value longer than MaxLoadHeader.
func checkSize(v string) error {
	if len(v) > MaxLoadHeader {
		return fmt.Errorf("%w: %d bytes, above the %d of MaxLoadHeader", balancer.ErrBadLoad, len(v), MaxLoadHeader)
	}
	return nil
}

// wire is the encoding of a report body, after its prefix.
type wire uint8

const (
	formatText wire = iota
	formatJSON
	formatBin
)

// The kinds of entry a report holds.
type kind uint8

const (
	kindCPU kind = iota
	kindMemory
	kindApplication
	kindRPS
	kindEPS
	kindRPSInt // the deprecated integer rps; rps_fractional wins
	kindNamed  // named_metrics
	kindCost   // request_cost: checked, not kept
	kindUtil   // utilization: checked, not kept
	numFixed   = kindNamed
)

// parseLoad parses a report body of the given wire format.
func parseLoad(body string, w wire) (balancer.Load, error) {
	if w == formatBin {
		raw, err := decodeBin(body)
		if err != nil {
			return balancer.Load{}, err
		}
		body = raw
	}
	var b builder
	b.bin = w == formatBin
	if err := walk(body, w, b.set); err != nil {
		return balancer.Load{}, err
	}
	l := b.lb.Load()
	if b.n > 0 {
		l.Named = b.index()
	}
	return l, nil
}

// builder fills a Load from the entries walk finds: the values go through
// balancer.LoadBuilder, which holds the rule; builder adds what belongs
// to the formats (a name given twice) and the index of named metrics.
type builder struct {
	lb   balancer.LoadBuilder
	seen [numFixed]bool
	bin  bool // proto semantics: a field given twice keeps the last
	// The named metrics, in order: the first 16 in small, without
	// allocating; past them, all in more, made once with room for
	// MaxNamedMetrics, which becomes the index.
	n     int
	small [16]metric
	more  []metric
}

// loadFields maps the kinds that balancer.LoadBuilder takes to its fields.
var loadFields = [...]balancer.LoadField{
	kindCPU:         balancer.LoadCPU,
	kindMemory:      balancer.LoadMemory,
	kindApplication: balancer.LoadApplication,
	kindRPS:         balancer.LoadRPS,
	kindEPS:         balancer.LoadEPS,
	kindRPSInt:      balancer.LoadRPSInt,
	kindNamed:       balancer.LoadNamed,
	kindCost:        balancer.LoadRequestCost,
	kindUtil:        balancer.LoadUtilization,
}

func (b *builder) set(k kind, name string, v float64) error {
	if k < numFixed {
		if b.seen[k] && !b.bin {
			return fmt.Errorf("%w: %s given twice", balancer.ErrBadLoad, label(k, name))
		}
		b.seen[k] = true
	}
	key := ""
	if k >= kindNamed {
		key = name
	}
	if err := b.lb.Add(loadFields[k], key, v); err != nil {
		return err
	}
	if k == kindNamed {
		return b.named(name, v)
	}
	return nil
}

// named records a named metric in the index: a name given twice is
// refused in TEXT and JSON, and in BIN the last value wins, as in proto.
func (b *builder) named(name string, v float64) error {
	if m := b.find(name); m != nil {
		if !b.bin {
			return fmt.Errorf("%w: %s given twice", balancer.ErrBadLoad, label(kindNamed, name))
		}
		m.v = v
		return nil
	}
	if err := balancer.CheckNamedMetrics(b.n + 1); err != nil {
		return err
	}
	switch {
	case b.n < len(b.small):
		b.small[b.n] = metric{name, v}
	case b.more == nil:
		b.more = make([]metric, b.n, balancer.MaxNamedMetrics)
		copy(b.more, b.small[:])
		fallthrough
	default:
		b.more = append(b.more, metric{name, v})
	}
	b.n++
	return nil
}

// metrics returns the named metrics so far.
func (b *builder) metrics() []metric {
	if b.more != nil {
		return b.more
	}
	return b.small[:b.n]
}

// find returns the entry of the index named name, or nil.
func (b *builder) find(name string) *metric {
	m := b.metrics()
	for i := range m {
		if m[i].name == name {
			return &m[i]
		}
	}
	return nil
}

// index returns the named metrics for Load.Named: in the value itself
// for a few, else more as it is, or a copy of small of their number.
func (b *builder) index() *named {
	n := new(named)
	switch {
	case b.n <= len(n.few):
		n.m = n.few[:copy(n.few[:], b.small[:b.n])]
	case b.more != nil:
		n.m = b.more
	default:
		n.m = append([]metric(nil), b.small[:b.n]...)
	}
	return n
}

// label names an entry in an error.
func label(k kind, name string) string {
	if k >= kindNamed {
		return strconv.Quote(loadFields[k].String() + "." + name)
	}
	return name
}

// metric is one named metric of a report. name points into the report.
type metric struct {
	name string
	v    float64
}

// named is a report's named metrics, looked up by name in the index
// parseLoad built: at most balancer.MaxNamedMetrics names to compare.
// A report's first few are held in the value itself, so that a report
// with a handful costs one allocation.
type named struct {
	m   []metric // the index: few[:n], or a slice of its own
	few [4]metric
}

var _ balancer.Metrics = (*named)(nil)

// Metric returns the named metric.
func (n *named) Metric(name string) (float64, bool) {
	for i := range n.m {
		if n.m[i].name == name {
			return n.m[i].v, true
		}
	}
	return 0, false
}

// walk calls fn for each entry of a report body, in order, and stops at
// the first error, its own or fn's.
func walk(body string, w wire, fn func(kind, string, float64) error) error {
	switch w {
	case formatText:
		return walkText(body, fn)
	case formatJSON:
		return walkJSON(body, fn)
	}
	return walkBin(body, fn)
}

// textField maps a TEXT name to its kind; ok is false for an unknown name.
func textField(name string) (k kind, key string, ok bool) {
	switch name {
	case "cpu_utilization":
		return kindCPU, name, true
	case "mem_utilization":
		return kindMemory, name, true
	case "application_utilization":
		return kindApplication, name, true
	case "rps_fractional":
		return kindRPS, name, true
	case "eps":
		return kindEPS, name, true
	}
	for _, p := range [...]struct {
		prefix string
		k      kind
	}{{"named_metrics.", kindNamed}, {"request_cost.", kindCost}, {"utilization.", kindUtil}} {
		if rest, found := strings.CutPrefix(name, p.prefix); found {
			if rest == "" {
				return 0, "", false
			}
			return p.k, rest, true
		}
	}
	return 0, "", false
}

// walkText walks "name:value, name=value, ...".
func walkText(body string, fn func(kind, string, float64) error) error {
	for item := range strings.SplitSeq(body, ",") {
		item = strings.Trim(item, " \t")
		if item == "" {
			continue // as Envoy's comma-delimited header parsing does
		}
		i := strings.IndexAny(item, ":=")
		if i < 0 {
			return fmt.Errorf("%w: TEXT entry %q is not name:value", balancer.ErrBadLoad, item)
		}
		name, val := strings.TrimRight(item[:i], " \t"), strings.TrimLeft(item[i+1:], " \t")
		k, key, ok := textField(name)
		if !ok {
			return fmt.Errorf("%w: unsupported metric name %q", balancer.ErrBadLoad, name)
		}
		v, err := number(val)
		if err != nil {
			return fmt.Errorf("%w: %s: %q is not a number", balancer.ErrBadLoad, name, val)
		}
		if err := fn(k, key, v); err != nil {
			return err
		}
	}
	return nil
}

// number parses a decimal number: a JSON number, or one with a leading +
// or a bare leading or trailing dot, which Envoy's parser also takes.
// strconv.ParseFloat alone would take inf, NaN, hex and underscores.
func number(s string) (float64, error) {
	if s == "" {
		return 0, strconv.ErrSyntax
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9', c == '.', c == 'e', c == 'E', c == '+', c == '-':
		default:
			return 0, strconv.ErrSyntax
		}
	}
	return strconv.ParseFloat(s, 64)
}

// jsonField maps a JSON key to its kind; isMap is true for the map
// fields (kindNamed, kindCost, kindUtil). ok is false for an unknown key.
func jsonField(key string) (k kind, isMap, ok bool) {
	switch key {
	case "cpu_utilization", "cpuUtilization":
		return kindCPU, false, true
	case "mem_utilization", "memUtilization":
		return kindMemory, false, true
	case "application_utilization", "applicationUtilization":
		return kindApplication, false, true
	case "rps_fractional", "rpsFractional":
		return kindRPS, false, true
	case "eps":
		return kindEPS, false, true
	case "rps":
		return kindRPSInt, false, true
	case "named_metrics", "namedMetrics":
		return kindNamed, true, true
	case "request_cost", "requestCost":
		return kindCost, true, true
	case "utilization":
		return kindUtil, true, true
	}
	return 0, false, false
}

// jsonScanner reads one flat JSON object; see walkJSON.
type jsonScanner struct {
	s string
	i int
}

func (j *jsonScanner) ws() {
	for j.i < len(j.s) {
		switch j.s[j.i] {
		case ' ', '\t', '\n', '\r':
			j.i++
		default:
			return
		}
	}
}

// eat skips whitespace and c, reporting whether c was there.
func (j *jsonScanner) eat(c byte) bool {
	j.ws()
	if j.i < len(j.s) && j.s[j.i] == c {
		j.i++
		return true
	}
	return false
}

func (j *jsonScanner) fail(what string) error {
	return fmt.Errorf("%w: JSON: %s at offset %d", balancer.ErrBadLoad, what, j.i)
}

// str reads a string without escapes.
func (j *jsonScanner) str() (string, error) {
	if !j.eat('"') {
		return "", j.fail("want a string")
	}
	start := j.i
	for ; j.i < len(j.s); j.i++ {
		switch c := j.s[j.i]; {
		case c == '"':
			j.i++
			return j.s[start : j.i-1], nil
		case c == '\\':
			return "", j.fail("escapes in keys are not supported")
		case c < ' ':
			return "", j.fail("control character in a string")
		}
	}
	return "", j.fail("unterminated string")
}

// num reads a number in JSON's grammar.
func (j *jsonScanner) num() (float64, error) {
	j.ws()
	start := j.i
	digits := func() int {
		n := 0
		for j.i < len(j.s) && j.s[j.i] >= '0' && j.s[j.i] <= '9' {
			j.i++
			n++
		}
		return n
	}
	if j.i < len(j.s) && j.s[j.i] == '-' {
		j.i++
	}
	if n := digits(); n == 0 || (n > 1 && j.s[j.i-n] == '0') {
		return 0, j.fail("want a number")
	}
	if j.i < len(j.s) && j.s[j.i] == '.' {
		j.i++
		if digits() == 0 {
			return 0, j.fail("want digits after the point")
		}
	}
	if j.i < len(j.s) && (j.s[j.i] == 'e' || j.s[j.i] == 'E') {
		j.i++
		if j.i < len(j.s) && (j.s[j.i] == '+' || j.s[j.i] == '-') {
			j.i++
		}
		if digits() == 0 {
			return 0, j.fail("want digits in the exponent")
		}
	}
	v, err := strconv.ParseFloat(j.s[start:j.i], 64)
	if err != nil {
		return 0, j.fail("number out of range")
	}
	return v, nil
}

// object reads '{' then key:value pairs separated by commas then '}',
// calling pair for each key with the scanner before its value.
func (j *jsonScanner) object(pair func(key string) error) error {
	if !j.eat('{') {
		return j.fail("want an object")
	}
	if j.eat('}') {
		return nil
	}
	for {
		key, err := j.str()
		if err != nil {
			return err
		}
		if !j.eat(':') {
			return j.fail("want ':'")
		}
		if err := pair(key); err != nil {
			return err
		}
		if j.eat('}') {
			return nil
		}
		if !j.eat(',') {
			return j.fail("want ',' or '}'")
		}
	}
}

// walkJSON walks a proto3 JSON OrcaLoadReport: an object of numbers and
// of maps from names to numbers, with nothing after it.
func walkJSON(body string, fn func(kind, string, float64) error) error {
	j := &jsonScanner{s: body}
	var maps [3]bool // named_metrics, request_cost, utilization seen
	err := j.object(func(key string) error {
		k, isMap, ok := jsonField(key)
		if !ok {
			return fmt.Errorf("%w: JSON: unknown field %q", balancer.ErrBadLoad, key)
		}
		if !isMap {
			v, err := j.num()
			if err != nil {
				return err
			}
			return fn(k, key, v)
		}
		m := k - kindNamed
		if maps[m] {
			return fmt.Errorf("%w: JSON: field %q given twice", balancer.ErrBadLoad, key)
		}
		maps[m] = true
		return j.object(func(name string) error {
			v, err := j.num()
			if err != nil {
				return err
			}
			return fn(k, name, v)
		})
	})
	if err != nil {
		return err
	}
	if j.ws(); j.i != len(j.s) {
		return j.fail("data after the object")
	}
	return nil
}

// decodeBin decodes base64, padded or not (gRPC's binary metadata comes
// either way).
func decodeBin(s string) (string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", fmt.Errorf("%w: BIN: empty value", balancer.ErrBadLoad)
	}
	b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
	if err != nil {
		return "", fmt.Errorf("%w: BIN: %w", balancer.ErrBadLoad, err)
	}
	return string(b), nil
}

// The field numbers of xds.data.orca.v3.OrcaLoadReport.
const (
	fieldCPU         = 1 // double
	fieldMemory      = 2 // double
	fieldRPS         = 3 // uint64, deprecated
	fieldRequestCost = 4 // map<string, double>
	fieldUtilization = 5 // map<string, double>
	fieldRPSFrac     = 6 // double
	fieldEPS         = 7 // double
	fieldNamed       = 8 // map<string, double>
	fieldApplication = 9 // double
)

// protoReader reads protobuf wire format.
type protoReader struct {
	s string
	i int
}

var errProto = fmt.Errorf("%w: BIN: not a valid OrcaLoadReport", balancer.ErrBadLoad)

func (r *protoReader) varint() (uint64, error) {
	var x uint64
	for shift := uint(0); shift < 64; shift += 7 {
		if r.i >= len(r.s) {
			return 0, errProto
		}
		c := r.s[r.i]
		r.i++
		x |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return x, nil
		}
	}
	return 0, errProto
}

func (r *protoReader) fixed64() (uint64, error) {
	if len(r.s)-r.i < 8 {
		return 0, errProto
	}
	var x uint64
	for k := 7; k >= 0; k-- { // little-endian
		x = x<<8 | uint64(r.s[r.i+k])
	}
	r.i += 8
	return x, nil
}

func (r *protoReader) bytes() (string, error) {
	n, err := r.varint()
	if err != nil || n > uint64(len(r.s)-r.i) {
		return "", errProto
	}
	b := r.s[r.i : r.i+int(n)]
	r.i += int(n)
	return b, nil
}

// field reads the next field's number and wire type.
func (r *protoReader) field() (num uint64, typ uint8, err error) {
	tag, err := r.varint()
	if err != nil || tag>>3 == 0 {
		return 0, 0, errProto
	}
	return tag >> 3, uint8(tag & 7), nil
}

// skip skips a value of wire type typ.
func (r *protoReader) skip(typ uint8) error {
	var err error
	switch typ {
	case 0:
		_, err = r.varint()
	case 1:
		_, err = r.fixed64()
	case 2:
		_, err = r.bytes()
	case 5:
		if len(r.s)-r.i < 4 {
			return errProto
		}
		r.i += 4
	default:
		return errProto // groups are not in this message
	}
	return err
}

// walkBin walks a serialised OrcaLoadReport.
func walkBin(body string, fn func(kind, string, float64) error) error {
	r := &protoReader{s: body}
	for r.i < len(r.s) {
		num, typ, err := r.field()
		if err != nil {
			return err
		}
		switch num {
		case fieldCPU, fieldMemory, fieldRPSFrac, fieldEPS, fieldApplication:
			if typ != 1 {
				return errProto
			}
			x, err := r.fixed64()
			if err != nil {
				return err
			}
			k, name := binField(num)
			if err := fn(k, name, math.Float64frombits(x)); err != nil {
				return err
			}
		case fieldRPS:
			if typ != 0 {
				return errProto
			}
			x, err := r.varint()
			if err != nil {
				return err
			}
			if err := fn(kindRPSInt, "rps", float64(x)); err != nil {
				return err
			}
		case fieldRequestCost, fieldUtilization, fieldNamed:
			if typ != 2 {
				return errProto
			}
			entry, err := r.bytes()
			if err != nil {
				return err
			}
			key, v, err := mapEntry(entry)
			if err != nil {
				return err
			}
			k := kindNamed
			switch num {
			case fieldRequestCost:
				k = kindCost
			case fieldUtilization:
				k = kindUtil
			}
			if err := fn(k, key, v); err != nil {
				return err
			}
		default:
			if err := r.skip(typ); err != nil {
				return err
			}
		}
	}
	return nil
}

// binField returns the kind and name of a fixed double field.
func binField(num uint64) (kind, string) {
	switch num {
	case fieldCPU:
		return kindCPU, "cpu_utilization"
	case fieldMemory:
		return kindMemory, "mem_utilization"
	case fieldRPSFrac:
		return kindRPS, "rps_fractional"
	case fieldEPS:
		return kindEPS, "eps"
	}
	return kindApplication, "application_utilization"
}

// mapEntry reads a map<string, double> entry: key 1, value 2, either
// possibly missing (then "" and 0, as in proto).
func mapEntry(s string) (string, float64, error) {
	r := &protoReader{s: s}
	var key string
	var v float64
	for r.i < len(r.s) {
		num, typ, err := r.field()
		if err != nil {
			return "", 0, err
		}
		switch {
		case num == 1 && typ == 2:
			if key, err = r.bytes(); err != nil {
				return "", 0, err
			}
		case num == 2 && typ == 1:
			x, err := r.fixed64()
			if err != nil {
				return "", 0, err
			}
			v = math.Float64frombits(x)
		case num == 1 || num == 2:
			return "", 0, errProto
		default:
			if err := r.skip(typ); err != nil {
				return "", 0, err
			}
		}
	}
	return key, v, nil
}

// AppendLoad appends the endpoint-load-metrics value of l in format f to
// dst: its non-zero fields, with InFlight and Latency as the named metrics
// balancer.MetricInFlight and MetricLatency (Named is not read).
// ParseLoad of the result gives l back, but for Named, and for Latency
// rounded to the nanosecond through milliseconds.
//
// Cost: no allocation when dst has room.
func AppendLoad(dst []byte, l balancer.Load, f Format) []byte {
	return appendLoad(dst, l, f, false)
}

// appendLoad is AppendLoad; with probe, it writes MetricInFlight even when
// it is zero, so that a probe answer always names it (see Prober).
func appendLoad(dst []byte, l balancer.Load, f Format, probe bool) []byte {
	type field struct {
		name string
		v    float64
	}
	fields := [...]field{
		{"cpu_utilization", l.CPU},
		{"mem_utilization", l.Memory},
		{"application_utilization", l.Application},
		{"rps_fractional", l.RPS},
		{"eps", l.EPS},
		// The named metrics, from here on.
		{balancer.MetricInFlight, l.InFlight},
		{balancer.MetricLatency, float64(l.Latency) / float64(time.Millisecond)},
	}
	const firstNamed = 5
	text := f != FormatJSON
	if text {
		dst = append(dst, "TEXT "...)
	} else {
		dst = append(dst, "JSON {"...)
	}
	n, inNamed := 0, false // fields written; inside JSON's named_metrics
	for i, x := range fields {
		if x.v == 0 && (!probe || x.name != balancer.MetricInFlight) {
			continue
		}
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		switch {
		case text && i >= firstNamed:
			dst = append(dst, "named_metrics."...)
		case !text && i >= firstNamed && !inNamed:
			dst = append(dst, `"named_metrics":{`...)
			inNamed = true
		}
		if text {
			dst = append(dst, x.name...)
			dst = append(dst, ':')
		} else {
			dst = append(dst, '"')
			dst = append(dst, x.name...)
			dst = append(dst, `":`...)
		}
		dst = strconv.AppendFloat(dst, x.v, 'g', -1, 64)
	}
	if inNamed {
		dst = append(dst, '}')
	}
	if !text {
		dst = append(dst, '}')
	}
	return dst
}
