package engine

import (
	"context"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine/enginetest"
)

// BenchmarkLeaseCheckpoints measures what lease checkpoints cost the
// Primary when 1000 leases are each kept alive every third of their TTL,
// as client/v3 does: TTL 10 s every 3 s (renewals alone make checkpoints),
// and TTL 60 s every 20 s (the age rule adds about two per renewal, a
// tenth of the TTL being 6 s). One op is one simulated second: 100 ms
// steps in which the leases due are renewed, then one checkpoint pass (the
// loop runs one every LeaseCheckpointInterval). "none" skips the pass, so
// the difference is the checkpoints' CPU cost; the log cost is reported as
// entries, checkpoints and bytes of entry per simulated second.
func BenchmarkLeaseCheckpoints(b *testing.B) {
	for _, bc := range []struct {
		name       string
		ttl        int64
		every      time.Duration
		checkpoint bool
	}{
		{"ttl10-every3s/checkpoint", 10, 3 * time.Second, true},
		{"ttl10-every3s/none", 10, 3 * time.Second, false},
		{"ttl60-every20s/checkpoint", 60, 20 * time.Second, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			const leases, step = 1000, 100 * time.Millisecond
			every := bc.every
			st := &enginetest.MemStorage{}
			clk := clock.NewFake(time.Unix(1_700_000_000, 0))
			// The loop's own ticker stays out of the way: the benchmark
			// runs each pass itself.
			e, err := Open(Config{Storage: st, Clock: clk, LeaseCheckInterval: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			ctx := context.Background()
			ids := make([]int64, leases)
			for i := range ids {
				g, err := e.LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: bc.ttl})
				if err != nil {
					b.Fatal(err)
				}
				ids[i] = g.ID
			}
			first := uint64(st.Len()) + 1
			slots := int(every / step)
			b.ReportAllocs()
			b.ResetTimer()
			tick := 0
			for range b.N {
				for range time.Second / step {
					clk.Advance(step)
					for i := tick % slots; i < leases; i += slots {
						if _, err := e.LeaseRenew(ctx, ids[i]); err != nil {
							b.Fatal(err)
						}
					}
					tick++
				}
				if bc.checkpoint {
					if err := e.inLoop(ctx, e.checkpointLeases); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			var entries, cps, bytes int
			for _, ent := range st.Entries(first) {
				if len(ent.LeaseCheckpoints) > 0 {
					entries++
					cps += len(ent.LeaseCheckpoints)
					bytes += proto.Size(ent)
				}
			}
			secs := float64(b.N)
			b.ReportMetric(float64(entries)/secs, "entries/s")
			b.ReportMetric(float64(cps)/secs, "checkpoints/s")
			b.ReportMetric(float64(bytes)/secs, "entry-bytes/s")
		})
	}
}
