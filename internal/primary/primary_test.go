package primary

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/objwal"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The life-cycle tests drive a Primary through its loop with fakes for
// the engine and the log. Time is a fake clock; a test that would hang
// fails on the guard instead.

// recorder keeps, in order, what the fakes were asked to do.
type recorder struct {
	mu     sync.Mutex
	events []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, fmt.Sprintf(format, args...))
}

func (r *recorder) get() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// hold keeps a fake call running until the test releases it (or the
// call's context ends); entered says it is being held.
type hold struct {
	entered chan struct{}
	release chan struct{}
}

func newHold() *hold {
	return &hold{entered: make(chan struct{}, 1), release: make(chan struct{})}
}

func (h *hold) wait(ctx context.Context) error {
	if h == nil {
		return nil
	}
	h.entered <- struct{}{}
	select {
	case <-h.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// lcEngine is the engine as the life cycle uses it.
type lcEngine struct {
	*fakeEngine
	rec      *recorder
	log      *lcLog
	termFile string
	appendCh chan struct{} // never closed: no appends

	hmu         sync.Mutex
	promoteHold *hold
	demoteHold  *hold
	// promoteErr, when set, fails Promote after its prepare (the claim)
	// succeeded, as the engine refuses a term below its log's.
	promoteErr error
}

func (e *lcEngine) AppendNotify() <-chan struct{} { return e.appendCh }
func (e *lcEngine) WatchAppends(chan<- struct{}, *atomic.Bool) func() {
	return func() {} // no appends
}
func (e *lcEngine) CurrentRevision() int64 { return int64(e.CommittedIndex()) + 100 }

// Promote records what Starting had done when the engine was promoted:
// the term on disk and the log's mode. The claim is its Starting step.
func (e *lcEngine) Promote(ctx context.Context, term int64, prepare func(context.Context) error) error {
	e.hmu.Lock()
	h := e.promoteHold
	e.hmu.Unlock()
	onDisk, err := readTerm(e.termFile)
	if err != nil {
		return err
	}
	mode, _ := e.log.get()
	e.rec.add("promote %d (term file %d, log %s)", term, onDisk, mode)
	if err := h.wait(ctx); err != nil {
		return err
	}
	if err := prepare(ctx); err != nil {
		return err
	}
	e.hmu.Lock()
	defer e.hmu.Unlock()
	return e.promoteErr
}

func (e *lcEngine) Demote(ctx context.Context, flush bool) (uint64, error) {
	e.hmu.Lock()
	h := e.demoteHold
	e.hmu.Unlock()
	e.rec.add("demote flush=%v", flush)
	if err := h.wait(ctx); err != nil {
		return 0, err
	}
	return e.CommittedIndex(), nil
}

func (e *lcEngine) HoldStorage(ctx context.Context) error {
	e.rec.add("hold storage")
	return nil
}

func (e *lcEngine) LeaseRenew(ctx context.Context, id int64) (int64, error) {
	e.rec.add("lease renew %d", id)
	return 10, nil
}

func (e *lcEngine) holdPromote() *hold {
	e.hmu.Lock()
	defer e.hmu.Unlock()
	e.promoteHold = newHold()
	return e.promoteHold
}

func (e *lcEngine) holdDemote() *hold {
	e.hmu.Lock()
	defer e.hmu.Unlock()
	e.demoteHold = newHold()
	return e.demoteHold
}

// lcLog is object storage as the life cycle uses it. Every StillWriter
// call is handed to the test, which answers it.
type lcLog struct {
	*fakeLog
	rec    *recorder
	checks chan fenceCall

	hmu         sync.Mutex
	claimErr    error
	releaseHold *hold
}

// fenceCall is one StillWriter call waiting for the test's answer.
type fenceCall struct{ reply chan error }

func (l *lcLog) Claim(ctx context.Context) error {
	l.hmu.Lock()
	err := l.claimErr
	l.hmu.Unlock()
	l.rec.add("claim")
	return err
}

func (l *lcLog) Release(ctx context.Context, flush bool, keep uint64) error {
	l.hmu.Lock()
	h := l.releaseHold
	l.hmu.Unlock()
	l.rec.add("release flush=%v keep=%d", flush, keep)
	return h.wait(ctx)
}

func (l *lcLog) StillWriter(ctx context.Context) error {
	c := fenceCall{reply: make(chan error, 1)}
	select {
	case l.checks <- c:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-c.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *lcLog) holdRelease() *hold {
	l.hmu.Lock()
	defer l.hmu.Unlock()
	l.releaseHold = newHold()
	return l.releaseHold
}

func (l *lcLog) failClaim(err error) {
	l.hmu.Lock()
	defer l.hmu.Unlock()
	l.claimErr = err
}

type change struct {
	state netsyv1.PrimaryState
	term  uint64
}

func (c change) String() string { return fmt.Sprintf("%s at %d", c.state, c.term) }

// lharness is one Primary with its fakes.
type lharness struct {
	t        *testing.T
	ctx      context.Context // the guard: a hang fails the test
	clk      *clock.Fake
	rec      *recorder
	eng      *lcEngine
	log      *lcLog
	p        *Primary
	cfg      Config
	termFile string
	changes  chan change
}

const (
	self   = "p"
	window = 200 * time.Millisecond // LeaseWindow
)

func newPrimary(t *testing.T, edit func(*Config)) *lharness {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	h := &lharness{t: t, ctx: ctx, clk: clock.NewFake(epoch), rec: &recorder{},
		termFile: filepath.Join(t.TempDir(), "term"), changes: make(chan change, 64)}
	fe := &fakeEngine{committed: 4, last: 4}
	// A follower's log may be in any mode; Starting must set sync.
	h.log = &lcLog{fakeLog: &fakeLog{eng: fe, mode: objwal.ModeAsync}, rec: h.rec, checks: make(chan fenceCall)}
	h.eng = &lcEngine{fakeEngine: fe, rec: h.rec, log: h.log, termFile: h.termFile, appendCh: make(chan struct{})}
	h.cfg = Config{
		Self: self, Engine: h.eng, Log: h.log,
		QuorumTimeout: 300 * time.Millisecond, HeartbeatInterval: 100 * time.Millisecond,
		LeaseWindow: window, DrainTimeout: 2 * time.Second,
		TermFile: h.termFile,
		StopFollowing: func(context.Context) error {
			h.rec.add("stop following")
			return nil
		},
		Changed: func(s netsyv1.PrimaryState, term uint64) { h.changes <- change{s, term} },
		Clock:   h.clk,
	}
	if edit != nil {
		edit(&h.cfg)
	}
	h.start()
	return h
}

// start runs a new Primary over the same fakes and term file.
func (h *lharness) start() {
	h.t.Helper()
	p, err := New(h.cfg)
	if err != nil {
		h.t.Fatal(err)
	}
	p.Start()
	h.t.Cleanup(p.Close)
	h.p = p
}

// clusterState names primary at term in a cluster of this node and two
// replicas, r1 and r2.
func clusterState(primary string, term uint64) *netsyv1.ClusterState {
	return &netsyv1.ClusterState{Primary: &netsyv1.NodeInfo{NodeId: primary}, PrimaryTerm: term, RegisteredNodes: 3,
		Members: []*netsyv1.NodeInfo{{NodeId: self}, {NodeId: "r1"}, {NodeId: "r2"}}}
}

// expect takes the next state change and checks it.
func (h *lharness) expect(state netsyv1.PrimaryState, term uint64) {
	h.t.Helper()
	select {
	case c := <-h.changes:
		if want := (change{state, term}); c != want {
			h.t.Fatalf("state changed to %s, want %s", c, want)
		}
	case <-h.ctx.Done():
		h.t.Fatalf("waiting for %s at %d", state, term)
	}
}

// barrier returns once the loop has handled everything sent before it.
func (h *lharness) barrier() {
	h.t.Helper()
	done := make(chan struct{})
	h.p.send(func() { close(done) })
	select {
	case <-done:
	case <-h.ctx.Done():
		h.t.Fatal("waiting for the loop")
	}
}

// noChange checks that the loop changed no state.
func (h *lharness) noChange() {
	h.t.Helper()
	h.barrier()
	select {
	case c := <-h.changes:
		h.t.Fatalf("unexpected state change to %s", c)
	default:
	}
}

// activate makes the Primary Active at term.
func (h *lharness) activate(term uint64) {
	h.t.Helper()
	h.p.Observe(clusterState(self, term))
	h.expect(netsyv1.PrimaryState_STARTING, term)
	h.expect(netsyv1.PrimaryState_ACTIVE, term)
}

// confirmNow asks ConfirmLinearizable with a context that has already
// ended: nil means the lease answered, ErrNotActive a refusal, and
// context.Canceled that the call would wait for a fence check.
func (h *lharness) confirmNow() error {
	ctx, cancel := context.WithCancel(h.ctx)
	cancel()
	return h.p.ConfirmLinearizable(ctx)
}

// confirmAsync runs ConfirmLinearizable on a goroutine.
func (h *lharness) confirmAsync() <-chan error {
	out := make(chan error, 1)
	go func() { out <- h.p.ConfirmLinearizable(h.ctx) }()
	return out
}

// nextCheck returns the next fence check the Primary started.
func (h *lharness) nextCheck() fenceCall {
	h.t.Helper()
	select {
	case c := <-h.log.checks:
		return c
	case <-h.ctx.Done():
		h.t.Fatal("waiting for a fence check")
	}
	return fenceCall{}
}

func (h *lharness) result(ch <-chan error) error {
	h.t.Helper()
	select {
	case err := <-ch:
		return err
	case <-h.ctx.Done():
		h.t.Fatal("waiting for an answer")
	}
	return nil
}

func (h *lharness) entered(hd *hold, what string) {
	h.t.Helper()
	select {
	case <-hd.entered:
	case <-h.ctx.Done():
		h.t.Fatalf("waiting for %s", what)
	}
}

func (h *lharness) wantEvents(want ...string) {
	h.t.Helper()
	if got := h.rec.get(); !slices.Equal(got, want) {
		h.t.Fatalf("events:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(want, "\n  "))
	}
}

// A Cluster State naming this node Primary runs Starting in order (the
// replica role stops feeding the engine, the term is on disk and the log
// in sync mode before the engine is promoted with the claim as its
// Starting step) and makes it Active. While Starting it answers nothing
// an Active Primary answers.
func TestPrimaryStartingThenActive(t *testing.T) {
	h := newPrimary(t, nil)
	if s, term := h.p.State(); s != netsyv1.PrimaryState_REPLICA || term != 0 || h.p.Active() {
		t.Fatalf("new Primary is %s at %d", s, term)
	}
	h.p.Observe(clusterState("other", 7))
	h.noChange()

	held := h.eng.holdPromote()
	h.p.Observe(clusterState(self, 7))
	h.expect(netsyv1.PrimaryState_STARTING, 7)
	h.entered(held, "the promotion")
	if h.p.Active() {
		t.Fatal("Active while Starting")
	}
	if err := h.confirmNow(); !errors.Is(err, ErrNotActive) {
		t.Fatalf("ConfirmLinearizable while Starting: %v, want ErrNotActive", err)
	}
	close(held.release)
	h.expect(netsyv1.PrimaryState_ACTIVE, 7)
	h.wantEvents("stop following", "promote 7 (term file 7, log sync)", "claim")
	if s, term := h.p.State(); s != netsyv1.PrimaryState_ACTIVE || term != 7 || !h.p.Active() {
		t.Fatalf("after Starting: %s at %d, Active %v", s, term, h.p.Active())
	}
	if got, err := readTerm(h.termFile); err != nil || got != 7 {
		t.Fatalf("term file: %d, %v", got, err)
	}
	if h.p.Replication() == nil {
		t.Fatal("an Active Primary reports no replication")
	}
}

// A Starting step that fails (here the claim) leaves the node a Replica;
// the term was on disk before the claim, so it is not tried again.
func TestPrimaryFailedStartingIsReplica(t *testing.T) {
	h := newPrimary(t, nil)
	h.log.failClaim(fmt.Errorf("claim wal/5: %w", objwal.ErrFenced))
	h.p.Observe(clusterState(self, 7))
	h.expect(netsyv1.PrimaryState_STARTING, 7)
	h.expect(netsyv1.PrimaryState_REPLICA, 7)
	if h.p.Active() {
		t.Fatal("Active after a failed Starting")
	}
	h.wantEvents("stop following", "promote 7 (term file 7, log sync)", "claim")

	h.p.Observe(clusterState(self, 7))
	h.expect(netsyv1.PrimaryState_REPLICA, 7)
	h.wantEvents("stop following", "promote 7 (term file 7, log sync)", "claim")

	h.log.failClaim(nil)
	h.activate(8)
}

// A Starting step that fails after the log claimed the next wal seq (the
// engine refuses to write at a term below its log's: a push that waited
// out a stall named this node at a term a newer Primary has written
// past) gives the writer role back: a log left the writer refuses the
// Follow stream ("the writer cannot truncate its log") and uploads at its
// claimed seq until the newer writer fences it and the engine is deposed
// for good. Found by TestChaos (seed 80: a node never followed again).
func TestPrimaryStartingFailedAfterTheClaimReleasesTheLog(t *testing.T) {
	h := newPrimary(t, nil)
	h.eng.hmu.Lock()
	h.eng.promoteErr = errors.New("engine: promote at term 3: the log already holds entries of term 4")
	h.eng.hmu.Unlock()
	h.p.Observe(clusterState(self, 3))
	h.expect(netsyv1.PrimaryState_STARTING, 3)
	h.expect(netsyv1.PrimaryState_REPLICA, 3)
	h.wantEvents("stop following", "promote 3 (term file 3, log sync)", "claim", "release flush=false keep=4")
}

// A Starting step that outlived its election gives its claim back: when
// a newer primary term was handed out (members.json) by the time this
// node claimed the next wal seq, that term's Primary may have claimed
// before it, and writes acknowledged after its claim would be invisible
// to that Primary's lease-based reads. Found by TestChaos (seed 225 of
// -clustersim.seeds=600: a node whose bucket was cut while Starting at
// term 2 went Active after the Primary of term 3 had, and acknowledged
// writes that a linearizable read through the other missed). A term
// still the highest lets it go Active.
func TestPrimaryStartingOutlivedByANewerTermGivesTheClaimBack(t *testing.T) {
	var highest atomic.Uint64
	highest.Store(4)
	h := newPrimary(t, func(c *Config) {
		c.HighestTerm = func(context.Context) (uint64, error) { return highest.Load(), nil }
	})
	h.p.Observe(clusterState(self, 3))
	h.expect(netsyv1.PrimaryState_STARTING, 3)
	h.expect(netsyv1.PrimaryState_REPLICA, 3)
	h.wantEvents("stop following", "promote 3 (term file 3, log sync)", "claim", "demote flush=false", "release flush=false keep=4", "hold storage")

	h.p.Observe(clusterState(self, 4))
	h.expect(netsyv1.PrimaryState_STARTING, 4)
	h.expect(netsyv1.PrimaryState_ACTIVE, 4)
}

// A replica role that cannot stop following fails Starting before
// anything is promoted.
func TestPrimaryStopFollowingFails(t *testing.T) {
	h := newPrimary(t, func(c *Config) {
		c.StopFollowing = func(context.Context) error { return errors.New("stream stuck") }
	})
	h.p.Observe(clusterState(self, 7))
	h.expect(netsyv1.PrimaryState_STARTING, 7)
	h.expect(netsyv1.PrimaryState_REPLICA, 7)
	h.wantEvents()
	if got, _ := readTerm(h.termFile); got != 0 {
		t.Fatalf("term file holds %d", got)
	}
}

// A node never takes a term twice: one at or below the highest it took
// is refused (told once, as a Replica at that term), also after a
// restart, which reads the term file.
func TestPrimaryRefusesATermItHeld(t *testing.T) {
	h := newPrimary(t, nil)
	h.p.Close()
	if err := writeTerm(h.termFile, 7); err != nil {
		t.Fatal(err)
	}
	h.start()
	if s, term := h.p.State(); s != netsyv1.PrimaryState_REPLICA || term != 7 {
		t.Fatalf("restarted as %s at %d", s, term)
	}
	h.p.Observe(clusterState(self, 7))
	h.expect(netsyv1.PrimaryState_REPLICA, 7)
	h.p.Observe(clusterState(self, 7))
	h.noChange()
	h.p.Observe(clusterState(self, 5))
	h.expect(netsyv1.PrimaryState_REPLICA, 5)
	h.wantEvents()

	h.activate(8)
	if got, _ := readTerm(h.termFile); got != 8 {
		t.Fatalf("term file holds %d, want 8", got)
	}
	if err := h.p.Drain(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.expect(netsyv1.PrimaryState_DRAINING, 8)
	h.expect(netsyv1.PrimaryState_REPLICA, 8)
	h.p.Observe(clusterState(self, 8)) // drained: not again
	h.expect(netsyv1.PrimaryState_REPLICA, 8)
	h.p.Close()

	h.start()
	h.p.Observe(clusterState(self, 8)) // restarted: not again
	h.expect(netsyv1.PrimaryState_REPLICA, 8)
	if n := strings.Count(strings.Join(h.rec.get(), "\n"), "promote"); n != 1 {
		t.Fatalf("%d promotions, want 1: %q", n, h.rec.get())
	}
}

// TookTerm is what the term file holds: after a restart the term the dead
// process took (not a term a refused Cluster State named since), and while
// the node is Starting at a new term, the old one until the file holds the
// new one: read before State, it never pairs Replica with a term the node
// is still taking up (the Elector skips a lease wait on that pair).
func TestPrimaryTookTermIsTheTermFiles(t *testing.T) {
	stop := newHold()
	h := newPrimary(t, func(c *Config) { c.StopFollowing = stop.wait })
	h.p.Close()
	if err := writeTerm(h.termFile, 7); err != nil {
		t.Fatal(err)
	}
	h.start()
	if got := h.p.TookTerm(); got != 7 {
		t.Fatalf("restarted with a term file of 7: TookTerm %d", got)
	}
	h.p.Observe(clusterState(self, 5))
	h.expect(netsyv1.PrimaryState_REPLICA, 5)
	if got := h.p.TookTerm(); got != 7 {
		t.Fatalf("after refusing term 5: TookTerm %d, want 7", got)
	}
	h.p.Observe(clusterState(self, 8))
	h.expect(netsyv1.PrimaryState_STARTING, 8)
	h.entered(stop, "stop following")
	if got := h.p.TookTerm(); got != 7 {
		t.Fatalf("Starting at 8 before the term file holds it: TookTerm %d, want 7", got)
	}
	close(stop.release)
	h.expect(netsyv1.PrimaryState_ACTIVE, 8)
	if got, _ := readTerm(h.termFile); got != 8 || h.p.TookTerm() != 8 {
		t.Fatalf("Active at 8: term file %d, TookTerm %d", got, h.p.TookTerm())
	}
}

// A damaged term file stops New: guessing could take a term twice.
func TestPrimaryDamagedTermFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "term")
	if err := os.WriteFile(path, []byte(`{"term":`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{TermFile: path}); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("New: %v", err)
	}
}

// The lease counts from the send time of an answered heartbeat, never
// from becoming Active; an older answer does not shorten it.
func TestPrimaryLease(t *testing.T) {
	h := newPrimary(t, nil)
	h.activate(7)
	if h.p.LeaseHeld() {
		t.Fatal("becoming Active started a lease")
	}
	sent := h.clk.Now()
	h.clk.Advance(50 * time.Millisecond)
	answered(h.p, sent)
	answered(h.p, sent.Add(-100*time.Millisecond))
	h.clk.Advance(window - 50*time.Millisecond - 1)
	if !h.p.LeaseHeld() {
		t.Fatal("lease lapsed early")
	}
	h.clk.Advance(1)
	if h.p.LeaseHeld() {
		t.Fatal("lease held a window after the heartbeat was sent")
	}
}

// A step of the wall clock changes nothing about the lease (SPEC §5.4): a
// lapsed lease stays lapsed when the clock steps back 30 s, so a
// linearizable read waits for a fence check and a failed one refuses it;
// a current lease does not end when it steps forward 30 s. It runs on the
// Fake and on a model of a real host's clock, where a lease kept as wall
// nanoseconds would see the step.
func TestPrimaryLeaseIgnoresWallClockSteps(t *testing.T) {
	for _, host := range []bool{false, true} {
		t.Run(map[bool]string{false: "fake", true: "host"}[host], func(t *testing.T) {
			h := newPrimary(t, func(c *Config) {
				if host {
					c.Clock = newHostClock(t, c.Clock.(*clock.Fake))
				}
			})
			clk := h.p.cfg.Clock
			h.activate(7)
			answered(h.p, clk.Now())
			h.clk.Advance(window)
			h.clk.StepWall(-30 * time.Second)
			if h.p.LeaseHeld() {
				t.Fatal("a step back of the wall clock revived a lapsed lease")
			}
			r := h.confirmAsync()
			h.nextCheck().reply <- errors.New("bucket unreachable")
			if err := h.result(r); !errors.Is(err, engine.ErrNoLeader) {
				t.Fatalf("read on a lapsed lease after a step back: %v, want ErrNoLeader from the fence check", err)
			}

			answered(h.p, clk.Now())
			h.clk.StepWall(30 * time.Second)
			if !h.p.LeaseHeld() {
				t.Fatal("a step forward of the wall clock ended a current lease")
			}
			if err := h.confirmNow(); err != nil {
				t.Fatalf("under the lease after a step forward: %v", err)
			}
			h.clk.Advance(window - 1)
			if !h.p.LeaseHeld() {
				t.Fatal("lease lapsed early")
			}
			h.clk.Advance(1)
			if h.p.LeaseHeld() {
				t.Fatal("lease held a window after the heartbeat was sent")
			}
		})
	}
}

// ConfirmLinearizable: a refusal when not Active, nil from the lease
// while it holds, else the answer of a fence check; ReadIndex answers
// the commit point, revision and term, confirmed.
func TestPrimaryConfirmLinearizable(t *testing.T) {
	h := newPrimary(t, nil)
	if err := h.confirmNow(); !errors.Is(err, ErrNotActive) {
		t.Fatalf("a Replica: %v, want ErrNotActive", err)
	}
	if _, err := h.p.ReadIndex(h.ctx); !errors.Is(err, ErrNotActive) {
		t.Fatalf("ReadIndex on a Replica: %v, want ErrNotActive", err)
	}
	h.activate(7)

	// No lease yet: a check answers.
	r := h.confirmAsync()
	h.nextCheck().reply <- nil
	if err := h.result(r); err != nil {
		t.Fatal(err)
	}

	answered(h.p, h.clk.Now())
	if err := h.confirmNow(); err != nil {
		t.Fatalf("under the lease: %v", err)
	}
	ri, err := h.p.ReadIndex(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ri.Index != 4 || ri.Revision != 104 || ri.PrimaryTerm != 7 {
		t.Fatalf("ReadIndex %v", ri)
	}

	h.clk.Advance(window)
	r = h.confirmAsync()
	h.nextCheck().reply <- errors.New("bucket unreachable")
	if err := h.result(r); !errors.Is(err, engine.ErrNoLeader) || !strings.Contains(err.Error(), "bucket unreachable") {
		t.Fatalf("failed check: %v, want ErrNoLeader", err)
	}
	// A check that could not tell deposes nobody.
	h.noChange()
	if !h.p.Active() {
		t.Fatal("a failed check made the Primary step down")
	}
	h.wantEvents("stop following", "promote 7 (term file 7, log sync)", "claim")
}

// Concurrent reads on a lapsed lease share checks, and each waits for a
// check that began after it arrived: callers that arrive while a check
// runs are answered by the next one, all of them by that one.
func TestPrimaryFenceChecksBatch(t *testing.T) {
	h := newPrimary(t, nil)
	h.activate(7)

	a := h.confirmAsync()
	first := h.nextCheck()
	b, c := h.confirmAsync(), h.confirmAsync()
	waitFor(t, "b and c wait", func() bool {
		h.p.checks.mu.Lock()
		defer h.p.checks.mu.Unlock()
		return len(h.p.checks.waiting) == 2
	})
	first.reply <- nil
	var second fenceCall
	for aDone, started := false, false; !aDone || !started; {
		select {
		case err := <-a:
			if err != nil {
				t.Fatalf("a: %v", err)
			}
			aDone = true
		case second = <-h.log.checks:
			started = true
		case err := <-b:
			t.Fatalf("b was answered (%v) by a check that began before it arrived", err)
		case err := <-c:
			t.Fatalf("c was answered (%v) by a check that began before it arrived", err)
		case <-h.ctx.Done():
			t.Fatal("waiting for a's answer and the second check")
		}
	}
	second.reply <- errors.New("second check")
	for name, ch := range map[string]<-chan error{"b": b, "c": c} {
		if err := h.result(ch); err == nil || !strings.Contains(err.Error(), "second check") {
			t.Fatalf("%s: %v, want the second check's answer", name, err)
		}
	}
	waitFor(t, "the checker stops", func() bool {
		h.p.checks.mu.Lock()
		defer h.p.checks.mu.Unlock()
		return !h.p.checks.running
	})
	select {
	case <-h.log.checks:
		t.Fatal("a third check for nobody")
	default:
	}
}

// A check that finds the next seq taken deposes the Primary.
func TestPrimaryFencedCheckDeposes(t *testing.T) {
	fenced := make(chan uint64, 4)
	h := newPrimary(t, func(c *Config) {
		c.Fenced = func(err error, term uint64) {
			if !errors.Is(err, objwal.ErrFenced) {
				t.Errorf("Fenced told %v", err)
			}
			fenced <- term
		}
	})
	h.activate(7)
	r := h.confirmAsync()
	h.nextCheck().reply <- fmt.Errorf("wal/9 exists: %w", objwal.ErrFenced)
	if err := h.result(r); !errors.Is(err, engine.ErrNoLeader) {
		t.Fatalf("fenced check: %v, want ErrNoLeader", err)
	}
	h.expect(netsyv1.PrimaryState_REPLICA, 7)
	h.wantEvents("stop following", "promote 7 (term file 7, log sync)", "claim", "demote flush=false", "release flush=false keep=4", "hold storage")
	if err := h.confirmNow(); !errors.Is(err, ErrNotActive) {
		t.Fatalf("after stepping down: %v", err)
	}
	// The node is told, with the term lost, so its health endpoints say so.
	if len(fenced) != 1 || <-fenced != 7 {
		t.Fatal("Fenced was not told once of the fence at term 7")
	}
}

// From the moment an Active Primary decides to step down (fenced, or a
// Cluster State names another Primary at a higher term) it is not Active:
// it refuses linearizable reads, read indexes and lease renewals although
// its lease holds and Demote and Release still run; it is a Replica once
// they finish.
func TestPrimaryStepDownIsImmediate(t *testing.T) {
	for _, tc := range []struct {
		name string
		why  func(p *Primary)
	}{
		{"deposed", func(p *Primary) { p.Deposed(fmt.Errorf("wal/9: %w", objwal.ErrFenced)) }},
		{"superseded", func(p *Primary) { p.Observe(clusterState("other", 8)) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newPrimary(t, nil)
			h.activate(7)
			answered(h.p, h.clk.Now())
			if err := h.confirmNow(); err != nil {
				t.Fatal(err)
			}
			demote, release := h.eng.holdDemote(), h.log.holdRelease()
			tc.why(h.p)
			refuses := func(while string) {
				t.Helper()
				if h.p.Active() {
					t.Fatalf("Active while %s", while)
				}
				if s, _ := h.p.State(); s == netsyv1.PrimaryState_REPLICA {
					t.Fatalf("a Replica while %s", while)
				}
				if err := h.confirmNow(); !errors.Is(err, ErrNotActive) {
					t.Fatalf("ConfirmLinearizable while %s: %v, want ErrNotActive", while, err)
				}
				if _, err := h.p.ReadIndex(h.ctx); !errors.Is(err, ErrNotActive) {
					t.Fatalf("ReadIndex while %s: %v, want ErrNotActive", while, err)
				}
				if _, err := h.p.LeaseRenew(h.ctx, 1); !errors.Is(err, engine.ErrNotPrimary) {
					t.Fatalf("LeaseRenew while %s: %v", while, err)
				}
				if h.p.Replication() != nil {
					t.Fatalf("replication reported while %s", while)
				}
			}
			h.entered(demote, "Demote")
			refuses("Demote runs")
			close(demote.release)
			h.entered(release, "Release")
			refuses("Release runs")
			h.p.Deposed(objwal.ErrFenced) // already stepping down: nothing more
			close(release.release)
			h.expect(netsyv1.PrimaryState_REPLICA, 7)
			h.noChange()
			if h.p.Active() {
				t.Fatal("Active after stepping down")
			}
			h.wantEvents("stop following", "promote 7 (term file 7, log sync)", "claim", "demote flush=false", "release flush=false keep=4", "hold storage")
		})
	}
}

// Only a newer Cluster State naming another Primary supersedes: a stale
// one does not, nor does being deposed as a Replica.
func TestPrimaryStaleStateDoesNotStepDown(t *testing.T) {
	h := newPrimary(t, nil)
	h.p.Deposed(objwal.ErrFenced)
	h.noChange()
	h.activate(7)
	h.p.Observe(clusterState("other", 6))
	h.p.Observe(clusterState("other", 7))
	h.p.Observe(clusterState(self, 7))
	h.noChange()
	if !h.p.Active() {
		t.Fatal("stepped down on a stale Cluster State")
	}
	h.wantEvents("stop following", "promote 7 (term file 7, log sync)", "claim")
}

// A Cluster State that arrives while Starting is acted on once Starting
// ends: superseded meanwhile, the new Primary steps down at once.
func TestPrimarySupersededWhileStarting(t *testing.T) {
	h := newPrimary(t, nil)
	held := h.eng.holdPromote()
	h.p.Observe(clusterState(self, 7))
	h.expect(netsyv1.PrimaryState_STARTING, 7)
	h.entered(held, "the promotion")
	h.p.Observe(clusterState("other", 8))
	h.barrier()
	close(held.release)
	h.expect(netsyv1.PrimaryState_ACTIVE, 7)
	h.expect(netsyv1.PrimaryState_REPLICA, 7)
	h.wantEvents("stop following", "promote 7 (term file 7, log sync)", "claim", "demote flush=false", "release flush=false keep=4", "hold storage")
}

// Drain: an Active Primary is Draining (no longer Active; writes go to
// object storage at once), demotes and releases with a flush, and is a
// Replica.
func TestPrimaryDrain(t *testing.T) {
	h := newPrimary(t, func(c *Config) { c.Quorum = 1 })
	h.activate(7)
	answered(h.p, h.clk.Now())
	h.p.quorum.open("r1", 7)
	h.p.quorum.heard("r1", 7, 4, &netsyv1.Heartbeat{NodeId: "r1", Health: netsyv1.HealthState_HEALTHY})
	if m, _ := h.log.get(); m != objwal.ModeQuorum {
		t.Fatalf("log in %s before the drain", m)
	}
	demote := h.eng.holdDemote()
	drained := make(chan error, 1)
	go func() { drained <- h.p.Drain(h.ctx) }()
	h.expect(netsyv1.PrimaryState_DRAINING, 7)
	h.entered(demote, "Demote")
	if h.p.Active() {
		t.Fatal("Active while Draining")
	}
	if err := h.confirmNow(); !errors.Is(err, ErrNotActive) {
		t.Fatalf("ConfirmLinearizable while Draining: %v", err)
	}
	if m, _ := h.log.get(); m != objwal.ModeSync {
		t.Fatalf("log in %s while Draining", m)
	}
	close(demote.release)
	h.expect(netsyv1.PrimaryState_REPLICA, 7)
	if err := h.result(drained); err != nil {
		t.Fatal(err)
	}
	h.wantEvents("stop following", "promote 7 (term file 7, log sync)", "claim", "demote flush=true", "release flush=true keep=4", "hold storage")
}

// A drain that outlasts DrainTimeout (on the clock) fails, and the node
// is a Replica all the same.
func TestPrimaryDrainTimeout(t *testing.T) {
	h := newPrimary(t, nil)
	h.activate(7)
	demote := h.eng.holdDemote()
	drained := make(chan error, 1)
	go func() { drained <- h.p.Drain(h.ctx) }()
	h.expect(netsyv1.PrimaryState_DRAINING, 7)
	h.entered(demote, "Demote")
	h.clk.Advance(h.cfg.DrainTimeout)
	h.expect(netsyv1.PrimaryState_REPLICA, 7)
	if err := h.result(drained); !errors.Is(err, context.Canceled) {
		t.Fatalf("Drain: %v, want the timeout", err)
	}
	h.wantEvents("stop following", "promote 7 (term file 7, log sync)", "claim", "demote flush=true")
}

// Drain on a Replica has nothing to do; on a Starting Primary it is
// refused.
func TestPrimaryDrainWhenNotActive(t *testing.T) {
	h := newPrimary(t, nil)
	if err := h.p.Drain(h.ctx); err != nil {
		t.Fatalf("Drain on a Replica: %v", err)
	}
	held := h.eng.holdPromote()
	h.p.Observe(clusterState(self, 7))
	h.expect(netsyv1.PrimaryState_STARTING, 7)
	h.entered(held, "the promotion")
	if err := h.p.Drain(h.ctx); err == nil || !strings.Contains(err.Error(), "STARTING") {
		t.Fatalf("Drain while Starting: %v", err)
	}
	close(held.release)
	h.expect(netsyv1.PrimaryState_ACTIVE, 7)
	h.noChange()
	h.wantEvents("stop following", "promote 7 (term file 7, log sync)", "claim")
}

// The quorum lowers its count of registered nodes only on a Cluster State
// that vouches for it: one naming this node Primary at the term it holds
// and listing it among a nonzero count of registered nodes. A state from
// an Elector that had not loaded (0 registered), one that does not list
// this node, names another Primary or none, or is of an older term never
// lowers it: with two replicas the Primary keeps needing a receipt and
// never acknowledges on its own fsync. Raising the count is always safe.
func TestPrimaryQuorumCountLowersOnlyOnAuthoritativeState(t *testing.T) {
	h := newPrimary(t, func(c *Config) { c.Quorum = -1 })
	h.activate(7)
	answered(h.p, h.clk.Now())
	h.p.quorum.open("r1", 7)
	h.p.quorum.heard("r1", 7, 4, &netsyv1.Heartbeat{NodeId: "r1", Health: netsyv1.HealthState_HEALTHY})
	wantNeeded := func(what string, n uint32, mode objwal.Mode) {
		t.Helper()
		h.barrier()
		if st := h.p.Replication(); st.GetReplicasNeeded() != n {
			t.Fatalf("%s: %d replicas needed, want %d (%v)", what, st.GetReplicasNeeded(), n, st)
		}
		if m, _ := h.log.get(); m != mode {
			t.Fatalf("%s: log in %s, want %s", what, m, mode)
		}
	}
	wantNeeded("three registered", 1, objwal.ModeQuorum)

	lone := func(edit func(cs *netsyv1.ClusterState)) *netsyv1.ClusterState {
		cs := clusterState(self, 7)
		cs.RegisteredNodes, cs.Members = 1, cs.Members[:1]
		edit(cs)
		return cs
	}
	for _, tc := range []struct {
		name string
		cs   *netsyv1.ClusterState
	}{
		{"an Elector that had not loaded", &netsyv1.ClusterState{Primary: &netsyv1.NodeInfo{NodeId: self}, PrimaryTerm: 7}},
		{"zero registered, listing this node", lone(func(cs *netsyv1.ClusterState) { cs.RegisteredNodes = 0 })},
		{"not listing this node", lone(func(cs *netsyv1.ClusterState) { cs.Members = []*netsyv1.NodeInfo{{NodeId: "r9"}} })},
		{"no Primary", lone(func(cs *netsyv1.ClusterState) { cs.Primary = nil })},
		{"another Primary at this term", lone(func(cs *netsyv1.ClusterState) { cs.Primary = &netsyv1.NodeInfo{NodeId: "r1"} })},
		{"an older term", lone(func(cs *netsyv1.ClusterState) { cs.PrimaryTerm = 6 })},
	} {
		h.p.Observe(tc.cs)
		wantNeeded(tc.name, 1, objwal.ModeQuorum)
	}

	// Raising is safe from any state; lowering needs an authoritative one.
	five := clusterState(self, 7)
	five.RegisteredNodes, five.Members = 5, []*netsyv1.NodeInfo{{NodeId: "r9"}}
	h.p.Observe(five)
	wantNeeded("five registered, from a state that does not list this node", 2, objwal.ModeSync)
	h.p.Observe(clusterState(self, 7))
	wantNeeded("three registered again, authoritative", 1, objwal.ModeQuorum)
	h.p.Observe(lone(func(*netsyv1.ClusterState) {}))
	wantNeeded("alone, authoritative", 0, objwal.ModeAsync)
	h.noChange()
}

// A node that left is out of the quorum the moment the count without it
// is: the Cluster State that lowers the count of registered nodes also
// lists the members whose receipts count, and a receipt from a node not
// among them never counts. Nodes p, a, b, d under majority quorum need
// two receipts; d holds index 5 while a and b (slow, inside the quorum
// timeout) hold 4; d leaves and the Elector pushes a count of three
// without it. The Primary must not acknowledge 5 on d's receipt (p and d
// alone would hold it: d exits, p crashes, and a and b form the majority
// without it); it waits for a or b.
func TestPrimaryQuorumCountsOnlyMembersOfTheAuthoritativeState(t *testing.T) {
	h := newPrimary(t, func(c *Config) { c.Quorum = -1 })
	state := func(ids ...string) *netsyv1.ClusterState {
		cs := &netsyv1.ClusterState{Primary: &netsyv1.NodeInfo{NodeId: self}, PrimaryTerm: 7, RegisteredNodes: uint32(len(ids))}
		for _, id := range ids {
			cs.Members = append(cs.Members, &netsyv1.NodeInfo{NodeId: id})
		}
		return cs
	}
	h.p.Observe(state(self, "a", "b", "d"))
	h.expect(netsyv1.PrimaryState_STARTING, 7)
	h.expect(netsyv1.PrimaryState_ACTIVE, 7)
	answered(h.p, h.clk.Now())
	q := &h.p.quorum
	h.eng.mu.Lock()
	h.eng.last = 5
	h.eng.mu.Unlock()
	q.appended(5, h.clk.Now())
	healthy := func(id string) *netsyv1.Heartbeat {
		return &netsyv1.Heartbeat{NodeId: id, Health: netsyv1.HealthState_HEALTHY}
	}
	for _, id := range []string{"a", "b", "d"} {
		q.open(id, 7)
	}
	q.heard("a", 7, 4, healthy("a"))
	q.heard("b", 7, 4, healthy("b"))
	q.heard("d", 7, 5, healthy("d"))
	if _, r := h.log.get(); r != 4 {
		t.Fatalf("replicated %d with two receipts needed and only d holding 5; want 4", r)
	}

	// d deregistered: the count without it reaches the Primary before d's
	// next receipt (which would say it is Degraded).
	h.p.Observe(state(self, "a", "b"))
	h.barrier()
	q.heard("d", 7, 5, healthy("d"))
	if m, r := h.log.get(); m != objwal.ModeQuorum || r != 4 {
		t.Fatalf("after d left: log in %s with replicated %d; want %s with 4 (p and d alone hold 5)", m, r, objwal.ModeQuorum)
	}
	st := h.p.Replication()
	for _, rs := range st.GetReplicas() {
		if rs.GetNodeId() == "d" && (rs.GetCounted() || !strings.Contains(rs.GetNotCountedReason(), "member")) {
			t.Fatalf("d after it left: counted %v (%q); want not counted, as no member", rs.GetCounted(), rs.GetNotCountedReason())
		}
	}
	q.heard("a", 7, 5, healthy("a"))
	if _, r := h.log.get(); r != 5 {
		t.Fatalf("replicated %d once a member holds 5; want 5", r)
	}

	// A state that does not vouch for its count (here one of an older
	// term) never adds members: a raised count from it keeps d out.
	stale := state(self, "a", "b", "d", "e")
	stale.PrimaryTerm = 6
	h.p.Observe(stale)
	h.barrier()
	h.eng.mu.Lock()
	h.eng.last = 6
	h.eng.mu.Unlock()
	q.appended(6, h.clk.Now())
	q.heard("d", 7, 6, healthy("d"))
	q.heard("a", 7, 6, healthy("a"))
	if _, r := h.log.get(); r != 5 {
		t.Fatalf("replicated %d with a and d holding 6 and two receipts needed of members a and b; want 5", r)
	}
	h.noChange()
}

// answered renews p's lease as roles does for an answer naming it at the
// term it holds.
func answered(p *Primary, sentAt time.Time) {
	_, term := p.State()
	p.Answered(sentAt, term)
}

// A lease never carries from one term to the next. A restarted node is a
// Replica at its term file's term, and the Elector may answer its
// heartbeats naming it at that term while it waits out that term's lease;
// elected at the next term, the node must hold no lease until an answer
// names it at the new one (the Elector counts the new term's lease from
// its own answers only). Before, the old answer's lease made the new
// term's Active Primary serve linearizable reads and quorum acks from
// memory while the Elector, counting no lease, could elect another.
func TestLeaseDoesNotCarryAcrossTerms(t *testing.T) {
	h := newPrimary(t, nil)
	h.p.Close()
	if err := writeTerm(h.termFile, 5); err != nil {
		t.Fatal(err)
	}
	h.start()
	if s, held := h.p.State(); s != netsyv1.PrimaryState_REPLICA || held != 5 {
		t.Fatalf("restarted on term file 5: %v at %d, want Replica at 5", s, held)
	}
	h.p.Answered(h.clk.Now(), 5) // an answer naming it at 5, while a Replica
	h.p.Observe(clusterState(self, 6))
	h.expect(netsyv1.PrimaryState_STARTING, 6)
	h.expect(netsyv1.PrimaryState_ACTIVE, 6)
	if h.p.LeaseHeld() {
		t.Fatalf("Active at 6 with a lease from an answer at term 5 (until %v, now %v)", h.p.LeaseUntil(), h.clk.Now())
	}
	// A late answer for the old term renews nothing either; one for the
	// new term does.
	h.p.Answered(h.clk.Now(), 5)
	if h.p.LeaseHeld() {
		t.Fatal("an answer naming the node at term 5 renewed the lease of term 6")
	}
	h.p.Answered(h.clk.Now(), 6)
	if !h.p.LeaseHeld() {
		t.Fatal("an answer naming the node at term 6 did not renew its lease")
	}
}
