package objwal

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/objstore/faulty"
)

// cutLocalLog cuts the newest local segment in dir in the middle of the
// record of entry index and everything after it, as a power loss does to
// writes the disk had not made durable. It returns the path.
func cutLocalLog(t *testing.T, dir string, index uint64) string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil || len(segs) == 0 {
		t.Fatalf("no segments in %s: %v", dir, err)
	}
	sort.Strings(segs)
	path := segs[len(segs)-1]
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := datafile.NewReader(path, f)
	if err != nil {
		t.Fatal(err)
	}
	for {
		start := r.Offset()
		e, err := r.NextEntry()
		if err == io.EOF {
			t.Fatalf("entry %d is not in %s", index, path)
		}
		if err != nil {
			t.Fatal(err)
		}
		if e.Index == index {
			mid := start + (r.Offset()-start)/2
			if err := f.Truncate(mid); err != nil {
				t.Fatal(err)
			}
			return path
		}
	}
}

// The regression of a node whose local log lost the record of an
// acknowledged entry that the bucket holds (the tail cut in the middle of
// its last record): the next Open fetches it back instead of serving
// without it, the next write gets the next index, and the bucket keeps one
// linear history that restores on a fresh node.
func TestLostLocalTailIsFetchedBack(t *testing.T) {
	for _, mode := range []Mode{ModeSync, ModeAsync} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t)
			dir := t.TempDir()
			a := e.node(dir, mode, nil).open()
			a.appendRange(1, 20, "a")
			if err := a.rec.wait(t, 20); err != nil {
				t.Fatal(err)
			}
			a.close() // uploads what async mode holds back; checkpoint at 20
			// More than one chunk's worth is lost: entries 18..20.
			cutLocalLog(t, dir, 18)

			b := e.node(dir, mode, nil).open()
			_, got := b.replay()
			checkEntries(t, got, 1, 20, tag("a"))
			b.appendRange(21, 22, "b")
			if err := b.rec.wait(t, 22); err != nil {
				t.Fatal(err)
			}
			b.close()
			hist, _ := history(t, e.inner)
			if len(hist) != 22 || hist[20].Ops[0].Value == nil || string(hist[21].Ops[0].Value) != "b-21" {
				t.Fatalf("bucket history after the refetch: %d entries, want 22 with 21 from the new writer", len(hist))
			}
			fresh := e.node("", mode, nil).open()
			_, got = fresh.replay()
			if len(got) != 22 {
				t.Fatalf("a fresh restore replays %d entries, want 22", len(got))
			}
		})
	}
}

// When the chunks that held the lost entries were garbage-collected, the
// node catches up from the bucket's snapshot instead.
func TestLostLocalTailFetchedFromSnapshot(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	a := e.node(dir, ModeSync, nil).open()
	a.appendRange(1, 10, "a")
	if err := a.rec.wait(t, 10); err != nil {
		t.Fatal(err)
	}
	a.close()
	cutLocalLog(t, dir, 6)
	// Another node takes over, snapshots past the lost entries and its GC
	// (on a clock moved past MinWALAge) deletes the chunks that held them.
	b := e.node("", ModeSync, nil).open()
	b.appendRange(11, 12, "b")
	if err := b.rec.wait(t, 12); err != nil {
		t.Fatal(err)
	}
	e.fake.Advance(2 * DefaultMinWALAge)
	if err := b.l.SaveSnapshot(snapshotAt(12)); err != nil {
		t.Fatal(err)
	}
	b.nextSnapshot()
	b.close()
	if _, _, err := e.inner.Get(t.Context(), walKey(2)); err == nil {
		t.Fatal("the old chunks were not garbage-collected; the test does not test the snapshot path")
	}
	c := e.node(dir, ModeSync, nil).open()
	snapIdx, got := c.replay()
	if snapIdx != 12 || len(got) != 0 {
		t.Fatalf("after catching up: snapshot %d and %d entries, want the snapshot at 12", snapIdx, len(got))
	}
}

// An acknowledged async entry (fsync'd locally on a node without
// replicas) that the bucket contradicts stops Open with an error naming
// the local log and the chunk; without AckOnFsync (sync mode, or a
// cluster, where only a quorum acknowledges) it is replaced.
func TestContradictedAcknowledgedTailRefusesToStart(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	a := e.node(dir, ModeAsync, nil).open()
	a.appendRange(1, 3, "a")
	if err := a.rec.wait(t, 3); err != nil {
		t.Fatal(err)
	}
	a.close() // 1..3 in the bucket
	a = e.node(dir, ModeAsync, nil).open()
	fail := a.store.Fail(faulty.PutIfAbsent, walPrefix)
	a.appendRange(4, 5, "a")
	if err := a.rec.wait(t, 5); err != nil { // acknowledged: fsync'd
		t.Fatal(err)
	}
	a.close()
	fail.Stop()

	b := e.node("", ModeAsync, nil).open()
	b.appendRange(4, 4, "b")
	if err := b.rec.wait(t, 4); err != nil {
		t.Fatal(err)
	}
	b.close()

	// Opened as the node opens every log (sync mode, as a follower, until
	// its Primary settles the mode) and as a writer in async mode.
	for _, o := range []struct {
		mode     Mode
		follower bool
	}{{ModeSync, true}, {ModeAsync, false}} {
		_, err := e.node(dir, o.mode, func(opt *Options) { opt.AckOnFsync, opt.Follower = true, o.follower }).tryOpen()
		if err == nil {
			t.Fatalf("%s (follower %v): a local log whose acknowledged entry 4 the bucket contradicts opened", o.mode, o.follower)
		}
		for _, want := range []string{"index 4", walPrefix + "0", dir} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not name %q", err, want)
			}
		}
		if !errors.Is(err, ErrHistoryConflict) {
			t.Errorf("error %v is not ErrHistoryConflict", err)
		}
	}
}

// A chunk whose first index does not follow the bucket's last is never
// uploaded.
func TestUploadRefusesAGap(t *testing.T) {
	e := newEnv(t)
	n := e.node("", ModeSync, nil).open()
	n.appendRange(1, 2, "a")
	if err := n.rec.wait(t, 2); err != nil {
		t.Fatal(err)
	}
	n.l.mu.Lock()
	n.l.uploaded = 1 // as if the bucket's history ended one entry earlier
	n.l.mu.Unlock()
	n.appendRange(3, 3, "a")
	if err := n.rec.wait(t, 3); err == nil {
		t.Fatal("entry 3 was reported durable after a chunk that skips index 2 of the bucket")
	}
	hist, _ := history(t, e.inner)
	if _, ok := hist[3]; ok {
		t.Fatal("a chunk starting at index 3 was uploaded after a bucket ending at index 1")
	}
}
