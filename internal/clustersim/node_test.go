package clustersim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/elector"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/etcdapi"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/mem"
	"github.com/netsy-io/netsy/internal/objwal"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/internal/peer/memnet"
	"github.com/netsy-io/netsy/internal/replica"
	"github.com/netsy-io/netsy/internal/roles"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// simConfig is what every node of a simulated cluster is started with:
// the node flags internal/roles reads. The Primary's lease is two
// heartbeat intervals, as internal/roles sets it.
type simConfig struct {
	ClusterID         string
	Quorum            int
	HeartbeatInterval time.Duration
	QuorumTimeout     time.Duration
	HandshakeTimeout  time.Duration
	Deregistration    time.Duration // 0: never
	LockLease         time.Duration
	LockRenew         time.Duration
}

func defaultConfig() simConfig {
	return simConfig{
		ClusterID:         "sim",
		Quorum:            -1,
		HeartbeatInterval: 500 * time.Millisecond,
		QuorumTimeout:     500 * time.Millisecond,
		HandshakeTimeout:  3 * time.Second,
		LockLease:         3 * time.Second,
		LockRenew:         time.Second,
	}
}

// leaseWindow is the Primary's lease under cfg (internal/roles: two
// heartbeat intervals).
func (cfg simConfig) leaseWindow() time.Duration { return 2 * cfg.HeartbeatInterval }

// cluster is a cluster of nodes that each run the real internal/roles
// over a real engine and objwal: the world, the bucket, the in-memory
// network the Follow streams and forwarded client requests ride, the
// nodes, the client and the recorder.
type cluster struct {
	w     *world
	cfg   simConfig
	store *mem.Store
	net   *memnet.Net
	nodes []*simNode
	byID  map[string]*simNode
	rec   *recorder
	seed  uint64
	dir   string
	cl    *client

	// netMu guards applied: the memnet faults in force per pair of
	// nodes, as syncNet last set them from the world's links and stalls.
	netMu   sync.Mutex
	applied map[[2]string]netFault

	// dropRng decides message drops; guarded by w.mu.
	dropRng *rand.Rand
}

// netFault is what memnet does to a pair of hosts.
type netFault int

const (
	netOK        netFault = iota
	netPartition          // both directions cut: connections close, dials hang
	netStall              // one direction cut, or a side stalled: traffic waits
)

func newCluster(seed uint64, cfg simConfig, dir string, trace bool) *cluster {
	w := newWorld()
	w.trace = trace
	c := &cluster{
		w: w, cfg: cfg, byID: make(map[string]*simNode), seed: seed, dir: dir,
		net:     memnet.New(),
		applied: make(map[[2]string]netFault),
		dropRng: rand.New(rand.NewPCG(seed, 0xd209)),
	}
	c.store = mem.New(&simClock{w: w, rate: 1000})
	c.rec = newRecorder(w, c.store, cfg.ClusterID)
	c.cl = newClient(c)
	return c
}

func (c *cluster) node(id string) *simNode { return c.byID[id] }

// addNode adds a node with the given clock; it is not started.
func (c *cluster) addNode(id string, offset time.Duration, rate int64, bucketLatency time.Duration) *simNode {
	n := &simNode{
		c: c, w: c.w, id: id,
		bucketLatency: bucketLatency,
		dir:           filepath.Join(c.dir, id),
	}
	n.clk = &simClock{w: c.w, owner: &n.stall, offset: offset, rate: rate}
	n.store = nodeStore{n}
	c.nodes = append(c.nodes, n)
	c.byID[id] = n
	return n
}

func (c *cluster) setLatencies(lat func(from, to string) time.Duration) {
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if a != b {
				c.w.setLink(a.id, b.id, func(l *link) { l.latency = lat(a.id, b.id) })
			}
		}
	}
}

// cut cuts (by +1) or heals (by -1) the links between a and b, both ways.
func (c *cluster) cut(a, b string, by int) {
	c.cutLink(a, b, by)
	c.cutLink(b, a, by)
	c.syncNet()
}

func (c *cluster) cutOneWay(from, to string, by int) {
	c.cutLink(from, to, by)
	c.syncNet()
}

func (c *cluster) cutLink(from, to string, by int) {
	if from == to {
		return
	}
	c.w.setLink(from, to, func(l *link) {
		l.cuts = max(0, l.cuts+by)
		if l.cuts == 0 {
			// Healed: what was sent meanwhile goes on its way.
			parked := l.parked
			l.parked = nil
			for _, send := range parked {
				send()
			}
		}
	})
	c.w.tracef("link %s->%s cuts %+d", from, to, by)
}

// sendLocked carries one message from a to b: it arrives after the
// link's latency and runs deliver in owner's process (nil: outside any).
// A cut link holds it until it heals, as TCP retransmits; a link cut
// while the message is on its way holds it too; a link that drops loses
// it now and then.
func (c *cluster) sendLocked(from, to string, owner *stall, deliver func()) {
	w := c.w
	var send func()
	send = func() {
		l := w.linkLocked(from, to)
		if from != to && l.cuts > 0 {
			l.parked = append(l.parked, send)
			return
		}
		w.scheduleLocked(w.nowLocked()+l.latency+l.slow, owner, false, func() {
			w.mu.Lock()
			l := w.linkLocked(from, to)
			if from != to && l.cuts > 0 {
				l.parked = append(l.parked, send)
				w.mu.Unlock()
				return
			}
			w.mu.Unlock()
			deliver()
		})
	}
	if l := w.linkLocked(from, to); from != to && l.drop > 0 && c.dropRng.IntN(1000) < l.drop {
		return
	}
	send()
}

// syncNet makes memnet's faults match the world's links and stalls, for
// the gRPC traffic (Follow streams, forwarded client requests): both
// directions cut is a partition; one direction cut, or either side
// stalled, holds the traffic (a TCP connection whose acks never come
// back goes quiet rather than failing).
func (c *cluster) syncNet() {
	type change struct {
		a, b     string
		from, to netFault
	}
	var changes []change
	c.netMu.Lock()
	c.w.mu.Lock()
	for i, a := range c.nodes {
		for _, b := range c.nodes[i+1:] {
			ab, ba := c.w.linkLocked(a.id, b.id).cuts > 0, c.w.linkLocked(b.id, a.id).cuts > 0
			want := netOK
			switch {
			case ab && ba:
				want = netPartition
			case ab || ba || a.frozen > 0 || b.frozen > 0:
				want = netStall
			}
			k := [2]string{a.id, b.id}
			if cur := c.applied[k]; cur != want {
				changes = append(changes, change{a.id, b.id, cur, want})
				c.applied[k] = want
			}
		}
	}
	c.w.mu.Unlock()
	for _, ch := range changes {
		switch ch.from {
		case netPartition:
			c.net.Heal(ch.a, ch.b)
		case netStall:
			c.net.Unstall(ch.a, ch.b)
		}
		switch ch.to {
		case netPartition:
			c.net.Partition(ch.a, ch.b)
		case netStall:
			c.net.Stall(ch.a, ch.b)
		}
	}
	c.netMu.Unlock()
}

// electorNode is the node acting as Elector now, if any.
func (c *cluster) electorNode() *simNode {
	for _, n := range c.nodes {
		if n.currentElector() != nil {
			return n
		}
	}
	return nil
}

// primaryNode is the node that is Active Primary now, if any (the one with
// the highest term if there are several).
func (c *cluster) primaryNode() *simNode {
	var best *simNode
	var term uint64
	for _, n := range c.nodes {
		if s, t := n.primState(); s == netsyv1.PrimaryState_ACTIVE && (best == nil || t > term) {
			best, term = n, t
		}
	}
	return best
}

// closeAll crashes every node and runs the world until every process has
// closed (closing waits on the nodes' own clocks), then closes the
// network.
func (c *cluster) closeAll() {
	for _, n := range c.nodes {
		n.crash()
	}
	c.cl.stop()
	for i := 0; ; i++ {
		busy := c.cl.busy()
		for _, n := range c.nodes {
			if n.closingNow() {
				busy = true
			}
		}
		if !busy {
			break
		}
		if i > 10000 {
			panic("clustersim: the nodes do not close")
		}
		c.w.run(c.w.Now()+100*time.Millisecond, nil)
	}
	c.net.Close()
}

// proc is one process of a node: the real engine, objwal and roles, the
// peer port's gRPC server (the netsy peer services and the etcd API for
// forwarded requests) and the client API's backend.
type proc struct {
	log     *objwal.Log
	eng     *engine.Engine
	pool    *peer.Pool
	r       *roles.Roles
	g       *grpc.Server
	serving []*peer.Serving
	backend *replica.Backend
}

// close ends the process in node's shutdown order.
func (p *proc) close() {
	if p.g != nil {
		p.g.Stop()
		for _, s := range p.serving {
			<-s.Done()
		}
	}
	if p.backend != nil {
		p.backend.Close()
	}
	if p.r != nil {
		p.r.Close()
	}
	if p.pool != nil {
		p.pool.Close()
	}
	if p.eng != nil {
		p.eng.Close()
	}
	if p.log != nil {
		p.log.Close()
	}
}

// simNode is one node: its clock, its data directory (which survives its
// crashes), its link to the bucket, and its current process.
type simNode struct {
	c             *cluster
	w             *world
	id            string
	clk           *simClock
	store         nodeStore
	bucketLatency time.Duration
	dir           string

	stall // guarded by w.mu

	mu       sync.Mutex
	alive    bool
	inc      int
	dead     chan struct{} // closed when the current process ends
	refusing bool          // its address refuses while the process lives
	ctx      context.Context
	cancel   context.CancelFunc
	wg       *sync.WaitGroup
	p        *proc
	closing  chan struct{} // closed once the last process has closed
	bucket   bucketState
	boots    int
	// What the process's Observer said, for the recorder and the checks.
	primSt      netsyv1.PrimaryState
	primTerm    uint64
	leaseUntil  time.Time
	electorTerm uint64
}

func (n *simNode) nodeID() string   { return n.id }
func (n *simNode) clock() *simClock { return n.clk }

func (n *simNode) incarnation() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.inc
}

func (n *simNode) isAlive() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.alive
}

// roles is the running process's roles, or nil.
func (n *simNode) roles() *roles.Roles {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.p == nil {
		return nil
	}
	return n.p.r
}

func (n *simNode) process() *proc {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.p
}

func (n *simNode) currentElector() *elector.Elector {
	if r := n.roles(); r != nil {
		return r.RunningElector()
	}
	return nil
}

// primState is the Primary state the process reported last.
func (n *simNode) primState() (netsyv1.PrimaryState, uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.alive {
		return netsyv1.PrimaryState_REPLICA, n.primTerm
	}
	return n.primSt, n.primTerm
}

// leaseHeld reports whether the node is Active with a current lease.
func (n *simNode) leaseHeld() bool {
	r := n.roles()
	n.mu.Lock()
	until := n.leaseUntil
	n.mu.Unlock()
	return r != nil && r.Active() && n.clk.Now().Before(until)
}

func (n *simNode) closingNow() bool {
	n.mu.Lock()
	ch := n.closing
	n.mu.Unlock()
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return false
	default:
		return true
	}
}

func (n *simNode) logger(name string) hclog.Logger {
	if !n.w.trace {
		return hclog.NewNullLogger()
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.Debug, Output: traceWriter{n.w, n.id}, DisableTime: true})
}

// goOwned runs f on a goroutine the current process owns: a crash waits
// for it, and f must end when the process's ctx does.
func (n *simNode) goOwned(f func()) {
	n.mu.Lock()
	wg := n.wg
	n.mu.Unlock()
	wg.Go(f)
}

// handlerContext is the context a request to this process is served
// with: it ends when the process does or the caller gives up.
func (n *simNode) handlerContext(caller context.Context) (context.Context, context.CancelFunc) {
	n.mu.Lock()
	base := n.ctx
	n.mu.Unlock()
	ctx, cancel := context.WithCancel(base)
	stop := context.AfterFunc(caller, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// nodeConfig is the node's configuration, as flags would give it.
func (n *simNode) nodeConfig() config.Config {
	cc := n.c.cfg
	cfg := config.Default()
	cfg.NodeID, cfg.ClusterID, cfg.Name = n.id, cc.ClusterID, n.id
	cfg.PeerAddr, cfg.ClientAddr, cfg.HTTPAddr = n.id, n.id+":2379", n.id+":2381"
	cfg.DataDir = n.dir
	cfg.Quorum = cc.Quorum
	cfg.HeartbeatInterval = cc.HeartbeatInterval
	cfg.QuorumTimeout = cc.QuorumTimeout
	cfg.PrimaryHandshakeTimeout = cc.HandshakeTimeout
	cfg.DeregistrationTimeout = cc.Deregistration
	cfg.ElectorLease, cfg.ElectorRenew = cc.LockLease, cc.LockRenew
	return cfg
}

// boot starts a new process of the node, as node.Start does: register
// nodes/{id}.json, open the log and the engine, start the roles and
// serve the peer port.
func (n *simNode) boot() {
	n.mu.Lock()
	if n.alive {
		n.mu.Unlock()
		return
	}
	n.alive = true
	n.inc++
	n.boots++
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.wg = &sync.WaitGroup{}
	n.dead = make(chan struct{})
	n.refusing = false
	n.primSt, n.leaseUntil, n.electorTerm = netsyv1.PrimaryState_REPLICA, time.Time{}, 0
	ctx, inc, prev := n.ctx, n.inc, n.closing
	n.mu.Unlock()
	n.w.tracef("%s boots", n.id)
	n.c.net.Rejoin(n.id)
	n.goOwned(func() { n.startup(ctx, inc, prev) })
}

// startup runs node.Start's steps on the process's goroutine (they wait
// for the bucket). A step that fails is retried a second later, as a
// supervisor restarts a node that failed to start.
func (n *simNode) startup(ctx context.Context, inc int, prev chan struct{}) {
	if prev != nil {
		// The last process's files are closed before this one opens them.
		select {
		case <-prev:
		case <-ctx.Done():
			return
		}
	}
	cfg := n.nodeConfig()
	for {
		p, err := n.start(ctx, cfg, inc)
		if err == nil {
			n.mu.Lock()
			if n.inc != inc {
				n.mu.Unlock()
				p.close()
				return
			}
			n.p = p
			n.mu.Unlock()
			p.r.Start(context.Background())
			return
		}
		if p != nil {
			p.close()
		}
		if ctx.Err() != nil {
			return
		}
		n.w.tracef("%s fails to start: %v", n.id, err)
		if n.clk.Sleep(ctx, time.Second) != nil {
			return
		}
	}
}

func (n *simNode) start(ctx context.Context, cfg config.Config, inc int) (*proc, error) {
	if err := discovery.Register(ctx, n.store, roles.Registration(cfg, n.clk.Wall())); err != nil {
		return nil, err
	}
	p := &proc{}
	var err error
	p.log, err = objwal.Open(ctx, objwal.Options{
		Store: n.store, WALDir: filepath.Join(cfg.DataDir, "wal"), Mode: objwal.ModeSync, Follower: true,
		CutDamage: true, SegmentBytes: 1 << 20, Clock: n.clk, Logger: n.logger("objwal"),
	})
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	var rp struct {
		sync.Mutex
		r *roles.Roles
	}
	p.eng, err = engine.Open(engine.Config{
		Storage: p.log, Clock: n.clk, Follower: true, ClusterID: roles.ClusterIDHash(cfg.ClusterID),
		Logger: n.logger("engine"),
		OnDeposed: func(err error) {
			rp.Lock()
			r := rp.r
			rp.Unlock()
			if r != nil {
				r.EngineDeposed(err)
			}
		},
	})
	if err != nil {
		return p, fmt.Errorf("open engine: %w", err)
	}
	select {
	case <-p.log.WALPrepared():
	case <-ctx.Done():
		return p, ctx.Err()
	}
	p.pool = peer.NewPool(n.c.net.Host(n.id))
	p.r, err = roles.New(roles.Config{
		Node: cfg, Clock: n.clk, Store: n.store, Engine: p.eng, Log: p.log,
		Conn: p.pool.Conn, Transport: simTransport{n}, Logger: n.logger("node"),
		Observer: n.observer(inc),
	})
	if err != nil {
		return p, err
	}
	rp.Lock()
	rp.r = p.r
	rp.Unlock()
	peerAPI := etcdapi.New(etcdapi.Config{
		Backend: replica.NewBackend(replica.BackendConfig{Local: p.eng, Roles: p.r, Clock: n.clk}),
		Clock:   n.clk, Logger: n.logger("peer"),
	})
	p.g = peerAPI.NewGRPCServer(append(peer.ServerOptions(),
		grpc.ChainUnaryInterceptor(replica.CommitIndexInterceptor(p.eng.CommittedIndex)))...)
	p.r.RegisterPeerServices(p.g)
	netsyv1.RegisterForwardServer(p.g, replica.NewForwardServer(replica.ForwardServerConfig{
		KV: peerAPI.KV(), Committed: p.eng.CommittedIndex, Clock: n.clk,
	}))
	p.backend = replica.NewBackend(replica.BackendConfig{Local: p.eng, Roles: p.r, Clock: n.clk, Conn: p.pool.Conn})
	n.mu.Lock()
	refusing := n.refusing || n.inc != inc
	n.mu.Unlock()
	if !refusing {
		if err := n.listen(p); err != nil {
			return p, err
		}
	}
	return p, nil
}

// listen serves the peer port on the node's address.
func (n *simNode) listen(p *proc) error {
	l, err := n.c.net.Host(n.id).Listen(n.id)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	p.serving = append(p.serving, peer.Serve(p.g, l))
	return nil
}

// observer is the roles' Observer for incarnation inc: it keeps what the
// checks read and tells the recorder, until the process ends.
func (n *simNode) observer(inc int) *roles.Observer {
	live := func() bool { return n.incarnation() == inc }
	return &roles.Observer{
		ElectorStarted: func(term uint64) {
			n.mu.Lock()
			ok := n.inc == inc
			if ok {
				n.electorTerm = term
			}
			n.mu.Unlock()
			if ok {
				n.c.rec.electorStart(n, term)
			}
		},
		ElectorStopped: func(term uint64) {
			n.mu.Lock()
			ok := n.inc == inc && n.electorTerm == term
			if ok {
				n.electorTerm = 0
			}
			n.mu.Unlock()
			if ok {
				n.c.rec.electorEnd(n, term)
			}
		},
		Offered: func(cs *netsyv1.ClusterState, accepted bool, before uint64, from string) {
			if live() {
				n.c.rec.offered(n, cs, accepted, before, from)
			}
		},
		Health: func(ok bool, _ error) {
			if live() {
				n.c.rec.health(n, ok)
			}
		},
		Primary: func(s netsyv1.PrimaryState, term uint64, leaseUntil time.Time) {
			n.mu.Lock()
			if n.inc != inc {
				n.mu.Unlock()
				return
			}
			was := n.primSt
			n.primSt, n.primTerm = s, term
			if leaseUntil.After(n.leaseUntil) {
				n.leaseUntil = leaseUntil
			}
			until := n.leaseUntil
			n.mu.Unlock()
			switch {
			case s == netsyv1.PrimaryState_STARTING && was != netsyv1.PrimaryState_STARTING:
				n.w.tracef("%s Starting at term %d", n.id, term)
				n.c.rec.promoted(n, term)
			case s == netsyv1.PrimaryState_ACTIVE:
				n.w.tracef("%s Active at term %d", n.id, term)
				n.c.rec.active(n, term, until)
			case was == netsyv1.PrimaryState_ACTIVE:
				n.w.tracef("%s %s at term %d", n.id, s, term)
				n.c.rec.inactive(n)
			}
		},
		Lease: func(until time.Time) {
			n.mu.Lock()
			ok := n.inc == inc
			if ok && until.After(n.leaseUntil) {
				n.leaseUntil = until
			}
			active := ok && n.primSt == netsyv1.PrimaryState_ACTIVE
			n.mu.Unlock()
			if active {
				n.c.rec.lease(n, until)
			}
		},
	}
}

// crash ends the process as SIGKILL does: its address refuses at once,
// its connections close, its calls to the bucket and to other nodes fail,
// and only its data directory survives. Its components are closed on a
// goroutine of their own (closing waits on the node's clock, which only
// the driver moves); the next boot waits for that.
func (n *simNode) crash() {
	n.mu.Lock()
	if !n.alive {
		n.mu.Unlock()
		return
	}
	n.alive = false
	n.inc++
	n.cancel()
	close(n.dead)
	p, wg := n.p, n.wg
	n.p = nil
	term := n.electorTerm
	n.electorTerm = 0
	active := n.primSt == netsyv1.PrimaryState_ACTIVE
	n.primSt = netsyv1.PrimaryState_REPLICA
	done := make(chan struct{})
	n.closing = done
	n.mu.Unlock()
	n.w.tracef("%s crashes", n.id)
	n.c.net.Isolate(n.id)
	n.c.net.Down(n.id)
	if term != 0 {
		n.c.rec.electorEnd(n, term)
	}
	if active {
		n.c.rec.inactive(n)
	}
	if n.releaseHeld() {
		n.c.rec.frozen(n, false)
		n.c.syncNet()
	}
	go func() {
		defer close(done)
		wg.Wait()
		if p != nil {
			p.close()
		}
	}()
}

// refuse makes the node's address refuse connections while the process
// lives (on: a listener closed by mistake, a port taken by another
// process), or serve again.
func (n *simNode) refuse(on bool) {
	n.mu.Lock()
	if !n.alive || n.refusing == on {
		n.mu.Unlock()
		return
	}
	n.refusing = on
	p := n.p
	n.mu.Unlock()
	n.w.tracef("%s's address refuses: %v", n.id, on)
	if on {
		n.c.net.Down(n.id)
		return
	}
	if p != nil {
		if err := n.listen(p); err != nil {
			n.w.tracef("%s listens again: %v", n.id, err)
		}
	}
}

func (n *simNode) isRefusing() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.refusing
}

// freeze stops the process as SIGSTOP does: its timers and the messages
// for it wait until resume, and its connections carry nothing.
func (n *simNode) freeze() {
	n.w.mu.Lock()
	n.frozen++
	first := n.frozen == 1
	n.w.mu.Unlock()
	if first {
		n.c.rec.frozen(n, true)
		n.w.tracef("%s stalls", n.id)
		n.c.syncNet()
	}
}

func (n *simNode) resume() {
	n.w.mu.Lock()
	if n.frozen > 0 {
		n.frozen--
	}
	still := n.frozen > 0
	n.w.mu.Unlock()
	if !still && n.releaseHeld() {
		n.c.rec.frozen(n, false)
		n.w.tracef("%s resumes", n.id)
		n.c.syncNet()
	}
}

// releaseHeld ends a stall: the events that waited for the process go
// back in the queue at now, its overdue timers first, as the runtime fires
// them on resume, then the messages in the order they arrived. It reports
// whether the node was stalled.
func (n *simNode) releaseHeld() bool {
	w := n.w
	w.mu.Lock()
	defer w.mu.Unlock()
	was := n.frozen > 0 || len(n.held) > 0
	n.frozen = 0
	held := n.held
	n.held = nil
	slices.SortStableFunc(held, func(a, b *item) int {
		switch {
		case a.timer && !b.timer:
			return -1
		case !a.timer && b.timer:
			return 1
		}
		return 0
	})
	for _, it := range held {
		if it.dead {
			continue
		}
		requeueLocked(w, it)
	}
	return was
}

func (n *simNode) cutBucket(by int, failAfter time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.bucket.cuts = max(0, n.bucket.cuts+by)
	if by > 0 {
		n.bucket.failAfter = failAfter
	}
}

func (n *simNode) slowBucket(by time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.bucket.slow = max(0, n.bucket.slow+by)
}

// bucketState is how a node reaches the bucket.
type bucketState struct {
	cuts int
	// failAfter is how long a call takes to fail while cut.
	failAfter time.Duration
	slow      time.Duration
}

type getAnswer struct {
	body []byte
	etag string
}

// errCrashed is what a call made by a process that has ended gets.
var errCrashed = errors.New("sim: the calling process has ended")

// rpc carries one call from node from to the node at address to. handle
// runs in the destination when the request arrives (while the destination
// is stalled it waits) and answers through reply; the answer travels back
// the same way (sendLocked: a cut link holds both until it heals, a link
// that drops may lose either, and the caller then waits for its ctx). A
// crashed destination, or one whose address refuses, answers refused; a
// call from a process that has ended fails at once. The caller's ctx
// ending is seen by the destination at once (gRPC cancellation).
func rpc[T any](ctx context.Context, from *simNode, to string, handle func(ctx context.Context, dst *simNode, reply func(T, error))) (T, error) {
	w := from.w
	type answer struct {
		v   T
		err error
	}
	var zero T
	ch := make(chan answer, 1)
	from.mu.Lock()
	inc, dead := from.inc, from.dead
	alive := from.alive
	from.mu.Unlock()
	if !alive {
		return zero, errCrashed
	}
	deliverBack := func(dst string, a answer) {
		w.mu.Lock()
		defer w.mu.Unlock()
		from.c.sendLocked(dst, from.id, &from.stall, func() {
			if from.incarnation() == inc {
				ch <- a // buffered; only one answer per call
			}
		})
	}
	dst := from.c.node(to)
	if dst == nil {
		return zero, fmt.Errorf("call %s: no such address: %w", to, errRefused)
	}
	w.mu.Lock()
	from.c.sendLocked(from.id, to, &dst.stall, func() {
		if !dst.isAlive() || dst.isRefusing() {
			deliverBack(to, answer{err: fmt.Errorf("call %s: %w", to, errRefused)})
			return
		}
		hctx, cancel := dst.handlerContext(ctx)
		var once sync.Once
		handle(hctx, dst, func(v T, err error) {
			once.Do(func() {
				cancel()
				deliverBack(to, answer{v: v, err: err})
			})
		})
	})
	w.mu.Unlock()
	select {
	case a := <-ch:
		return a.v, a.err
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-dead:
		return zero, errCrashed
	}
}

// storeCall makes one call to the bucket from node n: it travels to the
// bucket, takes effect there at one instant, and its answer travels back.
// While the node is cut from the bucket, a call fails after the cut's
// delay without taking effect; a cut that starts while a call is out
// loses the answer (the call may have landed) the same way. A call from a
// process that has ended fails at once, so that its components close
// without waiting for the bucket (objwal.Close would wait out its
// timeout on every call).
func storeCall[T any](ctx context.Context, n *simNode, f func(objstore.Store) (T, error)) (T, error) {
	type answer struct {
		v   T
		err error
	}
	var zero T
	w := n.w
	ch := make(chan answer, 1)
	n.mu.Lock()
	inc, dead, alive := n.inc, n.dead, n.alive
	b := n.bucket
	n.mu.Unlock()
	if !alive {
		return zero, errCrashed
	}
	fail := func() {
		w.schedule(w.Now()+b.failAfter, &n.stall, false, func() {
			if n.incarnation() == inc {
				ch <- answer{err: errBucketCut}
			}
		})
	}
	oneWay := n.bucketLatency + b.slow
	if b.cuts > 0 {
		fail()
	} else {
		w.schedule(w.Now()+oneWay, nil, false, func() {
			if n.incarnation() != inc {
				return // the process ended before its call left
			}
			v, err := f(n.c.store)
			n.mu.Lock()
			b = n.bucket
			n.mu.Unlock()
			if b.cuts > 0 {
				fail()
				return
			}
			w.schedule(w.Now()+oneWay, &n.stall, false, func() {
				if n.incarnation() == inc {
					ch <- answer{v: v, err: err}
				}
			})
		})
	}
	select {
	case a := <-ch:
		return a.v, a.err
	case <-ctx.Done():
		return zero, ctx.Err()
	case <-dead:
		return zero, errCrashed
	}
}

// nodeStore is the bucket as one node reaches it.
type nodeStore struct{ n *simNode }

var _ objstore.Store = nodeStore{}

func (s nodeStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	a, err := storeCall(ctx, s.n, func(st objstore.Store) (getAnswer, error) {
		b, e, err := st.Get(context.Background(), key)
		return getAnswer{b, e}, err
	})
	return a.body, a.etag, err
}

func (s nodeStore) GetReader(ctx context.Context, key string) (io.ReadCloser, string, error) {
	b, etag, err := s.Get(ctx, key)
	if err != nil {
		return nil, "", err
	}
	return io.NopCloser(strings.NewReader(string(b))), etag, nil
}

func (s nodeStore) PutIfAbsent(ctx context.Context, key string, body []byte) (string, error) {
	body = slices.Clone(body)
	return storeCall(ctx, s.n, func(st objstore.Store) (string, error) {
		return st.PutIfAbsent(context.Background(), key, body)
	})
}

func (s nodeStore) PutIfAbsentFrom(ctx context.Context, key string, r io.ReadSeeker, size int64) (string, error) {
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", err
	}
	return s.PutIfAbsent(ctx, key, b)
}

func (s nodeStore) PutIfMatch(ctx context.Context, key string, body []byte, etag string) (string, error) {
	body = slices.Clone(body)
	return storeCall(ctx, s.n, func(st objstore.Store) (string, error) {
		return st.PutIfMatch(context.Background(), key, body, etag)
	})
}

func (s nodeStore) Delete(ctx context.Context, key string) error {
	_, err := storeCall(ctx, s.n, func(st objstore.Store) (struct{}, error) {
		return struct{}{}, st.Delete(context.Background(), key)
	})
	return err
}

func (s nodeStore) List(ctx context.Context, prefix, startAfter string, limit int) ([]objstore.ObjectInfo, error) {
	return storeCall(ctx, s.n, func(st objstore.Store) ([]objstore.ObjectInfo, error) {
		return st.List(context.Background(), prefix, startAfter, limit)
	})
}

func (s nodeStore) Close() error { return nil }
