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

// The named metrics a probing picker reads, which ParseLoad also puts in
// balancer.Load's InFlight and Latency fields, and Reporter sends in its
// probe answers: the requests in flight at the backend, and its latency
// estimate in milliseconds.
const (
	MetricInFlight = "rif"
	MetricLatency  = "latency_ms"
)

// maxLatencyMS bounds latency_ms so that it converts to a time.Duration:
// 2⁶³ ns is about 9.2·10¹² ms.
const maxLatencyMS = float64(math.MaxInt64/int64(time.Millisecond)) - 1

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
// ParseLoad refuses, with an error wrapping balancer.ErrBadLoad, what
// Envoy and the proto's validation rules refuse: an unknown format or
// field, a name given twice (TEXT, JSON), a value that is not a finite
// number, a negative utilisation, rate or in-flight count, a
// mem_utilization above 1. Numbers are decimal, as in JSON: no hex, inf
// or NaN.
//
// The named metrics MetricInFlight and MetricLatency also fill the Load's
// InFlight and Latency. When the report has named metrics, the Load's
// Named looks them up by parsing v again.
//
// Cost: O(len(v)). TEXT and JSON allocate nothing unless the report has
// named metrics (then one small value for Named); BIN allocates its
// decoded bytes.
func ParseLoad(v string) (balancer.Load, error) {
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
	kindOther  // request_cost and utilization: checked, not kept
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
	l := b.l
	if l.RPS == 0 && b.rpsInt > 0 {
		l.RPS = b.rpsInt
	}
	if b.named > 0 {
		l.Named = &named{body: body, w: w}
	}
	return l, nil
}

// builder fills a Load from the entries walk finds.
type builder struct {
	l      balancer.Load
	rpsInt float64
	seen   [numFixed]bool
	bin    bool // proto semantics: a field given twice keeps the last
	named  int  // named metrics seen
	// The first named metrics' names, for refusing a name given twice
	// without allocating; past them, a map.
	names [16]string
	more  map[string]bool
}

func (b *builder) set(k kind, name string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("%w: %s is not a finite number", balancer.ErrBadLoad, label(k, name))
	}
	if k < numFixed {
		if b.seen[k] && !b.bin {
			return fmt.Errorf("%w: %s given twice", balancer.ErrBadLoad, label(k, name))
		}
		b.seen[k] = true
		if v < 0 {
			return fmt.Errorf("%w: %s is negative (%g)", balancer.ErrBadLoad, label(k, name), v)
		}
	}
	switch k {
	case kindCPU:
		b.l.CPU = v
	case kindMemory:
		if v > 1 {
			return fmt.Errorf("%w: mem_utilization %g is above 1", balancer.ErrBadLoad, v)
		}
		b.l.Memory = v
	case kindApplication:
		b.l.Application = v
	case kindRPS:
		b.l.RPS = v
	case kindEPS:
		b.l.EPS = v
	case kindRPSInt:
		b.rpsInt = v
	case kindNamed:
		if !b.bin && b.repeated(name) {
			return fmt.Errorf("%w: %s given twice", balancer.ErrBadLoad, label(k, name))
		}
		b.named++
		switch name {
		case MetricInFlight:
			if v < 0 {
				return fmt.Errorf("%w: %s is negative (%g)", balancer.ErrBadLoad, label(k, name), v)
			}
			b.l.InFlight = v
		case MetricLatency:
			if v < 0 || v > maxLatencyMS {
				return fmt.Errorf("%w: %s is out of range (%g)", balancer.ErrBadLoad, label(k, name), v)
			}
			b.l.Latency = time.Duration(v * float64(time.Millisecond))
		}
	}
	return nil
}

// repeated reports whether name was seen before among the named metrics,
// and records it.
func (b *builder) repeated(name string) bool {
	n := min(b.named, len(b.names))
	for _, x := range b.names[:n] {
		if x == name {
			return true
		}
	}
	if b.more[name] {
		return true
	}
	if n < len(b.names) {
		b.names[n] = name
		return false
	}
	if b.more == nil {
		b.more = make(map[string]bool)
	}
	b.more[name] = true
	return false
}

// label names an entry in an error.
func label(k kind, name string) string {
	if k == kindNamed {
		return strconv.Quote("named_metrics." + name)
	}
	return name
}

// named is a report's named metrics, looked up by walking the report
// again: a report carries a handful, and a picker asks for one or two.
type named struct {
	body string // TEXT or JSON after its prefix; BIN decoded
	w    wire
}

var _ balancer.Metrics = (*named)(nil)

// Metric returns the named metric. The report parsed once already, so
// the walk cannot fail; in BIN the last of repeated keys wins, as in
// proto.
func (n *named) Metric(name string) (float64, bool) {
	var v float64
	found := false
	_ = walk(n.body, n.w, func(k kind, key string, x float64) error {
		if k == kindNamed && key == name {
			v, found = x, true
		}
		return nil
	})
	return v, found
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
	for _, p := range [...]string{"named_metrics.", "request_cost.", "utilization."} {
		if rest, found := strings.CutPrefix(name, p); found {
			if rest == "" {
				return 0, "", false
			}
			if p == "named_metrics." {
				return kindNamed, rest, true
			}
			return kindOther, rest, true
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

// jsonField maps a JSON key to its kind; the map fields report kindNamed
// or kindOther with key "". ok is false for an unknown key.
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
	case "request_cost", "requestCost", "utilization":
		return kindOther, true, true
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
		m := 0
		switch key {
		case "request_cost", "requestCost":
			m = 1
		case "utilization":
			m = 2
		}
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
			k := kindOther
			if num == fieldNamed {
				k = kindNamed
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
// MetricInFlight and MetricLatency (Named is not read). ParseLoad of the
// result gives l back, but for Named, and for Latency rounded to the
// nanosecond through milliseconds.
//
// Cost: no allocation when dst has room.
func AppendLoad(dst []byte, l balancer.Load, f Format) []byte {
	return appendLoad(dst, l, f, false)
}

// appendLoad is AppendLoad; with probe, it writes MetricInFlight even
// when it is zero, so that a probe answer always names it (see Prober).
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
		{MetricInFlight, l.InFlight},
		{MetricLatency, float64(l.Latency) / float64(time.Millisecond)},
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
		if x.v == 0 && (!probe || x.name != MetricInFlight) {
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
