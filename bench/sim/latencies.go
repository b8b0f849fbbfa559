package sim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MaxSamples bounds the samples kept for one backend: past it, each new
// sample replaces a kept one at random (a reservoir, seeded so that one
// file always gives the same backends), so that a long log takes bounded
// memory and the kept samples stay a uniform draw of all.
const MaxSamples = 100_000

// samples gathers measured latencies per backend, in order of first
// appearance.
type samples struct {
	order []string
	by    map[string]*reservoir
	rng   *rand.Rand
}

type reservoir struct {
	kept []time.Duration
	seen int64
}

func newSamples() *samples {
	return &samples{by: map[string]*reservoir{}, rng: rand.New(rand.NewPCG(1, 2))}
}

func (s *samples) add(backend string, d time.Duration) {
	r := s.by[backend]
	if r == nil {
		r = &reservoir{}
		s.by[backend] = r
		s.order = append(s.order, backend)
	}
	r.seen++
	if len(r.kept) < MaxSamples {
		r.kept = append(r.kept, d)
	} else if j := s.rng.Int64N(r.seen); j < MaxSamples {
		r.kept[j] = d
	}
}

// backends returns one Backend per name, with its samples sorted and its
// Latency their median (at least a microsecond: Validate wants a positive
// one). A name that is an address (host:port) is the backend's Addr too,
// so that the hash pickers place it as they would the real one.
func (s *samples) backends() []Backend {
	out := make([]Backend, 0, len(s.order))
	for _, name := range s.order {
		kept := slices.Clone(s.by[name].kept)
		slices.Sort(kept)
		b := Backend{Name: name, Samples: kept, Latency: max(kept[(len(kept)-1)/2], time.Microsecond)}
		if _, err := netip.ParseAddrPort(name); err == nil {
			b.Addr = name
		}
		out = append(out, b)
	}
	return out
}

// lines calls line for each line of r, numbered from 1, and stops at the
// first error, which it returns wrapped with the line's number.
func lines(r io.Reader, line func(n int, text string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		if err := line(n, sc.Text()); err != nil {
			return fmt.Errorf("%w: line %d: %v", ErrScenario, n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%w: after line %d: %v", ErrScenario, n, err)
	}
	return nil
}

// latency parses a duration in unit (time.Millisecond, time.Second) from
// a decimal number of them.
func latency(field string, unit time.Duration) (time.Duration, error) {
	v, err := strconv.ParseFloat(field, 64)
	switch {
	case err != nil:
		return 0, fmt.Errorf("%q is not a number", field)
	case !(v >= 0) || math.IsInf(v, 0) || v*float64(unit) > float64(MaxLength):
		return 0, fmt.Errorf("latency %q outside [0, %v]", field, MaxLength)
	}
	return time.Duration(math.Round(v * float64(unit))), nil
}

// ReadLatencies reads measured latencies as CSV, one sample a line:
//
//	backend,latency_ms
//	api-1,48.2
//	api-2,51
//	10.0.0.3:8080,230.5
//
// The header line is optional; blank lines and lines starting with '#'
// are skipped. Each backend, in order of first appearance, gets the
// latencies given for it as Samples (MaxSamples at most), and their
// median as Latency: the simulator draws its service times from them.
// Errors name the line and wrap ErrScenario; no backend at all is an
// error.
func ReadLatencies(r io.Reader) ([]Backend, error) {
	s := newSamples()
	err := lines(r, func(n int, text string) error {
		text = strings.TrimSpace(text)
		if text == "" || strings.HasPrefix(text, "#") {
			return nil
		}
		fields := strings.Split(text, ",")
		if len(fields) != 2 {
			return fmt.Errorf("%q: want backend,latency_ms", text)
		}
		name, ms := strings.TrimSpace(fields[0]), strings.TrimSpace(fields[1])
		if n == 1 && strings.EqualFold(ms, "latency_ms") {
			return nil // the header
		}
		if name == "" {
			return errors.New("empty backend name")
		}
		d, err := latency(ms, time.Millisecond)
		if err != nil {
			return err
		}
		s.add(name, d)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(s.order) == 0 {
		return nil, fmt.Errorf("%w: no latencies", ErrScenario)
	}
	return s.backends(), nil
}

// nginxVariable matches a variable of an nginx log_format: $name or
// ${name}.
var nginxVariable = regexp.MustCompile(`\$(?:\{([a-z0-9_]+)\}|([a-z0-9_]+))`)

// ReadAccessLog reads an nginx access log written with format, the
// log_format string of nginx's configuration, which must include
// $upstream_addr and $upstream_response_time:
//
//	log_format timed '$remote_addr [$time_local] "$request" $status $upstream_addr $upstream_response_time';
//
// Each line gives one sample per upstream tried: nginx lists the
// addresses and the times in the same order, separated by ", " (servers
// of one upstream group) and " : " (an internal redirect to another).
// A time of "-" (no answer was read) and a line whose $upstream_addr is
// "-" (nginx answered by itself) give no sample. The backends are named
// by their addresses, in order of first appearance, with Samples and
// Latency as ReadLatencies sets them. Errors name the line and wrap
// ErrScenario: a line the format does not match, lists of addresses and
// times of different lengths, a time that is not a number of seconds.
func ReadAccessLog(r io.Reader, format string) ([]Backend, error) {
	re, addrAt, timeAt, err := compileLogFormat(format)
	if err != nil {
		return nil, err
	}
	s := newSamples()
	split := func(v string) []string {
		return strings.FieldsFunc(strings.ReplaceAll(v, " : ", ","), func(r rune) bool { return r == ',' })
	}
	err = lines(r, func(_ int, text string) error {
		if strings.TrimSpace(text) == "" {
			return nil
		}
		m := re.FindStringSubmatch(text)
		if m == nil {
			return errors.New("does not match the log format")
		}
		if strings.TrimSpace(m[addrAt]) == "-" {
			return nil
		}
		addrs, times := split(m[addrAt]), split(m[timeAt])
		if len(addrs) != len(times) {
			return fmt.Errorf("%d upstream addresses (%q) but %d response times (%q)", len(addrs), m[addrAt], len(times), m[timeAt])
		}
		for i, a := range addrs {
			a, t := strings.TrimSpace(a), strings.TrimSpace(times[i])
			if t == "-" || a == "-" {
				continue
			}
			d, err := latency(t, time.Second)
			if err != nil {
				return fmt.Errorf("upstream_response_time: %v", err)
			}
			s.add(a, d)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(s.order) == 0 {
		return nil, fmt.Errorf("%w: no upstream response times in the log", ErrScenario)
	}
	return s.backends(), nil
}

// logPatterns are what the variables that matter look like, so that a
// list of upstreams ("10.0.0.1:80, 10.0.0.2:80") is not cut at its first
// space; any other variable matches as little as the line lets it.
var logPatterns = map[string]string{
	"upstream_addr":          `[^ ]+(?:(?:, | : )[^ ]+)*`,
	"upstream_response_time": `[-0-9.]+(?:(?:, | : )[-0-9.]+)*`,
	"status":                 `[0-9]+`,
}

// compileLogFormat turns an nginx log_format string into an anchored
// regular expression with a group per variable, and returns the groups
// of $upstream_addr and $upstream_response_time.
func compileLogFormat(format string) (re *regexp.Regexp, addrAt, timeAt int, err error) {
	var pat strings.Builder
	pat.WriteString("^")
	last, group := 0, 0
	vars := nginxVariable.FindAllStringSubmatchIndex(format, -1)
	for i, v := range vars {
		pat.WriteString(regexp.QuoteMeta(format[last:v[0]]))
		var name string
		if v[2] >= 0 {
			name = format[v[2]:v[3]] // ${name}
		} else {
			name = format[v[4]:v[5]]
		}
		group++
		switch name {
		case "upstream_addr":
			addrAt = group
		case "upstream_response_time":
			timeAt = group
		}
		switch p, ok := logPatterns[name]; {
		case ok:
			pat.WriteString("(" + p + ")")
		case i == len(vars)-1 && v[1] == len(format):
			pat.WriteString("(.*)")
		default:
			pat.WriteString("(.*?)")
		}
		last = v[1]
	}
	pat.WriteString(regexp.QuoteMeta(format[last:]) + "$")
	if addrAt == 0 || timeAt == 0 {
		return nil, 0, 0, fmt.Errorf("%w: log format %q: want $upstream_addr and $upstream_response_time in it", ErrScenario, format)
	}
	re, err = regexp.Compile(pat.String())
	if err != nil {
		return nil, 0, 0, fmt.Errorf("%w: log format %q: %v", ErrScenario, format, err)
	}
	return re, addrAt, timeAt, nil
}
