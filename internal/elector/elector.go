package elector

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// Defaults for Config fields left zero.
const (
	DefaultHeartbeatInterval     = 500 * time.Millisecond
	DefaultDeregistrationTimeout = 3 * time.Minute
	DefaultRetryInterval         = 500 * time.Millisecond
	// maxEvents is how many events GetClusterState returns.
	maxEvents = 100
)

// ErrNotLoaded is returned while the Elector has not loaded the node map.
var ErrNotLoaded error = &peer.CodedError{C: codes.Unavailable, R: peer.ReasonNotLoaded, Msg: "elector: still loading the node map"}

// ErrLockLost is returned by an Elector whose lock ran out by its own
// clock before Run's context ended (its process was stopped, and the
// election's goroutine has not run yet).
var ErrLockLost error = &peer.CodedError{C: codes.FailedPrecondition, R: peer.ReasonNotElector, Msg: "elector: this node is not the Elector any more: its lock ran out"}

// ErrStopped is returned by an Elector whose Run returned (its lock was
// lost or given up): a request that finds it so fails at once instead of
// waiting for its caller's deadline.
var ErrStopped error = &peer.CodedError{C: codes.FailedPrecondition, R: peer.ReasonNotElector, Msg: "elector: this node is not the Elector any more: it stopped"}

// ErrElectingSuccessor answers the heartbeat of the Primary this Elector is
// replacing while a round that may elect its successor runs: an answer
// naming it would renew its lease past the round's check (package doc,
// rule 5).
var ErrElectingSuccessor error = &peer.CodedError{C: codes.Unavailable, R: peer.ReasonElectingSuccessor, Msg: "elector: electing a successor to this Primary; its lease is not renewed"}

// Peers is what the Elector says to other nodes (and to itself).
type Peers interface {
	GetNodeState(ctx context.Context, n *netsyv1.NodeInfo) (*netsyv1.NodeState, error)
	PushClusterState(ctx context.Context, n *netsyv1.NodeInfo, cs *netsyv1.ClusterState) (*netsyv1.PushClusterStateResponse, error)
	// Drain asks a Primary to drain and become a Replica.
	Drain(ctx context.Context, n *netsyv1.NodeInfo) error
}

// Config configures an Elector.
type Config struct {
	// Self is this node.
	Self      *netsyv1.NodeInfo
	ClusterID string
	Store     objstore.Store
	Peers     Peers
	// Quorum is replication.quorum: 0, N > 0 or -1.
	Quorum                int
	HeartbeatInterval     time.Duration
	DeregistrationTimeout time.Duration // 0: never; negative: the default
	// HandshakeTimeout is how long an election waits for an unreachable
	// previous Primary that was last seen Draining (time to finish its
	// flush), since the Elector last heard from it; never less than the
	// lease wait. A previous Primary last seen Active is waited for only
	// until its lease has run out (package doc, rule 5).
	HandshakeTimeout time.Duration
	// LeaseWindow is the Primary's lease (default 2 heartbeat intervals;
	// a node passes its own, roles.LeaseWindow).
	LeaseWindow   time.Duration
	RetryInterval time.Duration
	Clock         clock.Clock
	Logger        hclog.Logger
	// OnEvent is told every event (for metrics); it must not block.
	OnEvent func(*netsyv1.Event)
	// LockCounter returns the counter of the Elector's lock object, for
	// heartbeat answers (nodes need not read the bucket while the Elector
	// answers them).
	LockCounter func() uint64
	// LockValid reports whether the lock is still valid by this node's
	// clock at the moment of asking (s3lect.Leadership.Valid). It is
	// checked before every answer and push another node relies on; nil:
	// only Run's context counts.
	LockValid func() bool
	// DurableTip reads the highest log index object storage holds
	// (objwal.DurableTip over Store). A node Degraded past the
	// deregistration timeout is deregistered only once its last reported
	// index and its mark (package doc, rule 3a) are at or below it; nil:
	// the tip is never known, so no node that stopped answering is ever
	// deregistered without force (except under quorum 0).
	DurableTip func(ctx context.Context) (index uint64, err error)
	// DurableTipInterval is the least time between two reads of the tip
	// while a node waits on it (default 3s).
	DurableTipInterval time.Duration
	// OnLoaded, when set, is told once the node map is loaded, so that a
	// registration or heartbeat refused with ErrNotLoaded meanwhile (this
	// node's own, at start) goes again at once rather than at its next
	// beat. It must not block.
	OnLoaded func()
}

func (c *Config) setDefaults() error {
	switch {
	case c.Self == nil || c.Self.NodeId == "":
		return errors.New("elector: Config.Self is missing")
	case c.Store == nil || c.Peers == nil:
		return errors.New("elector: Config.Store and Config.Peers are required")
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.DeregistrationTimeout < 0 {
		c.DeregistrationTimeout = DefaultDeregistrationTimeout
	}
	if c.LeaseWindow <= 0 {
		c.LeaseWindow = 2 * c.HeartbeatInterval
	}
	if c.RetryInterval <= 0 {
		c.RetryInterval = DefaultRetryInterval
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.OnEvent == nil {
		c.OnEvent = func(*netsyv1.Event) {}
	}
	if c.LockCounter == nil {
		c.LockCounter = func() uint64 { return 0 }
	}
	if c.LockValid == nil {
		c.LockValid = func() bool { return true }
	}
	return nil
}

// leaseWait is how long after the last heartbeat answer that named a
// Primary (or after taking over) an Elector waits before it elects a
// successor: the lease plus a quarter, so a Primary whose clock runs up to
// 25% slower than the Elector's has given its lease up first (package
// doc, "Failover time").
func (c *Config) leaseWait() time.Duration { return c.LeaseWindow + c.LeaseWindow/4 }

// nodeRec is the Elector's record of one node.
type nodeRec struct {
	info *netsyv1.NodeInfo
	last *netsyv1.Heartbeat
	// lastAt is when the last heartbeat arrived, by the Elector's clock;
	// zero if none since this Elector took over.
	lastAt time.Time
	// health as judged; degradedAt is when it became Degraded (or when
	// this Elector took over, for a node not heard from).
	health     netsyv1.HealthState
	degradedAt time.Time
	// mark bounds what the node may have acknowledged or receipted after
	// its last report: the log index an Active Primary other than it
	// reported in the first heartbeat this Elector received from it after
	// the node was marked Degraded (dereg.go). Frozen once taken, cleared
	// when the node is marked Degraded again.
	mark deregMark
}

// Elector runs tier 2 while its lock is held. Create one per lock term.
type Elector struct {
	cfg     Config
	log     hclog.Logger
	term    uint64
	members *discovery.MembersFile

	reqs chan func()
	// stopped is closed when Run returns: requests then fail at once.
	stopped chan struct{}
	// runCtx is Run's context, for work requests start (set before the
	// loop takes any).
	runCtx context.Context

	// Owned by the loop goroutine.
	started     time.Time
	loaded      bool
	nodes       map[string]*nodeRec
	primary     *netsyv1.NodeInfo
	primaryTerm uint64
	// maxTerm is the highest primary term handed out (members.json, and
	// any term a node reported): only a Primary at this term is adopted.
	maxTerm uint64
	// answeredPrimary is when this Elector last answered a heartbeat of
	// the Primary with a state naming it Primary at primaryTerm (the
	// answer that renews its lease), or when it took over if it has not
	// (a previous Elector may have, until then). The successor waits a
	// lease wait from it.
	answeredPrimary time.Time
	// heardPrimary is when the Elector last heard from the Primary (a
	// heartbeat or a handshake answer), or took over.
	heardPrimary time.Time
	version      uint64
	events       []*netsyv1.Event
	electing     bool
	nextTry      time.Time
	// waitingLease says the last round waits for a previous Primary's
	// lease until nextTry: a report that it gave the lease up starts the
	// next round at once (gaveUpReport).
	waitingLease bool
	// parked are requests that wait for the map to load.
	parked  []func(error)
	handoff *handoffReq
	pushGen uint64
	// tip is what the Elector knows of the bucket's durable tip, and which
	// nodes wait on it to be deregistered (dereg.go).
	tip tipState

	wg sync.WaitGroup
}

type handoffReq struct {
	to   string
	done chan error
	// drained is set once the old Primary answered the Drain.
	drained bool
	from    *netsyv1.NodeInfo
}

// New returns an Elector for the lock term.
func New(cfg Config, term uint64) (*Elector, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	return &Elector{
		cfg:     cfg,
		log:     cfg.Logger.Named("elector").With("elector_term", term),
		term:    term,
		members: discovery.NewMembersFile(cfg.Store, cfg.ClusterID),
		reqs:    make(chan func()),
		stopped: make(chan struct{}),
		nodes:   make(map[string]*nodeRec),
	}, nil
}

// Term is the lock term this Elector acts under.
func (e *Elector) Term() uint64 { return e.term }

// Run acts as the Elector until ctx ends (the lock is lost or given up).
func (e *Elector) Run(ctx context.Context) {
	defer close(e.stopped)
	e.runCtx = ctx
	e.started = e.cfg.Clock.Now()
	e.heardPrimary, e.answeredPrimary = e.started, e.started
	e.emit("elector_acquired", e.cfg.Self.NodeId, "")
	loadDone := make(chan error, 1)
	e.goOwned(func() { loadDone <- e.load(ctx) })
	ticker := e.cfg.Clock.NewTicker(e.cfg.HeartbeatInterval / 2)
	defer ticker.Stop()
	electDone := make(chan electResult, 1)
	defer e.wg.Wait()
	// retry wakes the loop when the next round is due (nextTry), so a
	// round starts at that instant, not at the next tick after it.
	var retry clock.Timer
	var retryAt time.Time
	defer func() {
		if retry != nil {
			retry.Stop()
		}
	}()
	retryC := func() <-chan time.Time {
		if retry == nil {
			return nil
		}
		return retry.C()
	}
	for {
		select {
		case <-ctx.Done():
			e.log.Info("no longer the Elector")
			for _, p := range e.parked {
				p(ErrNotLoaded)
			}
			e.failHandoff(errors.New("the Elector lost its lock"))
			return
		case f := <-e.reqs:
			f()
		case err := <-loadDone:
			if err != nil {
				e.log.Error("loading the node map failed; retrying", "error", err)
				e.goOwned(func() {
					if e.cfg.Clock.Sleep(ctx, e.cfg.RetryInterval) == nil {
						loadDone <- e.load(ctx)
					}
				})
				continue
			}
			e.loaded = true
			for _, p := range e.parked {
				p(nil)
			}
			e.parked = nil
			e.pushAll(ctx)
			if e.cfg.OnLoaded != nil {
				e.cfg.OnLoaded()
			}
		case r := <-electDone:
			e.electing = false
			e.electFinished(ctx, r)
		case now := <-ticker.C():
			e.tick(ctx, now)
		case <-retryC():
			retry, retryAt = nil, time.Time{}
		}
		if !e.loaded || e.electing || !e.needElection() {
			continue
		}
		if now := e.cfg.Clock.Now(); now.Before(e.nextTry) {
			if !retryAt.Equal(e.nextTry) {
				if retry != nil {
					retry.Stop()
				}
				retry, retryAt = e.cfg.Clock.NewTimer(e.nextTry.Sub(now)), e.nextTry
			}
			continue
		}
		e.startElection(ctx, electDone)
	}
}

// goOwned runs f on a goroutine Run waits for.
func (e *Elector) goOwned(f func()) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		f()
	}()
}

// do runs f in the loop and waits for it; with needLoaded, f waits until
// the map is loaded (ErrNotLoaded if the Elector stops first).
func (e *Elector) do(ctx context.Context, needLoaded bool, f func() error) error {
	// req.mu orders f against the caller giving up, so whatever f writes
	// for the caller is either written before the caller returns or not
	// at all (f is skipped once abandoned).
	var req struct {
		mu        sync.Mutex
		abandoned bool
	}
	res := make(chan error, 1)
	run := func(err error) {
		req.mu.Lock()
		defer req.mu.Unlock()
		if req.abandoned {
			return
		}
		if err == nil {
			err = f()
		}
		res <- err
	}
	select {
	case e.reqs <- func() {
		if needLoaded && !e.loaded {
			// Answered once the map is loaded (or the Elector stops).
			e.parked = append(e.parked, run)
			return
		}
		run(nil)
	}:
	case <-e.stopped:
		return ErrStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-res:
		return err
	case <-ctx.Done():
		req.mu.Lock()
		defer req.mu.Unlock()
		select {
		case err := <-res:
			return err
		default:
			req.abandoned = true
			return ctx.Err()
		}
	}
}

// load reads nodes/ and members.json, creating members.json (with member
// ids for every registered node) if it is missing, then asks every node
// for its state to find an Active Primary.
func (e *Elector) load(ctx context.Context) error {
	regs, bad, err := discovery.List(ctx, e.cfg.Store)
	if err != nil {
		return fmt.Errorf("list node registrations: %w", err)
	}
	for _, b := range bad {
		e.log.Error("ignoring a node registration", "error", b)
	}
	var foreign []string
	kept := regs[:0]
	for _, r := range regs {
		if r.ClusterID != e.cfg.ClusterID {
			foreign = append(foreign, fmt.Sprintf("%s (cluster %q)", r.NodeID, r.ClusterID))
			continue
		}
		kept = append(kept, r)
	}
	if len(foreign) > 0 {
		e.log.Error("ignoring registrations of another cluster id on this bucket", "nodes", foreign, "cluster_id", e.cfg.ClusterID)
	}
	regs = kept
	m, err := e.members.Update(ctx, func(m *discovery.Members) error {
		m.ElectorTerm = max(m.ElectorTerm, e.term)
		m.Assign(e.cfg.Self.NodeId)
		for _, r := range regs {
			m.Assign(r.NodeID)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("members.json: %w", err)
	}
	states := make(map[string]*netsyv1.NodeState)
	var mu sync.Mutex
	var wg sync.WaitGroup
	infos := make([]*netsyv1.NodeInfo, 0, len(regs))
	for _, r := range regs {
		info := &netsyv1.NodeInfo{NodeId: r.NodeID, MemberId: m.IDs[r.NodeID], PeerAddr: r.PeerAddr, ClientUrls: r.ClientURLs, HttpAddr: r.HTTPAddr, Name: r.Name}
		infos = append(infos, info)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One heartbeat interval, as a round's questions (askStates):
			// a node that has not answered by then is unknown here, as
			// one that refused is, and the election handles both. On a
			// restart of every node the others listen long before they
			// serve, and a longer wait held the first election back.
			cctx, cancel := clock.WithTimeout(ctx, e.cfg.Clock, e.cfg.HeartbeatInterval)
			defer cancel()
			st, err := e.cfg.Peers.GetNodeState(cctx, info)
			if err == nil {
				mu.Lock()
				states[info.NodeId] = st
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return e.do(ctx, false, func() error {
		now := e.cfg.Clock.Now()
		for _, info := range infos {
			if e.nodes[info.NodeId] == nil {
				// A node that registered while the map loaded keeps
				// what it registered (the listing may predate it).
				e.addNode(info, now)
			}
		}
		e.maxTerm = max(e.maxTerm, m.PrimaryTerm)
		e.adoptFromStates(states)
		return nil
	})
}

// adoptFromStates learns the Primary from what nodes said at take-over:
// one that says it is Active at the highest term handed out, else the one
// the nodes were last told of (the handshake then decides whether it is
// gone). An Active node at a lower term is not adopted: a newer Primary
// may hold a lease somewhere this Elector cannot see.
func (e *Elector) adoptFromStates(states map[string]*netsyv1.NodeState) {
	var best *netsyv1.NodeState
	var known *netsyv1.ClusterState
	for _, st := range states {
		hb := st.GetState()
		if hb.GetPrimaryState() != netsyv1.PrimaryState_REPLICA {
			e.maxTerm = max(e.maxTerm, hb.GetPrimaryTerm())
		}
		if cs := st.GetClusterState(); cs.GetPrimary() != nil && (known == nil || cs.PrimaryTerm > known.PrimaryTerm) {
			known = cs
		}
		if r := e.nodes[hb.GetNodeId()]; r != nil {
			r.last = hb
		}
	}
	for _, st := range states {
		if hb := st.GetState(); hb.GetPrimaryState() == netsyv1.PrimaryState_ACTIVE && hb.PrimaryTerm == e.maxTerm && e.nodes[hb.NodeId] != nil {
			best = st
		}
	}
	switch {
	case best != nil:
		e.setPrimary(e.nodes[best.State.NodeId].info, best.State.PrimaryTerm, "adopted")
	case known != nil && known.PrimaryTerm < e.maxTerm:
		// A higher term was handed out since: whoever took it up is
		// unknown here, and naming the older Primary would renew its
		// lease (see elect, which waits out the unknown one's).
		e.log.Info("the nodes knew a Primary at a term below the highest handed out; electing", "previous", known.Primary.NodeId, "primary_term", known.PrimaryTerm, "max_term", e.maxTerm)
	case known != nil && e.nodes[known.Primary.NodeId] != nil:
		// Not Active now (or not reachable): the previous Primary, to be
		// replaced by an election that starts with the handshake.
		e.primary = e.nodes[known.Primary.NodeId].info
		e.primaryTerm = known.PrimaryTerm
		e.log.Info("the nodes knew a Primary that does not say it is Active; electing", "previous", e.primary.NodeId, "primary_term", e.primaryTerm)
	}
}

func (e *Elector) addNode(info *netsyv1.NodeInfo, now time.Time) *nodeRec {
	r := e.nodes[info.NodeId]
	if r == nil {
		r = &nodeRec{health: netsyv1.HealthState_LOADING, degradedAt: now}
		e.nodes[info.NodeId] = r
	}
	r.info = info
	return r
}

func (e *Elector) setPrimary(info *netsyv1.NodeInfo, term uint64, how string) {
	if e.primary == nil || e.primary.NodeId != info.NodeId || e.primaryTerm != term {
		// No answer of this Elector's has named it at this term yet (a
		// push renews no lease); one of a previous Elector's may have
		// (an adopted Primary), until this one took over.
		e.answeredPrimary = e.started
	}
	e.primary, e.primaryTerm = info, term
	e.heardPrimary = e.cfg.Clock.Now()
	e.version++
	e.emit("primary_"+how, info.NodeId, "")
	e.log.Info("Primary "+how, "node", info.NodeId, "primary_term", term)
}

// needElection reports whether the cluster lacks a working Primary.
func (e *Elector) needElection() bool {
	if e.handoff != nil {
		return true
	}
	if e.primary == nil {
		return len(e.nodes) > 0
	}
	r := e.nodes[e.primary.NodeId]
	if r == nil {
		return true // deregistered
	}
	if r.health == netsyv1.HealthState_DEGRADED {
		return true
	}
	if hb := r.last; hb != nil && hb.PrimaryTerm == e.primaryTerm && hb.PrimaryId == e.primary.NodeId &&
		hb.PrimaryState == netsyv1.PrimaryState_REPLICA {
		// It knows it is the Primary at this term and is a Replica: it
		// stepped down, failed to start, or restarted (a restarted node
		// never takes up a term it had before: the audit must run again).
		return true
	}
	return false
}

// tick judges health, deregisters long-Degraded nodes and probes a
// Primary whose heartbeats stopped.
func (e *Elector) tick(ctx context.Context, now time.Time) {
	if !e.loaded {
		return
	}
	missed := 2 * e.cfg.HeartbeatInterval
	changed := false
	for id, r := range e.nodes {
		silent := r.lastAt.IsZero() && now.Sub(e.started) > missed || !r.lastAt.IsZero() && now.Sub(r.lastAt) > missed
		if silent && r.health != netsyv1.HealthState_DEGRADED {
			r.markDegraded(now)
			e.emit("node_degraded", id, "missed 2 heartbeats")
			e.log.Warn("node Degraded: missed 2 heartbeats", "node", id)
		}
		if r.health == netsyv1.HealthState_DEGRADED && e.cfg.DeregistrationTimeout > 0 && now.Sub(r.degradedAt) > e.cfg.DeregistrationTimeout && id != e.cfg.Self.NodeId {
			if !e.mayAutoDeregister(id, r) {
				// Still counted: the cluster waits for it (SPEC §5.2).
				continue
			}
			e.log.Warn("deregistering a node Degraded for longer than the deregistration timeout", "node", id, "timeout", e.cfg.DeregistrationTimeout,
				"last_index", lastIndexOf(r.last), "primary_index", r.mark.index, "primary", r.mark.from, "durable_tip", e.tip.index)
			delete(e.nodes, id)
			e.emit("node_deregistered", id, "degraded longer than the deregistration timeout; object storage holds every entry it may have acknowledged")
			e.goOwned(func() {
				if err := discovery.Deregister(ctx, e.cfg.Store, id); err != nil && ctx.Err() == nil {
					e.log.Warn("delete a node's registration", "node", id, "error", err)
				}
			})
			changed = true
		}
	}
	e.refreshTip(ctx, now)
	// A Primary one heartbeat late is probed: an election round can then
	// start (and wait out the lease) before the second miss.
	if p := e.primary; p != nil && !e.electing {
		if r := e.nodes[p.NodeId]; r != nil && r.health != netsyv1.HealthState_DEGRADED && !r.lastAt.IsZero() && now.Sub(r.lastAt) > e.cfg.HeartbeatInterval+e.cfg.HeartbeatInterval/2 {
			e.probePrimary(ctx, p)
		}
	}
	if changed {
		e.version++
		e.pushAll(ctx)
	}
}

// probePrimary asks a late Primary for its state; if it does not answer,
// it is marked Degraded at once, so an election round starts early. That
// is detection only: the round still waits out the Primary's lease (a
// refused connection proves nothing: a live Primary behind a REJECT rule,
// a network policy or a restarted listener refuses too).
func (e *Elector) probePrimary(ctx context.Context, p *netsyv1.NodeInfo) {
	e.goOwned(func() {
		cctx, cancel := clock.WithTimeout(ctx, e.cfg.Clock, e.cfg.HeartbeatInterval)
		defer cancel()
		_, err := e.cfg.Peers.GetNodeState(cctx, p)
		if err == nil || ctx.Err() != nil {
			return
		}
		_ = e.do(ctx, true, func() error {
			if r := e.nodes[p.NodeId]; r != nil && e.primary != nil && e.primary.NodeId == p.NodeId && r.health != netsyv1.HealthState_DEGRADED {
				r.markDegraded(e.cfg.Clock.Now())
				e.emit("node_degraded", p.NodeId, "it did not answer a probe")
				e.log.Warn("the Primary is late and did not answer a probe; electing a new one once its lease has run out", "node", p.NodeId, "error", err)
			}
			return nil
		})
	})
}

// Heartbeat records a node's heartbeat and answers with the Cluster State.
func (e *Elector) Heartbeat(ctx context.Context, hb *netsyv1.Heartbeat) (*netsyv1.HeartbeatResponse, error) {
	var resp *netsyv1.HeartbeatResponse
	err := e.do(ctx, false, func() error {
		if !e.loaded {
			// No authority yet (rule 2): a state of this Elector's now
			// would name no Primary and count no nodes.
			return ErrNotLoaded
		}
		now := e.cfg.Clock.Now()
		r := e.nodes[hb.NodeId]
		if r == nil {
			return &peer.CodedError{C: codes.FailedPrecondition, R: peer.ReasonNotRegistered, Msg: fmt.Sprintf("node %q is not registered with this Elector", hb.NodeId)}
		}
		r.last, r.lastAt = hb, now
		if e.waitingLease && !e.electing && e.gaveUpReport(hb) {
			e.waitingLease = false
			e.nextTry = time.Time{}
		}
		h := hb.Health
		if h == netsyv1.HealthState_HEALTH_UNKNOWN {
			h = netsyv1.HealthState_HEALTHY
		}
		if h != r.health {
			if h == netsyv1.HealthState_HEALTHY && e.primary == nil {
				e.nextTry = time.Time{} // a candidate at last: elect now
			}
			if r.health == netsyv1.HealthState_DEGRADED && h == netsyv1.HealthState_HEALTHY {
				e.emit("node_recovered", hb.NodeId, "")
				e.log.Info("node Healthy again", "node", hb.NodeId)
			}
			if h == netsyv1.HealthState_DEGRADED {
				r.markDegraded(now)
				e.emit("node_degraded", hb.NodeId, "it says it is Degraded")
			}
			r.health = h
		}
		fromPrimary := e.primary != nil && hb.NodeId == e.primary.NodeId
		if fromPrimary {
			e.heardPrimary = now
			e.notePrimaryReport(hb)
		}
		if hb.PrimaryRefused && e.primary != nil && hb.PrimaryId == e.primary.NodeId && !e.electing {
			// A replica's stream to the Primary was refused: check now.
			e.probePrimary(e.runCtx, e.primary)
		}
		if !e.cfg.LockValid() {
			// The answer would renew a Primary's lease.
			return ErrLockLost
		}
		if fromPrimary && e.electing {
			// The running round checked this Primary's lease when it
			// started and may hand out its successor's term when it
			// ends: an answer naming it now would renew the lease past
			// that check (rule 5).
			return ErrElectingSuccessor
		}
		cs := e.clusterState(false)
		if cs.Primary != nil && cs.Primary.NodeId == hb.NodeId {
			e.answeredPrimary = now
		}
		resp = &netsyv1.HeartbeatResponse{Seq: hb.Seq, ClusterState: cs, Health: r.health, LockCounter: e.cfg.LockCounter()}
		return nil
	})
	return resp, err
}

// Register adds a node (which has written its nodes/ file) and returns
// its member id.
func (e *Elector) Register(ctx context.Context, info *netsyv1.NodeInfo, clusterID string) (uint64, *netsyv1.ClusterState, error) {
	if clusterID != e.cfg.ClusterID {
		return 0, nil, fmt.Errorf("node %s belongs to cluster %q; this is cluster %q", info.NodeId, clusterID, e.cfg.ClusterID)
	}
	if err := discovery.ValidateNodeID(info.NodeId); err != nil {
		return 0, nil, err
	}
	m, err := e.members.Update(ctx, func(m *discovery.Members) error {
		m.Assign(info.NodeId)
		return nil
	})
	if err != nil {
		return 0, nil, fmt.Errorf("members.json: %w", err)
	}
	id := m.IDs[info.NodeId]
	var cs *netsyv1.ClusterState
	err = e.do(ctx, false, func() error {
		info = proto.Clone(info).(*netsyv1.NodeInfo)
		info.MemberId = id
		old := e.nodes[info.NodeId]
		changed := old == nil || !proto.Equal(old.info, info)
		e.addNode(info, e.cfg.Clock.Now())
		if changed {
			e.version++
			e.emit("node_registered", info.NodeId, info.PeerAddr)
			e.log.Info("node registered", "node", info.NodeId, "member_id", fmt.Sprintf("%x", id), "peer_addr", info.PeerAddr)
			e.pushAll(ctx)
		}
		if !e.loaded {
			// Recorded (the seed lets registrations arrive before the
			// load ends), but no state is answered yet (rule 2).
			return ErrNotLoaded
		}
		cs = e.clusterState(false)
		return nil
	})
	if err != nil {
		return 0, nil, err
	}
	return id, cs, nil
}

// ClusterState returns the current state; full adds nodes and events.
func (e *Elector) ClusterState(ctx context.Context, full bool) (*netsyv1.ClusterState, error) {
	var cs *netsyv1.ClusterState
	err := e.do(ctx, false, func() error {
		if !e.loaded {
			return ErrNotLoaded // no authority yet (rule 2)
		}
		cs = e.clusterState(full)
		return nil
	})
	return cs, err
}

// Handoff moves the Primary role away from the current Primary (to the
// node to, if given and eligible): the Primary drains, and an election
// that excludes it follows. It returns once the new Primary is pushed.
func (e *Elector) Handoff(ctx context.Context, to string) (*netsyv1.ClusterState, error) {
	done := make(chan error, 1)
	err := e.do(ctx, true, func() error {
		if e.handoff != nil {
			return errors.New("a handoff is already in progress")
		}
		if e.primary == nil || e.nodes[e.primary.NodeId] == nil {
			return errors.New("there is no Primary to hand off from")
		}
		if to != "" {
			if _, ok := e.nodes[to]; !ok {
				return &peer.CodedError{C: codes.NotFound, R: peer.ReasonUnknownNode, Msg: fmt.Sprintf("node %q is not registered", to)}
			}
			if to == e.primary.NodeId {
				return fmt.Errorf("node %q is already the Primary", to)
			}
		}
		e.handoff = &handoffReq{to: to, done: done, from: e.primary}
		e.nextTry = time.Time{}
		return nil
	})
	if err != nil {
		return nil, err
	}
	select {
	case err := <-done:
		if err != nil {
			return nil, err
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return e.ClusterState(ctx, false)
}

func (e *Elector) failHandoff(err error) {
	if e.handoff != nil {
		e.handoff.done <- err
		e.handoff = nil
	}
}

// clusterState builds what nodes are told.
func (e *Elector) clusterState(full bool) *netsyv1.ClusterState {
	self := e.cfg.Self
	if r := e.nodes[self.NodeId]; r != nil {
		self = r.info
	}
	cs := &netsyv1.ClusterState{
		ClusterId:       e.cfg.ClusterID,
		Elector:         self,
		ElectorTerm:     e.term,
		PrimaryTerm:     e.primaryTerm,
		RegisteredNodes: uint32(len(e.nodes)),
		Version:         e.version,
	}
	if e.primary != nil && !e.primaryGone() {
		cs.Primary = e.primary
	}
	ids := make([]string, 0, len(e.nodes))
	for id := range e.nodes {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	now := e.cfg.Clock.Now()
	for _, id := range ids {
		r := e.nodes[id]
		cs.Members = append(cs.Members, r.info)
		if !full {
			continue
		}
		ns := &netsyv1.NodeStatus{Info: r.info, Health: r.health, Last: r.last, LastHeartbeatAgeMs: -1}
		if !r.lastAt.IsZero() {
			ns.LastHeartbeatAgeMs = now.Sub(r.lastAt).Milliseconds()
		}
		if r.health == netsyv1.HealthState_DEGRADED {
			ns.DegradedForMs = now.Sub(r.degradedAt).Milliseconds()
		}
		ns.DeregistrationWait = e.tip.waits[id].why
		cs.Nodes = append(cs.Nodes, ns)
	}
	if full {
		cs.Events = slices.Clone(e.events)
	}
	return cs
}

// primaryGone reports whether the recorded Primary is no longer to be
// named: it was deregistered, or it drained in a handoff (it gave its
// lease up). A Primary that is Degraded, or is being replaced by a running
// round, is still named to everyone but itself (rule 5): it may hold its
// lease, so its replicas keep following it until a successor is pushed,
// and only its own heartbeat, whose answer would renew the lease, is
// refused while a round runs (Heartbeat).
func (e *Elector) primaryGone() bool {
	r := e.nodes[e.primary.NodeId]
	return r == nil || (e.handoff != nil && e.handoff.drained)
}

// pushAll pushes the current state to the Primary first, then to every
// other node. Pushes are best effort: a node that misses one learns the
// state from its next heartbeat's answer. Nothing is pushed before the
// map is loaded (rule 2).
func (e *Elector) pushAll(ctx context.Context) {
	if !e.loaded {
		return
	}
	e.pushGen++
	gen := e.pushGen
	cs := e.clusterState(false)
	var first *netsyv1.NodeInfo
	var rest []*netsyv1.NodeInfo
	for _, r := range e.nodes {
		if cs.Primary != nil && r.info.NodeId == cs.Primary.NodeId {
			first = r.info
		} else {
			rest = append(rest, r.info)
		}
	}
	e.goOwned(func() {
		push := func(n *netsyv1.NodeInfo) {
			if !e.cfg.LockValid() {
				return
			}
			cctx, cancel := clock.WithTimeout(ctx, e.cfg.Clock, 2*e.cfg.HeartbeatInterval)
			defer cancel()
			if _, err := e.cfg.Peers.PushClusterState(cctx, n, cs); err != nil && ctx.Err() == nil {
				e.log.Debug("push cluster state", "node", n.NodeId, "version", gen, "error", err)
			}
		}
		if first != nil {
			push(first)
		}
		var wg sync.WaitGroup
		for _, n := range rest {
			wg.Add(1)
			go func() {
				defer wg.Done()
				push(n)
			}()
		}
		wg.Wait()
	})
}

func (e *Elector) emit(kind, node, detail string) {
	ev := &netsyv1.Event{
		TimeUnixNano: e.cfg.Clock.Wall().UnixNano(),
		Kind:         kind,
		NodeId:       node,
		ElectorTerm:  e.term,
		PrimaryTerm:  e.primaryTerm,
		Detail:       detail,
		Reporter:     e.cfg.Self.NodeId,
	}
	if r := e.nodes[node]; r != nil && r.last != nil {
		ev.Revision = r.last.LatestRevision
	}
	e.events = append(e.events, ev)
	if n := len(e.events); n > maxEvents {
		e.events = slices.Delete(e.events, 0, n-maxEvents)
	}
	e.log.Info("event", "kind", kind, "node", node, "primary_term", e.primaryTerm, "rev", ev.Revision, "detail", detail)
	e.cfg.OnEvent(ev)
}
