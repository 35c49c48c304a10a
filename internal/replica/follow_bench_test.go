package replica

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/proto/netsyv1"
)

// BenchmarkReceiptEncode measures encoding one receipt as the Follow
// stream sends it (run with -benchmem), with the node's heartbeat (as
// every receipt carried it before) and without it (a receipt while the
// health is unchanged).
func BenchmarkReceiptEncode(b *testing.B) {
	hb := &netsyv1.Heartbeat{NodeId: "node-2", MemberId: 0x5a3c9e1f2b4d6e70, Health: netsyv1.HealthState_HEALTHY,
		PrimaryState: netsyv1.PrimaryState_REPLICA, LatestIndex: 123456, LatestRevision: 123400, CommittedIndex: 123450,
		CommittedRevision: 123400, StartTimeUnixNano: 1795000000000000000, ElectorTerm: 4, PrimaryTerm: 7,
		PrimaryId: "node-1", TookPrimaryTerm: 3, LatestTerm: 7}
	for _, tc := range []struct {
		name string
		hb   *netsyv1.Heartbeat
	}{{"with-heartbeat", hb}, {"index-only", nil}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m := &netsyv1.FollowRequest{Msg: &netsyv1.FollowRequest_Receipt{Receipt: &netsyv1.Receipt{Index: 123456, Heartbeat: tc.hb}}}
				if _, err := proto.Marshal(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
