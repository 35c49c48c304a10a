package objwal

import (
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/objstore/faulty"
)

// In ModeQuorum an entry is durable once it is fsync'd here and either a
// quorum of replicas holds it (SetReplicated) or it is uploaded; the
// fallback (ModeSync) uploads at once and still counts receipts.
func TestQuorumModeAcknowledgesOnReplicationOrUpload(t *testing.T) {
	e := newEnv(t)
	n := e.node("", ModeQuorum, nil).open()
	n.appendRange(1, 5, "a")
	if err := n.l.wal.WaitSynced(t.Context(), 5); err != nil {
		t.Fatal(err)
	}
	if idx, _ := n.rec.get(); idx != 0 {
		t.Fatalf("reported %d before any receipt or upload", idx)
	}
	n.l.SetReplicated(3)
	if err := n.rec.wait(t, 3); err != nil {
		t.Fatal(err)
	}
	if idx, _ := n.rec.get(); idx != 3 {
		t.Fatalf("reported %d: want 3, what the replicas hold", idx)
	}
	if s := n.l.Stats(); s.Puts != 0 {
		t.Fatalf("uploaded %d chunks before the chunk was due", s.Puts)
	}
	// Replication never counts beyond the local fsync.
	hold := n.store.Delay(faulty.PutIfAbsent, walPrefix, time.Hour)
	n.l.SetReplicated(9)
	n.appendRange(6, 9, "a")
	if err := n.rec.wait(t, 9); err != nil {
		t.Fatal(err)
	}
	n.appendRange(10, 12, "a")
	// The fallback: the pending entries go up at once, and are durable
	// once uploaded though no replica reports them.
	hold.Stop()
	n.l.SetMode(ModeSync)
	if p := n.nextPut(); p.err != nil {
		t.Fatal(p.err)
	}
	if err := n.rec.wait(t, 12); err != nil {
		t.Fatal(err)
	}
	// Back to the quorum: receipts acknowledge again while uploads wait
	// for size or age.
	n.l.SetMode(ModeQuorum)
	n.appendRange(13, 14, "a")
	n.l.SetReplicated(14)
	if err := n.rec.wait(t, 14); err != nil {
		t.Fatal(err)
	}
	n.close()
	got, _ := history(t, e.inner)
	if len(got) != 14 {
		t.Fatalf("after Close the bucket holds %d entries, want 14", len(got))
	}
}

// Replication reported in ModeAsync, or by a follower, counts for
// nothing, and is forgotten when the writer role ends.
func TestReplicatedIgnoredOutsideQuorum(t *testing.T) {
	e := newEnv(t)
	n := e.node("", ModeSync, nil).open()
	hold := n.store.Delay(faulty.PutIfAbsent, walPrefix, time.Hour)
	defer hold.Stop()
	n.l.SetMode(ModeAsync)
	n.l.SetReplicated(100)
	n.l.SetMode(ModeQuorum)
	n.appendRange(1, 2, "a")
	if err := n.l.wal.WaitSynced(t.Context(), 2); err != nil {
		t.Fatal(err)
	}
	if idx, _ := n.rec.get(); idx != 0 {
		t.Fatalf("reported %d: replication reported in async mode counted", idx)
	}
}
