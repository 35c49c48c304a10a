package etcdapi

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// clusterServer lists members. Changing them is refused: a cluster is one
// node today, and membership is planned to follow nodes registering in
// object storage, never a client call.
type clusterServer struct{ s *Server }

var _ pb.ClusterServer = (*clusterServer)(nil)

func (c *clusterServer) MemberList(ctx context.Context, _ *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	resp, err := c.s.b.MemberList(ctx)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = c.s.header(resp.Header)
	return resp, nil
}

func (c *clusterServer) MemberAdd(context.Context, *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	return nil, errMembership
}

func (c *clusterServer) MemberRemove(context.Context, *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	return nil, errMembership
}

func (c *clusterServer) MemberUpdate(context.Context, *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	return nil, errMembership
}

func (c *clusterServer) MemberPromote(context.Context, *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	return nil, errMembership
}
