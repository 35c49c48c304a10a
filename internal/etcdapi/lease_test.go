package etcdapi

import (
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestLeaseRoundTrip(t *testing.T) {
	e := newEnv(t, nil)
	cli := e.client()
	ctx := testCtx(t)

	g, err := cli.Grant(ctx, 30)
	if err != nil || g.TTL != 30 || g.ResponseHeader.MemberId != testMemberID {
		t.Fatalf("grant %+v %v", g, err)
	}
	ka, err := cli.KeepAliveOnce(ctx, g.ID)
	if err != nil || ka.TTL != 30 || ka.ID == 0 || ka.ResponseHeader.ClusterId != testClusterID {
		t.Fatalf("keepalive %+v %v", ka, err)
	}
	ttl, err := cli.TimeToLive(ctx, g.ID)
	if err != nil || ttl.TTL != 30 {
		t.Fatalf("timetolive %+v %v", ttl, err)
	}
	ls, err := cli.Leases(ctx)
	if err != nil || len(ls.Leases) != 1 {
		t.Fatalf("leases %+v %v", ls, err)
	}
	if _, err := cli.Put(ctx, "k", "v", clientv3.WithLease(g.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, g.ID); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("second revoke: %v", err)
	}
	if _, err := cli.Grant(ctx, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(ctx, "k", "v", clientv3.WithLease(12345)); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("put with unknown lease: %v", err)
	}
}

// TestLeaseNotFoundShapes checks etcd's non-error answers for an unknown
// lease: TTL -1 from TimeToLive, TTL 0 on the keep-alive stream (which
// client/v3 reports as ErrLeaseNotFound).
func TestLeaseNotFoundShapes(t *testing.T) {
	e := newEnv(t, nil)
	cli := e.client()
	ctx := testCtx(t)

	ttl, err := cli.TimeToLive(ctx, 777)
	if err != nil || ttl.TTL != -1 || ttl.ID != 777 || ttl.ResponseHeader.MemberId != testMemberID {
		t.Fatalf("timetolive of unknown lease: %+v %v", ttl, err)
	}
	if _, err := cli.KeepAliveOnce(ctx, 777); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("keepalive of unknown lease: %v", err)
	}

	// The raw stream stays open after a not-found answer.
	ks, err := pb.NewLeaseClient(e.conn()).LeaseKeepAlive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g, err := cli.Grant(ctx, 9)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ id, ttl int64 }{{777, 0}, {int64(g.ID), 9}, {778, 0}, {int64(g.ID), 9}} {
		if err := ks.Send(&pb.LeaseKeepAliveRequest{ID: c.id}); err != nil {
			t.Fatal(err)
		}
		r, err := ks.Recv()
		if err != nil || r.ID != c.id || r.TTL != c.ttl || r.Header.RaftTerm != testTerm {
			t.Fatalf("keepalive %d: %+v %v", c.id, r, err)
		}
	}
	if err := ks.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Recv(); err == nil {
		t.Fatal("stream still open after client closed its side")
	}
}

// TestLeaseKeepAliveClient runs client/v3's long-lived keep-alive loop
// until its first answer.
func TestLeaseKeepAliveClient(t *testing.T) {
	e := newEnv(t, nil)
	cli := e.client()
	ctx := testCtx(t)
	g, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := cli.KeepAlive(ctx, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	if r := <-ch; r == nil || r.TTL != 60 {
		t.Fatalf("keepalive %+v", r)
	}
}

func TestLeaseKeepAliveEndsOnClose(t *testing.T) {
	e := newEnv(t, nil)
	ks, err := pb.NewLeaseClient(e.conn()).LeaseKeepAlive(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := ks.Send(&pb.LeaseKeepAliveRequest{ID: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := ks.Recv(); err != nil {
		t.Fatal(err)
	}
	e.srv.Close()
	if _, err := ks.Recv(); !sameStatus(err, rpctypes.ErrGRPCStopped) {
		t.Fatalf("got %v", err)
	}
}
