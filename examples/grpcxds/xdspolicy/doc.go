// Package xdspolicy lets an xDS control plane choose lbkit's gRPC
// load-balancing policies (package lbpolicy) for its clients, as gRFC A52
// (custom LB policies) allows: a Cluster's load_balancing_policy names
// the policy by TypedStruct, with its config, and grpc-go's own xds
// resolver runs it.
//
// The client, once, before it dials, and its dial:
//
//	import _ "google.golang.org/grpc/xds" // the xds:/// resolver and its policies
//
//	lbpolicy.Register()
//	cc, err := grpc.NewClient("xds:///orders", grpc.WithTransportCredentials(creds))
//	// bootstrap: GRPC_XDS_BOOTSTRAP (a file) or GRPC_XDS_BOOTSTRAP_CONFIG (its JSON)
//
// The control plane, for the Cluster the route of "orders" names:
//
//	ring, err := xdspolicy.Policy(lbpolicy.RingHash, `{"key": "x-user", "boundedLoad": 1.25}`)
//	cluster.LoadBalancingPolicy = xdspolicy.LoadBalancingPolicy(ring, xdspolicy.RoundRobin())
//
// Policy checks the config with the policy's own ParseConfig, on the JSON
// a client will make of it, so that the control plane finds a bad one
// before it sends it. RoundRobin after it serves the clients that have not
// registered lbkit's policies, and Envoy.
//
// # What the control plane and the client must do
//
//   - Clients register every policy a Cluster may name before their first
//     dial: lbpolicy.Register for the built-in ones, and
//     google.golang.org/grpc/balancer.Register for one made with
//     lbpolicy.NewBuilder (PolicyFor names it). The names and configs are
//     lbpolicy's (lbpolicy.Config).
//   - EDS localities need a load_balancing_weight: gRPC ignores a locality
//     without one (xdsresource/unmarshal_eds.go).
//   - Affinity comes from the outgoing metadata entry the hash policies'
//     config names (metadata.AppendToOutgoingContext), not from the
//     route's hash_policy: gRPC computes that hash for its own ring_hash
//     only, in a context value of an internal package
//     (internal/ringhash.XDSRequestHash), which no policy outside grpc-go
//     can read.
//
// # How grpc-go v1.85 reads the Cluster
//
// Read from grpc-go v1.85.0's source, and tested here against
// go-control-plane's server:
//
//   - load_balancing_policy, when set, replaces lb_policy
//     (validateClusterAndConstructClusterUpdate in
//     internal/xds/xdsclient/xdsresource/unmarshal_cds.go).
//   - Its entries are tried in order; the first gRPC can use wins
//     (xdslbregistry.ConvertToServiceConfig). A TypedStruct,
//     xds.type.v3 or udpa.type.v1, names a policy by what follows the last
//     "/" of its type_url, and its Struct, marshalled with encoding/json,
//     is the policy's JSON config (convertCustomPolicy in
//     xdslbregistry/converter). An entry whose policy is not registered is
//     skipped (TestUnregisteredPolicySkipped); a list with none registered
//     is NACKed: "no supported policy found".
//   - The config is parsed by the registered policy's ParseConfig while
//     the Cluster is decoded. An error NACKs the whole Cluster resource,
//     with the policy's reason in the NACK's error_detail and the last
//     accepted version in its version_info, and the client keeps the last
//     Cluster it accepted (TestBadConfigIsNACKed). A registered entry
//     with a bad config is not skipped for a later one
//     (TestBadEntryNotSkipped). A client whose first Cluster is NACKed
//     fails its fail-fast RPCs UNAVAILABLE with the reason; those that
//     wait for ready wait (TestFirstClusterNACKed).
//   - A new Cluster reaches channels in use: another policy, or a new
//     config for the same one (TestPolicyChangeReachesChannel,
//     TestORCAUnderXDS).
//
// # Where the policy runs
//
// The cds policy builds, per cluster (buildLeafClusterConfig in
// internal/xds/balancer/cdsbalancer/configbuilder.go):
//
//	outlier_detection ▶ xds_cluster_impl ▶ priority ▶ the Cluster's policy, once per priority
//
// So:
//
//   - One lbkit policy per priority, over the endpoints of every locality
//     of that priority. gRPC's priority policy fails over between them
//     (to the next priority when one is in TRANSIENT_FAILURE, or has not
//     connected within its 10 s timeout); lbkit's locality decorator is
//     not involved (TestPriorityFailover).
//   - Each endpoint's weight is its locality's share of the priority
//     times its share of the locality, in fixed point with 31 fractional
//     bits (gRFC A113, on in v1.85 unless
//     GRPC_EXPERIMENTAL_PF_WEIGHTED_SHUFFLING=false, when it is the
//     locality weight times the endpoint weight). lbpolicy divides them
//     by their gcd, so lbkit_wrr sends each endpoint its
//     locality-and-endpoint share, as Envoy's locality-weighted balancing
//     does (TestWeightsFromLocalitiesAndEndpoints).
//   - Wrapped in wrr_locality (WRRLocality), the policy runs once per
//     locality instead, under gRPC's weighted_target, which splits RPCs
//     between localities at random in proportion to their weights
//     (TestUnderWRRLocality).
//   - Only HEALTHY and UNKNOWN endpoints reach the policy: gRPC drops
//     UNHEALTHY, DRAINING and the rest before it
//     (priorityLocalitiesToEndpoints). An endpoint the control plane
//     drains leaves the lbkit picker's set at once; lbkit's graceful
//     drain (health's Drain, as package lbxds does for HTTP) is out of a
//     gRPC policy's reach.
//   - Above the policy, xds_cluster_impl applies the Cluster's circuit
//     breaker (max_requests), drops, and load reports to an LRS server;
//     outlier_detection ejects only if the Cluster sets
//     outlier_detection.
//   - The locality of an endpoint is stored in an attribute of an
//     internal package (internal/xds.LocalityIDFromEndpoint): a policy
//     outside grpc-go cannot read it, so lbpolicy's backends carry no
//     balancer.Locality under xDS.
//   - ORCA: per-RPC reports (the trailer) reach the lbkit picker's Done,
//     xds_cluster_impl passing DoneInfo on unchanged (its picker.go), so
//     lbkit_wrr_orca and lbkit_least_conn_orca work under xDS
//     (TestORCAUnderXDS). Out-of-band reports are not offered by lbpolicy.
//   - gRPC's client-side health checking needs healthCheckConfig in the
//     service config, which the xds resolver does not set: under xDS,
//     health is the control plane's health_status.
//
// # Cost and concurrency
//
// Policy and PolicyFor parse and check the config: O(size of the config).
// Every function is safe for concurrent use and returns new messages.
//
// The tests run go-control-plane v0.14.0's server (snapshot cache, ADS)
// on 127.0.0.1 in the test, grpc-go's xds resolver with the bootstrap
// given in process (xds.NewXDSResolverWithConfigForTesting) or in
// GRPC_XDS_BOOTSTRAP_CONFIG (TestBootstrapFromEnv, in a child process,
// since grpc-go reads it once at start), and real gRPC servers on
// loopback as the EDS endpoints.
package xdspolicy
