package lbpolicy

import (
	"errors"
	"fmt"
	"strings"
	"time"

	lbk "github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/consistent"
	"github.com/lbkit/lbkit/iphash"
	"github.com/lbkit/lbkit/leastconn"
	"github.com/lbkit/lbkit/lrt"
	"github.com/lbkit/lbkit/rr"
	"github.com/lbkit/lbkit/wrr"
	"google.golang.org/grpc/balancer"

	// The client side of gRPC health checking registers itself when this
	// package is imported; without it a healthCheckConfig in the service
	// config is silently ignored. The policy passes health through to its
	// pick_first children, so it brings the checker along.
	_ "google.golang.org/grpc/health"
)

// The names the built-in policies are registered under, for the
// loadBalancingConfig of a service config. Each wraps one lbkit algorithm
// with its defaults.
const (
	// RoundRobin wraps rr: an equal share for every READY endpoint.
	RoundRobin = "lbkit_round_robin"
	// WeightedRoundRobin wraps wrr: shares in proportion to the endpoints'
	// weights (see SetWeight).
	WeightedRoundRobin = "lbkit_wrr"
	// LeastConn wraps leastconn: the endpoint with the fewest RPCs in
	// flight per unit of weight.
	LeastConn = "lbkit_least_conn"
	// LeastResponseTime wraps lrt: latency × (in flight + 1), learned from
	// each RPC's duration.
	LeastResponseTime = "lbkit_lrt"
	// IPHash wraps iphash: the config's key names the metadata entry that
	// holds a client address.
	IPHash = "lbkit_ip_hash"
	// RingHash wraps consistent's Ring, with bounded loads when the config
	// sets boundedLoad; the config's key names the metadata entry hashed.
	RingHash = "lbkit_ring_hash"
	// Maglev wraps consistent's Maglev table; the config's key names the
	// metadata entry hashed.
	Maglev = "lbkit_maglev"
	// ReportedWRR wraps wrr's Reported: weights from the backends' per-RPC
	// ORCA reports, qps / utilisation, as gRPC's weighted_round_robin
	// (gRFC A58); the config takes A58's settings (see Config).
	ReportedWRR = "lbkit_wrr_orca"
	// LeastConnORCA wraps leastconn with WithReports: two choices on the
	// utilisation the backends report per RPC, times the RPCs in flight.
	LeastConnORCA = "lbkit_least_conn_orca"
)

// keyUse says what a policy does with Config.Key.
type keyUse int

const (
	keyOptional keyUse = iota // custom pickers: used if set
	keyRequired               // hash pickers: affinity is their point
	keyRefused                // pickers without affinity: a key would be a mistake
)

// Builder builds the gRPC LB policy for one lbkit algorithm. Register it
// with google.golang.org/grpc/balancer.Register, once, before dialing; the
// built-in ones are registered by Register.
//
// A Builder is immutable and safe for concurrent use.
type Builder struct {
	name        string
	newBalancer func(*Config) (lbk.Balancer, error)
	key         keyUse
	bounded     bool // accepts Config.BoundedLoad
	orca        bool // accepts the A58 settings of Config
	header      bool // accepts Config.RequestHashHeader
	placed      bool // places endpoints by their hash keys: duplicates are refused up front
}

var (
	_ balancer.Builder      = (*Builder)(nil)
	_ balancer.ConfigParser = (*Builder)(nil)
)

// NewBuilder returns a Builder that registers under name and gives every
// channel its own picker from newBalancer: any lbkit algorithm, configured
// as you like, or your own picker, or one wrapped in a decorator (health,
// metrics). If the picker also implements balancer.Feedback it is told
// how every RPC ended.
//
// name must be lower case (gRPC looks policies up by exact name) and not
// empty. The config's key is optional: the picker gets the metadata value
// as Request.Key when it is set; so is requestHashHeader, by gRFC A76's
// rules (see Config). A picker of yours that places backends by their
// hash keys (balancer.HashKeyer; the policy's endpoints carry gRPC's A76
// hash key) refuses duplicate ones in its Update: the policy then
// publishes a TRANSIENT_FAILURE picker with its error. newBalancer must not return nil; a
// channel whose config arrives then refuses it. If the Balancer is an
// io.Closer (health.Balancer, lbmetrics.Balancer), the policy closes it
// when the channel closes, and a decorator passes the Close on to what it
// wraps. The policy does not start it: a picker with background work to
// start (health's probes) is started in newBalancer, through its
// outermost layer, whose Start reaches every layer inside (see package
// balancer, "Decorators"). Without Start, health still ejects on
// failures, lazily.
func NewBuilder(name string, newBalancer func() lbk.Balancer) (*Builder, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if newBalancer == nil {
		return nil, errors.New("lbpolicy: new builder: nil newBalancer")
	}
	return &Builder{
		name:        name,
		newBalancer: func(*Config) (lbk.Balancer, error) { return newBalancer(), nil },
		key:         keyOptional,
		header:      true,
	}, nil
}

func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("lbpolicy: new builder: empty name")
	case name != strings.ToLower(name):
		return fmt.Errorf("lbpolicy: new builder: name %q is not lower case", name)
	}
	return nil
}

// Builders returns a new Builder for each built-in policy, in the order of
// the name constants. Register registers them all; use Builders to register
// only some, or under a prefix of your own through NewBuilder.
//
// lbkit's lrt has a naive mode, kept in lbkit to show why it herds; it is
// not offered here.
func Builders() []*Builder {
	plain := func(name string, f func() lbk.Balancer) *Builder {
		return &Builder{name: name, key: keyRefused,
			newBalancer: func(*Config) (lbk.Balancer, error) { return f(), nil }}
	}
	hashed := func(name string, f func() lbk.Balancer) *Builder {
		return &Builder{name: name, key: keyRequired,
			newBalancer: func(*Config) (lbk.Balancer, error) { return f(), nil }}
	}
	return []*Builder{
		plain(RoundRobin, func() lbk.Balancer { return rr.New() }),
		plain(WeightedRoundRobin, func() lbk.Balancer { return wrr.New() }),
		plain(LeastConn, func() lbk.Balancer { return leastconn.New() }),
		plain(LeastResponseTime, func() lbk.Balancer { return lrt.New() }),
		hashed(IPHash, func() lbk.Balancer { return iphash.New() }),
		{name: RingHash, key: keyRequired, bounded: true, header: true, placed: true, newBalancer: newRing},
		{name: Maglev, key: keyRequired, header: true, placed: true,
			newBalancer: func(*Config) (lbk.Balancer, error) { return consistent.NewMaglev(), nil }},
		{name: ReportedWRR, key: keyRefused, orca: true, newBalancer: newReportedWRR},
		plain(LeastConnORCA, func() lbk.Balancer { return leastconn.New(leastconn.WithReports()) }),
	}
}

// newReportedWRR builds wrr's Reported with the config's A58 settings.
func newReportedWRR(cfg *Config) (lbk.Balancer, error) {
	var opts []wrr.ReportedOption
	if d := cfg.BlackoutPeriod; d != nil {
		opts = append(opts, wrr.WithBlackout(time.Duration(*d)))
	}
	if d := cfg.WeightExpirationPeriod; d != nil {
		opts = append(opts, wrr.WithReportExpiry(time.Duration(*d)))
	}
	if d := cfg.WeightUpdatePeriod; d != nil {
		opts = append(opts, wrr.WithWeightPeriod(time.Duration(*d)))
	}
	if f := cfg.ErrorUtilizationPenalty; f != nil {
		opts = append(opts, wrr.WithErrorPenalty(*f))
	}
	p := wrr.NewReported(opts...)
	// Reported keeps a bad option's error for Update; an empty one finds
	// it without building anything.
	if err := p.Update(nil); err != nil {
		return nil, err
	}
	return p, nil
}

func newRing(cfg *Config) (lbk.Balancer, error) {
	if cfg.BoundedLoad == 0 {
		return consistent.NewRing(), nil
	}
	r := consistent.NewRing(consistent.WithBoundedLoad(cfg.BoundedLoad))
	// The ring checks its options at Update; an empty one finds a bad
	// factor without building anything.
	if err := r.Update(nil); err != nil {
		return nil, err
	}
	return r, nil
}

// Register registers every built-in policy with gRPC under the names
// above. Call it once, before the first dial, as for any gRPC policy:
// gRPC's registry is not safe for use concurrent with dialing.
func Register() {
	for _, b := range Builders() {
		balancer.Register(b)
	}
}

// Name returns the name the policy registers under.
func (b *Builder) Name() string { return b.name }

// Build returns the policy for one channel, with its own lbkit picker.
// gRPC calls it; the picker is made when the first config arrives.
func (b *Builder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	return newPolicy(b, cc, opts)
}
