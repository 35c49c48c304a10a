package roles

import (
	"context"
	"fmt"

	"google.golang.org/grpc"

	"github.com/netsy-io/netsy/internal/elector"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// ElectorAPI is what a node asks of the Elector. Errors carry their
// peer.Reason (peer.ReasonOf) whether the Elector is this node's own or
// another's: ReasonNotElector (find the Elector again), ReasonNotLoaded
// (no authority yet: retry), ReasonNotRegistered (register again).
type ElectorAPI interface {
	// Register adds the node (whose nodes/ file is written) and returns
	// its member id and the Cluster State.
	Register(ctx context.Context, info *netsyv1.NodeInfo, clusterID string) (uint64, *netsyv1.ClusterState, error)
	// Deregister removes the node from the Elector's map; its member id
	// stays.
	Deregister(ctx context.Context, nodeID string) error
	Heartbeat(ctx context.Context, hb *netsyv1.Heartbeat) (*netsyv1.HeartbeatResponse, error)
	// ClusterState is the Elector's view; full adds nodes and events.
	ClusterState(ctx context.Context, full bool) (*netsyv1.ClusterState, error)
	// Handoff moves the Primary role away from the current Primary (to
	// node to, if given).
	Handoff(ctx context.Context, to string) (*netsyv1.ClusterState, error)
}

// NodeAPI is what the Elector (and netsyctl's view) asks of a node.
type NodeAPI interface {
	NodeState(ctx context.Context) (*netsyv1.NodeState, error)
	// PushClusterState offers the node a Cluster State; the answer says
	// whether it took it and what it holds.
	PushClusterState(ctx context.Context, cs *netsyv1.ClusterState) (*netsyv1.PushClusterStateResponse, error)
	// Drain asks a Primary to drain and become a Replica.
	Drain(ctx context.Context) error
}

// Transport reaches other nodes. Roles asks it only for addresses that
// are not its own: its own Elector and itself it calls directly.
type Transport interface {
	Elector(addr string) (ElectorAPI, error)
	Node(info *netsyv1.NodeInfo) (NodeAPI, error)
}

// The running Elector is the local ElectorAPI as it is.
var _ ElectorAPI = (*elector.Elector)(nil)

// GRPCTransport is the Transport over the peer port's gRPC services.
type GRPCTransport struct {
	// Conn returns a connection to a peer address (peer.Pool.Conn, or an
	// in-memory network's).
	Conn func(addr string) (*grpc.ClientConn, error)
}

var _ Transport = GRPCTransport{}

func (t GRPCTransport) Elector(addr string) (ElectorAPI, error) {
	conn, err := t.Conn(addr)
	if err != nil {
		return nil, fmt.Errorf("connect to the Elector at %s: %w", addr, err)
	}
	return grpcElector{netsyv1.NewElectorClient(conn)}, nil
}

func (t GRPCTransport) Node(info *netsyv1.NodeInfo) (NodeAPI, error) {
	conn, err := t.Conn(info.PeerAddr)
	if err != nil {
		return nil, fmt.Errorf("connect to node %s at %s: %w", info.NodeId, info.PeerAddr, err)
	}
	return grpcNode{netsyv1.NewNodeClient(conn)}, nil
}

// grpcElector is another node's Elector. Its errors are the status errors
// gRPC returns, which carry the Elector's Reason as they left it.
type grpcElector struct{ c netsyv1.ElectorClient }

var _ ElectorAPI = grpcElector{}

func (e grpcElector) Register(ctx context.Context, info *netsyv1.NodeInfo, clusterID string) (uint64, *netsyv1.ClusterState, error) {
	resp, err := e.c.RegisterNode(ctx, &netsyv1.RegisterNodeRequest{Node: info, ClusterId: clusterID})
	if err != nil {
		return 0, nil, err
	}
	return resp.MemberId, resp.ClusterState, nil
}

func (e grpcElector) Deregister(ctx context.Context, nodeID string) error {
	_, err := e.c.DeregisterNode(ctx, &netsyv1.DeregisterNodeRequest{NodeId: nodeID})
	return err
}

func (e grpcElector) Heartbeat(ctx context.Context, hb *netsyv1.Heartbeat) (*netsyv1.HeartbeatResponse, error) {
	return e.c.Heartbeat(ctx, hb)
}

func (e grpcElector) ClusterState(ctx context.Context, full bool) (*netsyv1.ClusterState, error) {
	return e.c.GetClusterState(ctx, &netsyv1.GetClusterStateRequest{Full: full})
}

func (e grpcElector) Handoff(ctx context.Context, to string) (*netsyv1.ClusterState, error) {
	resp, err := e.c.Handoff(ctx, &netsyv1.HandoffRequest{To: to})
	if err != nil {
		return nil, err
	}
	return resp.ClusterState, nil
}

// grpcNode is another node's Node service.
type grpcNode struct{ c netsyv1.NodeClient }

var _ NodeAPI = grpcNode{}

func (n grpcNode) NodeState(ctx context.Context) (*netsyv1.NodeState, error) {
	return n.c.GetNodeState(ctx, &netsyv1.GetNodeStateRequest{})
}

func (n grpcNode) PushClusterState(ctx context.Context, cs *netsyv1.ClusterState) (*netsyv1.PushClusterStateResponse, error) {
	return n.c.PushClusterState(ctx, cs)
}

func (n grpcNode) Drain(ctx context.Context) error {
	_, err := n.c.Drain(ctx, &netsyv1.HandoffRequest{})
	return err
}
