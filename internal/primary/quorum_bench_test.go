package primary

import (
	"testing"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

// quorumWrite is what the quorum does for one replicated write in a
// 3-node cluster: the append is marked, then both replicas' receipts
// (each with its heartbeat) are counted.
func quorumWrite(h *qharness, i uint64, hb1, hb2 *netsyv1.Heartbeat) {
	h.eng.mu.Lock()
	h.eng.last = i
	h.eng.mu.Unlock()
	h.q.appended(i, h.clk.Now())
	h.q.heard("r1", term, i, hb1)
	h.q.heard("r2", term, i, hb2)
}

func newWriteQuorum(t *testing.T) (*qharness, *netsyv1.Heartbeat, *netsyv1.Heartbeat) {
	h := newQuorum(t, -1, 3)
	h.q.open("r1", term)
	h.q.open("r2", term)
	hb1 := &netsyv1.Heartbeat{NodeId: "r1", Health: netsyv1.HealthState_HEALTHY}
	hb2 := &netsyv1.Heartbeat{NodeId: "r2", Health: netsyv1.HealthState_HEALTHY}
	return h, hb1, hb2
}

// BenchmarkQuorumWrite measures the quorum's cost per replicated write
// (run with -benchmem: allocations per write are what it pins).
func BenchmarkQuorumWrite(b *testing.B) {
	h, hb1, hb2 := newWriteQuorum(&testing.T{})
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		quorumWrite(h, uint64(i+1), hb1, hb2)
	}
}
