package etcdapi

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// kvServer implements pb.KVServer without embedding the generated
// Unimplemented type, so a method added upstream fails to compile here
// instead of silently answering Unimplemented.
type kvServer struct{ s *Server }

var _ pb.KVServer = (*kvServer)(nil)

func (k *kvServer) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := checkRange(r); err != nil {
		return nil, err
	}
	resp, err := k.s.b.Range(ctx, r)
	if err != nil {
		return nil, toGRPCError(err)
	}
	k.s.ops.ranges.Add(1)
	resp.Header = k.s.header(resp.Header)
	return resp, nil
}

func (k *kvServer) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if err := checkPut(r); err != nil {
		return nil, err
	}
	if r.Size() > k.s.cfg.MaxRequestBytes {
		return nil, rpctypes.ErrGRPCRequestTooLarge
	}
	resp, err := k.s.b.Put(ctx, r)
	if err != nil {
		return nil, toGRPCError(err)
	}
	k.s.ops.puts.Add(1)
	resp.Header = k.s.header(resp.Header)
	return resp, nil
}

func (k *kvServer) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	if err := checkDelete(r); err != nil {
		return nil, err
	}
	if r.Size() > k.s.cfg.MaxRequestBytes {
		return nil, rpctypes.ErrGRPCRequestTooLarge
	}
	resp, err := k.s.b.DeleteRange(ctx, r)
	if err != nil {
		return nil, toGRPCError(err)
	}
	k.s.ops.deletes.Add(1)
	resp.Header = k.s.header(resp.Header)
	return resp, nil
}

func (k *kvServer) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := validateTxn(r, k.s.cfg.MaxTxnOps, k.s.cfg.MaxRequestBytes); err != nil {
		return nil, err
	}
	resp, err := k.s.b.Txn(ctx, r)
	if err != nil {
		return nil, toGRPCError(err)
	}
	k.s.ops.txn(r, resp)
	resp.Header = k.s.header(resp.Header)
	return resp, nil
}

func (k *kvServer) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	resp, err := k.s.b.Compact(ctx, r)
	if err != nil {
		return nil, toGRPCError(err)
	}
	resp.Header = k.s.header(resp.Header)
	return resp, nil
}
