package elector

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// bucketTip is a fake durable tip: its index, or an error while the bucket
// is unreachable; it counts reads.
type bucketTip struct {
	mu    sync.Mutex
	index uint64
	err   error
	reads atomic.Int64
}

func (b *bucketTip) set(index uint64, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.index, b.err = index, err
}

func (b *bucketTip) read(context.Context) (uint64, error) {
	b.reads.Add(1)
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.index, b.err
}

// withTip configures the running Elector's deregistration rule. It runs
// before the clock first moves, so the loop reads these fields only after
// this write (the fake clock's lock orders them).
func (c *cluster) withTip(timeout time.Duration, tip *bucketTip) *cluster {
	c.e.cfg.DeregistrationTimeout = timeout
	c.e.cfg.DurableTip = tip.read
	return c
}

// status returns the Elector's record of node id (nil if not registered).
func (c *cluster) status(id string) *netsyv1.NodeStatus {
	c.t.Helper()
	cs, err := c.e.ClusterState(c.t.Context(), true)
	if err != nil {
		c.t.Fatal(err)
	}
	for _, ns := range cs.Nodes {
		if ns.Info.NodeId == id {
			return ns
		}
	}
	return nil
}

func (c *cluster) events(kind, node string) int {
	c.t.Helper()
	cs, err := c.e.ClusterState(c.t.Context(), true)
	if err != nil {
		c.t.Fatal(err)
	}
	n := 0
	for _, ev := range cs.Events {
		if ev.Kind == kind && ev.NodeId == node {
			n++
		}
	}
	return n
}

// advance moves time in heartbeat steps with every node that is up beating.
func (c *cluster) advance(d time.Duration) {
	for step := time.Duration(0); step < d; step += 500 * time.Millisecond {
		c.beat()
		c.clk.Advance(500 * time.Millisecond)
	}
}

// The acknowledgement window after a node's last report, in miniature:
// the Primary (n2) and the up-to-date replica (n3) last reported index 50,
// which the bucket holds, then acknowledged more writes (n2's fsync and
// n3's receipt) and died before reporting them. The stale node n1 (index
// 10) is the Elector. Past the deregistration timeout neither may leave
// the count, however far the tip gets: no Active Primary other than them
// has reported since they went silent, so nothing bounds what they
// acknowledged, and n1 (1 of 3) is never elected over a history without
// those writes.
func TestDeadPrimaryAndReplicaStayCountedThoughTheirLastReportsAreDurable(t *testing.T) {
	for _, quorum := range []int{-1, 1} {
		t.Run(map[int]string{-1: "majority", 1: "static"}[quorum], func(t *testing.T) {
			tip := &bucketTip{index: 50}
			c := newCluster(t, quorum, "n1", "n2", "n3")
			c.set("n2", func(f *fakeNode) { f.hb.LatestIndex = 50 })
			c.set("n3", func(f *fakeNode) { f.hb.LatestIndex, f.hb.CommittedIndex = 48, 50 })
			c.begin(quorum).withTip(10*time.Second, tip)
			c.run(5*time.Second, primaryIs("n2", 1))
			c.set("n2", func(f *fakeNode) { f.reach = refused })
			c.set("n3", func(f *fakeNode) { f.reach = refused })

			c.advance(30 * time.Second)
			cs, _ := c.run(5*time.Second, func(cs *netsyv1.ClusterState) bool {
				n := 0
				for _, ns := range cs.Nodes {
					if ns.DeregistrationWait != "" && !strings.Contains(ns.DeregistrationWait, "not read yet") {
						n++
					}
				}
				return n == 2 || cs.RegisteredNodes != 3
			})
			if cs.RegisteredNodes != 3 || cs.PrimaryTerm != 1 {
				t.Fatalf("after 30 s: registered %d, Primary %v at term %d; want 3 and no new one (n2 and n3 may hold acknowledged entries past their last reports)",
					cs.RegisteredNodes, cs.Primary, cs.PrimaryTerm)
			}
			for id, want := range map[string]string{
				"n2": "it was the Primary",
				"n3": "no Active Primary has reported since it went silent",
			} {
				if got := c.status(id).GetDeregistrationWait(); !strings.Contains(got, want) {
					t.Errorf("%s: deregistration_wait %q, want it to say %q", id, got, want)
				}
				if n := c.events("deregistration_waiting", id); n != 1 {
					t.Errorf("%s: %d deregistration_waiting events, want 1 (once per reason)", id, n)
				}
			}
			if n := tip.reads.Load(); n != 0 {
				t.Errorf("%d tip reads, want none: no tip can bound what they acknowledged", n)
			}

			// The bucket gets far ahead (another writer cannot exist, but
			// the tip is no bound without a Primary's report): still counted.
			tip.set(1000, nil)
			c.advance(30 * time.Second)
			if cs, _ := c.run(time.Second, func(*netsyv1.ClusterState) bool { return true }); cs.RegisteredNodes != 3 || cs.PrimaryTerm != 1 {
				t.Fatalf("with the tip at 1000: registered %d, Primary %v at term %d; want 3 and no new one", cs.RegisteredNodes, cs.Primary, cs.PrimaryTerm)
			}
			if regs, _, _ := discovery.List(t.Context(), c.store); len(regs) != 3 {
				t.Fatalf("%d registration files left, want 3", len(regs))
			}
		})
	}
}

// hb returns a copy of node id's current heartbeat.
func (c *cluster) hb(id string) *netsyv1.Heartbeat {
	c.peers.mu.Lock()
	defer c.peers.mu.Unlock()
	return cloneHB(c.peers.nodes[id].hb)
}

// primaryWrites moves time in heartbeat steps with every node that is up
// beating, the Primary id appending step entries before each beat.
func (c *cluster) primaryWrites(id string, step uint64, d time.Duration) {
	for t := time.Duration(0); t < d; t += 500 * time.Millisecond {
		c.set(id, func(f *fakeNode) { f.hb.LatestIndex += step })
		c.beat()
		c.clk.Advance(500 * time.Millisecond)
	}
}

// A dead replica may have receipted entries after its last report, but
// only ones its Primary appended before it went silent: it leaves once the
// tip reaches the index the Primary reported in its first heartbeat after
// the replica was marked Degraded, though the Primary keeps writing (a
// moving target would keep it counted in any busy cluster).
func TestDeadReplicaLeavesOnceTipReachesThePrimaryIndexFrozenWhenItWentSilent(t *testing.T) {
	tip := &bucketTip{index: 20}
	c := newCluster(t, -1, "n1", "n2", "n3")
	c.set("n2", func(f *fakeNode) { f.hb.LatestIndex, f.hb.StartTimeUnixNano = 20, 10 }) // n2 wins the tie
	c.set("n3", func(f *fakeNode) { f.hb.LatestIndex = 20 })
	c.begin(-1).withTip(10*time.Second, tip)
	c.run(5*time.Second, primaryIs("n2", 1))
	// n3 last reported 20, then receipted up to 30 and died.
	c.set("n3", func(f *fakeNode) { f.reach = refused })
	c.set("n2", func(f *fakeNode) { f.hb.LatestIndex = 30 })
	c.run(5*time.Second, func(*netsyv1.ClusterState) bool {
		return c.status("n3").GetHealth() == netsyv1.HealthState_DEGRADED
	})
	c.beat() // n2's first report after n3 was marked Degraded: 30

	c.primaryWrites("n2", 5, 20*time.Second)
	c.run(5*time.Second, func(*netsyv1.ClusterState) bool {
		ns := c.status("n3")
		return ns == nil || strings.Contains(ns.DeregistrationWait, "object storage holds up to 20")
	})
	if c.status("n3") == nil {
		t.Fatal("n3 deregistered with the tip at 20: it may have receipted entries up to 30 (n2's index when it went silent)")
	}
	want := "it last reported log index 20 and the Primary n2 reported 30 after it went silent; object storage holds up to 20"
	if got := c.status("n3").GetDeregistrationWait(); !strings.Contains(got, want) {
		t.Fatalf("n3: deregistration_wait %q, want it to say %q", got, want)
	}
	if n := c.events("deregistration_waiting", "n3"); n != 1 {
		t.Errorf("%d deregistration_waiting events, want 1 (once per reason)", n)
	}
	// At most one read per interval (3 s) while n3 waits, not one per tick
	// (about 40); under load a read may lag behind the fake clock.
	if n := tip.reads.Load(); n < 1 || n > 8 {
		t.Errorf("%d tip reads in ~10 s of waiting, want a read every few seconds", n)
	}

	tip.set(29, nil)
	c.primaryWrites("n2", 5, 10*time.Second)
	c.run(5*time.Second, func(*netsyv1.ClusterState) bool {
		return strings.Contains(c.status("n3").GetDeregistrationWait(), "object storage holds up to 29")
	})
	tip.set(30, nil)
	for i := 0; c.status("n3") != nil; i++ {
		if i == 40 {
			t.Fatalf("n3 still counted 20 s after the tip reached 30 (n2 now at %d)", c.hb("n2").LatestIndex)
		}
		c.primaryWrites("n2", 5, 500*time.Millisecond)
		time.Sleep(5 * time.Millisecond) // the tip is read on its own goroutine
	}
	if regs, _, _ := discovery.List(t.Context(), c.store); len(regs) != 2 {
		for i := 0; i < 1000 && len(regs) != 2; i++ {
			time.Sleep(time.Millisecond) // the file is deleted on its own goroutine
			regs, _, _ = discovery.List(t.Context(), c.store)
		}
		if len(regs) != 2 {
			t.Fatalf("%d registration files, want 2", len(regs))
		}
	}
}

// A dead Primary may have acknowledged entries after its last report; a
// successor, elected with it still counted, holds all of them. It stays
// counted until the successor is Active and the tip reaches the index the
// successor reported first, however far the successor writes on.
func TestDeadPrimaryLeavesOnceTipReachesItsSuccessorsFirstReport(t *testing.T) {
	tip := &bucketTip{index: 40}
	c := newCluster(t, -1, "n1", "n2", "n3")
	c.set("n2", func(f *fakeNode) { f.hb.LatestIndex, f.hb.StartTimeUnixNano = 40, 10 }) // n2 wins the tie
	c.set("n3", func(f *fakeNode) { f.hb.LatestIndex = 40 })
	c.begin(-1).withTip(10*time.Second, tip)
	c.run(5*time.Second, primaryIs("n2", 1))
	// n2 last reported 40, acknowledged up to 45 with n3's receipts, died.
	c.set("n2", func(f *fakeNode) { f.reach = refused })
	c.set("n3", func(f *fakeNode) { f.hb.LatestIndex = 45 })
	c.run(5*time.Second, func(cs *netsyv1.ClusterState) bool {
		return primaryIs("n3", 2)(cs) && c.hb("n3").PrimaryState == netsyv1.PrimaryState_ACTIVE // the push has arrived
	})
	// n3's first two reports as the Active Primary: 45 (the mark is the
	// second report in a row that does not count n2's receipts).
	c.beat()
	c.beat()

	c.primaryWrites("n3", 5, 20*time.Second)
	c.run(5*time.Second, func(*netsyv1.ClusterState) bool {
		ns := c.status("n2")
		return ns == nil || strings.Contains(ns.DeregistrationWait, "object storage holds up to 40")
	})
	if c.status("n2") == nil {
		t.Fatal("n2 deregistered with the tip at 40: it may have acknowledged entries up to 45 (n3's first report as its successor)")
	}
	want := "it last reported log index 40 and the Primary n3 reported 45 after it went silent; object storage holds up to 40"
	if got := c.status("n2").GetDeregistrationWait(); !strings.Contains(got, want) {
		t.Fatalf("n2: deregistration_wait %q, want it to say %q", got, want)
	}
	tip.set(44, nil)
	c.primaryWrites("n3", 5, 10*time.Second)
	c.run(5*time.Second, func(*netsyv1.ClusterState) bool {
		return strings.Contains(c.status("n2").GetDeregistrationWait(), "object storage holds up to 44")
	})
	tip.set(45, nil)
	for i := 0; c.status("n2") != nil; i++ {
		if i == 40 {
			t.Fatalf("n2 still counted 20 s after the tip reached 45 (n3 now at %d)", c.hb("n3").LatestIndex)
		}
		c.primaryWrites("n3", 5, 500*time.Millisecond)
		time.Sleep(5 * time.Millisecond) // the tip is read on its own goroutine
	}
}

// An unknown tip (the bucket unreachable) keeps the node counted.
func TestUnknownTipKeepsNodeCounted(t *testing.T) {
	t.Run("bucket unreachable", func(t *testing.T) {
		tip := &bucketTip{err: errors.New("connection reset")}
		c := newCluster(t, -1, "n1", "n2", "n3")
		// n2 wins the tie, so the dying n3 is a replica the Primary
		// reports after at once (a dead Primary would wait first for a
		// successor, elected on goroutines that may lag the fake clock).
		c.set("n2", func(f *fakeNode) { f.hb.StartTimeUnixNano = 10 })
		c.begin(-1).withTip(10*time.Second, tip)
		c.run(5*time.Second, primaryIs("n2", 1))
		c.set("n3", func(f *fakeNode) { f.reach = refused })
		c.advance(20 * time.Second)
		c.run(5*time.Second, func(*netsyv1.ClusterState) bool {
			return strings.Contains(c.status("n3").GetDeregistrationWait(), "connection reset")
		})
		if n := c.events("deregistration_waiting", "n3"); n != 1 {
			t.Fatalf("%d deregistration_waiting events, want 1", n)
		}
		tip.set(10, nil)
		c.run(10*time.Second, func(cs *netsyv1.ClusterState) bool { return cs.RegisteredNodes == 2 })
	})
}

// A node that was down when this Elector took over (never heard from) is
// bounded by its mark alone: what it may have receipted was appended by
// the Primary it followed, which this Elector adopted. It leaves once the
// tip reaches the index that Primary reported after the node was marked
// Degraded; before, it stayed counted for good (index_unknown), and under
// a static quorum no election could succeed once the Primary died.
func TestNodeNeverHeardFromLeavesOnceTheTipReachesItsMark(t *testing.T) {
	tip := &bucketTip{index: 10}
	c := newCluster(t, 1, "n1", "n2", "n3")
	c.set("n2", func(f *fakeNode) { f.hb.LatestIndex = 30 })
	c.begin(1)
	c.run(5*time.Second, func(cs *netsyv1.ClusterState) bool {
		return primaryIs("n2", 1)(cs) && c.hb("n2").PrimaryState == netsyv1.PrimaryState_ACTIVE // the push has arrived
	})
	// n3 goes down; a new Elector (on n1) takes over and adopts n2.
	c.close()
	c.set("n3", func(f *fakeNode) { f.reach = refused })
	c.start(2, 1, "n1")
	c.waitLoaded()
	c.withTip(10*time.Second, tip)
	c.run(5*time.Second, primaryIs("n2", 1))

	c.advance(20 * time.Second)
	want := "this Elector has not heard from it and the Primary n2 reported 30 after it was marked Degraded; object storage holds up to 10"
	c.run(5*time.Second, func(*netsyv1.ClusterState) bool {
		return strings.Contains(c.status("n3").GetDeregistrationWait(), want)
	})
	tip.set(30, nil)
	c.run(10*time.Second, func(cs *netsyv1.ClusterState) bool { return cs.RegisteredNodes == 2 })

	// The Primary dies: the static quorum needs every other node, n1.
	c.set("n2", func(f *fakeNode) { f.reach = refused })
	c.set("n1", func(f *fakeNode) { f.hb.LatestIndex = 30 })
	c.run(10*time.Second, primaryIs("n1", 2))
}

// deregister retries while the map loads.
func (c *cluster) deregister(id string, force bool) (*netsyv1.DeregisterNodeResponse, error) {
	resp, err := c.e.DeregisterNode(c.t.Context(), id, force)
	for i := 0; i < 1000 && errors.Is(err, ErrNotLoaded); i++ {
		time.Sleep(time.Millisecond)
		resp, err = c.e.DeregisterNode(c.t.Context(), id, force)
	}
	return resp, err
}

// Deregistering an unknown node is NotFound with ReasonUnknownNode, on the
// wire too.
func TestDeregisterUnknownNodeIsNotFound(t *testing.T) {
	c := newCluster(t, -1, "n1", "n2").begin(-1)
	_, err := c.deregister("n9", false)
	if peer.ReasonOf(err) != peer.ReasonUnknownNode || status.Code(err) != codes.NotFound {
		t.Fatalf("deregister n9 = %v (reason %q, code %v), want NotFound UNKNOWN_NODE", err, peer.ReasonOf(err), status.Code(err))
	}
	s := &Service{Current: func() *Elector { return c.e }, ElectorAddr: func() string { return "" }}
	_, err = s.DeregisterNode(t.Context(), &netsyv1.DeregisterNodeRequest{NodeId: "n9"})
	if peer.ReasonOf(err) != peer.ReasonUnknownNode || status.Code(err) != codes.NotFound {
		t.Fatalf("DeregisterNode n9 = %v, want NotFound UNKNOWN_NODE", err)
	}
}

// A dead node whose entries the bucket may lack is refused without force,
// removed with it (the answer says what may be lost, up to the index the
// Primary reported after it went silent); a live node leaving by itself is
// always allowed; a dead replica is allowed once the bucket holds what the
// Primary reported after it went silent; a dead Primary with no successor
// to report is refused whatever the tip.
func TestDeregisterDeadNodeNeedsForceUnlessDurable(t *testing.T) {
	tip := &bucketTip{index: 1190}
	c := newCluster(t, -1, "n1", "n2", "n3", "n4", "n5")
	c.set("n2", func(f *fakeNode) { f.hb.LatestIndex = 1234 })
	c.set("n3", func(f *fakeNode) { f.hb.LatestIndex = 1234 })
	c.set("n4", func(f *fakeNode) { f.hb.LatestIndex = 1300 })
	c.set("n5", func(f *fakeNode) { f.hb.LatestIndex = 1250 })
	c.begin(-1).withTip(0, tip)
	c.run(5*time.Second, primaryIs("n4", 1))
	c.set("n2", func(f *fakeNode) { f.reach = refused })
	c.advance(3 * time.Second) // n2 is Degraded, then n4 reports 1300 twice

	_, err := c.deregister("n2", false)
	if peer.ReasonOf(err) != peer.ReasonNotDurable || status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), "last reported log index 1234 and the Primary n4 reported 1300 after it went silent; object storage holds up to 1190") {
		t.Fatalf("deregister a dead n2 ahead of the bucket = %v, want FailedPrecondition NOT_DURABLE naming the indexes", err)
	}
	if c.status("n2") == nil {
		t.Fatal("a refused deregistration removed n2")
	}
	resp, err := c.deregister("n2", true)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Forced || resp.LastIndex != 1300 || !resp.LastIndexKnown || resp.DurableTip != 1190 {
		t.Fatalf("forced answer %v, want last_index 1300 (what n4 reported after n2 went silent)", resp)
	}
	want := "node n2 last reported index 1300; object storage holds up to 1190; up to 110 acknowledged entries may be lost"
	if got := LossSummary("n2", resp); got != want {
		t.Fatalf("loss summary\n got %q\nwant %q", got, want)
	}
	if c.status("n2") != nil {
		t.Fatal("forced deregistration left n2 registered")
	}
	if regs, _, _ := discovery.List(t.Context(), c.store); len(regs) != 4 {
		t.Fatalf("%d registration files, want 4", len(regs))
	}

	// n3 is alive (heartbeating) with entries the bucket lacks: it
	// leaves, without force, once the bucket holds them.
	_, err = c.deregister("n3", false)
	if peer.ReasonOf(err) != peer.ReasonNotDurable || !strings.Contains(err.Error(), "it reported log index 1234 and object storage holds up to 1190") {
		t.Fatalf("live n3 ahead of the bucket deregistering = %v, want NOT_DURABLE naming the indexes", err)
	}
	tip.set(1234, nil)
	resp, err = c.deregister("n3", false)
	if err != nil || resp.Forced {
		t.Fatalf("live n3 within the bucket's tip deregistering = %v, %v; want allowed", resp, err)
	}

	// A dead replica whose entries, up to what the Primary reported after
	// it went silent, are all in the bucket needs no force.
	c.set("n5", func(f *fakeNode) { f.reach = refused })
	c.advance(2 * time.Second)
	tip.set(1300, nil)
	if resp, err = c.deregister("n5", false); err != nil || resp.Forced || resp.LastIndex != 1300 {
		t.Fatalf("dead n5 within the bucket's tip = %v, %v; want allowed, last_index 1300", resp, err)
	}

	// A Primary that does not answer may still hold its lease and
	// acknowledge entries: refused, whatever the tip.
	tip.set(5000, nil)
	c.set("n4", func(f *fakeNode) { f.reach = refused })
	_, err = c.deregister("n4", false)
	if peer.ReasonOf(err) != peer.ReasonNotDurable || !strings.Contains(err.Error(), "is the Primary and does not answer") {
		t.Fatalf("deregister the unreachable Primary n4 = %v, want NOT_DURABLE saying it is the Primary", err)
	}
	resp, err = c.deregister("n4", true)
	if err != nil || !resp.Forced || resp.LastIndexKnown {
		t.Fatalf("forced n4 = %v, %v; want forced with its index unknown", resp, err)
	}
}

// A registration file the Elector did not load (it does not decode) is
// not counted; deregistering its node deletes it, the documented repair.
func TestDeregisterDeletesAnUnloadedRegistrationFile(t *testing.T) {
	c := newCluster(t, -1, "n1", "n2").begin(-1)
	c.run(5*time.Second, primaryIs("", 1))
	if _, err := c.store.PutIfAbsent(t.Context(), discovery.NodeKey("n5"), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.deregister("n5", false); err != nil {
		t.Fatalf("deregister n5 (corrupt file) = %v", err)
	}
	if _, _, err := c.store.Get(t.Context(), discovery.NodeKey("n5")); err == nil {
		t.Fatal("nodes/n5.json is still there")
	}
	if _, err := c.deregister("n5", false); peer.ReasonOf(err) != peer.ReasonUnknownNode {
		t.Fatalf("deregister n5 again = %v, want UNKNOWN_NODE", err)
	}
}

// Under quorum 0 no node acknowledges an entry the bucket lacks, so a dead
// node is deregistered after the timeout without reading the tip.
func TestQuorumZeroDeregistersWithoutTip(t *testing.T) {
	tip := &bucketTip{err: errors.New("bucket unreachable")}
	c := newCluster(t, 0, "n1", "n2", "n3")
	c.set("n3", func(f *fakeNode) { f.hb.LatestIndex = 99 })
	c.begin(0).withTip(10*time.Second, tip)
	c.run(5*time.Second, primaryIs("", 0))
	c.set("n2", func(f *fakeNode) { f.reach = refused })
	c.run(20*time.Second, func(cs *netsyv1.ClusterState) bool { return cs.RegisteredNodes == 2 })
	if n := tip.reads.Load(); n != 0 {
		t.Fatalf("%d tip reads under quorum 0, want none", n)
	}
}

// A mark belongs to one Degraded spell: a replica that comes back,
// receipts more and dies again is bounded by the Primary's report after
// its second silence, not by the first.
func TestMarkStartsOverWhenANodeIsDegradedAgain(t *testing.T) {
	tip := &bucketTip{index: 20}
	c := newCluster(t, -1, "n1", "n2", "n3")
	c.set("n2", func(f *fakeNode) { f.hb.LatestIndex, f.hb.StartTimeUnixNano = 20, 10 }) // n2 wins the tie
	c.set("n3", func(f *fakeNode) { f.hb.LatestIndex = 20 })
	c.begin(-1).withTip(10*time.Second, tip)
	c.run(5*time.Second, primaryIs("n2", 1))
	degraded := func(*netsyv1.ClusterState) bool { return c.status("n3").GetHealth() == netsyv1.HealthState_DEGRADED }

	c.set("n3", func(f *fakeNode) { f.reach = refused })
	c.set("n2", func(f *fakeNode) { f.hb.LatestIndex = 30 })
	c.run(5*time.Second, degraded)
	c.beat() // first mark: 30
	// n3 returns, catches up to 40, receipts up to 50 and dies again.
	c.set("n3", func(f *fakeNode) { f.reach, f.hb.LatestIndex = up, 40 })
	c.set("n2", func(f *fakeNode) { f.hb.LatestIndex = 40 })
	c.run(5*time.Second, func(*netsyv1.ClusterState) bool { return c.status("n3").GetHealth() == netsyv1.HealthState_HEALTHY })
	c.set("n3", func(f *fakeNode) { f.reach = refused })
	c.set("n2", func(f *fakeNode) { f.hb.LatestIndex = 50 })
	c.run(5*time.Second, degraded)
	c.beat() // second mark: 50

	tip.set(40, nil)
	c.primaryWrites("n2", 5, 15*time.Second)
	c.run(5*time.Second, func(*netsyv1.ClusterState) bool {
		ns := c.status("n3")
		return ns == nil || strings.Contains(ns.DeregistrationWait, "object storage holds up to 40")
	})
	want := "it last reported log index 40 and the Primary n2 reported 50 after it went silent"
	if got := c.status("n3").GetDeregistrationWait(); !strings.Contains(got, want) {
		t.Fatalf("n3 (nil: deregistered): deregistration_wait %q, want it to say %q", got, want)
	}
	tip.set(50, nil)
	for i := 0; c.status("n3") != nil; i++ {
		if i == 40 {
			t.Fatal("n3 still counted 20 s after the tip reached 50")
		}
		c.primaryWrites("n2", 5, 500*time.Millisecond)
		time.Sleep(5 * time.Millisecond) // the tip is read on its own goroutine
	}
}

// Scale-down: a write W (index 100) is held by the Primary n5 and the
// replicas n3 and n4 only, acknowledged under majority quorum of 5, and
// the bucket is behind (90). n3 leaving gracefully must wait until the
// bucket holds W: otherwise n3 and then n4 leave, the count drops to 3,
// n5 dies, and n1 and n2 elect a Primary without W.
func TestLiveNodeLeavesOnlyOnceTheBucketHoldsItsLastReport(t *testing.T) {
	tip := &bucketTip{index: 90}
	c := newCluster(t, -1, "n1", "n2", "n3", "n4", "n5")
	for _, id := range []string{"n1", "n2", "n3", "n4"} {
		c.set(id, func(f *fakeNode) { f.hb.LatestIndex = 90 })
	}
	c.set("n5", func(f *fakeNode) { f.hb.LatestIndex = 90; f.hb.StartTimeUnixNano = 10 })
	c.begin(-1).withTip(0, tip)
	c.run(5*time.Second, primaryIs("n5", 1))
	for _, id := range []string{"n3", "n4", "n5"} {
		c.set(id, func(f *fakeNode) { f.hb.LatestIndex = 100 })
	}
	// n3 leaves: its last heartbeat says it is Degraded.
	c.set("n3", func(f *fakeNode) { f.hb.Health = netsyv1.HealthState_DEGRADED })
	c.advance(time.Second)
	_, err := c.deregister("n3", false)
	if peer.ReasonOf(err) != peer.ReasonNotDurable || status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), "it reported log index 100 and object storage holds up to 90") {
		t.Fatalf("n3 leaving ahead of the bucket = %v, want FailedPrecondition NOT_DURABLE naming the indexes", err)
	}
	if c.status("n3") == nil {
		t.Fatal("a refused deregistration removed n3")
	}
	tip.set(100, nil)
	if resp, err := c.deregister("n3", false); err != nil || resp.Forced || resp.LastIndex != 100 || resp.DurableTip != 100 {
		t.Fatalf("n3 leaving with the bucket at its index = %v, %v; want allowed, last_index 100", resp, err)
	}
	if c.status("n3") != nil {
		t.Fatal("n3 still registered")
	}
}

// One-way cut: the Elector cannot reach the Primary n3, but n3's
// heartbeats still reach it and renew n3's lease. Deregistering n3 is
// refused without force; with force, n3 stays the previous Primary of the
// election, so its successor is elected only once its lease has run out
// (before, it was elected at once: two Primaries).
func TestDeregisterUnreachablePrimaryWaitsOutItsLease(t *testing.T) {
	c := newCluster(t, -1, "n1", "n2", "n3")
	c.set("n3", func(f *fakeNode) { f.hb.LatestIndex = 20 })
	c.begin(-1)
	c.run(5*time.Second, func(cs *netsyv1.ClusterState) bool {
		return primaryIs("n3", 1)(cs) && c.hb("n3").PrimaryState == netsyv1.PrimaryState_ACTIVE // the push has arrived
	})
	c.advance(5 * time.Second)
	c.set("n3", func(f *fakeNode) { f.reach = silent })
	// Its heartbeat still arrives, and the answer renews its lease.
	resp, err := c.e.Heartbeat(t.Context(), c.hb("n3"))
	if err != nil || resp.ClusterState.GetPrimary().GetNodeId() != "n3" {
		t.Fatalf("n3's heartbeat = %v, %v; want an answer naming it Primary", resp, err)
	}
	_, err = c.deregister("n3", false)
	if peer.ReasonOf(err) != peer.ReasonNotDurable || status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("deregister the unreachable Primary = %v, want FailedPrecondition NOT_DURABLE", err)
	}
	if c.status("n3") == nil {
		t.Fatal("a refused deregistration removed n3")
	}
	if _, err := c.deregister("n3", true); err != nil {
		t.Fatal(err)
	}
	c.set("n2", func(f *fakeNode) { f.hb.LatestIndex = 20 })
	cs, took := c.run(10*time.Second, primaryIs("", 2))
	if cs.Primary.NodeId == "n3" || took < time.Second {
		t.Fatalf("%s elected %v after n3's last renewed lease; want another node, no sooner than its lease wait (1.25 s)", cs.Primary.NodeId, took)
	}
}

// A node cut from the Elector but still following the Primary keeps
// receipting, and while the Primary counts its receipts it may acknowledge
// entries with them past any index reported so far: such a node gets no
// mark, however long it is Degraded here and however far the tip is. Once
// the Primary stops counting it (two reports in a row), the mark is taken
// and it leaves when the tip reaches it.
func TestNodeThePrimaryStillCountsGetsNoMark(t *testing.T) {
	tip := &bucketTip{index: 1000}
	c := newCluster(t, -1, "n1", "n2", "n3")
	c.set("n2", func(f *fakeNode) { f.hb.LatestIndex, f.hb.StartTimeUnixNano = 20, 10 }) // n2 wins the tie
	c.set("n3", func(f *fakeNode) { f.hb.LatestIndex = 20 })
	c.begin(-1).withTip(10*time.Second, tip)
	c.run(5*time.Second, primaryIs("n2", 1))
	c.set("n3", func(f *fakeNode) { f.reach = refused }) // cut from the Elector only
	c.set("n2", func(f *fakeNode) {
		f.hb.LatestIndex = 30
		f.hb.Replication = &netsyv1.Replication{Quorum: -1, ReplicasNeeded: 1,
			Replicas: []*netsyv1.ReplicaStatus{{NodeId: "n3", DurableIndex: 30, Counted: true}}}
	})
	c.advance(20 * time.Second)
	if c.status("n3") == nil {
		t.Fatal("n3 deregistered while the Primary still counted its receipts")
	}
	c.set("n2", func(f *fakeNode) {
		f.hb.LatestIndex = 40
		f.hb.Replication = &netsyv1.Replication{Quorum: -1, ReplicasNeeded: 1,
			Replicas: []*netsyv1.ReplicaStatus{{NodeId: "n3", DurableIndex: 30, NotCountedReason: "silent"}}}
	})
	c.run(10*time.Second, func(cs *netsyv1.ClusterState) bool { return cs.RegisteredNodes == 2 })
	if c.status("n3") != nil {
		t.Fatal("n3 still registered once the Primary stopped counting it and the tip holds its mark")
	}
}
