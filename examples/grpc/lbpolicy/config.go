package lbpolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/wrr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/serviceconfig"
)

// DefaultFailureCodes returns the status codes counted as a failure of the
// backend when Config.FailureCodes is empty: UNKNOWN, DEADLINE_EXCEEDED,
// INTERNAL, UNAVAILABLE and DATA_LOSS, the ones Envoy maps to a 5xx for its
// outlier detection, less UNIMPLEMENTED (a deployment mistake, not a sick
// server). Every other code, OK included, means the backend answered;
// CANCELLED means the caller gave up (see Config). The slice is new on
// every call.
func DefaultFailureCodes() []codes.Code {
	return []codes.Code{codes.Unknown, codes.DeadlineExceeded, codes.Internal, codes.Unavailable, codes.DataLoss}
}

// Config is the policy's entry in a service config's loadBalancingConfig:
//
//	{"loadBalancingConfig": [{"lbkit_ring_hash": {"key": "x-user-id", "boundedLoad": 1.25}}]}
//
// The zero value (an empty object, {}) is valid for the policies without
// affinity. Unknown fields are refused, so that a misspelt one is an error
// rather than a silently ignored setting.
//
// What each RPC's end tells the picker (through balancer.Feedback):
//
//   - OK, or a status outside FailureCodes: the backend answered; the
//     latency from pick to end is a sample.
//   - A status in FailureCodes: a failure, with its latency.
//   - CANCELLED: the caller gave up (balancer.ErrAbandoned): it leaves the
//     in-flight count and teaches nothing.
//   - Nothing was received, no error (gRPC found the connection gone after
//     the pick and will pick again): nothing measured, balancer.Result{}.
type Config struct {
	serviceconfig.LoadBalancingConfig `json:"-"`

	// Key names the outgoing metadata entry whose first value is the
	// affinity key (balancer.Request.Key), such as "x-user-id", or
	// "x-client-ip" for lbkit_ip_hash. Metadata keys are case-insensitive.
	// Required by the hash policies (lbkit_ip_hash, lbkit_ring_hash,
	// lbkit_maglev) and refused by the other built-in ones. An RPC without
	// the entry is hashed as the empty key: all such RPCs share one
	// backend, so set it on every RPC.
	Key string `json:"key,omitempty"`

	// RequestHashHeader, for lbkit_ring_hash and lbkit_maglev (and
	// policies made with NewBuilder), names the request header whose
	// value is the affinity key, by gRFC A76's rules (gRPC ring_hash's
	// request_hash_header): its values joined with "," when it has
	// several, and, for an RPC without the header or with an empty value,
	// a random key, so that such RPCs spread over the endpoints instead of
	// sharing one. A name of characters [0-9a-z-_.] (upper case is read as
	// lower, as gRPC reads metadata keys), not ending in "-bin" (binary
	// headers are refused, as A76 says). Give it or Key, not both.
	RequestHashHeader string `json:"requestHashHeader,omitempty"`

	// FailureCodes lists the status codes counted as a failure of the
	// backend, by name ("UNAVAILABLE") or number. Empty means
	// DefaultFailureCodes(). OK and CANCELLED cannot be listed.
	FailureCodes []codes.Code `json:"failureCodes,omitempty"`

	// BoundedLoad, for lbkit_ring_hash only, caps each backend's RPCs in
	// flight at BoundedLoad times the average (consistent.WithBoundedLoad):
	// above 1 and at most 100; 1.25 is a common choice. Zero means no bound.
	BoundedLoad float64 `json:"boundedLoad,omitempty"`

	// The settings of gRPC's weighted_round_robin (gRFC A58), under its
	// names, for lbkit_wrr_orca only; each unset means wrr's default
	// (wrr.DefaultBlackout, DefaultReportExpiry, DefaultWeightPeriod,
	// DefaultErrorPenalty: A58's). Durations are strings, "10s", "0.5s".
	// A58's enableOobLoadReport is not offered: reports come with each RPC.
	BlackoutPeriod          *Duration `json:"blackoutPeriod,omitempty"`
	WeightExpirationPeriod  *Duration `json:"weightExpirationPeriod,omitempty"`
	WeightUpdatePeriod      *Duration `json:"weightUpdatePeriod,omitempty"`
	ErrorUtilizationPenalty *float64  `json:"errorUtilizationPenalty,omitempty"`

	// failures is FailureCodes as a set, indexed by code.
	failures failureSet
}

// Duration is a time.Duration written in JSON as a string ParseDuration
// reads, such as "10s" or "0.5s", as durations are in a service config.
type Duration time.Duration

// UnmarshalJSON reads a duration string of zero or more.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"10s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("duration %q is not a duration of 0 or more", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes d as UnmarshalJSON reads it ("1m0s"), so that a
// parsed Config survives the round trip through JSON that a parent policy
// makes (gRPC's xDS policies pass their child's config on that way).
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// orcaSet reports whether cfg sets any of the A58 settings.
func (cfg *Config) orcaSet() bool {
	return cfg.BlackoutPeriod != nil || cfg.WeightExpirationPeriod != nil ||
		cfg.WeightUpdatePeriod != nil || cfg.ErrorUtilizationPenalty != nil
}

// samePicker reports whether a picker built from cfg would be built from
// o alike: the settings newBalancer reads (the bound, the A58 settings)
// are equal. The key, requestHashHeader and failureCodes are read by the
// gRPC picker, which
// is published anew with each config.
func (cfg *Config) samePicker(o *Config) bool {
	return cfg.BoundedLoad == o.BoundedLoad &&
		equalPtr(cfg.BlackoutPeriod, o.BlackoutPeriod) &&
		equalPtr(cfg.WeightExpirationPeriod, o.WeightExpirationPeriod) &&
		equalPtr(cfg.WeightUpdatePeriod, o.WeightUpdatePeriod) &&
		equalPtr(cfg.ErrorUtilizationPenalty, o.ErrorUtilizationPenalty)
}

// checkHeaderName checks a requestHashHeader by gRFC A76's rules: a valid
// header name (gRPC's: one or more of [0-9a-z-_.], after lower-casing),
// and not a binary header, whose name ends in "-bin". Pseudo-headers
// (":authority") are not in an RPC's metadata and are refused too.
func checkHeaderName(name string) error {
	for i := range len(name) {
		if c := name[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf(`"requestHashHeader" %q is not a header name: use [0-9a-z-_.]`, name)
		}
	}
	if strings.HasSuffix(name, "-bin") {
		return fmt.Errorf(`"requestHashHeader" %q is a binary header (it ends in "-bin"), which gRFC A76 refuses`, name)
	}
	return nil
}

// equalPtr reports whether a and b are both nil or point to equal values.
func equalPtr[T comparable](a, b *T) bool {
	return a == b || a != nil && b != nil && *a == *b
}

// failureSet has one bit per status code (there are 17).
type failureSet uint32

func (s failureSet) has(c codes.Code) bool { return c < 32 && s&(1<<c) != 0 }

// ParseConfig parses the policy's JSON config, checks it and fills in the
// defaults. gRPC calls it when a service config names the policy; an error
// makes the service config invalid.
func (b *Builder) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	cfg := &Config{}
	if len(bytes.TrimSpace(js)) > 0 && !bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.DisallowUnknownFields()
		if err := dec.Decode(cfg); err != nil {
			return nil, fmt.Errorf("lbpolicy: %s config: %w: %w", b.name, lbk.ErrBadOption, err)
		}
	}
	if err := b.check(cfg); err != nil {
		if !errors.Is(err, lbk.ErrBadOption) {
			err = fmt.Errorf("%w: %w", lbk.ErrBadOption, err)
		}
		return nil, fmt.Errorf("lbpolicy: %s config: %w", b.name, err)
	}
	return cfg, nil
}

func (b *Builder) check(cfg *Config) error {
	cfg.RequestHashHeader = strings.ToLower(cfg.RequestHashHeader)
	if h := cfg.RequestHashHeader; h != "" {
		switch {
		case !b.header:
			return fmt.Errorf(`"requestHashHeader" is only for %s and %s`, RingHash, Maglev)
		case cfg.Key != "":
			return errors.New(`"key" and "requestHashHeader" both name where the affinity key is: give one`)
		}
		if err := checkHeaderName(h); err != nil {
			return err
		}
	}
	switch {
	case b.key == keyRequired && cfg.Key == "" && cfg.RequestHashHeader == "" && b.header:
		return errors.New(`"key" is required (or "requestHashHeader", by gRFC A76's rules): name the metadata entry that holds the affinity key`)
	case b.key == keyRequired && cfg.Key == "" && cfg.RequestHashHeader == "":
		return errors.New(`"key" is required: name the metadata entry that holds the affinity key`)
	case b.key == keyRefused && cfg.Key != "":
		return errors.New(`"key" is only for the hash policies; this one has no affinity`)
	case !b.bounded && cfg.BoundedLoad != 0:
		return fmt.Errorf(`"boundedLoad" is only for %s`, RingHash)
	case !b.orca && cfg.orcaSet():
		return fmt.Errorf(`blackoutPeriod, weightExpirationPeriod, weightUpdatePeriod and errorUtilizationPenalty are only for %s`, ReportedWRR)
	case cfg.ErrorUtilizationPenalty != nil && !(*cfg.ErrorUtilizationPenalty >= 0):
		return fmt.Errorf(`"errorUtilizationPenalty" %v is negative`, *cfg.ErrorUtilizationPenalty)
	case cfg.WeightExpirationPeriod != nil && *cfg.WeightExpirationPeriod == 0:
		return errors.New(`"weightExpirationPeriod" must be more than 0`)
	case cfg.WeightUpdatePeriod != nil && time.Duration(*cfg.WeightUpdatePeriod) < wrr.MinWeightPeriod:
		// A58 raises it to 100 ms; lbkit says so instead (see package
		// balancer, "Options").
		return fmt.Errorf(`"weightUpdatePeriod" %v is below %v`, time.Duration(*cfg.WeightUpdatePeriod), wrr.MinWeightPeriod)
	}
	fc := cfg.FailureCodes
	if len(fc) == 0 {
		fc = DefaultFailureCodes()
	}
	cfg.failures = 0
	for _, c := range fc {
		if c == codes.OK || c == codes.Canceled {
			return fmt.Errorf(`"failureCodes" cannot list %v`, c)
		}
		cfg.failures |= 1 << c // codes.Code's JSON decoding refuses unknown codes
	}
	if b.bounded && cfg.BoundedLoad != 0 || b.orca && cfg.orcaSet() {
		// Build one, empty, so a bad option fails here and not at the
		// first update, when gRPC can no longer be told.
		lb, err := b.newBalancer(cfg)
		if err != nil {
			return err
		}
		_ = lbk.CloseInner(lb)
	}
	return nil
}
