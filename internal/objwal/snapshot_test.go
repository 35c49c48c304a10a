package objwal

import (
	"bytes"
	"context"
	"errors"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/faulty"
)

// localSnapshot returns the bytes of the node's local snapshot file.
func (n *node) localSnapshot(index uint64) []byte {
	n.t.Helper()
	f, _, err := n.l.wal.OpenSnapshot(index)
	if err != nil {
		n.t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		n.t.Fatal(err)
	}
	return b
}

// spinToSnapshot moves the fake clock through the retries' backoffs until
// the next snapshot upload is done. (Waiting for one pending timer would
// race with the timer that bounds each attempt.)
func (n *node) spinToSnapshot() string {
	n.t.Helper()
	for {
		select {
		case k := <-n.snaps:
			return k
		case <-n.t.Context().Done():
			n.t.Fatal("waiting for a snapshot upload")
		default:
			n.e.fake.Advance(minBackoff)
			runtime.Gosched()
		}
	}
}

// A snapshot upload that fails is retried from the local file: every
// attempt sends the whole file again, and what lands is that file.
func TestSnapshotUploadRetriesFromFile(t *testing.T) {
	e := newEnv(t)
	n := e.node("", ModeSync, nil).open()
	n.appendRange(1, 12, "a")
	if err := n.rec.wait(t, 12); err != nil {
		t.Fatal(err)
	}
	fault := n.store.Inject(faulty.Rule{Ops: faulty.PutIfAbsent, KeyPrefix: snapPrefix, Err: faulty.ErrInjected, Count: 2})
	if err := n.l.SaveSnapshot(snapshotAt(10)); err != nil {
		t.Fatal(err)
	}
	key := n.spinToSnapshot()
	if key != snapKey(11) {
		t.Fatalf("snapshot key %s", key)
	}
	if got := fault.Fired(); got != 2 {
		t.Fatalf("%d snapshot PUT attempts failed, want 2", got)
	}
	body, _, err := e.inner.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(body, n.localSnapshot(10)) {
		t.Fatal("the bucket's snapshot differs from the local file")
	}
	s, err := datafile.DecodeSnapshot(key, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if s.Header.Index != 10 || s.Header.WalSeq == 0 || len(s.KVs) != len(snapshotAt(10).KVs) {
		t.Fatalf("uploaded snapshot header %v with %d versions", s.Header, len(s.KVs))
	}
}

// An upload whose answer was lost is retried, refused as existing, read
// back (streamed) and kept: the metadata learns its wal_seq as if the
// first answer had arrived.
func TestSnapshotLostResponseIsKept(t *testing.T) {
	e := newEnv(t)
	n := e.node("", ModeSync, nil).open()
	n.appendRange(1, 12, "a")
	if err := n.rec.wait(t, 12); err != nil {
		t.Fatal(err)
	}
	n.store.Inject(faulty.Rule{Ops: faulty.PutIfAbsent, KeyPrefix: snapPrefix, Err: faulty.ErrInjected, AfterCall: true, Count: 1})
	if err := n.l.SaveSnapshot(snapshotAt(10)); err != nil {
		t.Fatal(err)
	}
	key := n.spinToSnapshot()
	// The metadata file, not l.meta: that belongs to the maintenance
	// goroutine, which wrote the file before reporting the snapshot.
	m, err := readMeta(n.l.metaPath)
	if err != nil {
		t.Fatal(err)
	}
	seq, ok := m.knownWalSeq(11)
	if !ok || seq == 0 {
		t.Fatalf("metadata after a kept snapshot: wal_seq %d, known %v", seq, ok)
	}
	if got := n.store.Calls(faulty.Get); got == 0 {
		t.Fatalf("the existing %s was not read back", key)
	}
}

// cutStreams ends the next streams of keys under prefix with an error
// after at bytes, as a connection dropped mid-transfer would.
type cutStreams struct {
	objstore.Store
	prefix string
	at     int
	left   atomic.Int32
}

func (c *cutStreams) GetReader(ctx context.Context, key string) (io.ReadCloser, string, error) {
	rc, etag, err := c.Store.GetReader(ctx, key)
	if err != nil || !strings.HasPrefix(key, c.prefix) || c.left.Add(-1) < 0 {
		return rc, etag, err
	}
	return &cutReader{ReadCloser: rc, left: c.at}, etag, nil
}

var errCut = errors.New("connection reset mid-transfer")

type cutReader struct {
	io.ReadCloser
	left int
}

func (c *cutReader) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errCut
	}
	n, err := c.ReadCloser.Read(p[:min(len(p), c.left)])
	c.left -= n
	return n, err
}

// A restore streams the snapshot: a transfer cut part-way is retried,
// while a damaged snapshot stops Open at once, naming the object.
func TestRestoreStreamsSnapshot(t *testing.T) {
	e := newEnv(t)
	a := e.node("", ModeSync, nil).open()
	a.appendRange(1, 12, "a")
	if err := a.rec.wait(t, 12); err != nil {
		t.Fatal(err)
	}
	if err := a.l.SaveSnapshot(snapshotAt(10)); err != nil {
		t.Fatal(err)
	}
	key := a.nextSnapshot()
	a.close()

	cut := &cutStreams{prefix: snapPrefix, at: 100}
	cut.left.Store(2)
	b := e.node("", ModeSync, func(o *Options) {
		cut.Store = o.Store
		o.Store = cut
	})
	b.spin = true
	b.open()
	if cut.left.Load() >= 0 {
		t.Fatalf("%d cut streams left unused", cut.left.Load())
	}
	idx, got := b.replay()
	if idx != 10 {
		t.Fatalf("restored snapshot %d, want 10", idx)
	}
	checkEntries(t, got, 11, 12, tag("a"))

	body, etag, err := e.inner.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	body[len(body)/2] ^= 0x10
	if _, err := e.inner.PutIfMatch(t.Context(), key, body, etag); err != nil {
		t.Fatal(err)
	}
	c := e.node("", ModeSync, nil)
	c.spin = true
	_, err = c.tryOpen()
	if !errors.Is(err, datafile.ErrCorrupt) || !strings.Contains(err.Error(), key) {
		t.Fatalf("Open with a damaged snapshot = %v; want a corruption error naming %s", err, key)
	}
	if gets := c.store.Calls(faulty.Get); gets != 1 {
		t.Fatalf("the damaged snapshot was read %d times; damage is not worth a retry", gets)
	}
}
