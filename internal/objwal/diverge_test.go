package objwal

import (
	"context"
	"runtime"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// The tests below restart a node whose local log holds an entry the
// bucket lacks (an ex-Primary that crashed before its chunk landed) and
// open the engine over it as the node does: a follower log under a
// follower engine.

// openEngine opens a follower engine over n's log.
func openEngine(t *testing.T, n *node) *engine.Engine {
	t.Helper()
	eng, err := engine.Open(engine.Config{Storage: n.l, Clock: n.e.clk, Follower: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng
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

func valueOf(t *testing.T, eng *engine.Engine, key string) string {
	t.Helper()
	resp, err := eng.Range(context.Background(), &pb.RangeRequest{Key: []byte(key), Serializable: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return "<none>"
	}
	return string(resp.Kvs[0].Value)
}

// A restarted follower never serves a local entry the bucket lacks: it is
// held appended but uncommitted until the Primary's Follow handshake
// judges it. Here the new Primary's history has its own entry 14, so the
// handshake cuts the local one and the node takes the Primary's (seed 425
// of the cluster simulation: the ex-Primary served its entry 14 after a
// newer one was acknowledged).
func TestRestartedFollowerHoldsEntriesPastTheBucketUncommitted(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	e.leaveLocalTail(dir, 13, 14) // entry 14 (key k0 = "a-14") only on local disk
	n := e.node(dir, ModeSync, func(o *Options) { o.Follower = true }).open()
	eng := openEngine(t, n)

	if got := eng.CommittedIndex(); got != 13 {
		t.Fatalf("committed index after the restart: %d, want 13 (the bucket's tip)", got)
	}
	if got := eng.CurrentRevision(); got != 14 {
		t.Fatalf("committed revision after the restart: %d, want 14 (entry 13's)", got)
	}
	if got := valueOf(t, eng, "k0"); got != "a-7" {
		t.Fatalf("k0 after the restart: %s, want a-7 (entry 14 is not known committed)", got)
	}
	// The entry is still held: the Elector's audit and the handshake see it.
	if last, _, _ := eng.LastAppended(); last != 14 {
		t.Fatalf("last appended after the restart: %d, want 14", last)
	}

	// The handshake found another entry 14 at the Primary: cut, follow.
	ctx := t.Context()
	if err := eng.TruncateFollowed(ctx, 13); err != nil {
		t.Fatalf("cut the uncommitted entry: %v", err)
	}
	theirs := entry(14, "c")
	theirs.Term = 6
	if err := eng.Follow(ctx, 6, []*netsyv1.Entry{theirs}); err != nil {
		t.Fatal(err)
	}
	if err := eng.CommitTo(ctx, 14); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the Primary's entry 14 to be applied", func() bool { return eng.CommittedIndex() == 14 })
	if got := valueOf(t, eng, "k0"); got != "c-14" {
		t.Fatalf("k0 after following the Primary: %s, want c-14", got)
	}
}

// A restarted follower whose local entry past the bucket matches the
// Primary's applies it once the Primary's commit covers it.
func TestRestartedFollowerCommitsAMatchingTailOnTheCommit(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	e.leaveLocalTail(dir, 13, 14)
	n := e.node(dir, ModeSync, func(o *Options) { o.Follower = true }).open()
	eng := openEngine(t, n)
	if got := eng.CommittedIndex(); got != 13 {
		t.Fatalf("committed index after the restart: %d, want 13", got)
	}
	if err := eng.CommitTo(t.Context(), 14); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the local entry 14 to be applied", func() bool { return eng.CommittedIndex() == 14 })
	if got := valueOf(t, eng, "k0"); got != "a-14" {
		t.Fatalf("k0 after the commit: %s, want a-14", got)
	}
}

// A lone node that acknowledges on its local fsync (AckOnFsync) serves
// its local tail at once after a restart (every entry of it was
// acknowledged), and its Starting step uploads it.
func TestAckOnFsyncFollowerServesItsLocalTail(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	e.leaveLocalTail(dir, 13, 14)
	n := e.node(dir, ModeSync, func(o *Options) { o.Follower, o.AckOnFsync = true, true }).open()
	eng := openEngine(t, n)
	if got := eng.CommittedIndex(); got != 14 {
		t.Fatalf("committed index after the restart: %d, want 14 (acknowledged on its fsync)", got)
	}
	if got := valueOf(t, eng, "k0"); got != "a-14" {
		t.Fatalf("k0 after the restart: %s, want a-14", got)
	}
	if err := eng.Promote(t.Context(), 2, n.l.Claim); err != nil {
		t.Fatal(err)
	}
	if got := eng.CommittedIndex(); got != 14 {
		t.Fatalf("committed index once Primary: %d, want 14", got)
	}
	if hist, _ := history(t, e.inner); len(hist) != 14 {
		t.Fatalf("the bucket holds %d entries after the Starting step, want 14", len(hist))
	}
}

// A restarted follower promoted later adopts its local tail: its Starting
// step uploads it, and then it is history.
func TestRestartedFollowerPromotedAdoptsItsTail(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	e.leaveLocalTail(dir, 13, 14)
	n := e.node(dir, ModeSync, func(o *Options) { o.Follower = true }).open()
	eng := openEngine(t, n)
	if err := eng.Promote(t.Context(), 2, n.l.Claim); err != nil {
		t.Fatal(err)
	}
	if got := eng.CommittedIndex(); got != 14 {
		t.Fatalf("committed index once Primary: %d, want 14", got)
	}
	if got := valueOf(t, eng, "k0"); got != "a-14" {
		t.Fatalf("k0 once Primary: %s, want a-14", got)
	}
}
