package replica

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/internal/peer/memnet"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// instantLocal is an engine that answers every Put at once, so a
// benchmark measures only what the Backend adds to a write.
type instantLocal struct{ Local }

func (instantLocal) Put(context.Context, *pb.PutRequest) (*pb.PutResponse, error) {
	return &pb.PutResponse{}, nil
}
func (instantLocal) CommittedIndex() uint64 { return 1 }

// BenchmarkBackendPutOnPrimary measures what the Backend costs a write a
// client sends to the Active Primary itself (run with -benchmem: the
// allocations per write are what it pins). The Backend is a client port's
// (it has Conn, which an Active Primary never calls), so the write is
// named with a request id as in a node; the peer port's Backend (no Conn)
// names none.
func BenchmarkBackendPutOnPrimary(b *testing.B) {
	be := NewBackend(BackendConfig{Local: instantLocal{}, Roles: activeRoles{newFakeRoles(nil, 0)},
		Conn: func(string) (*grpc.ClientConn, error) { return nil, errors.New("an Active Primary dialled a peer") }, Clock: clock.Real()})
	ctx := context.Background()
	req := &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := be.Put(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// steppingLocal applies one more index each time the Backend takes a
// commit notification: a forwarded write's answer that arrives just before
// the replica applies the Primary's commit point, as it usually does.
type steppingLocal struct {
	Local
	applied uint64
	closed  chan struct{}
}

func (l *steppingLocal) CommittedIndex() uint64 { return l.applied }
func (l *steppingLocal) CommitNotify() <-chan struct{} {
	l.applied++
	return l.closed
}

// BenchmarkWaitAppliedOneStep measures the wait of a forwarded write for
// its commit point to be applied here when it is one step away.
func BenchmarkWaitAppliedOneStep(b *testing.B) {
	l := &steppingLocal{closed: make(chan struct{})}
	close(l.closed)
	be := NewBackend(BackendConfig{Local: l, Roles: newFakeRoles(nil, 0), Clock: clock.Real()})
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := be.waitApplied(ctx, l.applied+1, time.Second); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFormatRequestID measures naming a forwarded write (once per
// forwarded write): member ids and sequences are large numbers.
func BenchmarkFormatRequestID(b *testing.B) {
	id := engine.RequestID{Member: 0x8e2c_91f0_3a7b_d415, Seq: randomSeq()}
	b.ReportAllocs()
	for b.Loop() {
		if s := formatRequestID(id); len(s) < 3 {
			b.Fatal(s)
		}
		id.Seq++
	}
}

// A request id reads back as it was written, up to the largest numbers.
func TestRequestIDReadsBackAsWritten(t *testing.T) {
	for _, id := range []engine.RequestID{{Member: 0, Seq: 0}, {Member: 7, Seq: 1 << 62}, {Member: ^uint64(0), Seq: ^uint64(0)}} {
		if got, ok := parseRequestID(formatRequestID(id)); !ok || got != id {
			t.Fatalf("%+v reads back as %+v (%v)", id, got, ok)
		}
	}
}

// instantKV is a Primary's KV service that answers every Put at once.
type instantKV struct{ *pb.UnimplementedKVServer }

func (instantKV) Put(context.Context, *pb.PutRequest) (*pb.PutResponse, error) {
	return &pb.PutResponse{Header: &pb.ResponseHeader{Revision: 2}}, nil
}

// appliedLocal has applied everything: a forwarded write waits for
// nothing after its answer.
type appliedLocal struct{ Local }

func (appliedLocal) CommittedIndex() uint64 { return 1 << 62 }

// countingNet counts the writes to every connection it dials or accepts:
// on TCP, each is a syscall and, for the peer, a wake-up.
type countingNet struct {
	peer.Network
	writes *atomic.Int64
}

func (n countingNet) Dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := n.Network.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return countingConn{c, n.writes}, nil
}

func (n countingNet) Listen(addr string) (net.Listener, error) {
	l, err := n.Network.Listen(addr)
	if err != nil {
		return nil, err
	}
	return countingListener{l, n.writes}, nil
}

type countingListener struct {
	net.Listener
	writes *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{c, l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// groupKV is a Primary's KV service that answers Puts in groups, as the
// engine's group commit does: a Put waits for the committer, which
// answers every Put that arrived meanwhile at once.
type groupKV struct {
	*pb.UnimplementedKVServer
	mu    sync.Mutex
	round chan struct{}
	wake  chan struct{}
}

func newGroupKV() *groupKV {
	return &groupKV{round: make(chan struct{}), wake: make(chan struct{}, 1)}
}

func (g *groupKV) Put(ctx context.Context, _ *pb.PutRequest) (*pb.PutResponse, error) {
	g.mu.Lock()
	round := g.round
	g.mu.Unlock()
	select {
	case g.wake <- struct{}{}:
	default:
	}
	select {
	case <-round:
		return &pb.PutResponse{Header: &pb.ResponseHeader{Revision: 2}}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// commit answers a round of Puts each time one is waiting, until stop.
func (g *groupKV) commit(stop <-chan struct{}) {
	for {
		select {
		case <-g.wake:
		case <-stop:
			return
		}
		g.mu.Lock()
		round := g.round
		g.round = make(chan struct{})
		g.mu.Unlock()
		close(round)
	}
}

// countMessages counts the messages a server's streams send and receive.
func countMessages(sent, recv *atomic.Int64) grpc.ServerOption {
	return grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		return h(srv, countingStream{ss, sent, recv})
	})
}

type countingStream struct {
	grpc.ServerStream
	sent, recv *atomic.Int64
}

func (s countingStream) SendMsg(m any) error {
	s.sent.Add(1)
	return s.ServerStream.SendMsg(m)
}

func (s countingStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil {
		s.recv.Add(1)
	}
	return err
}

// BenchmarkForwardedPuts measures 64 clients' puts forwarded by a replica
// to a Primary that answers at once (instant) or in groups, as its group
// commit does (group), over the in-memory network: as one etcd call each
// (what an older Primary gets) and over the Forward stream, and one
// client's puts one at a time over the stream (lone). writes/op
// counts the connection writes of both sides (syscalls on TCP); on the
// stream, batches/op and replies/op count its messages each way.
func BenchmarkForwardedPuts(b *testing.B) {
	for _, tc := range []struct {
		name          string
		stream, group bool
		// lone: one client writing one put at a time (the put-seq row),
		// where every hop of a write is on its latency.
		lone bool
	}{{"unary", false, false, false}, {"stream", true, false, false}, {"stream-group", true, true, false}, {"stream-lone", true, false, true}} {
		stream := tc.stream
		b.Run(tc.name, func(b *testing.B) {
			var writes, sentMsgs, recvMsgs atomic.Int64
			mn := memnet.New()
			defer mn.Close()
			info := &netsyv1.NodeInfo{NodeId: "p", MemberId: 10, PeerAddr: "p:2380"}
			g := peer.NewServer(grpc.ChainUnaryInterceptor(CommitIndexInterceptor(func() uint64 { return 1 })),
				countMessages(&sentMsgs, &recvMsgs))
			var kv ForwardKV = instantKV{}
			if tc.group {
				gkv := newGroupKV()
				stop := make(chan struct{})
				defer close(stop)
				go gkv.commit(stop)
				kv = gkv
			}
			pb.RegisterKVServer(g, instantKV{})
			if stream {
				netsyv1.RegisterForwardServer(g, NewForwardServer(ForwardServerConfig{KV: kv, Committed: func() uint64 { return 1 }}))
			}
			l, err := countingNet{mn.Host("p"), &writes}.Listen(info.PeerAddr)
			if err != nil {
				b.Fatal(err)
			}
			srv := peer.Serve(g, l)
			defer srv.Close()
			pool := peer.NewPool(countingNet{mn.Host("r"), &writes})
			defer pool.Close()
			be := NewBackend(BackendConfig{Local: appliedLocal{}, Roles: newFakeRoles(info, 5), Conn: pool.Conn, Clock: clock.Real()})
			defer be.Close()
			req := &pb.PutRequest{Key: []byte("key"), Value: make([]byte, 256)}
			if _, err := be.Put(context.Background(), req); err != nil {
				b.Fatal(err)
			}
			writes.Store(0)
			sentMsgs.Store(0)
			recvMsgs.Store(0)
			b.ReportAllocs()
			if tc.lone {
				b.ResetTimer()
				for range b.N {
					if _, err := be.Put(context.Background(), req); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(writes.Load())/float64(b.N), "writes/op")
				return
			}
			b.SetParallelism(max(64/runtime.GOMAXPROCS(0), 1))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := be.Put(context.Background(), req); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(writes.Load())/float64(b.N), "writes/op")
			if stream {
				b.ReportMetric(float64(recvMsgs.Load())/float64(b.N), "batches/op")
				b.ReportMetric(float64(sentMsgs.Load())/float64(b.N), "replies/op")
			}
		})
	}
}
