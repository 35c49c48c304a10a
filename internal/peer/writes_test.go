package peer_test

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// countingNet is the machine's TCP network, counting the writes (each a
// write system call) of every connection either side makes, and the
// HTTP/2 PING frames among them.
type countingNet struct {
	peer.Network
	writes atomic.Int64
	pings  atomic.Int64
}

// countingConn parses the HTTP/2 frames it writes (after the client's
// preface) to count the pings.
type countingConn struct {
	net.Conn
	n    *countingNet
	mu   sync.Mutex
	skip int    // bytes left of the preface or of the current payload
	head []byte // a frame header read so far
}

const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

func (c *countingConn) Write(b []byte) (int, error) {
	c.n.writes.Add(1)
	c.mu.Lock()
	for p := b; len(p) > 0; {
		if c.skip > 0 {
			k := min(c.skip, len(p))
			c.skip -= k
			p = p[k:]
			continue
		}
		k := min(9-len(c.head), len(p))
		c.head = append(c.head, p[:k]...)
		p = p[k:]
		if len(c.head) == 9 {
			if c.head[3] == 0x6 { // PING (or its ack)
				c.n.pings.Add(1)
			}
			c.skip = int(c.head[0])<<16 | int(c.head[1])<<8 | int(c.head[2])
			c.head = c.head[:0]
		}
	}
	c.mu.Unlock()
	return c.Conn.Write(b)
}

type countingListener struct {
	net.Listener
	n *countingNet
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: l.n}, nil
}

func (n *countingNet) Listen(addr string) (net.Listener, error) {
	l, err := n.Network.Listen(addr)
	if err != nil {
		return nil, err
	}
	return countingListener{l, n}, nil
}

func (n *countingNet) Dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := n.Network.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: n, skip: len(http2Preface)}, nil
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
	before, pingsBefore := nw.writes.Load(), nw.pings.Load()
	for i := range n {
		roundTrip(i)
	}
	got, pings := nw.writes.Load()-before, nw.pings.Load()-pingsBefore
	t.Logf("%d round trips: %d writes, %d pings and acks", n, got, pings)
	if pings > 0 || got > 2*n+n/4 {
		t.Fatalf("%d round trips took %d writes (%.2f each) with %d pings and acks; want about 2 writes each and no pings",
			n, got, float64(got)/n, pings)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
}
