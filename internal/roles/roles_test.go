package roles

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/elector"
	"github.com/netsy-io/netsy/internal/heartbeat"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/mem"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/internal/s3lect"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A leaving node turns Degraded before it deregisters, and stays so: the
// Elector hears one Degraded heartbeat before the deregistration, the
// registration file goes after it, no heartbeat says Healthy from then on,
// and the state every heartbeat and receipt embeds (state) says Degraded
// even when a heartbeat gets through again. (Reproduced failure 6: the
// leaving node kept sending Healthy receipts after it was deregistered.)
func TestLeavingNodeIsDegradedBeforeItDeregistersAndStaysSo(t *testing.T) {
	n := newTestNode(t, nil)
	n.calls.next(t, "register n1")
	if got := n.calls.next(t, "heartbeat"); got != "heartbeat HEALTHY" {
		t.Fatalf("first heartbeat after registering: %q, want HEALTHY", got)
	}
	n.r.Leave(t.Context())

	log := n.calls.all()
	degraded := slices.Index(log, "heartbeat DEGRADED")
	dereg := slices.Index(log, "deregister n1")
	del := slices.Index(log, "delete "+discovery.NodeKey("n1"))
	if degraded < 0 || dereg < 0 || del < 0 || !(degraded < dereg && dereg < del) {
		t.Fatalf("calls %v: want a Degraded heartbeat, then deregister, then the file deleted", log)
	}
	for _, c := range log[degraded:] {
		if c == "heartbeat HEALTHY" {
			t.Fatalf("calls %v: a Healthy heartbeat after leaving started", log)
		}
	}
	if _, _, err := n.store.Get(t.Context(), discovery.NodeKey("n1")); err == nil {
		t.Fatal("the registration file is still there")
	}
	if h := n.r.state().Health; h != netsyv1.HealthState_DEGRADED {
		t.Fatalf("state after leaving: %v, want DEGRADED", h)
	}
	// A heartbeat that gets through again does not make it Healthy.
	n.r.do(func(c *core, _ **elector.Elector) effects { return c.health(true, nil) })
	if h := n.r.state().Health; h != netsyv1.HealthState_DEGRADED || n.r.Healthy() {
		t.Fatalf("state after a successful heartbeat while leaving: %v (Healthy %v), want DEGRADED", h, n.r.Healthy())
	}
}

// An Elector that has not loaded its map is no Elector yet: the node
// retries registering at every beat, does not degrade itself for it, and
// takes nothing it says into its view; once it has loaded, the node
// registers and is Healthy. Its refusal is told apart by reason, in its
// local form and as it arrives over gRPC.
func TestNotLoadedElectorIsRetriedWithoutDegrading(t *testing.T) {
	for name, refusal := range map[string]error{
		"local":  elector.ErrNotLoaded,
		"remote": peer.Error(codes.Unavailable, peer.ReasonNotLoaded, "still loading"),
	} {
		t.Run(name, func(t *testing.T) {
			n := newTestNode(t, refusal)
			n.calls.next(t, "register n1")
			for range 4 {
				n.beat()
				// A later attempt comes after the last beat was judged.
				n.calls.next(t, "register n1")
				n.settle()
				if !n.r.Healthy() {
					t.Fatal("the node degraded itself for an Elector that has not loaded")
				}
			}
			for _, ev := range n.r.NodeState().Events {
				if ev.Kind == "self_degraded" {
					t.Fatalf("event %v", ev)
				}
			}
			if cs := n.r.view.Current(); cs != nil {
				t.Fatalf("the view took %v from an Elector that has not loaded", cs)
			}
			if h := n.r.state().Health; h != netsyv1.HealthState_LOADING {
				t.Fatalf("health %v while not registered, want LOADING", h)
			}
			n.el.setRefuse(nil)
			n.beat()
			// No heartbeat went out while registering failed.
			if got := n.calls.next(t, "heartbeat"); got != "heartbeat HEALTHY" {
				t.Fatalf("heartbeat after registering: %q", got)
			}
			if n.r.MemberID() != 7 || n.r.view.Current() == nil {
				t.Fatalf("member id %d, view %v after the Elector loaded", n.r.MemberID(), n.r.view.Current())
			}
		})
	}
}

// recLeaver records leave's steps.
type recLeaver struct {
	active, hasOthers, handoffFails bool
	steps                           []string
	// deregErrs are the deregistration's answers, in turn (nil once they
	// run out); pauses is how many retry pauses end before the leave's
	// time does (unlimited when negative).
	deregErrs []error
	pauses    int
}

func (l *recLeaver) failed() error       { return nil }
func (l *recLeaver) primaryActive() bool { return l.active }
func (l *recLeaver) others() bool        { return l.hasOthers }
func (l *recLeaver) handoff(context.Context) error {
	l.steps = append(l.steps, "handoff")
	if l.handoffFails {
		return errors.New("no candidate")
	}
	return nil
}
func (l *recLeaver) drain(context.Context) error { l.steps = append(l.steps, "drain"); return nil }
func (l *recLeaver) degrade(context.Context)     { l.steps = append(l.steps, "degraded") }
func (l *recLeaver) stopHeartbeats()             { l.steps = append(l.steps, "stop heartbeats") }
func (l *recLeaver) deregister(context.Context) error {
	l.steps = append(l.steps, "deregister")
	if len(l.deregErrs) == 0 {
		return nil
	}
	err := l.deregErrs[0]
	l.deregErrs = l.deregErrs[1:]
	return err
}
func (l *recLeaver) pause(context.Context) error {
	l.steps = append(l.steps, "pause")
	if l.pauses == 0 {
		return context.DeadlineExceeded
	}
	l.pauses--
	return nil
}
func (l *recLeaver) deleteRegistration(context.Context) error {
	l.steps = append(l.steps, "delete")
	return nil
}
func (l *recLeaver) resign(context.Context) error { l.steps = append(l.steps, "resign"); return nil }

// Leaving follows the seed's order: a Primary hands off (or, alone or
// when the handoff fails, drains), then the node turns Degraded, then it
// deregisters, then deletes its registration file.
func TestLeaveOrder(t *testing.T) {
	for _, tc := range []struct {
		name                         string
		active, others, handoffFails bool
		want                         string
	}{
		{"replica", false, true, false, "degraded,stop heartbeats,deregister,delete,resign"},
		{"lone primary", true, false, false, "drain,degraded,stop heartbeats,deregister,delete,resign"},
		{"primary", true, true, false, "handoff,degraded,stop heartbeats,deregister,delete,resign"},
		{"primary, handoff fails", true, true, true, "handoff,drain,degraded,stop heartbeats,deregister,delete,resign"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &recLeaver{active: tc.active, hasOthers: tc.others, handoffFails: tc.handoffFails, pauses: -1}
			leave(t.Context(), hclog.NewNullLogger(), l)
			if got := strings.Join(l.steps, ","); got != tc.want {
				t.Fatalf("steps %s, want %s", got, tc.want)
			}
		})
	}
}

// An Elector refuses a leaving node's deregistration with NOT_DURABLE
// while object storage lacks entries the node may hold: the node retries
// (a heartbeat interval apart) until it is let go, and only then is its
// registration file deleted. If the leave's time ends first, the file
// stays (deleting it would let the next Elector drop the node from the
// count, with no check, while it may hold acknowledged entries the bucket
// lacks), and so it does after any other failure: only an Elector that
// let the node go, or does not know it, takes it out of the count. The
// Elector lock is resigned whatever happened.
func TestLeaveDeregistersOnlyOnceDurableAndKeepsTheFileOtherwise(t *testing.T) {
	local := &peer.CodedError{C: codes.FailedPrecondition, R: peer.ReasonNotDurable, Msg: "behind the bucket"}
	remote := peer.Error(codes.FailedPrecondition, peer.ReasonNotDurable, "behind the bucket")
	unknown := peer.Error(codes.NotFound, peer.ReasonUnknownNode, "not registered")
	gone := peer.Error(codes.Unavailable, peer.ReasonNotElector, "resigned")
	for _, tc := range []struct {
		name   string
		errs   []error
		pauses int
		want   string
	}{
		{"caught up on the third try", []error{local, remote}, -1,
			"deregister,pause,deregister,pause,deregister,delete,resign"},
		{"never caught up", []error{local, remote, local, remote, local}, 2,
			"deregister,pause,deregister,pause,deregister,pause,resign"},
		{"the Elector does not know it", []error{unknown}, -1, "deregister,delete,resign"},
		{"no Elector answers", []error{gone}, -1, "deregister,resign"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &recLeaver{deregErrs: tc.errs, pauses: tc.pauses}
			leave(t.Context(), hclog.NewNullLogger(), l)
			got := strings.Join(l.steps, ",")
			if want := "degraded,stop heartbeats," + tc.want; got != want {
				t.Fatalf("steps %s, want %s", got, want)
			}
		})
	}
}

// A heartbeat answer renews the Primary's lease only when the view took
// its Cluster State and it names this node Primary at the term it holds.
func TestLeaseRenewedOnlyByAnAnswerNamingThisNodeAtItsTerm(t *testing.T) {
	named := func(id string, term uint64) *netsyv1.ClusterState {
		return &netsyv1.ClusterState{Primary: &netsyv1.NodeInfo{NodeId: id}, PrimaryTerm: term}
	}
	for _, tc := range []struct {
		name     string
		accepted bool
		cs       *netsyv1.ClusterState
		held     uint64
		want     bool
	}{
		{"names this node at its term", true, named("n1", 3), 3, true},
		{"not accepted by the view", false, named("n1", 3), 3, false},
		{"names another node", true, named("n2", 3), 3, false},
		{"names this node at another term", true, named("n1", 4), 3, false},
		{"names no Primary", true, &netsyv1.ClusterState{}, 3, false},
		{"no Cluster State", true, nil, 0, false},
	} {
		if got := renewsLease("n1", tc.accepted, tc.cs, tc.held); got != tc.want {
			t.Errorf("%s: renews %v, want %v", tc.name, got, tc.want)
		}
	}
}

// A deposition ends only once the Elector names a Primary at a later term
// than the one lost: another node, or this one Active at a later term.
func TestDepositionEndsAtALaterTermOnly(t *testing.T) {
	d := &Deposition{Term: 3}
	other, self := &netsyv1.NodeInfo{NodeId: "n2"}, &netsyv1.NodeInfo{NodeId: "n1"}
	for _, tc := range []struct {
		name   string
		p      *netsyv1.NodeInfo
		term   uint64
		active bool
		held   uint64
		want   bool
	}{
		{"no Primary", nil, 4, false, 3, false},
		{"another node at the lost term", other, 3, false, 3, false},
		{"another node at a later term", other, 4, false, 3, true},
		{"this node named, not Active yet", self, 4, false, 4, false},
		{"this node Active at the lost term", self, 4, true, 3, false},
		{"this node Active at a later term", self, 4, true, 4, true},
	} {
		if got := depositionOver(d, "n1", tc.p, tc.term, tc.active, tc.held); got != tc.want {
			t.Errorf("%s: over %v, want %v", tc.name, got, tc.want)
		}
	}
	var c core = newCore("n1")
	c.fenced(errors.New("fenced"), 3, time.Unix(1, 0))
	c.reconsider(other, 3, false, 3)
	if c.deposed == nil {
		t.Fatal("the deposition ended at the lost term")
	}
	c.reconsider(other, 4, false, 3)
	if c.deposed != nil {
		t.Fatal("the deposition did not end when another node was named at a later term")
	}
}

// An Active Primary heartbeats its Elector every half interval, so its
// lease of one and a half intervals (LeaseWindow) is renewed three times
// per window; a replica keeps the plain interval.
func TestActivePrimaryBeatsEveryHalfInterval(t *testing.T) {
	n := newTestNode(t, nil)
	n.el.mu.Lock()
	self := &netsyv1.NodeInfo{NodeId: "n1", PeerAddr: "n1:2380"}
	n.el.cs = &netsyv1.ClusterState{
		Elector: n.el.cs.Elector, ElectorTerm: 1, Version: 2,
		Primary: self, PrimaryTerm: 1, RegisteredNodes: 1, Members: []*netsyv1.NodeInfo{self},
	}
	n.el.mu.Unlock()
	deadline := time.Now().Add(20 * time.Second)
	for !n.r.prim.Active() {
		if time.Now().After(deadline) {
			t.Fatal("the node never became the Active Primary")
		}
		n.clk.Advance(10 * time.Millisecond)
		time.Sleep(time.Millisecond) // real goroutines (engine, objwal) run meanwhile
	}
	half := n.r.cfg.Node.HeartbeatInterval / 2
	for range 6 {
		for len(n.calls.ch) > 0 {
			<-n.calls.ch
		}
		n.clk.Advance(half)
		n.calls.next(t, "heartbeat")
	}
}

// A Starting step stops the follower (Primary.StopFollowing) from its own
// goroutine, so that Stop may land after the follower was told of the
// Primary that superseded it: a node SIGSTOPped just after a state named
// it Primary at term 1, and resumed once the Elector named n2 at term 2,
// can see the follower take n2 first and the Starting step's Stop pause
// it afterwards. The Starting step then fails (term 2 was handed out
// meanwhile) and the view has nothing new to hand out. Once the Primary
// role is a Replica again the follower is handed the current state again
// and follows n2. Here the Starting step is held on its read of
// members.json while n2 is named, and the late Stop is made then.
func TestFollowerPausedByALateStopResumesWhenThePrimaryRoleIsAReplicaAgain(t *testing.T) {
	n := newTestNode(t, nil)
	n.calls.next(t, "register n1")
	ctx := t.Context()
	if _, err := discovery.NewMembersFile(n.store, n.r.cfg.Node.ClusterID).Update(ctx, func(m *discovery.Members) error {
		m.PrimaryTerm = 2
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	self := &netsyv1.NodeInfo{NodeId: "n1", PeerAddr: "n1:2380"}
	n2 := &netsyv1.NodeInfo{NodeId: "n2", PeerAddr: "n2:2380"}
	state := func(version uint64, p *netsyv1.NodeInfo, term uint64) *netsyv1.ClusterState {
		cs := &netsyv1.ClusterState{
			Elector: n.el.state().Elector, ElectorTerm: 1, Version: version,
			Primary: p, PrimaryTerm: term, RegisteredNodes: 2, Members: []*netsyv1.NodeInfo{self, n2},
		}
		n.el.mu.Lock()
		n.el.cs = cs
		n.el.mu.Unlock()
		return cs
	}

	n.gate.close()
	defer n.gate.open()
	if ok, _ := n.r.offer(state(2, self, 1), "push"); !ok {
		t.Fatal("the view refused the state naming this node Primary at term 1")
	}
	select {
	case <-n.gate.entered: // Starting stopped following, claimed, and reads members.json
	case <-ctx.Done():
		t.Fatal("the Starting step never read members.json")
	}
	if ok, _ := n.r.offer(state(3, n2, 2), "push"); !ok {
		t.Fatal("the view refused the state naming n2 Primary at term 2")
	}
	// The follower was handed n2 once the loop records n2 as known.
	for !hasEvent(n.r, "primary_known", "n2") {
		select {
		case <-n.r.Changed():
		case <-ctx.Done():
			t.Fatal("n2 never became the known Primary")
		}
	}
	if err := n.r.follower.Stop(ctx); err != nil { // the Starting step's Stop, late
		t.Fatal(err)
	}
	n.gate.open()
	for s, term := n.r.prim.State(); s != netsyv1.PrimaryState_REPLICA || term != 1; s, term = n.r.prim.State() {
		select {
		case <-n.r.Changed():
		case <-ctx.Done():
			t.Fatalf("the Primary role is %s at %d, want a Replica again after its Starting step failed", s, term)
		}
	}
	// A follower that is not paused looks again every writerRecheck
	// whether the writer's role is given back (nothing else wakes it):
	// run its clock until it connects to n2.
	for i := 0; ; i++ {
		n.clk.Advance(writerRecheckForTest)
		select {
		case c := <-n.calls.ch:
			if c == "conn n2:2380" {
				return
			}
		case <-time.After(20 * time.Millisecond):
		}
		if i == 500 {
			t.Fatalf("the follower never connected to n2; calls so far: %v", n.calls.all())
		}
	}
}

// writerRecheckForTest is replica's writerRecheck: how often a follower
// held back by its own writer's role looks again.
const writerRecheckForTest = 20 * time.Millisecond

func hasEvent(r *Roles, kind, node string) bool {
	for _, ev := range r.NodeState().Events {
		if ev.Kind == kind && ev.NodeId == node {
			return true
		}
	}
	return false
}

// lockGateStore holds reads of the Elector lock while its gate is shut.
type lockGateStore struct {
	objstore.Store
	gate *gate
}

func (s lockGateStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	if key == s3lect.Key {
		if err := s.gate.pass(ctx); err != nil {
			return nil, "", err
		}
	}
	return s.Store.Get(ctx, key)
}

// A node whose first heartbeat went out before it knew the Elector (the
// lock not read yet, as on every start) registers as soon as the lock
// names the Elector, not a heartbeat interval later: when every node of a
// cluster restarts at once, that interval was on the way to the first
// election. The clock never moves here, so no tick can do it.
func TestNodeRegistersOnceTheLockNamesTheElectorWithoutWaitingForATick(t *testing.T) {
	ctx := t.Context()
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	c := newCalls()
	el := newFakeElector(c)
	cfg := config.Default()
	cfg.NodeID, cfg.PeerAddr, cfg.DataDir = "n1", "n1:2380", t.TempDir()
	g := &gate{}
	g.close()
	store := lockGateStore{Store: mem.New(clk), gate: g}
	if _, err := store.PutIfAbsent(ctx, s3lect.Key, lockBodyFor("el", "el:2380", cfg.ElectorLease)); err != nil {
		t.Fatal(err)
	}
	objlog, eng := openFollowerLog(t, clk, store)
	r, err := New(Config{
		Node: cfg, Clock: clk, Store: store, Engine: eng, Log: objlog,
		Conn: func(string) (*grpc.ClientConn, error) {
			return nil, errors.New("no network in this test")
		},
		Transport: fakeTransport{el: el, nodes: &sync.Map{}},
	})
	if err != nil {
		eng.Close()
		objlog.Close()
		t.Fatal(err)
	}
	// The sender as New builds it, but telling when its first beat is
	// over; replaced before Start, so nothing else holds the old one.
	firstBeat := make(chan struct{})
	var once sync.Once
	r.hb = heartbeat.New(heartbeat.Config{
		Interval: cfg.HeartbeatInterval, Clock: clk, State: r.state, Answered: r.answered,
		Send: func(ctx context.Context, hb *netsyv1.Heartbeat) (*netsyv1.HeartbeatResponse, error) {
			resp, err := r.sendHeartbeat(ctx, hb)
			once.Do(func() { close(firstBeat) })
			return resp, err
		},
	})
	r.Start(context.Background())
	t.Cleanup(func() {
		g.open()
		r.Close()
		eng.Close()
		objlog.Close()
	})
	// The lock's first read is held, so the first beat finds no Elector.
	select {
	case <-firstBeat:
	case <-ctx.Done():
		t.Fatal("no first beat")
	}
	if got := c.all(); len(got) != 0 {
		t.Fatalf("calls before the lock was read: %v", got)
	}
	g.open()
	c.next(t, "register n1")
}

// The lock notifies when the same holder is seen with other details (an
// answer's copy carries no lease length): only another node or term asks
// for a beat, never this node, and a release forgets the holder.
func TestNewElectorBeatsOnlyForAnotherNodeOrTerm(t *testing.T) {
	w := electorWatch{self: "n1"}
	steps := []struct {
		h    s3lect.Holder
		want bool
	}{
		{s3lect.Holder{NodeID: "n2", Term: 2, LeaseMillis: 15000}, true},
		{s3lect.Holder{NodeID: "n2", Term: 2}, false},
		{s3lect.Holder{NodeID: "n2", Term: 2, LeaseMillis: 15000, Counter: 9}, false},
		{s3lect.Holder{NodeID: "n2", Term: 3}, true},
		{s3lect.Holder{NodeID: "n1", Term: 4}, false},
		{s3lect.Holder{NodeID: "n3", Term: 5}, true},
		{s3lect.Holder{NodeID: "n3", Term: 5, Released: true}, false},
		{s3lect.Holder{NodeID: "n3", Term: 5}, true},
	}
	for i, s := range steps {
		if got := w.newElector(s.h); got != s.want {
			t.Errorf("step %d %+v: beat %v, want %v", i, s.h, got, s.want)
		}
	}
}
