//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netsy-io/netsy/internal/testutil/miniotest"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// snapshotRevisions lists the revisions of the snapshots under prefix.
func snapshotRevisions(t *testing.T, srv *miniotest.Server, prefix string) []int64 {
	t.Helper()
	var revs []int64
	for o := range srv.Client(t).ListObjects(t.Context(), srv.Bucket, minio.ListObjectsOptions{Prefix: prefix + "/snapshots/", Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		rev, err := strconv.ParseInt(strings.TrimPrefix(o.Key, prefix+"/snapshots/"), 10, 64)
		if err != nil {
			t.Fatalf("snapshot key %s: %v", o.Key, err)
		}
		revs = append(revs, rev)
	}
	return revs
}

// TestRestoreToRevision writes across a snapshot on MinIO, records what
// etcdctl get --rev=R shows for a revision R after the snapshot, compacts
// past R, stops the node and restores R from its bucket into a new
// prefix with netsyctl restore; netsy started on the result serves the
// same keys at R (value, create and mod revision, version, lease) and a
// put gets R+1.
func TestRestoreToRevision(t *testing.T) {
	t.Parallel() // waits more than it computes and times nothing: see parallel in main_test.go
	skipUnlessNetsy(t)
	srv := miniotest.Start(t)
	args, env := minioArgs(srv, "src")
	for i, a := range args {
		if a == "--snapshot-every-revisions" {
			args[i+1] = "20"
		}
	}
	dataDir := t.TempDir()
	src := procutil.StartNetsy(t, procutil.Options{DataDir: dataDir, Args: args, Env: env})
	cli := newClient(t, src)
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
	deadline := time.Now().Add(10 * time.Second)
	var snaps []int64
	for len(snaps) == 0 && time.Now().Before(deadline) {
		snaps = snapshotRevisions(t, srv, "src")
		time.Sleep(50 * time.Millisecond)
	}
	if len(snaps) == 0 {
		t.Fatal("no snapshot reached the bucket")
	}
	// Three revisions past the newest snapshot: the restore starts from
	// it and replays chunks across its boundary.
	rev := min(snaps[len(snaps)-1]+3, currentRev(t, cli)-1)
	resp, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatal(err)
	}
	want := renderKVs(resp)
	ctlWant := newCtl(t, src).ok("get", "", "--from-key", "--rev="+strconv.FormatInt(rev, 10))
	tip := mustPut(t, cli, "k/last", "x")
	if _, err := cli.Compact(ctx, tip); err != nil {
		t.Fatal(err)
	}
	if err := src.Stop(); err != nil {
		t.Fatal(err)
	}
	s3 := []string{"--s3-endpoint", srv.Endpoint, "--s3-region", srv.Region, "--s3-path-style"}
	restored := filepath.Join(t.TempDir(), "restored")
	from, to := "s3://"+srv.Bucket+"/src", "s3://"+srv.Bucket+"/restored"
	out := netsyctlOK(t, env, append([]string{"restore", "--from", from, "--revision", strconv.FormatInt(rev, 10),
		"--to", to, "--data-dir", restored, "-o", "json"}, s3...)...)
	var res struct {
		Revision int64 `json:"revision"`
		Base     int64 `json:"base_snapshot_revision"`
		Window   struct{ Oldest, Newest int64 }
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("restore -o json: %v\n%s", err, out)
	}
	if res.Revision != rev || res.Base <= 0 || res.Base >= rev || res.Window.Newest != tip {
		t.Fatalf("restore -o json = %+v; want revision %d from a snapshot below it, window up to %d", res, rev, tip)
	}
	t.Logf("restored revision %d from snapshot %d (window %d..%d)", rev, res.Base, res.Window.Oldest, res.Window.Newest)
	// Outside the window: refused, with the window in the message.
	netsyctlFails(t, env, fmt.Sprintf("..%d", tip), append([]string{"restore", "--from", from, "--revision", strconv.FormatInt(tip+1, 10),
		"--to", "s3://" + srv.Bucket + "/other", "--data-dir", filepath.Join(t.TempDir(), "d")}, s3...)...)

	s := procutil.StartNetsy(t, procutil.Options{DataDir: restored, Args: append([]string{"--storage", to}, s3...), Env: env})
	rcli := newClient(t, s)
	got, err := rcli.Get(opCtx(t), "\x00", clientv3.WithFromKey(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatal(err)
	}
	if g := renderKVs(got); !reflect.DeepEqual(g, want) {
		t.Fatalf("restored node at revision %d:\n  got  %q\n  want %q", rev, g, want)
	}
	if g := newCtl(t, s).ok("get", "", "--from-key", "--rev="+strconv.FormatInt(rev, 10)); g != ctlWant {
		t.Fatalf("etcdctl get --rev=%d on the restored node:\n%s\nwant:\n%s", rev, g, ctlWant)
	}
	if r := mustPut(t, rcli, "k/after", "restore"); r != rev+1 {
		t.Fatalf("a put on the restored node got revision %d, want %d", r, rev+1)
	}
}
