package engine

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine/enginetest"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// BenchmarkFollowCommit measures a replica taking one entry that comes
// with the Primary's commit point (a batch's usual shape under load): as
// Follow then CommitTo (two handoffs to the loop), and as FollowCommit
// (one).
func BenchmarkFollowCommit(b *testing.B) {
	for _, tc := range []struct {
		name string
		take func(e *Engine, ent *netsyv1.Entry) error
	}{
		{"follow-then-commit", func(e *Engine, ent *netsyv1.Entry) error {
			if err := e.Follow(context.Background(), 1, []*netsyv1.Entry{ent}); err != nil {
				return err
			}
			return e.CommitTo(context.Background(), ent.Index)
		}},
		{"follow-commit", func(e *Engine, ent *netsyv1.Entry) error {
			return e.FollowCommit(context.Background(), 1, []*netsyv1.Entry{ent}, ent.Index)
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e, err := Open(Config{Storage: &enginetest.MemStorage{}, Clock: clock.NewFake(time.Unix(1_700_000_000, 0)),
				ClusterID: 1, MemberID: 2, Follower: true})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			ents := make([]*netsyv1.Entry, b.N)
			for i := range ents {
				idx := uint64(i + 1)
				ents[i] = &netsyv1.Entry{Index: idx, Revision: int64(idx) + 1, Term: 1,
					Ops: []*netsyv1.Op{{Key: fmt.Appendf(nil, "k%d", idx), Value: []byte("v")}}}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := tc.take(e, ents[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if got := e.CommittedIndex(); got != uint64(b.N) {
				b.Fatalf("committed %d of %d", got, b.N)
			}
		})
	}
}

// BenchmarkFollowBatch measures a replica taking a batch of 64 one-put
// entries (256-byte values, forwarded writes' request ids) with the
// commit point of the batch before, as the Follow stream delivers them
// under load; ns/op and allocs/op are per entry.
func BenchmarkFollowBatch(b *testing.B) {
	const batch = 64
	st := newBenchStorage()
	defer st.close()
	e, err := Open(Config{Storage: st, Clock: clock.NewFake(time.Unix(1_700_000_000, 0)),
		ClusterID: 1, MemberID: 2, Follower: true})
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close()
	val := make([]byte, 256)
	n := (b.N + batch - 1) / batch * batch
	ents := make([]*netsyv1.Entry, n)
	for i := range ents {
		idx := uint64(i + 1)
		ents[i] = &netsyv1.Entry{Index: idx, Revision: int64(idx) + 1, Term: 1,
			RequestId: &netsyv1.RequestID{Member: 7, Seq: idx},
			Ops:       []*netsyv1.Op{{Key: fmt.Appendf(nil, "/bench/key-%04d", i%1000), Value: val}}}
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := startCPU()
	var commit uint64
	for i := 0; i < n; i += batch {
		if err := e.FollowCommit(context.Background(), 1, ents[i:i+batch], commit); err != nil {
			b.Fatal(err)
		}
		commit = ents[i+batch-1].Index
	}
	if err := e.CommitTo(context.Background(), commit); err != nil {
		b.Fatal(err)
	}
	for e.CommittedIndex() != commit {
		<-e.CommitNotify()
	}
	b.StopTimer()
	cpu.report(b)
}
