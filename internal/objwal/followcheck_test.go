package objwal

import (
	"context"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/testutil/syncbuf"

	"github.com/hashicorp/go-hclog"
	"github.com/netsy-io/netsy/internal/objstore"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// readCounter counts the objects a Log reads, by key prefix.
type readCounter struct {
	objstore.Store
	mu    sync.Mutex
	reads map[string]int
}

func (c *readCounter) note(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reads == nil {
		c.reads = make(map[string]int)
	}
	prefix, _, _ := strings.Cut(key, "/")
	c.reads[prefix+"/"]++
}

func (c *readCounter) count(prefix string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads[prefix]
}

func (c *readCounter) Get(ctx context.Context, key string) ([]byte, string, error) {
	c.note(key)
	return c.Store.Get(ctx, key)
}

func (c *readCounter) GetReader(ctx context.Context, key string) (io.ReadCloser, string, error) {
	c.note(key)
	return c.Store.GetReader(ctx, key)
}

// followed sets up the restart of issue 22: a follower b opened on an
// empty bucket (so with no checkpoint), followed writer a through 30,
// saved a local snapshot at 25 after a uploaded one at 20, and a then
// uploaded a newer snapshot, at 28. It returns a, b and b's directory.
func followed(t *testing.T, e *env) (a, b *node, dir string) {
	t.Helper()
	dir = t.TempDir()
	b = e.node(dir, ModeSync, func(o *Options) { o.Follower = true }).open()
	a = e.node("", ModeSync, nil).open()
	from := uint64(1)
	for _, step := range []struct {
		to       uint64
		snapshot func()
	}{
		{20, func() {
			if err := a.l.SaveSnapshot(snapshotAt(20)); err != nil {
				t.Fatal(err)
			}
			a.nextSnapshot()
		}},
		{25, func() {
			if err := b.l.SaveSnapshot(snapshotAt(25)); err != nil {
				t.Fatal(err)
			}
			waitSnapIdx(t, b.l, 25)
		}},
		{28, func() {
			if err := a.l.SaveSnapshot(snapshotAt(28)); err != nil {
				t.Fatal(err)
			}
			a.nextSnapshot()
		}},
		{30, func() {}},
	} {
		// One chunk per entry: the writer waits for each.
		for i := from; i <= step.to; i++ {
			b.follow(a.appendRange(i, i, "a"))
			if err := a.rec.wait(t, i); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.rec.wait(t, step.to); err != nil {
			t.Fatal(err)
		}
		step.snapshot()
		from = step.to + 1
	}
	return a, b, dir
}

// A follower's checkpoint advances as it follows (to the last chunk
// starting by its local snapshot), so a restart keeps every entry it holds
// and reads neither a snapshot nor the chunks its local snapshot covers.
// Before, its checkpoint stayed at Open's (none, on an empty bucket), and
// the restart installed the bucket's snapshot at 28, DISCARDING 26..30
// and downloading them again (issue 22 item 5).
func TestFollowerRestartKeepsTheEntriesItFollowed(t *testing.T) {
	e := newEnv(t)
	_, b, dir := followed(t, e)
	b.close()
	m, err := readMeta(dir + "/" + metaFileName)
	if err != nil {
		t.Fatal(err)
	}
	// Chunk 1 is a's claim, chunk i+1 holds entry i. When b saved its
	// snapshot at 25 the bucket ended with chunk 26, entry 25, which the
	// chunks from 26 on hold.
	if m.Seq != 25 || m.Index != 24 {
		t.Fatalf("the follower's checkpoint is seq %d index %d; want seq 25 index 24 (the last chunk starting by its local snapshot)", m.Seq, m.Index)
	}

	reads := &readCounter{}
	var logged syncbuf.Buffer
	b2 := e.node(dir, ModeSync, func(o *Options) {
		o.Follower = true
		reads.Store = o.Store
		o.Store = reads
		o.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.MultiWriter(testWriter{t}, &logged)})
	}).open()
	if out := logged.String(); strings.Contains(out, "DISCARDING") {
		t.Fatalf("the restart discarded entries it had followed:\n%s", out)
	}
	snapIdx, got := b2.replay()
	if snapIdx != 25 {
		t.Fatalf("after the restart the local snapshot is at %d, want 25 (the follower's own)", snapIdx)
	}
	checkEntries(t, got, 26, 30, tag("a"))
	if n := reads.count(snapPrefix); n != 0 {
		t.Fatalf("the restart read %d snapshot objects, want none", n)
	}
	// Chunks 26..31 (entries 25..30), where a read from the bucket
	// snapshot at 20 would start at 21.
	if n := reads.count(walPrefix); n != 6 {
		t.Fatalf("the restart read %d chunks, want the 6 after the checkpoint's (entries 25..30)", n)
	}
}

// A follower's tail past its local snapshot is still checked on restart:
// entries another Primary overwrote in the bucket are cut, whatever the
// advanced checkpoint.
func TestFollowerRestartCutsATailTheBucketContradicts(t *testing.T) {
	e := newEnv(t)
	a, b, dir := followed(t, e)
	// b takes 31..33 from a Primary that never committed them; the bucket
	// gets 31..35 from another.
	b.appendRange(31, 33, "x")
	if err := b.rec.wait(t, 33); err != nil {
		t.Fatal(err)
	}
	b.close()
	a.appendRange(31, 35, "a")
	if err := a.rec.wait(t, 35); err != nil {
		t.Fatal(err)
	}

	b2 := e.node(dir, ModeSync, func(o *Options) { o.Follower = true }).open()
	snapIdx, got := b2.replay()
	if snapIdx != 25 {
		t.Fatalf("after the restart the local snapshot is at %d, want 25", snapIdx)
	}
	checkEntries(t, got, 26, 35, tag("a"))
	if k := b2.l.KnownCommitted(); k != 35 {
		t.Fatalf("known committed %d after the restart, want the bucket's 35", k)
	}
}

// With no snapshot in the bucket yet (a young cluster), a follower's
// checkpoint still moves up to its local snapshot, found among the chunks.
func TestFollowerCheckpointMovesWithoutABucketSnapshot(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	b := e.node(dir, ModeSync, func(o *Options) { o.Follower = true }).open()
	a := e.node("", ModeSync, nil).open()
	for i := uint64(1); i <= 10; i++ {
		a.appendRange(i, i, "a")
		if err := a.rec.wait(t, i); err != nil {
			t.Fatal(err)
		}
	}
	b.appendRange(1, 10, "a")
	if err := b.rec.wait(t, 10); err != nil {
		t.Fatal(err)
	}
	if err := b.l.SaveSnapshot(snapshotAt(8)); err != nil {
		t.Fatal(err)
	}
	waitSnapIdx(t, b.l, 8)
	b.close()
	m, err := readMeta(dir + "/" + metaFileName)
	if err != nil {
		t.Fatal(err)
	}
	// Chunk 1 is a's claim, chunk i+1 holds entry i: chunk 10 starts
	// with 9, the first entry past the local snapshot.
	if m.Seq != 9 || m.Index != 8 {
		t.Fatalf("the follower's checkpoint is seq %d index %d; want seq 9 index 8", m.Seq, m.Index)
	}
	b2 := e.node(dir, ModeSync, func(o *Options) { o.Follower = true }).open()
	snapIdx, got := b2.replay()
	if snapIdx != 8 {
		t.Fatalf("after the restart the local snapshot is at %d, want 8", snapIdx)
	}
	checkEntries(t, got, 9, 10, tag("a"))
}

// A follower's checkpoint search reads each chunk once per process: what
// a search learns of where chunks start narrows the next ones, and a step
// reads only a chunk's first record. Before, every search (one per local
// snapshot) downloaded and decoded a chunk whole per step of its binary
// search (issue 22: 25 MB per 3 s on a replica under put-256).
func TestFollowerCheckpointSearchReadsEachChunkOnce(t *testing.T) {
	e := newEnv(t)
	reads := &readCounter{}
	b := e.node("", ModeSync, func(o *Options) {
		o.Follower = true
		reads.Store = o.Store
		o.Store = reads
	}).open()
	// Chunk 1 is a claim, chunk c > 1 holds entries 10(c-2)+1..10(c-1).
	const chunks = 40
	put := func(seq uint64, es []*netsyv1.Entry) {
		body, err := encodeEntries(nil, es)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.inner.PutIfAbsent(t.Context(), walKey(seq), body); err != nil {
			t.Fatal(err)
		}
	}
	put(1, nil)
	for c := uint64(2); c <= chunks; c++ {
		var es []*netsyv1.Entry
		for i := 10*(c-2) + 1; i <= 10*(c-1); i++ {
			es = append(es, entry(i, "a"))
		}
		put(c, es)
	}
	for idx := uint64(1); idx <= 10*(chunks-1); idx++ {
		seq, first, err := b.l.lastChunkStartingBy(0, idx)
		if err != nil {
			t.Fatal(err)
		}
		if want := 2 + (idx-1)/10; seq != want || first != 10*(want-2)+1 {
			t.Fatalf("search for %d found chunk %d starting at %d, want chunk %d starting at %d", idx, seq, first, want, 10*(want-2)+1)
		}
	}
	if n := reads.count(walPrefix); n > chunks {
		t.Fatalf("%d searches read %d chunks; want each of the %d read at most once", 10*(chunks-1), n, chunks)
	}
}

// A follower forgets the headers of bucket snapshots the writer's GC has
// deleted. It runs no GC itself, so before, every header it read while
// moving its checkpoint stayed cached for the life of the process.
func TestFollowerForgetsHeadersOfCollectedSnapshots(t *testing.T) {
	e := newEnv(t)
	b := e.node("", ModeSync, func(o *Options) { o.Follower = true }).open()
	a := e.node("", ModeSync, func(o *Options) { o.SnapshotKeep = 1 }).open()
	from := uint64(1)
	for _, to := range []uint64{20, 28} {
		for i := from; i <= to; i++ {
			b.follow(a.appendRange(i, i, "a"))
			if err := a.rec.wait(t, i); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.rec.wait(t, to); err != nil {
			t.Fatal(err)
		}
		if err := a.l.SaveSnapshot(snapshotAt(to)); err != nil {
			t.Fatal(err)
		}
		a.nextSnapshot() // and its GC, which keeps only the newest
		if err := b.l.SaveSnapshot(snapshotAt(to)); err != nil {
			t.Fatal(err)
		}
		waitSnapIdx(t, b.l, to)
		from = to + 1
	}
	b.close() // its maintenance goroutine, which owns snapHeads, is done
	if _, ok := b.l.snapHeads[snapKey(21)]; ok {
		t.Fatalf("the follower still caches the header of %s, which GC deleted", snapKey(21))
	}
	if _, ok := b.l.snapHeads[snapKey(29)]; !ok {
		t.Fatalf("the follower did not read the header of %s to move its checkpoint", snapKey(29))
	}
}

// A restart whose checkpoint's own chunk was garbage-collected catches up
// from the chunks after it, which hold every entry after the checkpoint,
// and keeps what it holds. A follower's checkpoint is often a bucket
// snapshot's wal_seq, and GC deletes exactly through the oldest kept
// snapshot's: before, the restart then installed the bucket's newest
// snapshot and DISCARDED every local entry after the checkpoint,
// including entries the bucket does not hold yet (in quorum mode the
// Primary acknowledges them on its replicas' fsync).
func TestRestartAfterTheCheckpointsChunkWasCollected(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	b := e.node(dir, ModeSync, func(o *Options) { o.Follower = true }).open()
	a := e.node("", ModeSync, func(o *Options) { o.SnapshotKeep = 2 }).open()
	from := uint64(1)
	for _, to := range []uint64{10, 20, 28, 30} {
		// One chunk per entry: chunk 1 is a's claim, chunk i+1 holds i.
		for i := from; i <= to; i++ {
			b.follow(a.appendRange(i, i, "a"))
			if err := a.rec.wait(t, i); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.rec.wait(t, to); err != nil {
			t.Fatal(err)
		}
		from = to + 1
		if to == 30 {
			break
		}
		if to == 28 {
			e.fake.Advance(2 * time.Hour) // every chunk is old enough to go
		}
		if err := a.l.SaveSnapshot(snapshotAt(to)); err != nil {
			t.Fatal(err)
		}
		a.nextSnapshot()
		if to == 20 {
			// b's checkpoint moves to the bucket snapshot: seq 21, index 20.
			if err := b.l.SaveSnapshot(snapshotAt(20)); err != nil {
				t.Fatal(err)
			}
			waitSnapIdx(t, b.l, 20)
		}
	}
	// GC kept the snapshots at 20 and 28 and deleted the chunks through
	// the older one's wal_seq: b's checkpoint's chunk, not the next.
	_, seqs := history(t, e.inner)
	if len(seqs) == 0 || seqs[0] != 22 {
		t.Fatalf("the bucket's chunks are %v, want them to start at 22", seqs)
	}
	// Entries the Primary committed on its replicas and had not uploaded.
	b.follow([]*netsyv1.Entry{entry(31, "a"), entry(32, "a"), entry(33, "a")})
	if err := b.rec.wait(t, 33); err != nil {
		t.Fatal(err)
	}
	b.close()
	if m, err := readMeta(dir + "/" + metaFileName); err != nil || m.Seq != 21 || m.Index != 20 {
		t.Fatalf("b's checkpoint is %+v (%v), want seq 21 index 20", m, err)
	}

	var logged syncbuf.Buffer
	b2 := e.node(dir, ModeSync, func(o *Options) {
		o.Follower = true
		o.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Info, Output: io.MultiWriter(testWriter{t}, &logged)})
	}).open()
	if out := logged.String(); strings.Contains(out, "DISCARDING") || strings.Contains(out, "garbage-collected") {
		t.Fatalf("the restart fell back to the bucket's snapshot:\n%s", out)
	}
	snapIdx, got := b2.replay()
	if snapIdx != 20 {
		t.Fatalf("after the restart the local snapshot is at %d, want b's own at 20", snapIdx)
	}
	checkEntries(t, got, 21, 33, tag("a"))
}
