package wal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/internal/datafile"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func entry(i uint64) *netsyv1.Entry {
	return &netsyv1.Entry{
		Index:    i,
		Revision: int64(i) + 1,
		Term:     1,
		Ops:      []*netsyv1.Op{{Key: []byte(fmt.Sprintf("/registry/k%d", i%17)), Value: bytes.Repeat([]byte{byte(i)}, int(i%40)+1)}},
	}
}

// syncLog records OnSync calls.
type syncLog struct {
	mu    sync.Mutex
	calls []uint64
	errs  []error
}

func (s *syncLog) onSync(index uint64, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, index)
	if err != nil {
		s.errs = append(s.errs, err)
	}
}

func (s *syncLog) snapshot() ([]uint64, []error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls), slices.Clone(s.errs)
}

// syncCounter counts fsyncs through the beforeSync hook.
type syncCounter struct {
	mu sync.Mutex
	n  int
}

func (c *syncCounter) hooks() *hooks {
	return &hooks{beforeSync: func() error {
		c.mu.Lock()
		c.n++
		c.mu.Unlock()
		return nil
	}}
}

func (c *syncCounter) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

func open(t *testing.T, opts Options) *WAL {
	t.Helper()
	w, err := Open(opts)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func appendRange(t *testing.T, w *WAL, from, to uint64) {
	t.Helper()
	for i := from; i <= to; i++ {
		if err := w.Append(entry(i)); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
}

func waitSynced(t *testing.T, w *WAL, index uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := w.WaitSynced(ctx, index); err != nil {
		t.Fatalf("wait synced %d: %v", index, err)
	}
}

// checkReplay asserts Replay(from) delivers exactly entries from..to.
func checkReplay(t *testing.T, w *WAL, from, to uint64) {
	t.Helper()
	want := max(from, 1)
	err := w.Replay(from, func(e *netsyv1.Entry) error {
		if !proto.Equal(e, entry(want)) {
			return fmt.Errorf("entry %d: got %v", want, e)
		}
		want++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want != to+1 {
		t.Fatalf("replay from %d ended at %d, want %d", from, want-1, to)
	}
}

func segmentFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.seg"))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(m)
	return m
}

func TestAppendReplayAcrossRolls(t *testing.T) {
	dir := t.TempDir()
	var log syncLog
	w := open(t, Options{Dir: dir, SegmentBytes: 1024, OnSync: log.onSync})
	if w.FirstIndex() != 0 || w.LastIndex() != 0 {
		t.Fatalf("empty wal: first %d last %d", w.FirstIndex(), w.LastIndex())
	}
	appendRange(t, w, 1, 300)
	if w.FirstIndex() != 1 || w.LastIndex() != 300 {
		t.Fatalf("first %d last %d", w.FirstIndex(), w.LastIndex())
	}
	waitSynced(t, w, 300)
	checkReplay(t, w, 1, 300)
	checkReplay(t, w, 0, 300)
	checkReplay(t, w, 177, 300)
	checkReplay(t, w, 301, 300)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	segs := segmentFiles(t, dir)
	if len(segs) < 5 {
		t.Fatalf("only %d segments for 300 entries of 1 KiB segments", len(segs))
	}
	if filepath.Base(segs[0]) != "00000000000000000001.seg" {
		t.Fatalf("first segment %s", segs[0])
	}
	// Every segment but the newest is sealed, and within the size limit.
	for i, p := range segs {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		info, err := datafile.Inspect(p, bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if info.Sealed != (i < len(segs)-1) || int64(len(data)) > 1024 {
			t.Fatalf("%s: sealed %v, %d bytes", p, info.Sealed, len(data))
		}
	}
	calls, errs := log.snapshot()
	if len(errs) != 0 || calls[len(calls)-1] != 300 || !slices.IsSorted(calls) {
		t.Fatalf("OnSync calls %v errs %v", calls, errs)
	}

	w = open(t, Options{Dir: dir, SegmentBytes: 1024})
	if w.FirstIndex() != 1 || w.LastIndex() != 300 {
		t.Fatalf("reopened: first %d last %d", w.FirstIndex(), w.LastIndex())
	}
	checkReplay(t, w, 1, 300)
	if err := w.Append(entry(302)); err == nil {
		t.Fatal("gap accepted")
	}
	appendRange(t, w, 301, 400)
	waitSynced(t, w, 400)
	checkReplay(t, w, 250, 400)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Append(entry(401)); !errors.Is(err, ErrClosed) {
		t.Fatalf("append after close: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestAppendValidation(t *testing.T) {
	w := open(t, Options{Dir: t.TempDir()})
	defer w.Close()
	if err := w.Append(&netsyv1.Entry{}); err == nil {
		t.Fatal("index 0 accepted")
	}
	// An empty log takes any first index: it may start after a snapshot.
	appendRange(t, w, 1000, 1002)
	if err := w.Append(entry(1002)); err == nil || !strings.Contains(err.Error(), "does not follow") {
		t.Fatalf("repeated index: %v", err)
	}
	waitSynced(t, w, 1002)
	checkReplay(t, w, 1000, 1002)
	if err := w.Replay(999, func(*netsyv1.Entry) error { return nil }); !errors.Is(err, ErrCompacted) {
		t.Fatalf("replay below first index: %v", err)
	}
	stop := errors.New("stop")
	if err := w.Replay(0, func(*netsyv1.Entry) error { return stop }); err != stop {
		t.Fatalf("callback error not returned as is: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.WaitSynced(ctx, 5000); err == nil {
		t.Fatal("waiting for an index never appended succeeded")
	}
}

// TestGroupCommit holds the first fsync and shows that everything appended
// meanwhile is made durable by a single second fsync.
func TestGroupCommit(t *testing.T) {
	var log syncLog
	var mu sync.Mutex
	syncs := 0
	entered := make(chan struct{})
	release := make(chan struct{})
	h := &hooks{beforeSync: func() error {
		mu.Lock()
		syncs++
		n := syncs
		mu.Unlock()
		if n == 1 {
			close(entered)
			<-release
		}
		return nil
	}}
	w := open(t, Options{Dir: t.TempDir(), OnSync: log.onSync, hooks: h})
	defer w.Close()

	appendRange(t, w, 1, 1)
	<-entered
	// The writer is inside the first fsync; Append must not wait for it.
	appendRange(t, w, 2, 500)
	close(release)
	waitSynced(t, w, 500)

	mu.Lock()
	n := syncs
	mu.Unlock()
	calls, _ := log.snapshot()
	if n != 2 || !slices.Equal(calls, []uint64{1, 500}) {
		t.Fatalf("%d fsyncs for 500 appends, OnSync %v; want 2 and [1 500]", n, calls)
	}
}

func TestBurstBatches(t *testing.T) {
	var c syncCounter
	w := open(t, Options{Dir: t.TempDir(), hooks: c.hooks()})
	appendRange(t, w, 1, 2000)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if syncs := c.count(); syncs >= 2000 {
		t.Fatalf("%d fsyncs for 2000 appends: no batching", syncs)
	}
	t.Logf("%d fsyncs for 2000 appends", c.count())

	// The metrics see the same fsyncs and every entry once.
	st := w.SyncStats()
	if int(st.Syncs) != c.count() || st.Entries != 2000 || st.Buckets[len(st.Buckets)-1] > st.Syncs {
		t.Fatalf("SyncStats %+v after %d fsyncs of 2000 entries", st, c.count())
	}
	if !slices.IsSorted(st.Buckets) {
		t.Fatalf("buckets %v are not cumulative", st.Buckets)
	}
}

// Entries counts what the fsyncs made durable, not index distance: a log
// that starts above 1 (restored from a snapshot) or fsyncs on request
// counts each entry once.
func TestSyncStatsEntries(t *testing.T) {
	for _, lazy := range []bool{false, true} {
		w := open(t, Options{Dir: t.TempDir(), SyncOnRequest: lazy})
		appendRange(t, w, 1001, 1010)
		waitSynced(t, w, 1010)
		appendRange(t, w, 1011, 1012)
		waitSynced(t, w, 1012)
		if st := w.SyncStats(); st.Entries != 12 || st.Syncs == 0 {
			t.Fatalf("lazy %v: SyncStats %+v after 12 durable entries", lazy, st)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSyncStatsBuckets(t *testing.T) {
	w := &WAL{}
	for _, d := range []time.Duration{0, time.Millisecond, time.Millisecond + 1, 3 * time.Millisecond, time.Minute} {
		w.stats.observe(d)
	}
	st := w.SyncStats()
	// 0 and 1 ms fall in the first bucket, 1 ms + 1 ns in the second,
	// 3 ms in the third; a minute is above every bucket (only +Inf).
	want := []uint64{2, 3, 4, 4}
	if !slices.Equal(st.Buckets[:4], want) || st.Buckets[len(st.Buckets)-1] != 4 || st.Syncs != 5 {
		t.Fatalf("SyncStats %+v, want buckets starting %v and 5 fsyncs", st, want)
	}
	if st.Time != time.Minute+5*time.Millisecond+1 {
		t.Fatalf("total time %v", st.Time)
	}
}

// With SyncOnRequest the writer fsyncs only what SyncTo, WaitSynced or
// Close ask for, and one fsync covers everything written before it.
func TestSyncOnRequest(t *testing.T) {
	dir := t.TempDir()
	var log syncLog
	var c syncCounter
	count := c.count
	w := open(t, Options{Dir: dir, OnSync: log.onSync, SyncOnRequest: true, hooks: c.hooks()})
	appendRange(t, w, 1, 2000)
	w.SyncTo(1500)
	waitSynced(t, w, 1500)
	// The request may have met the writer part way through the appends:
	// then a second batch needed its own fsync.
	if n := count(); n < 1 || n > 2 {
		t.Fatalf("%d fsyncs to reach 1500", n)
	}
	before := count()
	waitSynced(t, w, 2000)
	appendRange(t, w, 2001, 3000)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if n := count() - before; n < 1 || n > 3 {
		t.Fatalf("%d fsyncs for WaitSynced(2000) and Close", n)
	}
	calls, errs := log.snapshot()
	if len(errs) != 0 || calls[len(calls)-1] != 3000 || !slices.IsSorted(calls) {
		t.Fatalf("OnSync %v, errors %v", calls, errs)
	}
	w = open(t, Options{Dir: dir})
	defer w.Close()
	checkReplay(t, w, 1, 3000)
}

// Turning SyncOnRequest off fsyncs what was written lazily at once, with
// no further append: objwal leaves sync mode during an object-storage
// outage with entries written but never asked for, and refuses new
// appends until those are durable and uploaded.
func TestSyncOnRequestTurnedOff(t *testing.T) {
	var log syncLog
	written := make(chan uint64, 1000)
	w := open(t, Options{Dir: t.TempDir(), OnSync: log.onSync, SyncOnRequest: true,
		hooks: &hooks{afterCommit: func(unsynced uint64) { written <- unsynced }}})
	defer w.Close()
	appendRange(t, w, 1, 100)
	for u := range written {
		if u == 100 {
			break
		}
	}
	if calls, _ := log.snapshot(); len(calls) != 0 {
		t.Fatalf("OnSync %v before any fsync was asked for", calls)
	}
	w.SetSyncOnRequest(false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if calls, _ := log.snapshot(); len(calls) > 0 && calls[len(calls)-1] == 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("entries written lazily were not fsync'd after SetSyncOnRequest(false)")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCloseFlushesQueue(t *testing.T) {
	dir := t.TempDir()
	var log syncLog
	w := open(t, Options{Dir: dir, SegmentBytes: 4096, OnSync: log.onSync})
	appendRange(t, w, 1, 1000)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	calls, _ := log.snapshot()
	if calls[len(calls)-1] != 1000 {
		t.Fatalf("OnSync %v does not reach 1000", calls)
	}
	w = open(t, Options{Dir: dir, SegmentBytes: 4096})
	defer w.Close()
	if w.LastIndex() != 1000 {
		t.Fatalf("last %d after reopen", w.LastIndex())
	}
	waitSynced(t, w, 1000) // recovered entries count as synced
}

// copyDir copies the flat segment directory, for crash simulations.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func TestCrashTruncatesTornTail(t *testing.T) {
	src := t.TempDir()
	w := open(t, Options{Dir: src, SegmentBytes: 2048})
	appendRange(t, w, 1, 120)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	segs := segmentFiles(t, src)
	newest := filepath.Base(segs[len(segs)-1])
	var firstOfNewest uint64
	fmt.Sscanf(newest, "%020d.seg", &firstOfNewest)
	st, err := os.Stat(segs[len(segs)-1])
	if err != nil {
		t.Fatal(err)
	}

	rng := rand.New(rand.NewSource(1))
	cuts := []int64{0, 3, datafile.HeaderSize, datafile.HeaderSize + 1, st.Size() - 1}
	for range 12 {
		cuts = append(cuts, rng.Int63n(st.Size()))
	}
	for _, cut := range cuts {
		dir := copyDir(t, src)
		path := filepath.Join(dir, newest)
		if err := os.Truncate(path, cut); err != nil {
			t.Fatal(err)
		}
		w := open(t, Options{Dir: dir, SegmentBytes: 2048})
		last := w.LastIndex()
		if last < firstOfNewest-1 || last > 120 {
			t.Fatalf("cut %d: last index %d", cut, last)
		}
		checkLayout(t, dir, 2048)
		checkReplay(t, w, 1, last)
		// The log goes on densely from what survived.
		appendRange(t, w, last+1, last+30)
		waitSynced(t, w, last+30)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		w = open(t, Options{Dir: dir, SegmentBytes: 2048})
		if w.LastIndex() != last+30 {
			t.Fatalf("cut %d: reopened at %d, want %d", cut, w.LastIndex(), last+30)
		}
		checkReplay(t, w, 1, last+30)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCorruptionStopsOpen(t *testing.T) {
	src := t.TempDir()
	w := open(t, Options{Dir: src, SegmentBytes: 2048})
	appendRange(t, w, 1, 120)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	segs := segmentFiles(t, src)
	if len(segs) < 3 {
		t.Fatalf("need 3 segments, have %d", len(segs))
	}
	tests := []struct {
		name   string
		damage func(dir string) string // returns the file the error must name
		want   string
	}{
		{"flipped byte in a sealed segment", func(dir string) string {
			return flipByte(t, filepath.Join(dir, filepath.Base(segs[1])), 700)
		}, "corrupt"},
		{"flipped byte in a sealed segment's last record", func(dir string) string {
			p := filepath.Join(dir, filepath.Base(segs[0]))
			st, _ := os.Stat(p)
			return flipByte(t, p, int(st.Size())-datafile.FooterSize-3)
		}, "sealed"},
		{"sealed segment lost its footer", func(dir string) string {
			p := filepath.Join(dir, filepath.Base(segs[1]))
			st, _ := os.Stat(p)
			os.Truncate(p, st.Size()-datafile.FooterSize)
			return p
		}, "not sealed"},
		{"sealed segment torn", func(dir string) string {
			p := filepath.Join(dir, filepath.Base(segs[0]))
			os.Truncate(p, 100)
			return p
		}, "followed by newer segments"},
		{"bad record in the middle of the newest segment", func(dir string) string {
			return flipByte(t, filepath.Join(dir, filepath.Base(segs[len(segs)-1])), datafile.HeaderSize+20)
		}, "followed by a valid record"},
		{"missing segment", func(dir string) string {
			os.Remove(filepath.Join(dir, filepath.Base(segs[1])))
			return filepath.Join(dir, filepath.Base(segs[2]))
		}, "hole"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, src)
			named := tc.damage(dir)
			before := dirSizes(t, dir)
			_, err := Open(Options{Dir: dir, SegmentBytes: 2048})
			if err == nil || !strings.Contains(err.Error(), named) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error naming %s and saying %q", err, named, tc.want)
			}
			if after := dirSizes(t, dir); !maps.Equal(before, after) {
				t.Fatalf("a failed Open changed files: %v -> %v", before, after)
			}
		})
	}
}

func flipByte(t *testing.T, path string, off int) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[off] ^= 0x20
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func dirSizes(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, p := range segmentFiles(t, dir) {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = st.Size()
	}
	return out
}

// writeSealedSegment writes entries first..last as a sealed segment file.
func writeSealedSegment(t *testing.T, dir string, first, last uint64) {
	t.Helper()
	var buf bytes.Buffer
	dw, err := datafile.NewWriter(&buf, datafile.KindSegment)
	if err != nil {
		t.Fatal(err)
	}
	for i := first; i <= last; i++ {
		if err := dw.AppendEntry(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := dw.Finish(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, segmentName(first)), buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestTornSegmentHeaderIsRemoved(t *testing.T) {
	dir := t.TempDir()
	writeSealedSegment(t, dir, 1, 40)
	// A crash right after the roll created the next segment.
	next := filepath.Join(dir, segmentName(41))
	if err := os.WriteFile(next, []byte("NSD"), 0o600); err != nil {
		t.Fatal(err)
	}
	w := open(t, Options{Dir: dir, SegmentBytes: 1024})
	defer w.Close()
	if w.LastIndex() != 40 {
		t.Fatalf("last %d", w.LastIndex())
	}
	appendRange(t, w, 41, 45)
	waitSynced(t, w, 45)
	checkReplay(t, w, 1, 45)
}

func testSnapshot(index uint64) *datafile.Snapshot {
	return &datafile.Snapshot{
		Header: &netsyv1.SnapshotHeader{Index: index, Revision: int64(index) + 1, Term: 1},
		KVs: []*netsyv1.KeyVersion{
			{Key: []byte("a"), Value: []byte("x"), CreateRevision: 2, ModRevision: 2, Version: 1},
			{Key: []byte("b"), Value: []byte("y"), CreateRevision: 3, ModRevision: int64(index), Version: 4, Lease: 9},
		},
		Leases: []*netsyv1.SnapshotLease{{Id: 9, Ttl: 60}},
	}
}

func TestSnapshotDeletesCoveredSegments(t *testing.T) {
	dir := t.TempDir()
	w := open(t, Options{Dir: dir, SegmentBytes: 1024})
	if s, err := w.LoadSnapshot(); s != nil || err != nil {
		t.Fatalf("no snapshot yet: %v %v", s, err)
	}
	appendRange(t, w, 1, 200)
	waitSynced(t, w, 200)
	before := len(segmentFiles(t, dir))

	if err := w.SaveSnapshot(testSnapshot(120)); err != nil {
		t.Fatal(err)
	}
	after := segmentFiles(t, dir)
	if len(after) >= before {
		t.Fatalf("%d segments before, %d after the snapshot", before, len(after))
	}
	first := w.FirstIndex()
	if first <= 1 || first > 121 || w.LastIndex() != 200 {
		t.Fatalf("first %d last %d after snapshot at 120", first, w.LastIndex())
	}
	if filepath.Base(after[0]) != segmentName(first) {
		t.Fatalf("oldest segment %s, first index %d", after[0], first)
	}
	checkReplay(t, w, 121, 200)
	if err := w.Replay(1, func(*netsyv1.Entry) error { return nil }); !errors.Is(err, ErrCompacted) {
		t.Fatalf("replay of deleted entries: %v", err)
	}
	appendRange(t, w, 201, 210)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	w = open(t, Options{Dir: dir, SegmentBytes: 1024})
	defer w.Close()
	s, err := w.LoadSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	if s.Header.Index != 120 || len(s.KVs) != 2 || len(s.Leases) != 1 || !proto.Equal(s.KVs[1], testSnapshot(120).KVs[1]) {
		t.Fatalf("loaded %v", s)
	}
	if w.FirstIndex() != first || w.LastIndex() != 210 {
		t.Fatalf("reopened: first %d last %d", w.FirstIndex(), w.LastIndex())
	}
	checkReplay(t, w, s.Header.Index+1, 210)

	// Only the newest two snapshots are kept.
	for _, idx := range []uint64{150, 180, 205} {
		if err := w.SaveSnapshot(testSnapshot(idx)); err != nil {
			t.Fatal(err)
		}
	}
	snaps, _ := filepath.Glob(filepath.Join(dir, "snap", "*"))
	slices.Sort(snaps)
	if len(snaps) != 2 || filepath.Base(snaps[0]) != snapName(180) || filepath.Base(snaps[1]) != snapName(205) {
		t.Fatalf("snapshots kept: %v", snaps)
	}
	checkReplay(t, w, 206, 210)
}

func TestSnapshotCoveringEverythingRestartsTheLog(t *testing.T) {
	dir := t.TempDir()
	var log syncLog
	w := open(t, Options{Dir: dir, SegmentBytes: 1024, OnSync: log.onSync})
	appendRange(t, w, 1, 50)
	// Not waiting for the sync: the snapshot must order after the queue.
	if err := w.SaveSnapshot(testSnapshot(500)); err != nil {
		t.Fatal(err)
	}
	if w.FirstIndex() != 0 || w.LastIndex() != 0 {
		t.Fatalf("first %d last %d after a snapshot covering everything", w.FirstIndex(), w.LastIndex())
	}
	if n := len(segmentFiles(t, dir)); n != 0 {
		t.Fatalf("%d segments left", n)
	}
	if err := w.Append(entry(40)); err == nil {
		t.Fatal("append below the synced index accepted")
	}
	appendRange(t, w, 501, 520)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	calls, _ := log.snapshot()
	if !slices.Contains(calls, 50) || calls[len(calls)-1] != 520 {
		t.Fatalf("OnSync %v", calls)
	}

	w = open(t, Options{Dir: dir, SegmentBytes: 1024})
	defer w.Close()
	if w.FirstIndex() != 501 || w.LastIndex() != 520 {
		t.Fatalf("reopened: first %d last %d", w.FirstIndex(), w.LastIndex())
	}
	s, err := w.LoadSnapshot()
	if err != nil || s.Header.Index != 500 {
		t.Fatalf("snapshot %v %v", s, err)
	}
	checkReplay(t, w, 501, 520)
}

func TestEmptyActiveSegmentAfterSnapshot(t *testing.T) {
	dir := t.TempDir()
	// Sealed segment 1..10 and an empty newest segment 11: a crash right
	// after a roll created it.
	writeSealedSegment(t, dir, 1, 10)
	var buf bytes.Buffer
	if _, err := datafile.NewWriter(&buf, datafile.KindSegment); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, segmentName(11)), buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}

	w := open(t, Options{Dir: dir})
	if w.FirstIndex() != 1 || w.LastIndex() != 10 {
		t.Fatalf("first %d last %d", w.FirstIndex(), w.LastIndex())
	}
	checkReplay(t, w, 1, 10)
	// A node that caught up from a newer snapshot restarts its log after it.
	if err := w.SaveSnapshot(testSnapshot(20)); err != nil {
		t.Fatal(err)
	}
	if w.LastIndex() != 0 {
		t.Fatalf("last %d after a snapshot covering everything", w.LastIndex())
	}
	appendRange(t, w, 21, 24)
	waitSynced(t, w, 24)
	checkReplay(t, w, 21, 24)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if segs := segmentFiles(t, dir); len(segs) != 1 || filepath.Base(segs[0]) != segmentName(21) {
		t.Fatalf("segments %v", segs)
	}
	w = open(t, Options{Dir: dir})
	defer w.Close()
	if w.FirstIndex() != 21 || w.LastIndex() != 24 {
		t.Fatalf("reopened: first %d last %d", w.FirstIndex(), w.LastIndex())
	}
}

func TestCorruptSnapshot(t *testing.T) {
	dir := t.TempDir()
	w := open(t, Options{Dir: dir})
	defer w.Close()
	if err := w.SaveSnapshot(testSnapshot(7)); err != nil {
		t.Fatal(err)
	}
	if err := w.SaveSnapshot(testSnapshot(9)); err != nil {
		t.Fatal(err)
	}
	p := flipByte(t, filepath.Join(dir, "snap", snapName(9)), 30)
	if _, err := w.LoadSnapshot(); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("got %v, want an error naming %s", err, p)
	}
	// An interrupted snapshot write is cleaned up by Open and never loaded.
	if err := os.WriteFile(filepath.Join(dir, "snap", snapName(11)+tmpSuffix), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	w2 := open(t, Options{Dir: dir})
	defer w2.Close()
	if left, _ := filepath.Glob(filepath.Join(dir, "snap", "*"+tmpSuffix)); len(left) != 0 {
		t.Fatalf("temp snapshot left: %v", left)
	}
}

func TestFailedSyncFailsTheWAL(t *testing.T) {
	var log syncLog
	var mu sync.Mutex
	fail := false
	h := &hooks{beforeSync: func() error {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return errors.New("injected EIO")
		}
		return nil
	}}
	dir := t.TempDir()
	w := open(t, Options{Dir: dir, OnSync: log.onSync, hooks: h})
	appendRange(t, w, 1, 5)
	waitSynced(t, w, 5)
	mu.Lock()
	fail = true
	mu.Unlock()
	appendRange(t, w, 6, 6)
	err := w.WaitSynced(context.Background(), 6)
	if err == nil || !strings.Contains(err.Error(), "injected EIO") {
		t.Fatalf("wait: %v", err)
	}
	// Later appends fail with the same error even if the disk recovers.
	mu.Lock()
	fail = false
	mu.Unlock()
	if err := w.Append(entry(7)); err == nil || !strings.Contains(err.Error(), "injected EIO") {
		t.Fatalf("append after failure: %v", err)
	}
	if err := w.WaitSynced(context.Background(), 5); err != nil {
		t.Fatalf("entries synced before the failure: %v", err)
	}
	if err := w.Close(); err == nil {
		t.Fatal("close of a failed WAL reported success")
	}
	calls, errs := log.snapshot()
	if len(errs) != 1 || calls[len(calls)-1] != 5 {
		t.Fatalf("OnSync calls %v errors %v: want one error reporting index 5", calls, errs)
	}
}

func TestFailedSegmentCreation(t *testing.T) {
	dir := t.TempDir()
	// A directory where the first segment must go makes its creation fail.
	if err := os.Mkdir(filepath.Join(dir, segmentName(9)), 0o700); err != nil {
		t.Fatal(err)
	}
	var log syncLog
	w := open(t, Options{Dir: dir, OnSync: log.onSync})
	appendRange(t, w, 9, 9)
	if err := w.WaitSynced(context.Background(), 9); err == nil {
		t.Fatal("sync succeeded without a segment")
	}
	if err := w.Append(entry(10)); err == nil {
		t.Fatal("append after failure accepted")
	}
	if err := w.Close(); err == nil {
		t.Fatal("close of a failed WAL reported success")
	}
	if _, errs := log.snapshot(); len(errs) != 1 {
		t.Fatalf("OnSync errors %v", errs)
	}
}

// BenchmarkAppend feeds one appender from parallel producers, the shape of
// the engine's write path, and waits for the last entry to be durable.
func BenchmarkAppend(b *testing.B) {
	w, err := Open(Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	value := bytes.Repeat([]byte("v"), 256)
	ch := make(chan *netsyv1.Entry, 1024)
	done := make(chan error, 1)
	go func() {
		var next uint64 = 1
		for e := range ch {
			e.Index = next
			e.Revision = int64(next)
			next++
			if err := w.Append(e); err != nil {
				done <- err
				for range ch {
				}
				return
			}
		}
		done <- w.WaitSynced(context.Background(), next-1)
	}()
	b.SetBytes(int64(len(value)) + 32)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ch <- &netsyv1.Entry{Term: 1, Ops: []*netsyv1.Op{{Key: []byte("/registry/pods/default/p"), Value: value}}}
		}
	})
	close(ch)
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkAppendSync is the latency of one write on an idle log: append
// one entry and wait for its fsync, so every op pays exactly one fsync.
func BenchmarkAppendSync(b *testing.B) {
	for _, size := range []int{256, 4096} {
		b.Run(fmt.Sprintf("value=%d", size), func(b *testing.B) {
			w, err := Open(Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			value := bytes.Repeat([]byte("v"), size)
			put := func(i uint64) {
				e := &netsyv1.Entry{Index: i, Revision: int64(i), Term: 1, Ops: []*netsyv1.Op{{Key: []byte("/registry/pods/default/p"), Value: value}}}
				if err := w.Append(e); err != nil {
					b.Fatal(err)
				}
				if err := w.WaitSynced(context.Background(), i); err != nil {
					b.Fatal(err)
				}
			}
			// The first entry creates the segment; only steady state is timed.
			put(1)
			b.SetBytes(int64(size))
			for i := uint64(2); b.Loop(); i++ {
				put(i)
			}
		})
	}
}

// AppendFramed takes the record datafile.FrameEntry makes and stores what
// Append would; it refuses the same indices.
func TestAppendFramed(t *testing.T) {
	var log syncLog
	w := open(t, Options{Dir: t.TempDir(), SegmentBytes: 1024, OnSync: log.onSync})
	defer w.Close()
	appendRange(t, w, 1, 10)
	for i := uint64(11); i <= 40; i++ {
		frame, err := datafile.FrameEntry(nil, entry(i))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.AppendFramed(i, entry(i).Revision, frame); err != nil {
			t.Fatalf("append framed %d: %v", i, err)
		}
	}
	appendRange(t, w, 41, 50)
	frame, err := datafile.FrameEntry(nil, entry(52))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AppendFramed(52, entry(52).Revision, frame); err == nil {
		t.Fatal("AppendFramed accepted an index that skips one")
	}
	waitSynced(t, w, 50)
	checkReplay(t, w, 1, 50)
}
