package replica

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/engine/enginetest"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/internal/primary"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// followerFor runs a Follower over eng as node self, on pool, with state
// as its heartbeat and sent told how sends go; the test owns eng.
func (w *world) followerFor(self string, eng FollowEngine, pool *peer.Pool, state func() *netsyv1.Heartbeat, sent func(error)) *Follower {
	w.t.Helper()
	f := NewFollower(FollowerConfig{
		Self: self, Engine: eng, Conn: pool.Conn, State: state, Sent: sent,
		CatchUp:           func(context.Context) error { return errors.New("no object storage in this test") },
		HeartbeatInterval: 500 * time.Millisecond,
		Clock:             w.clk, Logger: testLogger(w.t, self),
	})
	f.Start()
	w.t.Cleanup(func() {
		f.Close()
		pool.Close()
	})
	return f
}

// A Primary told of a newer Primary steps down on its own, after the
// Cluster State reached the Follower; the Follower still follows the new
// Primary once the step-down is over, with no further Cluster State (the
// paused-Primary report: it stayed "not following" until a restart).
func TestFollowStartsOnceThisNodeStepsDown(t *testing.T) {
	w := newWorld(t)
	old := w.startPrimary("old", &enginetest.MemStorage{}, 3)
	f := w.followerFor("old", old.eng, peer.NewPool(w.net.Host("old")), func() *netsyv1.Heartbeat {
		s, _ := old.role.State()
		return &netsyv1.Heartbeat{NodeId: "old", PrimaryState: s}
	}, nil)
	p2 := w.startPrimary("p2", &enginetest.MemStorage{}, 4)
	// The node learns of p2 (the Follower first: the order the wiring
	// hands it on does not matter) while its engine still writes.
	f.Observe(p2.state(4))
	waitFor(t, "the Follower to take the Cluster State", func() bool { return len(f.changed) == 0 })
	old.role.Observe(p2.state(4))
	waitFor(t, "the old Primary to step down", func() bool { s, _ := old.role.State(); return s == netsyv1.PrimaryState_REPLICA })
	p2.put(t, "x", "new")
	waitFor(t, "the old Primary to follow the new one", func() bool {
		w.clk.Advance(writerRecheck)
		resp, err := old.eng.Range(context.Background(), get("x"))
		return err == nil && len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) == "new"
	})
}

// While this node's Primary role still holds the log (its engine has
// stopped writing, but the role has not finished stepping down: the log
// still cuts what no Primary committed), the Follower opens no stream:
// an entry appended meanwhile would race the cut and fail the log for
// good. It follows once the role says Replica.
func TestFollowWaitsUntilThePrimaryRoleLetsGo(t *testing.T) {
	w := newWorld(t)
	p := w.startPrimary("p", &enginetest.MemStorage{}, 3)
	p.put(t, "k", "v")
	eng, err := engine.Open(engine.Config{Storage: &enginetest.MemStorage{}, Clock: w.clk, Logger: testLogger(t, "r"), ClusterID: 1, MemberID: 2, Follower: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	var state atomic.Int32
	state.Store(int32(netsyv1.PrimaryState_ACTIVE))
	var looked atomic.Int32
	f := w.followerFor("r", eng, peer.NewPool(w.net.Host("r")), func() *netsyv1.Heartbeat {
		looked.Add(1)
		return &netsyv1.Heartbeat{NodeId: "r", PrimaryState: netsyv1.PrimaryState(state.Load())}
	}, nil)
	f.Observe(p.state(3))
	// Each look is a decision not to follow yet; a Follower that followed
	// at once would hold the entry before its first look (it looks at its
	// state only to send a receipt).
	waitFor(t, "the Follower to look three times", func() bool { w.clk.Advance(writerRecheck); return looked.Load() >= 3 })
	if last, _, _ := eng.LastAppended(); last != 0 || replicaOf(p) != nil {
		t.Fatalf("the Follower followed while the Primary role held the log: local log ends at %d, the Primary's record %v", last, replicaOf(p))
	}
	state.Store(int32(netsyv1.PrimaryState_REPLICA))
	waitFor(t, "the Follower to follow", func() bool {
		w.clk.Advance(writerRecheck)
		return eng.CommittedIndex() == 1
	})
}

// failingStream fails the Follower's receipts and heartbeats while fail
// is above zero (each failure counts one down); the stream itself stays
// up, as a send that fails in a kernel buffer would leave it for a while.
type failingStream struct {
	grpc.ClientStream
	fail *atomic.Int32
}

func (s failingStream) SendMsg(m any) error {
	if r, ok := m.(*netsyv1.FollowRequest); ok && r.GetStart() == nil && s.fail.Add(-1) >= 0 {
		return errors.New("injected send failure")
	}
	return s.ClientStream.SendMsg(m)
}

// A receipt that fails to go out is retried at once on a new stream; only
// when the retry fails too is the node's health decision told (the seed's
// rule for Receipts, as for Heartbeats), and it is told again as soon as
// a send gets through.
func TestFollowSendFailureAfterRetryIsReported(t *testing.T) {
	w := newWorld(t)
	p := w.startPrimary("p", &enginetest.MemStorage{}, 3)
	p.put(t, "k0", "v")
	eng, err := engine.Open(engine.Config{Storage: &enginetest.MemStorage{}, Clock: w.clk, Logger: testLogger(t, "r"), ClusterID: 1, MemberID: 2, Follower: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	var fail atomic.Int32
	pool := peer.NewPool(w.net.Host("r"), grpc.WithChainStreamInterceptor(
		func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
			cs, err := streamer(ctx, desc, cc, method, opts...)
			return failingStream{cs, &fail}, err
		}))
	sent := make(chan error, 10)
	f := w.followerFor("r", eng, pool, func() *netsyv1.Heartbeat { return &netsyv1.Heartbeat{NodeId: "r"} }, func(err error) { sent <- err })
	f.Observe(p.state(3))
	if err := awaitSent(t, "the first receipt", sent); err != nil {
		t.Fatalf("the first receipt that got through was reported as %v", err)
	}
	receipted := func(i uint64) func() bool {
		return func() bool { rs := replicaOf(p); return rs != nil && rs.DurableIndex >= i }
	}
	waitFor(t, "the first receipt", receipted(1))

	// One failure cured by the retry: nothing to report. The test never
	// moves the clock here, so the retry is immediate (no backoff).
	fail.Store(1)
	p.put(t, "k1", "v")
	waitFor(t, "the retried receipt", receipted(2))
	if len(sent) > 0 {
		t.Fatalf("a failed receipt cured by its retry was reported: %v", <-sent)
	}

	// The send and its immediate retry both fail: reported once.
	fail.Store(1 << 20)
	p.put(t, "k2", "v")
	if err := awaitSent(t, "the failed receipt and retry", sent); err == nil {
		t.Fatal("a failed receipt and retry were reported as a success")
	} else {
		t.Logf("reported: %v", err)
	}

	// Sends get through again: reported at once, no restart.
	fail.Store(0)
	waitFor(t, "the recovery", func() bool {
		w.clk.Advance(100 * time.Millisecond) // the reconnect backoff
		return len(sent) > 0
	})
	if err := <-sent; err != nil {
		t.Fatalf("the recovery was reported as %v", err)
	}
	waitFor(t, "the receipt after the recovery", receipted(3))
}

// awaitSent receives what the Follower told Sent; the wall-clock bound
// only turns a hang into a failure.
func awaitSent(t *testing.T, what string, sent <-chan error) error {
	t.Helper()
	select {
	case err := <-sent:
		return err
	case <-clock.Real().After(20 * time.Second):
		t.Fatalf("waiting for %s to be reported", what)
		return nil
	}
}

// Initial's commit point takes the path every Commit takes: a replica that
// receives Initial and nothing after it has the committed revision and
// the compaction floor Initial carried (the entries it holds through the
// commit point, a compaction among them, are applied).
func TestFollowInitialAloneCommits(t *testing.T) {
	w := newWorld(t)
	init := &netsyv1.Initial{NextIndex: 6, CommittedIndex: 5, CommittedRevision: 5, CompactRevision: 3}
	s := &script{send: func(_ int32, stream netsyv1.Follow_FollowServer) error {
		return stream.Send(&netsyv1.FollowResponse{PrimaryTerm: 5, Msg: &netsyv1.FollowResponse_Initial{Initial: init}})
	}}
	w.serveScript(s)
	r := w.startReplica(false, nil)
	held := []*netsyv1.Entry{ent(1, 5), ent(2, 5), ent(3, 5), ent(4, 5), {Index: 5, Revision: 5, Term: 5, CompactRevision: 3}}
	if err := r.eng.Follow(context.Background(), 5, held); err != nil {
		t.Fatal(err)
	}
	if r.eng.CurrentRevision() != 1 || r.eng.CompactRevision() != 0 {
		t.Fatalf("held entries applied before any commit point: revision %d, compaction floor %d", r.eng.CurrentRevision(), r.eng.CompactRevision())
	}
	r.f.Observe(scriptState)
	waitFor(t, "Initial's commit point", func() bool { return r.eng.CommittedIndex() == 5 })
	if got, want := r.eng.CurrentRevision(), init.CommittedRevision; got != want {
		t.Fatalf("committed revision after Initial: %d, want %d", got, want)
	}
	if got, want := r.eng.CompactRevision(), init.CompactRevision; got != want {
		t.Fatalf("compaction floor after Initial: %d, want %d", got, want)
	}
	if n := s.streams.Load(); n != 1 {
		t.Fatalf("%d streams, want the one", n)
	}
}

// The Compact message is deliberately not acted on: the floor moves only
// with the compaction entry, applied at its place in the history. A
// Compact with no compaction entry before it leaves the floor alone, and
// the stream goes on.
func TestFollowCompactMessageIsNotActedOn(t *testing.T) {
	w := newWorld(t)
	s := &script{send: func(n int32, stream netsyv1.Follow_FollowServer) error {
		if err := stream.Send(initial(5, 1)); err != nil {
			return err
		}
		batch := entries(5, ent(1, 5), ent(2, 5), ent(3, 5))
		batch.GetEntries().CommitIndex = 3
		if err := stream.Send(batch); err != nil {
			return err
		}
		if err := stream.Send(&netsyv1.FollowResponse{PrimaryTerm: 5, Msg: &netsyv1.FollowResponse_Compact{Compact: &netsyv1.Compact{Revision: 3}}}); err != nil {
			return err
		}
		after := entries(5, ent(4, 5))
		after.GetEntries().CommitIndex = 4
		return stream.Send(after)
	}}
	w.serveScript(s)
	r := w.startReplica(false, nil)
	r.f.Observe(scriptState)
	waitFor(t, "the entry after the Compact message", func() bool { return r.value("g4") == "v" })
	if got := r.eng.CompactRevision(); got != 0 {
		t.Fatalf("the compaction floor moved to %d on a Compact message alone", got)
	}
	if n := s.streams.Load(); n != 1 {
		t.Fatalf("%d streams: the Compact message ended the stream", n)
	}
}

// A stream that ends in an error is reopened after a backoff that doubles
// (20 ms, then 40 ms, on the injected clock), not at once in a loop.
func TestFollowReconnectBacksOff(t *testing.T) {
	w := newWorld(t)
	s := &script{send: func(int32, netsyv1.Follow_FollowServer) error {
		return status.Error(codes.Unavailable, "this Primary refuses every stream")
	}}
	w.serveScript(s)
	r := w.startReplica(false, nil)
	base := w.clk.Pending()
	r.f.Observe(scriptState)
	backingOff := func(streams int32) func() bool {
		return func() bool { return s.streams.Load() >= streams && w.clk.Pending() > base }
	}
	waitFor(t, "the first stream and its backoff", backingOff(1))
	if n := s.streams.Load(); n != 1 {
		t.Fatalf("%d streams before the first backoff ran out, want 1", n)
	}
	w.clk.Advance(20 * time.Millisecond)
	waitFor(t, "the second stream and its backoff", backingOff(2))
	w.clk.Advance(39 * time.Millisecond)
	if n := s.streams.Load(); n != 2 {
		t.Fatalf("%d streams 39 ms into the second backoff (40 ms), want 2", n)
	}
	w.clk.Advance(time.Millisecond)
	waitFor(t, "the third stream", func() bool { return s.streams.Load() == 3 })
}

// startingLog is object storage whose claim (the Primary's Starting step)
// holds until released: the Primary stays Starting meanwhile.
type startingLog struct {
	noLog
	release chan struct{}
}

func (l startingLog) Claim(ctx context.Context) error {
	select {
	case <-l.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// A replica named a Primary that is still Starting (its preflight ran
// 1.77 s past the Primary turning Active in a restart at 1 M keys: the
// refusals backed off 20 ms to 640 ms) opens its stream within
// startingRetry of the Primary turning Active, however long Starting took:
// the Primary refuses with peer.ReasonPrimaryStarting, and the Follower
// asks again at that short interval instead of backing off.
func TestFollowReconnectsSoonOnceAStartingPrimaryIsActive(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := newWorld(t)
		eng, err := engine.Open(engine.Config{Storage: &enginetest.MemStorage{}, Clock: w.clk, Logger: testLogger(t, "p"), ClusterID: 1, MemberID: 1, Follower: true})
		if err != nil {
			t.Fatal(err)
		}
		slog := startingLog{release: make(chan struct{})}
		role, err := primary.New(primary.Config{Self: "p", Engine: eng, Log: slog, Quorum: 0, Clock: w.clk, Logger: testLogger(t, "p")})
		if err != nil {
			t.Fatal(err)
		}
		role.Start()
		p := &prim{id: "p", addr: "p:2380", eng: eng, role: role}
		g := peer.NewServer()
		netsyv1.RegisterFollowServer(g, &primary.FollowService{P: role})
		l, err := w.net.Host("p").Listen(p.addr)
		if err != nil {
			t.Fatal(err)
		}
		p.srv = peer.Serve(g, l)
		t.Cleanup(p.stop)
		role.Observe(p.state(3))
		synctest.Wait()
		if state, term := role.State(); state != netsyv1.PrimaryState_STARTING || term != 3 {
			t.Fatalf("the Primary is %s at term %d, want Starting at 3", state, term)
		}

		r := w.startReplica(false, nil)
		r.f.Observe(p.state(3))
		// Starting lasts 2 s of the replica's clock.
		for range 200 {
			synctest.Wait()
			w.clk.Advance(10 * time.Millisecond)
		}
		synctest.Wait()
		if ok, _, err := r.f.Connected(); ok || peer.ReasonOf(err) != peer.ReasonPrimaryStarting {
			t.Fatalf("following a Starting Primary: connected %v, last error %v; want refused as Starting", ok, err)
		}
		close(slog.release)
		synctest.Wait()
		if !role.Active() {
			t.Fatal("the Primary did not turn Active once its claim was made")
		}
		w.clk.Advance(startingRetry)
		synctest.Wait()
		if ok, _, err := r.f.Connected(); !ok {
			t.Fatalf("not following %v after the Primary turned Active (last error %v)", startingRetry, err)
		}
	})
}
