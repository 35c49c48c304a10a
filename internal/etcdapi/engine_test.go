package etcdapi

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/snapshot"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/engine/enginetest"
)

// engineTerm is the term the served engine writes at.
const engineTerm = 7

// newEngineEnv serves the real engine, to check the Backend contract as
// the engine implements it, not only as the fake reads it.
func newEngineEnv(t *testing.T, mod func(*Config)) (*testEnv, *engine.Engine) {
	t.Helper()
	log := &enginetest.MemStorage{}
	eng, err := engine.Open(engine.Config{Storage: log, Clock: clock.Real(), ClusterID: testClusterID, MemberID: testMemberID, Term: engineTerm})
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after the server has stopped.
	t.Cleanup(func() { _ = eng.Close() })
	srv, addr := serveBackend(t, engineBackend{eng}, mod, nil)
	return &testEnv{t: t, srv: srv, addr: addr}, eng
}

// engineBackend is the engine alone as a Backend: membership is the
// cluster roles' (internal/replica's Backend), which a lone engine has not.
type engineBackend struct{ *engine.Engine }

func (engineBackend) MemberRemove(context.Context, uint64) (*pb.MemberRemoveResponse, error) {
	return nil, status.Error(codes.Unimplemented, "no cluster roles in this test")
}

func (engineBackend) MoveLeader(context.Context, uint64) error {
	return status.Error(codes.Unimplemented, "no cluster roles in this test")
}

func TestEngineKVLeaseAndWatch(t *testing.T) {
	e, _ := newEngineEnv(t, func(c *Config) { c.WatchBatchEvents = 3 })
	cli := e.client()
	ctx := testCtx(t)

	first, err := cli.Put(ctx, "k0", "v")
	if err != nil {
		t.Fatal(err)
	}
	start := first.Header.Revision
	const n = 60
	for i := 1; i < n/2; i++ {
		if _, err := cli.Put(ctx, fmt.Sprintf("k%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := n / 2; i < n; i++ {
			if _, err := cli.Put(ctx, fmt.Sprintf("k%d", i), "v"); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer wg.Wait()

	wch := cli.Watch(ctx, "k", clientv3.WithPrefix(), clientv3.WithRev(start), clientv3.WithPrevKV())
	next := start
	for next < start+n {
		r := recvWatch(t, wch)
		for _, ev := range r.Events {
			if ev.Kv.ModRevision != next || ev.Kv.ModRevision > r.Header.Revision {
				t.Fatalf("event at %d (header %d), want %d", ev.Kv.ModRevision, r.Header.Revision, next)
			}
			next++
		}
	}
	wg.Wait()

	g, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	if ka, err := cli.KeepAliveOnce(ctx, g.ID); err != nil || ka.TTL != 60 {
		t.Fatalf("keepalive %+v %v", ka, err)
	}
	if _, err := cli.Revoke(ctx, g.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.KeepAliveOnce(ctx, g.ID); !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		t.Fatalf("keepalive after revoke: %v", err)
	}
	if ttl, err := cli.TimeToLive(ctx, g.ID); err != nil || ttl.TTL != -1 {
		t.Fatalf("timetolive after revoke: %+v %v", ttl, err)
	}

	cur, err := cli.Get(ctx, "k0")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, cur.Header.Revision); err != nil {
		t.Fatal(err)
	}
	r := recvWatch(t, cli.Watch(ctx, "k", clientv3.WithPrefix(), clientv3.WithRev(start)))
	if !errors.Is(r.Err(), rpctypes.ErrCompacted) || r.CompactRevision != cur.Header.Revision {
		t.Fatalf("compacted watch: %+v %v", r, r.Err())
	}
	if _, err := cli.Get(ctx, "k0", clientv3.WithRev(start)); !errors.Is(err, rpctypes.ErrCompacted) {
		t.Fatalf("compacted get: %v", err)
	}

	st, err := cli.Status(ctx, e.addr)
	if err != nil || st.Header.MemberId != testMemberID || st.Leader != testMemberID || st.RaftTerm != engineTerm || st.Header.RaftTerm != engineTerm {
		t.Fatalf("status %+v %v", st, err)
	}
	cfg := clientv3.Config{Endpoints: []string{e.addr}, Logger: zap.NewNop(), DialTimeout: 5 * time.Second}
	if _, err := snapshot.SaveWithVersion(ctx, zap.NewNop(), cfg, filepath.Join(t.TempDir(), "snap")); err != nil {
		t.Fatalf("snapshot save: %v", err)
	}
}
