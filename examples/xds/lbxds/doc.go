// Package lbxds feeds any lbkit picker from an xDS control plane (Envoy's
// discovery protocol: Istio, go-control-plane, Envoy Gateway): a Client
// subscribes to the ClusterLoadAssignments of one or more clusters over
// one ADS (or EDS) stream and gives each cluster's endpoints, with their
// zones, priorities, weights and health, to that cluster's stack:
//
//	l, err := locality.New(func() balancer.Balancer { return leastconn.New() }, locality.Config{Zone: "us-east-1/us-east-1a"})
//	h, err := health.New(l, health.Config{}) // the cluster's target: Update, Drain, Enable
//	defer h.Close()
//	c, err := lbxds.New("xds.internal:18000", lbxds.Config{
//		Node:        &corev3.Node{Id: "edge-proxy-1", Cluster: "edge"},
//		Clusters:    map[string]balancer.Updater{"cart": h},
//		DialOptions: []grpc.DialOption{grpc.WithTransportCredentials(creds)},
//	})
//	err = c.Start(ctx) // returns once "cart" has endpoints (15 s at most)
//	defer c.Close()
//	proxy, err := lbhttp.NewProxy(h, lbhttp.Config{})
//	err = http.ListenAndServe(":8080", proxy)
//
// Each err is to be checked. What the caller must do:
//
//   - Name the EDS resources: the cluster_name of each
//     ClusterLoadAssignment, which for an Envoy EDS cluster is its
//     eds_cluster_config.service_name, or the cluster's name when that
//     is empty. The client reads no CDS or LDS; the caller knows its
//     clusters.
//   - Give each cluster the top of its stack (health, or subset around
//     health) as its target: the client's discovery.Publisher calls its
//     Update, the Drain and Enable of its first balancer.Admin layer, and
//     the SetOverprovisioning of its first layer that has one
//     (locality.Balancer), each found through the decorators' Unwrap.
//   - Say who the client is (Config.Node: most control planes choose
//     what to send by node.id) and how to secure the connection
//     (Config.DialOptions, which grpc.NewClient requires to name
//     transport credentials).
//   - Start it and Close it. Close leaves every target its last set.
//
// # Mapping
//
// Read turns a ClusterLoadAssignment into discovery.Endpoints:
//
//	xDS                                   lbkit
//	socket_address address:port_value     the backend's ID, balancer.CanonicalAddr's spelling of
//	                                      the IP address (an EDS address is an IP: Envoy's rule)
//	locality region, zone, sub_zone       Locality.Zone, ZoneName: "region/zone/sub_zone", trailing
//	                                      empty parts left out (Config.ZoneName to choose otherwise)
//	LocalityLbEndpoints.priority          Locality.Priority (0 to balancer.MaxPriority)
//	load_balancing_weight (both levels)   Endpoint.Weight, combined below
//	health_status HEALTHY, UNKNOWN        Healthy: takes traffic
//	health_status UNHEALTHY, TIMEOUT      Unhealthy: through balancer.HealthUpdater (see below)
//	health_status DEGRADED, unknown ones  Unhealthy (Envoy uses degraded hosts only when healthy
//	                                      ones fall short; lbkit's nearest is a level in panic)
//	health_status DRAINING                Draining: drained through the Admin layer, see below
//	policy.overprovisioning_factor        locality.Balancer.SetOverprovisioning (140 is 1.4, as
//	                                      Envoy reads it); none: the Balancer's own Config
//	filter_metadata ns: {key: value}      Labels["ns/key"], for strings, numbers and bools
//	filter_metadata envoy.lb: {hash_key}  HashKey, a string (gRFC A76): consistent places the
//	                                      endpoint by it, not its address (balancer.HashKeyer)
//	Endpoint.hostname                     Labels["hostname"]
//
// Weights. Without locality weights (no locality sets one), an endpoint
// keeps its own weight, 1 when unset, and each zone's share of its level
// is its healthy endpoints' weight, as Envoy balances a priority without
// locality-weighted load balancing. With locality weights, as gRPC's
// wrr_locality and Envoy's locality-weighted load balancing do, endpoint e
// of locality z (weight L, endpoint weights summing to W) gets
// w_e × L / W, made whole by the least common multiple of the W over the
// level and reduced by the greatest common divisor: zones share the level
// as L does, and endpoints share their zone as w does. In the worked
// example of TestReadWeights, localities of weight 3 (two endpoints) and
// 1 (four) give weights 6, 6 and 1, 1, 1, 1: 12 to 4. Weights that do
// not fit in balancer.MaxWeight are scaled, the largest to MaxWeight,
// each rounded, at least 1. A locality without a weight, or of weight 0,
// in an assignment that has locality weights gets no traffic (gRPC's
// rule) and is listed in Update.Skipped. One departure: Envoy scales a
// locality by its healthy share times the overprovisioning factor; lbkit
// by its healthy share of weight alone.
//
// Health. UNHEALTHY endpoints reach a target that is a
// balancer.HealthUpdater (health.Balancer, locality.Balancer) as
// unhealthy members of their level: health keeps them out of the picks
// (State Down, ReasonSource) and hands them on to locality as unhealthy,
// which lowers the level's share by the overprovisioning factor, as Envoy
// does (TestHealthOnTopKeepsUnhealthy). A target that is no HealthUpdater
// is given the set without them.
//
// Draining. A DRAINING endpoint that the target already serves stays in
// its set, drained through health's Drain: its requests in flight
// finish, no new one starts (TestDrainThroughProxy), until the control
// plane stops listing it; one never served is left out. gRPC's xDS client
// drops DRAINING endpoints at once, cutting what is in flight.
//
// Not used: drop_overloads (lbkit drops no request; gRPC does), LEDS
// (refused), additional_addresses (the first address is the endpoint),
// endpoint_stale_after, locality metadata and proximity, and load
// reporting (LRS).
//
// # NACK rules
//
// A ClusterLoadAssignment is refused whole, and the target keeps its
// last set, when it has
//
//   - an endpoint weight of 0 (an unset weight is 1);
//   - an address twice (two spellings of one address included);
//   - a locality twice in one priority, or two localities whose zone
//     names are one;
//   - a gap in the priorities (0, 2 without 1), or a priority above
//     balancer.MaxPriority;
//   - locality weights in one priority, or endpoint weights in one
//     locality, summing to more than 2³²−1 (Envoy's and gRPC's bound);
//   - an address that does not parse: not an IP address, port 0 or
//     above 65535, a named port, a custom resolver, a pipe or an Envoy
//     internal address, a named endpoint, no address;
//   - a LEDS locality, an overprovisioning factor of 0, no cluster_name;
//   - an overprovisioning factor outside 100 to 1000 when the target has
//     a locality layer, which takes only those;
//   - a target that refuses the set.
//
// The NACK's error_detail (code INVALID_ARGUMENT) names every fault, with
// its locality, priority, zone and endpoint, as Read's error does. The
// rules are gRPC's (internal/xds/xdsclient/xdsresource/unmarshal_eds.go)
// and lbkit's own (the address spelling, the priority bound, the zone
// names). Each cluster of a response is taken or refused on its own, as
// gRPC does: the response is NACKed if any is refused, and the others are
// taken.
//
// # Protocol
//
// State of the world, as Envoy's xDS protocol document describes it. The
// type URL is TypeURL; the resource names are Config.Clusters' names,
// sorted. The first request of a stream carries the node and the last
// version ACKed (the version is the resources', not the stream's, and
// survives a reconnect); each response is ACKed with its version and
// nonce, or NACKed with the last version ACKed, its nonce and the
// error_detail. A response of another type is neither ACKed nor NACKed,
// and a resource not subscribed to is ignored, as gRPC does. A cluster
// absent from a response keeps its set: EDS responses need not carry
// every resource. Resources wrapped in envoy.service.discovery.v3.Resource
// are unwrapped. A response whose bytes equal a cluster's last ones is
// not read again.
//
// A control plane that answers a NACK by sending the same version again
// at once (go-control-plane's snapshot cache does, go-control-plane
// #962) would have the two exchange NACKs as fast as the network allows;
// the client waits Config.Backoff's delays before each NACK of a version
// it NACKed already (TestNACKRepeatsBackOff). A corrected snapshot then
// reaches the client after the wait in progress. With go-control-plane's
// snapshot cache in ADS mode (NewSnapshotCache(true, ...)), a snapshot
// must hold every cluster the client subscribes to, or the cache does
// not answer.
//
// # Defaults
//
//   - Reconnection: discovery.Backoff, gRPC's connection backoff (1 s,
//     ×1.6, at most 120 s, ±20% jitter), counted from 0 again once a
//     stream has had a response; the gRPC connection under the stream
//     reconnects by the same backoff. Meanwhile every target keeps its
//     last set.
//   - Start's wait: DefaultInitialTimeout, 15 s, gRPC's xDS resource
//     watch expiry.
//   - Keepalive: DefaultKeepaliveTime and DefaultKeepaliveTimeout, 5
//     minutes and 20 s, what grpc-go's xDS client sets.
//   - Node: node.user_agent_name "lbkit" when unset.
//
// # Cost
//
// Read is O(n) for n endpoints, with one address parse and a map entry
// each; Publish is O(n log n) and the target's Update. BenchmarkUpdate
// measures an update of 1,000 endpoints in 10 localities, from the
// decoded ClusterLoadAssignment to the Update of the pickers inside
// health ▶ locality, in CPU time; BenchmarkRead measures Read alone.
// Nothing of it is on the request path: picks cost what the stack's
// pickers cost.
//
// # Concurrency
//
// A Client runs one goroutine from Start to Close, which reads the
// stream, updates the targets and calls Config.OnUpdate, with no lock
// held. Start, Close and Status are safe for concurrent use. The targets
// are updated through their own concurrency-safe methods: Picks never
// wait for the client.
//
// # Tests
//
// The tests run go-control-plane's own server (snapshot cache, ADS and
// EDS) in the test on 127.0.0.1, real HTTP backends and lbhttp's proxy,
// and balancertest.RunSource's checks for discovery sources.
package lbxds
