package objwal

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/objstore"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// countingStore counts chunk downloads.
type countingStore struct {
	objstore.Store
	gets atomic.Int64
}

func (c *countingStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, key)
}

// stampedHistory writes entries 1..n, one a second from epoch (entry i is
// stamped epoch+(i-1) s and has revision i+1), each in its own chunk, with
// an empty claim chunk after entry claimAfter (a restart of the writer).
func stampedHistory(t *testing.T, e *env, n *node, last, claimAfter uint64) {
	t.Helper()
	for i := uint64(1); i <= last; i++ {
		n.appendRange(i, i, "a")
		if err := n.rec.wait(t, i); err != nil {
			t.Fatal(err)
		}
		if i == claimAfter {
			n.close()
			n.open()
		}
		e.fake.Advance(time.Second)
	}
}

func at(s time.Duration) time.Time { return epoch.Add(s) }

// RevisionAt answers the last revision committed at or before a time,
// exactly at a stamp, between stamps, after the newest and across an
// empty claim chunk; before the oldest it names the window. TimeOf is its
// inverse. The search downloads a few chunks, not all of them.
func TestRevisionAtAndTimeOfBoundaries(t *testing.T) {
	e := newEnv(t)
	n := e.node(t.TempDir(), ModeSync, nil).open()
	stampedHistory(t, e, n, 40, 20)
	cs := &countingStore{Store: e.inner}
	ctx := t.Context()

	for _, c := range []struct {
		t   time.Time
		rev int64
	}{
		{at(0), 2},               // the first entry's own stamp
		{at(4 * time.Second), 6}, // exactly entry 5's stamp
		{at(4*time.Second + 999*time.Millisecond), 6},   // just before entry 6's
		{at(19*time.Second + 500*time.Millisecond), 21}, // entry 20, before the claim chunk
		{at(20 * time.Second), 22},                      // entry 21, after it
		{at(time.Hour), 41},                             // after the newest: the newest
	} {
		before := cs.gets.Load()
		p, err := RevisionAt(ctx, cs, c.t)
		if err != nil {
			t.Fatalf("RevisionAt(%s): %v", c.t, err)
		}
		if p.Revision != c.rev || p.Index != uint64(c.rev-1) {
			t.Fatalf("RevisionAt(%s) = %s, want revision %d", c.t, p, c.rev)
		}
		if got := cs.gets.Load() - before; got > 16 {
			t.Fatalf("RevisionAt(%s) downloaded %d chunks of 42: not a binary search", c.t, got)
		}
		back, err := TimeOf(ctx, cs, p.Revision)
		if err != nil {
			t.Fatal(err)
		}
		if want := at(time.Duration(p.Index-1) * time.Second); !back.Time.Equal(want) || back.Index != p.Index {
			t.Fatalf("TimeOf(%d) = %s, want index %d at %s", p.Revision, back, p.Index, want)
		}
	}
	_, err := RevisionAt(ctx, cs, at(-time.Millisecond))
	var re *RangeError
	if !errors.Is(err, ErrNotRetained) || !errors.As(err, &re) || re.Oldest.Revision != 2 || re.Newest.Revision != 41 {
		t.Fatalf("RevisionAt before the first entry: %v, want a RangeError naming revisions 2 to 41", err)
	}
	if _, err := TimeOf(ctx, cs, 42); !errors.Is(err, ErrNotRetained) {
		t.Fatalf("TimeOf(42), past the newest: %v, want ErrNotRetained", err)
	}
	oldest, newest, err := Window(ctx, cs)
	if err != nil || oldest.Revision != 2 || !oldest.Time.Equal(epoch) || newest.Revision != 41 {
		t.Fatalf("Window = %s .. %s, %v; want revision 2 at %s .. 41", oldest, newest, err, epoch)
	}
}

// Once GC dropped the beginning, the window starts at the oldest snapshot:
// a time before it is refused, the snapshot's own revision maps to its
// time, and later times still resolve through the chunks after it.
func TestTimelineStartsAtOldestSnapshot(t *testing.T) {
	e := newEnv(t)
	n := e.node(t.TempDir(), ModeSync, func(o *Options) { o.SnapshotKeep = 1 }).open()
	stampedHistory(t, e, n, 10, 0)
	e.fake.Advance(2 * time.Hour)
	if err := n.l.SaveSnapshot(snapshotAt(10)); err != nil {
		t.Fatal(err)
	}
	n.nextSnapshot()
	n.appendRange(11, 11, "a")
	if err := n.rec.wait(t, 11); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	oldest, newest, err := Window(ctx, e.inner)
	if err != nil {
		t.Fatal(err)
	}
	if oldest.Revision != 11 || !oldest.Time.Equal(at(9*time.Second)) || newest.Revision != 12 {
		t.Fatalf("Window = %s .. %s, want the snapshot (revision 11 at %s) .. 12", oldest, newest, at(9*time.Second))
	}
	if _, err := RevisionAt(ctx, e.inner, at(8*time.Second)); !errors.Is(err, ErrNotRetained) {
		t.Fatalf("RevisionAt before the oldest snapshot: %v, want ErrNotRetained", err)
	}
	if p, err := RevisionAt(ctx, e.inner, at(time.Minute)); err != nil || p.Revision != 11 {
		t.Fatalf("RevisionAt between the snapshot and the next entry = %s, %v; want the snapshot's revision 11", p, err)
	}
	if p, err := TimeOf(ctx, e.inner, 11); err != nil || p != oldest {
		t.Fatalf("TimeOf(11) = %s, %v; want the snapshot's point %s", p, err, oldest)
	}
	if _, err := TimeOf(ctx, e.inner, 5); !errors.Is(err, ErrNotRetained) {
		t.Fatalf("TimeOf(5), collected: %v, want ErrNotRetained", err)
	}
}

// Entries written before stamps existed have an unknown time: they are
// never the answer to RevisionAt, and TimeOf reports a zero time for them.
func TestTimelineSkipsUnstampedEntries(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	put := func(seq uint64, from, to uint64, stamp func(i uint64) int64) {
		var ents []*netsyv1.Entry
		for i := from; i <= to; i++ {
			ent := entry(i, "a")
			ent.CommitTimeMs = stamp(i)
			ents = append(ents, ent)
		}
		body, err := encodeEntries(nil, ents)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.inner.PutIfAbsent(ctx, walKey(seq), body); err != nil {
			t.Fatal(err)
		}
	}
	put(1, 1, 3, func(uint64) int64 { return 0 })
	put(2, 4, 6, func(i uint64) int64 { return at(time.Duration(i) * time.Second).UnixMilli() })
	if p, err := RevisionAt(ctx, e.inner, at(5*time.Second)); err != nil || p.Index != 5 {
		t.Fatalf("RevisionAt(5 s) = %s, %v; want index 5", p, err)
	}
	if _, err := RevisionAt(ctx, e.inner, at(3*time.Second)); !errors.Is(err, ErrNotRetained) {
		t.Fatalf("RevisionAt before every known stamp: %v, want ErrNotRetained", err)
	}
	if p, err := TimeOf(ctx, e.inner, 3); err != nil || p.Index != 2 || !p.Time.IsZero() {
		t.Fatalf("TimeOf(3) = %s, %v; want index 2 at an unknown time", p, err)
	}
}
