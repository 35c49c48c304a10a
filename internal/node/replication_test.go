package node

import (
	clientv3 "go.etcd.io/etcd/client/v3"

	"context"
	"fmt"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/objstore/faulty"
)

// quorumReady waits until the Primary counts enough replicas to
// acknowledge writes on their receipts, and no longer runs the Elector
// too, and returns it. Moving the Elector off the Primary hands the lock
// to a new Elector that answers nothing until it has loaded, so the
// Primary's 100 ms lease lapses meanwhile and its writes fall back to
// object storage: a test of quorum acknowledgement starts after that.
func (c *testCluster) quorumReady(timeout time.Duration) string {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p := c.ready(timeout)
		n := c.node(p)
		if st := n.roles.Replication(); st != nil && !st.Fallback && n.roles.RunningElector() == nil {
			return p
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the Primary still falls back to object storage: %v", c.node(p).roles.Replication())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Under majority quorum a write is acknowledged once a replica has it
// fsync'd, with object storage refusing every chunk; when the Primary then
// crashes, the new Primary (elected for the newest log) has every
// acknowledged write, though none of them reached the bucket.
func TestQuorumCommitSurvivesPrimaryCrashWithoutObjectStorage(t *testing.T) {
	// The scenario needs every write acknowledged by the quorum. On a
	// loaded machine under -race the Primary's lease can still lapse (or a
	// replica be marked Degraded) now and then, which is the protocol
	// working, not this bug: such a round is run again on a fresh cluster,
	// up to three rounds.
	for round := 1; ; round++ {
		fellBack := false
		t.Run(fmt.Sprintf("round%d", round), func(t *testing.T) {
			fellBack = quorumCommitSurvivesPrimaryCrash(t)
		})
		if !fellBack || t.Failed() {
			return
		}
		if round == 3 {
			t.Fatal("the writes fell back to object storage in three rounds out of three")
		}
	}
}

// quorumCommitSurvivesPrimaryCrash runs one round of the test above; it
// reports true, without failing, if the writes fell back to object storage.
func quorumCommitSurvivesPrimaryCrash(t *testing.T) (fellBack bool) {
	// Heartbeats every 150 ms: with 50 ms (a 100 ms lease, Degraded after
	// 100 ms of silence) the lease lapsed in most rounds under load.
	c := newTestClusterBeating(t, -1, 150*time.Millisecond, "n1", "n2", "n3")
	primary := c.quorumReady(10 * time.Second)
	survivor := "n1"
	if survivor == primary {
		survivor = "n2"
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cli := c.client(survivor)
	before := c.node(primary).roles.Replication().Fallbacks
	chunks := c.faults.Fail(faulty.PutIfAbsent, "wal/")
	var acked []int64
	for i := range 30 {
		resp, err := cli.Put(ctx, fmt.Sprintf("q%d", i), fmt.Sprint(i))
		if err != nil {
			t.Fatalf("put %d with object storage refusing chunks: %v", i, err)
		}
		acked = append(acked, resp.Header.Revision)
	}
	if st := c.node(primary).roles.Replication(); st.Fallback || st.Fallbacks != before {
		t.Logf("the writes fell back to object storage; another round: %v", st)
		return true
	}
	if n := chunks.Fired(); n != 0 {
		t.Fatalf("%d chunk uploads were tried while the quorum acknowledged (want none: uploads wait for size or age)", n)
	}
	c.crash(primary)
	chunks.Stop()
	if _, err := cli.Put(ctx, "after", "crash"); err != nil {
		t.Fatalf("write after the Primary crashed: %v", err)
	}
	newPrimary := c.ready(10 * time.Second)
	for i, rev := range acked {
		for _, id := range c.ids() {
			got, err := c.client(id).Get(ctx, fmt.Sprintf("q%d", i))
			if err != nil || len(got.Kvs) != 1 || got.Kvs[0].ModRevision != rev {
				t.Fatalf("acknowledged q%d at revision %d, read on %s (Primary %s): %v %v", i, rev, id, newPrimary, got, err)
			}
		}
	}
	return false
}

// A replica that stops acknowledging (its stream stalls) makes writes wait
// at most the quorum timeout, then they are acknowledged through object
// storage; once it catches up, the quorum acknowledges again.
func TestQuorumTimeoutFallsBackToObjectStorage(t *testing.T) {
	c := newTestCluster(t, -1, "n1", "n2", "n3")
	primary := c.quorumReady(10 * time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cli := c.client(primary)
	// Both replicas' links to the Primary stall: receipts stop.
	var replicas []string
	for _, id := range c.ids() {
		if id != primary {
			replicas = append(replicas, id)
			c.net.Stall(id, primary)
		}
	}
	start := time.Now()
	if _, err := cli.Put(ctx, "slow", "1"); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	st := c.node(primary).roles.Replication()
	t.Logf("a write with stalled replicas took %v; replication %v", took, st)
	if !st.Fallback || st.Fallbacks == 0 {
		t.Fatalf("no fallback: %v", st)
	}
	for _, id := range replicas {
		c.net.Unstall(id, primary)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := cli.Put(ctx, "again", "1"); err != nil {
			t.Fatal(err)
		}
		if st := c.node(primary).roles.Replication(); !st.Fallback {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still falling back after the replicas recovered: %v", c.node(primary).roles.Replication())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// As on etcd, a write answered by a replica is applied there when the
// client hears of it: a serializable read on that node sees it at once.
func TestReplicaReadsItsOwnWrites(t *testing.T) {
	c := newTestCluster(t, -1, "n1", "n2", "n3")
	primary := c.quorumReady(10 * time.Second)
	replica := "n1"
	if replica == primary {
		replica = "n2"
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cli := c.client(replica)
	for i := range 200 {
		k := fmt.Sprintf("ryw%d", i)
		put, err := cli.Put(ctx, k, "v")
		if err != nil {
			t.Fatal(err)
		}
		got, err := cli.Get(ctx, k, clientv3.WithSerializable())
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Kvs) != 1 || got.Kvs[0].ModRevision != put.Header.Revision {
			t.Fatalf("serializable read of %s on the replica after its put at %d: %v", k, put.Header.Revision, got.Kvs)
		}
	}
}
