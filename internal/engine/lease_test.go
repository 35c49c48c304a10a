package engine

import (
	"bytes"
	"errors"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/engine/enginetest"
)

// checkpointNow runs the writer's checkpoint pass in its loop, as its
// ticker does every LeaseCheckpointInterval, so a test knows it ran.
func (h *harness) checkpointNow() {
	h.t.Helper()
	if err := h.e.inLoop(ctx(h.t), h.e.checkpointLeases); err != nil {
		h.t.Fatal(err)
	}
}

// expireNow runs the writer's expiry pass in its loop.
func (h *harness) expireNow() {
	h.t.Helper()
	if err := h.e.inLoop(ctx(h.t), h.e.expireLeases); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) grant(ttl int64) int64 {
	h.t.Helper()
	g, err := h.e.LeaseGrant(ctx(h.t), &pb.LeaseGrantRequest{TTL: ttl})
	if err != nil {
		h.t.Fatal(err)
	}
	return g.ID
}

func (h *harness) renew(id int64) {
	h.t.Helper()
	if _, err := h.e.LeaseRenew(ctx(h.t), id); err != nil {
		h.t.Fatalf("renew lease %x: %v", id, err)
	}
}

// remaining is what TimeToLive says is left of a lease, in seconds.
func (h *harness) remaining(id int64) int64 {
	h.t.Helper()
	r, err := h.e.LeaseTimeToLive(ctx(h.t), &pb.LeaseTimeToLiveRequest{ID: id})
	if err != nil {
		h.t.Fatalf("TimeToLive of lease %x: %v", id, err)
	}
	return r.TTL
}

func within(t *testing.T, what string, got, lo, hi int64) {
	t.Helper()
	if got < lo || got > hi {
		t.Fatalf("%s: %d s left, want %d..%d", what, got, lo, hi)
	}
}

// checkpointEntries counts the entries of st that carry checkpoints.
func checkpointEntries(st *enginetest.MemStorage) int {
	n := 0
	for _, e := range st.Entries(1) {
		if len(e.LeaseCheckpoints) > 0 {
			n++
		}
	}
	return n
}

// A replica promoted after the Primary dies keeps each lease's remaining
// time as it tracked it from the checkpoints, not its whole TTL: a lease
// nobody renewed for 40 of its 60 s has 20 s left, one renewed 10 s ago
// 50 s, and each expires when that runs out on the new Primary.
func TestFailoverKeepsLeaseRemainingTime(t *testing.T) {
	wst := &enginetest.MemStorage{}
	w := newHarness(t, wst, func(c *Config) { c.Term = 3 })
	f := follower(t, nil, nil)
	idle, renewed := w.grant(60), w.grant(60)
	shipAll(t, wst, f, 3, uint64(wst.Len()))
	both := func(d time.Duration) { w.clk.Advance(d); f.clk.Advance(d) }

	both(30 * time.Second)
	w.renew(renewed)
	w.checkpointNow()
	shipAll(t, wst, f, 3, uint64(wst.Len()))
	both(10 * time.Second)
	within(t, "the replica's idle lease", f.remaining(idle), 20, 20)
	within(t, "the replica's renewed lease", f.remaining(renewed), 50, 50)

	// The Primary dies; the replica takes over.
	if err := f.e.Promote(ctx(t), 4, nil); err != nil {
		t.Fatal(err)
	}
	within(t, "the idle lease after the failover", f.remaining(idle), 19, 21)
	within(t, "the renewed lease after the failover", f.remaining(renewed), 49, 51)

	f.clk.Advance(19 * time.Second)
	f.expireNow()
	if !f.e.lease.exists(idle) {
		t.Fatal("the idle lease expired before its remaining 20 s ran out")
	}
	f.clk.Advance(2 * time.Second)
	f.expireNow()
	if f.e.lease.exists(idle) {
		t.Fatal("the idle lease outlived its remaining 20 s on the new Primary")
	}
	if !f.e.lease.exists(renewed) {
		t.Fatal("the renewed lease expired with the idle one")
	}
	f.clk.Advance(30 * time.Second)
	f.expireNow()
	if f.e.lease.exists(renewed) {
		t.Fatal("the renewed lease outlived its remaining 50 s on the new Primary")
	}
}

// A restarted node starts each lease from the last checkpoint it replays.
// A lease nobody renews is checkpointed again only every tenth of its TTL
// (here 6 s), not at every pass, so after 40 s of a 60 s lease the restart
// leaves it 20 to 26 s, never 60.
func TestRestartKeepsLeaseRemainingTime(t *testing.T) {
	h := newHarness(t, nil, nil)
	id := h.grant(60)
	for range 40 {
		h.clk.Advance(time.Second)
		h.checkpointNow()
	}
	if n := checkpointEntries(h.st); n < 5 || n > 7 {
		t.Fatalf("%d checkpoint entries for an idle 60 s lease over 40 s, want one every 6 s", n)
	}
	h.reopen()
	left := h.remaining(id)
	within(t, "after the restart", left, 20, 26)
	h.clk.Advance(time.Duration(left-1) * time.Second)
	h.expireNow()
	if !h.e.lease.exists(id) {
		t.Fatal("the lease expired before its remaining time ran out")
	}
	h.clk.Advance(2 * time.Second)
	h.expireNow()
	if h.e.lease.exists(id) {
		t.Fatal("the lease outlived its remaining time after the restart")
	}
}

// A snapshot records each lease's remaining time, and a node that
// restores it counts down from there.
func TestSnapshotKeepsLeaseRemainingTime(t *testing.T) {
	st := &enginetest.MemStorage{}
	// No pass of the loop's ticker runs: only the snapshot can carry
	// the time.
	h := newHarness(t, st, func(c *Config) {
		c.SnapshotEntries = 2
		c.LeaseCheckInterval = time.Hour
	})
	id := h.grant(60)
	h.clk.Advance(40 * time.Second)
	h.put("k", "v")
	waitFor(t, st.HasSnapshot)
	h.reopen()
	if n := checkpointEntries(st); n != 0 {
		t.Fatalf("%d checkpoint entries after the snapshot: the restart must take the lease from the snapshot", n)
	}
	within(t, "after restoring the snapshot", h.remaining(id), 20, 20)
}

// A follower answers TimeToLive from the checkpoints it applied: the
// Primary's renewals reach it within one checkpoint pass, and several
// renewals between two passes make one checkpoint, not one each.
func TestFollowerTimeToLiveTracksRenewals(t *testing.T) {
	wst := &enginetest.MemStorage{}
	w := newHarness(t, wst, nil)
	f := follower(t, nil, nil)
	id := w.grant(10)
	shipAll(t, wst, f, 1, uint64(wst.Len()))
	for i := range 4 {
		w.clk.Advance(3 * time.Second)
		f.clk.Advance(3 * time.Second)
		before := checkpointEntries(wst)
		w.renew(id)
		w.renew(id)
		w.checkpointNow()
		if n := checkpointEntries(wst) - before; n != 1 {
			t.Fatalf("keep-alive %d: two renewals made %d checkpoint entries, want 1", i, n)
		}
		shipAll(t, wst, f, 1, uint64(wst.Len()))
		pw, pf := w.remaining(id), f.remaining(id)
		if pw != 10 || pf < pw-1 || pf > pw+1 {
			t.Fatalf("keep-alive %d: the Primary says %d s left, the follower %d", i, pw, pf)
		}
	}
	// Nothing renewed, nothing due: no entry.
	before := checkpointEntries(wst)
	w.checkpointNow()
	if n := checkpointEntries(wst) - before; n != 0 {
		t.Fatalf("a pass with nothing renewed logged %d checkpoint entries", n)
	}
}

// A handoff carries the renewals the old Primary took since its last
// checkpoint pass: draining logs a final checkpoint, and renewals after
// it wait for the next Primary.
func TestHandoffCarriesLastRenewals(t *testing.T) {
	wst := &enginetest.MemStorage{}
	// No pass of the loop's ticker runs: only the drain can carry the
	// renewal.
	w := newHarness(t, wst, func(c *Config) {
		c.Term = 3
		c.LeaseCheckInterval = time.Hour
	})
	f := follower(t, nil, nil)
	id := w.grant(60)
	shipAll(t, wst, f, 3, uint64(wst.Len()))
	both := func(d time.Duration) { w.clk.Advance(d); f.clk.Advance(d) }
	both(30 * time.Second)
	w.renew(id)
	both(10 * time.Second)

	if _, err := w.e.Demote(ctx(t), true); err != nil {
		t.Fatal(err)
	}
	if _, err := w.e.LeaseRenew(ctx(t), id); !errors.Is(err, ErrNotPrimary) {
		t.Fatalf("renewal after the handoff: %v, want ErrNotPrimary", err)
	}
	shipAll(t, wst, f, 3, uint64(wst.Len()))
	if err := f.e.Promote(ctx(t), 4, nil); err != nil {
		t.Fatal(err)
	}
	within(t, "on the next Primary", f.remaining(id), 49, 51)
}

// A lease restored without a recorded remaining time (a snapshot written
// before they were recorded) gets its whole TTL, and a recorded one is
// never longer than the TTL.
func TestLeaseRestoreClampsToTTL(t *testing.T) {
	h := newHarness(t, nil, nil)
	h.e.lease.restore(1, 60, 0)
	h.e.lease.restore(2, 60, 90_000)
	h.e.lease.restore(3, 60, 20_000)
	for id, want := range map[int64]int64{1: 60, 2: 60, 3: 20} {
		within(t, "restored lease", h.remaining(id), want, want)
	}
}

// A new Primary leaves a lease that ran out in its own count one
// checkpoint interval, not its whole TTL: enough for a renewal the old
// Primary took but never checkpointed to reach it.
func TestPromoteGivesRunOutLeasesOneInterval(t *testing.T) {
	wst := &enginetest.MemStorage{}
	w := newHarness(t, wst, nil)
	id := w.grant(10)
	f := follower(t, nil, nil)
	shipAll(t, wst, f, 1, uint64(wst.Len()))
	f.clk.Advance(time.Minute)
	if err := f.e.Promote(ctx(t), 2, nil); err != nil {
		t.Fatal(err)
	}
	within(t, "a run-out lease after the promotion", f.remaining(id), 1, 1)
	f.renew(id)
	within(t, "after a renewal on the new Primary", f.remaining(id), 10, 10)
}

// The loop's ticker runs the checkpoint pass by itself on the writer: a
// renewal reaches the log within about one checkpoint interval, with no
// one calling for it.
func TestCheckpointPassRunsOnTheTicker(t *testing.T) {
	h := newHarness(t, nil, nil)
	id := h.grant(60)
	h.clk.Advance(10 * time.Second)
	h.checkpointNow() // the age checkpoint due by now, whichever pass logs it
	before := checkpointEntries(h.st)
	h.renew(id)
	waitFor(t, func() bool {
		if checkpointEntries(h.st) > before {
			return true
		}
		h.clk.Advance(500 * time.Millisecond)
		return false
	})
	last := h.st.Entries(1)[h.st.Len()-1]
	if len(last.LeaseCheckpoints) != 1 || last.LeaseCheckpoints[0].Id != id || last.LeaseCheckpoints[0].RemainingMs < 58_000 {
		t.Fatalf("the ticker's checkpoint: %v, want lease %x with about 60 s left", last.LeaseCheckpoints, id)
	}
}

// A snapshot file (what `etcdctl snapshot save` gets and a restore or an
// object-storage catch-up reads) carries each lease's remaining time
// through its encoding.
func TestSnapshotFileKeepsLeaseRemainingTime(t *testing.T) {
	h := newHarness(t, nil, nil)
	id := h.grant(60)
	h.clk.Advance(40 * time.Second)
	var buf bytes.Buffer
	if _, err := h.e.Snapshot(ctx(t), &buf); err != nil {
		t.Fatal(err)
	}
	snap, err := datafile.DecodeSnapshot("snapshot", &buf)
	if err != nil {
		t.Fatal(err)
	}
	st := &enginetest.MemStorage{}
	if err := st.SaveSnapshot(snap); err != nil {
		t.Fatal(err)
	}
	// Another node, its own clock: only the recorded time counts.
	r := newHarness(t, st, nil)
	within(t, "restored from the snapshot file", r.remaining(id), 20, 20)
}
