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

// The scenario in miniature: the Primary (n2) and the up-to-date
// replica (n3) acknowledged entries up to 50 while object storage held only
// up to 10, then both died. The stale node n1 is the Elector. Past the
// deregistration timeout neither may leave the count, so n1 (1 of 3) is
// not elected over a history without the acknowledged entries; once the
// bucket's durable tip reaches their last reported indexes they are
// deregistered and n1 is elected. The previous Primary is no exception.
func TestDeadNodesStayCountedUntilBucketHoldsTheirEntries(t *testing.T) {
	for _, quorum := range []int{-1, 1} {
		t.Run(map[int]string{-1: "majority", 1: "static"}[quorum], func(t *testing.T) {
			tip := &bucketTip{index: 10}
			c := newCluster(t, quorum, "n1", "n2", "n3")
			c.set("n2", func(f *fakeNode) { f.hb.LatestIndex = 50 })
			c.set("n3", func(f *fakeNode) { f.hb.LatestIndex, f.hb.CommittedIndex = 44, 49 })
			c.begin(quorum).withTip(10*time.Second, tip)
			c.run(5*time.Second, primaryIs("n2", 1))
			c.set("n2", func(f *fakeNode) { f.reach = refused })
			c.set("n3", func(f *fakeNode) { f.reach = refused })

			c.advance(30 * time.Second)
			// The tip is read on its own goroutine: wait until its answer
			// is in both nodes' reasons.
			cs, _ := c.run(5*time.Second, func(cs *netsyv1.ClusterState) bool {
				n := 0
				for _, ns := range cs.Nodes {
					if strings.Contains(ns.DeregistrationWait, "object storage holds up to 10") {
						n++
					}
				}
				return n == 2 || cs.RegisteredNodes != 3
			})
			// The state keeps naming the old Primary while no successor can
			// be elected (a round that fails does not drop it).
			if cs.RegisteredNodes != 3 || cs.Primary != nil && cs.Primary.NodeId != "n2" {
				t.Fatalf("after 30 s: registered %d, Primary %v; want 3 and no successor (n2 and n3 hold entries the bucket lacks)",
					cs.RegisteredNodes, cs.Primary)
			}
			if regs, _, _ := discovery.List(t.Context(), c.store); len(regs) != 3 {
				t.Fatalf("%d registration files left, want 3", len(regs))
			}
			for id, want := range map[string]string{
				"n2": "last reported log index 50; object storage holds up to 10",
				"n3": "last reported log index 49; object storage holds up to 10",
			} {
				if got := c.status(id).GetDeregistrationWait(); !strings.Contains(got, want) {
					t.Errorf("%s: deregistration_wait %q, want it to say %q", id, got, want)
				}
				if n := c.events("deregistration_waiting", id); n != 1 {
					t.Errorf("%s: %d deregistration_waiting events, want 1 (once per reason)", id, n)
				}
			}
			// At most one read per interval (3 s) while nodes wait, not one per
			// tick (80 ticks); under load a read may lag behind the fake clock.
			if n := tip.reads.Load(); n < 1 || n > 8 {
				t.Errorf("%d tip reads in ~20 s of waiting, want a read every few seconds", n)
			}

			// The bucket catches up with n3 but not n2: only n3 goes.
			tip.set(49, nil)
			c.run(10*time.Second, func(cs *netsyv1.ClusterState) bool { return cs.RegisteredNodes == 2 })
			if c.status("n2") == nil || c.status("n3") != nil {
				t.Fatal("want n3 deregistered and n2 (the previous Primary, index 50) still counted")
			}
			if cs, _ := c.e.ClusterState(t.Context(), false); cs.Primary != nil && cs.Primary.NodeId != "n2" {
				t.Fatalf("elected %s while n2 still holds entries the bucket lacks", cs.Primary.NodeId)
			}
			tip.set(50, nil)
			c.run(10*time.Second, primaryIs("n1", 0))
			if cs, _ := c.e.ClusterState(t.Context(), false); cs.RegisteredNodes != 1 {
				t.Fatalf("registered %d after the bucket caught up, want 1", cs.RegisteredNodes)
			}
		})
	}
}

// An unknown tip (no reader, or the bucket unreachable) and a node this
// Elector never heard from both keep the node counted.
func TestUnknownTipOrIndexKeepsNodeCounted(t *testing.T) {
	t.Run("bucket unreachable", func(t *testing.T) {
		tip := &bucketTip{err: errors.New("connection reset")}
		c := newCluster(t, -1, "n1", "n2", "n3")
		c.begin(-1).withTip(10*time.Second, tip)
		c.run(5*time.Second, primaryIs("", 1))
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
	t.Run("never heard from", func(t *testing.T) {
		tip := &bucketTip{index: 1000}
		c := newCluster(t, -1, "n1", "n2", "n3")
		c.set("n3", func(f *fakeNode) { f.reach = refused })
		c.begin(-1).withTip(10*time.Second, tip)
		c.run(5*time.Second, primaryIs("", 1))
		c.advance(20 * time.Second)
		c.run(5*time.Second, func(*netsyv1.ClusterState) bool {
			return strings.Contains(c.status("n3").GetDeregistrationWait(), "its last log index is unknown")
		})
		if n := tip.reads.Load(); n != 0 {
			t.Fatalf("%d tip reads, want none: no tip can prove an unknown index safe", n)
		}
	})
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

// A dead node whose entries the bucket lacks is refused without force,
// removed with it (the answer says what may be lost); a live node leaving
// by itself is always allowed.
func TestDeregisterDeadNodeNeedsForceUnlessDurable(t *testing.T) {
	tip := &bucketTip{index: 1190}
	c := newCluster(t, -1, "n1", "n2", "n3", "n4")
	c.set("n2", func(f *fakeNode) { f.hb.LatestIndex = 1234 })
	c.set("n3", func(f *fakeNode) { f.hb.LatestIndex = 1234 })
	c.set("n4", func(f *fakeNode) { f.hb.LatestIndex = 1300 })
	c.begin(-1).withTip(0, tip)
	c.run(5*time.Second, primaryIs("n4", 1))
	c.set("n2", func(f *fakeNode) { f.reach = refused })
	c.advance(2 * time.Second)

	_, err := c.deregister("n2", false)
	if peer.ReasonOf(err) != peer.ReasonNotDurable || status.Code(err) != codes.FailedPrecondition ||
		!strings.Contains(err.Error(), "last reported log index 1234; object storage holds up to 1190") {
		t.Fatalf("deregister a dead n2 ahead of the bucket = %v, want FailedPrecondition NOT_DURABLE naming both indexes", err)
	}
	if c.status("n2") == nil {
		t.Fatal("a refused deregistration removed n2")
	}
	resp, err := c.deregister("n2", true)
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Forced || resp.LastIndex != 1234 || resp.DurableTip != 1190 {
		t.Fatalf("forced answer %v", resp)
	}
	want := "node n2 last reported index 1234; object storage holds up to 1190; up to 44 acknowledged entries may be lost"
	if got := LossSummary("n2", resp); got != want {
		t.Fatalf("loss summary\n got %q\nwant %q", got, want)
	}
	if c.status("n2") != nil {
		t.Fatal("forced deregistration left n2 registered")
	}
	if regs, _, _ := discovery.List(t.Context(), c.store); len(regs) != 3 {
		t.Fatalf("%d registration files, want 3", len(regs))
	}

	// n3 is alive (heartbeating) with entries the bucket lacks: it leaves
	// gracefully, no force needed.
	resp, err = c.deregister("n3", false)
	if err != nil || resp.Forced {
		t.Fatalf("live n3 deregistering = %v, %v; want allowed", resp, err)
	}

	// A dead node whose entries are all in the bucket needs no force.
	c.set("n1", func(f *fakeNode) {}) // n1 is the Elector itself: always live
	tip.set(1300, nil)
	c.set("n4", func(f *fakeNode) { f.hb.PrimaryState = netsyv1.PrimaryState_REPLICA; f.reach = refused })
	c.advance(2 * time.Second)
	if resp, err = c.deregister("n4", false); err != nil || resp.Forced {
		t.Fatalf("dead n4 within the bucket's tip = %v, %v; want allowed", resp, err)
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
