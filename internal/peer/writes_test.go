package peer_test

import (
	"context"
	"net"
	"testing"

	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/internal/testutil/h2count"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// countingNet is the machine's TCP network, counting the writes of
// every connection either side makes, and the HTTP/2 PING frames among
// them.
type countingNet struct {
	peer.Network
	h2count.Counter
}

func (n *countingNet) Listen(addr string) (net.Listener, error) {
	l, err := n.Network.Listen(addr)
	if err != nil {
		return nil, err
	}
	return n.Counter.Listener(l), nil
}

func (n *countingNet) Dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := n.Network.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return n.Counter.Client(c), nil
}

// One message each way on a peer stream costs one write each way: no
// flow-control probes (gRPC's BDP pings, one per message received while
// none is out, each answered) double the system calls of a replicated
// write, whose messages go one at a time.
func TestPeerMessageRoundTripCostsOneWriteEachWay(t *testing.T) {
	nw := &countingNet{Network: peer.TCP()}
	s := serve(t, nw, "127.0.0.1:0")
	cc := conn(t, newPool(t, nw), s.addr)
	ctx, cancel := context.WithTimeout(context.Background(), patience)
	defer cancel()
	stream, err := netsyv1.NewFollowClient(cc).Follow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	roundTrip := func(i int) {
		t.Helper()
		err := stream.Send(&netsyv1.FollowRequest{Msg: &netsyv1.FollowRequest_Start{Start: &netsyv1.FollowStart{NodeId: "r", LastIndex: uint64(i)}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	// The connection's set-up (settings, their acks, headers) first.
	for i := range 5 {
		roundTrip(i)
	}
	const n = 200
	before, pingsBefore := nw.Writes.Load(), nw.Pings.Load()+nw.PingAcks.Load()
	for i := range n {
		roundTrip(i)
	}
	got, pings := nw.Writes.Load()-before, nw.Pings.Load()+nw.PingAcks.Load()-pingsBefore
	t.Logf("%d round trips: %d writes, %d pings and acks", n, got, pings)
	if pings > 0 || got > 2*n+n/4 {
		t.Fatalf("%d round trips took %d writes (%.2f each) with %d pings and acks; want about 2 writes each and no pings",
			n, got, float64(got)/n, pings)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
}
