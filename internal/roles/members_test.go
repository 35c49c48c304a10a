package roles

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// scriptedNode is another node whose NodeState the test sets.
type scriptedNode struct {
	mu    sync.Mutex
	state *netsyv1.Heartbeat
	asked chan struct{}
}

func (n *scriptedNode) set(ps netsyv1.PrimaryState, term uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.state = &netsyv1.Heartbeat{PrimaryState: ps, PrimaryTerm: term}
}

func (n *scriptedNode) NodeState(context.Context) (*netsyv1.NodeState, error) {
	n.mu.Lock()
	st := n.state
	n.mu.Unlock()
	select {
	case n.asked <- struct{}{}:
	default:
	}
	return &netsyv1.NodeState{State: st}, nil
}

func (n *scriptedNode) PushClusterState(context.Context, *netsyv1.ClusterState) (*netsyv1.PushClusterStateResponse, error) {
	return &netsyv1.PushClusterStateResponse{Accepted: true}, nil
}

func (n *scriptedNode) Drain(context.Context) error { return nil }

// membersNode is a test node (n1, member 7) whose fake Elector knows n2
// (member b2, the Primary at term 5), n3 (c3) and n4 (d4, Degraded).
func membersNode(t *testing.T) *testNode {
	n := newTestNode(t, nil)
	info := func(id string, member uint64) *netsyv1.NodeInfo {
		return &netsyv1.NodeInfo{NodeId: id, MemberId: member, PeerAddr: id + ":2380"}
	}
	st := func(i *netsyv1.NodeInfo, h netsyv1.HealthState) *netsyv1.NodeStatus {
		return &netsyv1.NodeStatus{Info: i, Health: h}
	}
	n1, n2, n3, n4 := info("n1", 7), info("n2", 0xb2), info("n3", 0xc3), info("n4", 0xd4)
	n.el.mu.Lock()
	cs := proto.Clone(n.el.cs).(*netsyv1.ClusterState)
	n.el.cs = cs
	cs.Primary, cs.PrimaryTerm = n2, 5
	cs.Members = []*netsyv1.NodeInfo{n1, n2, n3, n4}
	cs.Nodes = []*netsyv1.NodeStatus{st(n1, netsyv1.HealthState_HEALTHY), st(n2, netsyv1.HealthState_HEALTHY),
		st(n3, netsyv1.HealthState_HEALTHY), st(n4, netsyv1.HealthState_DEGRADED)}
	n.el.mu.Unlock()
	return n
}

// calledWith reports whether a call starting with prefix was made.
func calledWith(c *calls, prefix string) bool {
	for _, s := range c.all() {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// MoveLeader hands off to the node with that member id and returns only
// once that node answers it is the Active Primary at the new term.
func TestMoveLeaderHandsOffToTheMemberAndReturnsOnceItIsActive(t *testing.T) {
	n := membersNode(t)
	n3 := &scriptedNode{asked: make(chan struct{}, 1)}
	n3.set(netsyv1.PrimaryState_STARTING, 6)
	n.nodes.Store("n3", n3)
	n.el.mu.Lock()
	n.el.handoff = func(to string) (*netsyv1.ClusterState, error) {
		return &netsyv1.ClusterState{Primary: &netsyv1.NodeInfo{NodeId: to, MemberId: 0xc3, PeerAddr: to + ":2380"}, PrimaryTerm: 6}, nil
	}
	n.el.mu.Unlock()

	done := make(chan error, 1)
	go func() { done <- n.r.MoveLeader(t.Context(), 0xc3) }()
	asked := func() {
		select {
		case <-n3.asked:
		case err := <-done:
			t.Fatalf("MoveLeader returned (%v) while the new Primary was Starting", err)
		case <-time.After(10 * time.Second):
			t.Fatal("MoveLeader never asked the new Primary's state")
		}
	}
	asked() // it is Starting
	n.clk.Advance(activePoll)
	asked()
	n3.set(netsyv1.PrimaryState_ACTIVE, 6)
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if !calledWith(n.calls, "handoff n3") {
				t.Fatalf("no handoff to n3: %v", n.calls.all())
			}
			return
		case <-n3.asked:
		case <-time.After(time.Millisecond):
			n.clk.Advance(activePoll)
		}
	}
}

// An unknown member, a Degraded one, no Primary, or a handoff already
// running: a clear error, and nothing is asked of the Elector but its
// state (the refused handoff changed nothing either).
func TestMoveLeaderRefusalsChangeNothing(t *testing.T) {
	n := membersNode(t)
	ctx := t.Context()
	err := n.r.MoveLeader(ctx, 0x99)
	if status.Code(err) != codes.NotFound || !strings.Contains(err.Error(), "member id 99") {
		t.Errorf("unknown member: %v", err)
	}
	err = n.r.MoveLeader(ctx, 0xd4)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "n4") || !strings.Contains(err.Error(), "DEGRADED") {
		t.Errorf("degraded member: %v", err)
	}
	if calledWith(n.calls, "handoff") {
		t.Fatalf("a refused move-leader asked for a handoff: %v", n.calls.all())
	}
	// The Elector's own refusal (a plain error from an Elector in this
	// process) reaches the client as FailedPrecondition with its text.
	n.el.mu.Lock()
	n.el.handoff = func(string) (*netsyv1.ClusterState, error) {
		return nil, errors.New("a handoff is already in progress")
	}
	n.el.mu.Unlock()
	err = n.r.MoveLeader(ctx, 0xc3)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "a handoff is already in progress") {
		t.Errorf("handoff running: %v", err)
	}
	// Moving to the Primary it already is changes nothing either.
	n2 := &scriptedNode{asked: make(chan struct{}, 1)}
	n2.set(netsyv1.PrimaryState_ACTIVE, 5)
	n.nodes.Store("n2", n2)
	if err := n.r.MoveLeader(ctx, 0xb2); err != nil {
		t.Errorf("move to the Primary itself: %v", err)
	}
	if got := n.calls.all(); strings.Count(strings.Join(got, "\n"), "handoff") != 1 {
		t.Errorf("handoffs asked: %v", got)
	}
}

// RemoveMember deregisters a node the Elector no longer hears from,
// refuses a Healthy one (it would register again), and turns the
// Elector's NOT_DURABLE refusal into FailedPrecondition naming
// `netsyctl deregister --force`.
func TestRemoveMemberDeregistersStoppedNodesOnly(t *testing.T) {
	n := membersNode(t)
	ctx := t.Context()
	_, err := n.r.RemoveMember(ctx, 0xc3)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "register again") {
		t.Errorf("healthy member: %v", err)
	}
	if _, err := n.r.RemoveMember(ctx, 0x99); status.Code(err) != codes.NotFound {
		t.Errorf("unknown member: %v", err)
	}
	if calledWith(n.calls, "deregister") {
		t.Fatalf("a refused remove deregistered: %v", n.calls.all())
	}

	n.el.mu.Lock()
	n.el.deregister = func(id string) error {
		return &peer.CodedError{C: codes.FailedPrecondition, R: peer.ReasonNotDurable, Msg: "object storage may lack entries " + id + " acknowledged"}
	}
	n.el.mu.Unlock()
	_, err = n.r.RemoveMember(ctx, 0xd4)
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "may lack entries n4 acknowledged") ||
		!strings.Contains(err.Error(), "netsyctl deregister --force n4") {
		t.Errorf("not durable: %v", err)
	}

	n.el.mu.Lock()
	n.el.deregister = func(id string) error {
		n.el.mu.Lock()
		defer n.el.mu.Unlock()
		// A new state: readers of the old one keep theirs.
		cs := proto.Clone(n.el.cs).(*netsyv1.ClusterState)
		cs.Members = slices.DeleteFunc(cs.Members, func(m *netsyv1.NodeInfo) bool { return m.NodeId == id })
		n.el.cs = cs
		return nil
	}
	n.el.mu.Unlock()
	left, err := n.r.RemoveMember(ctx, 0xd4)
	if err != nil || len(left) != 3 {
		t.Fatalf("remove a stopped member: %v, left %v", err, left)
	}
	for _, m := range left {
		if m.NodeId == "n4" {
			t.Fatalf("n4 still listed: %v", left)
		}
	}
}
