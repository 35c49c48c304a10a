package objwal

import (
	"testing"

	"github.com/netsy-io/netsy/internal/wal"
)

// localOnlyLog writes a local log with no checkpoint (a node that ran
// without object storage): entries 1..10 and a local snapshot at 6 whose
// header says wal_seq (left from an earlier life with another bucket).
func localOnlyLog(t *testing.T, walSeq uint64) string {
	t.Helper()
	dir := t.TempDir()
	w, err := wal.Open(wal.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 10; i++ {
		if err := w.Append(entry(i, "a")); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.WaitSynced(t.Context(), 10); err != nil {
		t.Fatal(err)
	}
	local := snapshotAt(6)
	local.Header.WalSeq = walSeq
	if err := w.SaveSnapshot(local); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A node opens as a follower (every node does, until its role is
// settled) on a local log without a checkpoint and an empty bucket: it
// has no checkpoint until it seeds the bucket, and its maintenance and
// Close must live with that.
func TestFollowerWithoutCheckpointCloses(t *testing.T) {
	e := newEnv(t)
	n := e.node(localOnlyLog(t, 0), ModeSync, func(o *Options) { o.Follower = true }).open()
	kick(n.l.maintKick)
	n.close()
}

// Seeding at Claim, after the engine has loaded the local snapshot, still
// uploads it: the bucket's history starts with the snapshot at 6, then
// entries 7..10.
func TestClaimSeedsTheLocalSnapshotAfterItWasLoaded(t *testing.T) {
	e := newEnv(t)
	n := e.node(localOnlyLog(t, 0), ModeSync, func(o *Options) { o.Follower = true }).open()
	if idx, got := n.replay(); idx != 6 || len(got) != 4 {
		t.Fatalf("before the claim: snapshot %d, %d entries; want 6 and 4", idx, len(got))
	}
	if err := n.l.Claim(t.Context()); err != nil {
		t.Fatal(err)
	}
	n.close()
	fresh := e.node("", ModeSync, nil).open()
	idx, got := fresh.replay()
	if idx != 6 {
		t.Fatalf("restored snapshot %d, want the seeded 6", idx)
	}
	checkEntries(t, got, 7, 10, tag("a"))
}
