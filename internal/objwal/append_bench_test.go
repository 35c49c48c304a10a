package objwal

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/mem"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// discardChunks is a bucket that takes chunk bodies without keeping them,
// so that a benchmark's allocations are objwal's and the wal's alone (the
// in-memory store would copy every body).
type discardChunks struct{ objstore.Store }

func (discardChunks) PutIfAbsent(_ context.Context, key string, body []byte) (string, error) {
	return "etag", nil
}

// BenchmarkAppendUpload is the write path below the engine on one node:
// Append (framing, queueing for the local fsync) and the uploader
// (batching, sealing, compressing), one op per entry of a 256-byte value,
// through to the last entry being durable. Like the clients of a node,
// the benchmark waits for the fsync after every clients entries, so the
// uploader keeps up as it does in a node rather than falling behind. Run with -benchmem: B/op and
// allocs/op are what each put costs the garbage collector here.
func BenchmarkAppendUpload(b *testing.B) {
	const clients = 256
	// Values are windows of a random pool, so chunks compress about as
	// much as real values do rather than to nothing.
	pool := make([]byte, 1<<20)
	rnd := rand.New(rand.NewPCG(1, 2))
	for i := range pool {
		pool[i] = byte(rnd.Uint32())
	}
	for _, mode := range []Mode{ModeAsync, ModeSync} {
		b.Run(fmt.Sprintf("mode=%v", mode), func(b *testing.B) {
			rec := newSyncRec()
			l, err := Open(b.Context(), Options{
				Store: discardChunks{mem.New(clock.Real())}, WALDir: b.TempDir(), Mode: mode,
				AckOnFsync: mode == ModeAsync, OnSync: rec.onSync,
			})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			e := &netsyv1.Entry{Term: 1, Ops: []*netsyv1.Op{{Key: []byte("/registry/pods/default/pod-0000000")}}}
			b.SetBytes(256)
			b.ReportAllocs()
			next := uint64(1)
			for b.Loop() {
				at := int(next*257) % (len(pool) - 256)
				e.Index, e.Revision, e.CommitTimeMs = next, int64(next)+1, 0
				e.Ops[0].Value = pool[at : at+256]
				if err := l.Append(e); err != nil {
					b.Fatal(err)
				}
				if next%clients == 0 {
					// The clients wait for their acknowledgement (the
					// local fsync) before writing again.
					if err := l.wal.WaitSynced(b.Context(), next); err != nil {
						b.Fatal(err)
					}
				}
				next++
			}
			// Everything goes up now rather than at the chunk's age, as
			// Release with flush does.
			l.mu.Lock()
			l.flushing = true
			l.mu.Unlock()
			kick(l.upKick)
			if err := l.waitUploaded(b.Context()); err != nil {
				b.Fatal(err)
			}
			if err := l.wal.WaitSynced(b.Context(), next-1); err != nil {
				b.Fatal(err)
			}
			s := l.Stats()
			b.ReportMetric(float64(s.Entries)/float64(max(s.Puts, 1)), "entries/PUT")
		})
	}
}
