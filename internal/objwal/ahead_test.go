package objwal

import (
	"testing"

	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

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
