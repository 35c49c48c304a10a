package clustersim

import (
	"context"
	"fmt"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/internal/roles"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// simTransport is roles.Transport over the world's links (rpc): every
// call to another node's Elector or Node service is a message with the
// link's latency that a cut, a drop, a stall or a refusing address
// affects as it would a gRPC call. The destination answers with what its
// peer port serves (Roles.ElectorServer, Roles.LocalNode); requests and
// answers are copied, and errors cross as gRPC statuses, so the caller
// tells them apart by code and peer.Reason only.
type simTransport struct{ n *simNode }

var _ roles.Transport = simTransport{}

func (t simTransport) Elector(addr string) (roles.ElectorAPI, error) {
	return simElector{from: t.n, addr: addr}, nil
}

func (t simTransport) Node(info *netsyv1.NodeInfo) (roles.NodeAPI, error) {
	return simNodeAPI{from: t.n, addr: info.PeerAddr}, nil
}

// wire is err as a gRPC client receives it.
func wire(err error) error {
	if err == nil {
		return nil
	}
	return status.Convert(err).Err()
}

func clone[M proto.Message](m M) M {
	var zero M
	if any(m) == any(zero) {
		return m
	}
	return proto.Clone(m).(M)
}

// serve answers one call in the destination's process, on a goroutine it
// owns; a process that has not started its roles yet does not listen.
func serve[T any](dst *simNode, reply func(T, error), f func(r *roles.Roles) (T, error)) {
	r := dst.roles()
	if r == nil {
		var zero T
		reply(zero, fmt.Errorf("call %s: %w", dst.id, errRefused))
		return
	}
	dst.goOwned(func() {
		v, err := f(r)
		reply(v, wire(err))
	})
}

type simElector struct {
	from *simNode
	addr string
}

var _ roles.ElectorAPI = simElector{}

type registered struct {
	id uint64
	cs *netsyv1.ClusterState
}

func (e simElector) Register(ctx context.Context, info *netsyv1.NodeInfo, clusterID string) (uint64, *netsyv1.ClusterState, error) {
	req := &netsyv1.RegisterNodeRequest{Node: clone(info), ClusterId: clusterID}
	a, err := rpc(ctx, e.from, e.addr, func(ctx context.Context, dst *simNode, reply func(registered, error)) {
		serve(dst, reply, func(r *roles.Roles) (registered, error) {
			resp, err := r.ElectorServer().RegisterNode(ctx, req)
			if err != nil {
				return registered{}, err
			}
			return registered{resp.MemberId, clone(resp.ClusterState)}, nil
		})
	})
	return a.id, a.cs, err
}

func (e simElector) Deregister(ctx context.Context, nodeID string) error {
	req := &netsyv1.DeregisterNodeRequest{NodeId: nodeID}
	_, err := rpc(ctx, e.from, e.addr, func(ctx context.Context, dst *simNode, reply func(struct{}, error)) {
		serve(dst, reply, func(r *roles.Roles) (struct{}, error) {
			_, err := r.ElectorServer().DeregisterNode(ctx, req)
			return struct{}{}, err
		})
	})
	return err
}

func (e simElector) Heartbeat(ctx context.Context, hb *netsyv1.Heartbeat) (*netsyv1.HeartbeatResponse, error) {
	req := clone(hb)
	return rpc(ctx, e.from, e.addr, func(ctx context.Context, dst *simNode, reply func(*netsyv1.HeartbeatResponse, error)) {
		serve(dst, reply, func(r *roles.Roles) (*netsyv1.HeartbeatResponse, error) {
			el := r.RunningElector()
			if el == nil {
				return r.ElectorServer().Heartbeat(ctx, req) // the refusal
			}
			resp, err := el.Heartbeat(ctx, req)
			if err != nil {
				return nil, err
			}
			dst.c.rec.answered(dst, el.Term())
			return clone(resp), nil
		})
	})
}

func (e simElector) ClusterState(ctx context.Context, full bool) (*netsyv1.ClusterState, error) {
	req := &netsyv1.GetClusterStateRequest{Full: full}
	return rpc(ctx, e.from, e.addr, func(ctx context.Context, dst *simNode, reply func(*netsyv1.ClusterState, error)) {
		serve(dst, reply, func(r *roles.Roles) (*netsyv1.ClusterState, error) {
			cs, err := r.ElectorServer().GetClusterState(ctx, req)
			return clone(cs), err
		})
	})
}

func (e simElector) Handoff(ctx context.Context, to string) (*netsyv1.ClusterState, error) {
	req := &netsyv1.HandoffRequest{To: to}
	return rpc(ctx, e.from, e.addr, func(ctx context.Context, dst *simNode, reply func(*netsyv1.ClusterState, error)) {
		serve(dst, reply, func(r *roles.Roles) (*netsyv1.ClusterState, error) {
			resp, err := r.ElectorServer().Handoff(ctx, req)
			if err != nil {
				return nil, err
			}
			return clone(resp.ClusterState), nil
		})
	})
}

type simNodeAPI struct {
	from *simNode
	addr string
}

var _ roles.NodeAPI = simNodeAPI{}

func (a simNodeAPI) NodeState(ctx context.Context) (*netsyv1.NodeState, error) {
	return rpc(ctx, a.from, a.addr, func(ctx context.Context, dst *simNode, reply func(*netsyv1.NodeState, error)) {
		serve(dst, reply, func(r *roles.Roles) (*netsyv1.NodeState, error) {
			ns, err := r.LocalNode().NodeState(ctx)
			return clone(ns), err
		})
	})
}

func (a simNodeAPI) PushClusterState(ctx context.Context, cs *netsyv1.ClusterState) (*netsyv1.PushClusterStateResponse, error) {
	sent := clone(cs)
	return rpc(ctx, a.from, a.addr, func(ctx context.Context, dst *simNode, reply func(*netsyv1.PushClusterStateResponse, error)) {
		serve(dst, reply, func(r *roles.Roles) (*netsyv1.PushClusterStateResponse, error) {
			resp, err := r.LocalNode().PushClusterState(ctx, sent)
			return clone(resp), err
		})
	})
}

func (a simNodeAPI) Drain(ctx context.Context) error {
	_, err := rpc(ctx, a.from, a.addr, func(ctx context.Context, dst *simNode, reply func(struct{}, error)) {
		serve(dst, reply, func(r *roles.Roles) (struct{}, error) {
			return struct{}{}, r.LocalNode().Drain(ctx)
		})
	})
	return err
}
