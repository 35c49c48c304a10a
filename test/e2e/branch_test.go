//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netsy-io/netsy/internal/testutil/miniotest"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// TestBranchAtRevision branches a running node's bucket at a revision R
// on MinIO, keeps the parent writing with a 1 s retention and frequent
// snapshots (so its GC deletes every snapshot but the pinned one), then
// starts a node on the branch: it serves exactly the state at R, a put
// gets R+1 while the parent goes on with its own revisions, the pin is
// released, and a node on a fresh data directory restores the branch from
// its own bucket alone.
func TestBranchAtRevision(t *testing.T) {
	t.Parallel() // waits more than it computes and times nothing: see parallel in main_test.go
	skipUnlessNetsy(t)
	srv := miniotest.Start(t)
	args, env := minioArgs(srv, "src")
	args = append(args, "--snapshot-every-revisions", "10", "--snapshot-keep", "1", "--retention", "1s")
	src := procutil.StartNetsy(t, procutil.Options{DataDir: t.TempDir(), Args: args, Env: env})
	cli := newClient(t, src)
	ctx := opCtx(t)
	for i := range 25 {
		mustPut(t, cli, fmt.Sprintf("k/%02d", i%7), fmt.Sprintf("v%d", i))
	}
	var snaps []int64
	for deadline := time.Now().Add(10 * time.Second); len(snaps) == 0 && time.Now().Before(deadline); {
		snaps = snapshotRevisions(t, srv, "src")
		time.Sleep(50 * time.Millisecond)
	}
	if len(snaps) == 0 {
		t.Fatal("no snapshot reached the bucket")
	}
	rev := min(snaps[len(snaps)-1]+3, currentRev(t, cli)-1)
	resp, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatal(err)
	}
	want := renderKVs(resp)

	s3 := []string{"--s3-endpoint", srv.Endpoint, "--s3-region", srv.Region, "--s3-path-style"}
	from, to := "s3://"+srv.Bucket+"/src", "s3://"+srv.Bucket+"/br"
	start := time.Now()
	out := netsyctlOK(t, env, append([]string{"branch", "--from", from, "--revision", strconv.FormatInt(rev, 10), "--to", to, "-o", "json"}, s3...)...)
	took := time.Since(start)
	var res struct {
		ID       string `json:"id"`
		Revision int64  `json:"revision"`
		Snapshot string `json:"snapshot"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Revision != rev || res.Snapshot == "" {
		t.Fatalf("branch -o json = %+v (%v)\n%s", res, err, out)
	}
	pinned, _ := strconv.ParseInt(strings.TrimPrefix(res.Snapshot, "snapshots/"), 10, 64)
	t.Logf("branch %s at revision %d from snapshot %d created in %s", res.ID, rev, pinned, took.Round(time.Millisecond))

	// The parent goes on, across several snapshots; once they are older
	// than its 1 s window its GC deletes all but the newest ones, and the
	// pinned one.
	time.Sleep(1100 * time.Millisecond)
	for i := range 40 {
		mustPut(t, cli, fmt.Sprintf("parent/%02d", i), "later")
	}
	time.Sleep(1100 * time.Millisecond)
	for i := range 10 {
		mustPut(t, cli, fmt.Sprintf("parent/%02d", i), "again")
	}
	parentTip := currentRev(t, cli)
	var left []int64
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		left = snapshotRevisions(t, srv, "src")
		if len(left) <= 3 {
			break
		}
	}
	if !slices.Contains(left, pinned) || len(left) > 3 || left[len(left)-1] < parentTip-10 {
		t.Fatalf("parent snapshots after GC %v: want the pinned %d and the newest one or two only", left, pinned)
	}
	t.Logf("parent snapshots after GC: %v", left)

	bdir := t.TempDir()
	b := procutil.StartNetsy(t, procutil.Options{DataDir: bdir, Args: append([]string{"--storage", to}, s3...), Env: env})
	bcli := newClient(t, b)
	got, err := bcli.Get(opCtx(t), "\x00", clientv3.WithFromKey(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatal(err)
	}
	if g := renderKVs(got); !reflect.DeepEqual(g, want) {
		t.Fatalf("branch node at revision %d:\n  got  %q\n  want %q", rev, g, want)
	}
	if r := mustPut(t, bcli, "k/branch", "b"); r != rev+1 {
		t.Fatalf("a put on the branch got revision %d, want %d", r, rev+1)
	}
	if r := mustPut(t, cli, "k/parent", "p"); r != parentTip+1 {
		t.Fatalf("a put on the parent got revision %d, want %d", r, parentTip+1)
	}
	if g, err := bcli.Get(opCtx(t), "parent/", clientv3.WithPrefix()); err != nil || len(g.Kvs) != 0 {
		t.Fatalf("the branch sees the parent's later writes: %v %v", g, err)
	}
	if pins := netsyctlOK(t, env, append([]string{"branch", "list", "--from", from, "-o", "json"}, s3...)...); strings.TrimSpace(pins) != "null" && strings.TrimSpace(pins) != "[]" {
		t.Fatalf("the branch's first node did not release its pin: %s", pins)
	}

	// Restartable without the parent's objects: a node on a fresh data
	// directory rebuilds the branch from its own bucket.
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	b2 := procutil.StartNetsy(t, procutil.Options{DataDir: filepath.Join(t.TempDir(), "fresh"), Args: append([]string{"--storage", to}, s3...), Env: env})
	g, err := newClient(t, b2).Get(opCtx(t), "k/branch")
	if err != nil || len(g.Kvs) != 1 || g.Kvs[0].ModRevision != rev+1 {
		t.Fatalf("a fresh node on the branch: %v %v, want k/branch at %d", g, err, rev+1)
	}
}
