package clustersim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/elector"
	"github.com/netsy-io/netsy/internal/heartbeat"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/objstore/mem"
	"github.com/netsy-io/netsy/internal/s3lect"
	"github.com/netsy-io/netsy/internal/view"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// simConfig is what every node of one simulated cluster is started with.
type simConfig struct {
	ClusterID         string
	Quorum            int
	HeartbeatInterval time.Duration
	// LeaseWindow is the Primary's lease (node: two heartbeat intervals).
	LeaseWindow      time.Duration
	HandshakeTimeout time.Duration
	Deregistration   time.Duration // 0: never
	LockLease        time.Duration
	LockRenew        time.Duration
	LockPoll         time.Duration
	// StartingDelay bounds the extra time a promotion takes besides its
	// claim in the bucket (catching up, the engine's promotion).
	StartingDelay time.Duration
}

func defaultConfig() simConfig {
	return simConfig{
		ClusterID:         "sim",
		Quorum:            -1,
		HeartbeatInterval: 500 * time.Millisecond,
		LeaseWindow:       time.Second,
		HandshakeTimeout:  3 * time.Second,
		Deregistration:    0,
		LockLease:         3 * time.Second,
		LockRenew:         time.Second,
		LockPoll:          500 * time.Millisecond,
		StartingDelay:     50 * time.Millisecond,
	}
}

// cluster is the simulated cluster: the world, the bucket, the nodes and
// the recorder that checks the invariants.
type cluster struct {
	w     *world
	cfg   simConfig
	store *mem.Store
	nodes []*simNode
	byID  map[string]*simNode
	rec   *recorder
	seed  uint64
}

func newCluster(seed uint64, cfg simConfig, trace bool) *cluster {
	w := newWorld()
	w.trace = trace
	c := &cluster{w: w, cfg: cfg, byID: make(map[string]*simNode), seed: seed}
	c.store = mem.New(&simClock{w: w, rate: 1000})
	c.rec = newRecorder(w, c.store, cfg.ClusterID)
	return c
}

func (c *cluster) node(id string) *simNode { return c.byID[id] }

// addNode adds a node with the given clock; it is not started.
func (c *cluster) addNode(id string, offset time.Duration, rate int64, bucketLatency time.Duration) *simNode {
	n := &simNode{
		c: c, w: c.w, id: id,
		bucketLatency: bucketLatency,
		rng:           rand.New(rand.NewPCG(c.seed, uint64(len(c.nodes))+1)),
	}
	n.clk = &simClock{w: c.w, owner: &n.stall, offset: offset, rate: rate}
	n.store = nodeStore{n}
	c.nodes = append(c.nodes, n)
	c.byID[id] = n
	return n
}

// setLatency sets every link's latency, both ways, from lat.
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
	c.cutOneWay(a, b, by)
	c.cutOneWay(b, a, by)
}

func (c *cluster) cutOneWay(from, to string, by int) {
	if from == to {
		return
	}
	c.w.setLink(from, to, func(l *link) { l.cuts = max(0, l.cuts+by) })
	c.w.tracef("link %s->%s cuts %+d", from, to, by)
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

// closeAll crashes every node so that every goroutine ends.
func (c *cluster) closeAll() {
	for _, n := range c.nodes {
		n.crash()
	}
}

// bucketState is how a node reaches the bucket.
type bucketState struct {
	cuts int
	// failAfter is how long a call takes to fail while cut.
	failAfter time.Duration
	slow      time.Duration
}

// primaryModel is internal/primary's life cycle, reduced to what the
// election sees (package doc).
type primaryModel struct {
	state netsyv1.PrimaryState
	// term is the term held (Starting, Active) or last held or refused.
	term uint64
	// tookTerm is the highest term ever taken up; it survives crashes
	// (primary-term.json).
	tookTerm   uint64
	leaseUntil time.Time // by this node's clock
	busy       bool
	pending    *netsyv1.ClusterState
}

// simNode is one node: its clock, its link to the bucket, and the roles
// of its current process.
type simNode struct {
	c             *cluster
	w             *world
	id            string
	clk           *simClock
	store         nodeStore
	bucketLatency time.Duration

	stall // guarded by w.mu

	// offerMu orders view offers with the checks made around them.
	offerMu sync.Mutex

	mu         sync.Mutex
	rng        *rand.Rand
	alive      bool
	inc        int
	ctx        context.Context
	cancel     context.CancelFunc
	wg         *sync.WaitGroup
	lock       *s3lect.Election
	hb         *heartbeat.Sender
	view       *view.View
	elector    *elector.Elector
	registered bool
	healthy    bool
	memberID   uint64
	start      time.Time
	bucket     bucketState
	prim       primaryModel
	boots      int
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

func (n *simNode) currentElector() *elector.Elector {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.elector
}

func (n *simNode) primState() (netsyv1.PrimaryState, uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.prim.state, n.prim.term
}

func (n *simNode) info() *netsyv1.NodeInfo {
	return &netsyv1.NodeInfo{NodeId: n.id, PeerAddr: n.id, MemberId: n.memberIDValue()}
}

func (n *simNode) memberIDValue() uint64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.memberID
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

// boot starts a new process of the node, as node.Start does: register
// nodes/{id}.json, then the lock, the Elector runner and heartbeats.
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
	n.view = view.New(n.logger("view"))
	n.start = n.clk.Now()
	n.registered, n.healthy = false, true
	n.prim.state, n.prim.term, n.prim.leaseUntil = netsyv1.PrimaryState_REPLICA, n.prim.tookTerm, time.Time{}
	n.prim.busy, n.prim.pending = false, nil
	ctx := n.ctx
	n.mu.Unlock()
	n.w.tracef("%s boots", n.id)
	n.c.rec.booted(n)
	n.goOwned(func() { n.startup(ctx) })
}

func (n *simNode) startup(ctx context.Context) {
	for {
		err := discovery.Register(ctx, n.store, discovery.Registration{
			NodeID: n.id, ClusterID: n.c.cfg.ClusterID, PeerAddr: n.id, RegisteredAt: n.clk.Now(),
		})
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		// node.Start fails; the supervisor starts it again.
		if n.clk.Sleep(ctx, time.Second) != nil {
			return
		}
	}
	cfg := n.c.cfg
	n.mu.Lock()
	defer n.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	v := n.view
	lock, err := s3lect.New(s3lect.Config{
		Store: n.store, NodeID: n.id, PeerAddr: n.id,
		Lease: cfg.LockLease, Renew: cfg.LockRenew, Poll: cfg.LockPoll,
		MinTerm: v.ElectorTerm, Clock: n.clk, Logger: n.logger("s3lect"),
	})
	if err != nil {
		panic(err)
	}
	n.lock = lock
	n.hb = heartbeat.New(heartbeat.Config{
		Interval: cfg.HeartbeatInterval,
		Clock:    n.clk,
		Logger:   n.logger("heartbeat"),
		State:    n.state,
		Send:     n.sendHeartbeat,
		Answered: n.answered,
		Health:   n.health,
	})
	lock.Start()
	n.wg.Go(func() { n.runElectorTerms(ctx, lock) })
	n.hb.Start()
}

// crash ends the process as SIGKILL does: its address refuses at once,
// its goroutines end, only the persisted primary term survives.
func (n *simNode) crash() {
	n.mu.Lock()
	if !n.alive {
		n.mu.Unlock()
		return
	}
	n.alive = false
	n.inc++
	n.cancel()
	lock, hb, wg := n.lock, n.hb, n.wg
	n.lock, n.hb = nil, nil
	if n.prim.state == netsyv1.PrimaryState_ACTIVE {
		n.c.rec.inactive(n)
	}
	n.prim.state = netsyv1.PrimaryState_REPLICA
	n.mu.Unlock()
	n.w.tracef("%s crashes", n.id)
	if n.releaseHeld() {
		n.c.rec.frozen(n, false)
	}
	if hb != nil {
		hb.Close()
	}
	if lock != nil {
		lock.Close()
	}
	wg.Wait()
	n.mu.Lock()
	n.elector = nil
	n.mu.Unlock()
}

// freeze stops the process as SIGSTOP does: its timers and the messages
// for it wait until resume.
func (n *simNode) freeze() {
	n.w.mu.Lock()
	n.frozen++
	first := n.frozen == 1
	n.w.mu.Unlock()
	if first {
		n.c.rec.frozen(n, true)
		n.w.tracef("%s stalls", n.id)
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
		it.at = w.nowLocked()
		w.seq++
		it.seq = w.seq
		heap.Push(&w.q, it)
	}
	return was
}

// runElectorTerms runs an Elector for every term this node holds the lock,
// as node.roles does.
func (n *simNode) runElectorTerms(ctx context.Context, lock *s3lect.Election) {
	cfg := n.c.cfg
	for {
		var lead s3lect.Leadership
		select {
		case l, ok := <-lock.Leadership():
			if !ok {
				return
			}
			lead = l
		case <-ctx.Done():
			return
		}
		e, err := elector.New(elector.Config{
			Self:      &netsyv1.NodeInfo{NodeId: n.id, PeerAddr: n.id},
			ClusterID: cfg.ClusterID,
			Store:     n.store,
			// The modelled nodes report index 10 and write no wal/.
			DurableTip:            func(context.Context) (uint64, error) { return 10, nil },
			Peers:                 simPeers{n},
			Quorum:                cfg.Quorum,
			HeartbeatInterval:     cfg.HeartbeatInterval,
			DeregistrationTimeout: cfg.Deregistration,
			HandshakeTimeout:      cfg.HandshakeTimeout,
			LeaseWindow:           cfg.LeaseWindow,
			Clock:                 n.clk,
			Logger:                n.logger("node"),
			LockCounter: func() uint64 {
				h, _ := lock.Current()
				return h.Counter
			},
			LockValid: lead.Valid,
		}, lead.Term)
		if err != nil {
			panic(err)
		}
		n.mu.Lock()
		n.elector = e
		hb := n.hb
		n.mu.Unlock()
		n.c.rec.electorStart(n, lead.Term)
		term := lead.Term
		stopRec := context.AfterFunc(lead.Ctx, func() { n.c.rec.electorEnd(n, term) })
		if hb != nil {
			hb.Now()
		}
		sepDone := make(chan struct{})
		go func() {
			defer close(sepDone)
			n.separateRoles(lead.Ctx, lock, e)
		}()
		e.Run(lead.Ctx)
		<-sepDone
		if stopRec() {
			// Run returned before the lock was lost (it cannot today).
			n.c.rec.electorEnd(n, term)
		}
		n.mu.Lock()
		n.elector = nil
		n.mu.Unlock()
	}
}

// separateRoles resigns the lock of a node that is Elector and Active
// Primary while another node is Healthy, as node.roles does.
func (n *simNode) separateRoles(ctx context.Context, lock *s3lect.Election, e *elector.Elector) {
	hbi := n.c.cfg.HeartbeatInterval
	t := n.clk.NewTicker(2 * hbi)
	defer t.Stop()
	var since time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if s, _ := n.primState(); s != netsyv1.PrimaryState_ACTIVE {
			since = time.Time{}
			continue
		}
		cs, err := e.ClusterState(ctx, true)
		if err != nil {
			continue
		}
		other := ""
		for _, ns := range cs.Nodes {
			if ns.Info.NodeId != n.id && ns.Health == netsyv1.HealthState_HEALTHY {
				other = ns.Info.NodeId
				break
			}
		}
		switch {
		case other == "":
			since = time.Time{}
		case since.IsZero():
			since = n.clk.Now()
		case n.clk.Since(since) >= 4*hbi:
			n.w.tracef("%s resigns the Elector lock to separate it from the Primary", n.id)
			n.mu.Lock()
			base := n.ctx
			n.mu.Unlock()
			rctx, cancel := clock.WithTimeout(base, n.clk, 5*time.Second)
			_ = lock.Resign(rctx)
			cancel()
			return
		}
	}
}

// electorTarget is whom heartbeats go to: this node's own Elector, or the
// address of the newer of what the view and the lock say (node.roles).
func (n *simNode) electorTarget() (*elector.Elector, string) {
	n.mu.Lock()
	e, v, lock := n.elector, n.view, n.lock
	n.mu.Unlock()
	if e != nil {
		return e, ""
	}
	cs := v.Current()
	var h s3lect.Holder
	ok := false
	if lock != nil {
		h, ok = lock.Current()
	}
	switch {
	case cs != nil && cs.Elector != nil && (!ok || cs.ElectorTerm >= h.Term):
		return nil, cs.Elector.PeerAddr
	case ok:
		return nil, h.PeerAddr
	}
	return nil, ""
}

// errNotElector is the Elector service's refusal on a node that is not.
var errNotElector = errors.New("sim: this node is not the Elector")

// state is this node's heartbeat, as node.roles builds it.
func (n *simNode) state() *netsyv1.Heartbeat {
	n.mu.Lock()
	defer n.mu.Unlock()
	ps, held := n.prim.state, n.prim.term
	hb := &netsyv1.Heartbeat{
		NodeId:            n.id,
		MemberId:          n.memberID,
		Health:            netsyv1.HealthState_HEALTHY,
		PrimaryState:      ps,
		LatestIndex:       10,
		LatestRevision:    10,
		StartTimeUnixNano: n.start.UnixNano(),
		ElectorTerm:       n.view.ElectorTerm(),
	}
	if cs := n.view.Current(); cs != nil {
		hb.PrimaryTerm = cs.PrimaryTerm
		hb.PrimaryId = cs.GetPrimary().GetNodeId()
	}
	if ps != netsyv1.PrimaryState_REPLICA {
		hb.PrimaryTerm, hb.PrimaryId = held, n.id
	} else if held > hb.PrimaryTerm {
		hb.PrimaryTerm = held
	}
	switch {
	case !n.registered:
		hb.Health = netsyv1.HealthState_LOADING
	case !n.healthy:
		hb.Health = netsyv1.HealthState_DEGRADED
	}
	return hb
}

func (n *simNode) nodeState() *netsyv1.NodeState {
	st := n.state()
	n.mu.Lock()
	v := n.view
	n.mu.Unlock()
	ns := &netsyv1.NodeState{State: st, Info: n.info()}
	if cs := v.Current(); cs != nil {
		ns.ClusterState = proto.Clone(cs).(*netsyv1.ClusterState)
	}
	return ns
}

// sendHeartbeat is the heartbeat sender's Send (node.roles.sendHeartbeat).
func (n *simNode) sendHeartbeat(ctx context.Context, hb *netsyv1.Heartbeat) (*netsyv1.HeartbeatResponse, error) {
	n.mu.Lock()
	registered, lock := n.registered, n.lock
	n.mu.Unlock()
	if !registered {
		if err := n.register(ctx); err != nil {
			return nil, err
		}
		hb = n.state()
	}
	e, target := n.electorTarget()
	var resp *netsyv1.HeartbeatResponse
	var err error
	switch {
	case e != nil:
		resp, err = e.Heartbeat(ctx, hb)
		if err == nil {
			n.c.rec.answered(n, e.Term())
		}
	case target == "" || target == n.id:
		return nil, heartbeat.ErrNoElector
	default:
		req := proto.Clone(hb).(*netsyv1.Heartbeat)
		resp, err = rpc(ctx, n, target, func(ctx context.Context, dst *simNode, reply func(*netsyv1.HeartbeatResponse, error)) {
			dst.goOwned(func() {
				e := dst.currentElector()
				if e == nil {
					reply(nil, errNotElector)
					return
				}
				resp, err := e.Heartbeat(ctx, req)
				if err == nil {
					dst.c.rec.answered(dst, e.Term())
					resp = proto.Clone(resp).(*netsyv1.HeartbeatResponse)
				}
				reply(resp, err)
			})
		})
	}
	if errors.Is(err, errNotElector) || errors.Is(err, elector.ErrLockLost) || errors.Is(err, elector.ErrStopped) {
		if lock != nil {
			lock.Suspect()
		}
		return nil, heartbeat.ErrNoElector
	}
	if err != nil && strings.Contains(err.Error(), "is not registered") {
		n.mu.Lock()
		n.registered = false
		n.mu.Unlock()
	}
	return resp, err
}

type registration struct {
	id uint64
	cs *netsyv1.ClusterState
}

// register registers with the Elector (node.roles.register).
func (n *simNode) register(ctx context.Context) error {
	e, target := n.electorTarget()
	info := n.info()
	var r registration
	var err error
	switch {
	case e != nil:
		r.id, r.cs, err = e.Register(ctx, info, n.c.cfg.ClusterID)
	case target == "" || target == n.id:
		return heartbeat.ErrNoElector
	default:
		clusterID := n.c.cfg.ClusterID
		r, err = rpc(ctx, n, target, func(ctx context.Context, dst *simNode, reply func(registration, error)) {
			dst.goOwned(func() {
				e := dst.currentElector()
				if e == nil {
					reply(registration{}, errNotElector)
					return
				}
				id, cs, err := e.Register(ctx, info, clusterID)
				if cs != nil {
					cs = proto.Clone(cs).(*netsyv1.ClusterState)
				}
				reply(registration{id: id, cs: cs}, err)
			})
		})
	}
	if err != nil {
		return fmt.Errorf("register with the Elector: %w", err)
	}
	n.mu.Lock()
	n.memberID = r.id
	n.registered = true
	n.mu.Unlock()
	n.offer(r.cs, "registration")
	return nil
}

// answered handles a heartbeat answer (node.roles.answered).
func (n *simNode) answered(resp *netsyv1.HeartbeatResponse, sentAt time.Time) {
	cs := resp.GetClusterState()
	accepted, _ := n.offer(cs, "heartbeat")
	n.mu.Lock()
	if accepted && cs.GetPrimary().GetNodeId() == n.id && cs.GetPrimaryTerm() == n.prim.term {
		n.answeredLocked(sentAt)
	}
	lock := n.lock
	n.mu.Unlock()
	if el := cs.GetElector(); el != nil && el.NodeId != n.id && lock != nil {
		lock.Observed(s3lect.Holder{NodeID: el.NodeId, PeerAddr: el.PeerAddr, Term: cs.ElectorTerm, Counter: resp.LockCounter})
	}
}

func (n *simNode) health(ok bool, err error) {
	n.mu.Lock()
	n.healthy = ok
	lock := n.lock
	n.mu.Unlock()
	n.c.rec.health(n, ok)
	if !ok && lock != nil {
		lock.Suspect()
	}
}

// offer hands a Cluster State to the view and what it accepted to the
// Primary role (node.roles.watchView, without the goroutine).
func (n *simNode) offer(cs *netsyv1.ClusterState, from string) (bool, *netsyv1.ClusterState) {
	n.offerMu.Lock()
	defer n.offerMu.Unlock()
	n.mu.Lock()
	v := n.view
	n.mu.Unlock()
	before := v.ElectorTerm()
	ok, cur := v.Offer(cs, from)
	n.c.rec.offered(n, cs, ok, before, from)
	if ok {
		n.mu.Lock()
		n.observeLocked(cur)
		n.mu.Unlock()
	}
	return ok, cur
}

// observeLocked is primary.observe.
func (n *simNode) observeLocked(cs *netsyv1.ClusterState) {
	p := &n.prim
	if !n.alive {
		return
	}
	if p.busy {
		p.pending = cs
		return
	}
	named := cs.GetPrimary().GetNodeId() == n.id
	switch p.state {
	case netsyv1.PrimaryState_REPLICA:
		switch {
		case !named:
		case cs.PrimaryTerm <= p.tookTerm:
			p.term = cs.PrimaryTerm
		default:
			n.promoteLocked(cs.PrimaryTerm)
		}
	case netsyv1.PrimaryState_ACTIVE:
		if !named && cs.Primary != nil && cs.PrimaryTerm > p.term {
			n.w.tracef("%s steps down: %s is Primary at term %d", n.id, cs.Primary.NodeId, cs.PrimaryTerm)
			p.state = netsyv1.PrimaryState_REPLICA
			n.c.rec.inactive(n)
		}
	}
}

// promoteLocked runs the Starting step: claim the term in the bucket,
// then a while for catching up, then Active with a fresh lease.
func (n *simNode) promoteLocked(term uint64) {
	p := &n.prim
	p.busy = true
	p.state, p.term = netsyv1.PrimaryState_STARTING, term
	p.tookTerm = max(p.tookTerm, term)
	n.c.rec.promoted(n, term)
	n.w.tracef("%s Starting at term %d", n.id, term)
	var extra time.Duration
	if d := n.c.cfg.StartingDelay; d > 0 {
		extra = time.Duration(n.rng.Int64N(int64(d)))
	}
	ctx := n.ctx
	n.wg.Go(func() {
		key := fmt.Sprintf("sim/claims/%020d", term)
		_, err := storeCall(ctx, n, func(s objstore.Store) (string, error) {
			etag, err := s.PutIfAbsent(context.Background(), key, []byte(n.id))
			if err != nil {
				return etag, err
			}
			// The engine's catch-up: a claim of a higher term stands for
			// a newer Primary's entries, and the engine refuses to write
			// at a term below its log's.
			newer, err := s.List(context.Background(), "sim/claims/", key, 1)
			if err == nil && len(newer) > 0 {
				err = fmt.Errorf("promote at term %d: the log holds a newer term (%s)", term, newer[0].Key)
			}
			return etag, err
		})
		if err == nil && extra > 0 {
			err = n.clk.Sleep(ctx, extra)
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		p.busy = false
		if err != nil {
			n.w.tracef("%s Starting at term %d failed: %v", n.id, term, err)
			p.state = netsyv1.PrimaryState_REPLICA
		} else {
			p.state = netsyv1.PrimaryState_ACTIVE
			// The lease counts only from answers naming this node.
			n.w.tracef("%s Active at term %d", n.id, term)
			n.c.rec.active(n, term, p.leaseUntil)
		}
		if cs := p.pending; cs != nil {
			p.pending = nil
			n.observeLocked(cs)
		}
	})
}

// answeredLocked is primary.Answered: the lease runs from the send.
func (n *simNode) answeredLocked(sentAt time.Time) {
	p := &n.prim
	if until := sentAt.Add(n.c.cfg.LeaseWindow); until.After(p.leaseUntil) {
		p.leaseUntil = until
		if p.state == netsyv1.PrimaryState_ACTIVE {
			n.c.rec.lease(n, until)
		}
	}
}

// drain makes an Active Primary a Replica (a handoff).
func (n *simNode) drain() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch n.prim.state {
	case netsyv1.PrimaryState_ACTIVE:
		n.prim.state = netsyv1.PrimaryState_REPLICA
		n.c.rec.inactive(n)
		return nil
	case netsyv1.PrimaryState_REPLICA:
		return nil
	}
	return fmt.Errorf("cannot drain: this node is %s", n.prim.state)
}

// leaseHeld reports whether the node is Active with a current lease.
func (n *simNode) leaseHeld() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.alive && n.prim.state == netsyv1.PrimaryState_ACTIVE && n.clk.Now().Before(n.prim.leaseUntil)
}

// simPeers is how a node's Elector reaches nodes (node.nodePeers).
type simPeers struct{ n *simNode }

func (p simPeers) GetNodeState(ctx context.Context, info *netsyv1.NodeInfo) (*netsyv1.NodeState, error) {
	if info.NodeId == p.n.id {
		return p.n.nodeState(), nil
	}
	return rpc(ctx, p.n, info.PeerAddr, func(_ context.Context, dst *simNode, reply func(*netsyv1.NodeState, error)) {
		reply(dst.nodeState(), nil)
	})
}

func (p simPeers) PushClusterState(ctx context.Context, info *netsyv1.NodeInfo, cs *netsyv1.ClusterState) (*netsyv1.PushClusterStateResponse, error) {
	if info.NodeId == p.n.id {
		ok, cur := p.n.offer(cs, "push")
		return &netsyv1.PushClusterStateResponse{Accepted: ok, Current: cur}, nil
	}
	sent := proto.Clone(cs).(*netsyv1.ClusterState)
	from := "push from " + p.n.id
	return rpc(ctx, p.n, info.PeerAddr, func(_ context.Context, dst *simNode, reply func(*netsyv1.PushClusterStateResponse, error)) {
		ok, cur := dst.offer(sent, from)
		reply(&netsyv1.PushClusterStateResponse{Accepted: ok, Current: proto.Clone(cur).(*netsyv1.ClusterState)}, nil)
	})
}

func (p simPeers) Drain(ctx context.Context, info *netsyv1.NodeInfo) error {
	if info.NodeId == p.n.id {
		return p.n.drain()
	}
	_, err := rpc(ctx, p.n, info.PeerAddr, func(_ context.Context, dst *simNode, reply func(struct{}, error)) {
		reply(struct{}{}, dst.drain())
	})
	return err
}

// storeCall makes one call to the bucket from node n: it travels to the
// bucket, takes effect there at one instant, and its answer travels back.
// While the node is cut from the bucket, a call fails after the cut's
// delay without taking effect; a cut that starts while a call is out
// loses the answer (the call may have landed) the same way.
func storeCall[T any](ctx context.Context, n *simNode, f func(objstore.Store) (T, error)) (T, error) {
	type answer struct {
		v   T
		err error
	}
	w := n.w
	ch := make(chan answer, 1)
	n.mu.Lock()
	inc := n.inc
	b := n.bucket
	n.mu.Unlock()
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
		var zero T
		return zero, ctx.Err()
	}
}

// nodeStore is the bucket as one node reaches it.
type nodeStore struct{ n *simNode }

var _ objstore.Store = nodeStore{}

type getAnswer struct {
	body []byte
	etag string
}

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
