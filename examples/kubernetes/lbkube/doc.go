// Package lbkube feeds any lbkit picker from a Kubernetes Service's
// EndpointSlices: a Watcher lists and watches every slice of the Service
// with client-go's informers, merges them, and calls Update whenever they
// change, with one balancer.Endpoint per ready address, its zone in the
// endpoint's balancer.Locality. A terminating endpoint is drained, not
// dropped: the requests in flight to it finish, and no new one is sent.
//
//	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig) // or rest.InClusterConfig()
//	if err != nil { ... }
//	client, err := kubernetes.NewForConfig(cfg)
//	if err != nil { ... }
//
//	l, err := locality.New(func() balancer.Balancer { return leastconn.New() }, locality.Config{Zone: myZone})
//	if err != nil { ... }
//	h, err := health.New(l, health.Config{}) // the Watcher's target
//	if err != nil { ... }
//	defer h.Close()
//
//	w, err := lbkube.New(client, h, lbkube.Config{Namespace: "shop", Service: "cart", Port: "http"})
//	if err != nil { ... }
//	if err := w.Start(ctx); err != nil { ... } // returns once the first set is in
//	defer w.Close()
//
//	proxy, err := lbhttp.NewProxy(h, lbhttp.Config{})
//
// What the caller must do:
//
//   - Give the Watcher the top of the stack as its target (health, or
//     subset around health): it calls that target's Update, and the Drain
//     and Enable (balancer.Admin) of its first layer that has them, found
//     through the decorators' Unwrap. A Drain that layer refuses for a
//     backend it does not know (outside this client's subset) is fine:
//     this client sends it nothing. A target with no such layer gets
//     terminating endpoints removed at once instead of drained.
//   - Give the process RBAC to get, list and watch endpointslices
//     (discovery.k8s.io) in the namespace.
//   - Name the port (Config.Port) when the Service has more than one.
//   - Start it, and Close it when done. Start waits for the first list at
//     most Config.SyncTimeout (30 s); if it did not come, Start's error
//     says why when a list asked for then fails too (the API server
//     refused the connection, RBAC forbids the list).
//
// cmd/lbkit-k8s-demo in this module is a runnable proxy built this way,
// with a -kubeconfig flag. It has not been run against a real cluster
// here (this machine has none); its test, and this package's, run against
// client-go's fake clientset.
//
// # Mapping
//
// Every slice labelled kubernetes.io/service-name=<Service> is merged, so
// a Service of any size is seen whole: the EndpointSlice controller puts
// at most 100 endpoints in a slice, and a resolver that reads one slice
// sees at most 100 (kuberesolver has an open report of that). The first
// address of each endpoint is used, at the slice's port of the configured
// name; the backend's ID is host:port as balancer.CanonicalAddr spells
// it (IPv6 bracketed and lower-cased, an IPv4-mapped address as the IPv4
// address). IPv4 and IPv6 slices are both used unless Config.AddressType
// keeps one; FQDN slices are skipped, and so is a slice without the port
// or with a port outside 1 to 65535, each reported in Sync.Problems. An address found in two slices (the controller moving
// it) is one backend, in the better of its two states.
//
// Conditions, as kube-proxy reads them:
//
//	ready (or unset)              eligible: in the set
//	terminating, serving or not   in the set and drained (balancer.Admin's
//	                              Drain), if it was in the set before;
//	                              otherwise left out (nothing is in flight)
//	not ready, not terminating    left out
//
// An address drained and later ready again (a new pod given the IP) is
// enabled again (Enable), so that health's memory of the drain does not
// outlive the pod.
//
// Zones: the endpoint's zone (the node's topology.kubernetes.io/zone)
// becomes its balancer.Locality zone. When every ready endpoint carries
// topology hints (hints.forZones, set by topology-aware routing), the
// hints are used instead, all or not at all as kube-proxy does: the
// endpoint's own zone if its hints name it, else its first hint
// (hints.forNodes are not used). The
// locality decorator then routes by them; with hints, the controller has
// already matched each zone's endpoints to its share of capacity.
//
// # Order of a sync
//
// Each change of the slices (coalesced: changes that arrive during a sync
// make one more) lists the slices, merges them, drains the endpoints that
// turned terminating while they are still in the set, calls Update,
// drains them again (an Update through subset may have chosen one anew),
// and enables those ready again. Config.OnSync hears of each sync, with
// the error of any call the target refused; a refused Update leaves the
// target's previous set in place until the next change.
package lbkube
