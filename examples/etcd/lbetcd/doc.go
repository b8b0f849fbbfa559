// Package lbetcd feeds any lbkit picker from etcd: a Watcher keeps the
// picker's set equal to the keys under a prefix, one endpoint a key, and
// Register keeps a backend's key there for as long as the backend lives.
// On the proxy:
//
//	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"10.0.0.5:2379"}, DialTimeout: 5 * time.Second})
//	lb, err := health.New(leastconn.New(), health.Config{}) // the Watcher's target
//	w, err := lbetcd.New(cli, lb, lbetcd.Config{Prefix: "/services/cart/"})
//	err = w.Start(ctx) // returns once the first set is in (30 s at most)
//	defer w.Close()
//	proxy, err := lbhttp.NewProxy(lb, lbhttp.Config{})
//	err = http.ListenAndServe(":8080", proxy)
//
// On each backend:
//
//	reg, err := lbetcd.Register(ctx, cli, lbetcd.RegisterConfig{Key: "/services/cart/" + addr, Record: lbetcd.Record{Address: addr, Zone: zone}})
//	defer reg.Close() // revokes the lease: the key goes at once
//
// The Watcher gives its target what any lbkit source gives (package
// discovery): IDs spelled by balancer.CanonicalAddr, weights, zones and
// priorities in balancer.Locality for package locality, health through
// balancer.HealthUpdater, draining endpoints drained through the first
// balancer.Admin layer (health.Balancer); and the last good set on every
// failure.
//
// # The record
//
// Every key under Config.Prefix is one endpoint; the key's name is free
// (the address is in the value). The value, in the default JSON format,
// is a Record:
//
//	{"address":"10.0.0.1:8080","weight":3,"zone":"us-east-1a","priority":0,
//	 "state":"healthy","metadata":{"version":"v2"}}
//
//	field     type                default    refused
//	address   "host:port" string  required   missing, not host:port, port 0,
//	                                         a host that is neither an IP nor a name
//	weight    integer             1 (0 too)  negative, above balancer.MaxWeight, not an integer
//	zone      string              ""
//	priority  integer             0          outside [0, balancer.MaxPriority]
//	state     string              "healthy"  anything but healthy, unhealthy, draining
//	metadata  object of strings   none       a value that is not a string
//
// A value that is not a JSON object (a bare string, null, an array, a
// truncated object) is refused. Fields the Record does not know are
// ignored, so that a newer writer can add some. Parse reads one value;
// Register writes one.
//
// Two other formats are read (Config.Format) and written
// (RegisterConfig.Format): Naming, etcd's own
// (go.etcd.io/etcd/client/v3/naming/endpoints, as its Manager writes it
// under target/addr and grpc-go's etcd resolver reads it,
// {"Op":0,"Addr":"10.0.0.1:8080","Metadata":{...}}), and Plain, the
// address alone (as go-zero's discov writes it). Neither carries a
// weight, a zone, a priority or a state.
//
// A key whose value is refused is skipped, and reported in
// Sync.Problems (Config.OnSync) with an error wrapping ErrBadRecord and
// the reason's sentinel (balancer.ErrBadAddr, ErrBadWeight,
// ErrBadLocality): never a panic, never an error of the whole set. A
// refused value written over a good one leaves the good one in use (bad
// input leaves the previous state), reported the same way, until the key
// is written again or deleted. An address under two keys (a backend that
// registered again under a new key before its old lease expired) is one
// endpoint, the record of the key written last; the other key is
// reported.
//
// # Watching, compaction, outages
//
// Start lists the prefix (a linearizable Get, from a member that has a
// leader: clientv3.WithRequireLeader), publishes it, and watches the
// prefix from the list's revision plus one, so that no change between
// the list and the watch is lost. Each watch response, and those already
// waiting behind it, is applied and the whole set published once. A
// deleted key's endpoint leaves the set; a prefix with no key left is an
// empty set, which reaches the target: the registry said so.
//
// The watch carries WithRequireLeader: a member cut off from its cluster
// cancels it (etcdserver: no leader) instead of holding it open and
// silent, as etcd's clientv3.Watcher documentation advises.
//
// When the watch resumes from a revision etcd has compacted (the Watcher
// was cut off, or etcd restarted, while auto-compaction ran), etcd
// answers with rpctypes.ErrCompacted (WatchResponse.CompactRevision set):
// the Watcher lists the prefix again at once and watches from the new
// list. (etcd's own endpoints.Manager closes its watch channel on that
// error and never resumes; go-zero users report the same error in a loop,
// go-zero #3364.) Any other end of the watch is a failure: the Watcher
// waits Config.Backoff (gRPC's connection backoff: 1 s, ×1.6 a retry, at
// most 120 s, ±20% jitter) and lists again, and again after each failed
// list. A watch established resets the backoff.
//
// Through an outage (etcd stopped or unreachable) nothing is published:
// the target keeps its last set. etcd's client retries the watch stream
// on its own and resumes it from the last revision it delivered, so the
// changes made meanwhile arrive when etcd is back; a failed list or a
// cancelled watch is told to Config.OnError. The list is bounded by
// Config.Timeout (DefaultTimeout, 5 s, etcdctl's --command-timeout);
// Start gives up after Config.SyncTimeout (DefaultSyncTimeout, 30 s, as
// lbkube's) with ErrNotSynced.
//
// # Registering
//
// Register writes the record under a lease of RegisterConfig.TTL
// (DefaultTTL, 10 s: go-zero's discov TimeToLive; kratos's etcd registry
// uses 15 s), which etcd's client keeps alive every TTL/3. Close revokes
// the lease, which deletes the key at once. A process that dies stops
// its keep-alives, and etcd deletes the key when the lease expires: at
// most TTL after the last keep-alive, plus etcd's check for expired
// leases (every 500 ms). Until then proxies still send it requests; pair
// the Watcher with health's passive ejection so that they stop sooner.
//
// A lease lost while the process lives (revoked, or not renewed for a TTL
// because etcd was unreachable) is replaced: Register grants a new lease,
// writes the key under it and revokes the old one, retrying with
// RegisterConfig.Backoff's waits; RegisterConfig.OnError hears of each
// step that fails. Drain rewrites the record as draining (JSON only), so
// that the Watchers drain the endpoint before Close removes it.
//
// # What the caller must do
//
//   - Make the client (endpoints, TLS, credentials, DialTimeout) and close
//     it after the Watchers and Registrations that use it: they do not
//     close it.
//   - Give the Watcher the top of the stack as its target (health, or
//     subset around health), as for any discovery source.
//   - End the prefix with the keys' delimiter: "/services/cart" also
//     matches "/services/cart-v2/...".
//   - Start the Watcher and Close it; Close each Registration. Keep
//     OnSync and OnError short, and call no Close from them.
//
// # Cost
//
// Each change publishes the whole set: O(k log k) for k keys (the keys
// sorted, their addresses deduplicated) plus discovery.Publisher's
// O(n log n) and the target's Update. A change parses the one value it
// carries; a list parses every value. BenchmarkUpdate measures both, from
// the decoded event to the picker's Update, for 1,000 keys. Memory: one
// parsed record per key. Nothing of it is on the request path.
//
// # Concurrency
//
// A Watcher's work runs on one goroutine of its own, which calls OnSync
// and OnError one at a time, with no lock held; Start and Close are safe
// to call from any goroutine. A Registration runs one goroutine (and an
// etcd lessor of its own, which Close ends); its methods are safe for
// concurrent use.
//
// # Tests
//
// The tests run a real etcd (go.etcd.io/etcd/server/v3's embed), started
// in the test on loopback ports in a temporary directory, behind a TCP
// relay the tests cut to stop etcd as a crash does, or to partition a
// client from it while another writes.
package lbetcd
