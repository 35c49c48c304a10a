package elector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/objstore/mem"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var errRefused = errors.New("connection refused")

// reach is how a fake node answers.
type reach int

const (
	up      reach = iota
	refused       // the process is gone
	silent        // no answer (a timeout)
)

// fakeNode is a node as the Elector's Peers see it: it answers with its
// state, applies pushes the way a real node does (a push naming it
// Primary makes it Active at once) and drains on request.
type fakeNode struct {
	info   *netsyv1.NodeInfo
	reach  reach
	hb     *netsyv1.Heartbeat
	pushes []*netsyv1.ClusterState
	// cs is the Cluster State its view holds (nil: none).
	cs *netsyv1.ClusterState
}

type fakePeers struct {
	mu     sync.Mutex
	nodes  map[string]*fakeNode
	order  []string // pushes naming a Primary, in order: "to<-primary"
	drains []string
	// gates hold GetNodeState calls to a node until the channel closes;
	// each held call first sends its node's id on reached.
	gates   map[string]chan struct{}
	reached chan string
	// calls counts GetNodeState calls per node while it is not nil.
	calls map[string]int
	// refuseAfter refuses a node's GetNodeState calls after the first n
	// (its process went away after it answered).
	refuseAfter map[string]int
}

func (p *fakePeers) node(id string) *fakeNode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nodes[id]
}

func (p *fakePeers) answer(n *netsyv1.NodeInfo) (*fakeNode, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.nodes[n.NodeId]
	switch {
	case f == nil, f.reach == refused:
		return nil, errRefused
	case f.reach == silent:
		return nil, context.DeadlineExceeded
	}
	return f, nil
}

func (p *fakePeers) GetNodeState(ctx context.Context, n *netsyv1.NodeInfo) (*netsyv1.NodeState, error) {
	p.mu.Lock()
	gate := p.gates[n.NodeId]
	if p.calls != nil {
		p.calls[n.NodeId]++
	}
	if limit, ok := p.refuseAfter[n.NodeId]; ok {
		if limit <= 0 {
			p.mu.Unlock()
			return nil, errRefused
		}
		p.refuseAfter[n.NodeId] = limit - 1
	}
	p.mu.Unlock()
	if gate != nil {
		p.reached <- n.NodeId
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f, err := p.answer(n)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ns := &netsyv1.NodeState{State: cloneHB(f.hb), Info: f.info}
	if f.cs != nil {
		ns.ClusterState = proto.Clone(f.cs).(*netsyv1.ClusterState)
	}
	return ns, nil
}

func (p *fakePeers) PushClusterState(_ context.Context, n *netsyv1.NodeInfo, cs *netsyv1.ClusterState) (*netsyv1.PushClusterStateResponse, error) {
	f, err := p.answer(n)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	f.pushes = append(f.pushes, cs)
	if cs.Primary == nil {
		return &netsyv1.PushClusterStateResponse{Accepted: true}, nil
	}
	p.order = append(p.order, n.NodeId+"<-"+cs.Primary.NodeId)
	f.hb.PrimaryTerm, f.hb.PrimaryId = cs.PrimaryTerm, cs.Primary.NodeId
	if cs.Primary.NodeId == n.NodeId {
		f.hb.PrimaryState = netsyv1.PrimaryState_ACTIVE
	}
	return &netsyv1.PushClusterStateResponse{Accepted: true}, nil
}

func (p *fakePeers) Drain(_ context.Context, n *netsyv1.NodeInfo) error {
	f, err := p.answer(n)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	f.hb.PrimaryState = netsyv1.PrimaryState_REPLICA
	p.drains = append(p.drains, n.NodeId)
	return nil
}

func cloneHB(h *netsyv1.Heartbeat) *netsyv1.Heartbeat {
	return proto.Clone(h).(*netsyv1.Heartbeat)
}

type cluster struct {
	t      *testing.T
	clk    *clock.Fake
	store  *mem.Store
	peers  *fakePeers
	e      *Elector
	stop   context.CancelFunc
	done   chan struct{}
	first  string
	quorum int
}

func newCluster(t *testing.T, quorum int, ids ...string) *cluster {
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	c := &cluster{t: t, clk: clk, store: mem.New(clk), peers: &fakePeers{nodes: map[string]*fakeNode{}}, first: ids[0], quorum: quorum}
	for i, id := range ids {
		info := &netsyv1.NodeInfo{NodeId: id, PeerAddr: id + ":2380"}
		c.peers.nodes[id] = &fakeNode{info: info, hb: &netsyv1.Heartbeat{
			NodeId: id, Health: netsyv1.HealthState_HEALTHY, PrimaryState: netsyv1.PrimaryState_REPLICA,
			LatestIndex: 10, LatestRevision: 10, StartTimeUnixNano: int64(i),
		}}
		err := discovery.Register(t.Context(), c.store, discovery.Registration{NodeID: id, ClusterID: "c1", PeerAddr: info.PeerAddr})
		if err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// begin starts the first Elector on the first node.
func (c *cluster) begin(quorum int) *cluster {
	c.start(1, quorum, c.first)
	c.waitLoaded()
	return c
}

// waitLoaded waits until the Elector has loaded the node map (it answers
// nothing before).
func (c *cluster) waitLoaded() {
	c.t.Helper()
	for range 1000 {
		if _, err := c.e.ClusterState(c.t.Context(), false); !errors.Is(err, ErrNotLoaded) {
			return
		}
		time.Sleep(time.Millisecond) // the map loads on its own goroutine
	}
	c.t.Fatal("the Elector did not load the node map")
}

func (c *cluster) start(term uint64, quorum int, self string) {
	e, err := New(Config{
		Self:              &netsyv1.NodeInfo{NodeId: self, PeerAddr: self + ":2380"},
		ClusterID:         "c1",
		Store:             c.store,
		Peers:             c.peers,
		Quorum:            quorum,
		HeartbeatInterval: 500 * time.Millisecond,
		HandshakeTimeout:  3 * time.Second,
		Clock:             c.clk,
		Logger:            hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: testLog{c.t}}),
	}, term)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.e, c.stop, c.done = e, cancel, make(chan struct{})
	go func() {
		defer close(c.done)
		e.Run(ctx)
	}()
	c.t.Cleanup(c.close)
}

func (c *cluster) close() {
	c.stop()
	<-c.done
}

type testLog struct{ t *testing.T }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// beat delivers a heartbeat from every node that is up.
func (c *cluster) beat() {
	for _, id := range c.ids() {
		f := c.peers.node(id)
		c.peers.mu.Lock()
		ok, hb := f.reach == up, cloneHB(f.hb)
		c.peers.mu.Unlock()
		if !ok {
			continue
		}
		_, err := c.e.Heartbeat(c.t.Context(), hb)
		switch peer.ReasonOf(err) {
		case peer.ReasonNotRegistered, peer.ReasonNotLoaded, peer.ReasonElectingSuccessor:
			continue
		}
		if err != nil {
			c.t.Fatalf("heartbeat %s: %v", id, err)
		}
	}
}

func (c *cluster) ids() []string {
	c.peers.mu.Lock()
	defer c.peers.mu.Unlock()
	var out []string
	for id := range c.peers.nodes {
		out = append(out, id)
	}
	return out
}

// run moves time in heartbeat steps, every node that is up beating, until
// cond holds (checked against the Elector's state) or limit passes.
func (c *cluster) run(limit time.Duration, cond func(*netsyv1.ClusterState) bool) (*netsyv1.ClusterState, time.Duration) {
	c.t.Helper()
	const step = 250 * time.Millisecond
	for waited := time.Duration(0); waited <= limit; waited += step {
		c.beat()
		for range 50 {
			cs, err := c.e.ClusterState(c.t.Context(), true)
			if errors.Is(err, ErrNotLoaded) {
				time.Sleep(time.Millisecond)
				continue
			}
			if err != nil {
				c.t.Fatal(err)
			}
			if cond(cs) {
				return cs, waited
			}
			time.Sleep(time.Millisecond) // let election goroutines report
		}
		c.clk.Advance(step)
	}
	cs, _ := c.e.ClusterState(c.t.Context(), true)
	c.t.Fatalf("condition not reached within %v; state %v", limit, cs)
	return nil, 0
}

func primaryIs(id string, term uint64) func(*netsyv1.ClusterState) bool {
	return func(cs *netsyv1.ClusterState) bool {
		return cs.GetPrimary() != nil && (id == "" || cs.Primary.NodeId == id) && (term == 0 || cs.PrimaryTerm == term)
	}
}

func (c *cluster) set(id string, f func(*fakeNode)) {
	c.peers.mu.Lock()
	defer c.peers.mu.Unlock()
	f(c.peers.nodes[id])
}

func TestSingleNodeElectsItself(t *testing.T) {
	c := newCluster(t, -1, "n1").begin(-1)
	cs, _ := c.run(5*time.Second, primaryIs("n1", 1))
	if cs.RegisteredNodes != 1 || cs.Elector.NodeId != "n1" || cs.ElectorTerm != 1 {
		t.Fatalf("state %v", cs)
	}
	m, _, err := discovery.NewMembersFile(c.store, "c1").Load(t.Context())
	if err != nil || m.PrimaryTerm != 1 || m.IDs["n1"] == 0 {
		t.Fatalf("members.json: %+v, %v", m, err)
	}
}

// The node with the highest log index wins; ties go to the newest start.
func TestElectsHighestRevision(t *testing.T) {
	c := newCluster(t, -1, "n1", "n2", "n3")
	c.set("n2", func(f *fakeNode) { f.hb.LatestIndex, f.hb.LatestRevision = 12, 12 })
	c.begin(-1)
	// The state names the Primary before the pushes go out: wait for the
	// first push as well.
	c.run(5*time.Second, func(cs *netsyv1.ClusterState) bool {
		c.peers.mu.Lock()
		defer c.peers.mu.Unlock()
		return primaryIs("n2", 1)(cs) && len(c.peers.order) > 0
	})
	c.peers.mu.Lock()
	defer c.peers.mu.Unlock()
	if c.peers.order[0] != "n2<-n2" {
		t.Fatalf("the first push naming n2 went to %s, want n2 itself (order %v)", c.peers.order[0], c.peers.order)
	}
}

// A Primary whose address refuses connections is replaced no sooner than
// one that went silent: both only once the lease wait (1.25 s here) has
// passed since the last answer that named them; the handshake timeout (3 s
// here) is not waited for a Primary last seen Active.
func TestFailoverWaitsOutTheLeaseEvenWhenRefused(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reach   reach
		minWait time.Duration
		maxWait time.Duration
	}{
		{"refused", refused, time.Second, 2 * time.Second},
		{"silent", silent, time.Second, 2500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, -1, "n1", "n2", "n3")
			c.set("n3", func(f *fakeNode) { f.hb.LatestIndex = 20 })
			c.begin(-1)
			c.run(5*time.Second, primaryIs("n3", 1))
			c.set("n3", func(f *fakeNode) { f.reach = tc.reach })
			c.set("n2", func(f *fakeNode) { f.hb.LatestIndex = 20 })
			// n3 is gone, but n1 and n2 make a majority of 3.
			_, took := c.run(10*time.Second, primaryIs("n2", 2))
			if took < tc.minWait || took > tc.maxWait {
				t.Fatalf("new Primary after %v, want between %v and %v", took, tc.minWait, tc.maxWait)
			}
		})
	}
}

// Majority quorum needs a majority of the registered nodes; a static
// quorum needs every one of them until the missing one is deregistered.
func TestContactRules(t *testing.T) {
	t.Run("majority", func(t *testing.T) {
		c := newCluster(t, -1, "n1", "n2", "n3")
		c.set("n2", func(f *fakeNode) { f.reach = refused })
		c.set("n3", func(f *fakeNode) { f.reach = refused })
		c.begin(-1)
		c.clk.Advance(2 * time.Second)
		cs, _ := c.e.ClusterState(t.Context(), false)
		if cs.Primary != nil {
			t.Fatalf("elected %s with 1 of 3 nodes reachable", cs.Primary.NodeId)
		}
		c.set("n2", func(f *fakeNode) { f.reach = up })
		c.run(5*time.Second, primaryIs("", 0))
	})
	t.Run("static", func(t *testing.T) {
		c := newCluster(t, 1, "n1", "n2", "n3")
		c.set("n3", func(f *fakeNode) { f.reach = silent })
		c.begin(1)
		for range 8 {
			c.beat()
			c.clk.Advance(500 * time.Millisecond)
		}
		if cs, _ := c.e.ClusterState(t.Context(), false); cs.Primary != nil {
			t.Fatalf("static quorum elected %s with n3 unreachable", cs.Primary.NodeId)
		}
		// n3 was never heard from, so only force removes it.
		_, err := c.e.DeregisterNode(t.Context(), "n3", true)
		for i := 0; i < 1000 && errors.Is(err, ErrNotLoaded); i++ {
			time.Sleep(time.Millisecond) // the map loads on its own goroutine
			_, err = c.e.DeregisterNode(t.Context(), "n3", true)
		}
		if err != nil {
			t.Fatal(err)
		}
		cs, _ := c.run(5*time.Second, func(cs *netsyv1.ClusterState) bool { return cs.Primary != nil })
		if cs.RegisteredNodes != 2 {
			t.Fatalf("registered %d after the deregistration", cs.RegisteredNodes)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		c := newCluster(t, 0, "n1", "n2", "n3")
		c.set("n2", func(f *fakeNode) { f.reach = silent })
		c.set("n3", func(f *fakeNode) { f.reach = silent })
		c.begin(0)
		c.run(5*time.Second, primaryIs("n1", 0))
	})
}

// A node that says it is Active is adopted rather than replaced; a node
// that is Starting blocks the election.
func TestAdoptAndBlock(t *testing.T) {
	c := newCluster(t, -1, "n1", "n2", "n3")
	c.set("n3", func(f *fakeNode) { f.hb.PrimaryState, f.hb.PrimaryTerm = netsyv1.PrimaryState_STARTING, 7 })
	c.begin(-1)
	c.clk.Advance(time.Second)
	c.beat()
	if cs, _ := c.e.ClusterState(t.Context(), false); cs.Primary != nil {
		t.Fatalf("elected %s while n3 is Starting", cs.Primary.NodeId)
	}
	c.set("n3", func(f *fakeNode) { f.hb.PrimaryState = netsyv1.PrimaryState_ACTIVE })
	c.run(5*time.Second, primaryIs("n3", 7))
}

// A Degraded node is deregistered after the timeout (its member id
// stays); with timeout 0 it never is.
func TestDeregistrationTimeout(t *testing.T) {
	for _, timeout := range []time.Duration{time.Minute, 0} {
		t.Run(fmt.Sprint(timeout), func(t *testing.T) {
			c := newCluster(t, -1, "n1", "n2", "n3").begin(-1)
			c.e.cfg.DeregistrationTimeout = timeout
			// The bucket holds everything n2 reported (index 10).
			c.e.cfg.DurableTip = func(context.Context) (uint64, error) { return 10, nil }
			c.run(5*time.Second, func(cs *netsyv1.ClusterState) bool { return cs.Primary != nil })
			c.set("n2", func(f *fakeNode) { f.reach = silent })
			for range 200 { // 100 s
				c.beat()
				c.clk.Advance(500 * time.Millisecond)
			}
			// The tip is read on its own goroutine, which may lag the fake
			// clock under load: give its answer time to arrive.
			cs, _ := c.run(time.Second, func(*netsyv1.ClusterState) bool { return true })
			if timeout > 0 {
				cs, _ = c.run(10*time.Second, func(cs *netsyv1.ClusterState) bool { return cs.RegisteredNodes == 2 })
			}
			gone := cs.RegisteredNodes == 2
			if gone != (timeout > 0) {
				t.Fatalf("timeout %v: registered %d", timeout, cs.RegisteredNodes)
			}
			regs, _, _ := discovery.List(t.Context(), c.store)
			for i := 0; i < 1000 && timeout > 0 && len(regs) != 2; i++ {
				time.Sleep(time.Millisecond) // the file is deleted on its own goroutine
				regs, _, _ = discovery.List(t.Context(), c.store)
			}
			if (len(regs) == 2) != (timeout > 0) {
				t.Fatalf("timeout %v: %d registration files", timeout, len(regs))
			}
		})
	}
}

// A handoff drains the Primary, elects another (the one asked for) at a
// new term and never re-elects the drained one.
func TestHandoff(t *testing.T) {
	c := newCluster(t, -1, "n1", "n2", "n3")
	c.set("n1", func(f *fakeNode) { f.hb.LatestIndex = 30 })
	c.begin(-1)
	c.run(5*time.Second, primaryIs("n1", 1))
	done := make(chan error, 1)
	go func() {
		_, err := c.e.Handoff(t.Context(), "n3")
		done <- err
	}()
	cs, _ := c.run(5*time.Second, primaryIs("n3", 2))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := c.peers.drains; len(d) != 1 || d[0] != "n1" {
		t.Fatalf("drains %v", d)
	}
	if cs.Primary.NodeId != "n3" {
		t.Fatal("handoff did not honour --to")
	}
}

// A new Elector (a later lock term) adopts the Active Primary and any
// Primary it elects gets a term above every earlier one.
func TestNewElectorAdoptsAndNeverReusesTerms(t *testing.T) {
	c := newCluster(t, -1, "n1", "n2", "n3").begin(-1)
	c.run(5*time.Second, primaryIs("", 1))
	first, _ := c.e.ClusterState(t.Context(), false)
	c.close()
	c.start(2, -1, "n2")
	cs, _ := c.run(5*time.Second, primaryIs(first.Primary.NodeId, 1))
	if cs.ElectorTerm != 2 || cs.Elector.NodeId != "n2" {
		t.Fatalf("new Elector's state %v", cs)
	}
	old := first.Primary.NodeId
	c.set(old, func(f *fakeNode) { f.reach = refused })
	cs, _ = c.run(10*time.Second, func(cs *netsyv1.ClusterState) bool { return cs.Primary != nil && cs.Primary.NodeId != old })
	if cs.PrimaryTerm != 2 {
		t.Fatalf("primary term after the failover: %d, want 2", cs.PrimaryTerm)
	}
}

func TestDecideTable(t *testing.T) {
	hb := func(idx uint64, ps netsyv1.PrimaryState, h netsyv1.HealthState, start int64) *netsyv1.Heartbeat {
		return &netsyv1.Heartbeat{LatestIndex: idx, PrimaryState: ps, Health: h, StartTimeUnixNano: start}
	}
	hbt := func(term int64, idx uint64) *netsyv1.Heartbeat {
		return &netsyv1.Heartbeat{LatestTerm: term, LatestIndex: idx, PrimaryState: netsyv1.PrimaryState_REPLICA, Health: netsyv1.HealthState_HEALTHY}
	}
	R, A, S := netsyv1.PrimaryState_REPLICA, netsyv1.PrimaryState_ACTIVE, netsyv1.PrimaryState_STARTING
	H, D := netsyv1.HealthState_HEALTHY, netsyv1.HealthState_DEGRADED
	for _, tc := range []struct {
		name   string
		cands  []candidate
		p      plan
		want   string
		adopt  bool
		errIs  error
		contac int
	}{
		{"highest index", []candidate{{"a", hb(5, R, H, 0), false}, {"b", hb(7, R, H, 0), false}}, plan{quorum: -1, registered: 2}, "b", false, nil, 2},
		{"newest start breaks ties", []candidate{{"a", hb(7, R, H, 2), false}, {"b", hb(7, R, H, 1), false}}, plan{quorum: -1, registered: 2}, "a", false, nil, 2},
		{"degraded excluded", []candidate{{"a", hb(9, R, D, 0), false}, {"b", hb(7, R, H, 0), false}}, plan{quorum: 0, registered: 2}, "b", false, nil, 2},
		{"judged degraded excluded", []candidate{{"a", hb(9, R, H, 0), true}, {"b", hb(7, R, H, 0), false}}, plan{quorum: 0, registered: 2}, "b", false, nil, 2},
		{"degraded behind excluded", []candidate{{"a", hb(5, R, D, 0), false}, {"b", hb(7, R, H, 0), false}}, plan{quorum: -1, registered: 2}, "b", false, nil, 2},
		// Under a replica quorum, entries only a Degraded node holds may
		// have been acknowledged: wait for it.
		{"degraded ahead blocks", []candidate{{"a", hb(9, R, D, 0), false}, {"b", hb(7, R, H, 0), false}}, plan{quorum: -1, registered: 2}, "", false, errAhead, 2},
		{"judged degraded ahead blocks", []candidate{{"a", hb(9, R, H, 0), true}, {"b", hb(7, R, H, 0), false}}, plan{quorum: 1, registered: 2}, "", false, errAhead, 2},
		{"handoff excluded ahead does not block", []candidate{{"a", hb(9, R, D, 0), false}, {"b", hb(7, R, H, 0), false}}, plan{quorum: -1, registered: 2, exclude: map[string]bool{"a": true}}, "b", false, nil, 2},
		// A deposed Primary's stale entries never outrank a newer
		// Primary's: the term of the last entry comes first.
		{"newer term beats longer log", []candidate{{"a", hbt(2, 5), false}, {"b", hbt(1, 9), false}}, plan{quorum: -1, registered: 2}, "a", false, nil, 2},
		{"same term, longer log", []candidate{{"a", hbt(2, 5), false}, {"b", hbt(2, 9), false}}, plan{quorum: -1, registered: 2}, "b", false, nil, 2},
		{"active adopted", []candidate{{"a", hb(9, R, H, 0), false}, {"b", hb(7, A, H, 0), false}}, plan{quorum: -1, registered: 2}, "b", true, nil, 2},
		{"two active", []candidate{{"a", hb(9, A, H, 0), false}, {"b", hb(7, A, H, 0), false}}, plan{quorum: -1, registered: 2}, "", false, errTwoActive, 2},
		{"starting blocks", []candidate{{"a", hb(9, R, H, 0), false}, {"b", hb(7, S, H, 0), false}}, plan{quorum: -1, registered: 2}, "", false, errNotReplica, 2},
		{"degraded starting does not block", []candidate{{"a", hb(9, R, H, 0), false}, {"b", hb(7, S, D, 0), false}}, plan{quorum: -1, registered: 2}, "a", false, nil, 2},
		{"majority short", []candidate{{"a", hb(9, R, H, 0), false}, {"b", nil, false}, {"c", nil, false}}, plan{quorum: -1, registered: 3}, "", false, errContact, 1},
		{"static short", []candidate{{"a", hb(9, R, H, 0), false}, {"b", hb(9, R, H, 0), false}, {"c", nil, false}}, plan{quorum: 1, registered: 3}, "", false, errContact, 2},
		// The previous Primary did not answer (its lease was waited out
		// instead): the nodes that must answer are counted without it.
		{"static without the previous Primary", []candidate{{"a", hb(9, R, H, 0), false}, {"b", hb(9, R, H, 0), false}}, plan{quorum: 1, registered: 3, prevRegistered: true}, "a", false, nil, 2},
		{"static without the previous Primary, one short", []candidate{{"a", hb(9, R, H, 0), false}, {"b", nil, false}}, plan{quorum: 1, registered: 3, prevRegistered: true}, "", false, errContact, 1},
		{"majority of 2 without the previous Primary", []candidate{{"a", hb(9, R, H, 0), false}}, plan{quorum: -1, registered: 2, prevRegistered: true}, "a", false, nil, 1},
		{"majority of 4 without the previous Primary", []candidate{{"a", hb(9, R, H, 0), false}, {"b", hb(9, R, H, 0), false}, {"c", nil, false}}, plan{quorum: -1, registered: 4, prevRegistered: true}, "a", false, nil, 2},
		{"majority of 5 without the previous Primary, one short", []candidate{{"a", hb(9, R, H, 0), false}, {"b", hb(9, R, H, 0), false}, {"c", nil, false}, {"d", nil, false}}, plan{quorum: -1, registered: 5, prevRegistered: true}, "", false, errContact, 2},
		{"majority of 5 without the previous Primary", []candidate{{"a", hb(9, R, H, 0), false}, {"b", hb(9, R, H, 0), false}, {"c", hb(9, R, H, 0), false}, {"d", nil, false}}, plan{quorum: -1, registered: 5, prevRegistered: true}, "a", false, nil, 3},
		{"prefer", []candidate{{"a", hb(9, R, H, 0), false}, {"b", hb(7, R, H, 0), false}}, plan{quorum: -1, registered: 2, prefer: "b"}, "b", false, nil, 2},
		{"exclude", []candidate{{"a", hb(9, R, H, 0), false}, {"b", hb(7, R, H, 0), false}}, plan{quorum: -1, registered: 2, exclude: map[string]bool{"a": true}}, "b", false, nil, 2},
		{"none healthy", []candidate{{"a", hb(9, R, D, 0), false}}, plan{quorum: 0, registered: 1}, "", false, errNoHealthy, 0},
		// A Primary superseded while cut off (its term is below one handed
		// out since) acknowledged nothing only it holds: its lease ran
		// out before the newer term was handed out, and after that it
		// could acknowledge only through object storage, which the next
		// Primary's Starting step catches up from. Its longer log must
		// not block the election (clustersim seed 1058: no Primary for
		// good, the stale one never hearing of a successor).
		{"stale active ahead does not block", []candidate{
			{"a", &netsyv1.Heartbeat{LatestTerm: 1, LatestIndex: 12, PrimaryState: A, PrimaryTerm: 1, Health: H}, false},
			{"b", &netsyv1.Heartbeat{LatestTerm: 1, LatestIndex: 6, PrimaryState: R, Health: H}, false},
		}, plan{quorum: -1, registered: 2, maxTerm: 2}, "b", false, nil, 2},
		{"stale degraded active ahead does not block", []candidate{
			{"a", &netsyv1.Heartbeat{LatestTerm: 1, LatestIndex: 12, PrimaryState: A, PrimaryTerm: 1, Health: D}, true},
			{"b", &netsyv1.Heartbeat{LatestTerm: 1, LatestIndex: 6, PrimaryState: R, Health: H}, false},
		}, plan{quorum: 1, registered: 2, maxTerm: 2}, "b", false, nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, adopt, err := decide(tc.cands, tc.p, tc.contac, false)
			if tc.errIs != nil {
				if !errors.Is(err, tc.errIs) {
					t.Fatalf("err %v, want %v", err, tc.errIs)
				}
				return
			}
			if err != nil || got != tc.want || adopt != tc.adopt {
				t.Fatalf("got %q adopt %v err %v; want %q adopt %v", got, adopt, err, tc.want, tc.adopt)
			}
		})
	}
}

// A request to an Elector whose Run returned fails at once with
// ErrStopped (the caller then looks for the new Elector) instead of
// waiting for its own deadline.
func TestStoppedElectorAnswersAtOnce(t *testing.T) {
	c := newCluster(t, -1, "n1").begin(-1)
	c.run(5*time.Second, primaryIs("n1", 1))
	c.close()
	ctx := t.Context() // before the fix, the calls below waited for it
	_, err := c.e.Heartbeat(ctx, cloneHB(c.peers.node("n1").hb))
	if !errors.Is(err, ErrStopped) {
		t.Fatalf("heartbeat to a stopped Elector: %v, want ErrStopped", err)
	}
	if _, err := c.e.ClusterState(ctx, true); !errors.Is(err, ErrStopped) {
		t.Fatalf("ClusterState of a stopped Elector: %v, want ErrStopped", err)
	}
}

// A new Elector whose nodes know a Primary at a term below the highest
// term handed out (members.json) does not name it: its answers would renew
// a lease that may overlap the lease of the unknown Primary of the higher
// term. It elects at a higher term instead.
func TestStalePreviousPrimaryNotNamed(t *testing.T) {
	c := newCluster(t, -1, "n1", "n2", "n3")
	if _, err := discovery.NewMembersFile(c.store, "c1").Update(t.Context(), func(m *discovery.Members) error {
		m.PrimaryTerm = 5
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	stale := &netsyv1.ClusterState{Primary: c.peers.node("n2").info, PrimaryTerm: 4, ElectorTerm: 1}
	for _, id := range []string{"n1", "n2", "n3"} {
		c.set(id, func(f *fakeNode) { f.cs, f.hb.PrimaryTerm, f.hb.PrimaryId = stale, 4, "n2" })
	}
	c.set("n2", func(f *fakeNode) { f.hb.PrimaryState = netsyv1.PrimaryState_ACTIVE })
	c.start(2, -1, "n1")
	c.waitLoaded()
	for range 8 {
		c.beat()
		cs, err := c.e.ClusterState(t.Context(), false)
		if err != nil {
			t.Fatal(err)
		}
		if cs.GetPrimary().GetNodeId() == "n2" && cs.PrimaryTerm == 4 {
			t.Fatalf("the Elector names the stale Primary n2 at term 4 (members.json has term 5): %v", cs)
		}
		c.clk.Advance(250 * time.Millisecond)
	}
	c.run(10*time.Second, func(cs *netsyv1.ClusterState) bool { return cs.GetPrimary() != nil && cs.PrimaryTerm > 5 })
}

// A heartbeat of the previous Primary answered while a round that may
// elect its successor runs must not renew its lease past the round's
// check: the round waited out the lease it knew of when it started, and
// hands out the successor's term when it ends. Here the silent Primary
// n3 comes back while the round is contacting n2; whatever the Elector
// does then, a successor is named only once the lease wait has passed
// since an answer last named n3.
func TestNoLeaseRenewedWhileElectingAway(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, -1, "n1", "n2", "n3")
		c.set("n3", func(f *fakeNode) { f.hb.LatestIndex = 20 })
		c.begin(-1)
		c.run(5*time.Second, primaryIs("n3", 1))
		c.set("n3", func(f *fakeNode) { f.reach = silent })
		gate := make(chan struct{})
		c.peers.mu.Lock()
		c.peers.gates = map[string]chan struct{}{"n2": gate}
		c.peers.reached = make(chan string, 8)
		c.peers.mu.Unlock()
		// Only a round past its lease wait contacts n2 (the handshake
		// with the silent n3 fails the earlier rounds).
		reached := false
		for i := 0; i < 40 && !reached; i++ {
			c.beat()
			c.clk.Advance(250 * time.Millisecond)
			synctest.Wait()
			select {
			case <-c.peers.reached:
				reached = true
			default:
			}
		}
		if !reached {
			t.Fatal("no election round contacted n2 within 10 s of n3 going silent")
		}
		leaseWait := c.e.cfg.leaseWait()
		var namedAt time.Time
		answer := func(id string) {
			resp, err := c.e.Heartbeat(t.Context(), cloneHB(c.peers.node(id).hb))
			if id == "n3" && errors.Is(err, ErrElectingSuccessor) {
				return // refused while the round runs: no renewal
			}
			if err != nil {
				t.Fatalf("heartbeat %s: %v", id, err)
			}
			cs := resp.GetClusterState()
			if cs.GetPrimary().GetNodeId() == "n3" && cs.PrimaryTerm == 1 && id == "n3" {
				namedAt = c.clk.Now()
			}
		}
		// n3 is back (Healthy, Active at term 1) while the round waits
		// for n2.
		c.set("n3", func(f *fakeNode) { f.reach = up })
		answer("n3")
		close(gate)
		synctest.Wait()
		for range 40 {
			cs, err := c.e.ClusterState(t.Context(), false)
			if err != nil {
				t.Fatal(err)
			}
			if p := cs.GetPrimary(); p != nil && p.NodeId != "n3" {
				if !namedAt.IsZero() && c.clk.Since(namedAt) < leaseWait {
					t.Fatalf("%s elected at term %d %v after an answer renewed n3's lease at term 1 (the wait is %v)",
						p.NodeId, cs.PrimaryTerm, c.clk.Since(namedAt), leaseWait)
				}
				return
			}
			for _, id := range []string{"n1", "n2", "n3"} {
				answer(id)
			}
			c.clk.Advance(250 * time.Millisecond)
			synctest.Wait()
		}
		// n3 kept the role: it was answered as Primary all along.
		if namedAt.IsZero() {
			t.Fatal("n3 kept the role but no answer named it Primary")
		}
	})
}

// A member's name comes from its registration file when the Elector loads
// the cluster, and from its RegisterNode call after that.
func TestMemberNames(t *testing.T) {
	c := newCluster(t, -1, "n1", "n2")
	named := discovery.Registration{NodeID: "n2", ClusterID: "c1", PeerAddr: "n2:2380", Name: "etcd-2"}
	if err := discovery.Register(t.Context(), c.store, named); err != nil {
		t.Fatal(err)
	}
	c.begin(-1)
	names := func(cs *netsyv1.ClusterState) map[string]string {
		m := map[string]string{}
		for _, n := range cs.Members {
			m[n.NodeId] = n.Name
		}
		return m
	}
	cs, _ := c.run(5*time.Second, primaryIs("", 0))
	if got := names(cs); got["n1"] != "" || got["n2"] != "etcd-2" {
		t.Fatalf("member names after load: %v", got)
	}
	_, cs, err := c.e.Register(t.Context(), &netsyv1.NodeInfo{NodeId: "n2", PeerAddr: "n2:2380", Name: "etcd-two"}, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if got := names(cs); got["n2"] != "etcd-two" {
		t.Fatalf("member names after RegisterNode: %v", got)
	}
}

// settle advances the fake clock by d in steps of at most 250 ms, every
// node that is up and not muted beating at each step, and waits for the
// Elector's goroutines to block after each (inside a synctest bubble).
func (c *cluster) settle(d time.Duration, mute ...string) {
	c.t.Helper()
	for d > 0 {
		step := min(d, 250*time.Millisecond)
		c.beatExcept(mute...)
		c.clk.Advance(step)
		synctest.Wait()
		d -= step
	}
	c.beatExcept(mute...)
	synctest.Wait()
}

// beatExcept is beat without the muted nodes; it returns the answers.
func (c *cluster) beatExcept(mute ...string) map[string]*netsyv1.HeartbeatResponse {
	c.t.Helper()
	out := map[string]*netsyv1.HeartbeatResponse{}
	for _, id := range c.ids() {
		if slices.Contains(mute, id) {
			continue
		}
		f := c.peers.node(id)
		c.peers.mu.Lock()
		ok, hb := f.reach == up, cloneHB(f.hb)
		c.peers.mu.Unlock()
		if !ok {
			continue
		}
		resp, err := c.e.Heartbeat(c.t.Context(), hb)
		if err == nil {
			out[id] = resp
		}
	}
	return out
}

// pushedPrimary reports whether any push named id Primary.
func (c *cluster) pushedPrimary(id string) bool {
	c.peers.mu.Lock()
	defer c.peers.mu.Unlock()
	for _, o := range c.peers.order {
		if strings.HasSuffix(o, "<-"+id) {
			return true
		}
	}
	return false
}

func (c *cluster) pushCount() int {
	c.peers.mu.Lock()
	defer c.peers.mu.Unlock()
	n := 0
	for _, f := range c.peers.nodes {
		n += len(f.pushes)
	}
	return n
}

// An Elector that has not finished loading members.json and nodes/ has no
// authority: it answers no Cluster State to a heartbeat, a GetClusterState
// or a registration (it records the registration), and pushes nothing.
// Before the fix it answered heartbeats with a state of 0 registered nodes
// and no Primary, which a node's view accepted (a higher Elector term).
func TestUnloadedElectorAnswersNoClusterState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, -1, "n1", "n2", "n3")
		gate := make(chan struct{})
		c.peers.mu.Lock()
		c.peers.gates = map[string]chan struct{}{"n3": gate}
		c.peers.reached = make(chan string, 8)
		c.peers.mu.Unlock()
		c.start(1, -1, c.first)
		<-c.peers.reached // the load is asking n3 for its state
		notLoaded := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, ErrNotLoaded) || peer.ReasonOf(err) != peer.ReasonNotLoaded || status.Code(err) != codes.Unavailable {
				t.Fatalf("%s before the load finished: %v, want ErrNotLoaded (Unavailable, %s)", what, err, peer.ReasonNotLoaded)
			}
		}
		resp, err := c.e.Heartbeat(t.Context(), cloneHB(c.peers.node("n2").hb))
		if resp != nil {
			t.Fatalf("heartbeat answered with %v before the load finished", resp)
		}
		notLoaded("heartbeat", err)
		cs, err := c.e.ClusterState(t.Context(), false)
		if cs != nil {
			t.Fatalf("GetClusterState answered %v before the load finished", cs)
		}
		notLoaded("GetClusterState", err)
		rctx, cancel := context.WithTimeout(t.Context(), time.Second)
		_, cs, err = c.e.Register(rctx, &netsyv1.NodeInfo{NodeId: "n4", PeerAddr: "n4:2380"}, "c1")
		cancel()
		if cs != nil {
			t.Fatalf("RegisterNode answered %v before the load finished", cs)
		}
		notLoaded("RegisterNode", err)
		synctest.Wait()
		if n := c.pushCount(); n != 0 {
			t.Fatalf("%d pushes before the load finished", n)
		}
		c.peers.mu.Lock()
		c.peers.gates = nil
		c.peers.mu.Unlock()
		close(gate)
		synctest.Wait()
		cs, err = c.e.ClusterState(t.Context(), false)
		if err != nil {
			t.Fatal(err)
		}
		var members []string
		for _, m := range cs.Members {
			members = append(members, m.NodeId)
		}
		if !slices.Equal(members, []string{"n1", "n2", "n3", "n4"}) || cs.RegisteredNodes != 4 {
			t.Fatalf("after the load: members %v, registered %d; want n1..n4 (n4 registered while loading)", members, cs.RegisteredNodes)
		}
	})
}

// The successor of a Primary this Elector answered is pushed exactly one
// lease wait (1.25 lease windows) after the last heartbeat answer that
// named it Primary, not sooner, even though its address refuses
// connections (a live Primary behind a REJECT rule refuses too) and the
// replicas say so. Until then every answer still names the old Primary.
// Before the fix the refusal ended the wait: the successor was pushed
// about 0.75 s after the last answer.
func TestSuccessorPushedOneLeaseWaitAfterTheLastAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, -1, "n1", "n2", "n3")
		c.set("n3", func(f *fakeNode) { f.hb.LatestIndex = 20 })
		c.begin(-1)
		c.run(5*time.Second, primaryIs("n3", 1))
		c.settle(100 * time.Millisecond) // off the tick grid
		resp, err := c.e.Heartbeat(t.Context(), cloneHB(c.peers.node("n3").hb))
		if err != nil || resp.ClusterState.GetPrimary().GetNodeId() != "n3" {
			t.Fatalf("n3's heartbeat: %v, %v", resp, err)
		}
		due := c.clk.Now().Add(c.e.cfg.leaseWait())
		c.set("n3", func(f *fakeNode) { f.reach = refused })
		for _, id := range []string{"n1", "n2"} {
			c.set(id, func(f *fakeNode) { f.hb.LatestIndex, f.hb.PrimaryRefused = 20, true })
		}
		for c.clk.Now().Add(250 * time.Millisecond).Before(due) {
			for id, r := range c.beatExcept() {
				if r.ClusterState.GetPrimary().GetNodeId() != "n3" {
					t.Fatalf("%v after the last answer to n3, %s was told the Primary is %v", c.clk.Since(due.Add(-c.e.cfg.leaseWait())), id, r.ClusterState.GetPrimary())
				}
			}
			c.clk.Advance(250 * time.Millisecond)
			synctest.Wait()
		}
		c.beatExcept()
		c.clk.Advance(due.Sub(c.clk.Now()) - 1)
		synctest.Wait()
		if c.pushedPrimary("n1") || c.pushedPrimary("n2") {
			t.Fatalf("a successor was pushed before the lease wait ran out (order %v)", c.peers.order)
		}
		c.clk.Advance(1)
		synctest.Wait()
		if !c.pushedPrimary("n2") {
			t.Fatalf("no successor pushed when the lease wait ran out (order %v)", c.peers.order)
		}
	})
}

// A new Elector gave the old Primary no answer, but the Elector before it
// may have until it lost its lock: it pushes a successor only a full lease
// wait after it took over, not sooner, however the old Primary's address
// fails. Before the fix a refused connection ended the wait at once.
func TestNewElectorWaitsAFullLeaseWaitFromItsStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, -1, "n1", "n2", "n3")
		c.set("n3", func(f *fakeNode) { f.hb.LatestIndex = 20 })
		c.begin(-1)
		c.run(5*time.Second, primaryIs("n3", 1))
		known, _ := c.e.ClusterState(t.Context(), false)
		c.close()
		c.set("n3", func(f *fakeNode) { f.reach = refused })
		for _, id := range []string{"n1", "n2"} {
			c.set(id, func(f *fakeNode) { f.hb.LatestIndex, f.hb.PrimaryRefused, f.cs = 20, true, known })
		}
		c.settle(100 * time.Millisecond)
		started := c.clk.Now()
		c.start(2, -1, "n2")
		synctest.Wait()
		due := started.Add(c.e.cfg.leaseWait())
		for c.clk.Now().Add(250 * time.Millisecond).Before(due) {
			c.beatExcept()
			c.clk.Advance(250 * time.Millisecond)
			synctest.Wait()
		}
		c.beatExcept()
		c.clk.Advance(due.Sub(c.clk.Now()) - 1)
		synctest.Wait()
		if c.pushedPrimary("n1") || c.pushedPrimary("n2") {
			t.Fatalf("the new Elector pushed a successor %v after it started (the lease wait is %v; order %v)",
				c.clk.Since(started), c.e.cfg.leaseWait(), c.peers.order)
		}
		c.clk.Advance(1)
		synctest.Wait()
		if !c.pushedPrimary("n2") {
			t.Fatalf("no successor pushed a lease wait after the new Elector started (order %v)", c.peers.order)
		}
	})
}

// Election rounds that defer (the previous Primary still says it is
// Active, though its heartbeats stopped reaching the Elector) change
// nothing: the state keeps naming the Primary at the same version and
// nothing is pushed. Before the fix every round's answers named no
// Primary, so replicas dropped their streams each round.
func TestDeferredRoundsKeepTheClusterState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, -1, "n1", "n2", "n3")
		c.set("n3", func(f *fakeNode) { f.hb.LatestIndex = 20 })
		c.begin(-1)
		c.run(5*time.Second, primaryIs("n3", 1))
		c.settle(time.Second)
		before, _ := c.e.ClusterState(t.Context(), false)
		pushes := c.pushCount()
		c.peers.mu.Lock()
		c.peers.calls = map[string]int{}
		c.peers.mu.Unlock()
		for range 16 { // 4 s: n3 is Degraded after 1 s, then a round every 500 ms
			for id, r := range c.beatExcept("n3") {
				cs := r.ClusterState
				if cs.GetPrimary().GetNodeId() != "n3" || cs.PrimaryTerm != 1 || cs.Version != before.Version {
					t.Fatalf("a deferring Elector told %s: Primary %v term %d version %d; want n3, 1, %d",
						id, cs.GetPrimary().GetNodeId(), cs.PrimaryTerm, cs.Version, before.Version)
				}
			}
			c.clk.Advance(250 * time.Millisecond)
			synctest.Wait()
		}
		c.peers.mu.Lock()
		asked := c.peers.calls["n3"]
		c.peers.mu.Unlock()
		if asked < 4 {
			t.Fatalf("n3 was asked for its state %d times; want a deferred round every 500 ms", asked)
		}
		if n := c.pushCount(); n != pushes {
			t.Fatalf("%d pushes during deferred rounds", n-pushes)
		}
	})
}

// A round that fails is retried DefaultRetryInterval after it ended: not
// sooner, and not at the next tick after that (here the round ends off
// the tick grid).
func TestFailedRoundRetriedAfterRetryInterval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, -1, "n1", "n2", "n3")
		c.set("n2", func(f *fakeNode) { f.reach = refused })
		c.set("n3", func(f *fakeNode) { f.reach = refused })
		gate := make(chan struct{})
		c.peers.mu.Lock()
		c.peers.calls = map[string]int{}
		c.peers.mu.Unlock()
		c.begin(-1)
		synctest.Wait()
		// The first round is under way: hold its question to n2 for 100 ms,
		// then let n2 refuse too (1 of 3 answers: the round fails).
		c.peers.mu.Lock()
		c.peers.gates = map[string]chan struct{}{"n2": gate}
		c.peers.reached = make(chan string, 8)
		c.peers.mu.Unlock()
		c.clk.Advance(DefaultRetryInterval)
		synctest.Wait()
		<-c.peers.reached
		c.clk.Advance(100 * time.Millisecond)
		c.peers.mu.Lock()
		c.peers.gates = nil
		calls := c.peers.calls["n2"]
		c.peers.mu.Unlock()
		close(gate)
		synctest.Wait()
		asked := func() int {
			c.peers.mu.Lock()
			defer c.peers.mu.Unlock()
			return c.peers.calls["n2"]
		}
		c.clk.Advance(DefaultRetryInterval - 1)
		synctest.Wait()
		if n := asked(); n != calls {
			t.Fatalf("a round ran %v after the failed one (the retry interval is %v)", DefaultRetryInterval-1, DefaultRetryInterval)
		}
		c.clk.Advance(1)
		synctest.Wait()
		if n := asked(); n != calls+1 {
			t.Fatalf("no round ran %v after the failed one", DefaultRetryInterval)
		}
	})
}

// A dead Primary is not counted among the nodes an election must hear
// from: its lease is waited out instead (seed, election step 2). Counting
// it stopped the cluster for good under a static quorum of any size, and
// under majority quorum with 2 nodes, since a dead Primary is also kept
// counted until a successor reports ("2 of 3 needed" for ever).
func TestDeadPrimaryNotCountedForTheContactRule(t *testing.T) {
	for _, tc := range []struct {
		name   string
		quorum int
		ids    []string
	}{
		{"static 1 of 3", 1, []string{"n1", "n2", "n3"}},
		{"static 2 of 3", 2, []string{"n1", "n2", "n3"}},
		{"majority of 2", -1, []string{"n1", "n3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, tc.quorum, tc.ids...)
			c.set("n3", func(f *fakeNode) { f.hb.LatestIndex = 1000 })
			c.begin(tc.quorum)
			c.run(5*time.Second, primaryIs("n3", 1))
			c.set("n3", func(f *fakeNode) { f.reach = refused })
			for _, id := range tc.ids[:len(tc.ids)-1] {
				c.set(id, func(f *fakeNode) { f.hb.LatestIndex = 1000 })
			}
			cs, took := c.run(20*time.Second, primaryIs("", 2))
			if cs.Primary.NodeId == "n3" || took < time.Second {
				t.Fatalf("elected %s after %v; want another node, once n3's lease wait (1.25 s) has passed", cs.Primary.NodeId, took)
			}
		})
	}
}

// A new Elector does not know who took up the highest term handed out, and
// waits a lease wait from its start for that Primary's lease, unless the
// Primary of that term answers the round, as itself, that its data
// directory records the term and that it is a Replica: a restarted lone
// node whose dead process held the term is elected again at once. Every
// other case keeps the wait: the term's holder is another node that does
// not answer, the holder answered so only before the round (a remembered
// report), or the node's term file is older than the term (its process
// died before recording it, or the directory is older). Before the rule
// the restarted node also waited the full lease wait.
func TestNewElectorSkipsTheLeaseWaitOnlyWhenTheTermsHolderGaveItUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		ids  []string
		// after the first election (the last id wins, at term 1), before
		// the new Elector starts on n1.
		then func(c *cluster)
		skip bool
	}{
		{name: "its own dead process held the term", ids: []string{"n1"}, skip: true, then: func(c *cluster) {
			c.set("n1", func(f *fakeNode) { f.hb.PrimaryState, f.hb.TookPrimaryTerm = netsyv1.PrimaryState_REPLICA, 1 })
		}},
		{name: "another node held the term", ids: []string{"n1", "n2", "n3"}, then: func(c *cluster) {
			c.set("n3", func(f *fakeNode) { f.reach = refused })
		}},
		{name: "the holder's report is not this round's", ids: []string{"n1", "n2", "n3"}, then: func(c *cluster) {
			c.set("n3", func(f *fakeNode) { f.hb.PrimaryState, f.hb.TookPrimaryTerm = netsyv1.PrimaryState_REPLICA, 1 })
			c.peers.mu.Lock()
			c.peers.refuseAfter = map[string]int{"n3": 1} // answers the load, not the round
			c.peers.mu.Unlock()
		}},
		{name: "its term file is older than the term", ids: []string{"n1"}, then: func(c *cluster) {
			c.set("n1", func(f *fakeNode) { f.hb.PrimaryState, f.hb.TookPrimaryTerm = netsyv1.PrimaryState_REPLICA, 0 })
		}},
		{name: "it answers as another node", ids: []string{"n1", "n2", "n3"}, then: func(c *cluster) {
			c.set("n3", func(f *fakeNode) {
				f.hb.NodeId, f.hb.PrimaryState, f.hb.TookPrimaryTerm = "n9", netsyv1.PrimaryState_REPLICA, 1
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newCluster(t, -1, tc.ids...)
				last := tc.ids[len(tc.ids)-1]
				c.set(last, func(f *fakeNode) { f.hb.LatestIndex = 20 })
				c.begin(-1)
				c.run(5*time.Second, primaryIs(last, 1))
				c.close()
				for _, id := range tc.ids {
					c.set(id, func(f *fakeNode) { f.hb.LatestIndex = 20 })
				}
				tc.then(c)
				c.peers.mu.Lock()
				c.peers.order = nil
				c.peers.mu.Unlock()
				var mute []string
				if last != "n1" {
					mute = append(mute, last) // the old Primary sends nothing
				}
				started := c.clk.Now()
				c.start(2, -1, "n1")
				synctest.Wait()
				c.settle(250*time.Millisecond, mute...)
				if !tc.skip {
					c.settle(c.e.cfg.leaseWait()-250*time.Millisecond-time.Nanosecond, mute...)
				}
				c.peers.mu.Lock()
				pushed := len(c.peers.order) > 0
				c.peers.mu.Unlock()
				switch {
				case tc.skip && !pushed:
					t.Fatalf("no Primary pushed %v after the new Elector started: it waited out the lease of a term its holder gave up (order %v)",
						c.clk.Since(started), c.peers.order)
				case !tc.skip && pushed:
					t.Fatalf("a Primary was pushed %v after the new Elector started, before its lease wait (%v) ran out (order %v)",
						c.clk.Since(started), c.e.cfg.leaseWait(), c.peers.order)
				}
				if !tc.skip {
					c.settle(time.Nanosecond, mute...)
					if !c.pushedPrimary("n1") && !c.pushedPrimary("n2") {
						t.Fatalf("no Primary pushed once the lease wait ran out (order %v)", c.peers.order)
					}
				}
			})
		})
	}
}

// A Primary whose process died is restarted within its lease wait: its
// first heartbeat says it is a Replica, and the next round starts then (the
// round asks it again and goes on), not at the instant the lease would
// have run out. Before, the round that found it unreachable set the next
// one a full lease wait after the last answer.
func TestRestartedPrimarysReplicaHeartbeatEndsTheLeaseWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, -1, "n1", "n2", "n3")
		c.set("n3", func(f *fakeNode) { f.hb.LatestIndex = 20 })
		c.begin(-1)
		c.run(5*time.Second, primaryIs("n3", 1))
		c.settle(100 * time.Millisecond)
		if _, err := c.e.Heartbeat(t.Context(), cloneHB(c.peers.node("n3").hb)); err != nil {
			t.Fatal(err)
		}
		due := c.clk.Now().Add(c.e.cfg.leaseWait())
		c.set("n3", func(f *fakeNode) { f.reach = refused })
		for _, id := range []string{"n1", "n2"} {
			c.set(id, func(f *fakeNode) { f.hb.LatestIndex, f.hb.PrimaryRefused = 20, true })
		}
		c.settle(500*time.Millisecond, "n3") // the probe, and a round that waits
		c.set("n3", func(f *fakeNode) {
			f.reach = up
			f.hb.PrimaryState, f.hb.TookPrimaryTerm, f.hb.StartTimeUnixNano = netsyv1.PrimaryState_REPLICA, 1, 99
		})
		if _, err := c.e.Heartbeat(t.Context(), cloneHB(c.peers.node("n3").hb)); err != nil && peer.ReasonOf(err) != peer.ReasonElectingSuccessor {
			t.Fatal(err)
		}
		synctest.Wait()
		if !c.clk.Now().Before(due) {
			t.Fatalf("the test took past the lease wait")
		}
		cs, err := c.e.ClusterState(t.Context(), false)
		if err != nil || cs.GetPrimaryTerm() != 2 {
			t.Fatalf("%v before the lease wait ran out, after the restarted Primary said it is a Replica: state %v, %v; want a successor at term 2",
				due.Sub(c.clk.Now()), cs, err)
		}
	})
}

// On taking over, the Elector asks every registered node for its state,
// but a node that listens without answering (still recovering, as every
// node is when a whole cluster restarts) holds the load, and so the first
// election, one heartbeat interval at most, as it would hold a round.
func TestTakeOverLoadWaitsOneHeartbeatIntervalForANodeThatDoesNotAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCluster(t, -1, "n1", "n2", "n3")
		c.peers.mu.Lock()
		c.peers.gates = map[string]chan struct{}{"n3": make(chan struct{})}
		c.peers.reached = make(chan string, 8)
		c.peers.mu.Unlock()
		c.start(1, -1, "n1")
		if id := <-c.peers.reached; id != "n3" {
			t.Fatalf("held a question to %s", id)
		}
		synctest.Wait()
		loaded := func() bool {
			_, err := c.e.ClusterState(t.Context(), false)
			return !errors.Is(err, ErrNotLoaded)
		}
		if loaded() {
			t.Fatal("loaded while a question was still open")
		}
		c.clk.Advance(500 * time.Millisecond)
		synctest.Wait()
		if !loaded() {
			t.Fatal("not loaded one heartbeat interval after taking over; a node that does not answer held it longer")
		}
	})
}
