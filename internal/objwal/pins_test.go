package objwal

import (
	"slices"
	"testing"
	"time"
)

// A pin keeps its snapshot and chunks through GC, with retention 0 and
// with a tiny retention, and once it is deleted the next GC removes them.
func TestGCKeepsPinnedObjectsUntilThePinGoes(t *testing.T) {
	for _, retention := range []time.Duration{0, time.Millisecond} {
		t.Run(retention.String(), func(t *testing.T) {
			e := newEnv(t)
			n := e.node("", ModeSync, func(o *Options) { o.SnapshotKeep = 1; o.Retention = retention }).open()
			var idx uint64
			retentionRound(t, n, &idx)
			e.fake.Advance(2 * time.Hour)
			// Pin round 1's snapshot (revision 6) and the chunks round 2
			// writes after it, as a branch at a revision in round 2 does.
			first := n.l.Stats().Seq
			last := first + 3
			pin := Pin{ID: "b1", Child: "mem://child", Revision: 8, Snapshot: snapKey(6), FirstSeq: first, LastSeq: last}
			if _, err := e.inner.PutIfAbsent(t.Context(), PinKey(pin.ID), pin.Encode()); err != nil {
				t.Fatal(err)
			}
			retentionRound(t, n, &idx)
			if n.l.Stats().Seq <= last {
				t.Fatalf("round 2 wrote chunks up to %d, want past the pinned %d", n.l.Stats().Seq-1, last)
			}
			for range 3 {
				e.fake.Advance(2 * time.Hour)
				retentionRound(t, n, &idx)
			}
			if got := snapshotKeys(t, n); !slices.Contains(got, snapKey(6)) || slices.Contains(got, snapKey(11)) {
				t.Fatalf("snapshots %v, want the pinned %s kept and the unpinned %s deleted", got, snapKey(6), snapKey(11))
			}
			_, seqs := history(t, e.inner)
			for s := first; s <= last; s++ {
				if !slices.Contains(seqs, s) {
					t.Fatalf("pinned chunk %d deleted; chunks left %v", s, seqs)
				}
			}
			if err := e.inner.Delete(t.Context(), PinKey(pin.ID)); err != nil {
				t.Fatal(err)
			}
			e.fake.Advance(2 * time.Hour)
			retentionRound(t, n, &idx)
			if got := snapshotKeys(t, n); slices.Contains(got, snapKey(6)) {
				t.Fatalf("after the pin went: snapshots %v still hold %s", got, snapKey(6))
			}
			if _, seqs := history(t, e.inner); seqs[0] <= last {
				t.Fatalf("after the pin went: oldest chunk %d, want one after the pinned %d..%d", seqs[0], first, last)
			}
			n.close()
		})
	}
}

// An object under branches/ that is not a pin stops GC from deleting
// anything: it may be a newer format's pin.
func TestGCDeletesNothingPastAnUnreadablePin(t *testing.T) {
	e := newEnv(t)
	n := e.node("", ModeSync, func(o *Options) { o.SnapshotKeep = 1 }).open()
	var idx uint64
	if _, err := e.inner.PutIfAbsent(t.Context(), PinKey("b2"), []byte(`{"version":9}`)); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		retentionRound(t, n, &idx)
		e.fake.Advance(2 * time.Hour)
	}
	if got, want := snapshotKeys(t, n), []string{snapKey(6), snapKey(11), snapKey(16)}; !slices.Equal(got, want) {
		t.Fatalf("snapshots %v, want every one %v", got, want)
	}
	n.close()
}
