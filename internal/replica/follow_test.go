package replica

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.uber.org/goleak"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/engine/enginetest"
	"github.com/netsy-io/netsy/internal/objwal"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/internal/peer/memnet"
	"github.com/netsy-io/netsy/internal/primary"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The tests below run a Primary (engine, primary role and Follow service
// over an in-memory network) and a replica (engine and Follower) in one
// process on one fake clock. Storage is in memory; the replica's entries
// become durable only when the test says so, so receipts are under the
// test's control.

var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

type world struct {
	t   *testing.T
	clk *clock.Fake
	net *memnet.Net
}

func newWorld(t *testing.T) *world {
	w := &world{t: t, clk: clock.NewFake(epoch), net: memnet.New()}
	t.Cleanup(w.net.Close)
	return w
}

func testLogger(t *testing.T, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Warn, Output: testWriter{t}})
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// noLog stands in for object storage: the Primary's Starting step has
// nothing to claim.
type noLog struct{}

func (noLog) Claim(context.Context) error                 { return nil }
func (noLog) Release(context.Context, bool, uint64) error { return nil }
func (noLog) StillWriter(context.Context) error           { return nil }
func (noLog) SetMode(objwal.Mode)                         {}
func (noLog) SetReplicated(uint64)                        {}

// prim is a running Primary.
type prim struct {
	id   string
	addr string
	st   *enginetest.MemStorage
	eng  *engine.Engine
	role *primary.Primary
	srv  *peer.Serving
}

// startPrimary opens an engine on st (a follower first), promotes it at
// term through the primary role and serves Follow streams on id:2380.
func (w *world) startPrimary(id string, st *enginetest.MemStorage, term uint64) *prim {
	w.t.Helper()
	eng, err := engine.Open(engine.Config{Storage: st, Clock: w.clk, Logger: testLogger(w.t, id), ClusterID: 1, MemberID: 1, Follower: true})
	if err != nil {
		w.t.Fatal(err)
	}
	role, err := primary.New(primary.Config{Self: id, Engine: eng, Log: noLog{}, Quorum: 0, Clock: w.clk, Logger: testLogger(w.t, id)})
	if err != nil {
		w.t.Fatal(err)
	}
	role.Start()
	p := &prim{id: id, addr: id + ":2380", st: st, eng: eng, role: role}
	role.Observe(p.state(term))
	waitFor(w.t, "the Primary to be Active", role.Active)
	g := peer.NewServer()
	netsyv1.RegisterFollowServer(g, &primary.FollowService{P: role})
	l, err := w.net.Host(id).Listen(p.addr)
	if err != nil {
		w.t.Fatal(err)
	}
	p.srv = peer.Serve(g, l)
	w.t.Cleanup(p.stop)
	return p
}

func (p *prim) state(term uint64) *netsyv1.ClusterState {
	return &netsyv1.ClusterState{Primary: &netsyv1.NodeInfo{NodeId: p.id, PeerAddr: p.addr}, PrimaryTerm: term, RegisteredNodes: 2}
}

var stopMu sync.Mutex

func (p *prim) stop() {
	stopMu.Lock()
	defer stopMu.Unlock()
	if p.srv == nil {
		return
	}
	p.srv.Close()
	p.srv = nil
	p.role.Close()
	p.eng.Close()
}

func (p *prim) put(t *testing.T, k, v string) {
	t.Helper()
	if _, err := p.eng.Put(context.Background(), &pb.PutRequest{Key: []byte(k), Value: []byte(v)}); err != nil {
		t.Fatalf("put %s on %s: %v", k, p.id, err)
	}
}

// replica is the node under test.
type replica struct {
	// degraded makes its heartbeat say Degraded.
	degraded atomic.Bool
	st       *enginetest.MemStorage
	eng      *engine.Engine
	f        *Follower
	pool     *peer.Pool
	catchUps atomic.Int32
}

// startReplica follows with storage whose entries are durable only on
// SyncAll when manual; catchUp stands in for object storage.
func (w *world) startReplica(manual bool, catchUp func(context.Context) error) *replica {
	w.t.Helper()
	r := &replica{st: &enginetest.MemStorage{Manual: manual}}
	w.runReplica(r, catchUp)
	return r
}

// runReplica opens r's engine over r.st and starts its Follower.
func (w *world) runReplica(r *replica, catchUp func(context.Context) error) {
	w.t.Helper()
	var err error
	r.eng, err = engine.Open(engine.Config{Storage: r.st, Clock: w.clk, Logger: testLogger(w.t, "r"), ClusterID: 1, MemberID: 2, Follower: true})
	if err != nil {
		w.t.Fatal(err)
	}
	r.pool = peer.NewPool(w.net.Host("r"))
	if catchUp == nil {
		catchUp = func(context.Context) error { return fmt.Errorf("no object storage in this test") }
	}
	r.f = NewFollower(FollowerConfig{
		Self: "r", Engine: r.eng, Conn: r.pool.Conn,
		CatchUp: func(ctx context.Context) error { r.catchUps.Add(1); return catchUp(ctx) },
		State: func() *netsyv1.Heartbeat {
			health := netsyv1.HealthState_HEALTHY
			if r.degraded.Load() {
				health = netsyv1.HealthState_DEGRADED
			}
			return &netsyv1.Heartbeat{NodeId: "r", Health: health, LatestIndex: r.eng.DurableIndex()}
		},
		HeartbeatInterval: 500 * time.Millisecond,
		Clock:             w.clk, Logger: testLogger(w.t, "r"),
	})
	r.f.Start()
	w.t.Cleanup(func() {
		r.f.Close()
		r.pool.Close()
		r.eng.Close()
	})
}

func (r *replica) value(k string) string {
	resp, err := r.eng.Range(context.Background(), &pb.RangeRequest{Key: []byte(k), Serializable: true})
	if err != nil || len(resp.Kvs) == 0 {
		return "<none>"
	}
	return string(resp.Kvs[0].Value)
}

func (r *replica) last() uint64 {
	i, _, _ := r.eng.LastAppended()
	return i
}

// replicaOf returns the Primary's record of the replica.
func replicaOf(p *prim) *netsyv1.ReplicaStatus {
	st := p.role.Replication()
	if st == nil || len(st.Replicas) == 0 {
		return nil
	}
	return st.Replicas[0]
}

// waitFor yields until cond holds; it never sleeps.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := clock.Real().Now().Add(20 * time.Second)
	for !cond() {
		if clock.Real().Now().After(deadline) {
			t.Fatalf("waiting for %s", what)
		}
		runtime.Gosched()
	}
}

// checkLog fails unless the replica's storage holds dense entries 1..n
// (after its snapshot, if any).
func checkLog(t *testing.T, st *enginetest.MemStorage, n uint64) {
	t.Helper()
	ents := st.Entries(0)
	next := uint64(1)
	if len(ents) > 0 {
		next = ents[0].Index
	}
	for _, e := range ents {
		if e.Index != next {
			t.Fatalf("the replica's log has entry %d where %d belongs", e.Index, next)
		}
		next++
	}
	if next-1 != n {
		t.Fatalf("the replica's log ends at %d, want %d", next-1, n)
	}
}

// Entries reach the replica in order; receipts carry its fsync'd index
// (not what it merely holds); it applies only what the Primary committed.
func TestFollowReceiptsAndCommit(t *testing.T) {
	w := newWorld(t)
	p := w.startPrimary("p", &enginetest.MemStorage{}, 3)
	r := w.startReplica(true, nil)
	r.f.Observe(p.state(3))
	for i := range 5 {
		p.put(t, fmt.Sprintf("k%d", i), "v")
	}
	waitFor(t, "the entries to reach the replica", func() bool { return r.last() == 5 })
	if rs := replicaOf(p); rs == nil || rs.DurableIndex != 0 {
		t.Fatalf("the Primary's record before the replica's fsync: %v", rs)
	}
	if got := r.value("k0"); got != "<none>" {
		t.Fatalf("the replica applied an entry it does not hold durably: k0=%s", got)
	}
	r.st.SyncAll()
	waitFor(t, "the receipt", func() bool { rs := replicaOf(p); return rs != nil && rs.DurableIndex == 5 })
	waitFor(t, "the commit to apply", func() bool { return r.value("k4") == "v" })
	checkLog(t, r.st, 5)
}

// A replica that has nothing to receipt heartbeats on the stream after one
// quiet interval, so the Primary keeps hearing from it.
func TestFollowStandaloneHeartbeat(t *testing.T) {
	w := newWorld(t)
	p := w.startPrimary("p", &enginetest.MemStorage{}, 3)
	r := w.startReplica(false, nil)
	r.f.Observe(p.state(3))
	p.put(t, "k", "v")
	waitFor(t, "the receipt", func() bool { rs := replicaOf(p); return rs != nil && rs.DurableIndex == 1 })
	for range 3 {
		w.clk.Advance(400 * time.Millisecond)
		if rs := replicaOf(p); rs.LastHeardMs < 400 {
			t.Fatalf("heard %d ms ago, before a quiet interval passed", rs.LastHeardMs)
		}
		w.clk.Advance(100 * time.Millisecond) // the interval is over
		waitFor(t, "a standalone heartbeat", func() bool { return replicaOf(p).LastHeardMs == 0 })
	}
}

// A replica whose stream broke resumes from the end of its log: it gets
// what was written meanwhile, and nothing twice.
func TestFollowResumesAfterReconnect(t *testing.T) {
	w := newWorld(t)
	p := w.startPrimary("p", &enginetest.MemStorage{}, 3)
	r := w.startReplica(false, nil)
	r.f.Observe(p.state(3))
	for i := range 3 {
		p.put(t, fmt.Sprintf("a%d", i), "v")
	}
	waitFor(t, "the first entries", func() bool { return r.last() == 3 })
	w.net.Partition("r", "p")
	waitFor(t, "the stream to break", func() bool { ok, _, _ := r.f.Connected(); return !ok })
	for i := range 3 {
		p.put(t, fmt.Sprintf("b%d", i), "v")
	}
	w.clk.Advance(time.Second) // the reconnect backoff
	w.net.Heal("r", "p")
	waitFor(t, "the resumed stream", func() bool { return r.last() == 6 && r.value("b2") == "v" })
	checkLog(t, r.st, 6)
}

// A slow replica slows only its own stream: the Primary keeps writing,
// nothing is dropped, and the replica receives everything in order once
// it is back.
func TestFollowSlowReplicaBackPressure(t *testing.T) {
	w := newWorld(t)
	p := w.startPrimary("p", &enginetest.MemStorage{}, 3)
	r := w.startReplica(false, nil)
	r.f.Observe(p.state(3))
	p.put(t, "first", "v")
	waitFor(t, "the first entry", func() bool { return r.last() == 1 })
	w.net.Stall("r", "p")
	big := string(make([]byte, 16<<10))
	const n = 300 // about 5 MB: far beyond what the stalled link buffers
	for i := range n {
		p.put(t, fmt.Sprintf("k%03d", i), big)
	}
	if got := r.last(); got > n/2 {
		t.Fatalf("the stalled replica received %d entries", got)
	}
	w.net.Unstall("r", "p")
	waitFor(t, "the replica to catch up", func() bool { return r.last() == n+1 })
	checkLog(t, r.st, n+1)
	waitFor(t, "the last commit", func() bool { return r.value(fmt.Sprintf("k%03d", n-1)) == big })
}

// On a Primary change, entries the replica holds beyond what the new
// Primary has were never committed: they are cut, and the new Primary's
// entries take their place.
func TestFollowTruncatesUncommittedOnPrimaryChange(t *testing.T) {
	w := newWorld(t)
	old := &enginetest.MemStorage{Manual: true}
	p1 := w.startPrimary("p1", old, 3)
	r := w.startReplica(false, nil)
	r.f.Observe(p1.state(3))
	for i := range 3 {
		k := fmt.Sprintf("c%d", i)
		go func() { _, _ = p1.eng.Put(context.Background(), &pb.PutRequest{Key: []byte(k), Value: []byte("v")}) }()
		waitFor(t, "an append", func() bool { return len(old.Entries(0)) == i+1 })
	}
	old.SyncAll() // 1..3 committed
	waitFor(t, "the commit of 1..3", func() bool { return r.value("c2") == "v" })
	for i := range 2 {
		k := fmt.Sprintf("u%d", i)
		go func() { _, _ = p1.eng.Put(context.Background(), &pb.PutRequest{Key: []byte(k), Value: []byte("lost")}) }()
		waitFor(t, "an append", func() bool { return len(old.Entries(0)) == 4+i })
	}
	waitFor(t, "the uncommitted entries to reach the replica", func() bool { return r.last() == 5 })
	// p1 dies; p2 held only the committed entries 1..3.
	w.net.Down(p1.addr)
	p1.stop()
	st2 := &enginetest.MemStorage{}
	for _, e := range old.Entries(1)[:3] {
		if err := st2.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	p2 := w.startPrimary("p2", st2, 4)
	p2.put(t, "u0", "new")
	r.f.Observe(p2.state(4))
	waitFor(t, "the new Primary's entry", func() bool { return r.value("u0") == "new" })
	ents := r.st.Entries(1)
	if len(ents) != 4 || ents[3].Term != 4 {
		t.Fatalf("the replica's log after the change: %d entries, the 4th at term %d; want 4, the 4th at term 4", len(ents), ents[len(ents)-1].Term)
	}
	if got := r.value("u1"); got != "<none>" {
		t.Fatalf("an entry no Primary committed survived: u1=%s", got)
	}
}

// A replica further behind than the Primary's log reaches is sent to
// object storage first, then streams the rest.
func TestFollowCatchesUpFromStorage(t *testing.T) {
	w := newWorld(t)
	st := &enginetest.MemStorage{}
	// An earlier writer left a snapshot at about index 8 and entries after
	// it; the Primary's log no longer starts at 1.
	wr, err := engine.Open(engine.Config{Storage: st, Clock: w.clk, Logger: testLogger(t, "w"), ClusterID: 1, MemberID: 1, Term: 2, SnapshotEntries: 4})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := wr.Put(context.Background(), &pb.PutRequest{Key: []byte(fmt.Sprintf("old%d", i)), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "a snapshot", func() bool { return st.HasSnapshot() && st.FirstIndex() > 1 })
	wr.Close()
	p := w.startPrimary("p", st, 3)
	var r *replica
	r = w.startReplica(false, func(context.Context) error {
		// What objwal's catch-up does from the bucket: the snapshot, then
		// the entries after it.
		snap, _ := st.LoadSnapshot()
		if err := r.st.SaveSnapshot(snap); err != nil {
			return err
		}
		for _, e := range st.Entries(snap.Header.Index + 1) {
			if err := r.st.Append(e); err != nil {
				return err
			}
		}
		return nil
	})
	r.f.Observe(p.state(3))
	waitFor(t, "the catch-up", func() bool { return r.catchUps.Load() == 1 && r.value("old9") == "v" })
	p.put(t, "new", "v")
	waitFor(t, "streaming after the catch-up", func() bool { return r.value("new") == "v" })
	if r.value("old0") != "v" {
		t.Fatal("the snapshot's keys are missing on the replica")
	}
}

// script is a Primary that says what a test tells it to.
type script struct {
	netsyv1.UnsafeFollowServer
	streams atomic.Int32
	send    func(n int32, stream netsyv1.Follow_FollowServer) error
}

func (s *script) Follow(stream netsyv1.Follow_FollowServer) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	n := s.streams.Add(1)
	if err := s.send(n, stream); err != nil {
		return err
	}
	<-stream.Context().Done()
	return nil
}

func (w *world) serveScript(s *script) {
	g := peer.NewServer()
	netsyv1.RegisterFollowServer(g, s)
	l, err := w.net.Host("s").Listen("s:2380")
	if err != nil {
		w.t.Fatal(err)
	}
	srv := peer.Serve(g, l)
	w.t.Cleanup(srv.Close)
}

func ent(i uint64, term int64) *netsyv1.Entry {
	return &netsyv1.Entry{Index: i, Revision: int64(i) + 1, Term: term,
		Ops: []*netsyv1.Op{{Key: fmt.Appendf(nil, "g%d", i), Value: []byte("v")}}}
}

func entries(term uint64, es ...*netsyv1.Entry) *netsyv1.FollowResponse {
	return &netsyv1.FollowResponse{PrimaryTerm: term, Msg: &netsyv1.FollowResponse_Entries{Entries: &netsyv1.EntryBatch{Entries: es}}}
}

func initial(term uint64, next uint64) *netsyv1.FollowResponse {
	return &netsyv1.FollowResponse{PrimaryTerm: term, Msg: &netsyv1.FollowResponse_Initial{Initial: &netsyv1.Initial{NextIndex: next}}}
}

var scriptState = &netsyv1.ClusterState{Primary: &netsyv1.NodeInfo{NodeId: "s", PeerAddr: "s:2380"}, PrimaryTerm: 5}

// A gap in the entries ends the stream: nothing after it is taken, and
// the replica reconnects from the end of its log.
func TestFollowRefusesAGap(t *testing.T) {
	w := newWorld(t)
	s := &script{send: func(n int32, stream netsyv1.Follow_FollowServer) error {
		if n > 1 {
			return stream.Send(initial(5, 3))
		}
		if err := stream.Send(initial(5, 1)); err != nil {
			return err
		}
		if err := stream.Send(entries(5, ent(1, 5), ent(2, 5))); err != nil {
			return err
		}
		return stream.Send(entries(5, ent(4, 5), ent(5, 5)))
	}}
	w.serveScript(s)
	r := w.startReplica(false, nil)
	r.f.Observe(scriptState)
	waitFor(t, "a second stream after the gap", func() bool {
		if s.streams.Load() < 2 {
			w.clk.Advance(100 * time.Millisecond) // the reconnect backoff
			return false
		}
		return true
	})
	checkLog(t, r.st, 2)
}

// Every message must carry the term the stream was opened for.
func TestFollowRefusesAnotherTerm(t *testing.T) {
	w := newWorld(t)
	s := &script{send: func(n int32, stream netsyv1.Follow_FollowServer) error {
		if n > 1 {
			return stream.Send(initial(5, 1))
		}
		if err := stream.Send(initial(5, 1)); err != nil {
			return err
		}
		return stream.Send(entries(6, ent(1, 6)))
	}}
	w.serveScript(s)
	r := w.startReplica(false, nil)
	r.f.Observe(scriptState)
	waitFor(t, "a second stream after the wrong term", func() bool {
		if s.streams.Load() < 2 {
			w.clk.Advance(100 * time.Millisecond)
			return false
		}
		return true
	})
	if got := r.last(); got != 0 {
		t.Fatalf("the replica took %d entries of another term", got)
	}
}

// A replica that applied an entry the new Primary's history replaced (it
// reports its commit point at the mismatched index: a restarted
// ex-Primary that counted its whole local log as committed) is cut below
// the mismatch and rebuilds its state there, then takes the Primary's
// entry: it never keeps serving its own (clustersim seed 425).
func TestFollowRebuildsAReplicaThatAppliedADivergentEntry(t *testing.T) {
	w := newWorld(t)
	st := &enginetest.MemStorage{}
	for i := uint64(1); i <= 3; i++ {
		if err := st.Append(ent(i, 3)); err != nil {
			t.Fatal(err)
		}
	}
	p := w.startPrimary("p", st, 4)
	p.put(t, "g4", "new") // the Primary's entry 4, at term 4

	r := &replica{st: &enginetest.MemStorage{}}
	for i := uint64(1); i <= 4; i++ {
		if err := r.st.Append(ent(i, 3)); err != nil { // entry 4: g4=v at term 3
			t.Fatal(err)
		}
	}
	w.runReplica(r, nil)
	if got := r.value("g4"); got != "v" {
		t.Fatalf("setup: the replica's own entry 4 is not applied (g4=%s)", got)
	}
	r.f.Observe(p.state(4))
	waitFor(t, "the Primary's entry 4 on the replica", func() bool { return r.value("g4") == "new" })
	ents := r.st.Entries(1)
	if len(ents) != 4 || ents[3].Term != 4 {
		t.Fatalf("the replica's log: %d entries, the last at term %d; want 4, the 4th at term 4", len(ents), ents[len(ents)-1].Term)
	}
	if got := r.eng.CommittedIndex(); got != 4 {
		t.Fatalf("the replica's committed index: %d, want 4", got)
	}
}

// FollowStart names the term of the replica's last entry, not the term
// its engine last wrote at: a node promoted at term 4 that wrote nothing
// before stepping down still ends its log with a term-3 entry, and a
// Primary that holds that entry must not take the log to diverge there
// (it would cut below an entry the bucket holds, which the log refuses:
// clustersim seed 25 stayed unready for good).
func TestFollowStartNamesTheTermOfTheLastEntry(t *testing.T) {
	w := newWorld(t)
	starts := make(chan *netsyv1.FollowStart, 4)
	s := &startScript{starts: starts}
	g := peer.NewServer()
	netsyv1.RegisterFollowServer(g, s)
	l, err := w.net.Host("s").Listen("s:2380")
	if err != nil {
		t.Fatal(err)
	}
	srv := peer.Serve(g, l)
	t.Cleanup(srv.Close)

	r := &replica{st: &enginetest.MemStorage{}}
	for i := uint64(1); i <= 3; i++ {
		if err := r.st.Append(ent(i, 3)); err != nil {
			t.Fatal(err)
		}
	}
	w.runReplica(r, nil)
	if err := r.eng.Promote(t.Context(), 4, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := r.eng.Demote(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	r.f.Observe(scriptState)
	var st *netsyv1.FollowStart
	waitFor(t, "the FollowStart", func() bool {
		select {
		case st = <-starts:
			return true
		default:
			return false
		}
	})
	if st.LastIndex != 3 || st.LastTerm != 3 {
		t.Fatalf("FollowStart says last entry %d at term %d, want 3 at term 3", st.LastIndex, st.LastTerm)
	}
}

// startScript records each stream's FollowStart and answers nothing.
type startScript struct {
	netsyv1.UnsafeFollowServer
	starts chan *netsyv1.FollowStart
}

func (s *startScript) Follow(stream netsyv1.Follow_FollowServer) error {
	m, err := stream.Recv()
	if err != nil {
		return err
	}
	select {
	case s.starts <- m.GetStart():
	default:
	}
	<-stream.Context().Done()
	return nil
}

// recorder is a Primary that sends what the test hands it and records
// what the replica sends.
type recorder struct {
	netsyv1.UnsafeFollowServer
	out chan *netsyv1.FollowResponse
	in  chan *netsyv1.FollowRequest
}

func (s *recorder) Follow(stream netsyv1.Follow_FollowServer) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			s.in <- m
		}
	}()
	for {
		select {
		case m := <-s.out:
			if err := stream.Send(m); err != nil {
				return err
			}
		case <-stream.Context().Done():
			return nil
		}
	}
}

// A receipt carries the replica's heartbeat when the Primary has not got
// one on the stream, when its health changed since the last one it got
// (the Primary counts a receipt by the last health it heard), and once
// per heartbeat interval; the receipts between carry the index alone,
// which spares encoding (and the Primary decoding) the heartbeat on
// nearly every replicated write.
func TestFollowReceiptsCarryTheHeartbeatWhenItsHealthChanged(t *testing.T) {
	w := newWorld(t)
	s := &recorder{out: make(chan *netsyv1.FollowResponse, 16), in: make(chan *netsyv1.FollowRequest, 16)}
	g := peer.NewServer()
	netsyv1.RegisterFollowServer(g, s)
	l, err := w.net.Host("s").Listen("s:2380")
	if err != nil {
		t.Fatal(err)
	}
	srv := peer.Serve(g, l)
	t.Cleanup(srv.Close)
	r := w.startReplica(true, nil)
	s.out <- initial(5, 1)
	r.f.Observe(scriptState)
	receipt := func(i uint64) *netsyv1.Receipt {
		t.Helper()
		s.out <- entries(5, ent(i, 5))
		waitFor(t, fmt.Sprintf("entry %d", i), func() bool { return r.last() == i })
		r.st.SyncAll()
		for {
			var m *netsyv1.FollowRequest
			select {
			case m = <-s.in:
			case <-clock.Real().After(10 * time.Second):
				t.Fatalf("no receipt for %d", i)
			}
			if rc := m.GetReceipt(); rc != nil && rc.Index == i {
				return rc
			}
		}
	}
	if rc := receipt(1); rc.Heartbeat.GetHealth() != netsyv1.HealthState_HEALTHY {
		t.Fatalf("the stream's first receipt carries %v, want the heartbeat", rc.Heartbeat)
	}
	if rc := receipt(2); rc.Heartbeat != nil {
		t.Fatalf("a receipt with the health unchanged carries %v, want none", rc.Heartbeat)
	}
	r.degraded.Store(true)
	if rc := receipt(3); rc.Heartbeat.GetHealth() != netsyv1.HealthState_DEGRADED {
		t.Fatalf("the receipt after the health changed carries %v, want the Degraded heartbeat", rc.Heartbeat)
	}
	if rc := receipt(4); rc.Heartbeat != nil {
		t.Fatalf("a receipt with the health unchanged carries %v, want none", rc.Heartbeat)
	}
	w.clk.Advance(300 * time.Millisecond) // within the interval: still none
	if rc := receipt(5); rc.Heartbeat != nil {
		t.Fatalf("a receipt within the interval carries %v, want none", rc.Heartbeat)
	}
	w.clk.Advance(300 * time.Millisecond) // 600 ms since the last heartbeat
	if rc := receipt(6); rc.Heartbeat.GetHealth() != netsyv1.HealthState_DEGRADED {
		t.Fatalf("a receipt an interval after the last heartbeat carries %v, want the heartbeat", rc.Heartbeat)
	}
}
