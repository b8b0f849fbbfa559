package lbxds

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	edsv3 "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/discovery"
	"github.com/lbkit/lbkit/locality"
)

// TypeURL is the type URL of a ClusterLoadAssignment, the EDS resource:
// the type_url of every request the client sends and of the resources it
// reads.
const TypeURL = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"

// resourceURL is the type URL of the envoy.service.discovery.v3.Resource
// wrapper a server may put around each resource.
const resourceURL = "type.googleapis.com/envoy.service.discovery.v3.Resource"

// ErrNotReady wraps Start's error when a cluster had no set by
// Config.InitialTimeout; the client keeps trying.
var ErrNotReady = errors.New("lbxds: no endpoints yet")

// Defaults of Config.
const (
	// DefaultInitialTimeout is how long Start waits for every cluster's
	// first set: gRPC's xDS resource watch expiry (15 s), after which
	// gRPC reports a resource as not found.
	DefaultInitialTimeout = 15 * time.Second
	// DefaultKeepaliveTime and DefaultKeepaliveTimeout are the keepalive
	// grpc-go's own xDS client sets on its connection to the control
	// plane, so that a control plane that vanishes without closing the
	// connection is noticed (a ping unanswered for 20 s after 5 minutes
	// of silence), not waited for forever.
	DefaultKeepaliveTime    = 5 * time.Minute
	DefaultKeepaliveTimeout = 20 * time.Second
)

// Service says which xDS service the client streams from.
type Service uint8

const (
	// ADS is the Aggregated Discovery Service,
	// envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources:
	// what Envoy and gRPC use with most control planes (Istio, go-control-plane).
	ADS Service = iota
	// EDS is the Endpoint Discovery Service,
	// envoy.service.endpoint.v3.EndpointDiscoveryService/StreamEndpoints.
	EDS
)

// String returns "ADS" or "EDS".
func (s Service) String() string {
	switch s {
	case ADS:
		return "ADS"
	case EDS:
		return "EDS"
	}
	return fmt.Sprintf("Service(%d)", uint8(s))
}

// Config configures a Client. Node and Clusters are required, and
// DialOptions must carry transport credentials; every other field's zero
// value is the documented default.
type Config struct {
	// Node identifies this client to the control plane, which picks what
	// to send it by node (go-control-plane's snapshot cache by Node.Id).
	// Required, with a non-empty Id. UserAgentName is "lbkit" when
	// empty. The client sends it on the first request of each stream, as
	// the xDS protocol asks.
	Node *corev3.Node
	// Clusters maps each EDS resource name to subscribe to (the
	// ClusterLoadAssignment's cluster_name: the cluster's name, or the
	// service_name of its eds_cluster_config) to the target it feeds: the
	// outermost layer of the cluster's stack (health, or subset around
	// health). At least one; each target is fed by one
	// discovery.Publisher, and no two clusters may share one.
	Clusters map[string]balancer.Updater
	// DialOptions are passed to grpc.NewClient. They must say how to
	// secure the connection (grpc.WithTransportCredentials: TLS, or
	// insecure.NewCredentials() on a trusted network); the client puts
	// its keepalive (DefaultKeepaliveTime, DefaultKeepaliveTimeout)
	// before them, so an option of yours overrides it.
	DialOptions []grpc.DialOption
	// Service is ADS (the default) or EDS.
	Service Service
	// ZoneName names the lbkit zone of an xDS locality. Nil: ZoneName.
	ZoneName func(region, zone, subZone string) string
	// Backend makes the backend given to a cluster's target for an
	// endpoint whose ID is id (discovery.Config.Backend). Nil:
	// balancer.NewEndpoint(id, e.Weight).At(e.Locality), with e's labels
	// and hash key (discovery.Config.Backend's default).
	Backend func(cluster, id string, e discovery.Endpoint) balancer.Backend
	// Backoff is the wait between attempts to open the stream after the
	// control plane went away or refused it, and before each NACK of a
	// version already NACKed (a control plane sending again what the
	// client refused, as go-control-plane's snapshot cache does). Its
	// zero value is gRPC's connection backoff (discovery.Backoff).
	Backoff discovery.Backoff
	// InitialTimeout is how long Start waits for every cluster's first
	// set. Zero: DefaultInitialTimeout (15 s). Negative: Start returns at
	// once.
	InitialTimeout time.Duration
	// OnUpdate, if set, hears of every cluster's update as it is taken
	// or refused, and of every stream that ends. It runs on the client's
	// goroutine, with no lock held, and must return quickly: the stream
	// waits for it.
	OnUpdate func(Update)
}

// Update is what Config.OnUpdate hears.
type Update struct {
	// Cluster is the cluster the update was for; "" for the end of a
	// stream.
	Cluster string
	// Version is the response's version_info.
	Version string
	// Taken says the target took the set. When it did not, the client
	// NACKed the response with Err, and the target keeps its last set.
	Taken bool
	// Report is what the target was given, when Taken.
	Report discovery.Report
	// Skipped lists the localities given no traffic (Assignment.Skipped).
	Skipped []string
	// Err is why the update was refused (it wraps ErrRejected, or is the
	// target's error); for a set taken, the error of a drain or enable
	// that followed it, or of the overprovisioning factor; for the end
	// of a stream, why it ended.
	Err error
}

// Status is a Client's state, for tests and dashboards.
type Status struct {
	// Version is the last version_info the client ACKed, kept across
	// streams: the version it subscribes with when it reconnects.
	Version string
	// Connected says a stream is open and the control plane has answered
	// on it.
	Connected bool
	// Streams counts the streams opened since Start.
	Streams int
	// ACKs and NACKs count the responses ACKed and NACKed.
	ACKs, NACKs int
	// NACK is the error_detail of the last NACK, nil once a response is
	// ACKed.
	NACK error
	// StreamErr is why the last stream ended, nil before any did.
	StreamErr error
}

// overprovisioner is the layer that takes a ClusterLoadAssignment's
// overprovisioning factor: locality.Balancer.
type overprovisioner interface {
	SetOverprovisioning(percent int) error
}

var _ overprovisioner = (*locality.Balancer)(nil)

// Client is an xDS client that subscribes to ClusterLoadAssignments over
// one stream and feeds each cluster's target through a
// discovery.Publisher. Create it with New; Start begins the stream, Close
// ends it. It is a discovery.Source. Its methods are safe for concurrent
// use.
type Client struct {
	// Immutable after New.
	cfg      Config
	node     *corev3.Node
	conn     *grpc.ClientConn
	names    []string // resource names, sorted
	clusters map[string]*cluster
	initial  time.Duration
	ready    chan struct{} // closed once every cluster has a set

	// Guarded by mu.
	mu      sync.Mutex
	started bool
	closed  bool
	cancel  context.CancelFunc
	done    chan struct{}
	status  Status
}

var _ discovery.Source = (*Client)(nil)

// cluster is one subscribed resource. Its fields after the first three
// belong to the run goroutine.
type cluster struct {
	name string
	pub  *discovery.Publisher
	over overprovisioner // the target's locality layer, or nil

	last    []byte // the resource last read, as sent
	lastErr error  // its fault, nil if taken
	factor  int    // the overprovisioning factor last set, 0 for the Config's
	has     bool   // a set was taken
}

// stream is what the run goroutine keeps across streams.
type stream struct {
	version string // last ACKed
	nacked  string // the version last NACKed, "" after an ACK
	repeats int    // NACKs of nacked sent again
	ready   int    // clusters with a set
}

// New returns a Client for the control plane at target (a gRPC target:
// "xds.internal:18000", "dns:///xds.internal:18000"), not started. It
// returns an error for a Config without Node, Node.Id or Clusters, a
// cluster with a nil target, two clusters with one target, and for what
// grpc.NewClient refuses (no transport credentials among the
// DialOptions). It does not connect: Start does.
func New(target string, cfg Config) (*Client, error) {
	if cfg.Node == nil || cfg.Node.GetId() == "" {
		return nil, errors.New("lbxds: Config.Node with an Id is required")
	}
	if len(cfg.Clusters) == 0 {
		return nil, errors.New("lbxds: Config.Clusters names no cluster")
	}
	if cfg.Service > EDS {
		return nil, fmt.Errorf("lbxds: Config.Service is %v, want ADS or EDS", cfg.Service)
	}
	c := &Client{
		cfg:      cfg,
		node:     proto.CloneOf(cfg.Node),
		clusters: make(map[string]*cluster, len(cfg.Clusters)),
		initial:  cmp.Or(cfg.InitialTimeout, DefaultInitialTimeout),
		ready:    make(chan struct{}),
	}
	if c.node.GetUserAgentName() == "" {
		c.node.UserAgentName = "lbkit"
	}
	targets := make(map[balancer.Updater]string, len(cfg.Clusters))
	for name, t := range cfg.Clusters {
		if name == "" {
			return nil, errors.New("lbxds: Config.Clusters: a cluster with no name")
		}
		if t == nil {
			return nil, fmt.Errorf("lbxds: Config.Clusters: cluster %q has a nil target", name)
		}
		if other, dup := targets[t]; dup {
			return nil, fmt.Errorf("lbxds: Config.Clusters: clusters %q and %q have one target", min(name, other), max(name, other))
		}
		targets[t] = name
		var dcfg discovery.Config
		if cfg.Backend != nil {
			dcfg.Backend = func(id string, e discovery.Endpoint) balancer.Backend { return cfg.Backend(name, id, e) }
		}
		pub, err := discovery.New(t, dcfg)
		if err != nil {
			return nil, fmt.Errorf("lbxds: cluster %q: %w", name, err)
		}
		c.clusters[name] = &cluster{name: name, pub: pub, over: overprovisionerOf(t)}
		c.names = append(c.names, name)
	}
	slices.Sort(c.names)
	opts := append([]grpc.DialOption{grpc.WithKeepaliveParams(keepalive.ClientParameters{
		Time: DefaultKeepaliveTime, Timeout: DefaultKeepaliveTimeout,
	})}, cfg.DialOptions...)
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		return nil, fmt.Errorf("lbxds: %w", err)
	}
	c.conn = conn
	return c, nil
}

// overprovisionerOf returns the first layer of t that takes an
// overprovisioning factor, or nil.
func overprovisionerOf(t balancer.Updater) overprovisioner {
	if o, ok := t.(overprovisioner); ok {
		return o
	}
	p, _ := t.(balancer.Picker)
	o, _ := balancer.As[overprovisioner](p)
	return o
}

// Start opens the stream and keeps it open, reconnecting after Backoff's
// delays, until ctx ends or Close. It waits until every cluster has its
// first set, at most InitialTimeout, and returns an error wrapping
// ErrNotReady naming those without one if that passes first (the client
// keeps trying: Close it, or run without them), or ctx's error if ctx
// ends first. It returns an error wrapping balancer.ErrStarted if called
// twice and one wrapping balancer.ErrClosed after Close.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return fmt.Errorf("lbxds: start: %w", balancer.ErrClosed)
	case c.started:
		c.mu.Unlock()
		return fmt.Errorf("lbxds: start: %w", balancer.ErrStarted)
	}
	c.started = true
	ctx, c.cancel = context.WithCancel(ctx)
	c.done = make(chan struct{})
	c.mu.Unlock()
	go c.run(ctx)

	if c.initial < 0 {
		return nil
	}
	t := time.NewTimer(c.initial)
	defer t.Stop()
	select {
	case <-c.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("lbxds: start: %w", ctx.Err())
	case <-t.C:
		return fmt.Errorf("lbxds: start: %w after %v for %s", ErrNotReady, c.initial, strings.Join(c.waiting(), ", "))
	}
}

// waiting returns the names of the clusters without a set. It reads the
// run goroutine's record under mu.
func (c *Client) waiting() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, n := range c.names {
		if !c.clusters[n].hasSet() {
			out = append(out, fmt.Sprintf("%q", n))
		}
	}
	return out
}

// Close ends the stream, waits for the client's goroutine, and closes the
// connection. The targets keep their last sets. Close is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	cancel, done := c.cancel, c.done
	c.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
	if err := c.conn.Close(); err != nil {
		return fmt.Errorf("lbxds: close: %w", err)
	}
	return nil
}

// Status returns the client's state.
func (c *Client) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

func (c *Client) update(f func(*Status)) {
	c.mu.Lock()
	f(&c.status)
	c.mu.Unlock()
}

// run keeps a stream open until ctx ends: after a stream ends, it waits
// Backoff.Delay(n) for the nth attempt in a row that got no response
// (n = 0 again once one did: the wait then spreads a fleet's reconnects
// after a control plane restarts), then opens another, subscribing with
// the last version ACKed.
func (c *Client) run(ctx context.Context) {
	defer close(c.done)
	var st stream
	for n := 0; ; n++ {
		answered, err := c.stream(ctx, &st)
		if ctx.Err() != nil {
			return
		}
		c.update(func(s *Status) { s.Connected, s.StreamErr = false, err })
		c.notify(Update{Err: err})
		if answered {
			n = 0
		}
		if !sleep(ctx, c.cfg.Backoff.Delay(n)) {
			return
		}
	}
}

// sleep waits d or until ctx ends, and reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// open opens a stream of the configured service.
func (c *Client) open(ctx context.Context) (grpc.BidiStreamingClient[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse], error) {
	if c.cfg.Service == EDS {
		return edsv3.NewEndpointDiscoveryServiceClient(c.conn).StreamEndpoints(ctx)
	}
	return discoveryv3.NewAggregatedDiscoveryServiceClient(c.conn).StreamAggregatedResources(ctx)
}

// stream runs one stream until it fails or ctx ends, and reports whether
// the control plane answered on it. Each response is ACKed (version_info
// its version, response_nonce its nonce) or NACKed (version_info the last
// version ACKed, the nonce, and error_detail saying why), as the xDS
// protocol's ACK and NACK rules say.
func (c *Client) stream(ctx context.Context, st *stream) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := c.open(ctx)
	if err != nil {
		return false, fmt.Errorf("lbxds: open %v stream: %w", c.cfg.Service, err)
	}
	c.update(func(s *Status) { s.Streams++ })
	// The first request of a stream carries the node, and the version
	// last ACKed (the version is the resources', not the stream's); the
	// nonce starts afresh.
	req := &discoveryv3.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL, ResourceNames: c.names, VersionInfo: st.version}
	if err := s.Send(req); err != nil {
		return false, fmt.Errorf("lbxds: send: %w", err)
	}
	answered := false
	for {
		resp, err := s.Recv()
		if err != nil {
			return answered, fmt.Errorf("lbxds: receive: %w", err)
		}
		if !answered {
			answered = true
			c.update(func(s *Status) { s.Connected = true })
		}
		if resp.GetTypeUrl() != TypeURL {
			continue // not subscribed to: neither ACK nor NACK (gRPC does the same)
		}
		nack := c.handle(resp, st)
		req := &discoveryv3.DiscoveryRequest{TypeUrl: TypeURL, ResourceNames: c.names, ResponseNonce: resp.GetNonce()}
		if nack == nil {
			st.version, st.nacked, st.repeats = resp.GetVersionInfo(), "", 0
			req.VersionInfo = st.version
			c.update(func(s *Status) { s.Version, s.ACKs, s.NACK = st.version, s.ACKs+1, nil })
		} else {
			// A version NACKed already, sent again: wait before saying no
			// again, so that a control plane that resends on every NACK
			// (go-control-plane's snapshot cache) does not spin both.
			if v := resp.GetVersionInfo(); v == st.nacked {
				if !sleep(ctx, c.cfg.Backoff.Delay(st.repeats)) {
					return answered, ctx.Err()
				}
				st.repeats++
			} else {
				st.nacked, st.repeats = v, 0
			}
			req.VersionInfo = st.version
			req.ErrorDetail = &statuspb.Status{Code: int32(codes.InvalidArgument), Message: nack.Error()}
			c.update(func(s *Status) { s.NACKs, s.NACK = s.NACKs+1, nack })
		}
		if err := s.Send(req); err != nil {
			return answered, fmt.Errorf("lbxds: send: %w", err)
		}
	}
}

// handle reads and applies every ClusterLoadAssignment of resp, and
// returns why the response is to be NACKed, or nil. Each cluster is taken
// or refused on its own, as gRPC does: a bad resource does not hold back
// a good one beside it.
func (c *Client) handle(resp *discoveryv3.DiscoveryResponse, st *stream) error {
	var errs []error
	for i, r := range resp.GetResources() {
		if err := c.handleOne(r, resp.GetVersionInfo(), st); err != nil {
			errs = append(errs, fmt.Errorf("resource %d: %w", i, err))
		}
	}
	return errors.Join(errs...)
}

func (c *Client) handleOne(r *anypb.Any, version string, st *stream) error {
	if r.GetTypeUrl() == resourceURL {
		var w discoveryv3.Resource
		if err := proto.Unmarshal(r.GetValue(), &w); err != nil {
			return fmt.Errorf("%w: %w", ErrRejected, err)
		}
		r = w.GetResource()
	}
	if r.GetTypeUrl() != TypeURL {
		return fmt.Errorf("%w: type %q, want %q", ErrRejected, r.GetTypeUrl(), TypeURL)
	}
	// The same bytes as a cluster's last: nothing changed (a response
	// sent again after a NACK of a cluster beside it, or on a new
	// stream).
	for _, cl := range c.clusters {
		if cl.last != nil && bytes.Equal(cl.last, r.GetValue()) {
			return cl.lastErr
		}
	}
	cla := new(endpointv3.ClusterLoadAssignment)
	if err := proto.Unmarshal(r.GetValue(), cla); err != nil {
		return fmt.Errorf("%w: %w", ErrRejected, err)
	}
	if cla.GetClusterName() == "" {
		return fmt.Errorf("%w: no cluster_name", ErrRejected)
	}
	cl := c.clusters[cla.GetClusterName()]
	if cl == nil {
		return nil // not subscribed to: ignored, as gRPC does
	}
	u := c.apply(cl, cla, version)
	cl.last, cl.lastErr = slices.Clone(r.GetValue()), nil
	if !u.Taken {
		cl.lastErr = u.Err
	}
	if u.Taken && !cl.has {
		c.mu.Lock()
		cl.has = true
		c.mu.Unlock()
		if st.ready++; st.ready == len(c.clusters) {
			close(c.ready)
		}
	}
	c.notify(u)
	if !u.Taken {
		return u.Err
	}
	return nil
}

// hasSet reads cl.has; c.mu must be held.
func (cl *cluster) hasSet() bool { return cl.has }

// apply reads cla and gives its set to cl's target, then its
// overprovisioning factor to the target's locality layer.
func (c *Client) apply(cl *cluster, cla *endpointv3.ClusterLoadAssignment, version string) Update {
	u := Update{Cluster: cl.name, Version: version}
	a, err := Read(cla, c.cfg.ZoneName)
	if err == nil && cl.over != nil && a.Overprovisioning != 0 &&
		(a.Overprovisioning < 100 || a.Overprovisioning > locality.MaxOverprovisioning) {
		err = fmt.Errorf("%w: cluster %q: policy.overprovisioning_factor %d: the target's locality layer takes 100 to %d", ErrRejected, cl.name, a.Overprovisioning, locality.MaxOverprovisioning)
	}
	if err != nil {
		u.Err = err
		return u
	}
	u.Skipped = a.Skipped
	u.Report, err = cl.pub.Publish(a.Endpoints)
	// Publish takes the set unless it refuses the endpoints or the target
	// refuses them, and then reports nothing; errors of the drains and
	// enables after a taken set come with its Report, which names them.
	u.Taken = err == nil || len(u.Report.Healthy)+len(u.Report.Unhealthy)+len(u.Report.Draining)+len(u.Report.Left) > 0
	u.Err = err
	if !u.Taken {
		u.Err = fmt.Errorf("lbxds: cluster %q: %w", cl.name, err)
		return u
	}
	if cl.over != nil && a.Overprovisioning != cl.factor {
		if ferr := cl.over.SetOverprovisioning(a.Overprovisioning); ferr != nil {
			u.Err = errors.Join(u.Err, fmt.Errorf("lbxds: cluster %q: %w", cl.name, ferr))
		} else {
			cl.factor = a.Overprovisioning
		}
	}
	return u
}

func (c *Client) notify(u Update) {
	if c.cfg.OnUpdate != nil {
		c.cfg.OnUpdate(u)
	}
}
