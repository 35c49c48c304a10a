//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
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

// pitrMark is what the live cluster showed at one revision, recorded right
// after the put that made it, before any compaction passed it.
type pitrMark struct {
	rev     int64
	hash    uint32
	compact int64 // the HashKV response's compaction floor
	kvs     []string
	// after is the wall time once the put was acknowledged; the next
	// write is sent a few milliseconds later (stamps are milliseconds).
	after  time.Time
	byTime bool // restored with --time after instead of --revision
}

// TestPointInTimeRestoreOnACluster is issue 21's check, scaled for CI: a
// 3-node cluster on MinIO takes a few thousand writes (puts, deletes, a
// leased key) across several snapshot intervals while the test compacts
// every few hundred revisions. At 8 random revisions R it records what the
// Primary answers to HashKV at R (the RPC behind etcdctl endpoint hashkv
// --rev: every version up to R above the compaction floor, with the floor)
// and to a full get --rev=R. Then it compacts past them all, stops the
// cluster and restores each R into its own prefix, half of them through
// --time (the wall time after R was acknowledged, which must pick R); a
// node started on each answers HashKV at R with the same hash and floor
// and get --rev=R with the same keys, values, revisions, versions and
// leases.
func TestPointInTimeRestoreOnACluster(t *testing.T) {
	skipUnlessNetsy(t)
	start := time.Now()
	srv := miniotest.Start(t)
	c := startCluster(t, 3, srv, "--quorum", "-1", "--snapshot-every-revisions", "300", "--snapshot-keep", "2")
	_, primary := c.roles()
	cli := c.client(primary)
	ep := c.nodes[primary].Endpoint
	// The writes and reads below share one deadline, which grows with
	// their number (NETSY_PITR_WRITES).
	writes, marks0 := envInt(t, "NETSY_PITR_WRITES", 2400), envInt(t, "NETSY_PITR_MARKS", 8)
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second+time.Duration(writes)*5*time.Millisecond)
	defer cancel()
	lease, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}

	// The full size (20 000 writes, 20 revisions) runs with
	// NETSY_PITR_WRITES=20000 NETSY_PITR_MARKS=20; CI runs it scaled.
	const compactEvery = 500
	seed := time.Now().UnixNano()
	t.Logf("seed %d, %d writes, %d revisions", seed, writes, marks0)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	marked := map[int]bool{}
	for len(marked) < marks0 {
		// Not just before a compaction: the mark must be the state
		// right after its put.
		if i := 100 + rng.IntN(writes-100); i%compactEvery != compactEvery-1 {
			marked[i] = true
		}
	}
	var marks []pitrMark
	for i := range writes {
		key := fmt.Sprintf("k/%03d", (i*37)%250)
		var rev int64
		switch {
		case i%17 == 5:
			r, err := cli.Delete(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			rev = r.Header.Revision
		case i%50 == 7:
			rev = mustPut(t, cli, key, fmt.Sprintf("leased %d", i), clientv3.WithLease(lease.ID))
		default:
			rev = mustPut(t, cli, key, fmt.Sprintf("v%d", i))
		}
		if marked[i] {
			after := time.Now()
			h, err := cli.HashKV(ctx, ep, rev)
			if err != nil {
				t.Fatalf("hashkv --rev=%d: %v", rev, err)
			}
			g, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(rev))
			if err != nil {
				t.Fatal(err)
			}
			marks = append(marks, pitrMark{rev: rev, hash: h.Hash, compact: h.CompactRevision, kvs: renderKVs(g), after: after, byTime: len(marks)%2 == 1})
			time.Sleep(3 * time.Millisecond)
		}
		if i%compactEvery == compactEvery-1 {
			if _, err := cli.Compact(ctx, rev-200); err != nil {
				t.Fatal(err)
			}
		}
	}
	tip := currentRev(t, cli)
	if _, err := cli.Compact(ctx, tip); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Get(ctx, "k/000", clientv3.WithRev(marks[len(marks)-1].rev)); err == nil {
		t.Fatal("get --rev after the last compaction still answered: the cluster never compacted past the marks")
	}
	snaps := snapshotRevisions(t, srv, "cluster")
	t.Logf("%d writes to revision %d in %v; snapshots at %v", writes, tip, time.Since(start).Round(time.Millisecond), snaps)
	for _, id := range c.running() {
		if err := c.nodes[id].Stop(); err != nil {
			t.Fatal(err)
		}
	}

	args, env := minioArgs(srv, "unused")
	s3 := args[2:7] // --s3-endpoint E --s3-region R --s3-path-style
	from := "s3://" + srv.Bucket + "/cluster"
	restoreStart := time.Now()
	for _, m := range marks {
		to := fmt.Sprintf("s3://%s/restored-%d", srv.Bucket, m.rev)
		dataDir := filepath.Join(t.TempDir(), "restored")
		at := []string{"--revision", strconv.FormatInt(m.rev, 10)}
		if m.byTime {
			at = []string{"--time", m.after.UTC().Format(time.RFC3339Nano)}
		}
		out := netsyctlOK(t, env, slices.Concat([]string{"restore", "--from", from, "--to", to, "--data-dir", dataDir, "-o", "json"}, at, s3)...)
		var res struct {
			Revision int64 `json:"revision"`
			Base     int64 `json:"base_snapshot_revision"`
		}
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatalf("restore -o json: %v\n%s", err, out)
		}
		if res.Revision != m.rev {
			t.Fatalf("restore %v picked revision %d, want %d", at, res.Revision, m.rev)
		}
		s := procutil.StartNetsy(t, procutil.Options{DataDir: dataDir, Args: slices.Concat([]string{"--storage", to}, s3), Env: env})
		rcli := newClient(t, s)
		h, err := rcli.HashKV(opCtx(t), s.Endpoint, m.rev)
		if err != nil {
			t.Fatalf("hashkv --rev=%d on the node restored at it: %v", m.rev, err)
		}
		if h.Hash != m.hash || h.CompactRevision != m.compact {
			t.Errorf("revision %d (restore %v, from snapshot %d): hashkv %d floor %d, live cluster had %d floor %d",
				m.rev, at, res.Base, h.Hash, h.CompactRevision, m.hash, m.compact)
		}
		g, err := rcli.Get(opCtx(t), "\x00", clientv3.WithFromKey(), clientv3.WithRev(m.rev))
		if err != nil {
			t.Fatal(err)
		}
		if got := renderKVs(g); !reflect.DeepEqual(got, m.kvs) {
			t.Errorf("revision %d: get --rev on the restored node differs from the live cluster's:\n  got  %q\n  want %q", m.rev, got, m.kvs)
		}
		if err := s.Stop(); err != nil {
			t.Fatal(err)
		}
		t.Logf("revision %d by %v: from snapshot %d, compaction floor %d, %d keys, hashkv %08x", m.rev, at[0], res.Base, m.compact, len(m.kvs), m.hash)
	}
	t.Logf("%d restores checked in %v (total %v)", len(marks), time.Since(restoreStart).Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
}

// TestOperationsDocRecoverFromAMistake runs the tested block of
// docs/operations.md's "Recover from a mistake" as written (this test's
// MinIO, directories and time in place of the examples'): a key is deleted
// by mistake after a time T and the node compacts past it; the documented
// read-only node at T and the node restored with --time T both serve the
// state before the mistake, and the restored one takes writes after it.
func TestOperationsDocRecoverFromAMistake(t *testing.T) {
	skipUnlessNetsy(t)
	block := docBlock(t, "recover")
	srv := miniotest.Start(t)
	args, env := minioArgs(srv, "prod")
	live := procutil.StartNetsy(t, procutil.Options{DataDir: t.TempDir(), Args: args, Env: env})
	cli := newClient(t, live)
	ctx := opCtx(t)
	const settings = "/registry/configmaps/default/settings"
	for i := range 5 {
		mustPut(t, cli, fmt.Sprintf("/registry/configmaps/default/c%d", i), fmt.Sprint("v", i))
	}
	mustPut(t, cli, settings, "before")
	then, err := cli.Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	want := renderKVs(then)
	// T: after the last good write, a few milliseconds (commit times are
	// milliseconds) before the mistake.
	time.Sleep(3 * time.Millisecond)
	at := time.Now()
	time.Sleep(3 * time.Millisecond)
	if _, err := cli.Delete(ctx, settings); err != nil {
		t.Fatal(err)
	}
	tip := mustPut(t, cli, "/registry/configmaps/default/c0", "after")
	if _, err := cli.Compact(ctx, tip); err != nil {
		t.Fatal(err)
	}

	dirs := t.TempDir()
	block = strings.NewReplacer(
		"2026-03-04T14:02:00Z", at.UTC().Format(time.RFC3339Nano),
		"s3://netsy/", "s3://"+srv.Bucket+"/",
		"http://127.0.0.1:9000", srv.Endpoint,
		"/var/lib/netsy-recovered", filepath.Join(dirs, "recovered"),
		"/tmp/netsy-then", filepath.Join(dirs, "then"),
		"AWS_ACCESS_KEY_ID=minio ", "AWS_ACCESS_KEY_ID="+srv.AccessKey+" ",
		"AWS_SECRET_ACCESS_KEY=minio-secret ", "AWS_SECRET_ACCESS_KEY="+srv.SecretKey+" ",
	).Replace(block)
	netsys := runDocBlock(t, t.TempDir(), block)
	if len(netsys) != 2 || !slices.Contains(netsys[0], "--read-only-at") {
		t.Fatalf("the documented block starts %q, want a read-only node and then the restored one", netsys)
	}
	creds := []string{"AWS_ACCESS_KEY_ID=" + srv.AccessKey, "AWS_SECRET_ACCESS_KEY=" + srv.SecretKey}
	for i, args := range netsys {
		// The test's ports, not the example's.
		var own []string
		for j := 0; j < len(args); j++ {
			if args[j] == "--client-addr" || args[j] == "--http-addr" {
				j++
				continue
			}
			own = append(own, args[j])
		}
		s := startDocumented(t, own, creds)
		rcli := newClient(t, s)
		got, err := rcli.Get(opCtx(t), "\x00", clientv3.WithFromKey())
		if err != nil {
			t.Fatal(err)
		}
		if g := renderKVs(got); got.Header.Revision != then.Header.Revision || !reflect.DeepEqual(g, want) {
			t.Errorf("node %d (netsy %s) at revision %d:\n  got  %q\n  want %q (revision %d, before the mistake)",
				i+1, strings.Join(args, " "), got.Header.Revision, g, want, then.Header.Revision)
		}
		if i == 1 {
			if r := mustPut(t, rcli, settings, "repaired"); r != then.Header.Revision+1 {
				t.Errorf("a put on the restored node got revision %d, want %d", r, then.Header.Revision+1)
			}
		}
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	}
}

// envInt is the integer in the environment variable name, or def when it
// is not set.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
