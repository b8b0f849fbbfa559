package lbpolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

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
	// (wrr.DefaultBlackout, DefaultExpiry, DefaultWeightPeriod,
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

// orcaSet reports whether cfg sets any of the A58 settings.
func (cfg *Config) orcaSet() bool {
	return cfg.BlackoutPeriod != nil || cfg.WeightExpirationPeriod != nil ||
		cfg.WeightUpdatePeriod != nil || cfg.ErrorUtilizationPenalty != nil
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
			return nil, fmt.Errorf("lbpolicy: %s config: %w", b.name, err)
		}
	}
	if err := b.check(cfg); err != nil {
		return nil, fmt.Errorf("lbpolicy: %s config: %w", b.name, err)
	}
	return cfg, nil
}

func (b *Builder) check(cfg *Config) error {
	switch {
	case b.key == keyRequired && cfg.Key == "":
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
	if b.bounded && cfg.BoundedLoad != 0 {
		// Build one, empty, so a bad factor fails here and not at the
		// first update.
		if _, err := b.newBalancer(cfg); err != nil {
			return err
		}
	}
	return nil
}
