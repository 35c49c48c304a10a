package objwal

import (
	"strings"
	"testing"
)

// A follower catches up with the bucket without claiming it, keeps what
// it is given locally only, and once it claims, writes after the bucket's
// history.
func TestFollowerThenClaim(t *testing.T) {
	e := newEnv(t)
	a := e.node("", ModeSync, nil).open()
	a.appendRange(1, 5, "a")
	if err := a.rec.wait(t, 5); err != nil {
		t.Fatal(err)
	}
	b := e.node("", ModeSync, func(o *Options) { o.Follower = true }).open()
	if b.l.IsWriter() {
		t.Fatal("a follower opened as the writer")
	}
	_, got := b.replay()
	checkEntries(t, got, 1, 5, tag("a"))
	// The Primary writes 6..7 and streams them to b.
	a.appendRange(6, 7, "a")
	if err := a.rec.wait(t, 7); err != nil {
		t.Fatal(err)
	}
	b.appendRange(6, 7, "a")
	if err := b.rec.wait(t, 7); err != nil {
		t.Fatal(err)
	}
	hist, _ := history(t, e.inner)
	if len(hist) != 7 {
		t.Fatalf("bucket holds %d entries, want 7 (the follower must not upload)", len(hist))
	}
	a.close()

	if err := b.l.Claim(t.Context()); err != nil {
		t.Fatal(err)
	}
	if !b.l.IsWriter() {
		t.Fatal("Claim did not make the follower the writer")
	}
	b.appendRange(8, 9, "b")
	if err := b.rec.wait(t, 9); err != nil {
		t.Fatal(err)
	}
	hist, _ = history(t, e.inner)
	if len(hist) != 9 || string(hist[8].Ops[0].Value) != "b-8" {
		t.Fatalf("bucket after the new writer's puts: %d entries", len(hist))
	}
}

// Release with a flush uploads everything pending (async mode would hold
// it for the chunk age) before the log stops being the writer; after it
// appends stay local.
func TestReleaseFlushes(t *testing.T) {
	e := newEnv(t)
	a := e.node("", ModeAsync, nil).open()
	a.appendRange(1, 10, "a")
	if err := a.rec.wait(t, 10); err != nil {
		t.Fatal(err)
	}
	if err := a.l.Release(t.Context(), true, 10); err != nil {
		t.Fatal(err)
	}
	hist, _ := history(t, e.inner)
	if len(hist) != 10 {
		t.Fatalf("bucket holds %d entries after a flushing release, want 10", len(hist))
	}
	a.appendRange(11, 11, "a")
	if err := a.rec.wait(t, 11); err != nil {
		t.Fatal(err)
	}
	e.fake.Advance(DefaultChunkMaxAge * 3)
	if hist, _ := history(t, e.inner); len(hist) != 10 {
		t.Fatalf("a released log uploaded a followed entry: bucket holds %d", len(hist))
	}
}

// A fenced writer releases its role: entries the bucket does not hold
// are cut, the fence is forgotten, and it follows the new writer.
func TestReleaseAfterFence(t *testing.T) {
	e := newEnv(t)
	a := e.node("", ModeSync, nil).open()
	a.appendRange(1, 3, "a")
	if err := a.rec.wait(t, 3); err != nil {
		t.Fatal(err)
	}
	b := e.node("", ModeSync, nil).open() // claims: the fence
	a.appendRange(4, 5, "a")
	if err := a.rec.wait(t, 5); !isFenced(err) {
		t.Fatalf("the deposed writer's upload: %v, want the fence", err)
	}
	if err := a.l.Release(t.Context(), false, 3); err != nil {
		t.Fatal(err)
	}
	if last := a.l.wal.LastIndex(); last != 3 {
		t.Fatalf("after the release the local log ends at %d, want 3", last)
	}
	b.appendRange(4, 4, "b")
	if err := b.rec.wait(t, 4); err != nil {
		t.Fatal(err)
	}
	a.rec = newSyncRec() // the engine's view: the fence was handled
	a.l.Attach(a.rec.onSync)
	a.appendRange(4, 4, "b") // following b
	if err := a.rec.wait(t, 4); err != nil {
		t.Fatalf("following after the release: %v", err)
	}
	if err := a.l.TruncateAfter(2); err == nil || !strings.Contains(err.Error(), "refusing") {
		t.Fatalf("cutting entries the bucket holds: %v, want a refusal", err)
	}
}

// A follower's local snapshot may run ahead of the checkpoint (its
// entries are not in the bucket yet in quorum mode); a restart takes it.
func TestFollowerSnapshotAheadOfBucket(t *testing.T) {
	e := newEnv(t)
	a := e.node("", ModeSync, nil).open()
	a.appendRange(1, 3, "a")
	if err := a.rec.wait(t, 3); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	b := e.node(dir, ModeSync, func(o *Options) { o.Follower = true }).open()
	b.appendRange(4, 8, "a") // committed by the Primary, not yet uploaded
	if err := b.rec.wait(t, 8); err != nil {
		t.Fatal(err)
	}
	if err := b.l.SaveSnapshot(snapshotAt(8)); err != nil {
		t.Fatal(err)
	}
	waitSnapIdx(t, b.l, 8)
	b.close()
	b2 := e.node(dir, ModeSync, func(o *Options) { o.Follower = true }).open()
	snapIdx, got := b2.replay()
	if snapIdx != 8 || len(got) != 0 {
		t.Fatalf("after the restart: snapshot %d, %d entries; want the snapshot at 8", snapIdx, len(got))
	}
	b2.appendRange(9, 9, "a")
	if err := b2.rec.wait(t, 9); err != nil {
		t.Fatal(err)
	}
}

func waitSnapIdx(t *testing.T, l *Log, idx uint64) {
	t.Helper()
	for {
		done := make(chan uint64, 1)
		if err := l.job(t.Context(), func() error { done <- l.localSnapIdx; return nil }); err != nil {
			t.Fatal(err)
		}
		if <-done >= idx {
			return
		}
		kick(l.maintKick)
	}
}
