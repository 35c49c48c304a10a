package backup

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/mem"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// countingStore counts the body bytes read from it.
type countingStore struct {
	objstore.Store
	read atomic.Int64
}

func (c *countingStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	b, etag, err := c.Store.Get(ctx, key)
	c.read.Add(int64(len(b)))
	return b, etag, err
}

func (c *countingStore) GetReader(ctx context.Context, key string) (io.ReadCloser, string, error) {
	rc, etag, err := c.Store.GetReader(ctx, key)
	if err != nil {
		return nil, etag, err
	}
	return countingReader{rc, &c.read}, etag, nil
}

type countingReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (r countingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.n.Add(int64(n))
	return n, err
}

// syntheticBucket holds a snapshot of keys revisions and, after it,
// chunks of perChunk entries each, as objwal lays them out.
func syntheticBucket(tb testing.TB, keys, chunks, perChunk int) (store *mem.Store, snapBytes int, tip int64) {
	tb.Helper()
	ctx := tb.Context()
	store = mem.New(clock.Real())
	snap := &datafile.Snapshot{Header: &netsyv1.SnapshotHeader{Index: uint64(keys), Revision: int64(keys) + 1, WalSeq: 1}}
	for r := int64(2); r <= int64(keys)+1; r++ {
		snap.KVs = append(snap.KVs, &netsyv1.KeyVersion{Key: fmt.Appendf(nil, "/registry/pods/ns%d/pod%d", r%100, r),
			Value: bytes.Repeat([]byte{'v'}, 100), CreateRevision: r, ModRevision: r, Version: 1})
	}
	var buf bytes.Buffer
	if err := datafile.EncodeSnapshot(&buf, snap); err != nil {
		tb.Fatal(err)
	}
	if _, err := store.PutIfAbsent(ctx, fmt.Sprintf("%s%020d", snapPrefix, keys+1), buf.Bytes()); err != nil {
		tb.Fatal(err)
	}
	put := func(seq uint64, es []*netsyv1.Entry) {
		body, err := datafile.EncodeChunk(es)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := store.PutIfAbsent(ctx, fmt.Sprintf("%s%020d", walPrefix, seq), body); err != nil {
			tb.Fatal(err)
		}
	}
	next := uint64(keys) + 1
	for c := range chunks {
		var es []*netsyv1.Entry
		for range perChunk {
			es = append(es, &netsyv1.Entry{Index: next, Revision: int64(next) + 1, Ops: []*netsyv1.Op{{
				Key: fmt.Appendf(nil, "/registry/leases/l%d", next%50), Value: bytes.Repeat([]byte{'w'}, 100)}}})
			next++
		}
		put(uint64(c)+2, es)
	}
	return store, buf.Len(), int64(next)
}

// Creating a branch reads listings, a snapshot's header and a chunk or
// two, never the snapshot's body or the chunks it pins: its time does
// not grow with the size of the database.
func TestBranchCreationReadsNoSnapshotBody(t *testing.T) {
	read := func(keys int) (int64, int) {
		inner, snapBytes, tip := syntheticBucket(t, keys, 20, 100)
		parent := &countingStore{Store: inner}
		res, err := CreateBranch(t.Context(), Branching{From: parent, FromURL: "mem://parent", To: mem.New(nil), ToURL: "mem://child", Revision: tip - 150})
		if err != nil {
			t.Fatal(err)
		}
		if res.FirstSeq != 2 || res.LastSeq != 21 || res.Snapshot == "" {
			t.Fatalf("branch %+v: want the snapshot and chunks 2..21 pinned", res)
		}
		t.Logf("%d keys: read %d bytes of the parent; its snapshot is %d", keys, parent.read.Load(), snapBytes)
		return parent.read.Load(), snapBytes
	}
	small, _ := read(50_000)
	big, bigSnap := read(400_000)
	// Snapshots are compressed, so their size says little of the state's;
	// what must hold is that eight times the keys costs no more to read.
	if big > small+small/4 || big >= int64(bigSnap) {
		t.Fatalf("creating a branch read %d bytes at 50k keys and %d at 400k (snapshot %d): it grows with the data", small, big, bigSnap)
	}
}

// BenchmarkBranchCreate times CreateBranch on a bucket holding a snapshot
// of 1M revisions and 1000 chunks after it (the in-memory store leaves
// out network time; on S3 expect a few round trips per 1000 keys listed).
// Run it by hand:
//
//	go test -run '^$' -bench BranchCreate -benchtime 5x ./internal/backup
func BenchmarkBranchCreate(b *testing.B) {
	parent, _, tip := syntheticBucket(b, 1_000_000, 1000, 100)
	b.ResetTimer()
	for i := range b.N {
		if _, err := CreateBranch(b.Context(), Branching{From: parent, FromURL: "mem://parent", To: mem.New(nil),
			ToURL: fmt.Sprintf("mem://child%d", i), Revision: tip - 50_000}); err != nil {
			b.Fatal(err)
		}
	}
}
