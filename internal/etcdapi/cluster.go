package etcdapi

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// clusterServer lists and removes members. A node joins a cluster by
// starting on its bucket (it registers itself in object storage), never by
// a client call, so MemberAdd, MemberUpdate and MemberPromote are refused
// with what to do instead.
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
	return nil, errMemberAdd
}

// MemberRemove deregisters the member, as `netsyctl deregister` without
// --force does (Backend.MemberRemove).
func (c *clusterServer) MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	resp, err := c.s.b.MemberRemove(ctx, r.ID)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = c.s.header(resp.Header)
	return resp, nil
}

func (c *clusterServer) MemberUpdate(context.Context, *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	return nil, errMemberUpdate
}

func (c *clusterServer) MemberPromote(context.Context, *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	return nil, errMemberPromote
}
