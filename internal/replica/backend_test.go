package replica

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/engine/enginetest"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// The Backend tests run a replica's Backend over a real follower engine
// (whose applied index the test moves with CommitTo) and fake Primaries
// on the in-memory network: each answers ReadIndex and the etcd KV
// service as the test says and counts every call it receives. Nothing
// sleeps; the read-index wait runs on the world's fake clock.

// fakeRoles is the cluster as the Backend sees it: this node ("r",
// member 2) is never the Active Primary; the test names the Primary.
type fakeRoles struct {
	mu      sync.Mutex
	primary *netsyv1.NodeInfo
	term    uint64
	changed chan struct{}
	// active makes this node the Active Primary (activate).
	active bool
}

// activate makes this node the Active Primary and wakes whoever waits for
// a change.
func (r *fakeRoles) activate() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.active = true
	close(r.changed)
	r.changed = make(chan struct{})
}

func newFakeRoles(p *netsyv1.NodeInfo, term uint64) *fakeRoles {
	return &fakeRoles{primary: p, term: term, changed: make(chan struct{})}
}

// set names another Primary and wakes whoever waits for a change.
func (r *fakeRoles) set(p *netsyv1.NodeInfo, term uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.primary, r.term = p, term
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *fakeRoles) Primary() (*netsyv1.NodeInfo, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.primary, r.term
}

func (r *fakeRoles) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

func (r *fakeRoles) Active() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active
}

func (r *fakeRoles) ConfirmLinearizable(context.Context) error {
	if r.Active() {
		return nil
	}
	return engine.ErrNotPrimary
}
func (r *fakeRoles) Members() []*netsyv1.NodeInfo { return nil }
func (r *fakeRoles) Identity() (uint64, uint64)   { return 1, 2 }

func (r *fakeRoles) MoveLeader(context.Context, uint64) error { return nil }
func (r *fakeRoles) RemoveMember(context.Context, uint64) ([]*netsyv1.NodeInfo, error) {
	return nil, nil
}

// fakePrimary is a Primary's peer port: Node.ReadIndex and the etcd KV
// service answer through the funcs the test sets (nil: Unimplemented),
// and every call to any method is counted before it is answered.
type fakePrimary struct {
	netsyv1.UnimplementedNodeServer
	pb.UnimplementedKVServer
	info      *netsyv1.NodeInfo
	readIndex func(ctx context.Context, call int) (*netsyv1.ReadIndexResponse, error)
	put       func(ctx context.Context, call int, r *pb.PutRequest) (*pb.PutResponse, error)

	// commit is the commit index the Primary's answers carry (its
	// CommitIndexInterceptor), 0 until a test sets it.
	commit atomic.Uint64

	mu    sync.Mutex
	calls map[string]int // by method name
	// batches is how many requests each ForwardBatch received carried;
	// fwdIDs the request ids of the forwarded requests evaluated.
	batches []int
	fwdIDs  []engine.RequestID
	// fs is its ForwardServer, when it serves the stream.
	fs *ForwardServer
}

// note counts a call of method and returns its number.
func (p *fakePrimary) note(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[method]++
	return p.calls[method]
}

// countBatches notes every ForwardBatch the Primary receives.
func (p *fakePrimary) countBatches(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, batchCounter{ss, p})
}

type batchCounter struct {
	grpc.ServerStream
	p *fakePrimary
}

func (c batchCounter) RecvMsg(m any) error {
	err := c.ServerStream.RecvMsg(m)
	if b, ok := m.(*netsyv1.ForwardBatch); ok && err == nil {
		c.p.mu.Lock()
		c.p.batches = append(c.p.batches, len(b.Requests))
		c.p.mu.Unlock()
	}
	return err
}

// fakeForwardKV is the fake Primary's KV as its ForwardServer calls it:
// counted and numbered as the etcd calls are.
type fakeForwardKV struct{ p *fakePrimary }

func (k fakeForwardKV) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	return k.p.Put(context.WithValue(ctx, callKey{}, k.p.note("Put")), r)
}

func (k fakeForwardKV) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	k.p.note("DeleteRange")
	return k.p.UnimplementedKVServer.DeleteRange(ctx, r)
}

func (k fakeForwardKV) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	k.p.note("Txn")
	return k.p.UnimplementedKVServer.Txn(ctx, r)
}

type callKey struct{}

// servePrimary serves a Primary of an older version: the etcd calls
// only, no Forward stream (writes reach it by the unary fallback).
func (w *world) servePrimary(id string, memberID uint64) *fakePrimary {
	w.t.Helper()
	return w.serve(id, memberID, false)
}

func (w *world) serve(id string, memberID uint64, forward bool) *fakePrimary {
	w.t.Helper()
	p := &fakePrimary{info: &netsyv1.NodeInfo{NodeId: id, MemberId: memberID, PeerAddr: id + ":2380"}, calls: map[string]int{}}
	g := peer.NewServer(grpc.ChainStreamInterceptor(p.countBatches), grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		p.mu.Lock()
		m := path.Base(info.FullMethod)
		p.calls[m]++
		n := p.calls[m]
		p.mu.Unlock()
		return h(context.WithValue(ctx, callKey{}, n), req)
	}, CommitIndexInterceptor(p.commit.Load)))
	netsyv1.RegisterNodeServer(g, p)
	pb.RegisterKVServer(g, p)
	if forward {
		fs := NewForwardServer(ForwardServerConfig{KV: fakeForwardKV{p}, Committed: p.commit.Load, Clock: w.clk})
		fs.withID = func(ctx context.Context, id engine.RequestID) context.Context {
			p.mu.Lock()
			p.fwdIDs = append(p.fwdIDs, id)
			p.mu.Unlock()
			return engine.WithRequestID(ctx, id)
		}
		netsyv1.RegisterForwardServer(g, fs)
		p.fs = fs
	}
	l, err := w.net.Host(id).Listen(p.info.PeerAddr)
	if err != nil {
		w.t.Fatal(err)
	}
	srv := peer.Serve(g, l)
	w.t.Cleanup(srv.Close)
	return p
}

// count is how many calls of method (or of any method, for "") arrived.
func (p *fakePrimary) count(method string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if method != "" {
		return p.calls[method]
	}
	n := 0
	for _, c := range p.calls {
		n += c
	}
	return n
}

func (p *fakePrimary) ReadIndex(ctx context.Context, _ *netsyv1.ReadIndexRequest) (*netsyv1.ReadIndexResponse, error) {
	if p.readIndex == nil {
		return p.UnimplementedNodeServer.ReadIndex(ctx, nil)
	}
	return p.readIndex(ctx, ctx.Value(callKey{}).(int))
}

func (p *fakePrimary) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if p.put == nil {
		return p.UnimplementedKVServer.Put(ctx, r)
	}
	return p.put(ctx, ctx.Value(callKey{}).(int), r)
}

// readIndexAt is a Primary that confirms index at once.
func readIndexAt(index uint64) func(context.Context, int) (*netsyv1.ReadIndexResponse, error) {
	return func(context.Context, int) (*netsyv1.ReadIndexResponse, error) {
		return &netsyv1.ReadIndexResponse{Index: index, PrimaryTerm: 5}, nil
	}
}

// watchedLocal is the local engine, noting each time the Backend takes a
// commit notification: a linearizable read does so only once it waits
// for the engine to apply further.
type watchedLocal struct {
	Local
	waits atomic.Int32
}

func (l *watchedLocal) CommitNotify() <-chan struct{} {
	l.waits.Add(1)
	return l.Local.CommitNotify()
}

// backendNode is the node under test: host "r" on the world's network.
type backendNode struct {
	eng   *engine.Engine
	local *watchedLocal
	roles *fakeRoles
	conns atomic.Int32 // connections the Backend asked for
	net   *dialLog
	b     *Backend
}

// dialLog is the node's network, counting dials that were refused.
type dialLog struct {
	peer.Network
	refused atomic.Int32
}

func (d *dialLog) Dial(ctx context.Context, addr string) (net.Conn, error) {
	c, err := d.Network.Dial(ctx, addr)
	if peer.Refused(err) {
		d.refused.Add(1)
	}
	return c, err
}

// startBackend runs a Backend over a follower engine that holds and has
// applied entries 1..applied (entry i writes g<i>, at revision i+1), with
// p named Primary.
func (w *world) startBackend(p *netsyv1.NodeInfo, applied uint64) *backendNode {
	w.t.Helper()
	n := &backendNode{roles: newFakeRoles(p, 5)}
	var err error
	n.eng, err = engine.Open(engine.Config{Storage: &enginetest.MemStorage{}, Clock: w.clk, Logger: testLogger(w.t, "r"), ClusterID: 1, MemberID: 2, Follower: true})
	if err != nil {
		w.t.Fatal(err)
	}
	n.local = &watchedLocal{Local: n.eng}
	n.net = &dialLog{Network: w.net.Host("r")}
	pool := peer.NewPool(n.net)
	n.b = NewBackend(BackendConfig{
		Local: n.local, Roles: n.roles, Clock: w.clk,
		Conn: func(addr string) (*grpc.ClientConn, error) { n.conns.Add(1); return pool.Conn(addr) },
	})
	w.t.Cleanup(func() {
		n.b.Close()
		pool.Close()
		n.eng.Close()
	})
	n.hold(w.t, applied)
	n.apply(w.t, applied)
	return n
}

// hold appends entries up to index to the local log without applying them.
func (n *backendNode) hold(t *testing.T, index uint64) {
	t.Helper()
	last, _, _ := n.eng.LastAppended()
	var es []*netsyv1.Entry
	for i := last + 1; i <= index; i++ {
		es = append(es, ent(i, 5))
	}
	if err := n.eng.Follow(context.Background(), 5, es); err != nil {
		t.Fatal(err)
	}
}

// apply lets the local engine apply through index.
func (n *backendNode) apply(t *testing.T, index uint64) {
	t.Helper()
	if err := n.eng.CommitTo(context.Background(), index); err != nil {
		t.Fatal(err)
	}
	if got := n.eng.CommittedIndex(); got != index {
		t.Fatalf("the local engine applied through %d, want %d", got, index)
	}
}

// queued is how many reads wait for the next ReadIndex call.
func (n *backendNode) queued() int {
	n.b.readIdx.mu.Lock()
	defer n.b.readIdx.mu.Unlock()
	return len(n.b.readIdx.waiting)
}

type outcome[T any] struct {
	v   T
	err error
}

// async runs f in a goroutine the test owns: every test receives its
// outcome before it ends.
func async[T any](f func() (T, error)) <-chan outcome[T] {
	ch := make(chan outcome[T], 1)
	go func() {
		v, err := f()
		ch <- outcome[T]{v, err}
	}()
	return ch
}

// await receives an outcome; the wall-clock bound only turns a hang into
// a failure.
func await[T any](t *testing.T, what string, ch <-chan outcome[T]) outcome[T] {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-clock.Real().After(20 * time.Second):
		t.Fatalf("waiting for %s", what)
		panic("unreachable")
	}
}

func get(key string) *pb.RangeRequest { return &pb.RangeRequest{Key: []byte(key)} }

// wantValue fails unless o is a successful read of value at revision rev.
func wantValue(t *testing.T, what string, o outcome[*pb.RangeResponse], value string, rev int64) {
	t.Helper()
	if o.err != nil {
		t.Fatalf("%s: %v", what, o.err)
	}
	if len(o.v.Kvs) != 1 || string(o.v.Kvs[0].Value) != value || o.v.Header.GetRevision() != rev {
		t.Fatalf("%s: got %v at revision %d, want %q at revision %d", what, o.v.Kvs, o.v.Header.GetRevision(), value, rev)
	}
}

// Linearizable reads that arrive while a ReadIndex call is in flight do
// not take its answer (the call began before them, so its commit point
// may predate a write they must see); they share exactly one call that
// begins after it.
func TestBackendReadIndexBatching(t *testing.T) {
	w := newWorld(t)
	p := w.servePrimary("p", 10)
	release := make(chan struct{})
	p.readIndex = func(ctx context.Context, _ int) (*netsyv1.ReadIndexResponse, error) {
		select {
		case <-release:
			return &netsyv1.ReadIndexResponse{Index: 2, PrimaryTerm: 5}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	n := w.startBackend(p.info, 2)
	ctx := context.Background()
	read := func() (*pb.RangeResponse, error) { return n.b.Range(ctx, get("g2")) }

	first := async(read)
	waitFor(t, "the first ReadIndex call", func() bool { return p.count("ReadIndex") == 1 })
	const later = 5
	var reads []<-chan outcome[*pb.RangeResponse]
	for range later {
		reads = append(reads, async(read))
	}
	waitFor(t, "the later reads to queue", func() bool { return n.queued() >= later || p.count("ReadIndex") > 1 })
	if c := p.count("ReadIndex"); c != 1 {
		t.Fatalf("%d ReadIndex calls while the first was in flight, want 1", c)
	}

	release <- struct{}{}
	wantValue(t, "the first read", await(t, "the first read", first), "v", 3)
	answered := func() int {
		k := 0
		for _, ch := range reads {
			k += len(ch)
		}
		return k
	}
	waitFor(t, "a second ReadIndex call (or a later read answered by the first)", func() bool {
		return p.count("ReadIndex") == 2 || answered() > 0
	})
	if k := answered(); k > 0 {
		t.Fatalf("%d reads were answered by the ReadIndex call that began before they arrived", k)
	}

	release <- struct{}{}
	for i, ch := range reads {
		wantValue(t, fmt.Sprintf("later read %d", i), await(t, "a later read", ch), "v", 3)
	}
	if c := p.count("ReadIndex"); c != 2 {
		t.Fatalf("%d ReadIndex calls for two batches, want 2", c)
	}
	if c := p.count(""); c != 2 {
		t.Fatalf("the Primary got %d calls, want only the 2 ReadIndex calls", c)
	}
}

// A linearizable read is not answered until the local engine has applied
// the commit point the Primary confirmed; then it sees that state.
func TestBackendLinearizableReadWaitsForApply(t *testing.T) {
	w := newWorld(t)
	p := w.servePrimary("p", 10)
	p.readIndex = readIndexAt(3)
	n := w.startBackend(p.info, 1)
	n.hold(t, 3) // held, not applied: g3 is not readable here yet

	res := async(func() (*pb.RangeResponse, error) { return n.b.Range(context.Background(), get("g3")) })
	waitFor(t, "the read to wait for apply", func() bool { return n.local.waits.Load() > 0 || len(res) > 0 })
	if len(res) > 0 {
		t.Fatalf("a linearizable read was answered at applied index 1 before reaching the read index 3: %+v", <-res)
	}

	n.apply(t, 2)
	waitFor(t, "the read to wait again", func() bool { return n.local.waits.Load() > 1 || len(res) > 0 })
	if len(res) > 0 {
		t.Fatalf("a linearizable read was answered at applied index 2 before reaching the read index 3: %+v", <-res)
	}

	n.apply(t, 3)
	wantValue(t, "the read", await(t, "the read", res), "v", 4)
	if c := p.count(""); c != 1 {
		t.Fatalf("the Primary got %d calls, want the one ReadIndex", c)
	}
}

// Serializable reads (Range and read-only Txn) are answered from local
// state at once, even behind the Primary, without a word to it.
func TestBackendSerializableReadsAreLocal(t *testing.T) {
	w := newWorld(t)
	p := w.servePrimary("p", 10)
	p.readIndex = readIndexAt(3) // what a linearizable read would wait for
	n := w.startBackend(p.info, 1)
	n.hold(t, 3)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel) // a read that went to the Primary ends with the test

	// Each read runs aside, so one that waited for a read index (which
	// this node never applies) fails the test instead of hanging it.
	local := func(what string, read func() (*pb.RangeResponse, error)) *pb.RangeResponse {
		t.Helper()
		res := async(read)
		waitFor(t, what, func() bool { return len(res) > 0 || p.count("") > 0 })
		if c := p.count(""); c > 0 {
			t.Fatalf("%s: asked the Primary (%d calls)", what, c)
		}
		o := <-res
		if o.err != nil {
			t.Fatalf("%s: %v", what, o.err)
		}
		return o.v
	}
	for _, k := range []string{"g1", "g3"} {
		resp := local("serializable Range "+k, func() (*pb.RangeResponse, error) {
			return n.b.Range(ctx, &pb.RangeRequest{Key: []byte(k), Serializable: true})
		})
		if want := map[string]int{"g1": 1, "g3": 0}[k]; len(resp.Kvs) != want || resp.Header.GetRevision() != 2 {
			t.Fatalf("serializable Range %s: %d kvs at revision %d, want %d at the local revision 2", k, len(resp.Kvs), resp.Header.GetRevision(), want)
		}
	}
	txn := local("serializable Txn", func() (*pb.RangeResponse, error) {
		resp, err := n.b.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{
			RequestRange: &pb.RangeRequest{Key: []byte("g1"), Serializable: true}}}}})
		if err != nil {
			return nil, err
		}
		return resp.Responses[0].GetResponseRange(), nil
	})
	if len(txn.Kvs) != 1 || string(txn.Kvs[0].Value) != "v" {
		t.Fatalf("serializable Txn: %v", txn.Kvs)
	}
	if c, k := p.count(""), n.conns.Load(); c != 0 || k != 0 {
		t.Fatalf("serializable reads made %d calls to the Primary over %d connections, want none", c, k)
	}
}

// A linearizable read whose read index this node does not apply within
// ReadIndexWait fails with ErrTimeout (etcd's "request timed out"); it is
// neither forwarded to the Primary nor asked again.
func TestBackendReadIndexWaitTimesOut(t *testing.T) {
	w := newWorld(t)
	p := w.servePrimary("p", 10)
	p.readIndex = readIndexAt(3)
	n := w.startBackend(p.info, 1) // the default ReadIndexWait: 1 s
	n.hold(t, 3)

	res := async(func() (*pb.RangeResponse, error) { return n.b.Range(context.Background(), get("g3")) })
	waitFor(t, "the read to wait for apply", func() bool { return n.local.waits.Load() > 0 || len(res) > 0 })
	// The read armed its ReadIndexWait timer before it began to wait; the
	// engine's lease ticker is the only other timer and never disarms.
	armed := w.clk.Pending()
	w.clk.Advance(time.Second - time.Millisecond)
	if w.clk.Pending() != armed || len(res) > 0 {
		t.Fatal("the read's wait ended before ReadIndexWait")
	}
	w.clk.Advance(time.Millisecond)
	if w.clk.Pending() != armed-1 {
		t.Fatal("the read's wait did not end at ReadIndexWait")
	}
	o := await(t, "the read to time out", res)
	if !errors.Is(o.err, engine.ErrTimeout) {
		t.Fatalf("a read that never reached its read index: %v, %v; want ErrTimeout", o.v, o.err)
	}
	if c, ri := p.count(""), p.count("ReadIndex"); c != 1 || ri != 1 {
		t.Fatalf("the Primary got %d calls (%d ReadIndex), want exactly the one ReadIndex: the read is not forwarded", c, ri)
	}
}

// A write the target refused without evaluating it (it is not, or no
// longer, the Primary; or nothing listens at its address) waits for the
// next Primary and is sent there exactly once.
func TestBackendForwardRefusedWriteGoesToNextPrimary(t *testing.T) {
	for _, tc := range []struct {
		name   string
		listen bool // the old Primary's process is alive and answers "not leader"
	}{
		{"not leader", true},
		{"connection refused", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			old := &fakePrimary{info: &netsyv1.NodeInfo{NodeId: "p1", MemberId: 10, PeerAddr: "p1:2380"}, calls: map[string]int{}}
			if tc.listen {
				old = w.servePrimary("p1", 10)
				old.put = func(context.Context, int, *pb.PutRequest) (*pb.PutResponse, error) {
					return nil, rpctypes.ErrGRPCNotLeader
				}
			}
			next := w.servePrimary("p2", 11)
			next.put = func(_ context.Context, _ int, r *pb.PutRequest) (*pb.PutResponse, error) {
				if string(r.Key) != "k" {
					return nil, fmt.Errorf("unexpected key %q", r.Key)
				}
				return &pb.PutResponse{Header: &pb.ResponseHeader{Revision: 42}}, nil
			}
			n := w.startBackend(old.info, 1)
			base := w.clk.Pending()

			res := async(func() (*pb.PutResponse, error) {
				return n.b.Put(context.Background(), &pb.PutRequest{Key: []byte("k"), Value: []byte("v")})
			})
			// Once the refusal is out, the only timer the Backend can arm is
			// its 50 ms retry: armed, the Backend waits for the roles to
			// change (or that timer).
			if tc.listen {
				waitFor(t, "the old Primary's refusal", func() bool { return old.count("Put") == 1 || len(res) > 0 })
			} else {
				waitFor(t, "the refused dial", func() bool { return n.net.refused.Load() > 0 || len(res) > 0 })
			}
			waitFor(t, "the Backend to wait", func() bool { return w.clk.Pending() > base || len(res) > 0 })
			if len(res) > 0 {
				t.Fatalf("the refused write returned instead of waiting for the next Primary: %+v", <-res)
			}
			n.roles.set(next.info, 6)
			o := await(t, "the write", res)
			if o.err != nil || o.v.Header.GetRevision() != 42 {
				t.Fatalf("the write: %v, %v; want the next Primary's answer", o.v, o.err)
			}
			if a, b := old.count(""), next.count(""); a != btoi(tc.listen) || b != 1 {
				t.Fatalf("the old Primary got %d calls, the next %d; want %d and exactly 1", a, b, btoi(tc.listen))
			}
		})
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// A write forwarded to the Primary is answered OK only once this node has
// applied it (the Primary's commit index, from its trailer): a node that
// cannot apply it within ApplyWait answers ErrTimeout, never an OK
// its client's next serializable read on this node would contradict.
func TestBackendForwardedWriteWaitsUntilApplied(t *testing.T) {
	w := newWorld(t)
	p := w.servePrimary("p", 10)
	p.commit.Store(3)
	p.put = func(context.Context, int, *pb.PutRequest) (*pb.PutResponse, error) {
		return &pb.PutResponse{Header: &pb.ResponseHeader{Revision: 4}}, nil
	}
	n := w.startBackend(p.info, 1)
	n.hold(t, 3)
	put := func() <-chan outcome[*pb.PutResponse] {
		return async(func() (*pb.PutResponse, error) {
			return n.b.Put(context.Background(), &pb.PutRequest{Key: []byte("g3"), Value: []byte("v")})
		})
	}

	// Applied while it waits: OK, and the read on this node sees it.
	res := put()
	waitFor(t, "the write to wait for apply", func() bool { return n.local.waits.Load() > 0 || len(res) > 0 })
	if len(res) > 0 {
		t.Fatalf("the write was answered before this node applied the Primary's commit index: %+v", <-res)
	}
	n.apply(t, 3)
	if o := await(t, "the write", res); o.err != nil || o.v.Header.GetRevision() != 4 {
		t.Fatalf("the write, applied here while it waited: %v, %v; want the Primary's answer", o.v, o.err)
	}
	wantValue(t, "the serializable read after the write", outcome[*pb.RangeResponse]{}.of(n.b.Range(context.Background(), &pb.RangeRequest{Key: []byte("g3"), Serializable: true})), "v", 4)

	// Applied late, past a read's ReadIndexWait (1 s) but within
	// ApplyWait (5 s): the write happened, so it is answered OK, not
	// with an error that leaves its client guessing (a replica that
	// stalled for a moment at 1 M keys turned one put of a million into
	// "request timed out").
	p.commit.Store(4)
	n.hold(t, 4)
	waits := n.local.waits.Load()
	res = put()
	waitFor(t, "the write to wait for apply", func() bool { return n.local.waits.Load() > waits || len(res) > 0 })
	w.clk.Advance(1500 * time.Millisecond)
	n.apply(t, 4)
	if o := await(t, "the write applied late", res); o.err != nil || o.v.Header.GetRevision() != 4 {
		t.Fatalf("the write, applied here 1.5 s after the Primary's answer: %v, %v; want the Primary's answer", o.v, o.err)
	}

	// Never applied (this node does not follow): an error, not OK.
	p.commit.Store(5)
	waits = n.local.waits.Load()
	res = put()
	waitFor(t, "the write to wait for apply", func() bool { return n.local.waits.Load() > waits || len(res) > 0 })
	w.clk.Advance(5 * time.Second)
	o := await(t, "the write to time out", res)
	if !errors.Is(o.err, engine.ErrTimeout) {
		t.Fatalf("a write this node never applied: %v, %v; want ErrTimeout", o.v, o.err)
	}
	if c := p.count("Put"); c != 3 {
		t.Fatalf("the Primary got %d puts, want 3: a write that timed out waiting to apply is not sent again", c)
	}
}

func (outcome[T]) of(v T, err error) outcome[T] { return outcome[T]{v, err} }

// A replica answers LeaseTimeToLive and LeaseLeases from its own state
// after a read index, not by asking the Primary: the remaining time is
// the Primary's last checkpoint counted down on this node's clock.
func TestBackendLeaseTimeToLiveIsLocal(t *testing.T) {
	w := newWorld(t)
	p := w.servePrimary("p", 10) // serves no Lease service: forwarding would fail
	p.readIndex = readIndexAt(3)
	n := w.startBackend(p.info, 1)
	const id = 0x42
	lease := func(i uint64, e *netsyv1.Entry) *netsyv1.Entry {
		e.Index, e.Revision, e.Term = i, 2, 5 // key-less: at entry 1's revision
		return e
	}
	if err := n.eng.Follow(context.Background(), 5, []*netsyv1.Entry{
		lease(2, &netsyv1.Entry{LeaseGrants: []*netsyv1.LeaseGrant{{Id: id, Ttl: 30}}}),
		lease(3, &netsyv1.Entry{LeaseCheckpoints: []*netsyv1.LeaseCheckpoint{{Id: id, RemainingMs: 27_000}}}),
	}); err != nil {
		t.Fatal(err)
	}
	n.apply(t, 3)
	w.clk.Advance(2 * time.Second)

	ttl := await(t, "TimeToLive", async(func() (*pb.LeaseTimeToLiveResponse, error) {
		return n.b.LeaseTimeToLive(context.Background(), &pb.LeaseTimeToLiveRequest{ID: id})
	}))
	if ttl.err != nil {
		t.Fatal(ttl.err)
	}
	if ttl.v.TTL != 25 || ttl.v.GrantedTTL != 30 {
		t.Fatalf("TimeToLive on the replica: %d of %d s left, want 25 of 30 (the checkpoint's 27 s less the 2 s since)", ttl.v.TTL, ttl.v.GrantedTTL)
	}
	ls := await(t, "Leases", async(func() (*pb.LeaseLeasesResponse, error) {
		return n.b.LeaseLeases(context.Background(), &pb.LeaseLeasesRequest{})
	}))
	if ls.err != nil || len(ls.v.Leases) != 1 || ls.v.Leases[0].ID != id {
		t.Fatalf("Leases on the replica: %+v, %v", ls.v, ls.err)
	}
	if c, ri := p.count(""), p.count("ReadIndex"); c != ri || ri == 0 {
		t.Fatalf("the Primary got %d calls, %d of them ReadIndex: want only read indexes", c, ri)
	}
}

// A linearizable read that arrives while this node is named Primary but is
// still Starting waits for it to be Active and is answered then, from its
// own state. Before the fix the read found this node Active only after
// the roles changed, took that as "not the Primary" and waited for a
// further change (up to PrimaryWait, 5 s): a restarted node's first reads
// hung until their deadline.
func TestBackendReadWhileStartingAnsweredOnceActive(t *testing.T) {
	w := newWorld(t)
	self := &netsyv1.NodeInfo{NodeId: "r", MemberId: 2, PeerAddr: "r:2380"}
	n := w.startBackend(self, 3)
	base := w.clk.Pending()
	res := async(func() (*pb.RangeResponse, error) { return n.b.Range(context.Background(), get("g3")) })
	// The read waits for a Primary it can ask (PrimaryWait's timer).
	if err := w.clk.BlockUntil(t.Context(), base+1); err != nil {
		t.Fatal(err)
	}
	n.roles.activate()
	wantValue(t, "the read", await(t, "the read", res), "v", 4)
}

// hookLocal calls onNotify when the Backend takes a commit notification
// and hands it ch.
type hookLocal struct {
	Local
	applied  uint64
	ch       chan struct{}
	onNotify func(*hookLocal)
}

func (l *hookLocal) CommittedIndex() uint64 { return l.applied }
func (l *hookLocal) CommitNotify() <-chan struct{} {
	l.onNotify(l)
	return l.ch
}

// waitApplied reuses its timers: one that fired just as its wait ended in
// success (the commit point was applied first) must not end the next
// wait, which still has its whole time, at once.
func TestWaitAppliedReusedTimerDoesNotCutTheNextWaitShort(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := clock.NewFake(time.Unix(1_700_000_000, 0))
		l := &hookLocal{ch: make(chan struct{})}
		close(l.ch)
		be := NewBackend(BackendConfig{Local: l, Roles: newFakeRoles(nil, 0), Clock: clk})
		// First wait: the timer fires (the clock passes its second) and
		// the index is applied before the wait looks at the timer.
		l.onNotify = func(l *hookLocal) { clk.Advance(2 * time.Second); l.applied = 1 }
		if err := be.waitApplied(t.Context(), 1, time.Second); err != nil {
			t.Fatal(err)
		}
		// Second wait: index 2 is applied once the wait blocked, with no
		// time passing: it must succeed.
		commit := make(chan struct{})
		l.onNotify = func(l *hookLocal) { l.ch = commit }
		go func() {
			synctest.Wait()
			l.onNotify = func(*hookLocal) {}
			l.applied = 2
			close(commit)
		}()
		if err := be.waitApplied(t.Context(), 2, time.Second); err != nil {
			t.Fatalf("a wait with its whole second ahead failed at once: %v", err)
		}
	})
}

// A linearizable read issued while the Primary is still Starting (it
// refuses the read index unevaluated, as "not leader") is answered within
// readRetryMax of the Primary turning Active, however long Starting took;
// it is never answered before. Turning Active changes nothing this node's
// roles see (the Cluster State named the Primary already), so a read that
// waited for a role change sat until PrimaryWait or its deadline.
func TestBackendReadWhilePrimaryStartsIsAnsweredSoonOnceActive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		p := w.servePrimary("p", 10)
		var active atomic.Bool
		p.readIndex = func(ctx context.Context, _ int) (*netsyv1.ReadIndexResponse, error) {
			if !active.Load() {
				// What a Starting Primary's peer port answers.
				return nil, status.Error(codes.Unavailable, engine.ErrNotPrimary.Error())
			}
			return &netsyv1.ReadIndexResponse{Index: 2, PrimaryTerm: 5}, nil
		}
		n := w.startBackend(p.info, 2)
		res := async(func() (*pb.RangeResponse, error) { return n.b.Range(context.Background(), get("g2")) })
		// Starting lasts 3 s of this node's clock.
		for range 300 {
			synctest.Wait()
			w.clk.Advance(10 * time.Millisecond)
		}
		synctest.Wait()
		if len(res) > 0 {
			t.Fatalf("a linearizable read was answered while the Primary refused every read index: %+v", <-res)
		}
		asked := p.count("ReadIndex")
		active.Store(true)
		w.clk.Advance(readRetryMax)
		synctest.Wait()
		if len(res) == 0 {
			t.Fatalf("the read was not answered %v after the Primary turned Active (%d read indexes asked while Starting, %d since)", readRetryMax, asked, p.count("ReadIndex")-asked)
		}
		wantValue(t, "the read", <-res, "v", 3)
		if asked > 3000/10 {
			t.Fatalf("%d read indexes asked in 3 s of Starting: more often than every 10 ms", asked)
		}
	})
}

// Asking again is bounded: a read whose read index the Primary refuses
// unevaluated for PrimaryWait (5 s) with no change of roles fails with
// the refusal then, neither earlier nor at its own deadline.
func TestBackendReadRefusedForPrimaryWaitFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		p := w.servePrimary("p", 10)
		p.readIndex = func(context.Context, int) (*netsyv1.ReadIndexResponse, error) {
			return nil, status.Error(codes.Unavailable, engine.ErrNotPrimary.Error())
		}
		n := w.startBackend(p.info, 2)
		res := async(func() (*pb.RangeResponse, error) { return n.b.Range(context.Background(), get("g2")) })
		for range 499 {
			synctest.Wait()
			w.clk.Advance(10 * time.Millisecond)
		}
		synctest.Wait()
		if len(res) > 0 {
			t.Fatalf("the read ended 4.99 s into its PrimaryWait: %+v", <-res)
		}
		w.clk.Advance(10 * time.Millisecond)
		synctest.Wait()
		if len(res) == 0 {
			t.Fatal("the read still waits past PrimaryWait")
		}
		if o := <-res; !notEvaluated(o.err) {
			t.Fatalf("a read refused for PrimaryWait: %v, %v; want the refusal", o.v, o.err)
		}
	})
}

// A Primary's refusal of a read index or write before evaluating it is
// known by its reason, whatever its text says.
func TestNotEvaluatedByReasonNotText(t *testing.T) {
	err := peer.Error(codes.Unavailable, peer.ReasonNotPrimary, "netsy: this node is no longer Active")
	if !notEvaluated(err) {
		t.Errorf("a NOT_PRIMARY refusal with other text is taken as evaluated: %v", err)
	}
	if notEvaluated(status.Error(codes.Unavailable, "netsy: this node is no longer Active")) {
		t.Error("an Unavailable error without the reason is taken as unevaluated")
	}
}
