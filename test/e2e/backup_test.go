//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netsy-io/netsy/internal/testutil/miniotest"
	"github.com/netsy-io/netsy/internal/testutil/procutil"
)

// storeState is everything a restore must reproduce: every key at every
// revision from the compaction floor on, the leases, and the revisions.
type storeState struct {
	Revision int64
	Compact  int64
	// AtRev maps a revision to the keys live then, rendered with value,
	// create and mod revision, version and lease.
	AtRev map[int64][]string
	// Leases maps lease ids to their granted TTL.
	Leases map[int64]int64
}

func renderKVs(resp *clientv3.GetResponse) []string {
	out := make([]string, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		value := fmt.Sprintf("%q", kv.Value)
		if len(kv.Value) > 40 {
			value = fmt.Sprintf("<%d bytes, sha256 %x>", len(kv.Value), sha256.Sum256(kv.Value))
		}
		out = append(out, fmt.Sprintf("%s=%s create=%d mod=%d version=%d lease=%x",
			kv.Key, value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease))
	}
	return out
}

// readState reads the whole store of cli; compact is the revision the
// workload compacted at (below it reads must fail as compacted).
func readState(t *testing.T, cli *clientv3.Client, compact int64) storeState {
	t.Helper()
	ctx := opCtx(t)
	cur, err := cli.Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	st := storeState{Revision: cur.Header.Revision, Compact: compact, AtRev: map[int64][]string{}, Leases: map[int64]int64{}}
	for rev := compact; rev <= st.Revision; rev++ {
		resp, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(rev))
		if err != nil {
			t.Fatalf("get at revision %d: %v", rev, err)
		}
		st.AtRev[rev] = renderKVs(resp)
	}
	if _, err := cli.Get(ctx, "k/a", clientv3.WithRev(compact-1)); err != rpctypes.ErrCompacted {
		t.Errorf("get at revision %d, below the compaction at %d: %v, want %v", compact-1, compact, err, rpctypes.ErrCompacted)
	}
	leases, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Leases {
		ttl, err := cli.TimeToLive(ctx, l.ID)
		if err != nil {
			t.Fatal(err)
		}
		st.Leases[int64(l.ID)] = ttl.GrantedTTL
	}
	return st
}

func (s storeState) diff(o storeState) string {
	var b strings.Builder
	if s.Revision != o.Revision {
		fmt.Fprintf(&b, "store revision %d, want %d\n", o.Revision, s.Revision)
	}
	if !reflect.DeepEqual(s.Leases, o.Leases) {
		fmt.Fprintf(&b, "leases (id: granted TTL) %v, want %v\n", o.Leases, s.Leases)
	}
	revs := make([]int64, 0, len(s.AtRev))
	for r := range s.AtRev {
		revs = append(revs, r)
	}
	sort.Slice(revs, func(i, j int) bool { return revs[i] < revs[j] })
	for _, r := range revs {
		if !reflect.DeepEqual(s.AtRev[r], o.AtRev[r]) {
			fmt.Fprintf(&b, "at revision %d:\n  got  %q\n  want %q\n", r, o.AtRev[r], s.AtRev[r])
		}
	}
	return b.String()
}

// backupWorkload writes keys with and without leases, overwrites and
// deletes some, revokes a lease (deleting its key), compacts, and writes
// on. It returns the compaction revision.
func backupWorkload(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	ctx := opCtx(t)
	grant := func(ttl int64) clientv3.LeaseID {
		l, err := cli.Grant(ctx, ttl)
		if err != nil {
			t.Fatal(err)
		}
		return l.ID
	}
	l1, l2, l3 := grant(600), grant(300), grant(120)
	mustPut(t, cli, "k/a", "1")
	mustPut(t, cli, "k/b", "2", clientv3.WithLease(l1))
	mustPut(t, cli, "k/c", "3")
	mustPut(t, cli, "k/g", "goes with its lease", clientv3.WithLease(l3))
	mustPut(t, cli, "k/a", "4")
	compact := mustPut(t, cli, "k/d", "5", clientv3.WithLease(l2))
	if _, err := cli.Delete(ctx, "k/c"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Txn(ctx).Then(clientv3.OpPut("k/e", "6"), clientv3.OpPut("k/f", "7", clientv3.WithLease(l1))).Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Revoke(ctx, l3); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, compact); err != nil {
		t.Fatal(err)
	}
	mustPut(t, cli, "k/a", "8")
	mustPut(t, cli, "k/h", strings.Repeat("a value kept out of memory ", 20)) // past --value-spill-min
	mustPut(t, cli, "k/b", "9")                                               // drops its lease
	return compact
}

// netsyctl runs the netsyctl binary with extra environment entries.
func netsyctl(t *testing.T, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, procutil.BuildNetsyctl(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = procutil.RunTied(cmd)
	return out.String(), errb.String(), err
}

func netsyctlOK(t *testing.T, env []string, args ...string) string {
	t.Helper()
	out, errOut, err := netsyctl(t, env, args...)
	if err != nil {
		t.Fatalf("netsyctl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, errOut)
	}
	return out
}

func netsyctlFails(t *testing.T, env []string, want string, args ...string) {
	t.Helper()
	out, errOut, err := netsyctl(t, env, args...)
	if err == nil {
		t.Errorf("netsyctl %s succeeded, want an error with %q; stdout:\n%s", strings.Join(args, " "), want, out)
		return
	}
	if !strings.Contains(errOut, want) {
		t.Errorf("netsyctl %s: stderr lacks %q:\n%s", strings.Join(args, " "), want, errOut)
	}
}

// TestBackupRestore saves a snapshot with etcdctl and with netsyctl,
// restores each into a new data directory on the file store and into an
// empty MinIO bucket, and requires every restored node to serve exactly
// the original state: every key at every revision from the compaction
// floor on (value, create and mod revision, version, lease), the store
// revision, and the leases with their granted TTLs. Restoring into a
// non-empty directory or bucket, a damaged file and a snapshot of a real
// etcd all fail with a clear error.
func TestBackupRestore(t *testing.T) {
	t.Parallel() // waits more than it computes and times nothing: see parallel in main_test.go
	if target != procutil.KindNetsy {
		t.Skip("etcd restores with etcdutl into its own format; netsyctl snapshot restore is netsy's")
	}
	src := startServer(t)
	cli := newClient(t, src)
	compact := backupWorkload(t, cli)
	want := readState(t, cli, compact)
	t.Logf("source: revision %d, compacted at %d, %d leases", want.Revision, compact, len(want.Leases))

	dir := t.TempDir()
	files := map[string]string{"etcdctl": filepath.Join(dir, "etcdctl.snap"), "netsyctl": filepath.Join(dir, "netsyctl.snap")}
	newCtl(t, src).ok("snapshot", "save", files["etcdctl"])
	netsyctlOK(t, nil, "snapshot", "save", "--endpoints", src.ClientAddr, files["netsyctl"])

	minio := miniotest.Start(t)
	creds := []string{"AWS_ACCESS_KEY_ID=" + minio.AccessKey, "AWS_SECRET_ACCESS_KEY=" + minio.SecretKey}
	s3Flags := func(bucket string) []string {
		return []string{"--storage", "s3://" + bucket, "--s3-endpoint", minio.Endpoint, "--s3-region", minio.Region, "--s3-path-style"}
	}
	var firstDir, firstBucket string
	for _, tool := range []string{"etcdctl", "netsyctl"} {
		file := files[tool]
		t.Run(tool+"/file", func(t *testing.T) {
			dataDir := filepath.Join(dir, tool+"-file") // outlives the subtest for the refusals below
			out := netsyctlOK(t, nil, "snapshot", "restore", file, "--data-dir", dataDir)
			for _, line := range []string{fmt.Sprintf("revision:          %d", want.Revision), "format", "leases:            2"} {
				if !strings.Contains(out, line) {
					t.Errorf("restore output lacks %q:\n%s", line, out)
				}
			}
			s := procutil.StartNetsy(t, procutil.Options{DataDir: dataDir})
			if d := want.diff(readState(t, newClient(t, s), compact)); d != "" {
				t.Errorf("restored from the %s file on the file store:\n%s", tool, d)
			}
			if err := s.Stop(); err != nil {
				t.Error(err)
			}
			firstDir = dataDir
		})
		t.Run(tool+"/minio", func(t *testing.T) {
			bucket := "restore-" + tool
			minio.CreateBucket(t, bucket)
			dataDir := filepath.Join(t.TempDir(), "data")
			netsyctlOK(t, creds, append([]string{"snapshot", "restore", file, "--data-dir", dataDir}, s3Flags(bucket)...)...)
			s := procutil.StartNetsy(t, procutil.Options{DataDir: dataDir, Args: s3Flags(bucket), Env: creds})
			if d := want.diff(readState(t, newClient(t, s), compact)); d != "" {
				t.Errorf("restored from the %s file on MinIO:\n%s", tool, d)
			}
			// The bucket alone holds the restored state.
			if err := s.Kill(); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(dataDir); err != nil {
				t.Fatal(err)
			}
			if err := s.Restart(); err != nil {
				t.Fatal(err)
			}
			if d := want.diff(readState(t, newClient(t, s), compact)); d != "" {
				t.Errorf("restored from the %s file on MinIO, then from the bucket alone:\n%s", tool, d)
			}
			if err := s.Stop(); err != nil {
				t.Error(err)
			}
			firstBucket = bucket
		})
	}
	if t.Failed() || firstDir == "" || firstBucket == "" {
		return
	}

	t.Run("refusals", func(t *testing.T) {
		netsyctlFails(t, nil, "restore target is not empty", "snapshot", "restore", files["netsyctl"], "--data-dir", firstDir)
		fresh := filepath.Join(t.TempDir(), "data")
		netsyctlFails(t, creds, "already holds wal/ objects",
			append([]string{"snapshot", "restore", files["netsyctl"], "--data-dir", fresh}, s3Flags(firstBucket)...)...)
		if _, err := os.Stat(fresh); !os.IsNotExist(err) {
			t.Errorf("a refused restore left %s behind (%v)", fresh, err)
		}
		for tool, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			data[len(data)/2] ^= 0x01
			bad := filepath.Join(t.TempDir(), tool+"-damaged.snap")
			if err := os.WriteFile(bad, data, 0o644); err != nil {
				t.Fatal(err)
			}
			netsyctlFails(t, nil, "integrity check failed", "snapshot", "restore", bad, "--data-dir", filepath.Join(t.TempDir(), "data"))
		}
	})

	t.Run("etcd snapshot", func(t *testing.T) {
		e := procutil.StartEtcd(t, procutil.Options{})
		ec := newCtl(t, e)
		ec.ok("put", "from-etcd", "1")
		file := filepath.Join(t.TempDir(), "etcd.snap")
		ec.ok("snapshot", "save", file)
		netsyctlFails(t, nil, "snapshot of etcd's own database", "snapshot", "restore", file, "--data-dir", filepath.Join(t.TempDir(), "data"))
		netsyctlFails(t, nil, "is not supported", "snapshot", "restore", file, "--data-dir", filepath.Join(t.TempDir(), "data"))
	})
}
