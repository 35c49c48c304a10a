//go:build e2e

package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netsy-io/netsy/internal/testutil/miniotest"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// TestReadOnlyAtRevision: a live node on MinIO writes across a snapshot
// and etcdctl get --rev=R is recorded for R past it; the live node then
// compacts past R (it can no longer answer at R). A node started with
// --read-only-at R on the same bucket answers etcdctl get --rev=R exactly
// as the live node did, refuses a put, and never registers in the
// bucket; the live node keeps taking writes meanwhile.
func TestReadOnlyAtRevision(t *testing.T) {
	t.Parallel() // waits more than it computes and times nothing: see parallel in main_test.go
	skipUnlessNetsy(t)
	srv := miniotest.Start(t)
	args, env := minioArgs(srv, "live")
	for i, a := range args {
		if a == "--snapshot-every-revisions" {
			args[i+1] = "20"
		}
	}
	live := procutil.StartNetsy(t, procutil.Options{DataDir: t.TempDir(), Args: args, Env: env})
	cli := newClient(t, live)
	ctx := opCtx(t)
	lease, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 45 {
		var opts []clientv3.OpOption
		if i%10 == 3 {
			opts = append(opts, clientv3.WithLease(lease.ID))
		}
		mustPut(t, cli, fmt.Sprintf("k/%02d", i%12), fmt.Sprintf("v%d", i), opts...)
		if i%9 == 8 {
			if _, err := cli.Delete(ctx, fmt.Sprintf("k/%02d", (i+5)%12)); err != nil {
				t.Fatal(err)
			}
		}
	}
	var snaps []int64
	for deadline := time.Now().Add(10 * time.Second); len(snaps) == 0 && time.Now().Before(deadline); {
		if snaps = snapshotRevisions(t, srv, "live"); len(snaps) == 0 {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if len(snaps) == 0 {
		t.Fatal("no snapshot reached the bucket")
	}
	rev := min(snaps[len(snaps)-1]+3, currentRev(t, cli)-1)
	revArg := "--rev=" + strconv.FormatInt(rev, 10)
	want := newCtl(t, live).ok("get", "", "--from-key", revArg)
	tip := mustPut(t, cli, "k/last", "x")
	if _, err := cli.Compact(ctx, tip); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Get(ctx, "k/", clientv3.WithPrefix(), clientv3.WithRev(rev)); err == nil {
		t.Fatalf("the live node still answers at %d after compacting at %d", rev, tip)
	}

	const roID = "inspect-ro"
	ro := procutil.StartNetsy(t, procutil.Options{DataDir: t.TempDir(), Env: env, Args: append(args,
		"--read-only-at", strconv.FormatInt(rev, 10), "--node-id", roID)})
	roCtl := newCtl(t, ro)
	if got := roCtl.ok("get", "", "--from-key", revArg); got != want {
		t.Fatalf("etcdctl get %s on the read-only node:\n%s\nwant (the live node before compaction):\n%s", revArg, got, want)
	}
	roCtl.fails(fmt.Sprintf("read-only at revision %d", rev), "put", "k/00", "changed")
	if got := roCtl.ok("get", "", "--from-key", revArg); got != want {
		t.Fatalf("after the refused put:\n%s\nwant:\n%s", got, want)
	}

	after := mustPut(t, cli, "k/live", "still writing")
	if r, err := cli.Get(ctx, "k/live"); err != nil || len(r.Kvs) != 1 || r.Kvs[0].ModRevision != after {
		t.Fatalf("the live node after the read-only node started: %v, %v", r, err)
	}
	for o := range srv.Client(t).ListObjects(t.Context(), srv.Bucket, minio.ListObjectsOptions{Prefix: "live/", Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		if strings.Contains(o.Key, roID) {
			t.Fatalf("the read-only node wrote %s to the bucket", o.Key)
		}
	}
	if err := ro.Stop(); err != nil {
		t.Fatal(err)
	}
}
