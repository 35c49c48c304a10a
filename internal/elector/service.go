package elector

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// Service serves the Elector gRPC service on the peer port. It answers
// through the Elector this node runs while it holds the lock, and with
// FailedPrecondition naming the Elector it knows otherwise.
type Service struct {
	netsyv1.UnsafeElectorServer
	// Current returns this node's running Elector, or nil.
	Current func() *Elector
	// ElectorAddr names the Elector this node knows ("" if none), for the
	// refusal.
	ElectorAddr func() string
}

var _ netsyv1.ElectorServer = (*Service)(nil)

func (s *Service) elector() (*Elector, error) {
	if e := s.Current(); e != nil {
		return e, nil
	}
	if addr := s.ElectorAddr(); addr != "" {
		return nil, peer.Error(codes.FailedPrecondition, peer.ReasonNotElector, "netsy: this node is not the Elector; the Elector is at "+addr)
	}
	return nil, peer.Error(codes.FailedPrecondition, peer.ReasonNotElector, "netsy: this node is not the Elector and knows no Elector yet")
}

func grpcErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.As(err, new(peer.Coded)):
		// Sent as its code with its reason (CodedError is its own status).
		return err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.FailedPrecondition, err.Error())
}

func (s *Service) RegisterNode(ctx context.Context, r *netsyv1.RegisterNodeRequest) (*netsyv1.RegisterNodeResponse, error) {
	e, err := s.elector()
	if err != nil {
		return nil, err
	}
	if r.GetNode().GetNodeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "netsy: RegisterNode without a node id")
	}
	id, cs, err := e.Register(ctx, r.Node, r.ClusterId)
	if err != nil {
		return nil, grpcErr(err)
	}
	return &netsyv1.RegisterNodeResponse{MemberId: id, ClusterState: cs}, nil
}

func (s *Service) DeregisterNode(ctx context.Context, r *netsyv1.DeregisterNodeRequest) (*netsyv1.DeregisterNodeResponse, error) {
	e, err := s.elector()
	if err != nil {
		return nil, err
	}
	resp, err := e.DeregisterNode(ctx, r.NodeId, r.Force)
	if err != nil {
		return nil, grpcErr(err)
	}
	return resp, nil
}

func (s *Service) Heartbeat(ctx context.Context, hb *netsyv1.Heartbeat) (*netsyv1.HeartbeatResponse, error) {
	e, err := s.elector()
	if err != nil {
		return nil, err
	}
	resp, err := e.Heartbeat(ctx, hb)
	return resp, grpcErr(err)
}

func (s *Service) GetClusterState(ctx context.Context, r *netsyv1.GetClusterStateRequest) (*netsyv1.ClusterState, error) {
	e, err := s.elector()
	if err != nil {
		return nil, err
	}
	cs, err := e.ClusterState(ctx, r.Full)
	return cs, grpcErr(err)
}

func (s *Service) Handoff(ctx context.Context, r *netsyv1.HandoffRequest) (*netsyv1.HandoffResponse, error) {
	e, err := s.elector()
	if err != nil {
		return nil, err
	}
	cs, err := e.Handoff(ctx, r.To)
	if err != nil {
		return nil, grpcErr(err)
	}
	return &netsyv1.HandoffResponse{ClusterState: cs}, nil
}
