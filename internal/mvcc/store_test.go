package mvcc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"weak"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.uber.org/goleak"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func evStr(ev *mvccpb.Event) string {
	if ev == nil {
		return "<nil>"
	}
	s := fmt.Sprintf("%s %s", ev.Type, kvStr(ev.Kv))
	if ev.PrevKv != nil {
		s += " prev " + kvStr(ev.PrevKv)
	}
	return s
}

func evStrs(evs []*mvccpb.Event) []string {
	out := []string{}
	for _, ev := range evs {
		out = append(out, evStr(ev))
	}
	return out
}

func TestPutDeleteEvents(t *testing.T) {
	s := New()
	if s.Rev() != 0 || s.CompactRev() != 0 {
		t.Fatal("new store not at 0")
	}
	steps := []struct {
		rev  int64
		op   op
		want string
	}{
		{1, put("a", "1"), "PUT a=1/1/1/1"},
		{1, put("b", "2"), "PUT b=2/1/1/1"},
		{2, op{key: "a", val: "3", lease: 9}, "PUT a=3/1/2/2+9 prev a=1/1/1/1"},
		{3, del("a"), "DELETE a=/0/3/0 prev a=3/1/2/2+9"},
		{3, del("a"), "<nil>"},
		{3, del("zz"), "<nil>"},
		{4, put("a", "4"), "PUT a=4/4/4/1"},
		{4, del("b"), "DELETE b=/0/4/0 prev b=2/1/1/1"},
	}
	for _, st := range steps {
		var ev *mvccpb.Event
		if st.op.del {
			ev = s.Delete(st.rev, []byte(st.op.key))
		} else {
			ev = s.Put(st.rev, []byte(st.op.key), []byte(st.op.val), st.op.lease)
		}
		if got := evStr(ev); got != st.want {
			t.Fatalf("rev %d %v: %s, want %s", st.rev, st.op, got, st.want)
		}
	}
	if s.Rev() != 4 {
		t.Fatalf("rev %d", s.Rev())
	}
	st := s.Stats()
	if st.Keys != 1 || st.Versions != 6 || st.Bytes != 2+4 {
		t.Fatalf("stats %+v", st)
	}
}

func TestWriteRevisionChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		fn   func(s *Store)
	}{
		{"put at 0 on empty", func(s *Store) { s.Put(0, []byte("a"), nil, 0) }},
		{"put skipping", func(s *Store) { s.Put(2, []byte("a"), nil, 0) }},
		{"put in the past", func(s *Store) { apply(t, s, []op{put("a", "1")}, []op{put("a", "2")}); s.Put(1, []byte("a"), nil, 0) }},
		{"delete skipping", func(s *Store) { apply(t, s, []op{put("a", "1")}); s.Delete(3, []byte("a")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic")
				}
			}()
			tc.fn(New())
		})
	}
}

// eventHistory has multi-op revisions: 1: a b c, 2: a, 3: del b, put d,
// 4: e, 5: del a del c del d, 6: a.
func eventHistory(t testing.TB) *Store {
	s := New()
	apply(t, s,
		[]op{put("a", "1"), put("b", "1"), put("c", "1")},
		[]op{put("a", "2")},
		[]op{del("b"), put("d", "1")},
		[]op{put("e", "1")},
		[]op{del("a"), del("c"), del("d")},
		[]op{put("a", "3")},
	)
	return s
}

var eventHistoryStrs = [][]string{
	1: {"PUT a=1/1/1/1", "PUT b=1/1/1/1", "PUT c=1/1/1/1"},
	2: {"PUT a=2/1/2/2 prev a=1/1/1/1"},
	3: {"DELETE b=/0/3/0 prev b=1/1/1/1", "PUT d=1/3/3/1"},
	4: {"PUT e=1/4/4/1"},
	5: {"DELETE a=/0/5/0 prev a=2/1/2/2", "DELETE c=/0/5/0 prev c=1/1/1/1", "DELETE d=/0/5/0 prev d=1/3/3/1"},
	6: {"PUT a=3/6/6/1"},
}

func wantEvents(from, to int64) []string {
	return wantEventsAbove(from, to, 0)
}

// wantEventsAbove is wantEvents after compaction at floor: previous
// versions below the floor are no longer reported.
func wantEventsAbove(from, to, floor int64) []string {
	out := []string{}
	for r := from; r <= to; r++ {
		for _, e := range eventHistoryStrs[r] {
			if i := strings.Index(e, " prev "); i >= 0 && prevModRev(e[i+6:]) < floor {
				e = e[:i]
			}
			out = append(out, e)
		}
	}
	return out
}

// prevModRev reads the mod revision out of a kvStr ("k=v/create/mod/ver").
func prevModRev(kv string) int64 {
	parts := strings.Split(kv, "/")
	n, _ := strconv.ParseInt(parts[2], 10, 64)
	return n
}

func TestEvents(t *testing.T) {
	s := eventHistory(t)
	tests := []struct {
		from, to int64
		limit    int
		wantTo   int64 // last revision returned
		next     int64
	}{
		{from: 1, to: 6, wantTo: 6, next: 7},
		{from: 0, to: 6, wantTo: 6, next: 7},
		{from: 1, to: 100, wantTo: 6, next: 7},
		{from: 2, to: 4, wantTo: 4, next: 5},
		{from: 5, to: 5, wantTo: 5, next: 6},
		{from: 7, to: 10, wantTo: 6, next: 7},
		{from: 4, to: 3, wantTo: 3, next: 4},
		// Limits cut after the revision that reaches them, never inside one.
		{from: 1, to: 6, limit: 1, wantTo: 1, next: 2},
		{from: 1, to: 6, limit: 3, wantTo: 1, next: 2},
		{from: 1, to: 6, limit: 4, wantTo: 2, next: 3},
		{from: 3, to: 6, limit: 3, wantTo: 4, next: 5},
		{from: 5, to: 6, limit: 1, wantTo: 5, next: 6},
		{from: 5, to: 6, limit: 4, wantTo: 6, next: 7},
		{from: 1, to: 6, limit: -1, wantTo: 6, next: 7},
	}
	for _, tc := range tests {
		evs, next, err := s.Events(tc.from, tc.to, tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		want := wantEvents(max(tc.from, 1), tc.wantTo)
		if got := evStrs(evs); !slices.Equal(got, want) || next != tc.next {
			t.Errorf("Events(%d, %d, %d) = %q next %d, want %q next %d", tc.from, tc.to, tc.limit, got, next, want, tc.next)
		}
	}
}

func TestCompact(t *testing.T) {
	s := eventHistory(t)
	if err := s.Compact(7); !errors.Is(err, ErrFutureRev) {
		t.Fatalf("compact 7: %v", err)
	}
	before := s.Stats()
	hash5, _, err := s.HashKV(6)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(3); err != nil {
		t.Fatal(err)
	}
	if err := s.Compact(3); !errors.Is(err, ErrCompacted) {
		t.Fatalf("compact again: %v", err)
	}
	if err := s.Compact(2); !errors.Is(err, ErrCompacted) {
		t.Fatalf("compact below floor: %v", err)
	}
	if s.CompactRev() != 3 {
		t.Fatalf("floor %d", s.CompactRev())
	}
	after := s.Stats()
	// Dropped: a@1 (superseded at 2, below 3). b@1 stays as the version
	// revision 3's DELETE replaced.
	if after.Versions != before.Versions-1 || after.Keys != before.Keys || after.Bytes != before.Bytes-1 {
		t.Fatalf("stats %+v -> %+v", before, after)
	}
	if _, _, err := s.Events(2, 6, 0); !errors.Is(err, ErrCompacted) {
		t.Fatalf("events below floor: %v", err)
	}
	evs, next, err := s.Events(3, 6, 0)
	if err != nil || next != 7 || !slices.Equal(evStrs(evs), wantEventsAbove(3, 6, 3)) {
		t.Fatalf("events from floor: %q %d %v", evStrs(evs), next, err)
	}
	if _, _, err := s.HashKV(2); !errors.Is(err, ErrCompacted) {
		t.Fatalf("hash below floor: %v", err)
	}

	if err := s.Compact(6); err != nil {
		t.Fatal(err)
	}
	// Left: a@6 (a was dead before it, so nothing older) and e@4.
	res, err := s.Range(nil, []byte{0}, RangeOptions{Rev: 6})
	if err != nil || !slices.Equal(kvStrs(res.KVs), []string{"a=3/6/6/1", "e=1/4/4/1"}) {
		t.Fatalf("range at floor: %q %v", kvStrs(res.KVs), err)
	}
	if st := s.Stats(); st.Versions != 2 || st.Keys != 2 || st.Bytes != 4 {
		t.Fatalf("stats after compacting everything: %+v", st)
	}
	if s.idx.n != 2 {
		t.Fatalf("index holds %d keys", s.idx.n)
	}
	evs, _, _ = s.Events(6, 6, 0)
	if !slices.Equal(evStrs(evs), wantEventsAbove(6, 6, 6)) {
		t.Fatalf("events at floor: %q", evStrs(evs))
	}
	h6, floor, err := s.HashKV(0)
	if err != nil || floor != 6 || h6 == hash5 {
		t.Fatalf("hash %x floor %d err %v", h6, floor, err)
	}
}

// Revision 5 deletes three keys; compacting at 5 must keep those
// tombstones so watches from 5 see them; their previous values are below
// the floor and, as with etcd, no longer reported.
func TestCompactKeepsFloorEvents(t *testing.T) {
	s := eventHistory(t)
	if err := s.Compact(5); err != nil {
		t.Fatal(err)
	}
	evs, _, err := s.Events(5, 6, 0)
	if err != nil || !slices.Equal(evStrs(evs), wantEventsAbove(5, 6, 5)) {
		t.Fatalf("events: %q %v", evStrs(evs), err)
	}
	res, _ := s.Range(nil, []byte{0}, RangeOptions{Rev: 5})
	if !slices.Equal(kvStrs(res.KVs), []string{"e=1/4/4/1"}) {
		t.Fatalf("range at 5: %q", kvStrs(res.KVs))
	}
	// The store survives a snapshot with the same floor events.
	r := restore(t, s)
	evs, _, _ = r.Events(5, 6, 0)
	if !slices.Equal(evStrs(evs), wantEventsAbove(5, 6, 5)) {
		t.Fatalf("restored events: %q", evStrs(evs))
	}
	// The next compaction drops the dead keys for good; e@4 stays as the
	// value revision 7 replaced.
	apply(t, s, []op{put("e", "2")})
	if err := s.Compact(7); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Versions != 3 || st.Keys != 2 || s.idx.n != 2 {
		t.Fatalf("stats %+v, %d index keys", st, s.idx.n)
	}
}

// Compaction frees memory under steady updates: versions stay bounded by the
// keys plus the writes since the floor.
func TestCompactBoundsMemory(t *testing.T) {
	s := New()
	val := make([]byte, 100)
	for round := range 20 {
		for i := range 500 {
			rev := s.Rev() + 1
			k := fmt.Appendf(nil, "k%03d", i%200)
			if i%7 == 0 {
				if s.Delete(rev, k) != nil {
					continue
				}
			}
			s.Put(rev, k, val, 0)
		}
		if err := s.Compact(s.Rev()); err != nil {
			t.Fatal(err)
		}
		st := s.Stats()
		if st.Versions > 200 || st.Keys > 200 || len(s.log) > 5 {
			t.Fatalf("round %d: %+v, log %d", round, st, len(s.log))
		}
	}
}

func TestRollback(t *testing.T) {
	s := eventHistory(t)
	ref := eventHistory(t)
	want, _ := ref.Range(nil, []byte{0}, RangeOptions{Rev: 4})
	wantHash, _, _ := ref.HashKV(4)
	s.Rollback(7) // above Rev: nothing to do
	if s.Rev() != 6 {
		t.Fatalf("rev %d", s.Rev())
	}
	s.Rollback(4)
	if s.Rev() != 4 {
		t.Fatalf("rev %d", s.Rev())
	}
	if _, err := s.Range([]byte("a"), nil, RangeOptions{Rev: 5}); !errors.Is(err, ErrFutureRev) {
		t.Fatalf("read above rollback: %v", err)
	}
	got, _ := s.Range(nil, []byte{0}, RangeOptions{Rev: 4})
	if !slices.Equal(kvStrs(got.KVs), kvStrs(want.KVs)) || got.Count != want.Count {
		t.Fatalf("after rollback %q, want %q", kvStrs(got.KVs), kvStrs(want.KVs))
	}
	if h, _, _ := s.HashKV(0); h != wantHash {
		t.Fatal("hash differs after rollback")
	}
	evs, next, _ := s.Events(1, 10, 0)
	if !slices.Equal(evStrs(evs), wantEvents(1, 4)) || next != 5 {
		t.Fatalf("events after rollback: %q %d", evStrs(evs), next)
	}
	if st := s.Stats(); st.Keys != 4 || st.Versions != 7 {
		t.Fatalf("stats %+v", st)
	}
	// Writing again reuses the revisions: a fresh key, a recreated one.
	apply(t, s, []op{put("x", "1"), put("b", "2")})
	ev := s.Put(5, []byte("a"), []byte("9"), 0)
	if evStr(ev) != "PUT a=9/1/5/3 prev a=2/1/2/2" {
		t.Fatalf("put after rollback: %s", evStr(ev))
	}
	// Rollback inside a revision's ops (an aborted txn) restores the one
	// before it.
	s.Rollback(4)
	if res, _ := s.Range([]byte("x"), nil, RangeOptions{Rev: 4}); res.Count != 0 {
		t.Fatal("x survived rollback")
	}
	if s.idx.get([]byte("x")) != nil {
		t.Fatal("x still indexed")
	}
	if err := s.Compact(3); err != nil {
		t.Fatal(err)
	}
	s.Rollback(3)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("rollback below floor did not panic")
			}
		}()
		s.Rollback(2)
	}()
}

func snapshotOf(t testing.TB, s *Store) []*netsyv1.KeyVersion {
	t.Helper()
	var out []*netsyv1.KeyVersion
	if err := s.Snapshot(func(kv *netsyv1.KeyVersion) error {
		out = append(out, kv)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func restore(t testing.TB, s *Store) *Store {
	t.Helper()
	r := like(t, s)
	if err := r.Restore(s.Rev(), s.CompactRev(), snapshotOf(t, s)); err != nil {
		t.Fatal(err)
	}
	return r
}

// sameStore checks that two stores answer every read alike (and hold the
// same amount when stats is set).
func sameStore(t testing.TB, stats bool, a, b *Store) {
	t.Helper()
	if a.Rev() != b.Rev() || a.CompactRev() != b.CompactRev() {
		t.Fatalf("rev %d/%d floor %d/%d", a.Rev(), b.Rev(), a.CompactRev(), b.CompactRev())
	}
	// Spill garbage depends on the path that built a store.
	if sa, sb := a.Stats(), b.Stats(); stats && (sa.Keys != sb.Keys || sa.Versions != sb.Versions || sa.Bytes != sb.Bytes) {
		t.Fatalf("stats %+v vs %+v", sa, sb)
	}
	for rev := a.CompactRev(); rev <= a.Rev(); rev++ {
		ra, ea := a.Range(nil, []byte{0}, RangeOptions{Rev: rev})
		rb, eb := b.Range(nil, []byte{0}, RangeOptions{Rev: rev})
		if !errors.Is(ea, eb) || !slices.Equal(kvStrs(ra.KVs), kvStrs(rb.KVs)) || ra.Count != rb.Count {
			t.Fatalf("range at %d: %q %v vs %q %v", rev, kvStrs(ra.KVs), ea, kvStrs(rb.KVs), eb)
		}
		ha, _, _ := a.HashKV(rev)
		hb, _, _ := b.HashKV(rev)
		if ha != hb {
			t.Fatalf("hash at %d: %x vs %x", rev, ha, hb)
		}
	}
	va, na, ea := a.Events(a.CompactRev(), a.Rev(), 0)
	vb, nb, eb := b.Events(b.CompactRev(), b.Rev(), 0)
	if !slices.Equal(evStrs(va), evStrs(vb)) || na != nb || !errors.Is(ea, eb) {
		t.Fatalf("events %q %d vs %q %d", evStrs(va), na, evStrs(vb), nb)
	}
	sa, sb := snapshotOf(t, a), snapshotOf(t, b)
	if len(sa) != len(sb) {
		t.Fatalf("snapshots hold %d and %d versions", len(sa), len(sb))
	}
	for i := range sa {
		if sa[i].String() != sb[i].String() {
			t.Fatalf("snapshot version %d: %v vs %v", i, sa[i], sb[i])
		}
	}
}

func TestSnapshotRestore(t *testing.T) {
	s := eventHistory(t)
	r := restore(t, s)
	sameStore(t, true, s, r)
	snap := snapshotOf(t, s)
	if len(snap) != 11 || snap[2].Sub != 2 || snap[5].Sub != 1 || !snap[4].Tombstone {
		t.Fatalf("snapshot %v", snap)
	}
	for _, c := range []int64{3, 4, 6} {
		if err := s.Compact(c); err != nil {
			t.Fatal(err)
		}
		r := restore(t, s)
		sameStore(t, true, s, r)
		// The restored store keeps working like the original.
		apply(t, r, []op{put("a", "x"), del("e")})
		s2 := restore(t, s)
		apply(t, s2, []op{put("a", "x"), del("e")})
		sameStore(t, true, r, s2)
	}
	// Restore only into an empty store.
	if err := s.Restore(6, 0, nil); err == nil {
		t.Fatal("restore into a used store")
	}
}

func TestRestoreRejectsBadInput(t *testing.T) {
	kv := func(key string, mod, sub int64, tomb bool) *netsyv1.KeyVersion {
		v := &netsyv1.KeyVersion{Key: []byte(key), ModRevision: mod, Sub: sub, Tombstone: tomb}
		if !tomb {
			v.CreateRevision, v.Version, v.Value = mod, 1, []byte("v")
		}
		return v
	}
	for _, tc := range []struct {
		name        string
		rev, floor  int64
		versions    []*netsyv1.KeyVersion
		errContains string
	}{
		{"floor above rev", 2, 3, nil, "compact revision"},
		{"revision above rev", 1, 0, []*netsyv1.KeyVersion{kv("a", 2, 0, false)}, "revision outside"},
		{"unordered", 3, 0, []*netsyv1.KeyVersion{kv("a", 2, 0, false), kv("b", 1, 0, false)}, "order"},
		{"unordered sub", 3, 0, []*netsyv1.KeyVersion{kv("a", 2, 1, false), kv("b", 2, 0, false)}, "order"},
		{"tombstone of nothing", 3, 0, []*netsyv1.KeyVersion{kv("a", 2, 0, true)}, "not live"},
		{"empty key", 3, 0, []*netsyv1.KeyVersion{kv("", 2, 0, false)}, "empty key"},
		{"zero version", 3, 0, []*netsyv1.KeyVersion{{Key: []byte("a"), ModRevision: 1, CreateRevision: 1}}, "invalid version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := New()
			err := s.Restore(tc.rev, tc.floor, tc.versions)
			if err == nil || !contains(err.Error(), tc.errContains) {
				t.Fatalf("err %v, want it to mention %q", err, tc.errContains)
			}
			if s.Rev() != 0 || s.Stats() != (Stats{}) {
				t.Fatal("failed restore left state behind")
			}
			// The store is still usable.
			apply(t, s, []op{put("a", "1")})
		})
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestSnapshotStopsOnError(t *testing.T) {
	s := eventHistory(t)
	boom := errors.New("boom")
	n := 0
	err := s.Snapshot(func(*netsyv1.KeyVersion) error {
		n++
		if n == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || n != 3 {
		t.Fatalf("err %v after %d calls", err, n)
	}
}

func TestHashKV(t *testing.T) {
	a, b := eventHistory(t), eventHistory(t)
	ha, _, _ := a.HashKV(0)
	hb, _, _ := b.HashKV(6)
	if ha != hb {
		t.Fatal("equal histories hash differently")
	}
	h5, _, _ := a.HashKV(5)
	if h5 == ha {
		t.Fatal("hash ignores revision 6")
	}
	apply(t, b, []op{put("a", "4")})
	if h, _, _ := b.HashKV(6); h != ha {
		t.Fatal("hash at 6 depends on later writes")
	}
	if _, _, err := b.HashKV(8); !errors.Is(err, ErrFutureRev) {
		t.Fatalf("future hash: %v", err)
	}
	c := New()
	apply(t, c, []op{put("a", "1"), put("b", "1"), put("c", "1")}, []op{put("a", "x")})
	d := New()
	apply(t, d, []op{put("a", "1"), put("b", "1"), put("c", "1")}, []op{put("a", "y")})
	hc, _, _ := c.HashKV(0)
	hd, _, _ := d.HashKV(0)
	if hc == hd {
		t.Fatal("different values hash equal")
	}
}

// Readers run against a writer that puts, deletes, compacts and rolls back;
// -race checks the locking, and each reader checks that a revision, once
// readable, reads the same every time.
func TestConcurrentReaders(t *testing.T) {
	eachKind(t, testConcurrentReaders)
}

func testConcurrentReaders(t *testing.T, s *Store) {
	s.compactBatch = 4
	apply(t, s, []op{put("k0", "v")})
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errc := make(chan error, 8)
	for r := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				// Rollback below discards writes above committed: read
				// only what can no longer change.
				rev := max(s.CompactRev(), s.Rev()-3)
				a, err1 := s.Range([]byte("k"), []byte("l"), RangeOptions{Rev: rev, Limit: int64(r + 1)})
				b, err2 := s.Range([]byte("k"), []byte("l"), RangeOptions{Rev: rev, Limit: int64(r + 1)})
				if err1 == nil && err2 == nil && (a.Count != b.Count || !slices.Equal(kvStrs(a.KVs), kvStrs(b.KVs))) {
					errc <- fmt.Errorf("rev %d read %q then %q", rev, kvStrs(a.KVs), kvStrs(b.KVs))
					return
				}
				if _, _, err := s.Events(rev, rev+2, 3); err != nil && !errors.Is(err, ErrCompacted) {
					errc <- err
					return
				}
				s.Stats()
			}
		}()
	}
	for i := range 3000 {
		rev := s.Rev() + 1
		k := fmt.Appendf(nil, "k%d", i%50)
		if i%5 == 0 {
			if s.Delete(rev, k) == nil {
				s.Put(rev, k, []byte("x"), 0)
			}
		} else {
			s.Put(rev, k, []byte("v"), 0)
		}
		if i%100 == 99 {
			_ = s.Compact(s.Rev() - 10)
		}
		if i%37 == 0 {
			// Roll back the write just made, as the engine does when an
			// entry fails; readers never read that revision.
			s.Rollback(s.Rev() - 1)
		}
	}
	close(stop)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}

// logSearch narrows its search by assuming dense revisions; a log with gaps
// (restored from arbitrary input) must still be searched right.
func TestLogSearch(t *testing.T) {
	for _, revs := range [][]int64{
		{1, 2, 3, 4},
		{1, 1, 1, 2, 3, 3, 4},
		{1, 5, 6, 9, 9, 20},
		{3, 3, 3, 3},
		{},
	} {
		var versions []*netsyv1.KeyVersion
		for i, r := range revs {
			versions = append(versions, &netsyv1.KeyVersion{Key: fmt.Appendf(nil, "k%d", i), ModRevision: r, CreateRevision: r, Version: 1, Sub: int64(i)})
		}
		s := New()
		if err := s.Restore(25, 0, versions); err != nil {
			t.Fatal(err)
		}
		for rev := int64(0); rev <= 22; rev++ {
			want, _ := slices.BinarySearchFunc(s.log, rev, func(e logEntry, r int64) int { return int(e.kv.ModRevision - r) })
			if got := s.logSearch(rev); got != want {
				t.Fatalf("log %v: logSearch(%d) = %d, want %d", revs, rev, got, want)
			}
		}
	}
}

// Between the batches of a compaction, readers see the compacted store.
func TestCompactInBatches(t *testing.T) {
	build := func() *Store {
		s := New()
		rng := rand.New(rand.NewPCG(7, 7))
		for range 300 {
			rev := s.Rev() + 1
			k := fmt.Appendf(nil, "k%02d", rng.IntN(40))
			if rng.IntN(4) == 0 && s.Delete(rev, k) != nil {
				continue
			}
			s.Put(rev, k, []byte("v"), 0)
		}
		return s
	}
	want := build()
	if err := want.Compact(200); err != nil {
		t.Fatal(err)
	}
	s := build()
	s.compactBatch = 16
	pauses := 0
	s.compact(200, func() {
		pauses++
		sameStore(t, false, s, want)
	})
	if pauses < 5 {
		t.Fatalf("%d pauses", pauses)
	}
	sameStore(t, true, s, want)
}

// Replace loads a snapshot over a store that holds another history: the
// result is the snapshot's store, as if restored into an empty one.
func TestReplace(t *testing.T) {
	s := eventHistory(t)
	if err := s.Compact(4); err != nil {
		t.Fatal(err)
	}
	snap := snapshotOf(t, s)
	other := New()
	if err := other.Restore(1, 0, nil); err != nil {
		t.Fatal(err)
	}
	apply(t, other, []op{put("zz", "old"), put("a", "old"), del("zz")})
	if err := other.Replace(s.Rev(), s.CompactRev(), snap); err != nil {
		t.Fatal(err)
	}
	sameStore(t, true, s, other)
	// It keeps working like the original.
	apply(t, s, []op{put("a", "x")})
	apply(t, other, []op{put("a", "x")})
	sameStore(t, true, s, other)
	// Bad input leaves it empty, never half loaded.
	bad := []*netsyv1.KeyVersion{{Key: []byte("k"), ModRevision: 99}}
	if err := other.Replace(3, 0, bad); err == nil || other.Rev() != 0 {
		t.Fatalf("replace with a bad version: %v, rev %d", err, other.Rev())
	}
}

// A value compaction drops is not kept alive by the key's index: a key's
// first version lives in its keyIndex (see slot), which outlives that
// version, so a large value held in memory must not go there.
func TestCompactionFreesAnInMemoryFirstValue(t *testing.T) {
	s := New()
	key := []byte("k")
	gone := func() weak.Pointer[byte] {
		v := make([]byte, 1<<20)
		s.Put(1, key, v, 0)
		return weak.Make(&v[0])
	}()
	s.Put(2, key, []byte("small"), 0)
	s.Put(3, key, []byte("small"), 0)
	// At floor 3 nothing reads revision 1 any more: not even as the
	// PrevKv of revision 2's event, which the floor keeps.
	if err := s.Compact(3); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.GC()
	if gone.Value() != nil {
		t.Fatal("the compacted first value of a key is still reachable")
	}
	runtime.KeepAlive(s)
}
