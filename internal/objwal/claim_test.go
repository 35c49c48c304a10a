package objwal

import (
	"errors"
	"io/fs"
	"os"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/objstore/faulty"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// A new writer's claim is an empty chunk, and the entries it kept from its
// local log (replicated from the old writer) go in the chunks after it.
// Uploaded in the claim itself they could be, byte for byte, the chunk the
// old writer is retrying at that seq: the old writer read it back, took it
// for its own earlier attempt, and went on writing and acknowledging at
// the next seq while the new writer acknowledged on its replicas' receipts
// (clustersim seed 72: two Primaries acknowledged revision 22).
func TestClaimNeverMatchesTheOldWritersChunk(t *testing.T) {
	e := newEnv(t)
	dirA := t.TempDir()
	a := e.node(dirA, ModeSync, nil).open()
	a.appendRange(1, 5, "a")
	if err := a.rec.wait(t, 5); err != nil {
		t.Fatal(err)
	}
	a.drainPuts()
	// a's next PUT (entries 6..8) is held; they are fsync'd locally.
	a.store.Inject(faulty.Rule{Ops: faulty.PutIfAbsent, KeyPrefix: walPrefix, Delay: time.Second, Count: 1})
	a.appendRange(6, 8, "a")
	if err := a.l.wal.WaitSynced(t.Context(), 8); err != nil {
		t.Fatal(err)
	}
	e.blockUntil(2)

	// b holds the same entries locally, as a replica of a would.
	dirB := copyLiveDir(t, dirA)
	b := e.node(dirB, ModeSync, nil).open()

	e.fake.Advance(time.Second)
	if p := a.nextPut(); !isFenced(p.err) {
		t.Fatalf("a's held upload after b's claim: %v, want ErrFenced (it took b's chunk for its own)", p.err)
	}
	if err := a.rec.wait(t, 6); !isFenced(err) {
		t.Fatalf("a reported %v, want ErrFenced", err)
	}
	b.appendRange(9, 9, "b")
	if err := b.rec.wait(t, 9); err != nil {
		t.Fatal(err)
	}
	hist, _ := history(t, e.inner)
	checkEntries(t, []*netsyv1.Entry{hist[8]}, 8, 8, tag("a"))
	checkEntries(t, []*netsyv1.Entry{hist[9]}, 9, 9, tag("b"))
}

// copyLiveDir copies dir, which a running node writes, into a new
// directory. A file that vanishes under the walk (objwal.json.tmp between
// its write and its rename) makes the copy start again.
func copyLiveDir(t *testing.T, dir string) string {
	t.Helper()
	for {
		dst := t.TempDir()
		err := os.CopyFS(dst, os.DirFS(dir))
		if err == nil {
			return dst
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatal(err)
		}
	}
}
