package sim

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ParseBackends parses a backend list, the syntax of lbsim's -backends:
// backends separated by commas, each a latency followed by options
// separated by colons.
//
//	50ms,150ms,300ms,500ms             four backends, fixed service times
//	50ms:w=6:c=8,150ms:w=3:c=8         weights 6 and 3, 8 requests at once each
//	50ms:j=10ms                        uniform in [40ms, 60ms]
//	50ms:s=0.5                         lognormal, median 50ms, sigma 0.5
//	50ms:down=1m,150ms                 the first dies at 1m and stays dead
//	50ms:down=1m-1m30s:down=2m-2m10s   dead twice
//	50ms:c=16:nb=8@1m                  a neighbour takes 8 of its 16 slots from 1m
//	50ms:stall=1m                      accepts and never answers from 1m
//	50ms:503=1m-1m30s                  answers 503 from 1m to 1m30s
//	50ms:tail=1%x20                    1% of its requests take 20 times as long
//	50ms:fail=30%                      30% of its requests answered 503 at once
//	150ms:track=canary                 the canary, for package route (Route)
//	50ms:name=fast                     "fast" in tables
//	10ms:zone=a                        in zone a
//	3x50ms:c=8,150ms                   three backends alike, then a fourth
//
// Options: w= weight (Backend.Weight), c= capacity (Backend.Capacity), j=
// jitter (Backend.Jitter), s= sigma (Backend.Sigma), down=AT or AT-UNTIL
// (Backend.Down, repeatable), nb=TAKES@AT or TAKES@AT-UNTIL
// (Backend.Neighbours, repeatable), stall=AT or AT-UNTIL (Backend.Stalls,
// repeatable), 503=AT or AT-UNTIL (Backend.Unavailable, repeatable),
// tail=SHARE%xFACTOR (Backend.TailShare and TailFactor), fail=SHARE%
// (Backend.FailShare), name= label (Backend.Name), zone= zone
// (Backend.Zone), track= track (Backend.Track). A leading Nx repeats the
// backend N times, up to MaxBackends in all. Durations use Go's syntax
// (time.ParseDuration). Errors wrap ErrScenario; values are checked
// further by Scenario.Validate.
func ParseBackends(spec string) ([]Backend, error) {
	if strings.TrimSpace(spec) == "" {
		return nil, fmt.Errorf("%w: empty backend list", ErrScenario)
	}
	var out []Backend
	for i, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		n := 1
		if count, rest, ok := strings.Cut(item, "x"); ok && count != "" && strings.Trim(count, "0123456789") == "" {
			var err error
			if n, err = strconv.Atoi(count); err != nil || n < 1 || n > MaxBackends-len(out) {
				return nil, fmt.Errorf("%w: backend %d %q: repeat %s: want 1 to %d backends in all", ErrScenario, i+1, item, count, MaxBackends)
			}
			item = rest
		}
		b, err := parseBackend(item)
		if err != nil {
			return nil, fmt.Errorf("%w: backend %d %q: %v", ErrScenario, i+1, item, err)
		}
		if len(out) == MaxBackends {
			return nil, fmt.Errorf("%w: more than %d backends", ErrScenario, MaxBackends)
		}
		for range n {
			out = append(out, b)
			out[len(out)-1].Down = slices.Clone(b.Down)
			out[len(out)-1].Neighbours = slices.Clone(b.Neighbours)
		}
	}
	return out, nil
}

func parseBackend(item string) (Backend, error) {
	parts := strings.Split(item, ":")
	var b Backend
	var err error
	if b.Latency, err = time.ParseDuration(parts[0]); err != nil {
		return b, fmt.Errorf("latency: %v", err)
	}
	for _, opt := range parts[1:] {
		key, val, ok := strings.Cut(opt, "=")
		if !ok {
			return b, fmt.Errorf("option %q: want key=value", opt)
		}
		switch key {
		case "w":
			b.Weight, err = strconv.Atoi(val)
		case "c":
			b.Capacity, err = strconv.Atoi(val)
		case "j":
			b.Jitter, err = time.ParseDuration(val)
		case "s":
			b.Sigma, err = strconv.ParseFloat(val, 64)
		case "name":
			b.Name = val
		case "zone":
			b.Zone = val
		case "track":
			b.Track = val
		case "fail":
			share, found := strings.CutSuffix(val, "%")
			if !found {
				err = errors.New("want SHARE%, as 30%")
				break
			}
			if b.FailShare, err = strconv.ParseFloat(share, 64); err == nil {
				b.FailShare /= 100
			}
		case "down", "stall", "503":
			var o Outage
			at, until, ranged := strings.Cut(val, "-")
			if o.At, err = time.ParseDuration(at); err == nil && ranged {
				o.Until, err = time.ParseDuration(until)
			}
			switch key {
			case "down":
				b.Down = append(b.Down, o)
			case "stall":
				b.Stalls = append(b.Stalls, o)
			default:
				b.Unavailable = append(b.Unavailable, o)
			}
		case "tail":
			share, factor, found := strings.Cut(val, "%x")
			if !found {
				err = errors.New("want SHARE%xFACTOR, as 1%x20")
				break
			}
			if b.TailShare, err = strconv.ParseFloat(share, 64); err == nil {
				b.TailShare /= 100
				b.TailFactor, err = strconv.ParseFloat(factor, 64)
			}
		case "nb":
			var n Neighbour
			takes, span, found := strings.Cut(val, "@")
			if !found {
				err = errors.New("want TAKES@AT or TAKES@AT-UNTIL")
				break
			}
			at, until, ranged := strings.Cut(span, "-")
			if n.Takes, err = strconv.Atoi(takes); err == nil {
				if n.At, err = time.ParseDuration(at); err == nil && ranged {
					n.Until, err = time.ParseDuration(until)
				}
			}
			b.Neighbours = append(b.Neighbours, n)
		case "samples":
			return b, errors.New("samples: measured latencies come from a file (lbsim -backends-file), not -backends")
		default:
			return b, fmt.Errorf("unknown option %q (want w, c, j, s, down, nb, stall, 503, tail, fail, name, zone or track)", key)
		}
		if err != nil {
			return b, fmt.Errorf("option %s: %v", key, err)
		}
	}
	return b, nil
}

// ParseStages parses a user profile, the syntax of lbsim's -stages: an
// optional number of users at time zero, then stages DURATION:TARGET
// separated by commas. Without the leading number the profile starts at the
// first stage's target.
//
//	3m:100                        100 users for 3 minutes
//	0,1m:100,2m:100               a ramp from 0 to 100 over a minute, then 2 minutes at 100
//	20s:10,30s:250,40s:250,30s:10 the burst profile without its last hold
//
// It returns the users at time zero and the stages. Errors wrap
// ErrScenario.
func ParseStages(spec string) (int, []Stage, error) {
	items := strings.Split(spec, ",")
	start, given := 0, false
	if n, err := strconv.Atoi(strings.TrimSpace(items[0])); err == nil {
		if n < 0 {
			return 0, nil, fmt.Errorf("%w: stages %q: negative number of users %d at time zero", ErrScenario, spec, n)
		}
		start, given, items = n, true, items[1:]
	}
	if len(items) == 0 {
		return 0, nil, fmt.Errorf("%w: stages %q: no DURATION:TARGET stage", ErrScenario, spec)
	}
	stages := make([]Stage, 0, len(items))
	for i, item := range items {
		d, n, ok := strings.Cut(strings.TrimSpace(item), ":")
		if !ok {
			return 0, nil, fmt.Errorf("%w: stage %d %q: want DURATION:TARGET", ErrScenario, i+1, item)
		}
		var st Stage
		var err error
		if st.Duration, err = time.ParseDuration(d); err != nil {
			return 0, nil, fmt.Errorf("%w: stage %d %q: %v", ErrScenario, i+1, item, err)
		}
		if st.Target, err = strconv.Atoi(n); err != nil {
			return 0, nil, fmt.Errorf("%w: stage %d %q: target: %v", ErrScenario, i+1, item, err)
		}
		stages = append(stages, st)
	}
	if !given {
		start = stages[0].Target
	}
	return start, stages, nil
}
