package lbxds

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/discovery"
)

// ErrRejected wraps the error of Read for a ClusterLoadAssignment that
// breaks a rule (see the package doc, "NACK rules"). The message names
// every fault, with its priority, locality and endpoint; the client sends
// it to the control plane as the NACK's error_detail.
var ErrRejected = errors.New("lbxds: ClusterLoadAssignment rejected")

// Assignment is a ClusterLoadAssignment in lbkit's terms.
type Assignment struct {
	// Cluster is the assignment's cluster_name, the EDS resource name.
	Cluster string
	// Endpoints are the assignment's endpoints, locality by locality in
	// the order given, each with its combined weight (see the package
	// doc, "Weights"), its zone and priority, its state and its labels.
	Endpoints []discovery.Endpoint
	// Overprovisioning is policy.overprovisioning_factor, in percent as
	// Envoy reads it (140 is 1.4), or 0 if the assignment sets none.
	// Values above math.MaxInt32 read as math.MaxInt32.
	Overprovisioning int
	// Skipped names the localities given no traffic: in an assignment
	// whose localities carry weights, those without one or with weight
	// 0 (gRPC skips them; Envoy's locality-weighted load balancing gives
	// them no load), as "priority P zone Z".
	Skipped []string
}

// ZoneName is the default zone of a locality: its region, zone and
// sub_zone joined with "/", trailing empty parts left out:
// "us-east-1/us-east-1a/rack7", "us-east-1/us-east-1a", "us-east-1", and
// "" for a locality that says nothing. locality.Config.Zone names the
// caller's zone the same way.
func ZoneName(region, zone, subZone string) string {
	switch {
	case subZone != "":
		return region + "/" + zone + "/" + subZone
	case zone != "":
		return region + "/" + zone
	}
	return region
}

// localityKey is a locality within a priority, as xDS names it.
type localityKey struct {
	priority              uint32
	region, zone, subZone string
}

// zoneKey is a zone within a priority, as lbkit names it.
type zoneKey struct {
	priority uint32
	zone     string
}

// group is one locality of the assignment, as read: its endpoints are
// eps[first:first+n], their raw weights raw[first:first+n].
type group struct {
	priority uint32
	weight   uint64 // the locality's, 0 when the assignment has none
	sum      uint64 // of its endpoints' weights
	first, n int
}

// Read reads a ClusterLoadAssignment into lbkit's terms, by the mapping
// of the package doc: each endpoint's zone from zoneName (nil: ZoneName)
// and its priority from its locality, its weight from its own and its
// locality's, its state from health_status, its labels from its
// metadata. It returns an error wrapping ErrRejected that names every
// fault when the assignment breaks a NACK rule; the Assignment is then
// empty. It keeps nothing of cla.
//
// Cost: O(n) for n endpoints, one balancer.CanonicalAddr each, and a map
// of n to find duplicates.
func Read(cla *endpointv3.ClusterLoadAssignment, zoneName func(region, zone, subZone string) string) (Assignment, error) {
	if zoneName == nil {
		zoneName = ZoneName
	}
	var errs []error
	fault := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(format, args...))
	}
	a := Assignment{Cluster: cla.GetClusterName()}
	if a.Cluster == "" {
		fault("no cluster_name")
	}
	if f := cla.GetPolicy().GetOverprovisioningFactor(); f != nil {
		if f.GetValue() == 0 {
			fault("policy.overprovisioning_factor is 0, want at least 1")
		}
		a.Overprovisioning = int(min(f.GetValue(), math.MaxInt32))
	}

	// Locality weights count when any locality has one (gRPC's
	// wrr_locality, Envoy's locality-weighted load balancing); then a
	// locality without one gets no traffic.
	weighted := false
	n := 0
	for _, lle := range cla.GetEndpoints() {
		weighted = weighted || lle.GetLoadBalancingWeight() != nil
		n += len(lle.GetLbEndpoints())
	}

	a.Endpoints = make([]discovery.Endpoint, 0, n)
	raw := make([]uint64, 0, n)
	var groups []group
	localities := make(map[localityKey]int)
	zones := make(map[zoneKey]int)
	addrs := make(map[string][2]int, n) // ID → locality and endpoint where first seen
	locSums := make(map[uint32]uint64)
	maxPriority := -1
	for i, lle := range cla.GetEndpoints() {
		l := lle.GetLocality()
		p := lle.GetPriority()
		zone := zoneName(l.GetRegion(), l.GetZone(), l.GetSubZone())
		where := func() string { return fmt.Sprintf("locality %d (priority %d, zone %q)", i, p, zone) }
		if p > balancer.MaxPriority {
			fault("%s: priority %d, want at most %d", where(), p, balancer.MaxPriority)
			continue
		}
		if lle.GetLedsClusterLocalityConfig() != nil {
			fault("%s: leds_cluster_locality_config: LEDS is not supported", where())
			continue
		}
		g := group{priority: p, first: len(a.Endpoints)}
		if weighted {
			g.weight = uint64(lle.GetLoadBalancingWeight().GetValue())
			if g.weight == 0 {
				a.Skipped = append(a.Skipped, fmt.Sprintf("priority %d zone %q", p, zone))
				continue
			}
			locSums[p] += g.weight
			if s := locSums[p]; s > math.MaxUint32 && s-g.weight <= math.MaxUint32 {
				fault("%s: the locality weights of priority %d add up to more than %d", where(), p, uint64(math.MaxUint32))
			}
		}
		key := localityKey{p, l.GetRegion(), l.GetZone(), l.GetSubZone()}
		if j, dup := localities[key]; dup {
			fault("%s: the same locality as locality %d, at the same priority", where(), j)
		} else if j, dup := zones[zoneKey{p, zone}]; dup {
			fault("%s: another locality than locality %d but the same zone name, at the same priority", where(), j)
		}
		localities[key] = i
		zones[zoneKey{p, zone}] = i
		maxPriority = max(maxPriority, int(p))

		for j, lbe := range lle.GetLbEndpoints() {
			id, err := address(lbe)
			if err != nil {
				fault("%s, endpoint %d: %w", where(), j, err)
				continue
			}
			w := uint64(1)
			if lw := lbe.GetLoadBalancingWeight(); lw != nil {
				if w = uint64(lw.GetValue()); w == 0 {
					fault("%s, endpoint %d (%s): load_balancing_weight 0, want at least 1", where(), j, id)
					continue
				}
			}
			g.sum += w
			if g.sum > math.MaxUint32 && g.sum-w <= math.MaxUint32 {
				fault("%s, endpoint %d (%s): the endpoint weights of the locality add up to more than %d", where(), j, id, uint64(math.MaxUint32))
			}
			if at, dup := addrs[id]; dup {
				fault("%s, endpoint %d: address %s again (first at locality %d, endpoint %d)", where(), j, id, at[0], at[1])
				continue
			}
			addrs[id] = [2]int{i, j}
			a.Endpoints = append(a.Endpoints, discovery.Endpoint{
				Addr:     id,
				Locality: balancer.Locality{Zone: zone, Priority: int(p)},
				State:    state(lbe.GetHealthStatus()),
				Labels:   labels(lbe),
				HashKey:  hashKey(lbe),
			})
			raw = append(raw, w)
		}
		g.n = len(a.Endpoints) - g.first
		groups = append(groups, g)
	}
	// Priorities run from 0 without a gap (Envoy's rule, and gRPC's).
	seen := make([]bool, maxPriority+1)
	for _, g := range groups {
		seen[g.priority] = true
	}
	for p, ok := range seen {
		if !ok {
			fault("no locality at priority %d, below priority %d: priorities must run from 0 without a gap", p, maxPriority)
		}
	}
	if len(errs) > 0 {
		return Assignment{Cluster: a.Cluster}, fmt.Errorf("%w: cluster %q: %w", ErrRejected, a.Cluster, errors.Join(errs...))
	}
	scratch := make([]uint64, len(raw))
	for p := range maxPriority + 1 {
		fit(a.Endpoints, raw, scratch, groups, uint32(p), weighted)
	}
	return a, nil
}

// address returns the ID of lbe's address, or why it has none lbkit can
// use.
func address(lbe *endpointv3.LbEndpoint) (string, error) {
	ep := lbe.GetEndpoint()
	if ep == nil {
		if name := lbe.GetEndpointName(); name != "" {
			return "", fmt.Errorf("endpoint_name %q: named endpoints are not supported", name)
		}
		return "", errors.New("no endpoint")
	}
	sa := ep.GetAddress().GetSocketAddress()
	switch {
	case sa == nil && ep.GetAddress().GetPipe() != nil:
		return "", errors.New("a pipe address, not a socket address")
	case sa == nil && ep.GetAddress().GetEnvoyInternalAddress() != nil:
		return "", errors.New("an Envoy internal address, not a socket address")
	case sa == nil:
		return "", errors.New("no socket address")
	case sa.GetNamedPort() != "":
		return "", fmt.Errorf("named_port %q: named ports are not supported", sa.GetNamedPort())
	case sa.GetResolverName() != "":
		return "", fmt.Errorf("resolver_name %q: custom resolvers are not supported", sa.GetResolverName())
	case sa.GetPortValue() == 0 || sa.GetPortValue() > math.MaxUint16:
		return "", fmt.Errorf("address %q port %d, want 1 to 65535", sa.GetAddress(), sa.GetPortValue())
	}
	// An EDS cluster's addresses are IP addresses (Envoy's
	// SocketAddress.address: names are for DNS clusters).
	ip, err := netip.ParseAddr(sa.GetAddress())
	if err != nil {
		return "", fmt.Errorf("%w %q: not an IP address", balancer.ErrBadAddr, sa.GetAddress())
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(sa.GetPortValue())).String(), nil
}

// state maps health_status: HEALTHY and UNKNOWN serve; DRAINING drains;
// UNHEALTHY, TIMEOUT, DEGRADED and values this version does not know are
// unhealthy.
func state(s corev3.HealthStatus) discovery.State {
	switch s {
	case corev3.HealthStatus_HEALTHY, corev3.HealthStatus_UNKNOWN:
		return discovery.Healthy
	case corev3.HealthStatus_DRAINING:
		return discovery.Draining
	}
	return discovery.Unhealthy
}

// labels returns lbe's metadata as labels: "namespace/key" for each
// string, number or bool of filter_metadata, and "hostname" for the
// endpoint's hostname. Nil when there are none.
func labels(lbe *endpointv3.LbEndpoint) map[string]string {
	md := lbe.GetMetadata().GetFilterMetadata()
	host := lbe.GetEndpoint().GetHostname()
	if len(md) == 0 && host == "" {
		return nil
	}
	out := make(map[string]string)
	if host != "" {
		out["hostname"] = host
	}
	for ns, st := range md {
		for k, v := range st.GetFields() {
			switch v := v.GetKind().(type) {
			case *structpb.Value_StringValue:
				out[ns+"/"+k] = v.StringValue
			case *structpb.Value_NumberValue:
				out[ns+"/"+k] = strconv.FormatFloat(v.NumberValue, 'g', -1, 64)
			case *structpb.Value_BoolValue:
				out[ns+"/"+k] = strconv.FormatBool(v.BoolValue)
			}
		}
	}
	return out
}

// hashKey returns lbe's "envoy.lb" hash_key metadata if it is a string,
// else "": the key Envoy's ring_hash and Maglev, and gRPC's ring_hash
// (gRFC A76), place the endpoint by instead of its address. A value of
// another type is ignored, as gRPC ignores it.
func hashKey(lbe *endpointv3.LbEndpoint) string {
	v := lbe.GetMetadata().GetFilterMetadata()["envoy.lb"].GetFields()["hash_key"]
	return v.GetStringValue()
}

// fit sets the weights of priority p's endpoints from their raw weights,
// using scratch (as long as raw).
//
// Without locality weights, an endpoint keeps its own. With them, an
// endpoint e of locality z gets w_e × L_z / W_z (W_z the sum of z's
// endpoint weights), times the least common multiple of the W_z so that
// the weights are whole, over their greatest common divisor: a zone's
// weight is then L_z times a constant, and each endpoint has its share of
// it, as gRPC's wrr_locality splits traffic. Weights above
// balancer.MaxWeight (when the exact ones do not fit) are scaled, the
// largest to MaxWeight, each rounded, at least 1.
func fit(eps []discovery.Endpoint, raw, scratch []uint64, groups []group, p uint32, weighted bool) {
	var idx []int // the groups of p
	for i, g := range groups {
		if g.priority == p && g.n > 0 {
			idx = append(idx, i)
		}
	}
	if len(idx) == 0 {
		return
	}
	if exactWeights(raw, scratch, groups, idx, weighted) {
		for _, i := range idx {
			g := groups[i]
			for k := g.first; k < g.first+g.n; k++ {
				eps[k].Weight = int(scratch[k])
			}
		}
		return
	}
	// Scaled: x_e = w_e × L_z / W_z, the largest to MaxWeight.
	share := func(g group, w uint64) float64 {
		if !weighted {
			return float64(w)
		}
		return float64(w) * float64(g.weight) / float64(g.sum)
	}
	top := 0.0
	for _, i := range idx {
		g := groups[i]
		for k := g.first; k < g.first+g.n; k++ {
			top = max(top, share(g, raw[k]))
		}
	}
	for _, i := range idx {
		g := groups[i]
		for k := g.first; k < g.first+g.n; k++ {
			eps[k].Weight = max(1, int(math.Round(share(g, raw[k])/top*balancer.MaxWeight)))
		}
	}
}

// exactWeights writes into out the exact weights of the endpoints of
// groups idx, at their positions in raw, and reports false if they
// overflow or exceed balancer.MaxWeight.
func exactWeights(raw, out []uint64, groups []group, idx []int, weighted bool) bool {
	if !weighted {
		for _, i := range idx {
			g := groups[i]
			for k := g.first; k < g.first+g.n; k++ {
				if out[k] = raw[k]; out[k] > balancer.MaxWeight {
					return false
				}
			}
		}
		return true
	}
	lcm := uint64(1)
	for _, i := range idx {
		s := groups[i].sum
		hi, lo := bits.Mul64(lcm/gcd(lcm, s), s)
		if hi != 0 {
			return false
		}
		lcm = lo
	}
	var all uint64 // the gcd of the weights
	for _, i := range idx {
		g := groups[i]
		hi, per := bits.Mul64(g.weight, lcm/g.sum)
		if hi != 0 {
			return false
		}
		for k := g.first; k < g.first+g.n; k++ {
			hi, lo := bits.Mul64(raw[k], per)
			if hi != 0 {
				return false
			}
			out[k] = lo
			all = gcd(all, lo)
		}
	}
	for _, i := range idx {
		g := groups[i]
		for k := g.first; k < g.first+g.n; k++ {
			if out[k] /= all; out[k] > balancer.MaxWeight {
				return false
			}
		}
	}
	return true
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
