package replica

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/engine/enginetest"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// The resolve tests forward a write to Primary p1 (term 5), which goes
// away with it in flight; p2 (term 6) takes over and this node follows it
// (the test appends and commits what p2's log holds). The write's outcome
// is then learned from p2's log: the client never sees p1's failure.

// resolveWorld is p1 and p2, and the node "r" (applied through index 2:
// g1, then k=old at revision 3), p1 named Primary.
type resolveWorld struct {
	w      *world
	p1, p2 *fakePrimary
	n      *backendNode
	// ids are the request ids p1 received, in order.
	ids chan engine.RequestID
}

func newResolveWorld(t *testing.T, p1Answer func(ctx context.Context) error) *resolveWorld {
	rw := &resolveWorld{w: newWorld(t), ids: make(chan engine.RequestID, 8)}
	rw.p1 = rw.w.servePrimary("p1", 10)
	rw.p1.put = func(ctx context.Context, _ int, _ *pb.PutRequest) (*pb.PutResponse, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		id, ok := parseRequestID(firstOf(md.Get(RequestIDHeader)))
		if !ok {
			t.Errorf("the forwarded put carried no request id: %v", md)
		}
		rw.ids <- id
		return nil, p1Answer(ctx)
	}
	rw.p2 = rw.w.servePrimary("p2", 11)
	rw.n = rw.w.startBackend(rw.p1.info, 1)
	rw.followEntry(t, &netsyv1.Entry{Index: 2, Revision: 3, Term: 5, Ops: []*netsyv1.Op{{Key: []byte("k"), Value: []byte("old")}}})
	return rw
}

// followEntry appends e to the node's log and commits it, as following p2
// does.
func (rw *resolveWorld) followEntry(t *testing.T, e *netsyv1.Entry) {
	t.Helper()
	if err := rw.n.eng.Follow(context.Background(), e.Term, []*netsyv1.Entry{e}); err != nil {
		t.Fatal(err)
	}
	rw.n.apply(t, e.Index)
}

// takeOver names p2 Primary; p2 answers ReadIndex at index (Active).
func (rw *resolveWorld) takeOver(index uint64) {
	rw.p2.readIndex = func(context.Context, int) (*netsyv1.ReadIndexResponse, error) {
		return &netsyv1.ReadIndexResponse{Index: index, PrimaryTerm: 6}, nil
	}
	rw.n.roles.set(rw.p2.info, 6)
}

func (rw *resolveWorld) put(r *pb.PutRequest) <-chan outcome[*pb.PutResponse] {
	return async(func() (*pb.PutResponse, error) { return rw.n.b.Put(context.Background(), r) })
}

// p1's ways of going away with the write in flight.
var p1Failures = []struct {
	name   string
	answer func(context.Context) error
}{
	// The process died: the connection broke under the call.
	{"connection broke", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }},
	// It stepped down with the entry logged but not committed.
	{"leader changed", func(context.Context) error { return rpctypes.ErrGRPCLeaderChanged }},
	// It timed the write out waiting for durability.
	{"request timed out", func(context.Context) error { return rpctypes.ErrGRPCTimeout }},
}

// breakP1 makes p1's failure happen: for a broken connection, the network
// between r and p1 breaks.
func (rw *resolveWorld) breakP1(name string) {
	if name == "connection broke" {
		rw.w.net.Partition("r", "p1")
		rw.w.net.Heal("r", "p1")
	}
}

// p1 logged and committed the write (or logged it, and p2 kept it at its
// promotion) and then went away: the write is answered from p2's log with
// the response p1 would have given (prev_kv included), and is never sent
// again.
func TestBackendForwardedWriteInNextPrimaryLogAnsweredFromLog(t *testing.T) {
	for _, f := range p1Failures {
		t.Run(f.name, func(t *testing.T) {
			rw := newResolveWorld(t, f.answer)
			res := rw.put(&pb.PutRequest{Key: []byte("k"), Value: []byte("v"), PrevKv: true})
			id := <-rw.ids
			// p2's log holds the write, committed at its promotion.
			rw.followEntry(t, &netsyv1.Entry{Index: 3, Revision: 4, Term: 5,
				Ops:       []*netsyv1.Op{{Key: []byte("k"), Value: []byte("v")}},
				RequestId: &netsyv1.RequestID{Member: id.Member, Seq: id.Seq}})
			rw.takeOver(3)
			rw.breakP1(f.name)
			o := await(t, "the write", res)
			if o.err != nil {
				t.Fatalf("the write whose Primary died: %v, want it answered from the next Primary's log", o.err)
			}
			if o.v.Header.GetRevision() != 4 || o.v.PrevKv == nil || string(o.v.PrevKv.Value) != "old" || o.v.PrevKv.ModRevision != 3 {
				t.Fatalf("rebuilt response %v, want revision 4 and prev_kv old@3", o.v)
			}
			if c1, c2 := rw.p1.count("Put"), rw.p2.count("Put"); c1 != 1 || c2 != 0 {
				t.Fatalf("the write went %d times to p1 and %d to p2: want once in all", c1, c2)
			}
		})
	}
}

// p1 never logged the write (or logged it and p2 cut it): p2's log, final
// once it is Active, lacks it, so the write is sent to p2 once, under the
// same request id, and p2's answer is the client's.
func TestBackendForwardedWriteAbsentFromNextPrimaryLogResentOnce(t *testing.T) {
	for _, f := range p1Failures {
		t.Run(f.name, func(t *testing.T) {
			rw := newResolveWorld(t, f.answer)
			var resent []engine.RequestID
			rw.p2.put = func(ctx context.Context, _ int, r *pb.PutRequest) (*pb.PutResponse, error) {
				md, _ := metadata.FromIncomingContext(ctx)
				id, _ := parseRequestID(firstOf(md.Get(RequestIDHeader)))
				resent = append(resent, id)
				return &pb.PutResponse{Header: &pb.ResponseHeader{Revision: 4}}, nil
			}
			res := rw.put(&pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
			id := <-rw.ids
			rw.takeOver(2)
			rw.breakP1(f.name)
			o := await(t, "the write", res)
			if o.err != nil || o.v.Header.GetRevision() != 4 {
				t.Fatalf("the write: %v, %v; want p2's answer to the resent write", o.v, o.err)
			}
			if c1 := rw.p1.count("Put"); c1 != 1 || len(resent) != 1 || resent[0] != id {
				t.Fatalf("p1 got %d puts, p2 got ids %v; want one each, p2's under id %v", c1, resent, id)
			}
		})
	}
}

// While no Primary takes over, the write waits (bounded) and then fails
// with etcd's "request timed out", never the transport's text naming a
// peer address, and is never sent again.
func TestBackendForwardedWriteUnresolvedFailsWithEtcdError(t *testing.T) {
	rw := newResolveWorld(t, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() })
	res := rw.put(&pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
	<-rw.ids
	rw.breakP1("connection broke")
	waitFor(t, "the write", func() bool { rw.w.clk.Advance(100 * time.Millisecond); return len(res) > 0 })
	o := <-res
	if !errors.Is(o.err, engine.ErrTimeout) && !errors.Is(o.err, engine.ErrLeaderChanged) && !errors.Is(o.err, engine.ErrNoLeader) {
		t.Fatalf("unresolved write: %v; want etcd's request timed out, leader changed or no leader", o.err)
	}
	if strings.Contains(o.err.Error(), "p1:2380") && !errors.Is(o.err, engine.ErrTimeout) && !errors.Is(o.err, engine.ErrLeaderChanged) {
		t.Fatalf("the error is transport text: %v", o.err)
	}
	if c := rw.p1.count("Put"); c != 1 {
		t.Fatalf("p1 got %d puts, want 1", c)
	}
}

// A Primary that already holds the id (the first sending is pending or
// committed there) refuses it as a duplicate: the node then answers from
// the log, never applying it twice.
func TestBackendDuplicateRefusalAnsweredFromLog(t *testing.T) {
	rw := newResolveWorld(t, func(context.Context) error {
		return peer.Error(codes.AlreadyExists, peer.ReasonDuplicateRequest, engine.ErrDuplicateRequest.Error())
	})
	// p1 is the Primary still, and has committed the first sending at 3.
	rw.p1.readIndex = readIndexAt(3)
	res := rw.put(&pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
	id := <-rw.ids
	rw.followEntry(t, &netsyv1.Entry{Index: 3, Revision: 4, Term: 5,
		Ops:       []*netsyv1.Op{{Key: []byte("k"), Value: []byte("v")}},
		RequestId: &netsyv1.RequestID{Member: id.Member, Seq: id.Seq}})
	o := await(t, "the write", res)
	if o.err != nil || o.v.Header.GetRevision() != 4 {
		t.Fatalf("the write refused as a duplicate: %v, %v; want it answered from the log at revision 4", o.v, o.err)
	}
}

// The rebuilt DeleteRange and Txn responses are what the Primary answered:
// deleted counts and prev_kvs, the branch taken and its responses.
func TestBackendRebuildsDeleteAndTxnResponses(t *testing.T) {
	rw := newResolveWorld(t, func(context.Context) error { return nil })
	b := rw.n.b
	// Entry 3: a txn on k (value "old") took its failure branch: it
	// deleted k (with prev_kv) after reading it.
	rw.followEntry(t, &netsyv1.Entry{Index: 3, Revision: 4, Term: 5,
		Ops: []*netsyv1.Op{{Type: netsyv1.Op_DELETE, Key: []byte("k")}}, RequestId: &netsyv1.RequestID{Member: 2, Seq: 9}, TxnPath: []byte{0}})
	lr, found, _ := rw.n.eng.LookupRequest(engine.RequestID{Member: 2, Seq: 9})
	if !found {
		t.Fatal("the logged request is not found")
	}
	txn := &pb.TxnRequest{
		Compare: []*pb.Compare{{Key: []byte("k"), Target: pb.Compare_VALUE, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_Value{Value: []byte("x")}}},
		Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k"), Value: []byte("y")}}}},
		Failure: []*pb.RequestOp{
			{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("k")}}},
			{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("k"), PrevKv: true}}},
		},
	}
	tr, err := b.rebuildTxn(context.Background(), txn, lr)
	if err != nil {
		t.Fatal(err)
	}
	rr := tr.Responses[0].GetResponseRange()
	dr := tr.Responses[1].GetResponseDeleteRange()
	if tr.Succeeded || tr.Header.Revision != 4 || len(rr.GetKvs()) != 1 || string(rr.Kvs[0].Value) != "old" ||
		dr.GetDeleted() != 1 || string(dr.PrevKvs[0].Value) != "old" {
		t.Fatalf("rebuilt txn %v", tr)
	}
	d, err := b.rebuildDelete(context.Background(), &pb.DeleteRangeRequest{Key: []byte("k"), PrevKv: true}, lr)
	if err != nil || d.Deleted != 1 || string(d.PrevKvs[0].Value) != "old" || d.Header.Revision != 4 {
		t.Fatalf("rebuilt delete %v, %v", d, err)
	}
	// A txn that reads after it writes cannot be rebuilt: leader changed.
	txn.Failure[0], txn.Failure[1] = txn.Failure[1], txn.Failure[0]
	if _, err := b.rebuildTxn(context.Background(), txn, lr); !errors.Is(err, engine.ErrLeaderChanged) {
		t.Fatalf("read-after-write txn: %v, want leader changed", err)
	}
}

// activeRoles is this node as the Active Primary.
type activeRoles struct{ *fakeRoles }

func (activeRoles) Active() bool { return true }

// On the Primary's peer port, a forwarded write's request id reaches the
// engine (CommitIndexInterceptor) and its entry keeps it; the same id sent
// again is refused with the DUPLICATE_REQUEST reason on the wire, and is
// not applied again.
func TestPeerPortKeepsRequestIDAndRefusesDuplicate(t *testing.T) {
	w := newWorld(t)
	eng, err := engine.Open(engine.Config{Storage: &enginetest.MemStorage{}, Clock: w.clk, Logger: testLogger(t, "p"), ClusterID: 1, MemberID: 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	b := NewBackend(BackendConfig{Local: eng, Roles: activeRoles{newFakeRoles(nil, 5)}, Clock: w.clk})
	icpt := CommitIndexInterceptor(eng.CommittedIndex)
	id := engine.RequestID{Member: 2, Seq: 77}
	call := func() error {
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs(RequestIDHeader, formatRequestID(id)))
		_, err := icpt(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/etcdserverpb.KV/Put"}, func(ctx context.Context, _ any) (any, error) {
			return b.Put(ctx, &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
		})
		return err
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	rev := eng.CurrentRevision()
	if lr, ok, _ := eng.LookupRequest(id); !ok || lr.Revision != rev {
		t.Fatalf("the entry of the forwarded put: %+v, %v; want it found at revision %d", lr, ok, rev)
	}
	err = call()
	if peer.ReasonOf(err) != peer.ReasonDuplicateRequest || status.Code(err) != codes.AlreadyExists {
		t.Fatalf("the same id again: %v; want AlreadyExists with reason DUPLICATE_REQUEST", err)
	}
	if got := eng.CurrentRevision(); got != rev {
		t.Fatalf("revision moved from %d to %d: applied twice", rev, got)
	}
}

// switchRoles is this node ("r", member 2) as the Active Primary until the
// test names another.
type switchRoles struct {
	*fakeRoles
	active atomic.Bool
}

func (r *switchRoles) Active() bool { return r.active.Load() }

// stepDownLocal is this node's engine, whose Put answers with the error
// the test sets after running before (what happened meanwhile).
type stepDownLocal struct {
	Local
	err    error
	before func()
}

func (l *stepDownLocal) Put(context.Context, *pb.PutRequest) (*pb.PutResponse, error) {
	l.before()
	return nil, l.err
}

// A write on the Active Primary whose engine stepped down with it pending
// ("leader changed") is resolved like a forwarded one: found in the next
// Primary's log, it is answered from there and not sent again. Any other
// error of its own engine (object storage unavailable) is the client's.
func TestBackendLocalStepDownResolvedFromNextPrimaryLog(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		resolve bool
	}{
		{"leader changed", engine.ErrLeaderChanged, true},
		{"storage unavailable", engine.ErrUnavailable, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rw := newResolveWorld(t, func(context.Context) error { return nil })
			self := &netsyv1.NodeInfo{NodeId: "r", MemberId: 2, PeerAddr: "r:2380"}
			roles := &switchRoles{fakeRoles: newFakeRoles(self, 5)}
			roles.active.Store(true)
			rw.p2.readIndex = func(context.Context, int) (*netsyv1.ReadIndexResponse, error) {
				return &netsyv1.ReadIndexResponse{Index: 3, PrimaryTerm: 6}, nil
			}
			var b *Backend
			local := &stepDownLocal{Local: rw.n.eng, err: tc.err}
			local.before = func() {
				// The entry reached p2, which kept it at its promotion; this
				// node now follows p2.
				rw.followEntry(t, &netsyv1.Entry{Index: 3, Revision: 4, Term: 5,
					Ops:       []*netsyv1.Op{{Key: []byte("k"), Value: []byte("v")}},
					RequestId: &netsyv1.RequestID{Member: 2, Seq: b.seq.Load()}})
				roles.active.Store(false)
				roles.set(rw.p2.info, 6)
			}
			b = NewBackend(BackendConfig{Local: local, Roles: roles, Clock: rw.w.clk, Conn: rw.n.b.cfg.Conn})
			o := await(t, "the write", async(func() (*pb.PutResponse, error) {
				return b.Put(context.Background(), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
			}))
			switch {
			case tc.resolve && (o.err != nil || o.v.Header.GetRevision() != 4):
				t.Fatalf("the write: %v, %v; want it answered from p2's log at revision 4", o.v, o.err)
			case !tc.resolve && !errors.Is(o.err, tc.err):
				t.Fatalf("the write: %v, %v; want the engine's own error %v", o.v, o.err, tc.err)
			}
			if c := rw.p2.count("Put"); c != 0 {
				t.Fatalf("p2 got %d puts, want none", c)
			}
		})
	}
}

// A linearizable read whose read index the Primary never answers (it died
// with the call in flight) fails with etcd's retryable "leader changed",
// never the transport's text.
func TestBackendReadIndexLostIsLeaderChanged(t *testing.T) {
	rw := newResolveWorld(t, func(context.Context) error { return nil })
	entered := make(chan struct{}, 1)
	rw.p1.readIndex = func(ctx context.Context, _ int) (*netsyv1.ReadIndexResponse, error) {
		entered <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}
	res := async(func() (*pb.RangeResponse, error) { return rw.n.b.Range(context.Background(), get("k")) })
	<-entered
	rw.breakP1("connection broke")
	o := await(t, "the read", res)
	if !errors.Is(o.err, engine.ErrLeaderChanged) {
		t.Fatalf("the read whose read index was lost: %v, %v; want leader changed", o.v, o.err)
	}
}

// An answer the Primary gave after evaluating the request, decoded into
// the engine's error by the forwarding code (LeaseRenew's "requested
// lease not found"), is the request's outcome, not an unknown one: it
// reaches the client as it is, never as "leader changed" (seen with
// etcdctl lease keep-alive on a revoked lease through a replica).
func TestDecodedPrimaryAnswerIsAKnownOutcome(t *testing.T) {
	if unknownOutcome(engine.ErrLeaseNotFound) {
		t.Fatal("ErrLeaseNotFound counted as an unknown outcome")
	}
	for _, err := range []error{engine.ErrLeaderChanged, status.Error(codes.Unavailable, "connection reset")} {
		if !unknownOutcome(err) {
			t.Fatalf("%v not counted as an unknown outcome", err)
		}
	}
}
