package node

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/discovery"
	objopen "github.com/netsy-io/netsy/internal/objstore/open"
	"github.com/netsy-io/netsy/internal/testutil/logdamage"
)

// startAgain starts the node that ran with cfg again (on the same
// addresses: its registration names them).
func startAgain(t *testing.T, cfg config.Config, logs io.Writer) (*Node, error) {
	t.Helper()
	logger := hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.MultiWriter(logs, testLog{t})})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := StartWith(ctx, cfg, logger, Deps{Clock: clock.Real(), WaitReady: true})
	if err == nil {
		t.Cleanup(func() { n.Close() })
	}
	return n, err
}

// departed records nodeID in storage's members.json as a node that was a
// member once and is registered no more.
func departed(t *testing.T, storage, clusterID, nodeID string) {
	t.Helper()
	ctx := t.Context()
	store, err := objopen.Open(ctx, storage, objopen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if _, err := discovery.NewMembersFile(store, clusterID).Update(ctx, func(m *discovery.Members) error {
		m.Assign(nodeID)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// fill writes k0..k9.
func fill(t *testing.T, n *Node) {
	t.Helper()
	cli := client(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 10 {
		if _, err := cli.Put(ctx, fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
}

func checkFilled(t *testing.T, n *Node) {
	t.Helper()
	cli := client(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 10 {
		got, err := cli.Get(ctx, fmt.Sprintf("k%d", i))
		if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != fmt.Sprintf("v%d", i) {
			t.Fatalf("k%d after the damaged log was cut: %v %v", i, got, err)
		}
	}
}

// A single node with --quorum -1 acknowledged its writes on their local
// fsync, so damage in its local log with valid records after it stops
// start-up with an error naming the file and offset and pointing at
// netsyctl repair; RepairLog (what netsyctl repair runs) refuses while the
// node runs, cuts the log and reports the entries it dropped, and the node
// then starts and fetches what object storage holds of them back.
func TestDamagedLogStopsASingleNodeUntilRepaired(t *testing.T) {
	storage := "file://" + filepath.Join(t.TempDir(), "bucket")
	dataDir := t.TempDir()
	a := startNode(t, storage, func(c *config.Config) { c.DataDir = dataDir })
	fill(t, a)
	if _, err := RepairLog(dataDir); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("repair of a running node's data directory: %v", err)
	}
	a.Close()
	d := logdamage.ZeroThirdLast(t, filepath.Join(dataDir, "wal"))
	path, off, index, last := d.Path, d.Offset, d.Index, d.LastIndex
	// A node that was deregistered keeps its member id in members.json:
	// this node is alone all the same, and its majority was itself.
	departed(t, storage, a.cfg.ClusterID, "gone")

	_, err := startAgain(t, a.cfg, io.Discard)
	if err == nil {
		t.Fatal("a single node with --quorum -1 started on a damaged log")
	}
	t.Logf("start-up error: %v", err)
	for _, want := range []string{path, fmt.Sprintf("offset %d", off), "netsyctl repair " + dataDir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("start-up error does not say %q: %v", want, err)
		}
	}

	rep, err := RepairLog(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Cut
	if c == nil || c.Damage.Path != path || c.Damage.Offset != off || c.Damage.After != index-1 || rep.Last != index-1 {
		t.Fatalf("repair report %+v (cut %+v)", rep, c)
	}
	if n := len(c.Dropped); n == 0 || c.Dropped[n-1].FirstIndex != index+1 || c.Dropped[n-1].LastIndex != last {
		t.Fatalf("dropped %v, want index %d-%d (the damaged record itself is unreadable)", c.Dropped, index+1, last)
	}
	if again, err := RepairLog(dataDir); err != nil || again.Cut != nil {
		t.Fatalf("a second repair: %+v %v", again, err)
	}

	var logs syncLog
	b, err := startAgain(t, a.cfg, &logs)
	if err != nil {
		t.Fatal(err)
	}
	checkFilled(t, b)
}

// A single node with --quorum 0 acknowledged only what object storage
// holds, so it cuts a damaged log by itself and fetches the rest back.
func TestDamagedLogIsCutOnAQuorumZeroNode(t *testing.T) {
	storage := "file://" + filepath.Join(t.TempDir(), "bucket")
	dataDir := t.TempDir()
	a := startNode(t, storage, func(c *config.Config) { c.DataDir, c.Quorum = dataDir, 0 })
	fill(t, a)
	a.Close()
	path := logdamage.ZeroThirdLast(t, filepath.Join(dataDir, "wal")).Path

	var logs syncLog
	b, err := startAgain(t, a.cfg, &logs)
	if err != nil {
		t.Fatal(err)
	}
	checkFilled(t, b)
	if out := logs.String(); !strings.Contains(out, "CUT the log") || !strings.Contains(out, path) {
		t.Fatalf("the cut was not logged with the segment:\n%s", out)
	}
}

// A replica of a --quorum -1 cluster holds nothing acknowledged that a
// quorum does not also hold, so it cuts a damaged log by itself: it
// starts, fetches back what the bucket holds, gets the rest from the
// Primary, and serves every acknowledged write.
func TestDamagedLogIsCutOnAClusterReplica(t *testing.T) {
	c := newTestCluster(t, -1, "n1", "n2", "n3")
	primary := c.separated(10 * time.Second)
	replica := ""
	for _, id := range c.ids() {
		if id != primary && id != c.elector() {
			replica = id
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cli := c.client(primary)
	revs := map[string]int64{}
	for i := range 20 {
		k := fmt.Sprintf("k%d", i)
		resp, err := cli.Put(ctx, k, "v")
		if err != nil {
			t.Fatal(err)
		}
		revs[k] = resp.Header.Revision
	}
	// The replica has fsync'd everything once it serves the last write.
	if got, err := c.client(replica).Get(ctx, "k19"); err != nil || len(got.Kvs) != 1 {
		t.Fatalf("k19 on %s: %v %v", replica, got, err)
	}
	c.crash(replica)
	logdamage.ZeroThirdLast(t, filepath.Join(c.dirs[replica], "wal"))

	c.start(replica)
	c.ready(10 * time.Second)
	rc := c.client(replica)
	for k, rev := range revs {
		got, err := rc.Get(ctx, k)
		if err != nil || len(got.Kvs) != 1 || got.Kvs[0].ModRevision != rev {
			t.Fatalf("%s on the replica after its log was cut: %v %v, want revision %d", k, got, err, rev)
		}
	}
	if _, err := cli.Put(ctx, "after", "cut"); err != nil {
		t.Fatal(err)
	}
	if got, err := rc.Get(ctx, "after"); err != nil || len(got.Kvs) != 1 {
		t.Fatalf("a write after the cut, read on the replica: %v %v", got, err)
	}
}
