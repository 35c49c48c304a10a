package objwal

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/faulty"
	"github.com/netsy-io/netsy/internal/objstore/mem"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// entry i puts key k{i%7}; tag tells two writers' entries apart.
func entry(i uint64, tag string) *netsyv1.Entry {
	return &netsyv1.Entry{
		Index:    i,
		Revision: int64(i) + 1,
		Ops: []*netsyv1.Op{{
			Key:   fmt.Appendf(nil, "k%d", i%7),
			Value: fmt.Appendf(nil, "%s-%d", tag, i),
		}},
	}
}

// snapshotAt is a snapshot of the state after entries 1..i (tag "a"),
// good enough for objwal, which never looks inside one.
func snapshotAt(i uint64) *datafile.Snapshot {
	s := &datafile.Snapshot{Header: &netsyv1.SnapshotHeader{Index: i, Revision: int64(i) + 1}}
	for j := max(i, 7) - 6; j <= i; j++ {
		s.KVs = append(s.KVs, &netsyv1.KeyVersion{
			Key: fmt.Appendf(nil, "k%d", j%7), Value: fmt.Appendf(nil, "a-%d", j),
			CreateRevision: 2, ModRevision: int64(j) + 1, Version: 1,
		})
	}
	return s
}

// syncRec records what a Log reports to its engine.
type syncRec struct {
	mu      sync.Mutex
	index   uint64
	err     error
	calls   int
	changed chan struct{}
	bad     string // set if reports ever went backwards
}

func newSyncRec() *syncRec { return &syncRec{changed: make(chan struct{})} }

func (r *syncRec) onSync(index uint64, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if index < r.index {
		r.bad = fmt.Sprintf("OnSync(%d) after OnSync(%d)", index, r.index)
	}
	r.index = max(r.index, index)
	if err != nil && r.err == nil {
		r.err = err
	}
	r.calls++
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *syncRec) get() (uint64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.index, r.err
}

// wait blocks until index is reported durable or an error is reported.
func (r *syncRec) wait(t *testing.T, index uint64) error {
	t.Helper()
	for {
		r.mu.Lock()
		idx, err, ch, bad := r.index, r.err, r.changed, r.bad
		r.mu.Unlock()
		if bad != "" {
			t.Fatal(bad)
		}
		if idx >= index || err != nil {
			return err
		}
		select {
		case <-ch:
		case <-t.Context().Done():
			t.Fatalf("waiting for index %d to be durable (at %d)", index, idx)
		}
	}
}

// env is one bucket shared by the Logs of a test.
type env struct {
	t     *testing.T
	clk   clock.Clock
	fake  *clock.Fake // nil with a real clock
	inner objstore.Store
}

// newEnv is an in-memory bucket on a fake clock.
func newEnv(t *testing.T) *env {
	clk := clock.NewFake(epoch)
	return &env{t: t, clk: clk, fake: clk, inner: mem.New(clk)}
}

// node is one Log with its own directory, faulty view of the bucket and
// recorder.
type node struct {
	t     *testing.T
	e     *env
	dir   string
	store *faulty.Store
	rec   *syncRec
	puts  chan putResult
	// lastPut is the highest seq of an upload result read from puts.
	lastPut uint64
	snaps   chan string
	opts    Options
	l       *Log
	spin    bool // move the fake clock while Open runs
}

type putResult struct {
	seq uint64
	err error
}

func (e *env) node(dir string, mode Mode, edit func(*Options)) *node {
	if dir == "" {
		dir = e.t.TempDir()
	}
	n := &node{t: e.t, e: e, dir: dir, store: faulty.New(e.inner, e.clk), rec: newSyncRec(),
		puts: make(chan putResult, 10000), snaps: make(chan string, 100)}
	n.opts = Options{
		Store:        n.store,
		WALDir:       dir,
		SegmentBytes: 4096,
		OnSync:       n.rec.onSync,
		Mode:         mode,
		Clock:        e.clk,
		Logger:       hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testWriter{e.t}}),
	}
	if edit != nil {
		edit(&n.opts)
	}
	return n
}

// open opens the node's Log; the test fails if it does not open.
func (n *node) open() *node {
	n.t.Helper()
	l, err := n.tryOpen()
	if err != nil {
		n.t.Fatalf("open %s: %v", n.dir, err)
	}
	n.l = l
	return n
}

func (n *node) tryOpen() (*Log, error) {
	n.rec = newSyncRec()
	n.opts.OnSync = n.rec.onSync
	if n.spin {
		// Retries during Open back off on the fake clock: keep it moving
		// until Open returns.
		opened := make(chan struct{})
		defer close(opened)
		go func() {
			for {
				select {
				case <-opened:
					return
				default:
					n.e.fake.Advance(minBackoff)
					runtime.Gosched()
				}
			}
		}()
	}
	l, err := open(n.t.Context(), n.opts, hooks{
		putDone: func(seq uint64, err error) {
			select {
			case n.puts <- putResult{seq, err}:
			default:
			}
		},
		snapDone: func(key string) { n.snaps <- key },
	})
	if err == nil {
		n.t.Cleanup(func() { n.e.shutdown(l) })
	}
	return l, err
}

// shutdown closes l even when a test left a call held on the fake clock:
// Close waits closeTimeout for the uploader, so time is moved until it
// returns.
func (e *env) shutdown(l *Log) {
	done := make(chan struct{})
	go func() {
		l.Close()
		close(done)
	}()
	if e.fake == nil {
		<-done
		return
	}
	for {
		select {
		case <-done:
			return
		default:
			e.fake.Advance(time.Second)
			runtime.Gosched()
		}
	}
}

// drainPuts forgets the results of earlier upload attempts: it first
// waits for the result of the last chunk uploaded so far, which a
// durability report can come before (a result read later would be taken
// for the next attempt's; TestFencing failed so at load 17).
func (n *node) drainPuts() {
	n.t.Helper()
	if last := n.l.Stats().Seq - 1; last > n.lastPut {
		for n.lastPut < last {
			n.nextPut()
		}
	}
	for {
		select {
		case p := <-n.puts:
			n.lastPut = max(n.lastPut, p.seq)
		default:
			return
		}
	}
}

func (n *node) close() {
	n.t.Helper()
	if err := n.l.Close(); err != nil {
		n.t.Fatalf("close %s: %v", n.dir, err)
	}
}

// appendRange appends entries from..to with tag.
func (n *node) appendRange(from, to uint64, tag string) []*netsyv1.Entry {
	n.t.Helper()
	var ents []*netsyv1.Entry
	for i := from; i <= to; i++ {
		e := entry(i, tag)
		if err := n.l.Append(e); err != nil {
			n.t.Fatalf("append %d: %v", i, err)
		}
		ents = append(ents, e)
	}
	return ents
}

// follow appends copies of entries a writer appended (and so stamped
// with its commit time), as a follower takes them from its Primary.
func (n *node) follow(ents []*netsyv1.Entry) {
	n.t.Helper()
	for _, e := range ents {
		if err := n.l.Append(proto.Clone(e).(*netsyv1.Entry)); err != nil {
			n.t.Fatalf("append %d: %v", e.Index, err)
		}
	}
}

// nextPut returns the next upload attempt's result.
func (n *node) nextPut() putResult {
	n.t.Helper()
	select {
	case p := <-n.puts:
		n.lastPut = max(n.lastPut, p.seq)
		return p
	case <-n.t.Context().Done():
		n.t.Fatal("waiting for an upload attempt")
	}
	return putResult{}
}

func (n *node) nextSnapshot() string {
	n.t.Helper()
	select {
	case k := <-n.snaps:
		return k
	case <-n.t.Context().Done():
		n.t.Fatal("waiting for a snapshot upload")
	}
	return ""
}

// replay returns every entry the local log replays after its snapshot.
func (n *node) replay() (snapIdx uint64, entries []*netsyv1.Entry) {
	n.t.Helper()
	s, err := n.l.LoadSnapshot()
	if err != nil {
		n.t.Fatal(err)
	}
	if s != nil {
		snapIdx = s.Header.Index
	}
	err = n.l.Replay(snapIdx+1, func(e *netsyv1.Entry) error {
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		n.t.Fatal(err)
	}
	return snapIdx, entries
}

// checkEntries asserts entries are exactly from..to, with tags from tagOf.
func checkEntries(t *testing.T, entries []*netsyv1.Entry, from, to uint64, tagOf func(uint64) string) {
	t.Helper()
	if uint64(len(entries)) != to-from+1 {
		t.Fatalf("got %d entries, want %d..%d", len(entries), from, to)
	}
	for k, e := range entries {
		i := from + uint64(k)
		// The writer's commit-time stamp is checked by stamp_test.go.
		want := entry(i, tagOf(i))
		want.CommitTimeMs = e.CommitTimeMs
		if !proto.Equal(e, want) {
			t.Fatalf("entry %d = %v, want %v", i, e, want)
		}
	}
}

func tag(s string) func(uint64) string { return func(uint64) string { return s } }

// history reads every chunk in the bucket and checks it is one linear
// history: seqs dense from the first one present, entry indices dense
// across chunks, every chunk intact. It returns the entries by index.
func history(t *testing.T, s objstore.Store) (map[uint64]*netsyv1.Entry, []uint64) {
	t.Helper()
	ctx := t.Context()
	objs, err := s.List(ctx, walPrefix, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]*netsyv1.Entry{}
	var seqs []uint64
	var next uint64
	for _, o := range objs {
		seq := parseSeq(o.Key)
		if len(seqs) > 0 && seq != seqs[len(seqs)-1]+1 {
			t.Fatalf("bucket: %s follows %s", o.Key, walKey(seqs[len(seqs)-1]))
		}
		seqs = append(seqs, seq)
		body, _, err := s.Get(ctx, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		entries, _, err := datafile.DecodeChunk(o.Key, body)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if next != 0 && e.Index != next {
				t.Fatalf("bucket: %s holds index %d, expected %d", o.Key, e.Index, next)
			}
			if out[e.Index] != nil {
				t.Fatalf("bucket: index %d appears twice", e.Index)
			}
			out[e.Index] = e
			next = e.Index + 1
		}
	}
	return out, seqs
}

// chunkSizes returns the number of entries in each chunk, by seq.
func chunkSizes(t *testing.T, s objstore.Store) map[uint64]int {
	t.Helper()
	objs, err := s.List(t.Context(), walPrefix, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]int{}
	for _, o := range objs {
		body, _, err := s.Get(t.Context(), o.Key)
		if err != nil {
			t.Fatal(err)
		}
		entries, _, err := datafile.DecodeChunk(o.Key, body)
		if err != nil {
			t.Fatal(err)
		}
		out[parseSeq(o.Key)] = len(entries)
	}
	return out
}

// blockUntil waits for n pending timers on the fake clock.
func (e *env) blockUntil(n int) {
	e.t.Helper()
	if err := e.fake.BlockUntil(e.t.Context(), n); err != nil {
		e.t.Fatal(err)
	}
}

// gate holds the next PutIfAbsent under prefix until released, so a test
// can act while a call is known to be in flight without counting timers.
type gate struct {
	objstore.Store
	prefix  string
	mu      sync.Mutex
	armed   bool
	entered chan string
	release chan struct{}
}

func newGate(s objstore.Store, prefix string) *gate {
	return &gate{Store: s, prefix: prefix, armed: true, entered: make(chan string, 1), release: make(chan struct{})}
}

// arm holds the next matching call.
func (g *gate) arm() {
	g.mu.Lock()
	g.armed = true
	g.mu.Unlock()
}

func (g *gate) PutIfAbsent(ctx context.Context, key string, body []byte) (string, error) {
	g.mu.Lock()
	hold := g.armed && strings.HasPrefix(key, g.prefix)
	if hold {
		g.armed = false
	}
	g.mu.Unlock()
	if hold {
		g.entered <- key
		select {
		case <-g.release:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return g.Store.PutIfAbsent(ctx, key, body)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func isFenced(err error) bool { return errors.Is(err, ErrFenced) }

// leaveLocalTail leaves in dir the log of a closed sync-mode node tagged
// "a" whose entries 1..uploaded are in the bucket and uploaded+1..last only
// on local disk: the store refuses the chunk carrying them and Close gives
// up on it.
func (e *env) leaveLocalTail(dir string, uploaded, last uint64) {
	e.t.Helper()
	a := e.node(dir, ModeSync, nil).open()
	a.appendRange(1, uploaded, "a")
	if err := a.rec.wait(e.t, uploaded); err != nil {
		e.t.Fatal(err)
	}
	a.store.Fail(faulty.PutIfAbsent, walPrefix)
	a.appendRange(uploaded+1, last, "a")
	if err := a.l.wal.WaitSynced(e.t.Context(), last); err != nil {
		e.t.Fatal(err)
	}
	a.nextPut()
	a.close()
}
