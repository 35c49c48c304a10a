package primary

import (
	"bytes"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

// putEntries is n put entries from index first, each with a 256-byte
// value, as a group commit of puts appends them.
func putEntries(first uint64, n int) []*netsyv1.Entry {
	ents := make([]*netsyv1.Entry, n)
	for i := range ents {
		idx := first + uint64(i)
		ents[i] = &netsyv1.Entry{Index: idx, Revision: int64(idx), Term: 3, RequestId: &netsyv1.RequestID{Member: 7, Seq: idx}, CommitTimeMs: 1700000000000,
			Ops: []*netsyv1.Op{{Type: netsyv1.Op_PUT, Key: fmt.Appendf(nil, "key-%08d", idx), Value: make([]byte, 256)}}}
	}
	return ents
}

// sendBytes is what a Follow stream's send encodes for a batch: the whole
// FollowResponse, as gRPC's codec marshals it.
func sendBytes(tb testing.TB, batch *netsyv1.EntryBatch) []byte {
	b, err := proto.Marshal(&netsyv1.FollowResponse{PrimaryTerm: 3, Msg: &netsyv1.FollowResponse_Entries{Entries: batch}})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func TestFollowStreamsSendingTheSameEntriesEncodeThemOnce(t *testing.T) {
	var c batchCache
	ents := putEntries(10, 5)
	// Each stream reads its own slice of the same entries.
	a, ea, err := c.batch(append([]*netsyv1.Entry(nil), ents...))
	if err != nil {
		t.Fatal(err)
	}
	a.CommitIndex = 9
	b, eb, err := c.batch(append([]*netsyv1.Entry(nil), ents...))
	if err != nil {
		t.Fatal(err)
	}
	b.CommitIndex = 12
	if n := c.encodes.Load(); n != 1 {
		t.Fatalf("two streams sending the same entries encoded them %d times, want once", n)
	}
	// What each replica decodes is the batch a plain encoding gives, with
	// its own stream's commit index.
	for _, tc := range []struct {
		got    *netsyv1.EntryBatch
		commit uint64
	}{{a, 9}, {b, 12}} {
		var m netsyv1.FollowResponse
		if err := proto.Unmarshal(sendBytes(t, tc.got), &m); err != nil {
			t.Fatal(err)
		}
		want := &netsyv1.FollowResponse{PrimaryTerm: 3, Msg: &netsyv1.FollowResponse_Entries{Entries: &netsyv1.EntryBatch{Entries: ents, CommitIndex: tc.commit}}}
		if !proto.Equal(&m, want) {
			t.Fatalf("decoded %v, want %v", &m, want)
		}
	}
	c.done(ea)
	c.done(eb)
	// Other entries (a later batch, or one ending elsewhere) are encoded
	// afresh.
	later := putEntries(15, 5)
	if _, e, err := c.batch(later); err != nil {
		t.Fatal(err)
	} else {
		c.done(e)
	}
	// The bytes of a batch a stream still sends are not reused: the one
	// sending ents[:4] holds it while two more batches are encoded.
	held, eh, err := c.batch(ents[:4])
	if err != nil {
		t.Fatal(err)
	}
	heldBytes := sendBytes(t, held)
	if n := c.encodes.Load(); n != 3 {
		t.Fatalf("encodes = %d after two other batches, want 3", n)
	}
	// Entries at the same indexes that are other entries (another term's,
	// or read again from storage) are other pointers: encoded afresh.
	again, ee, err := c.batch(putEntries(15, 5))
	if err != nil {
		t.Fatal(err)
	}
	defer c.done(ee)
	if n := c.encodes.Load(); n != 4 {
		t.Fatalf("encodes = %d after the same indexes as other entries, want 4", n)
	}
	var m netsyv1.FollowResponse
	if err := proto.Unmarshal(sendBytes(t, again), &m); err != nil || m.GetEntries().GetEntries()[0].Index != 15 {
		t.Fatalf("decoded %v (%v), want entries from 15", &m, err)
	}
	if _, e, err := c.batch(later); err != nil {
		t.Fatal(err)
	} else {
		c.done(e)
	}
	if got := sendBytes(t, held); !bytes.Equal(got, heldBytes) {
		t.Fatal("a batch's bytes changed while a stream still sent it")
	}
	c.done(eh)
}

// BenchmarkFollowBatchTwoReplicas measures what the Primary's Follow
// streams spend encoding one batch of 64 puts for two replicas (run with
// -benchmem): per-stream is each stream encoding its own EntryBatch (as
// before batchCache), shared is batchCache.
func BenchmarkFollowBatchTwoReplicas(b *testing.B) {
	const batches = 16
	var sets [batches][]*netsyv1.Entry
	for i := range sets {
		sets[i] = putEntries(uint64(1+64*i), 64)
	}
	b.Run("per-stream", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			ents := sets[i%batches]
			for range 2 {
				sendBytes(b, &netsyv1.EntryBatch{Entries: ents, CommitIndex: uint64(i)})
			}
			i++
		}
	})
	b.Run("shared", func(b *testing.B) {
		b.ReportAllocs()
		var c batchCache
		i := 0
		for b.Loop() {
			ents := sets[i%batches]
			for range 2 {
				batch, e, err := c.batch(ents)
				if err != nil {
					b.Fatal(err)
				}
				batch.CommitIndex = uint64(i)
				sendBytes(b, batch)
				c.done(e)
			}
			i++
		}
	})
}
