package node

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/faulty"
	"github.com/netsy-io/netsy/internal/objstore/mem"
	"github.com/netsy-io/netsy/internal/peer/memnet"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// testCluster runs several nodes in this process: one in-memory bucket,
// an in-memory peer network, real client ports on loopback and short
// timings (heartbeats every 50 ms unless set, an Elector lease of 1.5 s).
type testCluster struct {
	t      *testing.T
	net    *memnet.Net
	store  objstore.Store
	faults *faulty.Store // store, with faults injected on demand
	quorum int
	hb     time.Duration // heartbeat interval

	mu    sync.Mutex
	nodes map[string]*Node
	dirs  map[string]string
	addrs map[string][2]string // client and HTTP addresses, kept across restarts
	names map[string]string    // --name of a node started after it is set
}

func newTestCluster(t *testing.T, quorum int, ids ...string) *testCluster {
	return newTestClusterBeating(t, quorum, 50*time.Millisecond, ids...)
}

// newTestClusterBeating is newTestCluster with another heartbeat interval
// (the Primary's lease is two of them).
func newTestClusterBeating(t *testing.T, quorum int, hb time.Duration, ids ...string) *testCluster {
	c := &testCluster{t: t, net: memnet.New(), faults: faulty.New(mem.New(clock.Real()), clock.Real()), quorum: quorum, hb: hb,
		nodes: map[string]*Node{}, dirs: map[string]string{}, addrs: map[string][2]string{}, names: map[string]string{}}
	c.store = c.faults
	// The test's temporary directory is made before the shutdown below is
	// registered, so it is removed after every node has stopped (cleanups
	// run last first): made first in start, it was removed while nodes
	// still wrote to their data directories ('unlinkat …/wal: directory
	// not empty' under load).
	t.TempDir()
	t.Cleanup(func() {
		c.mu.Lock()
		nodes := c.nodes
		c.nodes = nil
		c.mu.Unlock()
		var wg sync.WaitGroup
		for _, n := range nodes {
			wg.Add(1)
			go func() { defer wg.Done(); n.shutdown(false) }()
		}
		wg.Wait()
		c.net.Close()
	})
	for _, id := range ids {
		c.start(id)
	}
	return c
}

func (c *testCluster) start(id string) *Node {
	c.t.Helper()
	c.mu.Lock()
	dir, ok := c.dirs[id]
	if !ok {
		dir = c.t.TempDir()
		c.dirs[id] = dir
		c.addrs[id] = [2]string{freePeerAddr(c.t), freePeerAddr(c.t)}
	}
	addrs := c.addrs[id]
	name := c.names[id]
	c.mu.Unlock()
	cfg := config.Default()
	cfg.NodeID = id
	cfg.Name = name
	cfg.DataDir = dir
	cfg.ClientAddr, cfg.HTTPAddr, cfg.PeerAddr = addrs[0], addrs[1], id+":2380"
	// memnet's peer addresses are names, not loopback addresses.
	cfg.TLS.InsecurePlaintext = true
	cfg.Quorum = c.quorum
	cfg.HeartbeatInterval = c.hb
	cfg.ElectorLease, cfg.ElectorRenew = 1500*time.Millisecond, 300*time.Millisecond
	cfg.PrimaryHandshakeTimeout = 300 * time.Millisecond
	logger := hclog.New(&hclog.LoggerOptions{Name: id, Level: hclog.Warn, Output: testLog{c.t}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := StartWith(ctx, cfg, logger, Deps{Clock: clock.Real(), Store: c.store, Network: c.net.Host(id)})
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.nodes[id] = n
	c.mu.Unlock()
	return n
}

// crash stops a node as SIGKILL would: its peer address refuses
// connections at once and nothing is handed over.
func (c *testCluster) crash(id string) {
	c.mu.Lock()
	n := c.nodes[id]
	delete(c.nodes, id)
	c.mu.Unlock()
	c.net.Down(id + ":2380")
	n.shutdown(false)
}

func (c *testCluster) node(id string) *Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[id]
}

func (c *testCluster) ids() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for id := range c.nodes {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// ready waits until every running node is ready and they agree on one
// Active Primary, which it returns.
func (c *testCluster) ready(timeout time.Duration) string {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		primary, ok := "", true
		for _, id := range c.ids() {
			n := c.node(id)
			if n.notReady() != nil {
				ok = false
				break
			}
			p, _ := n.roles.Primary()
			if primary == "" {
				primary = p.NodeId
			} else if primary != p.NodeId {
				ok = false
			}
		}
		if ok && primary != "" && c.node(primary) != nil && c.node(primary).roles.Active() {
			return primary
		}
		if time.Now().After(deadline) {
			var why []string
			for _, id := range c.ids() {
				why = append(why, fmt.Sprintf("%s: %v", id, c.node(id).notReady()))
			}
			c.t.Fatalf("cluster not ready within %v: %v", timeout, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// separated waits until the cluster is ready with the Elector and the
// Primary on different nodes (the Elector resigns off the Primary).
func (c *testCluster) separated(timeout time.Duration) string {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		p := c.ready(timeout)
		if el := c.elector(); el != "" && el != p {
			return p
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the Elector (%s) stays on the Primary (%s)", c.elector(), p)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// checkStatus checks that every node's Status names the Primary's member
// id as leader and its term as raft term, the term the header carries too,
// and returns that term.
func (c *testCluster) checkStatus(ctx context.Context, primary string) uint64 {
	c.t.Helper()
	leader := c.node(primary).roles.MemberID()
	_, term := c.node(primary).roles.PrimaryState()
	for _, id := range c.ids() {
		st, err := c.client(id).Status(ctx, c.node(id).ClientAddr())
		if err != nil {
			c.t.Fatalf("status of %s: %v", id, err)
		}
		if st.Leader == 0 || st.Leader != leader || st.RaftTerm != term || st.Header.RaftTerm != term {
			c.t.Fatalf("status of %s: leader %x, raft term %d, header raft term %d; want the Primary %s's member id %x and term %d",
				id, st.Leader, st.RaftTerm, st.Header.RaftTerm, primary, leader, term)
		}
	}
	return term
}

func (c *testCluster) client(id string) *clientv3.Client {
	return newTestClient(c.t, c.node(id))
}

// electorOf returns the node running the Elector.
func (c *testCluster) elector() string {
	for _, id := range c.ids() {
		if c.node(id).roles.RunningElector() != nil {
			return id
		}
	}
	return ""
}

// Three nodes on one bucket form one cluster: one Elector, one Primary,
// every node serves writes, linearizable reads and watches, MemberList
// lists every node with its member id, name and URLs on every node, and
// Status names the Primary as leader.
func TestClusterServesOnEveryNode(t *testing.T) {
	c := newTestCluster(t, 0)
	c.names["n2"] = "etcd-2" // n1 and n3 are named by their node ids
	for _, id := range []string{"n1", "n2", "n3"} {
		c.start(id)
	}
	primary := c.ready(10 * time.Second)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	electors := 0
	for _, id := range c.ids() {
		if c.node(id).roles.RunningElector() != nil {
			electors++
		}
	}
	if electors != 1 {
		t.Fatalf("%d Electors", electors)
	}
	replica := "n1"
	if replica == primary {
		replica = "n2"
	}
	watch := c.client(replica).Watch(ctx, "k/", clientv3.WithPrefix())
	for i, id := range c.ids() {
		cli := c.client(id)
		put, err := cli.Put(ctx, fmt.Sprintf("k/%d", i), id)
		if err != nil {
			t.Fatalf("put through %s: %v", id, err)
		}
		// A linearizable read on every node sees the write at once.
		for _, other := range c.ids() {
			got, err := c.client(other).Get(ctx, fmt.Sprintf("k/%d", i))
			if err != nil || len(got.Kvs) != 1 || got.Kvs[0].ModRevision != put.Header.Revision {
				t.Fatalf("read on %s after a put through %s: %v %v", other, id, got, err)
			}
		}
	}
	for seen := 0; seen < 3; {
		wr := <-watch
		if err := wr.Err(); err != nil {
			t.Fatal(err)
		}
		seen += len(wr.Events)
	}
	// Membership reaches every node with the Elector's next push or
	// heartbeat answer.
	want := map[uint64]string{}
	for _, id := range c.ids() {
		n, name := c.node(id), c.names[id]
		if name == "" {
			name = id
		}
		want[n.roles.MemberID()] = fmt.Sprintf("%s http://%s:2380 http://%s", name, id, n.ClientAddr())
	}
	for _, id := range c.ids() {
		var got map[uint64]string
		for range 200 {
			members, err := c.client(id).MemberList(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got = map[uint64]string{}
			for _, m := range members.Members {
				got[m.ID] = fmt.Sprintf("%s %s %s", m.Name, strings.Join(m.PeerURLs, ","), strings.Join(m.ClientURLs, ","))
			}
			if maps.Equal(got, want) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if !maps.Equal(got, want) {
			t.Fatalf("member list on %s:\n got %v\nwant %v", id, got, want)
		}
	}
	c.checkStatus(ctx, primary)
}

// A crashed Primary is replaced; writes through a surviving node succeed
// again, and every acknowledged write is still there.
func TestClusterPrimaryCrash(t *testing.T) {
	for _, q := range []int{0, -1} {
		t.Run(fmt.Sprintf("quorum%d", q), func(t *testing.T) {
			c := newTestCluster(t, q, "n1", "n2", "n3")
			primary := c.separated(10 * time.Second)
			survivor := "n1"
			if survivor == primary {
				survivor = "n2"
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			cli := c.client(survivor)
			var acked []int64
			for i := range 20 {
				resp, err := cli.Put(ctx, fmt.Sprintf("k%d", i), "v")
				if err != nil {
					t.Fatal(err)
				}
				acked = append(acked, resp.Header.Revision)
			}
			start := time.Now()
			c.crash(primary)
			if _, err := cli.Put(ctx, "after", "crash"); err != nil {
				t.Fatalf("write after the Primary crashed: %v", err)
			}
			took := time.Since(start)
			t.Logf("first write after the crash took %v", took)
			if took > 2*time.Second {
				t.Fatalf("first write after the Primary crashed took %v", took)
			}
			newPrimary := c.ready(10 * time.Second)
			if newPrimary == primary {
				t.Fatal("the crashed node is still the Primary")
			}
			for i, rev := range acked {
				got, err := cli.Get(ctx, fmt.Sprintf("k%d", i))
				if err != nil || len(got.Kvs) != 1 || got.Kvs[0].ModRevision != rev {
					t.Fatalf("acknowledged k%d at %d: %v %v", i, rev, got, err)
				}
			}
			// The crashed node comes back as a replica of the new Primary.
			c.start(primary)
			if p := c.ready(10 * time.Second); p != newPrimary {
				t.Fatalf("Primary after the old one came back: %s, want %s", p, newPrimary)
			}
			if term := c.checkStatus(ctx, newPrimary); term < 2 {
				t.Fatalf("the new Primary's term is %d, want a later one than the first's", term)
			}
			got, err := c.client(primary).Get(ctx, "after")
			if err != nil || len(got.Kvs) != 1 {
				t.Fatalf("the restarted node does not serve the new Primary's write: %v %v", got, err)
			}
		})
	}
}

// A crashed Elector is replaced by another node within about a lease, and
// writes keep working meanwhile.
func TestClusterElectorCrash(t *testing.T) {
	c := newTestCluster(t, 0, "n1", "n2", "n3")
	primary := c.separated(10 * time.Second)
	el := c.elector()
	writer := primary
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cli := c.client(writer)
	var failed atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := cli.Put(ctx, fmt.Sprintf("w%d", i), "v"); err != nil {
				failed.Add(1)
			}
		}
	}()
	start := time.Now()
	c.crash(el)
	for c.elector() == "" && time.Since(start) < 10*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	took := time.Since(start)
	close(stop)
	<-done
	if c.elector() == "" {
		t.Fatal("no new Elector")
	}
	t.Logf("new Elector %s after %v", c.elector(), took)
	if took > 1500*time.Millisecond+time.Second {
		t.Fatalf("new Elector after %v, want within the lease (1.5 s) + 1 s", took)
	}
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d writes failed while the Elector was replaced", n)
	}
}

// A handoff moves the Primary with no failed write.
func TestClusterHandoff(t *testing.T) {
	c := newTestCluster(t, -1, "n1", "n2", "n3")
	primary := c.ready(10 * time.Second)
	other := "n1"
	if other == primary {
		other = "n2"
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cli := c.client(other)
	var failed, ok atomic.Int64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := cli.Put(ctx, fmt.Sprintf("h%d", i), "v"); err != nil {
				failed.Add(1)
				t.Log(err)
			} else {
				ok.Add(1)
			}
		}
	}()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	cs := handoffVia(t, c, other)
	t.Logf("handoff to %s (term %d) took %v", cs.GetPrimary().GetNodeId(), cs.PrimaryTerm, time.Since(start))
	time.Sleep(200 * time.Millisecond)
	close(stop)
	<-done
	if np := c.ready(10 * time.Second); np == primary {
		t.Fatalf("the Primary is still %s after the handoff", np)
	}
	if failed.Load() > 0 {
		t.Fatalf("%d of %d writes failed during the handoff", failed.Load(), failed.Load()+ok.Load())
	}
}

// handoffVia asks the Elector, through node id, to hand the Primary off.
// The Elector may move meanwhile (it resigns off the Primary after start):
// a node that is no longer the Elector is asked again.
func handoffVia(t *testing.T, c *testCluster, id string) *netsyv1.ClusterState {
	t.Helper()
	for attempt := 0; ; attempt++ {
		cs, err := c.node(id).roles.Handoff(t.Context(), "")
		if err == nil {
			return cs
		}
		if attempt == 20 {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A running node that is deregistered registers again at its next
// heartbeat, and writes its nodes/ file again first: the Elector's map
// and the bucket agree, so a later Elector knows the node too.
func TestDeregisteredRunningNodeRegistersAgain(t *testing.T) {
	c := newTestCluster(t, 0, "n1", "n2", "n3")
	primary := c.separated(10 * time.Second)
	el := c.elector()
	victim := ""
	for _, id := range c.ids() {
		if id != primary && id != el {
			victim = id
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := c.node(el).roles.RunningElector().Deregister(ctx, victim); err != nil {
		t.Fatal(err)
	}
	key := discovery.NodeKey(victim)
	for {
		_, _, err := c.store.Get(ctx, key)
		cs, cerr := c.node(el).roles.RunningElector().ClusterState(ctx, true)
		if cerr != nil {
			t.Fatal(cerr)
		}
		listed := false
		for _, n := range cs.Nodes {
			if n.GetInfo().GetNodeId() == victim {
				listed = true
			}
		}
		if err == nil && listed {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s: %v in the bucket, listed by the Elector %v", key, err, listed)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
