package objwal

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/objstore/mem"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// BenchmarkRestore measures Open on an empty directory against a bucket
// holding a snapshot of 1M revisions plus 100k entries in 1000 chunks
// after it, and the engine-side LoadSnapshot + Replay that follow. The
// in-memory store leaves out network time. Run it by hand:
//
//	go test -run '^$' -bench Restore -benchtime 1x ./internal/objwal
func BenchmarkRestore(b *testing.B) {
	const (
		revisions = 1_000_000
		chunks    = 1000
		perChunk  = 100
	)
	st := mem.New(clock.Real())
	ctx := b.Context()
	snap := &datafile.Snapshot{Header: &netsyv1.SnapshotHeader{Index: revisions, Revision: revisions + 1, WalSeq: 1}}
	for r := int64(2); r <= revisions+1; r++ {
		snap.KVs = append(snap.KVs, &netsyv1.KeyVersion{
			Key: fmt.Appendf(nil, "/registry/pods/ns%d/pod%d", r%100, r), Value: bytes.Repeat([]byte{'v'}, 100),
			CreateRevision: r, ModRevision: r, Version: 1,
		})
	}
	var buf bytes.Buffer
	if err := datafile.EncodeSnapshot(&buf, snap); err != nil {
		b.Fatal(err)
	}
	snapBytes := buf.Len()
	if _, err := st.PutIfAbsent(ctx, snapKey(revisions+1), buf.Bytes()); err != nil {
		b.Fatal(err)
	}
	snap = nil
	if _, err := st.PutIfAbsent(ctx, walKey(1), mustChunk(b, nil)); err != nil {
		b.Fatal(err)
	}
	next := uint64(revisions + 1)
	for c := range chunks {
		var es []*netsyv1.Entry
		for range perChunk {
			es = append(es, &netsyv1.Entry{Index: next, Revision: int64(next) + 1, Ops: []*netsyv1.Op{{
				Key: fmt.Appendf(nil, "/registry/leases/l%d", next%50), Value: bytes.Repeat([]byte{'w'}, 100)}}})
			next++
		}
		if _, err := st.PutIfAbsent(ctx, walKey(uint64(c)+2), mustChunk(b, es)); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for range b.N {
		start := wall.Now()
		l, err := Open(ctx, Options{Store: st, WALDir: b.TempDir(), Mode: ModeSync})
		if err != nil {
			b.Fatal(err)
		}
		opened := wall.Since(start)
		s, err := l.LoadSnapshot()
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		if err := l.Replay(s.Header.Index+1, func(*netsyv1.Entry) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
		total := wall.Since(start)
		if n != chunks*perChunk {
			b.Fatalf("replayed %d entries", n)
		}
		b.ReportMetric(opened.Seconds(), "open-s")
		b.ReportMetric(total.Seconds(), "open+replay-s")
		b.ReportMetric(float64(snapBytes)/1e6, "snapshot-MB")
		if err := l.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

func mustChunk(b *testing.B, es []*netsyv1.Entry) []byte {
	body, err := encodeEntries(nil, es)
	if err != nil {
		b.Fatal(err)
	}
	return body
}
