package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/engine/enginetest"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

func follower(t *testing.T, st *enginetest.MemStorage, extra func(*Config)) *harness {
	t.Helper()
	return newHarness(t, st, func(c *Config) {
		c.Follower = true
		if extra != nil {
			extra(c)
		}
	})
}

// shipAll feeds the follower every entry the writer's storage holds after
// what the follower has, and commits them up to commit.
func shipAll(t *testing.T, w *enginetest.MemStorage, f *harness, term int64, commit uint64) {
	t.Helper()
	last, _, _ := f.e.LastAppended()
	if err := f.e.Follow(ctx(t), term, w.Entries(last+1)); err != nil {
		t.Fatal(err)
	}
	if err := f.e.CommitTo(ctx(t), commit); err != nil {
		t.Fatal(err)
	}
}

// A follower applies what another engine wrote only once it is committed,
// refuses writes, and once promoted writes at the new term.
func TestFollowThenPromote(t *testing.T) {
	wst := &enginetest.MemStorage{}
	w := newHarness(t, wst, func(c *Config) { c.Term = 3 })
	w.put("a", "1")
	w.put("b", "2")
	lease, err := w.e.LeaseGrant(ctx(t), &pb.LeaseGrantRequest{TTL: 30})
	if err != nil {
		t.Fatal(err)
	}
	w.put("c", "3", func(r *pb.PutRequest) { r.Lease = lease.ID })
	for _, e := range wst.Entries(1) {
		if e.Term != 3 {
			t.Fatalf("entry %d carries term %d, want the writer's 3", e.Index, e.Term)
		}
	}

	f := follower(t, nil, nil)
	if _, err := f.e.Put(ctx(t), &pb.PutRequest{Key: []byte("x")}); !errors.Is(err, ErrNotPrimary) {
		t.Fatalf("write on a follower: %v, want ErrNotPrimary", err)
	}
	shipAll(t, wst, f, 3, 2) // entries 1..4 held, 1..2 committed
	if f.value("a") != "1" || f.value("b") != "2" {
		t.Fatal("committed entries not visible on the follower")
	}
	if f.value("c") != "<none>" {
		t.Fatal("an entry the Primary had not committed is visible on the follower")
	}
	if err := f.e.CommitTo(ctx(t), 4); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return f.value("c") == "3" })
	if _, err := f.e.LeaseRenew(ctx(t), lease.ID); !errors.Is(err, ErrNotPrimary) {
		t.Fatalf("renewal on a follower: %v, want ErrNotPrimary", err)
	}
	if _, _, term := f.e.Identity(); term != 3 {
		t.Fatalf("follower reports raft term %d, want the followed 3", term)
	}
	if st, err := f.e.Status(ctx(t)); err != nil || st.RaftTerm != 3 {
		t.Fatalf("follower's Status raft term %d (%v), want the followed 3", st.GetRaftTerm(), err)
	}

	prepared := false
	if err := f.e.Promote(ctx(t), 4, func(context.Context) error { prepared = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if !prepared || !f.e.IsWriter() {
		t.Fatal("promote did not run prepare or did not make the engine the writer")
	}
	resp := f.put("d", "4")
	if resp.Header.Revision != 5 {
		t.Fatalf("first write of the new Primary at revision %d, want 5", resp.Header.Revision)
	}
	if ents := f.st.Entries(5); len(ents) != 1 || ents[0].Term != 4 {
		t.Fatalf("new Primary's entry: %+v, want one at term 4", ents)
	}
	if st, err := f.e.Status(ctx(t)); err != nil || st.RaftTerm != 4 {
		t.Fatalf("promoted engine's Status raft term %d (%v), want 4", st.GetRaftTerm(), err)
	}
	if _, _, term := f.e.Identity(); term != 4 {
		t.Fatalf("promoted engine reports raft term %d, want 4", term)
	}
	if _, err := f.e.LeaseRenew(ctx(t), lease.ID); err != nil {
		t.Fatalf("renewal on the promoted engine: %v", err)
	}
}

// Promote applies what the storage gained during prepare (the Starting
// step's catch-up from object storage).
func TestPromoteAppliesWhatPrepareAdded(t *testing.T) {
	wst := &enginetest.MemStorage{}
	w := newHarness(t, wst, nil)
	w.put("a", "1")
	w.put("b", "2")
	fst := &enginetest.MemStorage{}
	f := follower(t, fst, nil)
	err := f.e.Promote(ctx(t), 2, func(context.Context) error {
		for _, e := range wst.Entries(1) {
			if err := fst.Append(e); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if f.value("b") != "2" || f.e.CurrentRevision() != 3 {
		t.Fatalf("after promote: b=%q rev %d", f.value("b"), f.e.CurrentRevision())
	}
}

// A writer stepping down without a flush fails its pending writes with
// ErrLeaderChanged and undoes them: values, lease grants, lease revokes
// and the keys a revoke deleted.
func TestDemoteRollsBackPending(t *testing.T) {
	st := &enginetest.MemStorage{}
	h := newHarness(t, st, nil)
	keep, err := h.e.LeaseGrant(ctx(t), &pb.LeaseGrantRequest{TTL: 30})
	if err != nil {
		t.Fatal(err)
	}
	h.put("held", "v", func(r *pb.PutRequest) { r.Lease = keep.ID })
	h.put("a", "1")
	committed := h.e.CommittedIndex()

	st.Manual = true
	errs := make(chan error, 3)
	go func() {
		_, err := h.e.Put(ctx(t), &pb.PutRequest{Key: []byte("a"), Value: []byte("2")})
		errs <- err
	}()
	go func() {
		_, err := h.e.LeaseRevoke(ctx(t), &pb.LeaseRevokeRequest{ID: keep.ID})
		errs <- err
	}()
	go func() {
		_, err := h.e.LeaseGrant(ctx(t), &pb.LeaseGrantRequest{ID: 777, TTL: 30})
		errs <- err
	}()
	waitFor(t, func() bool { return st.Len() == int(committed)+3 })
	got, err := h.e.Demote(ctx(t), false)
	if err != nil || got != committed {
		t.Fatalf("demote: committed %d, %v; want %d", got, err, committed)
	}
	for range 3 {
		if err := <-errs; !errors.Is(err, ErrLeaderChanged) {
			t.Fatalf("pending write: %v, want ErrLeaderChanged", err)
		}
	}
	if h.e.IsWriter() {
		t.Fatal("still the writer")
	}
	if h.value("a") != "1" || h.value("held") != "v" {
		t.Fatalf("after the rollback a=%q held=%q", h.value("a"), h.value("held"))
	}
	if h.e.lease.exists(777) {
		t.Fatal("a rolled-back grant left its lease")
	}
	keys := h.e.lease.keys(keep.ID)
	if len(keys) != 1 || string(keys[0]) != "held" {
		t.Fatalf("the lease whose revoke was rolled back holds %q, want [held]", keys)
	}
	if err := h.e.TruncateFollowed(ctx(t), committed); err != nil {
		t.Fatal(err)
	}
	if st.Len() != int(committed) {
		t.Fatalf("storage holds %d entries after the truncation, want %d", st.Len(), committed)
	}
	st.Manual = false
}

// Draining waits for pending writes to become durable before stepping
// down; new writes are refused meanwhile.
func TestDemoteWithFlushWaitsForPending(t *testing.T) {
	st := &enginetest.MemStorage{Manual: true}
	h := newHarness(t, st, nil)
	done := make(chan error, 1)
	go func() {
		_, err := h.e.Put(ctx(t), &pb.PutRequest{Key: []byte("a"), Value: []byte("1")})
		done <- err
	}()
	waitFor(t, func() bool { return st.Len() == 1 })
	demoted := make(chan uint64, 1)
	go func() {
		idx, err := h.e.Demote(ctx(t), true)
		if err != nil {
			t.Error(err)
		}
		demoted <- idx
	}()
	waitFor(t, func() bool {
		var draining bool
		if err := h.e.inLoop(ctx(t), func() { draining = h.e.draining }); err != nil {
			t.Fatal(err)
		}
		return draining
	})
	if _, err := h.e.Put(ctx(t), &pb.PutRequest{Key: []byte("b")}); !errors.Is(err, ErrNotPrimary) {
		t.Fatalf("write while draining: %v, want ErrNotPrimary", err)
	}
	select {
	case <-demoted:
		t.Fatal("demote with flush returned before the pending write was durable")
	case <-time.After(20 * time.Millisecond):
	}
	st.SyncAll()
	if err := <-done; err != nil {
		t.Fatalf("pending write during a drain: %v", err)
	}
	if idx := <-demoted; idx != 1 {
		t.Fatalf("committed index after the drain: %d, want 1", idx)
	}
}

// A follower never expires leases, even one that ran out in its own
// count; once promoted it does (after the one interval a new Primary
// leaves a run-out lease, see TestPromoteGivesRunOutLeasesOneInterval).
func TestLeasesExpireOnlyOnTheWriter(t *testing.T) {
	wst := &enginetest.MemStorage{}
	w := newHarness(t, wst, nil)
	g, err := w.e.LeaseGrant(ctx(t), &pb.LeaseGrantRequest{TTL: 10})
	if err != nil {
		t.Fatal(err)
	}
	f := follower(t, nil, nil)
	shipAll(t, wst, f, 1, 1)
	f.clk.Advance(time.Minute)
	time.Sleep(10 * time.Millisecond) // let the loop see the tick
	if !f.e.lease.exists(g.ID) {
		t.Fatal("a follower expired a lease")
	}
	if err := f.e.Promote(ctx(t), 2, nil); err != nil {
		t.Fatal(err)
	}
	ttl, err := f.e.LeaseTimeToLive(ctx(t), &pb.LeaseTimeToLiveRequest{ID: g.ID})
	if err != nil || ttl.TTL != 1 {
		t.Fatalf("TTL after promote: %+v, %v; want the 1 s left to a run-out lease", ttl, err)
	}
	f.clk.Advance(2 * time.Second)
	waitFor(t, func() bool { return !f.e.lease.exists(g.ID) })
}

// With OnDeposed set, a fenced writer steps down instead of refusing for
// good, and says so once.
func TestDeposedStepsDownWithRoles(t *testing.T) {
	st := &enginetest.MemStorage{}
	told := make(chan error, 2)
	h := newHarness(t, st, func(c *Config) { c.OnDeposed = func(err error) { told <- err } })
	h.put("a", "1")
	st.Fail(deposedErr{})
	if _, err := h.e.Put(ctx(t), &pb.PutRequest{Key: []byte("b")}); !errors.Is(err, ErrNotPrimary) && !errors.Is(err, ErrLeaderChanged) {
		t.Fatalf("write on a fenced writer: %v", err)
	}
	if err := <-told; !isDeposed(err) {
		t.Fatalf("OnDeposed got %v", err)
	}
	if h.e.IsWriter() || h.e.Deposed() != nil || h.e.Failed() != nil {
		t.Fatalf("after the step-down: writer %v, deposed %v, failed %v", h.e.IsWriter(), h.e.Deposed(), h.e.Failed())
	}
	if h.value("a") != "1" {
		t.Fatal("committed state lost by the step-down")
	}
	st.Fail(nil)
}

// A promotion at a term below one the log already holds (a newer Primary
// wrote while this node was told of an older term) is refused: the log's
// term never goes back.
func TestPromoteBelowTheLogsTermRefused(t *testing.T) {
	wst := &enginetest.MemStorage{}
	w := newHarness(t, wst, func(c *Config) { c.Term = 5 })
	w.put("a", "1")
	f := follower(t, nil, nil)
	shipAll(t, wst, f, 1, 1)
	err := f.e.Promote(ctx(t), 4, nil)
	if err == nil || !strings.Contains(err.Error(), "term 5") {
		t.Fatalf("promote at term 4 over a log of term 5: %v, want a refusal naming term 5", err)
	}
	if _, err := f.e.Put(ctx(t), &pb.PutRequest{Key: []byte("x")}); !errors.Is(err, ErrNotPrimary) {
		t.Fatalf("write after a refused promotion: %v, want ErrNotPrimary", err)
	}
	if err := f.e.Promote(ctx(t), 6, nil); err != nil {
		t.Fatalf("promote at term 6: %v", err)
	}
}

// A Starting step that fails leaves the entries the follower held (in
// storage, not committed) held: the log still ends where the storage's
// does, so following resumes after them and a commit applies them.
func TestFailedPromoteKeepsHeldEntries(t *testing.T) {
	wst := &enginetest.MemStorage{}
	w := newHarness(t, wst, nil)
	w.put("a", "1")
	w.put("b", "2")
	f := follower(t, &enginetest.MemStorage{}, nil)
	shipAll(t, wst, f, 1, 1) // b is held, not committed
	refused := errors.New("claim refused")
	if err := f.e.Promote(ctx(t), 2, func(context.Context) error { return refused }); !errors.Is(err, refused) {
		t.Fatalf("promote: %v, want the Starting step's error", err)
	}
	if last, _, _ := f.e.LastAppended(); last != 2 {
		t.Fatalf("last appended after the failed promote: %d, want 2 (the storage holds it)", last)
	}
	if f.value("b") != "<none>" {
		t.Fatalf("the held entry was applied by a failed promote: b=%q", f.value("b"))
	}
	w.put("c", "3")
	shipAll(t, wst, f, 1, 3)
	waitFor(t, func() bool { return f.e.CommittedIndex() == 3 })
	if f.value("b") != "2" || f.value("c") != "3" {
		t.Fatalf("after following on: b=%q c=%q", f.value("b"), f.value("c"))
	}
}

// FollowCommit takes a batch and its commit point in one pass; a batch it
// refuses (it does not continue the log) commits nothing.
func TestFollowCommitAppliesTheBatchItTakesOnly(t *testing.T) {
	wst := &enginetest.MemStorage{}
	w := newHarness(t, wst, func(c *Config) { c.Term = 3 })
	w.put("a", "1")
	w.put("b", "2")
	w.put("c", "3")
	ents := wst.Entries(1)
	f := follower(t, nil, nil)
	if err := f.e.FollowCommit(ctx(t), 3, ents[:2], 1); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := f.e.LastAppended(); got != 2 || f.e.CommittedIndex() != 1 {
		t.Fatalf("after a batch of 2 committed through 1: last %d, committed %d", got, f.e.CommittedIndex())
	}
	// A batch starting past the log's end is refused, and its commit
	// point is not taken.
	gap := []*netsyv1.Entry{{Index: 9, Revision: 10, Term: 3}}
	if err := f.e.FollowCommit(ctx(t), 3, gap, 9); err == nil {
		t.Fatal("a batch that skips entries was taken")
	}
	if f.e.CommittedIndex() != 1 {
		t.Fatalf("a refused batch moved the commit point to %d", f.e.CommittedIndex())
	}
	if err := f.e.FollowCommit(ctx(t), 3, ents[2:], 3); err != nil {
		t.Fatal(err)
	}
	if f.e.CommittedIndex() != 3 {
		t.Fatalf("committed %d, want 3", f.e.CommittedIndex())
	}
}

// A follower's durable index (what its receipts report) moves as soon as
// the storage reports an fsync, even while the loop is busy: the receipt
// does not wait for the loop. Entries the Primary committed before they
// were durable here are applied once they are.
func TestFollowerDurableIndexMovesWithoutTheLoop(t *testing.T) {
	wst := &enginetest.MemStorage{}
	w := newHarness(t, wst, func(c *Config) { c.Term = 3 })
	w.put("a", "1")
	w.put("b", "2")
	ents := wst.Entries(1)
	st := &enginetest.MemStorage{Manual: true}
	f := follower(t, st, nil)
	if err := f.e.FollowCommit(ctx(t), 3, ents[:1], 0); err != nil {
		t.Fatal(err)
	}
	notify := f.e.DurableNotify()
	busy, release := make(chan struct{}), make(chan struct{})
	go func() { _ = f.e.inLoop(context.Background(), func() { close(busy); <-release }) }()
	<-busy
	st.SyncAll()
	got := f.e.DurableIndex()
	select {
	case <-notify:
	default:
		close(release)
		t.Fatalf("no durable notification while the loop was busy (durable index %d)", got)
	}
	close(release)
	if got != 1 {
		t.Fatalf("durable index %d while the loop was busy, want 1", got)
	}
	// Committed before durable: applied once the fsync is reported.
	if err := f.e.FollowCommit(ctx(t), 3, ents[1:], 2); err != nil {
		t.Fatal(err)
	}
	if c := f.e.CommittedIndex(); c != 1 {
		t.Fatalf("committed %d before entry 2 is durable, want 1", c)
	}
	ch := f.e.CommitNotify()
	st.SyncAll()
	for f.e.CommittedIndex() < 2 {
		<-ch
		ch = f.e.CommitNotify()
	}
}

// An entry the storage kept after a step down (object storage held it
// before its commit reached the engine) is held as a followed entry by
// HoldStorage: the log continues after it, and it is applied once a
// Primary commits it. Without it the engine's log ends before the
// storage's, and the first followed entry is refused by the storage (a
// paused Primary that never rejoined: "index 829 does not follow last
// index 831").
func TestHoldStorageAfterDemoteContinuesTheStoragesLog(t *testing.T) {
	st := &enginetest.MemStorage{}
	h := newHarness(t, st, nil)
	h.put("a", "1")
	committed := h.e.CommittedIndex()
	st.Manual = true
	errs := make(chan error, 1)
	go func() {
		_, err := h.e.Put(ctx(t), &pb.PutRequest{Key: []byte("b"), Value: []byte("2")})
		errs <- err
	}()
	waitFor(t, func() bool { return st.Len() == int(committed)+1 })
	if got, err := h.e.Demote(ctx(t), false); err != nil || got != committed {
		t.Fatalf("demote: %d, %v; want %d", got, err, committed)
	}
	if err := <-errs; !errors.Is(err, ErrLeaderChanged) {
		t.Fatalf("pending put: %v, want ErrLeaderChanged", err)
	}
	if last, _, _ := h.e.LastAppended(); last != committed {
		t.Fatalf("after the rollback the log ends at %d, want %d", last, committed)
	}
	if err := h.e.HoldStorage(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if last, _, _ := h.e.LastAppended(); last != committed+1 {
		t.Fatalf("after HoldStorage the log ends at %d, want the storage's %d", last, committed+1)
	}
	if h.value("b") != "<none>" {
		t.Fatalf("a held entry was applied before any commit: b=%q", h.value("b"))
	}
	st.Manual = false
	st.SyncAll()
	if err := h.e.CommitTo(ctx(t), committed+1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return h.e.CommittedIndex() == committed+1 })
	if h.value("b") != "2" {
		t.Fatalf("after the commit b=%q, want 2", h.value("b"))
	}
}

// A storage that fails for good rolls back what was pending, leases
// included: a grant that never became durable is gone, and a revoke that
// never became durable leaves its lease holding its keys.
func TestStorageFailureRollsBackPendingLeaseChanges(t *testing.T) {
	st := &enginetest.MemStorage{}
	h := newHarness(t, st, nil)
	keep, err := h.e.LeaseGrant(ctx(t), &pb.LeaseGrantRequest{TTL: 30})
	if err != nil {
		t.Fatal(err)
	}
	h.put("held", "v", func(r *pb.PutRequest) { r.Lease = keep.ID })
	committed := h.e.CommittedIndex()
	st.Manual = true
	errs := make(chan error, 2)
	go func() {
		_, err := h.e.LeaseGrant(ctx(t), &pb.LeaseGrantRequest{ID: 77, TTL: 30})
		errs <- err
	}()
	go func() {
		_, err := h.e.LeaseRevoke(ctx(t), &pb.LeaseRevokeRequest{ID: keep.ID})
		errs <- err
	}()
	waitFor(t, func() bool { return st.Len() == int(committed)+2 })
	st.Fail(errors.New("disk gone"))
	// The next append fails the storage for good, and with it whatever
	// is pending.
	if _, err := h.e.Put(ctx(t), &pb.PutRequest{Key: []byte("x"), Value: []byte("1")}); err == nil {
		t.Fatal("a put succeeded on a failed storage")
	}
	for range 2 {
		if err := <-errs; err == nil {
			t.Fatal("a pending lease change succeeded on a failed storage")
		}
	}
	if h.e.Failed() == nil {
		t.Fatal("the engine did not fail with its storage")
	}
	if h.e.lease.exists(77) {
		t.Fatal("a grant that never became durable outlived the storage failure")
	}
	keys := h.e.lease.keys(keep.ID)
	if len(keys) != 1 || string(keys[0]) != "held" {
		t.Fatalf("the lease whose revoke never became durable holds %q, want [held]", keys)
	}
}
