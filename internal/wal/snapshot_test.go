package wal

import (
	"testing"
)

// WriteSnapshot deletes no segment, so a caller whose snapshot covers
// entries it must still be able to read (objwal's follower, whose
// snapshot runs ahead of object storage) keeps them; DeleteCovered then
// deletes what it names, never past the newest snapshot.
func TestWriteSnapshotKeepsSegmentsUntilDeleteCovered(t *testing.T) {
	dir := t.TempDir()
	w := open(t, Options{Dir: dir, SegmentBytes: 1024})
	defer w.Close()
	appendRange(t, w, 1, 200)
	waitSynced(t, w, 200)
	before := len(segmentFiles(t, dir))

	if err := w.WriteSnapshot(testSnapshot(200)); err != nil {
		t.Fatal(err)
	}
	if n := len(segmentFiles(t, dir)); n != before || w.FirstIndex() != 1 {
		t.Fatalf("after WriteSnapshot: %d segments (had %d), first index %d; want every segment kept", n, before, w.FirstIndex())
	}
	checkReplay(t, w, 1, 200)
	if err := w.DeleteCovered(201); err == nil {
		t.Fatal("DeleteCovered past the newest snapshot succeeded")
	}
	if err := w.DeleteCovered(120); err != nil {
		t.Fatal(err)
	}
	first := w.FirstIndex()
	if first <= 1 || first > 121 {
		t.Fatalf("after DeleteCovered(120) the log starts at %d", first)
	}
	checkReplay(t, w, 121, 200)
	// Covering everything seals the active segment and deletes it too, so
	// the log restarts after the snapshot, as SaveSnapshot does.
	if err := w.DeleteCovered(200); err != nil {
		t.Fatal(err)
	}
	if w.FirstIndex() != 0 || w.LastIndex() != 0 {
		t.Fatalf("after DeleteCovered(200): first %d last %d, want an empty log", w.FirstIndex(), w.LastIndex())
	}
	appendRange(t, w, 201, 202)
	waitSynced(t, w, 202)
	checkReplay(t, w, 201, 202)
}
