package objwal

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/objstore/mem"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// BenchmarkFollowerCheckpointSearch is the chunk search a follower runs
// each time it saves a local snapshot (advanceFollowerCheckpoint →
// lastChunkStartingBy): 64 chunks of 1000 entries of 256-byte values
// after its checkpoint, about what a replica's bucket gains between two
// snapshots under put-256. One op is one search, for an index in a chunk
// chosen at random, with nothing learned from earlier searches (see
// TestFollowerCheckpointSearchReadsEachChunkOnce for what they save).
// Run with -benchmem: B/op and allocs/op are the cost per snapshot.
func BenchmarkFollowerCheckpointSearch(b *testing.B) {
	const chunks, perChunk = 64, 1000
	st := mem.New(clock.Real())
	pool := make([]byte, 1<<20)
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range pool {
		pool[i] = byte(rnd.Uint32())
	}
	for c := range uint64(chunks) {
		es := make([]*netsyv1.Entry, perChunk)
		for j := range uint64(perChunk) {
			i := c*perChunk + j + 1
			at := int(i*257) % (len(pool) - 256)
			es[j] = &netsyv1.Entry{Index: i, Revision: int64(i) + 1, Term: 1,
				Ops: []*netsyv1.Op{{Key: fmt.Appendf(nil, "/registry/pods/default/pod-%07d", i), Value: pool[at : at+256]}}}
		}
		if _, err := st.PutIfAbsent(b.Context(), walKey(c+1), mustChunk(b, es)); err != nil {
			b.Fatal(err)
		}
	}
	l, err := Open(b.Context(), Options{Store: st, WALDir: b.TempDir(), Follower: true, Clock: clock.Real()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.Run("cold", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c := 1 + rnd.Uint64N(chunks-1) // seqs[0] is taken unread
			idx := c*perChunk + 1 + rnd.Uint64N(perChunk)
			forgetChunkStarts(l)
			seq, first, err := l.lastChunkStartingBy(0, idx)
			if err != nil {
				b.Fatal(err)
			}
			if seq != c+1 || first != c*perChunk+1 {
				b.Fatalf("search for %d found chunk %d starting at %d, want %d at %d", idx, seq, first, c+1, c*perChunk+1)
			}
		}
	})
	// As on a replica: each search starts from where the last one moved
	// the checkpoint to, 4 chunks behind the new local snapshot (with a
	// fresh start, cache included, when the bucket's end is reached).
	b.Run("advancing", func(b *testing.B) {
		const step = 4
		forgetChunkStarts(l)
		var after uint64
		b.ReportAllocs()
		for b.Loop() {
			if after+step+1 > chunks {
				after = 0
				forgetChunkStarts(l)
			}
			idx := (after+step)*perChunk + 1
			seq, _, err := l.lastChunkStartingBy(after, idx)
			if err != nil {
				b.Fatal(err)
			}
			if seq != after+step+1 {
				b.Fatalf("search after %d for %d found chunk %d, want %d", after, idx, seq, after+step+1)
			}
			after = seq - 1
		}
	})
}

// forgetChunkStarts makes the next search start from nothing.
func forgetChunkStarts(l *Log) { clear(l.chunkStarts) }
