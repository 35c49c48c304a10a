package objwal

import (
	"slices"
	"testing"
	"time"
)

// retentionRound appends 5 entries after *idx, waits for them, snapshots
// at the last and waits for the snapshot's upload and the GC after it.
func retentionRound(t *testing.T, n *node, idx *uint64) {
	t.Helper()
	for range 5 {
		*idx++
		n.appendRange(*idx, *idx, "a")
		if err := n.rec.wait(t, *idx); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.l.SaveSnapshot(snapshotAt(*idx)); err != nil {
		t.Fatal(err)
	}
	n.nextSnapshot()
}

func snapshotKeys(t *testing.T, n *node) []string {
	t.Helper()
	objs, err := n.e.inner.List(t.Context(), snapPrefix, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range objs {
		keys = append(keys, o.Key)
	}
	return keys
}

// With a retention window GC keeps the newest snapshot committed before
// the window's start, every snapshot after it and every chunk after it,
// and deletes what is older; a fresh node restores from what is left.
func TestRetentionKeepsWhatTheWindowNeeds(t *testing.T) {
	e := newEnv(t)
	n := e.node("", ModeSync, func(o *Options) { o.SnapshotKeep = 1; o.Retention = 3 * time.Hour }).open()
	var idx uint64
	var roundFirstSeq []uint64
	for range 6 {
		roundFirstSeq = append(roundFirstSeq, n.l.Stats().Seq)
		retentionRound(t, n, &idx)
		e.fake.Advance(time.Hour)
	}
	// Round r (1..6) committed at (r-1) h; the last GC ran at 5 h, so the
	// window started at 2 h and round 2's snapshot (1 h) anchors it.
	want := []string{snapKey(11), snapKey(16), snapKey(21), snapKey(26), snapKey(31)}
	if got := snapshotKeys(t, n); !slices.Equal(got, want) {
		t.Fatalf("snapshots %v, want %v (round 2's, before the window's start, and every later one)", got, want)
	}
	_, seqs := history(t, e.inner)
	if seqs[0] != roundFirstSeq[2] {
		t.Fatalf("oldest chunk left is %d, want %d (the first after round 2's snapshot); round firsts %v", seqs[0], roundFirstSeq[2], roundFirstSeq)
	}
	st := n.l.Stats()
	if st.RestoreOldestRevision != 11 || st.RestoreOldestTimeMs != epoch.Add(time.Hour).UnixMilli() {
		t.Fatalf("oldest restorable revision %d at %d, want 11 at %d", st.RestoreOldestRevision, st.RestoreOldestTimeMs, epoch.Add(time.Hour).UnixMilli())
	}
	n.close()
	fresh := e.node("", ModeSync, nil).open()
	if snapIdx, got := fresh.replay(); snapIdx != 30 || len(got) != 0 {
		t.Fatalf("restore: snapshot %d and %d entries, want snapshot 30", snapIdx, len(got))
	}
}

// Until a snapshot precedes the window, GC deletes no chunk (a log kept
// from seq 1 is the only way to rebuild the window's first revisions), and
// a wall clock stepped forward on the Primary does not shorten the window.
func TestRetentionWithoutAnAnchorKeepsEveryChunk(t *testing.T) {
	e := newEnv(t)
	n := e.node("", ModeSync, func(o *Options) { o.SnapshotKeep = 1; o.Retention = 3 * time.Hour }).open()
	var idx uint64
	retentionRound(t, n, &idx)
	e.fake.Advance(2 * time.Hour)
	e.fake.StepWall(10 * time.Hour)
	retentionRound(t, n, &idx)
	e.fake.Advance(time.Minute)
	retentionRound(t, n, &idx)
	if got, want := snapshotKeys(t, n), []string{snapKey(6), snapKey(11), snapKey(16)}; !slices.Equal(got, want) {
		t.Fatalf("snapshots %v, want %v: 2 h into a 3 h window every one is needed", got, want)
	}
	if _, seqs := history(t, e.inner); seqs[0] != 1 {
		t.Fatalf("oldest chunk left is %d, want 1: no snapshot precedes the window", seqs[0])
	}
	// The whole history is restorable, from its first entry.
	if st := n.l.Stats(); st.RestoreOldestRevision != 2 || st.RestoreOldestTimeMs != epoch.UnixMilli() {
		t.Fatalf("oldest restorable revision %d at %d, want the first entry's 2 at %d", st.RestoreOldestRevision, st.RestoreOldestTimeMs, epoch.UnixMilli())
	}
	n.close()
}

// Retention 0 is the old rule: only the newest SnapshotKeep snapshots and
// the chunks after the oldest of them stay.
func TestRetentionZeroKeepsOnlyNewestSnapshots(t *testing.T) {
	e := newEnv(t)
	n := e.node("", ModeSync, func(o *Options) { o.SnapshotKeep = 1 }).open()
	var idx uint64
	for range 3 {
		retentionRound(t, n, &idx)
		e.fake.Advance(2 * time.Hour)
	}
	if got, want := snapshotKeys(t, n), []string{snapKey(16)}; !slices.Equal(got, want) {
		t.Fatalf("snapshots %v, want %v", got, want)
	}
	if st := n.l.Stats(); st.RestoreOldestRevision != 16 {
		t.Fatalf("oldest restorable revision %d, want 16", st.RestoreOldestRevision)
	}
	n.close()
}
