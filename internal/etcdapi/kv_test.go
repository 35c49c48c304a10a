package etcdapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/mvcc"
)

func put(k, v string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), Value: []byte(v)}}}
}

func del(k, end string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k), RangeEnd: []byte(end)}}}
}

func get(k string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(k)}}}
}

func nested(then, els []*pb.RequestOp) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{Success: then, Failure: els}}}
}

func ops(n int, mk func(i int) *pb.RequestOp) []*pb.RequestOp {
	out := make([]*pb.RequestOp, n)
	for i := range out {
		out[i] = mk(i)
	}
	return out
}

// TestValidationErrors sends invalid requests over gRPC and checks each
// answer has etcd's code and message exactly.
func TestValidationErrors(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxRequestBytes = 4096 })
	kv := pb.NewKVClient(e.conn())
	ctx := context.Background()
	big := strings.Repeat("x", 4096)

	txn := func(r *pb.TxnRequest) error { _, err := kv.Txn(ctx, r); return err }
	tests := []struct {
		name string
		call func() error
		want error // nil: accepted
	}{
		{"range empty key", func() error { _, err := kv.Range(ctx, &pb.RangeRequest{}); return err }, rpctypes.ErrGRPCEmptyKey},
		{"range bad sort order", func() error {
			_, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("a"), SortOrder: 9})
			return err
		}, rpctypes.ErrGRPCInvalidSortOption},
		{"range bad sort target", func() error {
			_, err := kv.Range(ctx, &pb.RangeRequest{Key: []byte("a"), SortTarget: 9})
			return err
		}, rpctypes.ErrGRPCInvalidSortOption},
		{"put empty key", func() error { _, err := kv.Put(ctx, &pb.PutRequest{Value: []byte("v")}); return err }, rpctypes.ErrGRPCEmptyKey},
		{"put ignore_value with value", func() error {
			_, err := kv.Put(ctx, &pb.PutRequest{Key: []byte("a"), Value: []byte("v"), IgnoreValue: true})
			return err
		}, rpctypes.ErrGRPCValueProvided},
		{"put ignore_lease with lease", func() error {
			_, err := kv.Put(ctx, &pb.PutRequest{Key: []byte("a"), Lease: 5, IgnoreLease: true})
			return err
		}, rpctypes.ErrGRPCLeaseProvided},
		{"put too large", func() error {
			_, err := kv.Put(ctx, &pb.PutRequest{Key: []byte("a"), Value: []byte(big)})
			return err
		}, rpctypes.ErrGRPCRequestTooLarge},
		{"delete empty key", func() error { _, err := kv.DeleteRange(ctx, &pb.DeleteRangeRequest{}); return err }, rpctypes.ErrGRPCEmptyKey},
		{"delete too large", func() error {
			_, err := kv.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(big)})
			return err
		}, rpctypes.ErrGRPCRequestTooLarge},
		{"txn too many success ops", func() error {
			return txn(&pb.TxnRequest{Success: ops(129, func(i int) *pb.RequestOp { return get("k") })})
		}, rpctypes.ErrGRPCTooManyOps},
		{"txn too many compares", func() error {
			cmps := make([]*pb.Compare, 129)
			for i := range cmps {
				cmps[i] = &pb.Compare{Key: []byte("k")}
			}
			return txn(&pb.TxnRequest{Compare: cmps})
		}, rpctypes.ErrGRPCTooManyOps},
		{"txn 128 ops ok", func() error {
			return txn(&pb.TxnRequest{Failure: ops(128, func(i int) *pb.RequestOp { return put(fmt.Sprint(i), "") })})
		}, nil},
		{"txn nested budget", func() error {
			// 100 ops at the top leave 28 for the nested txn.
			inner := nested(ops(29, func(i int) *pb.RequestOp { return get("k") }), nil)
			return txn(&pb.TxnRequest{Success: append(ops(99, func(int) *pb.RequestOp { return get("k") }), inner)})
		}, rpctypes.ErrGRPCTooManyOps},
		{"txn compare empty key", func() error {
			return txn(&pb.TxnRequest{Compare: []*pb.Compare{{Target: pb.Compare_VERSION}}})
		}, rpctypes.ErrGRPCEmptyKey},
		{"txn empty op", func() error { return txn(&pb.TxnRequest{Success: []*pb.RequestOp{{}}}) }, rpctypes.ErrGRPCKeyNotFound},
		{"txn nested put empty key", func() error {
			return txn(&pb.TxnRequest{Success: []*pb.RequestOp{nested(nil, []*pb.RequestOp{put("", "")})}})
		}, rpctypes.ErrGRPCEmptyKey},
		{"txn put put", func() error { return txn(&pb.TxnRequest{Success: []*pb.RequestOp{put("a", "1"), put("a", "2")}}) }, rpctypes.ErrGRPCDuplicateKey},
		{"txn put then delete", func() error { return txn(&pb.TxnRequest{Success: []*pb.RequestOp{put("a", ""), del("a", "")}}) }, rpctypes.ErrGRPCDuplicateKey},
		{"txn delete then put", func() error { return txn(&pb.TxnRequest{Failure: []*pb.RequestOp{del("a", ""), put("a", "")}}) }, rpctypes.ErrGRPCDuplicateKey},
		{"txn delete range covers put", func() error { return txn(&pb.TxnRequest{Success: []*pb.RequestOp{del("a", "c"), put("b", "")}}) }, rpctypes.ErrGRPCDuplicateKey},
		{"txn delete range misses put", func() error { return txn(&pb.TxnRequest{Success: []*pb.RequestOp{del("a", "c"), put("c", "")}}) }, nil},
		{"txn delete delete", func() error { return txn(&pb.TxnRequest{Success: []*pb.RequestOp{del("a", ""), del("a", "b")}}) }, nil},
		{"txn put in both branches", func() error {
			return txn(&pb.TxnRequest{Success: []*pb.RequestOp{put("a", "")}, Failure: []*pb.RequestOp{put("a", "")}})
		}, nil},
		{"txn nested put vs outer put", func() error {
			return txn(&pb.TxnRequest{Success: []*pb.RequestOp{put("a", ""), nested([]*pb.RequestOp{put("a", "")}, nil)}})
		}, rpctypes.ErrGRPCDuplicateKey},
		{"txn nested delete vs outer put", func() error {
			return txn(&pb.TxnRequest{Success: []*pb.RequestOp{nested(nil, []*pb.RequestOp{del("a", "z")}), put("m", "")}})
		}, rpctypes.ErrGRPCDuplicateKey},
		{"txn nested then/else same key", func() error {
			return txn(&pb.TxnRequest{Success: []*pb.RequestOp{nested([]*pb.RequestOp{put("a", "")}, []*pb.RequestOp{put("a", "")})}})
		}, nil},
		{"txn two nested txns same key", func() error {
			return txn(&pb.TxnRequest{Success: []*pb.RequestOp{
				nested([]*pb.RequestOp{put("a", "")}, nil),
				nested(nil, []*pb.RequestOp{put("a", "")}),
			}})
		}, rpctypes.ErrGRPCDuplicateKey},
		{"txn put and delete-from-key (etcd accepts)", func() error {
			return txn(&pb.TxnRequest{Success: []*pb.RequestOp{put("b", ""), del("a", "\x00")}})
		}, nil},
		{"txn write too large", func() error { return txn(&pb.TxnRequest{Success: []*pb.RequestOp{put("a", big)}}) }, rpctypes.ErrGRPCRequestTooLarge},
		{"txn read-only large ok", func() error { return txn(&pb.TxnRequest{Success: []*pb.RequestOp{get(big)}}) }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("want success, got %v", err)
				}
				return
			}
			if !sameStatus(err, tt.want) {
				t.Fatalf("got %v, want %v", err, tt.want)
			}
		})
	}
}

// TestErrorTable checks that each Backend error reaches a client/v3 client
// as the error etcd would have sent, wrapped sentinels included.
func TestErrorTable(t *testing.T) {
	e := newEnv(t, nil)
	kv := pb.NewKVClient(e.conn())
	tests := []struct {
		backend error
		want    error
	}{
		{mvcc.ErrCompacted, rpctypes.ErrGRPCCompacted},
		{mvcc.ErrFutureRev, rpctypes.ErrGRPCFutureRev},
		{engine.ErrKeyNotFound, rpctypes.ErrGRPCKeyNotFound},
		{engine.ErrLeaseNotFound, rpctypes.ErrGRPCLeaseNotFound},
		{engine.ErrLeaseExist, rpctypes.ErrGRPCLeaseExist},
		{engine.ErrLeaseTTLTooLarge, rpctypes.ErrGRPCLeaseTTLTooLarge},
		{engine.ErrStopped, rpctypes.ErrGRPCStopped},
		{engine.ErrTimeout, rpctypes.ErrGRPCTimeout},
		{engine.ErrNoLeader, rpctypes.ErrGRPCNoLeader},
		{engine.ErrUnavailable, status.Error(codes.Unavailable, "netsy: durable storage unavailable")},
		{fmt.Errorf("apply: %w", mvcc.ErrCompacted), rpctypes.ErrGRPCCompacted},
		{context.Canceled, status.Error(codes.Canceled, "context canceled")},
		{fmt.Errorf("wait: %w", context.DeadlineExceeded), status.Error(codes.DeadlineExceeded, "context deadline exceeded")},
		{rpctypes.ErrGRPCLeaderChanged, rpctypes.ErrGRPCLeaderChanged},
		{errors.New("disk on fire"), status.Error(codes.Unknown, "disk on fire")},
	}
	for _, tt := range tests {
		e.b.setErr(tt.backend)
		_, err := kv.Range(context.Background(), &pb.RangeRequest{Key: []byte("a")})
		if !sameStatus(err, tt.want) {
			t.Errorf("backend %v: got %v, want %v", tt.backend, err, tt.want)
		}
	}
	e.b.setErr(nil)

	// client/v3 turns the status back into its typed error.
	e.b.setErr(mvcc.ErrCompacted)
	_, err := e.client().Get(context.Background(), "a", clientv3.WithRev(1))
	if !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("client/v3 error %v, want %v", err, rpctypes.ErrCompacted)
	}
}

func TestKVRoundTrip(t *testing.T) {
	e := newEnv(t, nil)
	cli := e.client()
	ctx := context.Background()

	pr, err := cli.Put(ctx, "a", "1")
	if err != nil {
		t.Fatal(err)
	}
	h := pr.Header
	if h.Revision != 1 || h.ClusterId != testClusterID || h.MemberId != testMemberID || h.RaftTerm != testTerm {
		t.Fatalf("put header %+v", h)
	}
	if _, err := cli.Put(ctx, "b", "2"); err != nil {
		t.Fatal(err)
	}
	gr, err := cli.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if gr.Count != 2 || len(gr.Kvs) != 2 || gr.Header.Revision != 2 || gr.Header.ClusterId != testClusterID {
		t.Fatalf("get %+v", gr)
	}
	tr, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value("a"), "=", "1")).
		Then(clientv3.OpPut("a", "3"), clientv3.OpDelete("b")).
		Commit()
	if err != nil || !tr.Succeeded || tr.Header.Revision != 3 {
		t.Fatalf("txn %+v %v", tr, err)
	}
	dr, err := cli.Delete(ctx, "a", clientv3.WithPrevKV())
	if err != nil || dr.Deleted != 1 || string(dr.PrevKvs[0].Value) != "3" {
		t.Fatalf("delete %+v %v", dr, err)
	}
	cr, err := cli.Compact(ctx, 2)
	if err != nil || cr.Header.MemberId != testMemberID {
		t.Fatalf("compact %+v %v", cr, err)
	}
	if _, err := cli.Get(ctx, "a", clientv3.WithRev(1)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("get compacted rev: %v", err)
	}
	if _, err := cli.Get(ctx, "a", clientv3.WithRev(100)); !errors.Is(err, rpctypes.ErrFutureRev) {
		t.Fatalf("get future rev: %v", err)
	}
}
