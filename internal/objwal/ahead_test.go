package objwal

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/netsy-io/netsy/internal/testutil/syncbuf"

	"github.com/hashicorp/go-hclog"

	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// aheadOfBucket leaves in a directory the follower of quorum mode whose
// Primary acknowledged entries before uploading them: writer a uploaded
// 1..3, follower b took 4..8 from it (committed, not uploaded yet) and
// saved a local snapshot at 8, then closed. It returns a and b's
// directory.
func aheadOfBucket(t *testing.T, e *env) (a *node, dir string) {
	t.Helper()
	a = e.node("", ModeSync, nil).open()
	a.appendRange(1, 3, "a")
	if err := a.rec.wait(t, 3); err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	b := e.node(dir, ModeSync, func(o *Options) { o.Follower = true }).open()
	b.appendRange(4, 8, "a")
	if err := b.rec.wait(t, 8); err != nil {
		t.Fatal(err)
	}
	if err := b.l.SaveSnapshot(snapshotAt(8)); err != nil {
		t.Fatal(err)
	}
	waitSnapIdx(t, b.l, 8)
	b.close()
	return a, dir
}

// A follower's local snapshot deletes only the segments the bucket is
// known to hold too (its checkpoint), so the entries the snapshot covers
// beyond it stay in its log for a claim to upload. Before, the snapshot
// deleted every segment it covered: the log was empty.
func TestFollowerSnapshotKeepsEntriesTheBucketLacks(t *testing.T) {
	e := newEnv(t)
	a := e.node("", ModeSync, nil).open()
	a.appendRange(1, 200, "a")
	if err := a.rec.wait(t, 200); err != nil {
		t.Fatal(err)
	}
	b := e.node("", ModeSync, func(o *Options) { o.Follower = true }).open()
	b.appendRange(201, 400, "a") // committed by the Primary, not uploaded
	if err := b.rec.wait(t, 400); err != nil {
		t.Fatal(err)
	}
	if err := b.l.SaveSnapshot(snapshotAt(400)); err != nil {
		t.Fatal(err)
	}
	waitSnapIdx(t, b.l, 400)
	first := b.l.FirstIndex()
	if first == 0 || first > 201 {
		t.Fatalf("after the snapshot at 400 the follower's log starts at %d; want it to keep 201..400, which the bucket lacks", first)
	}
	// What the bucket holds goes with the snapshot, so restarts stay
	// short: 1..200 fill more than one 4 KiB segment.
	if first == 1 {
		t.Fatal("the snapshot deleted no segment; want those wholly at or below the bucket's 200 gone")
	}
	var got []uint64
	err := b.l.Replay(201, func(e *netsyv1.Entry) error {
		got = append(got, e.Index)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 200 || got[0] != 201 || got[len(got)-1] != 400 {
		t.Fatalf("the follower's log replays %d entries after 200, want 201..400", len(got))
	}
}

// A follower whose local snapshot runs ahead of the bucket restarts while
// chunks after its checkpoint end before the snapshot (case 1 of the
// bug): it opens, knows the bucket's true end, and follows on. Before, it
// refused to open: "the bucket's chunks end at index 6, before index 8
// which this node saw uploaded".
func TestFollowerRestartWithSnapshotAheadOfTheChunksOpens(t *testing.T) {
	e := newEnv(t)
	a, dir := aheadOfBucket(t, e)
	a.appendRange(4, 6, "a") // the Primary's upload catches up part way
	if err := a.rec.wait(t, 6); err != nil {
		t.Fatal(err)
	}
	var logged syncbuf.Buffer
	b := e.node(dir, ModeSync, func(o *Options) {
		o.Follower = true
		o.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: io.MultiWriter(testWriter{t}, &logged)})
	})
	l, err := b.tryOpen()
	if err != nil {
		t.Fatalf("the follower did not open: %v", err)
	}
	b.l = l
	if out := logged.String(); strings.Contains(out, "DISCARDING") {
		t.Fatalf("the restart discarded entries:\n%s", out)
	}
	if up := b.l.Stats().Uploaded; up != 6 {
		t.Fatalf("the follower takes the bucket to end at %d, want 6", up)
	}
	if k := b.l.KnownCommitted(); k != 8 {
		t.Fatalf("known committed %d, want the local snapshot's 8", k)
	}
	snapIdx, got := b.replay()
	if snapIdx != 8 || len(got) != 0 {
		t.Fatalf("after the restart: snapshot %d, %d entries after it; want the snapshot at 8", snapIdx, len(got))
	}
	b.appendRange(9, 9, "a")
	if err := b.rec.wait(t, 9); err != nil {
		t.Fatal(err)
	}
}

// A follower whose local snapshot runs ahead of the bucket, promoted
// after the old Primary died before uploading what it acknowledged (case
// 2), uploads those entries in its claim: the bucket's chunks stay dense
// and a node restored from the bucket alone replays every entry. Before,
// the claim took the bucket to end at the local snapshot (8) and uploaded
// from 9 on, leaving the bucket a hole at 4..8.
func TestPromotedFollowerUploadsWhatItsSnapshotRanAheadOf(t *testing.T) {
	e := newEnv(t)
	a, dir := aheadOfBucket(t, e)
	a.close()
	b := e.node(dir, ModeSync, func(o *Options) { o.Follower = true }).open()
	if err := b.l.Claim(t.Context()); err != nil {
		t.Fatal(err)
	}
	b.appendRange(9, 10, "b")
	if err := b.rec.wait(t, 10); err != nil {
		t.Fatal(err)
	}
	hist, _ := history(t, e.inner)
	if len(hist) != 10 {
		t.Fatalf("the bucket holds %d entries, want 1..10", len(hist))
	}
	c := e.node("", ModeSync, func(o *Options) { o.Follower = true }).open()
	snapIdx, got := c.replay()
	if snapIdx != 0 {
		t.Fatalf("the fresh node restored a snapshot at %d; the bucket has none", snapIdx)
	}
	checkEntries(t, got, 1, 10, func(i uint64) string {
		if i > 8 {
			return "b"
		}
		return "a"
	})
}

// A follower whose snapshot runs ahead of the bucket and whose log lacks
// the entries in between (written before its snapshots kept them, or a
// lost log) opens and follows, but refuses to claim: the claim could not
// upload them, and claiming past them would leave the bucket a hole.
// Once the bucket holds them, the claim goes through. Before, the claim
// went through at once and the bucket's next chunk started at 9.
func TestClaimRefusedWhileTheLogLacksWhatTheSnapshotRanAheadOf(t *testing.T) {
	e := newEnv(t)
	a, dir := aheadOfBucket(t, e)
	// Before its snapshots kept them, the snapshot deleted them itself.
	segs, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range segs {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	b := e.node(dir, ModeSync, func(o *Options) { o.Follower = true }).open()
	err = b.l.Claim(t.Context())
	if !errors.Is(err, ErrSnapshotAheadOfBucket) {
		t.Fatalf("claim: %v, want ErrSnapshotAheadOfBucket", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "4..8") {
		t.Fatalf("the refusal does not name the missing entries 4..8: %s", msg)
	}
	if b.l.IsWriter() {
		t.Fatal("the refused claim made the follower the writer")
	}
	// The old Primary was not fenced: it uploads what it acknowledged.
	a.appendRange(4, 8, "a")
	if err := a.rec.wait(t, 8); err != nil {
		t.Fatalf("the writer after the refused claim: %v", err)
	}
	a.close()
	if err := b.l.Claim(t.Context()); err != nil {
		t.Fatalf("claim once the bucket holds 4..8: %v", err)
	}
	b.appendRange(9, 9, "b")
	if err := b.rec.wait(t, 9); err != nil {
		t.Fatal(err)
	}
	if hist, _ := history(t, e.inner); len(hist) != 9 {
		t.Fatalf("the bucket holds %d entries, want 1..9", len(hist))
	}
}
