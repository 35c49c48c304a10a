package primary

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/objwal"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

var epoch = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// fakeEngine answers what the quorum asks of the engine.
type fakeEngine struct {
	Engine
	mu        sync.Mutex
	committed uint64
	last      uint64
}

func (e *fakeEngine) CommittedIndex() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.committed
}

func (e *fakeEngine) LastAppended() (uint64, int64, int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last, int64(e.last), 1
}

// fakeLog records what the quorum tells the log; like objwal it makes an
// entry committed once replicated (in quorum or sync mode).
type fakeLog struct {
	Log
	eng        *fakeEngine
	mu         sync.Mutex
	mode       objwal.Mode
	replicated uint64
	modes      []objwal.Mode
}

func (l *fakeLog) SetMode(m objwal.Mode) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mode = m
	l.modes = append(l.modes, m)
}

func (l *fakeLog) SetReplicated(i uint64) {
	l.mu.Lock()
	if i < l.replicated {
		l.mu.Unlock()
		panic("replicated index moved back")
	}
	l.replicated = i
	l.mu.Unlock()
	l.eng.mu.Lock()
	l.eng.committed = max(l.eng.committed, i)
	l.eng.mu.Unlock()
}

func (l *fakeLog) get() (objwal.Mode, uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mode, l.replicated
}

type qharness struct {
	t   *testing.T
	clk *clock.Fake
	eng *fakeEngine
	log *fakeLog
	p   *Primary
	q   *quorum
}

const term = 7

// qmembers are the members the quorum tests' Cluster States list.
var qmembers = []string{"p", "r1", "r2", "r3"}

func newQuorum(t *testing.T, quorumCfg, registered int) *qharness {
	clk := clock.NewFake(epoch)
	eng := &fakeEngine{}
	lg := &fakeLog{eng: eng, mode: objwal.ModeSync}
	p, err := New(Config{Self: "p", Engine: eng, Log: lg, Quorum: quorumCfg, QuorumTimeout: 300 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond, LeaseWindow: 200 * time.Millisecond, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	h := &qharness{t: t, clk: clk, eng: eng, log: lg, p: p, q: &p.quorum}
	h.q.reset(term)
	answered(p, clk.Now())
	h.q.activate(term, registered, qmembers, true)
	return h
}

// appendTo makes the engine's log end at i.
func (h *qharness) appendTo(i uint64) {
	h.eng.mu.Lock()
	h.eng.last = i
	h.eng.mu.Unlock()
	h.q.appended(i, h.clk.Now())
}

func (h *qharness) receipt(id string, durable uint64) {
	h.q.heard(id, term, durable, &netsyv1.Heartbeat{NodeId: id, Health: netsyv1.HealthState_HEALTHY})
}

// advance moves time, keeps the lease (the Elector answers), and ticks.
func (h *qharness) advance(d time.Duration) {
	h.clk.Advance(d)
	answered(h.p, h.clk.Now())
	h.q.tick(h.clk.Now())
}

func (h *qharness) want(mode objwal.Mode, replicated uint64) {
	h.t.Helper()
	m, r := h.log.get()
	if m != mode || r != replicated {
		h.t.Fatalf("log in %s with replicated %d; want %s with %d", m, r, mode, replicated)
	}
}

func TestQuorumNeeded(t *testing.T) {
	for _, tc := range []struct{ quorum, registered, want int }{
		{0, 3, 0}, {1, 3, 1}, {2, 5, 2}, {-1, 1, 0}, {-1, 2, 1}, {-1, 3, 1}, {-1, 4, 2}, {-1, 5, 2},
	} {
		if got := needed(tc.quorum, tc.registered); got != tc.want {
			t.Errorf("needed(%d, %d) = %d, want %d", tc.quorum, tc.registered, got, tc.want)
		}
	}
}

// Majority of three: the Primary counts itself, so one replica's receipt
// acknowledges; the quorum index is what that replica holds.
func TestQuorumMajorityCountsReceipts(t *testing.T) {
	h := newQuorum(t, -1, 3)
	h.want(objwal.ModeSync, 0) // nobody follows yet
	h.q.open("r1", term)
	h.receipt("r1", 0)
	h.want(objwal.ModeQuorum, 0)
	h.appendTo(5)
	h.receipt("r1", 3)
	h.want(objwal.ModeQuorum, 3)
	h.q.open("r2", term)
	h.receipt("r2", 5)
	h.want(objwal.ModeQuorum, 5)
	h.receipt("r1", 4) // behind the other: changes nothing
	h.want(objwal.ModeQuorum, 5)
	if st := h.q.status(h.clk.Now()); st.Fallbacks != 0 || st.Fallback || st.ReplicasNeeded != 1 {
		t.Fatalf("status %v", st)
	}
}

// A static quorum of two waits for the second-highest receipt.
func TestQuorumStaticNeedsN(t *testing.T) {
	h := newQuorum(t, 2, 3)
	h.q.open("r1", term)
	h.q.open("r2", term)
	h.receipt("r2", 0) // its first heartbeat: it says it is Healthy
	h.appendTo(9)
	h.receipt("r1", 9)
	h.want(objwal.ModeQuorum, 0)
	h.receipt("r2", 6)
	h.want(objwal.ModeQuorum, 6)
	h.receipt("r2", 9)
	h.want(objwal.ModeQuorum, 9)
}

// A static quorum larger than the replicas there are can never be met:
// every write goes through object storage.
func TestQuorumStaticUnreachableFallsBack(t *testing.T) {
	h := newQuorum(t, 3, 3)
	h.q.open("r1", term)
	h.q.open("r2", term)
	h.appendTo(2)
	h.receipt("r1", 2)
	h.receipt("r2", 2)
	h.want(objwal.ModeSync, 0)
	if st := h.q.status(h.clk.Now()); !st.Fallback || !strings.Contains(st.FallbackReason, "2 of 3") {
		t.Fatalf("status %v", st)
	}
}

// A node alone under majority quorum is its own majority: local fsync.
func TestQuorumAloneIsAsync(t *testing.T) {
	h := newQuorum(t, -1, 1)
	h.want(objwal.ModeAsync, 0)
	// A second node registers: now a replica is needed.
	h.q.setRegistered(2, qmembers, true)
	h.want(objwal.ModeSync, 0)
}

// A node alone acknowledges on its own fsync only while its lease holds:
// once it lapsed (cut from the Elector it is, or from the bucket) what it
// acknowledges must be in object storage, and its own fsync is enough
// again once the lease is renewed.
func TestQuorumAloneLeaseLapsedFallsBack(t *testing.T) {
	h := newQuorum(t, -1, 1)
	h.want(objwal.ModeAsync, 0)
	h.clk.Advance(250 * time.Millisecond) // no answer: the lease (200 ms) lapsed
	h.q.tick(h.clk.Now())
	h.want(objwal.ModeSync, 0)
	if st := h.q.status(h.clk.Now()); st.FallbackReason != "the Primary's lease lapsed" || !st.Fallback {
		t.Fatalf("status %v", st)
	}
	answered(h.p, h.clk.Now())
	h.advance(10 * time.Millisecond)
	h.want(objwal.ModeAsync, 0)
}

// A replica that misses the quorum deadline stops counting, so writes
// fall back to object storage; once its receipts reach the index it
// missed it counts again.
func TestQuorumTimeoutFallsBackAndRecovers(t *testing.T) {
	var fell []string
	h := newQuorum(t, -1, 3)
	h.q.onFallback = func(r string) { fell = append(fell, r) }
	h.q.open("r1", term)
	h.receipt("r1", 0)
	h.appendTo(10)
	h.advance(200 * time.Millisecond)
	h.receipt("r1", 0) // alive, but not writing
	h.want(objwal.ModeQuorum, 0)
	h.advance(200 * time.Millisecond) // the deadline of index 10 passed
	h.want(objwal.ModeSync, 0)
	if len(fell) != 1 || !strings.Contains(fell[0], "0 of 1") {
		t.Fatalf("fallbacks %q", fell)
	}
	st := h.q.status(h.clk.Now())
	if len(st.Replicas) != 1 || st.Replicas[0].Counted || !strings.Contains(st.Replicas[0].NotCountedReason, "deadline of index 10") {
		t.Fatalf("status %v", st)
	}
	// The upload commits index 10 meanwhile; a heartbeat alone does not
	// bring the replica back.
	h.eng.mu.Lock()
	h.eng.committed = 10
	h.eng.mu.Unlock()
	h.receipt("r1", 0)
	h.want(objwal.ModeSync, 0)
	h.receipt("r1", 10)
	h.want(objwal.ModeQuorum, 10)
	if st := h.q.status(h.clk.Now()); st.Fallbacks != 1 || st.Fallback {
		t.Fatalf("status %v", st)
	}
}

// Without the lease the Primary acknowledges nothing on receipts: a
// successor may be elected once it lapsed.
func TestQuorumLeaseLapsedFallsBack(t *testing.T) {
	h := newQuorum(t, -1, 3)
	h.q.open("r1", term)
	h.appendTo(3)
	h.receipt("r1", 3)
	h.want(objwal.ModeQuorum, 3)
	h.clk.Advance(150 * time.Millisecond)
	h.receipt("r1", 3)
	h.clk.Advance(100 * time.Millisecond) // the lease (200 ms) lapsed
	h.appendTo(5)
	h.receipt("r1", 5)
	h.want(objwal.ModeSync, 3)
	if st := h.q.status(h.clk.Now()); st.FallbackReason != "the Primary's lease lapsed" {
		t.Fatalf("status %v", st)
	}
	answered(h.p, h.clk.Now())
	h.receipt("r1", 5)
	h.want(objwal.ModeQuorum, 5)
}

// A replica counts only while it follows at this term, has been heard
// within two heartbeat intervals and does not say it is Degraded.
func TestQuorumWhoCounts(t *testing.T) {
	h := newQuorum(t, -1, 3)
	h.appendTo(4)
	// Receipts without a stream, or of another term, count for nothing.
	h.receipt("r1", 4)
	h.q.heard("r2", term+1, 4, nil)
	h.want(objwal.ModeSync, 0)
	h.q.open("r1", term)
	h.receipt("r1", 4)
	h.want(objwal.ModeQuorum, 4)
	// Silent for longer than two intervals.
	h.advance(250 * time.Millisecond)
	h.want(objwal.ModeSync, 4)
	h.receipt("r1", 4)
	h.want(objwal.ModeQuorum, 4)
	// It cannot reach the Elector and says so.
	h.q.heard("r1", term, 4, &netsyv1.Heartbeat{NodeId: "r1", Health: netsyv1.HealthState_DEGRADED})
	h.want(objwal.ModeSync, 4)
	h.receipt("r1", 4)
	h.want(objwal.ModeQuorum, 4)
	// Its stream closes.
	h.q.closed("r1", term)
	h.want(objwal.ModeSync, 4)
}

// A Draining Primary uploads at once.
func TestQuorumDrainIsEager(t *testing.T) {
	h := newQuorum(t, -1, 3)
	h.q.open("r1", term)
	h.receipt("r1", 0)
	h.want(objwal.ModeQuorum, 0)
	h.q.drain()
	h.want(objwal.ModeSync, 0)
}

// Lag is reported in entries and in time since the first missing entry
// was appended.
func TestQuorumLag(t *testing.T) {
	h := newQuorum(t, -1, 3)
	h.q.open("r1", term)
	h.appendTo(3)
	h.receipt("r1", 3)
	h.advance(50 * time.Millisecond)
	h.appendTo(8)
	h.advance(70 * time.Millisecond)
	h.receipt("r1", 5)
	st := h.q.status(h.clk.Now())
	if len(st.Replicas) != 1 {
		t.Fatalf("status %v", st)
	}
	if r := st.Replicas[0]; r.LagEntries != 3 || r.LagMs != 70 || r.DurableIndex != 5 || !r.Counted {
		t.Fatalf("replica %v: want lag 3 entries, 70 ms", r)
	}
}

// The tracker's goroutine turns appends into deadlines and ticks into
// fallbacks, on the fake clock.
func TestQuorumRunLoop(t *testing.T) {
	h := newQuorum(t, -1, 3)
	feed := &notifyEngine{fakeEngine: h.eng, ch: make(chan struct{})}
	h.p.cfg.Engine = feed
	h.q.open("r1", term)
	h.receipt("r1", 0)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { h.q.run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	if err := h.clk.BlockUntil(t.Context(), 1); err != nil { // the ticker
		t.Fatal(err)
	}
	feed.appendTo(6)
	waitFor(t, "the append is recorded", func() bool {
		h.q.mu.Lock()
		defer h.q.mu.Unlock()
		return h.q.lastMark == 6
	})
	h.clk.Advance(250 * time.Millisecond)
	answered(h.p, h.clk.Now())
	h.receipt("r1", 0)
	h.want(objwal.ModeQuorum, 0)
	h.clk.Advance(100 * time.Millisecond) // past the 300 ms deadline: the next tick
	waitFor(t, "the fallback", func() bool { m, _ := h.log.get(); return m == objwal.ModeSync })
}

// notifyEngine adds the append notifications the run loop waits on: the
// engine's (AppendNotify and WatchAppends), a poke per append.
type notifyEngine struct {
	*fakeEngine
	nmu     sync.Mutex
	ch      chan struct{}
	watches []watch
	// afterRead, if set, runs once after the next LastAppended read.
	afterRead func()
}

type watch struct {
	ch chan<- struct{}
	on *atomic.Bool
}

func (e *notifyEngine) WatchAppends(ch chan<- struct{}, on *atomic.Bool) func() {
	e.nmu.Lock()
	defer e.nmu.Unlock()
	e.watches = append(e.watches, watch{ch, on})
	return func() {}
}

func (e *notifyEngine) LastAppended() (uint64, int64, int64) {
	i, r, t := e.fakeEngine.LastAppended()
	e.nmu.Lock()
	f := e.afterRead
	e.afterRead = nil
	e.nmu.Unlock()
	if f != nil {
		f()
	}
	return i, r, t
}

func (e *notifyEngine) AppendNotify() <-chan struct{} {
	e.nmu.Lock()
	defer e.nmu.Unlock()
	return e.ch
}

func (e *notifyEngine) appendTo(i uint64) {
	e.mu.Lock()
	e.last = i
	e.mu.Unlock()
	e.nmu.Lock()
	defer e.nmu.Unlock()
	if e.ch != nil {
		close(e.ch)
		e.ch = make(chan struct{})
	}
	for _, w := range e.watches {
		if w.on.Load() {
			select {
			case w.ch <- struct{}{}:
			default:
			}
		}
	}
}

// The run loop reads where the log ends, then waits: an append that lands
// between the read and the wait must still wake it (the engine's poke
// waits in the channel), or the append's quorum deadline would start only
// at the next tick, a tick late.
func TestQuorumRunWakesForAnAppendBetweenItsReadAndItsWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newQuorum(t, -1, 3)
		eng := &notifyEngine{fakeEngine: h.eng, ch: make(chan struct{})}
		h.p.cfg.Engine = eng
		eng.afterRead = func() { eng.appendTo(6) }
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { h.q.run(ctx); close(done) }()
		synctest.Wait() // run is blocked: on its wait, or forever on a lost wake-up
		h.q.mu.Lock()
		mark := h.q.lastMark
		h.q.mu.Unlock()
		cancel()
		<-done
		if mark != 6 {
			t.Fatalf("the run loop recorded appends through %d before any tick; want 6 (the append between its read and its wait woke nobody)", mark)
		}
	})
}

// A lone node under majority quorum decides from its lease alone: appends
// do not wake its quorum goroutine (the engine pokes nobody), while its
// ticks still switch it to object storage once the lease lapsed. A second
// registered node makes it count receipts, and then appends wake it and
// start their deadlines.
func TestQuorumAloneIsNotWokenByAppends(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newQuorum(t, -1, 1)
		eng := &notifyEngine{fakeEngine: h.eng, ch: make(chan struct{})}
		h.p.cfg.Engine = eng
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { h.q.run(ctx); close(done) }()
		defer func() { cancel(); <-done }()
		synctest.Wait()
		if h.q.wantAppends.Load() {
			t.Fatal("a lone node's quorum asks to be woken by appends")
		}
		eng.appendTo(3)
		synctest.Wait()
		h.q.mu.Lock()
		mark := h.q.lastMark
		h.q.mu.Unlock()
		if mark != 0 {
			t.Fatalf("an append woke a lone node's quorum (mark %d)", mark)
		}
		h.want(objwal.ModeAsync, 0)
		// No answer from the Elector: the lease (200 ms) lapses, and the
		// next tick (50 ms) falls back, with no append to wake it.
		h.clk.Advance(250 * time.Millisecond)
		synctest.Wait()
		h.want(objwal.ModeSync, 0)
		h.q.mu.Lock()
		mark = h.q.lastMark
		h.q.mu.Unlock()
		if mark != 3 {
			t.Fatalf("a tick recorded appends through %d; want 3", mark)
		}
		answered(h.p, h.clk.Now())
		h.q.setRegistered(2, qmembers, true)
		if !h.q.wantAppends.Load() {
			t.Fatal("with a replica needed, the quorum does not ask to be woken by appends")
		}
		eng.appendTo(9)
		synctest.Wait()
		h.q.mu.Lock()
		mark = h.q.lastMark
		h.q.mu.Unlock()
		if mark != 9 {
			t.Fatalf("an append that needs a replica's receipt was recorded through %d; want 9", mark)
		}
	})
}

// waitFor yields until cond holds (a goroutine driven by the fake clock
// catches up); it never sleeps.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		if t.Context().Err() != nil {
			t.Fatalf("waiting for %s", what)
		}
		runtime.Gosched()
	}
}

// A lone node under majority quorum drains eagerly too, as drain says.
func TestQuorumAloneDrainIsEager(t *testing.T) {
	h := newQuorum(t, -1, 1)
	h.want(objwal.ModeAsync, 0)
	h.q.drain()
	h.want(objwal.ModeSync, 0)
}

// Under majority quorum, a Primary that no Cluster State has told how many
// nodes are registered acknowledges through object storage, never on its
// own fsync as if it were alone.
func TestQuorumUnknownCountIsSync(t *testing.T) {
	h := newQuorum(t, -1, 0)
	h.q.open("r1", term)
	h.appendTo(3)
	h.receipt("r1", 3)
	h.want(objwal.ModeSync, 0)
	if st := h.q.status(h.clk.Now()); !st.Fallback || !strings.Contains(st.FallbackReason, "no authoritative count") {
		t.Fatalf("status %v", st)
	}
	h.q.setRegistered(3, qmembers, false) // a state that does not vouch for it
	h.want(objwal.ModeSync, 0)
	h.q.setRegistered(3, qmembers, true)
	h.want(objwal.ModeQuorum, 3)
}

// A replica counts toward the quorum only while its own last word on its
// health is Healthy: a leaving node (it reports Degraded from the moment
// it starts leaving, SPEC §5.2) or one still Loading completes no quorum
// write, however high the index its receipt acknowledges, and the Primary
// falls back to object storage while too few count.
func TestQuorumReceiptsOfDegradedOrLoadingReplicasDoNotCount(t *testing.T) {
	for _, health := range []netsyv1.HealthState{netsyv1.HealthState_DEGRADED, netsyv1.HealthState_LOADING, netsyv1.HealthState_HEALTH_UNKNOWN} {
		t.Run(health.String(), func(t *testing.T) {
			h := newQuorum(t, -1, 3)
			h.q.open("r1", term)
			h.receipt("r1", 0)
			h.want(objwal.ModeQuorum, 0)
			h.appendTo(5)
			h.q.heard("r1", term, 5, &netsyv1.Heartbeat{NodeId: "r1", Health: health})
			h.want(objwal.ModeSync, 0)
			st := h.q.status(h.clk.Now())
			if len(st.Replicas) != 1 || st.Replicas[0].Counted || st.Replicas[0].NotCountedReason == "" {
				t.Fatalf("status %v", st)
			}
			// Its later receipts without a heartbeat do not count either.
			h.q.heard("r1", term, 6, nil)
			h.want(objwal.ModeSync, 0)
		})
	}
}

// A lone node's quorum, which appends do not wake, still falls back to
// object storage the moment its lease ends, not at its next tick: here
// the lease ends at 230 ms, between the ticks at 200 and 250 ms.
func TestQuorumAloneFallsBackWhenTheLeaseEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newQuorum(t, -1, 1) // ticks every 50 ms, a 200 ms lease
		runQuorum(t, h)
		synctest.Wait()
		h.clk.Advance(30 * time.Millisecond)
		answered(h.p, h.clk.Now()) // the lease now ends at 230 ms
		h.clk.Advance(199 * time.Millisecond)
		synctest.Wait()
		h.want(objwal.ModeAsync, 0)
		h.clk.Advance(time.Millisecond)
		synctest.Wait()
		h.want(objwal.ModeSync, 0)
	})
}

// An append made while receipts start to decide, after the evaluation read
// the log's end, is marked at once (the evaluation sets wantAppends before
// its read, so the append pokes run), not at the next tick.
func TestQuorumMarksAnAppendMadeAsReceiptsStartToDecide(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newQuorum(t, -1, 1)
		eng := runQuorum(t, h)
		synctest.Wait()
		eng.nmu.Lock()
		eng.afterRead = func() { eng.appendTo(6) }
		eng.nmu.Unlock()
		h.q.setRegistered(2, qmembers, true)
		synctest.Wait()
		h.q.mu.Lock()
		mark := h.q.lastMark
		h.q.mu.Unlock()
		if mark != 6 {
			t.Errorf("lastMark = %d, want 6: the append made as receipts started to decide waits for a tick", mark)
		}
	})
}

// A lone node whose lease was renewed late, with the local fsync let back
// by an evaluation other than run's (a Cluster State push), still switches
// to object storage when that renewed lease ends, not at the next tick:
// the evaluation makes run arm its timer for the new end.
func TestQuorumAloneFallsBackWhenARenewalJudgedElsewhereEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newQuorum(t, -1, 1) // ticks every 50 ms, lease 200 ms, answered at 0
		eng := runQuorum(t, h)
		synctest.Wait()
		h.clk.Advance(210 * time.Millisecond) // lapsed at 200
		synctest.Wait()
		h.want(objwal.ModeSync, 0)
		// A late answer (sent at 20 ms) renews the lease to 220 ms, and
		// the Cluster State push that came with it judges: local fsync.
		answered(h.p, epoch.Add(20*time.Millisecond))
		h.q.setRegistered(1, qmembers, true)
		h.want(objwal.ModeAsync, 0)
		synctest.Wait()
		h.clk.Advance(15 * time.Millisecond) // 225: over; the next tick is at 250
		synctest.Wait()
		eng.appendTo(7)
		synctest.Wait()
		if h.p.LeaseHeld() {
			t.Fatal("lease still held at 225 ms")
		}
		if m, _ := h.log.get(); m != objwal.ModeSync {
			t.Errorf("log mode %s at 225 ms: still acknowledging on the local fsync after the lease ended at 220 ms", m)
		}
	})
}

// runQuorum runs h's quorum goroutine on a notifyEngine over h's engine
// until the test ends, and returns that engine.
func runQuorum(t *testing.T, h *qharness) *notifyEngine {
	eng := &notifyEngine{fakeEngine: h.eng}
	h.p.cfg.Engine = eng
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { h.q.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return eng
}
