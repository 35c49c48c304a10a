package roles

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/elector"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/mem"
	"github.com/netsy-io/netsy/internal/objwal"
	"github.com/netsy-io/netsy/internal/s3lect"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// calls is an ordered record of what a node said to the Elector and did
// to the bucket, shared by the fakes below.
type calls struct {
	mu  sync.Mutex
	log []string
	ch  chan string
}

func newCalls() *calls { return &calls{ch: make(chan string, 1000)} }

func (c *calls) add(s string) {
	c.mu.Lock()
	c.log = append(c.log, s)
	c.mu.Unlock()
	c.ch <- s
}

func (c *calls) all() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.log...)
}

// next waits for the next call that starts with prefix.
func (c *calls) next(t *testing.T, prefix string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for {
		select {
		case s := <-c.ch:
			if strings.HasPrefix(s, prefix) {
				return s
			}
		case <-ctx.Done():
			t.Fatalf("no %q call; calls so far: %v", prefix, c.all())
		}
	}
}

// fakeElector is another node's Elector as the Transport returns it:
// scripted refusals, recorded calls.
type fakeElector struct {
	calls *calls
	mu    sync.Mutex
	// refuse, when set, answers Register and Heartbeat.
	refuse error
	cs     *netsyv1.ClusterState
	// handoff, when set, answers Handoff.
	handoff func(to string) (*netsyv1.ClusterState, error)
	// deregister, when set, answers Deregister.
	deregister func(nodeID string) error
}

var _ ElectorAPI = (*fakeElector)(nil)

func newFakeElector(c *calls) *fakeElector {
	return &fakeElector{calls: c, cs: &netsyv1.ClusterState{
		Elector:     &netsyv1.NodeInfo{NodeId: "el", PeerAddr: "el:2380"},
		ElectorTerm: 1, Version: 1,
	}}
}

func (e *fakeElector) setRefuse(err error) {
	e.mu.Lock()
	e.refuse = err
	e.mu.Unlock()
}

func (e *fakeElector) state() *netsyv1.ClusterState {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cs
}

func (e *fakeElector) refusal() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.refuse
}

func (e *fakeElector) Register(_ context.Context, info *netsyv1.NodeInfo, _ string) (uint64, *netsyv1.ClusterState, error) {
	e.calls.add("register " + info.NodeId)
	if err := e.refusal(); err != nil {
		return 0, nil, err
	}
	return 7, e.state(), nil
}

func (e *fakeElector) Deregister(_ context.Context, nodeID string) error {
	e.calls.add("deregister " + nodeID)
	e.mu.Lock()
	f := e.deregister
	e.mu.Unlock()
	if f != nil {
		return f(nodeID)
	}
	return nil
}

func (e *fakeElector) Heartbeat(_ context.Context, hb *netsyv1.Heartbeat) (*netsyv1.HeartbeatResponse, error) {
	e.calls.add("heartbeat " + hb.Health.String())
	if err := e.refusal(); err != nil {
		return nil, err
	}
	return &netsyv1.HeartbeatResponse{Seq: hb.Seq, ClusterState: e.state(), Health: hb.Health}, nil
}

func (e *fakeElector) ClusterState(context.Context, bool) (*netsyv1.ClusterState, error) {
	return e.state(), nil
}

func (e *fakeElector) Handoff(_ context.Context, to string) (*netsyv1.ClusterState, error) {
	e.calls.add("handoff " + to)
	e.mu.Lock()
	f := e.handoff
	e.mu.Unlock()
	if f != nil {
		return f(to)
	}
	return e.state(), nil
}

// fakeTransport reaches the fake Elector, and the nodes in nodes.
type fakeTransport struct {
	el    *fakeElector
	nodes *sync.Map // node id -> NodeAPI
}

func (t fakeTransport) Elector(addr string) (ElectorAPI, error) {
	if addr != "el:2380" {
		return nil, fmt.Errorf("no Elector at %s", addr)
	}
	return t.el, nil
}

func (t fakeTransport) Node(info *netsyv1.NodeInfo) (NodeAPI, error) {
	if n, ok := t.nodes.Load(info.NodeId); ok {
		return n.(NodeAPI), nil
	}
	return nil, fmt.Errorf("no node %s in this test", info.NodeId)
}

// recStore records deletes of registration files, and holds reads of
// members.json while its gate is shut.
type recStore struct {
	objstore.Store
	calls *calls
	gate  *gate
}

// gate holds callers while shut: entered says one is held, open lets
// every held and later caller through.
type gate struct {
	mu      sync.Mutex
	shut    bool
	entered chan struct{}
	release chan struct{}
}

func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.shut, g.entered, g.release = true, make(chan struct{}, 1), make(chan struct{})
}

func (g *gate) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut {
		g.shut = false
		close(g.release)
	}
}

func (g *gate) pass(ctx context.Context) error {
	g.mu.Lock()
	shut, entered, release := g.shut, g.entered, g.release
	g.mu.Unlock()
	if !shut {
		return nil
	}
	select {
	case entered <- struct{}{}:
	default:
	}
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s recStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	if key == discovery.MembersKey {
		if err := s.gate.pass(ctx); err != nil {
			return nil, "", err
		}
	}
	return s.Store.Get(ctx, key)
}

func (s recStore) Delete(ctx context.Context, key string) error {
	if strings.HasPrefix(key, discovery.NodesPrefix) {
		s.calls.add("delete " + key)
	}
	return s.Store.Delete(ctx, key)
}

// lockBodyFor is a lock object held by holder at addr, as s3lect writes it.
func lockBodyFor(holder, addr string, lease time.Duration) []byte {
	return fmt.Appendf(nil, `{"version":1,"holder_id":%q,"holder_addr":%q,"term":1,"lease_ms":%d,"counter":1,"released":false}`,
		holder, addr, lease.Milliseconds())
}

// testNode is one node's roles over a real engine and objwal on an
// in-memory bucket, with a fake clock; another node ("el") holds the
// Elector lock, and the Transport reaches only its fake Elector.
type testNode struct {
	r     *Roles
	clk   *clock.Fake
	el    *fakeElector
	calls *calls
	store objstore.Store
	// gate holds reads of members.json while shut.
	gate *gate
	// nodes are the other nodes the Transport reaches (node id ->
	// NodeAPI).
	nodes *sync.Map
}

// refuse, when not nil, is the Elector's answer to Register and
// Heartbeat from the start.
func newTestNode(t *testing.T, refuse error) *testNode {
	t.Helper()
	ctx := t.Context()
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	c := newCalls()
	el := newFakeElector(c)
	el.setRefuse(refuse)
	nodes := &sync.Map{}
	cfg := config.Default()
	cfg.NodeID, cfg.PeerAddr, cfg.DataDir = "n1", "n1:2380", t.TempDir()
	store := recStore{Store: mem.New(clk), calls: c, gate: &gate{}}
	if _, err := store.PutIfAbsent(ctx, s3lect.Key, lockBodyFor("el", "el:2380", cfg.ElectorLease)); err != nil {
		t.Fatal(err)
	}
	objlog, eng := openFollowerLog(t, clk, store)
	r, err := New(Config{
		Node: cfg, Clock: clk, Store: store, Engine: eng, Log: objlog,
		Conn: func(addr string) (*grpc.ClientConn, error) {
			c.add("conn " + addr)
			return nil, errors.New("no network in this test")
		},
		Transport: fakeTransport{el: el, nodes: nodes},
	})
	if err != nil {
		eng.Close()
		objlog.Close()
		t.Fatal(err)
	}
	r.Start(context.Background())
	t.Cleanup(func() {
		r.Close()
		eng.Close()
		objlog.Close()
	})
	// The first beat may go out before the lock was read (no Elector
	// known yet): beat again once the node knows the Elector.
	holders, stop := r.lock.Subscribe()
	defer stop()
	for h := range holders {
		if h.NodeID == "el" {
			break
		}
	}
	r.hb.Now()
	return &testNode{r: r, clk: clk, el: el, calls: c, store: store, gate: store.gate, nodes: nodes}
}

// beat advances the clock by one heartbeat interval.
func (n *testNode) beat() { n.clk.Advance(n.r.cfg.Node.HeartbeatInterval) }

// settle waits until the loop has applied everything posted so far.
func (n *testNode) settle() {
	n.r.do(func(*core, **elector.Elector) effects { return effects{} })
}

// openFollowerLog opens a follower's log on store and its engine, as a
// node starting as a replica does; the caller closes both.
func openFollowerLog(t *testing.T, clk clock.Clock, store objstore.Store) (*objwal.Log, *engine.Engine) {
	t.Helper()
	objlog, err := objwal.Open(t.Context(), objwal.Options{
		Store: store, WALDir: t.TempDir(), Mode: objwal.ModeSync, Follower: true,
		SegmentBytes: 1 << 20, Clock: clk,
	})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.Open(engine.Config{Storage: objlog, Clock: clk, Follower: true})
	if err != nil {
		objlog.Close()
		t.Fatal(err)
	}
	return objlog, eng
}
