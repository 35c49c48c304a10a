package objwal

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/objstore/faulty"
	"github.com/netsy-io/netsy/internal/wal"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// The engine's storage contract, checked at compile time.
var _ engine.Storage = (*Log)(nil)

// In sync mode an entry fsync'd locally is not durable until its chunk is
// in the bucket.
func TestSyncDurableOnlyAfterUpload(t *testing.T) {
	e := newEnv(t)
	n := e.node("", ModeSync, nil).open()
	hold := n.store.Delay(faulty.PutIfAbsent, walPrefix, time.Second)
	n.appendRange(1, 1, "a")
	if err := n.l.wal.WaitSynced(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	e.blockUntil(2) // the held PUT: its attempt timeout and the injected delay
	if idx, err := n.rec.get(); idx != 0 || err != nil {
		t.Fatalf("reported %d, %v before the chunk was uploaded", idx, err)
	}
	if s := n.l.Stats(); s.Synced != 1 || s.Uploaded != 0 {
		t.Fatalf("stats %+v: want synced 1, uploaded 0", s)
	}
	hold.Stop()
	e.fake.Advance(time.Second)
	if err := n.rec.wait(t, 1); err != nil {
		t.Fatal(err)
	}
	got, _ := history(t, e.inner)
	checkEntries(t, []*netsyv1.Entry{got[1]}, 1, 1, tag("a"))
}

// Entries appended while a PUT is in flight all ride in the next PUT.
func TestGroupCommit(t *testing.T) {
	const total = 200
	for _, tc := range []struct {
		name     string
		maxBytes int
		wantPuts int // including the first, single-entry PUT
	}{
		{"all in one", 0, 2},
		{"capped", 1024, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			n := e.node("", ModeSync, func(o *Options) { o.ChunkMaxBytes = tc.maxBytes }).open()
			n.store.Inject(faulty.Rule{Ops: faulty.PutIfAbsent, KeyPrefix: walPrefix, Delay: time.Second, Count: 1})
			n.appendRange(1, 1, "a")
			e.blockUntil(2) // the first PUT is in flight and held
			n.appendRange(2, total, "a")
			if idx, _ := n.rec.get(); idx != 0 {
				t.Fatalf("reported %d while the first PUT was held", idx)
			}
			e.fake.Advance(time.Second)
			if err := n.rec.wait(t, total); err != nil {
				t.Fatal(err)
			}
			s := n.l.Stats()
			sizes := chunkSizes(t, e.inner)
			t.Logf("%d entries in %d PUTs: %.1f entries per PUT, largest %d; chunks %v", s.Entries, s.Puts,
				float64(s.Entries)/float64(s.Puts), s.MaxEntries, sizes)
			if s.Entries != total {
				t.Fatalf("uploaded %d entries, want %d", s.Entries, total)
			}
			if sizes[2] != 1 {
				t.Fatalf("first PUT carried %d entries, want 1", sizes[2])
			}
			if tc.maxBytes == 0 {
				if s.Puts != 2 || sizes[3] != total-1 {
					t.Fatalf("want every entry appended during the first PUT in the second: stats %+v, chunks %v", s, sizes)
				}
			} else {
				for seq, nEntries := range sizes {
					body, _, _ := e.inner.Get(t.Context(), walKey(seq))
					if nEntries > 1 && len(body) > tc.maxBytes+200 {
						t.Fatalf("chunk %d is %d bytes, cap %d", seq, len(body), tc.maxBytes)
					}
				}
				if s.Puts < 3 {
					t.Fatalf("a 1 KiB cap should split the backlog: %+v", s)
				}
			}
			got, _ := history(t, e.inner)
			if len(got) != total {
				t.Fatalf("bucket holds %d entries, want %d", len(got), total)
			}
		})
	}
}

// An outage holds back durability and, after a while, new writes; when
// the store returns, the backlog drains and nothing is lost.
func TestOutageThenRecovery(t *testing.T) {
	for _, mode := range []Mode{ModeSync, ModeAsync} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t)
			n := e.node("", mode, func(o *Options) { o.ChunkMaxBytes = 100 }).open()
			fail := n.store.Fail(faulty.PutIfAbsent, walPrefix)
			n.appendRange(1, 10, "a")
			if mode == ModeAsync {
				// Durable locally, so reported at once; the upload is due
				// by size (100 bytes), without waiting for its age.
				if err := n.rec.wait(t, 10); err != nil {
					t.Fatal(err)
				}
			}
			var elapsed time.Duration
			stopped := false
			for {
				p := n.nextPut()
				if p.err == nil {
					if !stopped {
						t.Fatalf("upload of %s succeeded during the outage", walKey(p.seq))
					}
					break
				}
				if !stopped && elapsed > stallBound+DefaultChunkMaxAge {
					if err := n.l.Backpressure(); err == nil || !strings.Contains(err.Error(), "unavailable") {
						t.Fatalf("Backpressure after %s of outage = %v", elapsed, err)
					}
					if idx, _ := n.rec.get(); mode == ModeSync && idx != 0 {
						t.Fatalf("reported %d durable during the outage", idx)
					}
					fail.Stop()
					stopped = true
				}
				e.blockUntil(1) // the backoff timer
				e.fake.Advance(maxBackoff)
				elapsed += maxBackoff
			}
			if err := n.rec.wait(t, 10); err != nil {
				t.Fatal(err)
			}
			// The rest of the backlog drains without further clock moves.
			for n.l.Stats().Uploaded < 10 {
				n.nextPut()
			}
			if err := n.l.Backpressure(); err != nil {
				t.Fatalf("Backpressure after recovery: %v", err)
			}
			got, _ := history(t, e.inner)
			if len(got) != 10 {
				t.Fatalf("bucket holds %d entries, want 10", len(got))
			}
			t.Logf("stats after recovery: %+v", n.l.Stats())
		})
	}
}

// A PUT that landed but whose answer was lost is recognised on retry.
func TestLostResponse(t *testing.T) {
	e := newEnv(t)
	n := e.node("", ModeSync, nil).open()
	n.store.Inject(faulty.Rule{Ops: faulty.PutIfAbsent, KeyPrefix: walPrefix, Err: faulty.ErrInjected, AfterCall: true, Count: 1})
	n.appendRange(1, 1, "a")
	if p := n.nextPut(); !errors.Is(p.err, faulty.ErrInjected) {
		t.Fatalf("first attempt: %v, want the injected lost response", p.err)
	}
	e.blockUntil(1)
	e.fake.Advance(minBackoff)
	if p := n.nextPut(); p.err != nil {
		t.Fatalf("retry: %v", p.err)
	}
	if err := n.rec.wait(t, 1); err != nil {
		t.Fatal(err)
	}
	got, seqs := history(t, e.inner)
	if len(seqs) != 2 || len(got) != 1 {
		t.Fatalf("bucket: chunks %v with %d entries, want the claim and one chunk with entry 1", seqs, len(got))
	}
	if s := n.l.Stats(); s.Retries != 1 || s.Puts != 1 {
		t.Fatalf("stats %+v: want 1 retry, 1 put", s)
	}
	n.appendRange(2, 2, "a")
	if err := n.rec.wait(t, 2); err != nil {
		t.Fatal(err)
	}
}

// A second writer claims the next seq; the first one's held upload
// collides, is fenced, and never reports its entries durable.
func TestFencing(t *testing.T) {
	e := newEnv(t)
	a := e.node("", ModeSync, nil).open()
	a.appendRange(1, 5, "a")
	if err := a.rec.wait(t, 5); err != nil {
		t.Fatal(err)
	}
	a.drainPuts()
	a.store.Inject(faulty.Rule{Ops: faulty.PutIfAbsent, KeyPrefix: walPrefix, Delay: time.Second, Count: 1})
	a.appendRange(6, 8, "a")
	e.blockUntil(2) // a's PUT of 6..8 is held

	b := e.node("", ModeSync, nil).open()
	_, got := b.replay()
	checkEntries(t, got, 1, 5, tag("a"))

	e.fake.Advance(time.Second)
	if p := a.nextPut(); !isFenced(p.err) {
		t.Fatalf("a's upload after b's claim: %v, want ErrFenced", p.err)
	}
	if err := a.rec.wait(t, 6); !isFenced(err) {
		t.Fatalf("a reported %v, want ErrFenced", err)
	}
	if idx, _ := a.rec.get(); idx != 5 {
		t.Fatalf("a reported %d durable, want 5", idx)
	}
	if err := a.l.Backpressure(); !isFenced(err) {
		t.Fatalf("a Backpressure = %v, want ErrFenced", err)
	}
	if err := a.l.Append(entry(9, "a")); !isFenced(err) {
		t.Fatalf("a Append after the fence = %v", err)
	}

	b.appendRange(6, 8, "b")
	if err := b.rec.wait(t, 8); err != nil {
		t.Fatal(err)
	}
	hist, _ := history(t, e.inner)
	for i := uint64(1); i <= 8; i++ {
		want := "a"
		if i > 5 {
			want = "b"
		}
		checkEntries(t, []*netsyv1.Entry{hist[i]}, i, i, tag(want))
	}
}

// Open that loses its claim catches up with the winner's chunk and claims
// the seq after it.
func TestOpenLosesClaimRace(t *testing.T) {
	e := newEnv(t)
	a := e.node("", ModeSync, nil).open()
	a.appendRange(1, 3, "a")
	if err := a.rec.wait(t, 3); err != nil {
		t.Fatal(err)
	}
	b := e.node("", ModeSync, nil)
	g := newGate(b.store, walPrefix)
	b.opts.Store = g
	opened := make(chan error, 1)
	go func() {
		l, err := b.tryOpen()
		b.l = l
		opened <- err
	}()
	next := a.l.Stats().Seq
	if key := <-g.entered; key != walKey(next) {
		t.Fatalf("b claims %s, want %s", key, walKey(next))
	}
	a.appendRange(4, 4, "a") // lands at that seq first
	if err := a.rec.wait(t, 4); err != nil {
		t.Fatal(err)
	}
	close(g.release)
	if err := <-opened; err != nil {
		t.Fatal(err)
	}
	_, got := b.replay()
	checkEntries(t, got, 1, 4, tag("a"))
	a.appendRange(5, 5, "a")
	if err := a.rec.wait(t, 5); !isFenced(err) {
		t.Fatalf("a after b's claim: %v, want ErrFenced", err)
	}
	history(t, e.inner)
}

// A node with an empty directory restores the newest snapshot and the
// chunks after it; reopening the directory then takes the quick path.
func TestRestoreOntoEmptyDir(t *testing.T) {
	e := newEnv(t)
	a := e.node("", ModeSync, nil).open()
	a.appendRange(1, 50, "a")
	if err := a.rec.wait(t, 50); err != nil {
		t.Fatal(err)
	}
	if err := a.l.SaveSnapshot(snapshotAt(30)); err != nil {
		t.Fatal(err)
	}
	if key := a.nextSnapshot(); key != snapKey(31) {
		t.Fatalf("uploaded %s, want %s", key, snapKey(31))
	}
	a.appendRange(51, 60, "a")
	if err := a.rec.wait(t, 60); err != nil {
		t.Fatal(err)
	}
	a.close()

	b := e.node("", ModeSync, nil).open()
	idx, got := b.replay()
	if idx != 30 {
		t.Fatalf("restored snapshot at index %d, want 30", idx)
	}
	checkEntries(t, got, 31, 60, tag("a"))
	b.close()
	lists := b.store.Calls(faulty.List)
	b.open()
	idx, got = b.replay()
	if idx != 30 {
		t.Fatalf("reopened snapshot at index %d, want 30", idx)
	}
	checkEntries(t, got, 31, 60, tag("a"))
	if n := b.store.Calls(faulty.List) - lists; n != 1 {
		t.Fatalf("reopen listed %d times, want once (from the checkpoint)", n)
	}
	b.appendRange(61, 61, "b")
	if err := b.rec.wait(t, 61); err != nil {
		t.Fatal(err)
	}
}

// A local tail that never reached the bucket, contradicted by another
// writer's chunks, is truncated and replaced on the next Open.
func TestConflictingLocalTailIsTruncated(t *testing.T) {
	e := newEnv(t)
	dirA := t.TempDir()
	e.leaveLocalTail(dirA, 3, 5)

	b := e.node("", ModeSync, nil).open()
	b.appendRange(4, 6, "b")
	if err := b.rec.wait(t, 6); err != nil {
		t.Fatal(err)
	}
	b.close()

	a2 := e.node(dirA, ModeSync, nil).open()
	_, got := a2.replay()
	checkEntries(t, got, 1, 6, func(i uint64) string {
		if i <= 3 {
			return "a"
		}
		return "b"
	})
	a2.appendRange(7, 7, "a")
	if err := a2.rec.wait(t, 7); err != nil {
		t.Fatal(err)
	}
	history(t, e.inner)
}

// An acknowledged-but-not-uploaded async tail that nobody contradicts is
// uploaded by the next Open's claim.
func TestAsyncTailUploadedOnReopen(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	a := e.node(dir, ModeAsync, nil).open()
	fail := a.store.Fail(faulty.PutIfAbsent, walPrefix)
	a.appendRange(1, 5, "a")
	if err := a.rec.wait(t, 5); err != nil {
		t.Fatal(err)
	}
	a.close()
	fail.Stop()
	if got, _ := history(t, e.inner); len(got) != 0 {
		t.Fatalf("bucket holds %d entries before the reopen", len(got))
	}
	a = e.node(dir, ModeAsync, nil).open()
	got, _ := history(t, e.inner)
	if len(got) != 5 {
		t.Fatalf("bucket holds %d entries after the reopen, want 5", len(got))
	}
}

// In async mode entries are durable once fsync'd and chunks are cut by age
// or size.
func TestAsyncChunksByAgeAndSize(t *testing.T) {
	e := newEnv(t)
	n := e.node("", ModeAsync, func(o *Options) { o.ChunkMaxBytes = 2000 }).open()
	n.appendRange(1, 10, "a")
	if err := n.rec.wait(t, 10); err != nil {
		t.Fatal(err)
	}
	if s := n.l.Stats(); s.Puts != 0 {
		t.Fatalf("uploaded before the chunk was due: %+v", s)
	}
	e.blockUntil(1) // the age timer
	e.fake.Advance(DefaultChunkMaxAge)
	if p := n.nextPut(); p.err != nil {
		t.Fatal(p.err)
	}
	if sizes := chunkSizes(t, e.inner); sizes[2] != 10 {
		t.Fatalf("chunks %v: want 10 entries in the aged chunk", sizes)
	}
	// About 40 bytes an entry: 2000 bytes are due at once.
	n.appendRange(11, 100, "a")
	if p := n.nextPut(); p.err != nil {
		t.Fatal(p.err)
	}
	if s := n.l.Stats(); s.Puts != 2 || s.Uploaded <= 10 {
		t.Fatalf("stats %+v: want a second chunk cut by size", s)
	}
	n.close()
	got, _ := history(t, e.inner)
	if len(got) != 100 {
		t.Fatalf("after Close the bucket holds %d entries, want 100", len(got))
	}
}

func TestBackpressureOnBacklog(t *testing.T) {
	e := newEnv(t)
	n := e.node("", ModeSync, func(o *Options) { o.MaxBacklogBytes = 1000 }).open()
	n.store.Delay(faulty.PutIfAbsent, walPrefix, time.Second)
	n.appendRange(1, 1, "a")
	e.blockUntil(2)
	for i := uint64(2); n.l.Backpressure() == nil; i++ {
		if i > 100 {
			t.Fatal("no backpressure with a held PUT and a growing backlog")
		}
		n.appendRange(i, i, "a")
	}
	if err := n.l.Backpressure(); !strings.Contains(err.Error(), "bytes wait for upload") {
		t.Fatalf("Backpressure = %v", err)
	}
}

// Damaged or missing objects stop a restore with an error naming them.
func TestCorruptBucketStopsRestore(t *testing.T) {
	setup := func(t *testing.T) *env {
		e := newEnv(t)
		a := e.node("", ModeSync, nil).open()
		for i := uint64(1); i <= 6; i++ {
			a.appendRange(i, i, "a")
			if err := a.rec.wait(t, i); err != nil {
				t.Fatal(err)
			}
		}
		a.close()
		if _, seqs := history(t, e.inner); len(seqs) != 7 {
			t.Fatalf("want 7 chunks, have %v", seqs)
		}
		return e
	}
	replace := func(t *testing.T, e *env, key string, body []byte) {
		_, etag, err := e.inner.Get(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.inner.PutIfMatch(t.Context(), key, body, etag); err != nil {
			t.Fatal(err)
		}
	}
	get := func(t *testing.T, e *env, key string) []byte {
		b, _, err := e.inner.Get(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name    string
		damage  func(t *testing.T, e *env)
		wantKey string
		want    string
	}{
		{"bit flip", func(t *testing.T, e *env) {
			b := get(t, e, walKey(4))
			b[len(b)/2] ^= 0x10
			replace(t, e, walKey(4), b)
		}, walKey(4), "corrupt"},
		{"truncated", func(t *testing.T, e *env) {
			b := get(t, e, walKey(5))
			replace(t, e, walKey(5), b[:len(b)-9])
		}, walKey(5), "corrupt"},
		{"wrong indices", func(t *testing.T, e *env) {
			replace(t, e, walKey(3), get(t, e, walKey(6)))
		}, walKey(3), "starts at index"},
		{"missing in the middle", func(t *testing.T, e *env) {
			if err := e.inner.Delete(t.Context(), walKey(4)); err != nil {
				t.Fatal(err)
			}
		}, walKey(4), "missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			tc.damage(t, e)
			_, err := e.node("", ModeSync, nil).tryOpen()
			if err == nil || !strings.Contains(err.Error(), tc.wantKey) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open = %v; want an error naming %s (%q)", err, tc.wantKey, tc.want)
			}
			t.Log(err)
		})
	}
}

// GC keeps SnapshotKeep snapshots and deletes only chunks older than
// MinWALAge that the oldest kept snapshot covers; a fresh node still
// restores the full state afterwards.
func TestGarbageCollection(t *testing.T) {
	e := newEnv(t)
	n := e.node("", ModeSync, func(o *Options) { o.SnapshotKeep = 2 }).open()
	var roundFirstSeq []uint64
	var idx uint64
	for round := 1; round <= 4; round++ {
		roundFirstSeq = append(roundFirstSeq, n.l.Stats().Seq)
		for range 5 {
			idx++
			n.appendRange(idx, idx, "a")
			if err := n.rec.wait(t, idx); err != nil {
				t.Fatal(err)
			}
		}
		if err := n.l.SaveSnapshot(snapshotAt(idx)); err != nil {
			t.Fatal(err)
		}
		n.nextSnapshot()
		e.fake.Advance(40 * time.Minute)
	}
	snaps, err := e.inner.List(t.Context(), snapPrefix, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) != 2 || snaps[0].Key != snapKey(16) || snaps[1].Key != snapKey(21) {
		t.Fatalf("snapshots %v: want the newest two", snaps)
	}
	// After round 4 (at 2h) the oldest kept snapshot covers round 3's
	// chunks, which are only 40 min old: round 2's (80 min) are the last
	// to go.
	_, seqs := history(t, e.inner)
	if seqs[0] != roundFirstSeq[2] {
		t.Fatalf("oldest chunk left is %d, want %d (round 3's first); round firsts %v", seqs[0], roundFirstSeq[2], roundFirstSeq)
	}
	n.close()

	fresh := e.node("", ModeSync, nil).open()
	snapIdx, got := fresh.replay()
	if snapIdx != 20 || len(got) != 0 {
		t.Fatalf("restore: snapshot %d and %d entries, want snapshot 20 and none", snapIdx, len(got))
	}
}

// GC never deletes the newest chunk, even when a snapshot covers it and it
// is old: a restarting node must find the highest seq by listing.
func TestGarbageCollectionKeepsNewestChunk(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	n := e.node(dir, ModeSync, func(o *Options) { o.SnapshotKeep = 1 }).open()
	n.appendRange(1, 3, "a")
	if err := n.rec.wait(t, 3); err != nil {
		t.Fatal(err)
	}
	e.fake.Advance(2 * time.Hour)
	if err := n.l.SaveSnapshot(snapshotAt(3)); err != nil {
		t.Fatal(err)
	}
	n.nextSnapshot()
	_, seqs := history(t, e.inner)
	newest := n.l.Stats().Seq - 1
	if len(seqs) != 1 || seqs[0] != newest {
		t.Fatalf("chunks left %v, want only the newest %d", seqs, newest)
	}
	n.close()
	n.open()
	if got := n.l.Stats().Seq; got != newest+2 {
		t.Fatalf("reopen claimed seq %d, want %d", got-1, newest+1)
	}
	fresh := e.node("", ModeSync, nil).open()
	if idx, got := fresh.replay(); idx != 3 || len(got) != 0 {
		t.Fatalf("fresh restore: snapshot %d + %d entries", idx, len(got))
	}
}

// A node that ran with only a local log seeds an empty bucket; a local
// log without a checkpoint never merges into a bucket with a history.
func TestSeedAndRefuseMerge(t *testing.T) {
	e := newEnv(t)
	// A wal_seq left from an earlier life with another bucket (its
	// objwal.json is gone) must not reach the new bucket, where it would
	// point past the seeded chunks.
	dir := localOnlyLog(t, 4)
	other := t.TempDir()
	ow, err := wal.Open(wal.Options{Dir: other})
	if err != nil {
		t.Fatal(err)
	}
	if err := ow.Append(entry(1, "x")); err != nil {
		t.Fatal(err)
	}
	if err := ow.Close(); err != nil {
		t.Fatal(err)
	}

	n := e.node(dir, ModeSync, nil).open()
	n.close()
	fresh := e.node("", ModeSync, nil).open()
	idx, got := fresh.replay()
	if idx != 6 {
		t.Fatalf("restored snapshot %d, want the seeded 6", idx)
	}
	checkEntries(t, got, 7, 10, tag("a"))

	if _, err := e.node(other, ModeSync, nil).tryOpen(); err == nil || !strings.Contains(err.Error(), "refusing to merge") {
		t.Fatalf("Open of a foreign local log against a used bucket = %v", err)
	}
}

// A node that was away while the writer after it snapshotted and
// garbage-collected the chunks after its checkpoint restarts from the
// newest snapshot, dropping its own never-uploaded tail.
func TestDeposedNodeCatchesUpAfterGC(t *testing.T) {
	e := newEnv(t)
	dirA := t.TempDir()
	e.leaveLocalTail(dirA, 3, 6)

	b := e.node("", ModeSync, func(o *Options) { o.SnapshotKeep = 1 }).open()
	b.appendRange(4, 10, "b")
	if err := b.rec.wait(t, 10); err != nil {
		t.Fatal(err)
	}
	e.fake.Advance(2 * time.Hour)
	b.appendRange(11, 12, "b")
	if err := b.rec.wait(t, 12); err != nil {
		t.Fatal(err)
	}
	if err := b.l.SaveSnapshot(snapshotAt(11)); err != nil {
		t.Fatal(err)
	}
	b.nextSnapshot()
	if _, _, err := e.inner.Get(t.Context(), walKey(2)); err == nil {
		t.Fatal("a's last chunk survived garbage collection; the test needs it gone")
	}
	b.appendRange(13, 14, "b")
	if err := b.rec.wait(t, 14); err != nil {
		t.Fatal(err)
	}

	a2 := e.node(dirA, ModeSync, nil).open()
	idx, got := a2.replay()
	if idx != 11 {
		t.Fatalf("a restarted from snapshot %d, want b's 11", idx)
	}
	checkEntries(t, got, 12, 14, tag("b"))
	if err := b.l.Backpressure(); err != nil {
		t.Fatalf("b before its next upload: %v", err)
	}
	b.appendRange(15, 15, "b")
	if err := b.rec.wait(t, 15); !isFenced(err) {
		t.Fatalf("b after a's claim: %v, want ErrFenced", err)
	}
}

// A second snapshot at a revision that already has one (lease entries do
// not move the revision) is kept locally but not uploaded over the first.
func TestSnapshotAtTakenRevisionIsSkipped(t *testing.T) {
	e := newEnv(t)
	n := e.node("", ModeSync, nil).open()
	n.appendRange(1, 12, "a")
	if err := n.rec.wait(t, 12); err != nil {
		t.Fatal(err)
	}
	if err := n.l.SaveSnapshot(snapshotAt(10)); err != nil {
		t.Fatal(err)
	}
	n.nextSnapshot()
	second := snapshotAt(11)
	second.Header.Revision = 11 // same revision as index 10's
	if err := n.l.SaveSnapshot(second); err != nil {
		t.Fatal(err)
	}
	if key := n.nextSnapshot(); key != snapKey(11) {
		t.Fatalf("snapshot key %s", key)
	}
	h, err := n.l.readSnapshotHeader(snapKey(11), 0)
	if err != nil {
		t.Fatal(err)
	}
	if h.Index != 10 {
		t.Fatalf("bucket snapshot at revision 11 has index %d, want the first one (10)", h.Index)
	}
	local, err := n.l.wal.LoadSnapshot()
	if err != nil || local.Header.Index != 11 {
		t.Fatalf("local snapshot %v, %v: want index 11", local, err)
	}
}

// A restore interrupted after the snapshot was saved locally but before
// the checkpoint moved is redone on the next Open.
func TestInterruptedRestoreIsRedone(t *testing.T) {
	e := newEnv(t)
	a := e.node("", ModeSync, nil).open()
	a.appendRange(1, 20, "a")
	if err := a.rec.wait(t, 20); err != nil {
		t.Fatal(err)
	}
	if err := a.l.SaveSnapshot(snapshotAt(15)); err != nil {
		t.Fatal(err)
	}
	a.nextSnapshot()
	a.close()

	dir := t.TempDir()
	b := e.node(dir, ModeSync, nil).open()
	b.close()
	// Rewind the checkpoint to what a crash right after saving the
	// snapshot would have left.
	if err := writeMeta(filepath.Join(dir, metaFileName), &metaState{}); err != nil {
		t.Fatal(err)
	}
	b.open()
	idx, got := b.replay()
	if idx != 15 {
		t.Fatalf("snapshot %d, want 15", idx)
	}
	checkEntries(t, got, 16, 20, tag("a"))
}

// Transient failures during Open are retried; a bucket that stays down
// fails Open with the error instead of hanging it.
func TestOpenRetriesThenFails(t *testing.T) {
	e := newEnv(t)
	n := e.node("", ModeSync, nil)
	n.spin = true
	f := n.store.Inject(faulty.Rule{Ops: faulty.List, Err: faulty.ErrInjected, Count: 2})
	n.open() // two failed Lists, then success
	if f.Fired() != 2 {
		t.Fatalf("fault fired %d times", f.Fired())
	}
	n.close()
	n.store.Fail(faulty.List, "")
	_, err := n.tryOpen()
	if !errors.Is(err, faulty.ErrInjected) || !strings.Contains(err.Error(), "giving up") {
		t.Fatalf("Open against a dead bucket = %v", err)
	}
}

// A wall clock stepped forward makes every chunk look old by the bucket's
// LastModified; GC still keeps a chunk this node uploaded less than
// MinWALAge ago by its monotonic clock, so a deposed writer's delayed PUT
// of that seq still collides.
func TestGarbageCollectionIgnoresWallClockSteps(t *testing.T) {
	e := newEnv(t)
	n := e.node(t.TempDir(), ModeSync, func(o *Options) { o.SnapshotKeep = 1 }).open()
	n.appendRange(1, 3, "a")
	if err := n.rec.wait(t, 3); err != nil {
		t.Fatal(err)
	}
	_, before := history(t, e.inner)
	e.fake.StepWall(2 * DefaultMinWALAge)
	e.fake.Advance(time.Minute)
	if err := n.l.SaveSnapshot(snapshotAt(3)); err != nil {
		t.Fatal(err)
	}
	n.nextSnapshot()
	if _, after := history(t, e.inner); !slices.Equal(before, after) {
		t.Fatalf("chunks %v before a 2 h wall step, %v after GC: a chunk a minute old was deleted", before, after)
	}
	// Once MinWALAge has really passed, the same chunks go.
	e.fake.Advance(DefaultMinWALAge)
	if err := n.l.SaveSnapshot(snapshotAt(3)); err != nil {
		t.Fatal(err)
	}
	n.nextSnapshot()
	if _, after := history(t, e.inner); len(after) != 1 {
		t.Fatalf("chunks left %v after MinWALAge, want only the newest", after)
	}
	n.close()
}
