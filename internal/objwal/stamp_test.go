package objwal

import (
	"testing"
	"time"
)

// The writer stamps every entry it logs with its wall clock in unix ms,
// the stamps reach the bucket's chunks, and a snapshot header carries the
// stamp of its last entry.
func TestWriterStampsEntriesWithWallClock(t *testing.T) {
	e := newEnv(t)
	n := e.node("", ModeSync, nil).open()
	want := map[uint64]int64{}
	for i := uint64(1); i <= 4; i++ {
		want[i] = e.clk.Wall().UnixMilli()
		n.appendRange(i, i, "a")
		if err := n.rec.wait(t, i); err != nil {
			t.Fatal(err)
		}
		e.fake.Advance(1500 * time.Millisecond)
	}
	got, _ := history(t, e.inner)
	for i, ms := range want {
		if got[i].CommitTimeMs != ms {
			t.Fatalf("entry %d stamped %d, want %d (the wall clock when it was appended)", i, got[i].CommitTimeMs, ms)
		}
	}
	if err := n.l.SaveSnapshot(snapshotAt(3)); err != nil {
		t.Fatal(err)
	}
	key := n.nextSnapshot()
	h, err := snapshotHeader(t.Context(), e.inner, key)
	if err != nil {
		t.Fatal(err)
	}
	if h.CommitTimeMs != want[3] {
		t.Fatalf("snapshot %s header stamped %d, want entry 3's %d", key, h.CommitTimeMs, want[3])
	}
}

// A wall clock stepped back on the Primary, or a new Primary whose clock
// runs behind the old one's, never makes stamps go backwards: they stay at
// the last stamp in the log until the wall clock passes it.
func TestWallStepBackDoesNotMoveStampsBackwards(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	n := e.node(dir, ModeSync, nil).open()
	n.appendRange(1, 2, "a")
	if err := n.rec.wait(t, 2); err != nil {
		t.Fatal(err)
	}
	high := e.clk.Wall().UnixMilli()
	e.fake.StepWall(-time.Hour)
	n.appendRange(3, 3, "a")
	if err := n.rec.wait(t, 3); err != nil {
		t.Fatal(err)
	}
	n.close()
	// The restarted writer (a new Primary) has nothing but the log to
	// learn the last stamp from.
	n.open()
	n.appendRange(4, 4, "a")
	if err := n.rec.wait(t, 4); err != nil {
		t.Fatal(err)
	}
	e.fake.StepWall(2 * time.Hour)
	n.appendRange(5, 5, "a")
	if err := n.rec.wait(t, 5); err != nil {
		t.Fatal(err)
	}
	got, _ := history(t, e.inner)
	for i := uint64(2); i <= 5; i++ {
		if got[i].CommitTimeMs < got[i-1].CommitTimeMs {
			t.Fatalf("entry %d stamped %d, below entry %d's %d", i, got[i].CommitTimeMs, i-1, got[i-1].CommitTimeMs)
		}
	}
	if got[3].CommitTimeMs != high || got[4].CommitTimeMs != high {
		t.Fatalf("entries 3 and 4 stamped %d and %d after the wall clock went back an hour, want the last stamp %d", got[3].CommitTimeMs, got[4].CommitTimeMs, high)
	}
	if want := e.clk.Wall().UnixMilli(); got[5].CommitTimeMs != want {
		t.Fatalf("entry 5 stamped %d once the wall clock passed the last stamp, want the wall clock %d", got[5].CommitTimeMs, want)
	}
}

// A follower keeps the Primary's stamps and, promoted, stamps from the
// highest one it holds.
func TestFollowerKeepsStampsAndContinuesFromThem(t *testing.T) {
	e := newEnv(t)
	f := e.node("", ModeSync, func(o *Options) { o.Follower = true }).open()
	ent := entry(1, "a")
	future := e.clk.Wall().Add(time.Hour).UnixMilli()
	ent.CommitTimeMs = future
	if err := f.l.Append(ent); err != nil {
		t.Fatal(err)
	}
	if err := f.l.Claim(t.Context()); err != nil {
		t.Fatal(err)
	}
	f.appendRange(2, 2, "a")
	if err := f.rec.wait(t, 2); err != nil {
		t.Fatal(err)
	}
	got, _ := history(t, e.inner)
	if got[1].CommitTimeMs != future || got[2].CommitTimeMs != future {
		t.Fatalf("stamps %d, %d: want the Primary's %d kept and the promoted follower to continue from it", got[1].CommitTimeMs, got[2].CommitTimeMs, future)
	}
}
