package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"go.uber.org/goleak"

	"github.com/netsy-io/netsy/internal/clusterview"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// fakePeer answers the Elector and Node services the way a node would,
// with canned answers, and records what it was asked.
type fakePeer struct {
	netsyv1.UnimplementedElectorServer
	netsyv1.UnimplementedNodeServer

	addr string

	mu sync.Mutex
	// self answers GetNodeState.
	self *netsyv1.NodeState
	// state answers GetClusterState; nil: "not the Elector".
	state *netsyv1.ClusterState
	// handoffTo is the Primary a Handoff moves the role to.
	handoffTo *netsyv1.NodeInfo
	// deregErr, when set, is what DeregisterNode answers; else deregResp
	// (or an empty answer).
	deregErr  error
	deregResp *netsyv1.DeregisterNodeResponse

	// onHandoff, when set, runs on every Handoff with the answer's state
	// (the new Primary's own state follows it there).
	onHandoff func(cs *netsyv1.ClusterState)
	// betweenFor, when set, is how many more Handoffs are refused as by a
	// node between two Electors (NOT_ELECTOR, naming itself).
	betweenFor int
	// startingFor, when set, is how many more GetNodeState answers say
	// Starting before the node says Active at the term it was given.
	startingFor int

	nodeStateCalls int
	stateReqs      []*netsyv1.GetClusterStateRequest
	deregReqs      []*netsyv1.DeregisterNodeRequest
	handoffReqs    []*netsyv1.HandoffRequest
}

func startPeer(t *testing.T, id string, member uint64) *fakePeer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakePeer{addr: l.Addr().String()}
	f.self = &netsyv1.NodeState{
		Info: &netsyv1.NodeInfo{NodeId: id, MemberId: member, PeerAddr: f.addr, ClientUrls: []string{"http://" + id + ":2379"}},
		State: &netsyv1.Heartbeat{NodeId: id, Health: netsyv1.HealthState_HEALTHY, PrimaryState: netsyv1.PrimaryState_REPLICA,
			LatestRevision: 50, CommittedRevision: 50},
	}
	s := grpc.NewServer()
	netsyv1.RegisterElectorServer(s, f)
	netsyv1.RegisterNodeServer(s, f)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return f
}

func (f *fakePeer) info() *netsyv1.NodeInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.self.GetInfo()
}

// tell sets the roles the node believes in.
func (f *fakePeer) tell(cs *netsyv1.ClusterState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.self.ClusterState = cs
}

func (f *fakePeer) GetNodeState(context.Context, *netsyv1.GetNodeStateRequest) (*netsyv1.NodeState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodeStateCalls++
	if f.startingFor > 0 {
		f.startingFor--
		st := proto.Clone(f.self).(*netsyv1.NodeState)
		st.State.PrimaryState = netsyv1.PrimaryState_STARTING
		return st, nil
	}
	return f.self, nil
}

// becomePrimary makes the node answer that it is the Active Primary at
// term.
func (f *fakePeer) becomePrimary(term uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := proto.Clone(f.self).(*netsyv1.NodeState)
	st.State.PrimaryState, st.State.PrimaryTerm = netsyv1.PrimaryState_ACTIVE, term
	f.self = st
}

func (f *fakePeer) notElector() error {
	return status.Errorf(codes.FailedPrecondition, "not the Elector; the Elector is %s", f.self.GetClusterState().GetElector().GetNodeId())
}

func (f *fakePeer) GetClusterState(_ context.Context, req *netsyv1.GetClusterStateRequest) (*netsyv1.ClusterState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stateReqs = append(f.stateReqs, req)
	if f.state == nil {
		return nil, f.notElector()
	}
	return f.state, nil
}

func (f *fakePeer) DeregisterNode(_ context.Context, req *netsyv1.DeregisterNodeRequest) (*netsyv1.DeregisterNodeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.deregReqs = append(f.deregReqs, req)
	if f.state == nil {
		return nil, f.notElector()
	}
	if f.deregErr != nil {
		return nil, f.deregErr
	}
	if f.deregResp != nil {
		return f.deregResp, nil
	}
	return &netsyv1.DeregisterNodeResponse{}, nil
}

func (f *fakePeer) Handoff(_ context.Context, req *netsyv1.HandoffRequest) (*netsyv1.HandoffResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handoffReqs = append(f.handoffReqs, req)
	if f.state == nil {
		return nil, f.notElector()
	}
	if f.betweenFor > 0 {
		f.betweenFor--
		return nil, peer.Error(codes.FailedPrecondition, peer.ReasonNotElector, "netsy: this node is not the Elector; the Elector is at "+f.addr)
	}
	cs := &netsyv1.ClusterState{ClusterId: f.state.ClusterId, Elector: f.state.Elector, ElectorTerm: f.state.ElectorTerm,
		Primary: f.handoffTo, PrimaryTerm: f.state.PrimaryTerm + 1}
	if f.onHandoff != nil {
		f.onHandoff(cs)
	}
	return &netsyv1.HandoffResponse{ClusterState: cs}, nil
}

// cluster is three fake nodes: n1 the Elector, n2 the Primary, n3 a
// replica that lags; every node knows these roles.
type cluster struct {
	n1, n2, n3 *fakePeer
	roles      *netsyv1.ClusterState
}

func startCluster(t *testing.T) *cluster {
	c := &cluster{n1: startPeer(t, "n1", 0xa1), n2: startPeer(t, "n2", 0xb2), n3: startPeer(t, "n3", 0xc3)}
	c.roles = &netsyv1.ClusterState{ClusterId: "c-1", Elector: c.n1.info(), ElectorTerm: 4, Primary: c.n2.info(), PrimaryTerm: 9, RegisteredNodes: 3,
		Members: []*netsyv1.NodeInfo{c.n1.info(), c.n2.info(), c.n3.info()}}
	for _, n := range []*fakePeer{c.n1, c.n2, c.n3} {
		n.tell(c.roles)
	}
	status := func(n *fakePeer, h netsyv1.HealthState, st netsyv1.PrimaryState, rev int64) *netsyv1.NodeStatus {
		return &netsyv1.NodeStatus{Info: n.info(), Health: h, LastHeartbeatAgeMs: 200,
			Last: &netsyv1.Heartbeat{NodeId: n.info().NodeId, Health: h, PrimaryState: st, LatestRevision: rev, CommittedRevision: rev, PrimaryTerm: 9}}
	}
	c.n1.state = &netsyv1.ClusterState{ClusterId: "c-1", Elector: c.n1.info(), ElectorTerm: 4, Primary: c.n2.info(), PrimaryTerm: 9, RegisteredNodes: 3,
		Nodes: []*netsyv1.NodeStatus{
			status(c.n1, netsyv1.HealthState_HEALTHY, netsyv1.PrimaryState_REPLICA, 100),
			status(c.n2, netsyv1.HealthState_HEALTHY, netsyv1.PrimaryState_ACTIVE, 100),
			status(c.n3, netsyv1.HealthState_DEGRADED, netsyv1.PrimaryState_REPLICA, 93),
		},
		Events: []*netsyv1.Event{{TimeUnixNano: 1_700_000_000_000_000_000, Kind: "primary_elected", NodeId: "n2", ElectorTerm: 4, PrimaryTerm: 9, Reporter: "n1"}},
	}
	// The node a handoff names becomes the Active Primary at the new
	// term (called with n1's lock held: n1 itself is never named).
	c.n1.onHandoff = func(cs *netsyv1.ClusterState) {
		for _, n := range []*fakePeer{c.n2, c.n3} {
			if n.addr == cs.GetPrimary().GetPeerAddr() {
				n.becomePrimary(cs.PrimaryTerm)
			}
		}
	}
	return c
}

func decode[T any](t *testing.T, out string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("output is not the JSON expected: %v\n%s", err, out)
	}
	return v
}

func TestClusterStateFromElector(t *testing.T) {
	c := startCluster(t)
	out, errOut, code := run(t, "cluster-state", "--peer-endpoints", c.n3.addr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"Elector:           n1 (member a1, " + c.n1.addr + ")", "Primary term:      9", "Via node:          n3",
		"n3    c3         -        Degraded  Replica  93", "n2    b2         Primary"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "EVENTS") || strings.Contains(out, "Note:") {
		t.Errorf("events or a note without being asked:\n%s", out)
	}
	if len(c.n1.stateReqs) != 1 || !c.n1.stateReqs[0].Full {
		t.Errorf("Elector asked %v, want one GetClusterState{full: true}", c.n1.stateReqs)
	}

	out, errOut, code = run(t, "cluster-state", "--peer-endpoints", c.n3.addr, "-o", "json")
	v := decode[clusterview.View](t, out)
	if code != 0 || v.ClusterID != "c-1" || v.Note != "" || v.Events != nil || v.Elector.NodeID != "n1" || v.Primary.NodeID != "n2" || v.PrimaryTerm != 9 || len(v.Nodes) != 3 {
		t.Fatalf("-o json: exit %d %s: %+v", code, errOut, v)
	}
	if n3 := v.Nodes[2]; n3.NodeID != "n3" || n3.Health != "Degraded" || n3.Lag == nil || *n3.Lag != 7 || n3.LastHeartbeat != "200ms" {
		t.Errorf("n3 row: %+v", n3)
	}

	out, _, code = run(t, "cluster-state", "--peer-endpoints", c.n3.addr, "--events")
	if code != 0 || !strings.Contains(out, "EVENTS") || !strings.Contains(out, "2023-11-14T22:13:20.000Z  primary_elected  n2") {
		t.Errorf("--events: exit %d\n%s", code, out)
	}
	out, _, _ = run(t, "cluster-state", "--peer-endpoints", c.n3.addr, "--events", "-o", "json")
	if v := decode[clusterview.View](t, out); len(v.Events) != 1 || v.Events[0].Kind != "primary_elected" {
		t.Errorf("--events -o json: %+v", v.Events)
	}
}

func TestClusterStateElectorUnreachable(t *testing.T) {
	c := startCluster(t)
	gone := freeAddr(t)
	roles := &netsyv1.ClusterState{ClusterId: "c-1", Elector: &netsyv1.NodeInfo{NodeId: "n0", MemberId: 0xf0, PeerAddr: gone}, ElectorTerm: 5,
		Primary: c.n2.info(), PrimaryTerm: 9, RegisteredNodes: 3, Members: c.roles.Members}
	c.n3.tell(roles)

	out, errOut, code := run(t, "cluster-state", "--peer-endpoints", c.n3.addr)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"Note:", "the Elector did not answer", gone, "showing n3's view", "Elector:           n0", "(self-reported)"} {
		if !strings.Contains(out, want) {
			t.Errorf("fallback table lacks %q:\n%s", want, out)
		}
	}

	out, _, code = run(t, "cluster-state", "--peer-endpoints", c.n3.addr, "-o", "json")
	v := decode[clusterview.View](t, out)
	if code != 0 || !strings.HasPrefix(v.Note, "the Elector did not answer: showing n3's view (Elector n0: "+gone+" is unreachable") || v.ElectorTerm != 5 || v.ViaNode != "n3" || len(v.Nodes) != 3 {
		t.Fatalf("fallback -o json: %+v", v)
	}
	for _, n := range v.Nodes {
		if want := map[string]string{"n1": "member", "n2": "member", "n3": "self"}[n.NodeID]; n.Source != want {
			t.Errorf("%s: source %q, want %q", n.NodeID, n.Source, want)
		}
	}

	// A node that knows no Elector at all.
	c.n3.tell(&netsyv1.ClusterState{ClusterId: "c-1"})
	out, _, code = run(t, "cluster-state", "--peer-endpoints", c.n3.addr, "-o", "json")
	if v := decode[clusterview.View](t, out); code != 0 || v.Note != "n3 knows no Elector: showing n3's view" {
		t.Errorf("no Elector: exit %d, note %q", code, v.Note)
	}
}

func TestClusterStateFollowsTheNewElector(t *testing.T) {
	c := startCluster(t)
	// n1 lost the role to n2; n3 missed the push and still names n1.
	c.n2.state = &netsyv1.ClusterState{ClusterId: "c-1", Elector: c.n2.info(), ElectorTerm: 5, Primary: c.n2.info(), PrimaryTerm: 9, RegisteredNodes: 3}
	c.n1.state = nil
	moved := &netsyv1.ClusterState{ClusterId: "c-1", Elector: c.n2.info(), ElectorTerm: 5, Primary: c.n2.info(), PrimaryTerm: 9}
	c.n1.tell(moved)

	out, errOut, code := run(t, "cluster-state", "--peer-endpoints", c.n3.addr, "-o", "json")
	v := decode[clusterview.View](t, out)
	if code != 0 || v.Note != "" || v.Elector.NodeID != "n2" || v.ElectorTerm != 5 {
		t.Fatalf("exit %d %s: %+v", code, errOut, v)
	}
	if len(c.n1.stateReqs) != 1 || len(c.n2.stateReqs) != 1 {
		t.Errorf("asked n1 %d times, n2 %d times; want once each", len(c.n1.stateReqs), len(c.n2.stateReqs))
	}
}

func TestPeerEndpointsTriedInOrder(t *testing.T) {
	c := startCluster(t)
	out, errOut, code := run(t, "cluster-state", "--peer-endpoints", freeAddr(t)+", http://"+c.n2.addr, "-o", "json")
	if v := decode[clusterview.View](t, out); code != 0 || v.ViaNode != "n2" {
		t.Fatalf("exit %d %s: via %q", code, errOut, v.ViaNode)
	}

	dead1, dead2 := freeAddr(t), freeAddr(t)
	_, errOut, code = run(t, "cluster-state", "--peer-endpoints", dead1+","+dead2, "--timeout", "5s")
	if code == 0 || !strings.Contains(errOut, "no node answered on the peer addresses from --peer-endpoints") ||
		!strings.Contains(errOut, dead1+" is unreachable") || !strings.Contains(errOut, dead2+" is unreachable") ||
		!strings.Contains(errOut, "check the node runs") {
		t.Errorf("nothing answering: exit %d: %s", code, errOut)
	}
}

func TestDeregister(t *testing.T) {
	c := startCluster(t)
	out, errOut, code := run(t, "deregister", "--peer-endpoints", c.n2.addr, "n3")
	if code != 0 || out != "deregistered n3 (Elector n1 at "+c.n1.addr+")\n" {
		t.Fatalf("exit %d: %q %s", code, out, errOut)
	}
	if len(c.n1.deregReqs) != 1 || c.n1.deregReqs[0].NodeId != "n3" {
		t.Fatalf("Elector got %v", c.n1.deregReqs)
	}

	out, _, code = run(t, "deregister", "n2", "--peer-endpoints", c.n2.addr, "-o", "json")
	d := decode[deregistered](t, out)
	if code != 0 || d.NodeID != "n2" || d.Elector.NodeID != "n1" || d.Elector.MemberID != "a1" || c.n1.deregReqs[1].NodeId != "n2" {
		t.Fatalf("-o json: exit %d %+v", code, d)
	}

	// What the Elector refuses is printed as it said it.
	c.n1.deregErr = status.Error(codes.InvalidArgument, "no node n9 is registered")
	_, errOut, code = run(t, "deregister", "--peer-endpoints", c.n2.addr, "n9")
	if code == 0 || !strings.Contains(errOut, "deregister n9: Elector n1: "+c.n1.addr+" answered InvalidArgument: no node n9 is registered") {
		t.Errorf("refused: exit %d: %s", code, errOut)
	}

	for _, args := range [][]string{{"deregister"}, {"deregister", "a", "b"}} {
		if _, errOut, code := run(t, args...); code == 0 || !strings.Contains(errOut, "usage: netsyctl deregister") {
			t.Errorf("%v: exit %d: %s", args, code, errOut)
		}
	}
}

// A node between two Electors refuses with NOT_ELECTOR and names itself
// (its lock just lost, or its next Elector not loaded yet): handoff asks
// again rather than failing (seen in an e2e run on a loaded machine).
func TestHandoffWaitsOutAChangeOfElector(t *testing.T) {
	c := startCluster(t)
	c.n1.handoffTo = c.n3.info()
	c.n1.betweenFor = 2
	out, errOut, code := run(t, "handoff", "--peer-endpoints", c.n2.addr, "--to", "n3")
	if code != 0 || !strings.HasPrefix(out, "Primary is now n3") || len(c.n1.handoffReqs) != 3 {
		t.Fatalf("exit %d: %q %s; the Elector was asked %d times, want 3", code, out, errOut, len(c.n1.handoffReqs))
	}
}

func TestHandoff(t *testing.T) {
	c := startCluster(t)
	// Every connection a command opens is closed when it returns (the
	// servers' own goroutines were started above).
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c.n1.handoffTo = c.n3.info()
	out, errOut, code := run(t, "handoff", "--peer-endpoints", c.n2.addr, "--to", "n3")
	want := "Primary is now n3 (member c3, " + c.n3.addr + "), primary term 10 (was n2, term 9); took "
	if code != 0 || !strings.HasPrefix(out, want) || strings.Contains(out, "note:") {
		t.Fatalf("exit %d: %q, want prefix %q; %s", code, out, want, errOut)
	}
	if len(c.n1.handoffReqs) != 1 || c.n1.handoffReqs[0].To != "n3" {
		t.Fatalf("Elector got %v", c.n1.handoffReqs)
	}

	out, _, code = run(t, "handoff", "--peer-endpoints", c.n2.addr, "-o", "json")
	h := decode[handedOff](t, out)
	if code != 0 || h.Primary.NodeID != "n3" || h.PrimaryTerm != 10 || h.PreviousPrimary.NodeID != "n2" || h.PreviousPrimaryTerm != 9 ||
		h.Requested != "" || h.Elector.NodeID != "n1" || h.TookMS < 0 {
		t.Fatalf("-o json: exit %d %+v", code, h)
	}
	if c.n1.handoffReqs[1].To != "" {
		t.Errorf("handoff without --to sent to=%q", c.n1.handoffReqs[1].To)
	}

	// The Elector chose another node than the one asked for: say so.
	out, _, code = run(t, "handoff", "--peer-endpoints", c.n2.addr, "--to", "n1")
	if code != 0 || !strings.Contains(out, "note: asked for n1; the Elector chose n3") {
		t.Errorf("other choice: exit %d: %s", code, out)
	}

	// An answer with no Primary is a failure.
	c.n1.handoffTo = nil
	_, errOut, code = run(t, "handoff", "--peer-endpoints", c.n2.addr)
	if code == 0 || !strings.Contains(errOut, "answered after") || !strings.Contains(errOut, "with no Primary elected") {
		t.Errorf("no Primary: exit %d: %s", code, errOut)
	}
}

// handoff returns only once the new Primary answers it is Active at the
// new term: a Primary that is still Starting is asked again.
func TestHandoffReturnsOnceTheNewPrimaryIsActive(t *testing.T) {
	c := startCluster(t)
	c.n1.handoffTo = c.n3.info()
	c.n3.startingFor = 3
	out, errOut, code := run(t, "handoff", "--peer-endpoints", c.n2.addr, "--to", "n3")
	if code != 0 || !strings.HasPrefix(out, "Primary is now n3") {
		t.Fatalf("exit %d: %q %s", code, out, errOut)
	}
	c.n3.mu.Lock()
	defer c.n3.mu.Unlock()
	if c.n3.startingFor != 0 || c.n3.nodeStateCalls != 4 {
		t.Fatalf("returned after asking n3 %d times (%d Starting answers left); want 4 (3 Starting, then Active)", c.n3.nodeStateCalls, c.n3.startingFor)
	}
}

// fakeEtcd answers etcd's MemberList as a Netsy node's client port would.
type fakeEtcd struct {
	pb.UnimplementedClusterServer
	resp *pb.MemberListResponse
}

func (f *fakeEtcd) MemberList(context.Context, *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	return f.resp, nil
}

func startEtcd(t *testing.T, resp *pb.MemberListResponse) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	pb.RegisterClusterServer(s, &fakeEtcd{resp: resp})
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

func TestPeersFromMemberList(t *testing.T) {
	c := startCluster(t)
	member := func(n *fakePeer) *pb.Member {
		i := n.info()
		return &pb.Member{ID: i.MemberId, Name: i.NodeId, PeerURLs: []string{"http://" + n.addr}, ClientURLs: i.ClientUrls}
	}
	// n2's client port answers: n2 is asked first, though listed last.
	endpoint := startEtcd(t, &pb.MemberListResponse{Header: &pb.ResponseHeader{ClusterId: 1, MemberId: 0xb2},
		Members: []*pb.Member{member(c.n1), member(c.n3), member(c.n2)}})
	// A member list whose peer URLs are not there.
	empty := startEtcd(t, &pb.MemberListResponse{Header: &pb.ResponseHeader{MemberId: 1}, Members: []*pb.Member{{ID: 1, Name: "x"}}})
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	out, errOut, code := run(t, "cluster-state", "--endpoints", endpoint, "-o", "json")
	if v := decode[clusterview.View](t, out); code != 0 || v.ViaNode != "n2" || v.Elector.NodeID != "n1" {
		t.Fatalf("exit %d %s: %+v", code, errOut, v)
	}
	if c.n2.nodeStateCalls != 1 || c.n3.nodeStateCalls != 0 {
		t.Errorf("GetNodeState calls: n2 %d, n3 %d; want the answering member only", c.n2.nodeStateCalls, c.n3.nodeStateCalls)
	}

	// members gains the Elector's columns.
	out, errOut, code = run(t, "members", "--endpoints", endpoint)
	if code != 0 || !strings.Contains(out, "ROLE") || !strings.Contains(out, "c3  n3    -        Degraded  Replica  93") ||
		!strings.Contains(out, "a1  n1    Elector") || !strings.Contains(out, "b2  n2    Primary") {
		t.Errorf("members: exit %d %s\n%s", code, errOut, out)
	}
	out, _, _ = run(t, "members", "--endpoints", endpoint, "-o", "json")
	rows := decode[[]memberRow](t, out)
	if len(rows) != 3 || rows[1].Name != "n3" || rows[1].Health != "Degraded" || rows[1].LatestRevision == nil || *rows[1].LatestRevision != 93 ||
		!rows[0].Elector || !rows[2].Primary || rows[2].PeerURLs[0] != "http://"+c.n2.addr {
		t.Errorf("members -o json: %s", out)
	}

	// Without an Elector, members is the plain member list.
	c.n1.state = nil
	c.n1.tell(&netsyv1.ClusterState{})
	out, errOut, code = run(t, "members", "--endpoints", endpoint)
	if code != 0 || strings.Contains(out, "ROLE") || !strings.HasPrefix(out, "ID  NAME  PEER URLS") {
		t.Errorf("members without an Elector: exit %d %s\n%s", code, errOut, out)
	}
	out, _, _ = run(t, "members", "--endpoints", endpoint, "-o", "json")
	if strings.Contains(out, "health") {
		t.Errorf("members -o json without an Elector: %s", out)
	}

	_, errOut, code = run(t, "handoff", "--endpoints", empty)
	if code == 0 || !strings.Contains(errOut, "names no peer URLs: give peer addresses with --peer-endpoints") {
		t.Errorf("no peer URLs: exit %d: %s", code, errOut)
	}
	dead := freeAddr(t)
	_, errOut, code = run(t, "deregister", "--endpoints", dead, "--timeout", "1s", "n1")
	if code == 0 || !strings.Contains(errOut, "member list from "+dead) || !strings.Contains(errOut, "--peer-endpoints") {
		t.Errorf("client port down: exit %d: %s", code, errOut)
	}
}

// TestPeerCommandsOnAClientPort runs against a real single node, whose
// member list names its client address as its peer URL and whose client
// port does not speak the peer protocol.
func TestClusterCommandsOnARealNode(t *testing.T) {
	n := startNode(t)
	out, errOut, code := run(t, "cluster-state", "--endpoints", n.ClientAddr())
	if code != 0 || !strings.Contains(out, "n1") || !strings.Contains(out, "Active") {
		t.Errorf("cluster-state: exit %d: %s\n%s", code, errOut, out)
	}
	out, errOut, code = run(t, "members", "--endpoints", n.ClientAddr())
	if code != 0 || !strings.Contains(out, "ROLE") || !strings.Contains(out, "n1") {
		t.Errorf("members: exit %d %s\n%s", code, errOut, out)
	}
	_, errOut, code = run(t, "cluster-state", "--peer-endpoints", n.ClientAddr())
	if code == 0 || !strings.Contains(errOut, "does not serve Netsy's peer protocol") {
		t.Errorf("cluster-state on a client address: exit %d: %s", code, errOut)
	}
}

// TestPeerLogsStayOut: gRPC's connection log lines never reach the
// process's stderr; netsyctl prints its own error only.
func TestPeerLogsStayOut(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	captured := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		captured <- string(b)
	}()
	_, errOut, code := run(t, "cluster-state", "--peer-endpoints", freeAddr(t), "--timeout", "1s")
	os.Stderr = stderr
	w.Close()
	logged := <-captured
	r.Close()
	if code == 0 || logged != "" || !strings.HasPrefix(errOut, "netsyctl cluster-state: no node answered") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("exit %d\nprocess stderr: %q\nerror: %q", code, logged, errOut)
	}
}

func TestUsageNamesClusterCommands(t *testing.T) {
	_, errOut, code := run(t, "help")
	if code != 0 {
		t.Fatalf("help: exit %d", code)
	}
	for _, want := range []string{"cluster-state", "deregister NODE", "handoff", "--to NODE", "--peer-endpoints", "member list"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("usage lacks %q", want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cluster-state", "extra"}, "usage: netsyctl cluster-state"},
		{[]string{"handoff", "extra"}, "usage: netsyctl handoff"},
		{[]string{"cluster-state", "-o", "yaml"}, `-o: "yaml" is not table or json`},
		{[]string{"handoff", "--peer-endpoints", " , "}, "--peer-endpoints: no address given"},
	} {
		if _, errOut, code := run(t, tc.args...); code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d: %q, want %q", tc.args, code, errOut, tc.want)
		}
	}
}

// --if-primary hands off only when the node asked is itself the Primary:
// the preStop hook of every pod runs it against its own node, with the
// flags from the environment.
func TestHandoffIfPrimary(t *testing.T) {
	c := startCluster(t)
	c.n1.handoffTo = c.n3.info()
	c.n2.self.State.PrimaryState = netsyv1.PrimaryState_ACTIVE
	t.Setenv("NETSYCTL_IF_PRIMARY", "true")
	t.Setenv("NETSYCTL_PEER_ENDPOINTS", c.n3.addr)
	out, errOut, code := run(t, "handoff")
	if code != 0 || out != "n3 is not the Primary (REPLICA): nothing to hand off\n" || len(c.n1.handoffReqs) != 0 {
		t.Fatalf("not the Primary: exit %d: %q %s; Elector got %v", code, out, errOut, c.n1.handoffReqs)
	}
	out, errOut, code = run(t, "handoff", "--peer-endpoints", c.n2.addr)
	if code != 0 || !strings.HasPrefix(out, "Primary is now n3") || len(c.n1.handoffReqs) != 1 {
		t.Fatalf("the Primary: exit %d: %q %s; Elector got %v", code, out, errOut, c.n1.handoffReqs)
	}
}

// A flag on the command line wins over NETSYCTL_<FLAG>; a bad value from
// the environment names the variable.
func TestFlagsFromEnvironment(t *testing.T) {
	c := startCluster(t)
	t.Setenv("NETSYCTL_PEER_ENDPOINTS", "127.0.0.1:1")
	t.Setenv("NETSYCTL_O", "json")
	out, errOut, code := run(t, "cluster-state", "--peer-endpoints", c.n1.addr)
	if code != 0 || !strings.HasPrefix(out, "{") {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	t.Setenv("NETSYCTL_TIMEOUT", "soon")
	_, errOut, code = run(t, "cluster-state")
	if code == 0 || !strings.Contains(errOut, `--timeout (from NETSYCTL_TIMEOUT="soon")`) {
		t.Fatalf("bad environment value: exit %d: %s", code, errOut)
	}
}
