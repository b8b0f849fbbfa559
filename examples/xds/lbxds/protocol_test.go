package lbxds_test

import (
	"net"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/lbkit/lbkit/balancer"
	"github.com/lbkit/lbkit/examples/xds/lbxds"
)

// scripted is an ADS server that answers request i with responses[i]
// (none past the end), and records the requests. It is a fake:
// go-control-plane's server never sends what these tests need (a
// resource not subscribed to, one of another type, one without a name,
// resources in the Resource wrapper), so only a server of the test's own
// can.
type scripted struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer
	responses [][]*discoveryv3.DiscoveryResponse
	requests  chan *discoveryv3.DiscoveryRequest
}

func (s *scripted) StreamAggregatedResources(stream discoveryv3.AggregatedDiscoveryService_StreamAggregatedResourcesServer) error {
	for i := 0; ; i++ {
		req, err := stream.Recv()
		if err != nil {
			return err
		}
		s.requests <- req
		if i < len(s.responses) {
			for _, r := range s.responses[i] {
				if err := stream.Send(r); err != nil {
					return err
				}
			}
		}
	}
}

func anyOf(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	require.NoError(t, err)
	return a
}

// The protocol's corners: a response of another type is neither ACKed
// nor NACKed; a resource not subscribed to is ignored; resources in the
// Resource wrapper are read; a resource of another type, one that does
// not decode and one without a cluster_name are NACKed.
func TestProtocolCorners(t *testing.T) {
	svc := cla("svc", loc("r", "a", 0, 0, healthy("10.0.0.1:80")))
	wrapped := anyOf(t, &discoveryv3.Resource{Name: "svc", Resource: anyOf(t, cla("svc", loc("r", "a", 0, 0, healthy("10.0.0.2:80"))))})
	s := &scripted{requests: make(chan *discoveryv3.DiscoveryRequest, 16), responses: [][]*discoveryv3.DiscoveryResponse{
		{
			{VersionInfo: "x1", Nonce: "n1", TypeUrl: "type.googleapis.com/envoy.config.cluster.v3.Cluster"},
			{VersionInfo: "1", Nonce: "n2", TypeUrl: lbxds.TypeURL, Resources: []*anypb.Any{anyOf(t, svc), anyOf(t, cla("other", loc("r", "a", 0, 0, healthy("10.0.9.1:80"))))}},
		},
		{{VersionInfo: "2", Nonce: "n3", TypeUrl: lbxds.TypeURL, Resources: []*anypb.Any{wrapped}}},
		{{VersionInfo: "3", Nonce: "n4", TypeUrl: lbxds.TypeURL, Resources: []*anypb.Any{
			anyOf(t, &corev3.Node{Id: "not an assignment"}),
			{TypeUrl: lbxds.TypeURL, Value: []byte{0xff, 0xff}},
			anyOf(t, cla("", loc("r", "a", 0, 0, healthy("10.0.0.3:80")))),
		}}},
	}}
	gs := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, s)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)

	target := &recorder{}
	c, err := lbxds.New(lis.Addr().String(), lbxds.Config{
		Node: &corev3.Node{Id: nodeID}, Clusters: map[string]balancer.Updater{"svc": target},
		DialOptions: dialOptions(), InitialTimeout: -1,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Start(t.Context()))

	next := func() *discoveryv3.DiscoveryRequest {
		t.Helper()
		select {
		case r := <-s.requests:
			return r
		case <-time.After(wait):
			t.Fatalf("no request within %v", wait)
			return nil
		}
	}
	first := next()
	assert.Equal(t, nodeID, first.GetNode().GetId())
	// The Cluster response gets no answer, so the next request answers
	// n2, the first assignment response.
	ack := next()
	assert.Equal(t, "n2", ack.GetResponseNonce(), "a response of another type is neither ACKed nor NACKed")
	assert.Equal(t, "1", ack.GetVersionInfo())
	assert.Nil(t, ack.GetErrorDetail(), "a resource not subscribed to is ignored")
	assert.Nil(t, ack.GetNode(), "the node goes on the first request only")

	ack = next()
	assert.Equal(t, "2", ack.GetVersionInfo())
	assert.Nil(t, ack.GetErrorDetail())
	assert.Equal(t, []string{"10.0.0.2:80"}, target.last(), "the wrapped resource is read")

	nack := next()
	assert.Equal(t, "n4", nack.GetResponseNonce())
	assert.Equal(t, "2", nack.GetVersionInfo())
	msg := nack.GetErrorDetail().GetMessage()
	assert.Contains(t, msg, `resource 0: lbxds: ClusterLoadAssignment rejected: type "type.googleapis.com/envoy.config.core.v3.Node", want "`+lbxds.TypeURL+`"`)
	assert.Contains(t, msg, "resource 1: lbxds: ClusterLoadAssignment rejected: proto:")
	assert.Contains(t, msg, "resource 2: lbxds: ClusterLoadAssignment rejected: no cluster_name")
	assert.Equal(t, []string{"10.0.0.2:80"}, target.last())
}
