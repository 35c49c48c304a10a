package replica

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/engine/enginetest"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// The Forward tests run the replica's Backend against fake Primaries that
// serve the Forward stream (the real ForwardServer over the fake's KV),
// on the in-memory network. A test holds a stream's send goroutine (hold)
// to make writes queue behind it.

// holdSends returns a lock that, while held, stops n's streams before
// they take their queue.
func holdSends(n *backendNode) *sync.Mutex {
	var hold sync.Mutex
	n.b.fwd.beforeSend = func() {
		hold.Lock()
		//nolint:staticcheck // an empty critical section: waiting is the point
		hold.Unlock()
	}
	return &hold
}

// forwardQueued is how many writes wait to be sent on n's stream to addr.
func (n *backendNode) forwardQueued(addr string) int {
	conn, err := n.b.cfg.Conn(addr)
	if err != nil {
		return -1
	}
	f := n.b.fwd
	f.mu.Lock()
	s := f.streams[conn]
	f.mu.Unlock()
	if s == nil {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// putAnswersByKey answers a put of key "k<i>" at revision 100+i.
func putAnswersByKey(_ context.Context, _ int, r *pb.PutRequest) (*pb.PutResponse, error) {
	i, err := strconv.Atoi(string(r.Key[1:]))
	if err != nil {
		return nil, err
	}
	return &pb.PutResponse{Header: &pb.ResponseHeader{Revision: int64(100 + i)}}, nil
}

func (p *fakePrimary) batchSizes() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.batches)
}

// Writes that queue while the stream is busy go out together, in one
// message, each answered with its own response; a lone write goes at
// once. All of them share one stream, and every one carries its own
// request id.
func TestForwardBatchesQueuedWrites(t *testing.T) {
	w := newWorld(t)
	p := w.serve("p", 10, true)
	p.put = putAnswersByKey
	n := w.startBackend(p.info, 1)
	hold := holdSends(n)
	put := func(i int) <-chan outcome[*pb.PutResponse] {
		return async(func() (*pb.PutResponse, error) {
			return n.b.Put(context.Background(), &pb.PutRequest{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v")})
		})
	}

	if o := await(t, "the lone write", put(0)); o.err != nil || o.v.Header.GetRevision() != 100 {
		t.Fatalf("the lone write: %v, %v", o.v, o.err)
	}
	hold.Lock()
	const queued = 8
	var res []<-chan outcome[*pb.PutResponse]
	for i := 1; i <= queued; i++ {
		res = append(res, put(i))
	}
	waitFor(t, "the writes to queue", func() bool { return n.forwardQueued(p.info.PeerAddr) == queued })
	hold.Unlock()
	for i, ch := range res {
		if o := await(t, "a queued write", ch); o.err != nil || o.v.Header.GetRevision() != int64(101+i) {
			t.Fatalf("queued write k%d: %v, %v; want its own answer at revision %d", i+1, o.v, o.err, 101+i)
		}
	}
	if got := p.batchSizes(); !slices.Equal(got, []int{1, queued}) {
		t.Fatalf("the Primary received batches of %v writes, want [1 %d]", got, queued)
	}
	if c := p.count("Put"); c != queued+1 {
		t.Fatalf("the Primary evaluated %d puts, want %d", c, queued+1)
	}
	p.mu.Lock()
	ids := map[engine.RequestID]bool{}
	for _, id := range p.fwdIDs {
		if id.Member != 2 {
			t.Errorf("request id %+v does not name this node (member 2)", id)
		}
		ids[id] = true
	}
	p.mu.Unlock()
	if len(ids) != queued+1 {
		t.Fatalf("%d distinct request ids for %d writes", len(ids), queued+1)
	}
	if o := n.b.fwd.opened.Load(); o != 1 {
		t.Fatalf("%d streams opened, want 1", o)
	}
}

// When the stream breaks, a write it had sent fails with an error whose
// outcome is unknown (write() resolves it by its request id), and a write
// still waiting to be sent fails as never evaluated (it may simply go
// again).
func TestForwardBrokenStreamFailsSentAsUnknownAndQueuedAsNotEvaluated(t *testing.T) {
	w := newWorld(t)
	p := w.serve("p", 10, true)
	p.put = func(ctx context.Context, _ int, _ *pb.PutRequest) (*pb.PutResponse, error) {
		<-ctx.Done() // in flight until the stream ends
		return nil, ctx.Err()
	}
	n := w.startBackend(p.info, 1)
	hold := holdSends(n)
	conn, err := n.b.cfg.Conn(p.info.PeerAddr)
	if err != nil {
		t.Fatal(err)
	}
	send := func(seq uint64) <-chan outcome[*netsyv1.ForwardReply] {
		data, err := (&pb.PutRequest{Key: []byte("k"), Value: []byte("v")}).Marshal()
		if err != nil {
			t.Fatal(err)
		}
		return async(func() (*netsyv1.ForwardReply, error) {
			return n.b.fwd.do(context.Background(), conn, 5, &netsyv1.ForwardRequest{
				RequestMember: 2, RequestSeq: seq, Kind: netsyv1.ForwardKind_FORWARD_PUT, Request: data})
		})
	}

	sent := send(1)
	waitFor(t, "the Primary to evaluate the first write", func() bool { return p.count("Put") == 1 })
	hold.Lock()
	queued := send(2)
	waitFor(t, "the second write to queue", func() bool { return n.forwardQueued(p.info.PeerAddr) == 1 })
	w.net.Partition("r", "p")
	w.net.Heal("r", "p")
	o1 := await(t, "the sent write", sent)
	o2 := await(t, "the queued write", queued)
	hold.Unlock()
	if o1.err == nil || notEvaluated(o1.err) || !unknownOutcome(o1.err) {
		t.Fatalf("the write in flight when the stream broke: %v, %v; want an unknown outcome", o1.v, o1.err)
	}
	if o2.err == nil || !notEvaluated(o2.err) {
		t.Fatalf("the write never sent: %v, %v; want it not evaluated", o2.v, o2.err)
	}
	if c := p.count("Put"); c != 1 {
		t.Fatalf("the Primary evaluated %d writes, want only the one sent", c)
	}
}

// A Primary that steps down in the middle of a batch answers the writes
// it evaluated and refuses the rest unevaluated ("not leader"): those
// wait for the next Primary and are sent there, on a stream of its own.
func TestForwardPrimaryStepsDownMidBatch(t *testing.T) {
	w := newWorld(t)
	p1 := w.serve("p1", 10, true)
	p1.put = func(ctx context.Context, call int, r *pb.PutRequest) (*pb.PutResponse, error) {
		if string(r.Key) != "k1" {
			return nil, rpctypes.ErrGRPCNotLeader
		}
		return putAnswersByKey(ctx, call, r)
	}
	p2 := w.serve("p2", 11, true)
	p2.put = func(ctx context.Context, call int, r *pb.PutRequest) (*pb.PutResponse, error) {
		resp, err := putAnswersByKey(ctx, call, r)
		if resp != nil {
			resp.Header.Revision += 100
		}
		return resp, err
	}
	n := w.startBackend(p1.info, 1)
	hold := holdSends(n)
	hold.Lock()
	var res []<-chan outcome[*pb.PutResponse]
	for i := 1; i <= 3; i++ {
		res = append(res, async(func() (*pb.PutResponse, error) {
			return n.b.Put(context.Background(), &pb.PutRequest{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v")})
		}))
	}
	waitFor(t, "the writes to queue", func() bool { return n.forwardQueued(p1.info.PeerAddr) == 3 })
	hold.Unlock()
	waitFor(t, "p1 to evaluate the batch", func() bool { return p1.count("Put") == 3 })
	n.roles.set(p2.info, 6)
	for i, want := range []int64{101, 202, 203} {
		if o := await(t, "a write", res[i]); o.err != nil || o.v.Header.GetRevision() != want {
			t.Fatalf("write k%d: %v, %v; want revision %d", i+1, o.v, o.err, want)
		}
	}
	if got := p1.batchSizes(); !slices.Equal(got, []int{3}) {
		t.Fatalf("p1 received batches of %v writes, want one of 3", got)
	}
	if a, b := p1.count("Put"), p2.count("Put"); a != 3 || b != 2 {
		t.Fatalf("p1 evaluated %d puts and p2 %d, want 3 and the 2 p1 refused", a, b)
	}
}

// Over the stream, a request id the Primary already holds is refused as
// the etcd call would be: AlreadyExists with reason DUPLICATE_REQUEST
// (the error's details cross the stream), and it is not applied again.
func TestForwardDuplicateRequestIDRefused(t *testing.T) {
	w := newWorld(t)
	eng, err := engine.Open(engine.Config{Storage: &enginetest.MemStorage{}, Clock: w.clk, Logger: testLogger(t, "p"), ClusterID: 1, MemberID: 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	peerBackend := NewBackend(BackendConfig{Local: eng, Roles: activeRoles{newFakeRoles(nil, 5)}, Clock: w.clk})
	g := peer.NewServer()
	netsyv1.RegisterForwardServer(g, NewForwardServer(ForwardServerConfig{KV: peerBackend, Committed: eng.CommittedIndex, Clock: w.clk}))
	l, err := w.net.Host("p").Listen("p:2380")
	if err != nil {
		t.Fatal(err)
	}
	srv := peer.Serve(g, l)
	t.Cleanup(srv.Close)
	info := &netsyv1.NodeInfo{NodeId: "p", MemberId: 10, PeerAddr: "p:2380"}
	n := w.startBackend(info, 1)
	conn, err := n.b.cfg.Conn(info.PeerAddr)
	if err != nil {
		t.Fatal(err)
	}
	id := engine.RequestID{Member: 2, Seq: 77}
	req := &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}
	send := streamed(n.b, netsyv1.ForwardKind_FORWARD_PUT, req, func() *pb.PutResponse { return &pb.PutResponse{} }, nil)
	to := target{conn: conn, term: 5, id: id, named: true}

	resp, commit, ok, err := send(context.Background(), to)
	if err != nil || !ok || commit != eng.CommittedIndex() {
		t.Fatalf("the first send: %v, commit %d (%v), %v; want the response and commit index %d", resp, commit, ok, err, eng.CommittedIndex())
	}
	rev := eng.CurrentRevision()
	if lr, found, _ := eng.LookupRequest(id); !found || lr.Revision != rev || resp.Header.GetRevision() != rev {
		t.Fatalf("the entry of the forwarded put: %+v, %v, answered at %d; want it at revision %d", lr, found, resp.Header.GetRevision(), rev)
	}
	_, _, _, err = send(context.Background(), to)
	if peer.ReasonOf(err) != peer.ReasonDuplicateRequest || status.Code(err) != codes.AlreadyExists {
		t.Fatalf("the same id again: %v; want AlreadyExists with reason DUPLICATE_REQUEST", err)
	}
	if !unknownOutcome(err) || notEvaluated(err) {
		t.Fatalf("a duplicate refusal must leave the outcome to the log: %v", err)
	}
	if got := eng.CurrentRevision(); got != rev {
		t.Fatalf("revision moved from %d to %d: applied twice", rev, got)
	}
}

// A Primary of an older version, which does not serve the Forward stream,
// gets the writes as etcd calls; at the same term the node does not ask
// again, at a newer one it does.
func TestForwardFallsBackToEtcdCallsOnOlderPrimary(t *testing.T) {
	w := newWorld(t)
	p := w.servePrimary("p", 10)
	p.put = putAnswersByKey
	n := w.startBackend(p.info, 1)
	put := func(i int) {
		t.Helper()
		o := await(t, "a write", async(func() (*pb.PutResponse, error) {
			return n.b.Put(context.Background(), &pb.PutRequest{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v")})
		}))
		if o.err != nil || o.v.Header.GetRevision() != int64(100+i) {
			t.Fatalf("write k%d: %v, %v", i, o.v, o.err)
		}
	}
	put(1)
	put(2)
	if c, o := p.count("Put"), n.b.fwd.opened.Load(); c != 2 || o != 1 {
		t.Fatalf("%d etcd calls after %d stream attempts; want 2 after 1 (the term's answer is kept)", c, o)
	}
	n.roles.set(p.info, 6)
	put(3)
	if c, o := p.count("Put"), n.b.fwd.opened.Load(); c != 3 || o != 2 {
		t.Fatalf("%d etcd calls after %d stream attempts; want 3 after 2 (a new term asks again)", c, o)
	}
}

// Close ends the Backend's streams and their goroutines (and so the
// Primary's side of them); a write after Close still reaches the Primary,
// as an etcd call.
func TestBackendCloseEndsForwardStreams(t *testing.T) {
	w := newWorld(t)
	p := w.serve("p", 10, true)
	p.put = putAnswersByKey
	n := w.startBackend(p.info, 1)
	before := goleak.IgnoreCurrent()
	put := func(i int) outcome[*pb.PutResponse] {
		return await(t, "a write", async(func() (*pb.PutResponse, error) {
			return n.b.Put(context.Background(), &pb.PutRequest{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v")})
		}))
	}
	if o := put(1); o.err != nil {
		t.Fatal(o.err)
	}
	n.b.Close()
	if o := put(2); o.err != nil || o.v.Header.GetRevision() != 102 {
		t.Fatalf("a write after Close: %v, %v", o.v, o.err)
	}
	if c, b := p.count("Put"), p.batchSizes(); c != 2 || !slices.Equal(b, []int{1}) {
		t.Fatalf("the Primary evaluated %d puts from batches %v, want 2: one streamed, one etcd call", c, b)
	}
	conn, _ := n.b.cfg.Conn(p.info.PeerAddr)
	conn.Close() // the pool's connection goroutines are not the Backend's
	goleak.VerifyNone(t, before)
}

// A write whose client gave up while it waited for its turn is not sent,
// as an etcd call whose context ended is not.
func TestForwardDropsWritesWhoseClientGaveUpBeforeSending(t *testing.T) {
	w := newWorld(t)
	p := w.serve("p", 10, true)
	p.put = putAnswersByKey
	n := w.startBackend(p.info, 1)
	hold := holdSends(n)
	put := func(ctx context.Context, i int) <-chan outcome[*pb.PutResponse] {
		return async(func() (*pb.PutResponse, error) {
			return n.b.Put(ctx, &pb.PutRequest{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v")})
		})
	}
	if o := await(t, "the first write", put(context.Background(), 0)); o.err != nil {
		t.Fatal(o.err)
	}
	hold.Lock()
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := put(ctx, 1)
	waitFor(t, "the write to queue", func() bool { return n.forwardQueued(p.info.PeerAddr) == 1 })
	cancel()
	if o := await(t, "the write given up", gaveUp); o.err == nil {
		t.Fatalf("a write whose client gave up: %v", o.v)
	}
	kept := put(context.Background(), 2)
	waitFor(t, "the next write to queue", func() bool { return n.forwardQueued(p.info.PeerAddr) == 2 })
	hold.Unlock()
	if o := await(t, "the next write", kept); o.err != nil || o.v.Header.GetRevision() != 102 {
		t.Fatalf("the next write: %v, %v", o.v, o.err)
	}
	if b, c := p.batchSizes(), p.count("Put"); !slices.Equal(b, []int{1, 1}) || c != 2 {
		t.Fatalf("the Primary received batches %v and evaluated %d puts; want [1 1] and 2", b, c)
	}
}

// The Primary evaluates the writes of one batch concurrently (so they
// group-commit together, as separate etcd calls do): each of these puts
// answers only once all of them are being evaluated.
func TestForwardEvaluatesABatchConcurrently(t *testing.T) {
	w := newWorld(t)
	p := w.serve("p", 10, true)
	const batch = 6
	var arrived sync.WaitGroup
	arrived.Add(batch)
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	p.put = func(ctx context.Context, call int, r *pb.PutRequest) (*pb.PutResponse, error) {
		arrived.Done()
		select {
		case <-all:
			return putAnswersByKey(ctx, call, r)
		case <-clock.Real().After(10 * time.Second):
			return nil, fmt.Errorf("put %s: the batch's other writes were not evaluated meanwhile", r.Key)
		}
	}
	n := w.startBackend(p.info, 1)
	hold := holdSends(n)
	hold.Lock()
	var res []<-chan outcome[*pb.PutResponse]
	for i := range batch {
		res = append(res, async(func() (*pb.PutResponse, error) {
			return n.b.Put(context.Background(), &pb.PutRequest{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v")})
		}))
	}
	waitFor(t, "the writes to queue", func() bool { return n.forwardQueued(p.info.PeerAddr) == batch })
	hold.Unlock()
	for i, ch := range res {
		if o := await(t, "a write", ch); o.err != nil || o.v.Header.GetRevision() != int64(100+i) {
			t.Fatalf("write k%d: %v, %v", i, o.v, o.err)
		}
	}
	if b := p.batchSizes(); !slices.Equal(b, []int{batch}) {
		t.Fatalf("the Primary received batches %v, want one of %d", b, batch)
	}
}

// A burst of writes does not leave a worker per write on the Primary's
// side of the stream: at most maxIdleForwardWorkers stay once it is
// answered (found by review: 300 workers stayed after 300 writes).
func TestForwardWorkersLeftAfterABurstAreBounded(t *testing.T) {
	w := newWorld(t)
	p := w.serve("p", 10, true)
	const burst = 4 * maxIdleForwardWorkers
	var arrived sync.WaitGroup
	arrived.Add(burst)
	all := make(chan struct{})
	go func() { arrived.Wait(); close(all) }()
	p.put = func(ctx context.Context, call int, r *pb.PutRequest) (*pb.PutResponse, error) {
		arrived.Done()
		<-all // every write of the burst is evaluated at once
		return &pb.PutResponse{Header: &pb.ResponseHeader{Revision: 1}}, nil
	}
	n := w.startBackend(p.info, 1)
	var res []<-chan outcome[*pb.PutResponse]
	for i := range burst {
		res = append(res, async(func() (*pb.PutResponse, error) {
			return n.b.Put(context.Background(), &pb.PutRequest{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v")})
		}))
	}
	for _, ch := range res {
		if o := await(t, "a write of the burst", ch); o.err != nil {
			t.Fatal(o.err)
		}
	}
	waitFor(t, "the burst's extra workers to end", func() bool { return forwardWorkers() <= maxIdleForwardWorkers })
}

// forwardWorkers counts the goroutines evaluating (or waiting to
// evaluate) forwarded requests: Forward's second closure (its first is
// the reply sender).
func forwardWorkers() int {
	buf := make([]byte, 16<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "(*ForwardServer).Forward.func2(")
}

// deadlineCtx is a context whose deadline is a reading of a fake clock.
type deadlineCtx struct {
	context.Context
	at time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.at, true }

// A write's timeout_ms is what is left of its client's deadline when it
// is sent, not when it was queued: a write that waited in the queue must
// not outlive its client on the Primary (found by review: 1999 ms sent
// for a client with 799 ms left).
func TestForwardTimeoutCountsFromTheSend(t *testing.T) {
	w := newWorld(t)
	p := w.serve("p", 10, true)
	p.put = func(ctx context.Context, call int, r *pb.PutRequest) (*pb.PutResponse, error) {
		return &pb.PutResponse{Header: &pb.ResponseHeader{Revision: 1}}, nil
	}
	n := w.startBackend(p.info, 1)
	// The hook goes in before the stream's sender starts, which reads it
	// unlocked; an unlocked hold lets the first write through.
	hold := holdSends(n)
	if _, err := n.b.Put(context.Background(), &pb.PutRequest{Key: []byte("k0"), Value: []byte("v")}); err != nil {
		t.Fatal(err) // the stream is open
	}
	hold.Lock()
	ctx := deadlineCtx{Context: context.Background(), at: w.clk.Now().Add(2 * time.Second)}
	ch := async(func() (*pb.PutResponse, error) {
		return n.b.Put(ctx, &pb.PutRequest{Key: []byte("k1"), Value: []byte("v")})
	})
	waitFor(t, "the write to queue", func() bool { return n.forwardQueued(p.info.PeerAddr) == 1 })
	w.clk.Advance(1200 * time.Millisecond)
	conn, err := n.b.cfg.Conn(p.info.PeerAddr)
	if err != nil {
		t.Fatal(err)
	}
	n.b.fwd.mu.Lock()
	s := n.b.fwd.streams[conn]
	n.b.fwd.mu.Unlock()
	s.mu.Lock()
	queued := s.queue[0].req
	s.mu.Unlock()
	hold.Unlock()
	if o := await(t, "the queued write", ch); o.err != nil {
		t.Fatal(o.err)
	}
	if got := queued.TimeoutMs; got != 800 {
		t.Fatalf("timeout_ms %d for a client with 800 ms left when its write was sent, want 800", got)
	}
}

// bigPutKV answers every Put with a response too large for a peer message.
type bigPutKV struct{ ForwardKV }

func (bigPutKV) Put(context.Context, *pb.PutRequest) (*pb.PutResponse, error) {
	return &pb.PutResponse{Header: &pb.ResponseHeader{Revision: 9},
		PrevKv: &mvccpb.KeyValue{Key: []byte("k"), Value: make([]byte, peer.MaxMessageBytes)}}, nil
}

// A write the Primary applied whose answer does not fit a peer message is
// an unknown outcome to the forwarding node (which rebuilds the answer
// from its own log), never a failure its client would take for "not
// written" (found by review: ResourceExhausted for an applied write).
func TestForwardOversizedAnswerIsAnUnknownOutcome(t *testing.T) {
	s := NewForwardServer(ForwardServerConfig{KV: bigPutKV{}, Committed: func() uint64 { return 9 }})
	req, err := (&pb.PutRequest{Key: []byte("k"), Value: []byte("v"), PrevKv: true}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	reply := s.eval(t.Context(), &netsyv1.ForwardRequest{Seq: 1, Kind: netsyv1.ForwardKind_FORWARD_PUT, Request: req})
	if reply.Response != nil || reply.Status == nil {
		t.Fatalf("reply carries %d response bytes and status %v, want only a status", len(reply.Response), reply.Status)
	}
	if err := decodeStatus(reply.Status); !unknownOutcome(err) {
		t.Fatalf("answer %v is not an unknown outcome: the forwarding node would fail an applied write", err)
	}
}

// A write that finds the stream open, nobody sending and nothing in
// flight goes out from its own goroutine, waking nobody (a lone client's writes always do), and so
// does its reply from the Primary's worker that evaluated it; the writes
// that queue behind a sender still go out with it
// (TestForwardBatchesQueuedWrites).
func TestForwardWriteToAnIdleStreamIsSentByItsWriter(t *testing.T) {
	w := newWorld(t)
	p := w.serve("p", 10, true)
	p.put = putAnswersByKey
	n := w.startBackend(p.info, 1)
	put := func(i int) {
		t.Helper()
		resp, err := n.b.Put(context.Background(), &pb.PutRequest{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v")})
		if err != nil || resp.Header.GetRevision() != int64(100+i) {
			t.Fatalf("put k%d: %v, %v", i, resp, err)
		}
	}
	put(0) // opens the stream: its goroutine sends the first batch
	idle := func() bool {
		conn, err := n.b.cfg.Conn(p.info.PeerAddr)
		if err != nil {
			return false
		}
		n.b.fwd.mu.Lock()
		st := n.b.fwd.streams[conn]
		n.b.fwd.mu.Unlock()
		st.mu.Lock()
		defer st.mu.Unlock()
		return !st.sending
	}
	waitFor(t, "the stream's goroutine to find its queue empty", idle)
	const lone = 5
	for i := 1; i <= lone; i++ {
		put(i)
	}
	if got := n.b.fwd.writerSends.Load(); got != lone {
		t.Fatalf("writers sent %d messages themselves, want %d (one per lone write)", got, lone)
	}
	if got := p.batchSizes(); len(got) != lone+1 {
		t.Fatalf("the Primary received batches of %v writes, want %d of one", got, lone+1)
	}
	if o := n.b.fwd.opened.Load(); o != 1 {
		t.Fatalf("%d streams opened, want 1", o)
	}
	// On the Primary too: each lone write's reply went out from the
	// worker that evaluated it.
	if got := p.fs.workerSends.Load(); got != lone+1 {
		t.Fatalf("the Primary's workers sent %d replies themselves, want %d", got, lone+1)
	}
}

// A write that finds another in flight does not send itself: it is
// queued for the stream's goroutine, so no writer's send can wait on flow
// control (a Primary that stopped reading) past its client's deadline.
func TestForwardWriteWithAnotherInFlightIsSentByTheStream(t *testing.T) {
	w := newWorld(t)
	p := w.serve("p", 10, true)
	release := make(chan struct{})
	p.put = func(ctx context.Context, call int, r *pb.PutRequest) (*pb.PutResponse, error) {
		if string(r.Key) == "k1" {
			<-release
		}
		return putAnswersByKey(ctx, call, r)
	}
	n := w.startBackend(p.info, 1)
	put := func(i int) <-chan outcome[*pb.PutResponse] {
		return async(func() (*pb.PutResponse, error) {
			return n.b.Put(context.Background(), &pb.PutRequest{Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte("v")})
		})
	}
	if o := await(t, "the first write", put(0)); o.err != nil {
		t.Fatal(o.err)
	}
	conn, err := n.b.cfg.Conn(p.info.PeerAddr)
	if err != nil {
		t.Fatal(err)
	}
	n.b.fwd.mu.Lock()
	st := n.b.fwd.streams[conn]
	n.b.fwd.mu.Unlock()
	idle := func() bool {
		st.mu.Lock()
		defer st.mu.Unlock()
		return !st.sending
	}
	waitFor(t, "the stream's goroutine to find its queue empty", idle)
	held := put(1) // nothing in flight: its writer sends it, and it stays in flight
	waitFor(t, "k1 to reach the Primary", func() bool { return p.count("Put") == 2 })
	waitFor(t, "k1's writer to stop sending", idle)
	if got := n.b.fwd.writerSends.Load(); got != 1 {
		t.Fatalf("writers sent %d messages, want 1 (k1's)", got)
	}
	second := put(2)
	waitFor(t, "k2 to reach the Primary", func() bool { return p.count("Put") == 3 })
	if got := n.b.fwd.writerSends.Load(); got != 1 {
		t.Fatalf("writers sent %d messages, want still 1: k2 found k1 in flight and goes by the stream's goroutine", got)
	}
	close(release)
	for i, ch := range []<-chan outcome[*pb.PutResponse]{held, second} {
		if o := await(t, "a write", ch); o.err != nil || o.v.Header.GetRevision() != int64(101+i) {
			t.Fatalf("k%d: %v, %v", i+1, o.v, o.err)
		}
	}
}
