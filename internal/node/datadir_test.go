package node

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/objstore/faulty"
	"github.com/netsy-io/netsy/internal/vfs"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// newWatchedDir is a data directory with its wal directory and a held
// lock, and a watch over it on a fake clock.
func newWatchedDir(t *testing.T) (string, *dataDirWatch, *clock.Fake, chan error) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(filepath.Join(dir, "wal"), 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	lost := make(chan error, 1)
	return dir, &dataDirWatch{dir: dir, lock: lock, fs: vfs.OS(), clk: clk, lost: func(_ context.Context, err error) { lost <- err }}, clk, lost
}

// The check finds a data directory deleted, replaced by another one of
// the same name (even if the new lock file reuses the inode number), or
// without its wal directory, and nothing wrong with the one it opened.
func TestDataDirCheckNoticesADeletedOrReplacedDirectory(t *testing.T) {
	for _, tc := range []struct {
		name string
		do   func(dir string) error
	}{
		{"deleted", func(dir string) error { return os.RemoveAll(dir) }},
		{"replaced", func(dir string) error {
			if err := os.RemoveAll(dir); err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Join(dir, "wal"), 0o755); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(dir, "LOCK"), nil, 0o644)
		}},
		{"wal deleted", func(dir string) error { return os.RemoveAll(filepath.Join(dir, "wal")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, w, _, _ := newWatchedDir(t)
			if err := w.check(); err != nil {
				t.Fatalf("intact directory: %v", err)
			}
			if err := tc.do(dir); err != nil {
				t.Fatal(err)
			}
			err := w.check()
			if !errors.Is(err, ErrDataDirGone) {
				t.Fatalf("after %s: %v", tc.name, err)
			}
			t.Log(err)
		})
	}
}

// The watch checks on its clock: a deleted directory is reported once
// the next check runs, and stop ends the checks.
func TestDataDirWatchReportsOnItsClock(t *testing.T) {
	dir, w, clk, lost := newWatchedDir(t)
	w.start()
	defer w.stop()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lost:
		t.Fatalf("reported before a check was due: %v", err)
	default:
	}
	for {
		clk.Advance(dataDirCheckInterval)
		select {
		case err := <-lost:
			if !errors.Is(err, ErrDataDirGone) {
				t.Fatalf("lost with %v", err)
			}
			return
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A single node whose data directory is deleted stops acknowledging
// writes within a few seconds, /healthz is 503 saying why, and an error
// line is logged.
func TestDeletedDataDirStopsAcknowledgements(t *testing.T) {
	var logs syncLog
	n := startNode(t, "", nil, &logs)
	cli := client(t, n)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "before"); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(n.cfg.DataDir); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := httpGet(t, n, "/healthz")
		if code == http.StatusServiceUnavailable {
			if !strings.Contains(body, "data directory was deleted") {
				t.Fatalf("/healthz: %s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz still %d %q 5 s after the data directory was deleted", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	actx, acancel := context.WithTimeout(ctx, 2*time.Second)
	defer acancel()
	if _, err := cli.Put(actx, "k", "after"); err == nil {
		t.Fatal("a write was acknowledged after the data directory was deleted")
	}
	if !strings.Contains(logs.String(), "DATA DIRECTORY LOST") {
		t.Fatalf("no error line; logs:\n%s", logs.String())
	}
}

// A replica whose data directory is deleted stops acknowledging (it
// reports Degraded, so the Primary stops counting it) and a Primary whose
// data directory is deleted steps down: another node is elected and
// writes go on through the survivors.
func TestDeletedDataDirOfAPrimaryHandsTheRoleOn(t *testing.T) {
	c := newTestCluster(t, -1, "n1", "n2", "n3")
	primary := c.ready(10 * time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// Every node holds the Primary's log (the Elector elects no node
	// behind a Degraded one).
	put, err := c.client(primary).Put(ctx, "before", "v")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range c.ids() {
		for c.node(id).eng.CurrentRevision() < put.Header.Revision {
			if ctx.Err() != nil {
				t.Fatalf("%s never applied revision %d", id, put.Header.Revision)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if err := os.RemoveAll(c.dirs[primary]); err != nil {
		t.Fatal(err)
	}
	var other string
	for _, id := range c.ids() {
		if id != primary {
			other = id
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		p, _ := c.node(other).roles.Primary()
		if p != nil && p.NodeId != primary && c.node(p.NodeId).roles.Active() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Primary is still %v after its data directory was deleted", p.GetNodeId())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c.node(primary).roles.Healthy() {
		t.Fatal("the node without a data directory says it is Healthy")
	}
	if _, err := c.client(other).Put(ctx, "after", "v"); err != nil {
		t.Fatalf("write through %s after the Primary lost its data directory: %v", other, err)
	}
}

// Writes that object storage does not take make /healthz 503 with the
// reason while they fail (a single node with --quorum 0, its bucket
// refusing uploads), and 200 again once the bucket takes them.
func TestHealthzIs503WhileObjectStorageRefusesWrites(t *testing.T) {
	c := newTestCluster(t, 0, "n1")
	c.ready(10 * time.Second)
	n := c.node("n1")
	if code, body := httpGet(t, n, "/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz before: %d %s", code, body)
	}
	fault := c.faults.Fail(faulty.PutIfAbsent, "wal/")
	cli := c.client("n1")
	wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer wcancel()
	done := make(chan error, 1)
	go func() { _, err := cli.Put(wctx, "k", "v"); done <- err }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, body := httpGet(t, n, "/healthz")
		if code == http.StatusServiceUnavailable {
			if !strings.Contains(body, "writes fail") || !strings.Contains(body, "object storage unavailable") {
				t.Fatalf("/healthz: %s", body)
			}
			t.Logf("/healthz: %s", strings.TrimSpace(body))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz still %d %q while uploads fail", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	fault.Stop()
	deadline = time.Now().Add(15 * time.Second)
	for {
		code, body := httpGet(t, n, "/healthz")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthz still %d %q after the bucket came back", code, body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	<-done
}

// A replica whose data directory is deleted reports Degraded (the
// Elector sees it so, and no quorum counts its receipts), and writes go
// on through the other nodes.
func TestDeletedDataDirOfAReplicaDegradesIt(t *testing.T) {
	c := newTestCluster(t, -1, "n1", "n2", "n3")
	primary := c.separated(10 * time.Second)
	el := c.elector()
	victim := ""
	for _, id := range c.ids() {
		if id != primary && id != el {
			victim = id
		}
	}
	if victim == "" {
		t.Skip("no replica that is not the Elector")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := os.RemoveAll(c.dirs[victim]); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		cs, err := c.node(el).roles.RunningElector().ClusterState(ctx, true)
		if err != nil {
			t.Fatal(err)
		}
		degraded := false
		for _, n := range cs.Nodes {
			if n.GetInfo().GetNodeId() == victim && n.Health == netsyv1.HealthState_DEGRADED {
				degraded = true
			}
		}
		if degraded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the Elector does not see %s Degraded 5 s after its data directory was deleted", victim)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Forwarded to the Primary, which may commit it, but the replica
	// cannot apply it: it does not answer OK.
	if _, err := c.client(victim).Put(ctx, "k", "v"); err == nil {
		t.Fatal("a write through the replica without a data directory was acknowledged")
	}
	if _, err := c.client(primary).Put(ctx, "k2", "v"); err != nil {
		t.Fatalf("write through the Primary: %v", err)
	}
}
