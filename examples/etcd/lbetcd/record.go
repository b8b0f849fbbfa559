package lbetcd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/discovery"
)

// Errors returned by this package. Test for them with errors.Is.
var (
	// ErrConfig reports a Config or RegisterConfig that New or Register
	// refuses.
	ErrConfig = errors.New("lbetcd: invalid config")
	// ErrBadRecord reports a key whose value is no endpoint: the Watcher
	// skips it (Sync.Problems), Register refuses it. It wraps the reason,
	// one of balancer's sentinels where one fits (balancer.ErrBadAddr,
	// balancer.ErrBadWeight, balancer.ErrBadLocality,
	// balancer.ErrDuplicateID).
	ErrBadRecord = errors.New("lbetcd: bad record")
	// ErrNotSynced is returned by Start when no list of the prefix
	// succeeded within Config.SyncTimeout.
	ErrNotSynced = errors.New("lbetcd: prefix not listed")
)

// Format says how a key's value spells an endpoint: how the Watcher reads
// it and Register writes it.
type Format uint8

const (
	// JSON is lbkit's record, a JSON object with the fields of Record:
	//
	//	{"address":"10.0.0.1:8080","weight":3,"zone":"us-east-1a","priority":0,
	//	 "state":"healthy","metadata":{"version":"v2"}}
	JSON Format = iota
	// Naming is etcd's own naming format (go.etcd.io/etcd/client/v3/naming/endpoints,
	// as endpoints.Manager.AddEndpoint writes it under target/addr, and as
	// grpc-go's etcd resolver reads it): {"Op":0,"Addr":"10.0.0.1:8080","Metadata":...}.
	// It carries no weight, zone, priority or state: every endpoint is
	// healthy, of weight 1, at the zero Locality. A JSON object in
	// Metadata gives the endpoint's Labels (see Record.Metadata).
	Naming
	// Plain is a value that is the address and nothing else,
	// "10.0.0.1:8080", as go-zero's discov publishes a server (under
	// key/<lease ID>). Like Naming, it carries nothing else.
	Plain
)

// String returns "json", "naming" or "plain".
func (f Format) String() string {
	switch f {
	case JSON:
		return "json"
	case Naming:
		return "naming"
	case Plain:
		return "plain"
	}
	return "Format(" + strconv.Itoa(int(f)) + ")"
}

// Record is the value of one key in the JSON format: one endpoint.
//
// Every field but Address may be left out. Fields the Record does not
// know are ignored, so that a newer writer can add some; a field of the
// wrong JSON type (a weight of "3" or 1.5) is refused.
type Record struct {
	// Address is the endpoint's "host:port", an IP address or a name. It
	// is required; the backend's ID is its balancer.CanonicalAddr.
	Address string `json:"address"`
	// Weight is the endpoint's weight, from 1 to balancer.MaxWeight.
	// Zero or left out: 1. A negative weight is refused.
	Weight int `json:"weight,omitempty"`
	// Zone is the endpoint's balancer.Locality zone, for package
	// locality. Left out: "", the zone of endpoints that say nothing.
	Zone string `json:"zone,omitempty"`
	// Priority is the endpoint's priority level, from 0 (the default) to
	// balancer.MaxPriority, as Envoy's.
	Priority int `json:"priority,omitempty"`
	// State is "healthy" (the default, also ""), "unhealthy" or
	// "draining" (discovery.State). A draining endpoint that was served
	// stays in the set, drained through the target's Admin layer, until
	// its key goes; any other value is refused.
	State string `json:"state,omitempty"`
	// Metadata becomes the endpoint's discovery.Endpoint.Labels, for
	// Config.Backend. Its values are strings (JSON); in the Naming
	// format, a value of another JSON type is kept as its JSON text.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// Endpoint returns the endpoint r describes, or an error wrapping
// ErrBadRecord (and balancer.ErrBadAddr, ErrBadWeight or ErrBadLocality)
// that says what is wrong with it.
func (r Record) Endpoint() (discovery.Endpoint, error) {
	e := discovery.Endpoint{
		Addr:     r.Address,
		Weight:   r.Weight,
		Locality: balancer.Locality{Zone: r.Zone, Priority: r.Priority},
		Labels:   r.Metadata,
	}
	switch r.State {
	case "", "healthy":
	case "unhealthy":
		e.State = discovery.Unhealthy
	case "draining":
		e.State = discovery.Draining
	default:
		return discovery.Endpoint{}, fmt.Errorf("%w: state %q, want healthy, unhealthy or draining", ErrBadRecord, r.State)
	}
	if err := check(e); err != nil {
		return discovery.Endpoint{}, err
	}
	return e, nil
}

// check refuses what discovery.Publisher would refuse of e alone.
func check(e discovery.Endpoint) error {
	if e.Addr == "" {
		return fmt.Errorf("%w: no address", ErrBadRecord)
	}
	if _, err := e.ID(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRecord, err)
	}
	if e.Weight < 0 || e.Weight > balancer.MaxWeight {
		return fmt.Errorf("%w: %w: %d, want 1 to %d (0 or left out for 1)", ErrBadRecord, balancer.ErrBadWeight, e.Weight, balancer.MaxWeight)
	}
	if p := e.Locality.Priority; p < 0 || p > balancer.MaxPriority {
		return fmt.Errorf("%w: %w: priority %d, want 0 to %d", ErrBadRecord, balancer.ErrBadLocality, p, balancer.MaxPriority)
	}
	return nil
}

// naming is the value etcd's endpoints.Manager writes
// (client/v3/naming/endpoints/internal.Update).
type naming struct {
	Op       uint8
	Addr     string
	Metadata any `json:",omitempty"`
}

// Parse returns the endpoint a key's value spells in format f, or an
// error wrapping ErrBadRecord that says why it spells none: a value that
// is not JSON (or not a JSON object, in the JSON and Naming formats), an
// address missing or not host:port (balancer.CanonicalAddr), a weight or
// priority out of range, an unknown state; in the Naming format, an Op
// other than 0 (Add). The Watcher calls it for every key it reads.
//
// Cost: one JSON decoding of value.
func Parse(f Format, value []byte) (discovery.Endpoint, error) {
	switch f {
	case JSON:
		var r Record
		if err := unmarshalObject(value, &r); err != nil {
			return discovery.Endpoint{}, err
		}
		return r.Endpoint()
	case Naming:
		var n struct {
			Op       *uint8
			Addr     string
			Metadata json.RawMessage
		}
		if err := unmarshalObject(value, &n); err != nil {
			return discovery.Endpoint{}, err
		}
		if n.Op != nil && *n.Op != 0 {
			return discovery.Endpoint{}, fmt.Errorf("%w: Op %d, want 0 (Add)", ErrBadRecord, *n.Op)
		}
		e := discovery.Endpoint{Addr: n.Addr, Labels: labels(n.Metadata)}
		if err := check(e); err != nil {
			return discovery.Endpoint{}, err
		}
		return e, nil
	case Plain:
		e := discovery.Endpoint{Addr: string(bytes.TrimSpace(value))}
		if err := check(e); err != nil {
			return discovery.Endpoint{}, err
		}
		return e, nil
	}
	return discovery.Endpoint{}, fmt.Errorf("%w: unknown %v", ErrBadRecord, f)
}

// unmarshalObject decodes value, which must be a JSON object, into v.
func unmarshalObject(value []byte, v any) error {
	if v := bytes.TrimLeft(value, " \t\r\n"); len(v) == 0 || v[0] != '{' {
		return fmt.Errorf("%w: not a JSON object: %.40q", ErrBadRecord, value)
	}
	if err := json.Unmarshal(value, v); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRecord, err)
	}
	return nil
}

// labels returns a Naming record's Metadata as labels: a JSON object's
// members, strings as they are and other values as their JSON text; nil
// for anything else.
func labels(raw json.RawMessage) map[string]string {
	var m map[string]json.RawMessage
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &m) != nil || len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		var s string
		if json.Unmarshal(v, &s) != nil {
			s = string(v)
		}
		out[k] = s
	}
	return out
}

// encode returns r's value in format f, refusing a record that Parse
// would refuse, or that f cannot carry whole (a weight, zone, priority or
// state in the Naming or Plain format; metadata in Plain).
func encode(f Format, r Record) ([]byte, error) {
	var v []byte
	var err error
	switch f {
	case JSON:
		v, err = json.Marshal(r)
	case Naming, Plain:
		if r.Weight > 1 || r.Weight < 0 || r.Zone != "" || r.Priority != 0 || (r.State != "" && r.State != "healthy") {
			return nil, fmt.Errorf("%w: the %v format carries no weight, zone, priority or state: %+v", ErrConfig, f, r)
		}
		if f == Plain {
			if len(r.Metadata) > 0 {
				return nil, fmt.Errorf("%w: the plain format carries no metadata", ErrConfig)
			}
			v = []byte(r.Address)
			break
		}
		n := naming{Addr: r.Address}
		if len(r.Metadata) > 0 {
			n.Metadata = r.Metadata
		}
		v, err = json.Marshal(n)
	default:
		return nil, fmt.Errorf("%w: unknown %v", ErrConfig, f)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadRecord, err)
	}
	if _, err := Parse(f, v); err != nil {
		return nil, err
	}
	return v, nil
}
