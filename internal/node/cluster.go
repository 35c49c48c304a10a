package node

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/elector"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/heartbeat"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/internal/primary"
	"github.com/netsy-io/netsy/internal/replica"
	"github.com/netsy-io/netsy/internal/s3lect"
	"github.com/netsy-io/netsy/internal/view"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// maxNodeEvents is how many of its own events a node keeps.
const maxNodeEvents = 100

// clusterIDHash is the etcd header cluster id of a cluster id name.
func clusterIDHash(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	v := h.Sum64() >> 1
	if v == 0 {
		v = 1
	}
	return v
}

// roles wires this node's cluster roles together: the Elector lock
// (s3lect), the Elector itself while the lock is held, heartbeats, the
// view of the roles, the Primary life cycle and following. It decides
// nothing itself; it hands each role what another one learned.
type roles struct {
	cfg   config.Config
	log   hclog.Logger
	clk   clock.Clock
	store objstore.Store
	pool  *peer.Pool
	self  *netsyv1.NodeInfo
	start time.Time

	view     *view.View
	lock     *s3lect.Election
	hb       *heartbeat.Sender
	prim     *primary.Primary
	follow   *primary.FollowService
	follower *replica.Follower
	eng      *engine.Engine

	electorMu sync.Mutex
	elector   *elector.Elector

	memberID   atomic.Uint64
	registered atomic.Bool
	healthy    atomic.Bool
	// primaryRefused: the follower's last stream attempt was refused.
	primaryRefused atomic.Bool

	changedMu sync.Mutex
	changedCh chan struct{}

	eventsMu sync.Mutex
	events   []*netsyv1.Event
	eventsC  *prometheus.CounterVec
	// Replication metrics (the Primary's quorum commit, the replica's
	// catch-ups).
	fallbacksC prometheus.Counter
	receiptH   prometheus.Histogram
	catchUpsC  prometheus.Counter

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newRoles(cfg config.Config, logger hclog.Logger, clk clock.Clock, store objstore.Store, pool *peer.Pool) *roles {
	r := &roles{
		cfg: cfg, log: logger, clk: clk, store: store, pool: pool,
		self: &netsyv1.NodeInfo{
			NodeId:     cfg.NodeID,
			PeerAddr:   cfg.AdvertisePeerAddr(),
			ClientUrls: []string{cfg.AdvertiseClientURL()},
			HttpAddr:   cfg.HTTPAddr,
			Name:       cfg.Name,
		},
		start:     clk.Now(),
		view:      view.New(logger.Named("view")),
		changedCh: make(chan struct{}),
		eventsC: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "netsy_role_events_total", Help: "Role changes seen by this node (Elector, Primary, node health), by kind.",
		}, []string{"kind"}),
		fallbacksC: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "netsy_quorum_fallbacks_total", Help: "Times this node, as the Primary, fell back to acknowledging writes through object storage.",
		}),
		receiptH: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "netsy_quorum_receipt_seconds", Help: "Time from an append on the Primary to a quorum of replicas holding it fsync'd.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		catchUpsC: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "netsy_replica_catchups_total", Help: "Times this node, as a replica, caught up from object storage because the Primary no longer held what it lacked.",
		}),
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	// Healthy until a heartbeat and its retry fail.
	r.healthy.Store(true)
	return r
}

// event records one role change this node saw or made.
func (r *roles) event(kind, node, detail string) {
	_, term := r.prim.State()
	ev := &netsyv1.Event{
		TimeUnixNano: r.clk.Now().UnixNano(), Kind: kind, NodeId: node, Detail: detail,
		ElectorTerm: r.view.ElectorTerm(), PrimaryTerm: term, Revision: r.eng.CurrentRevision(), Reporter: r.cfg.NodeID,
	}
	r.record(ev)
	r.log.Info("event", "kind", kind, "node", node, "elector_term", ev.ElectorTerm, "primary_term", term, "rev", ev.Revision, "detail", detail)
}

func (r *roles) record(ev *netsyv1.Event) {
	r.eventsMu.Lock()
	r.events = append(r.events, ev)
	if n := len(r.events); n > maxNodeEvents {
		r.events = slices.Delete(r.events, 0, n-maxNodeEvents)
	}
	r.eventsMu.Unlock()
	r.eventsC.WithLabelValues(ev.Kind).Inc()
}

// notify wakes whoever waits for the roles to change.
func (r *roles) notify() {
	r.changedMu.Lock()
	close(r.changedCh)
	r.changedCh = make(chan struct{})
	r.changedMu.Unlock()
}

// Changed implements replica.Roles.
func (r *roles) Changed() <-chan struct{} {
	r.changedMu.Lock()
	defer r.changedMu.Unlock()
	return r.changedCh
}

// Primary implements replica.Roles.
func (r *roles) Primary() (*netsyv1.NodeInfo, uint64) {
	cs := r.view.Current()
	if cs == nil {
		return nil, 0
	}
	return cs.Primary, cs.PrimaryTerm
}

func (r *roles) Active() bool { return r.prim.Active() }

func (r *roles) ConfirmLinearizable(ctx context.Context) error {
	return r.prim.ConfirmLinearizable(ctx)
}

func (r *roles) Members() []*netsyv1.NodeInfo {
	if cs := r.view.Current(); cs != nil {
		return cs.Members
	}
	return nil
}

func (r *roles) Identity() (uint64, uint64) {
	return clusterIDHash(r.cfg.ClusterID), r.memberID.Load()
}

// currentElector is the Elector this node runs, or nil.
func (r *roles) currentElector() *elector.Elector {
	r.electorMu.Lock()
	defer r.electorMu.Unlock()
	return r.elector
}

// electorAddr is the peer address of the Elector this node knows: the
// newer of what the Cluster State says and what the lock says.
func (r *roles) electorAddr() string {
	cs := r.view.Current()
	h, ok := r.lock.Current()
	switch {
	case cs != nil && cs.Elector != nil && (!ok || cs.ElectorTerm >= h.Term):
		return cs.Elector.PeerAddr
	case ok:
		return h.PeerAddr
	}
	return ""
}

// state is this node's heartbeat.
func (r *roles) state() *netsyv1.Heartbeat {
	ps, held := r.prim.State()
	idx := r.eng.DurableIndex()
	hb := &netsyv1.Heartbeat{
		NodeId:            r.cfg.NodeID,
		MemberId:          r.memberID.Load(),
		Health:            netsyv1.HealthState_HEALTHY,
		PrimaryState:      ps,
		LatestIndex:       idx,
		LatestRevision:    r.eng.CurrentRevision(),
		CommittedIndex:    r.eng.CommittedIndex(),
		CommittedRevision: r.eng.CurrentRevision(),
		StartTimeUnixNano: r.start.UnixNano(),
		ElectorTerm:       r.view.ElectorTerm(),
	}
	if cs := r.view.Current(); cs != nil {
		hb.PrimaryTerm = cs.PrimaryTerm
		hb.PrimaryId = cs.GetPrimary().GetNodeId()
	}
	if ps != netsyv1.PrimaryState_REPLICA {
		// A node that holds (or takes up, or hands off) a term reports it.
		hb.PrimaryTerm, hb.PrimaryId = held, r.cfg.NodeID
	} else if held > hb.PrimaryTerm {
		hb.PrimaryTerm = held
	}
	switch {
	case !r.registered.Load():
		hb.Health = netsyv1.HealthState_LOADING
	case !r.healthy.Load():
		hb.Health = netsyv1.HealthState_DEGRADED
	}
	hb.PrimaryRefused = r.primaryRefused.Load()
	if last, rev, term := r.eng.LastAppended(); last == idx {
		hb.LatestRevision, hb.LatestTerm = rev, term
	} else if t, ok := r.eng.EntryTerm(idx); ok {
		hb.LatestTerm = t
	}
	hb.Replication = r.prim.Replication()
	return hb
}

// electorClient returns a client for the Elector, or nil when this node
// runs it (use currentElector then).
func (r *roles) electorClient() (netsyv1.ElectorClient, *elector.Elector, error) {
	if e := r.currentElector(); e != nil {
		return nil, e, nil
	}
	addr := r.electorAddr()
	if addr == "" || addr == r.self.PeerAddr {
		return nil, nil, heartbeat.ErrNoElector
	}
	conn, err := r.pool.Conn(addr)
	if err != nil {
		return nil, nil, err
	}
	return netsyv1.NewElectorClient(conn), nil, nil
}

// register registers this node with the Elector and learns its member id.
func (r *roles) register(ctx context.Context) error {
	c, e, err := r.electorClient()
	if err != nil {
		return err
	}
	// The file goes first, as at start-up: it is gone if the node was
	// deregistered while it ran, and the Elector's map and nodes/ must
	// agree (a later Elector builds its map from nodes/).
	if err := discovery.Register(ctx, r.store, registration(r.cfg, r.clk.Now())); err != nil {
		return fmt.Errorf("register with the Elector: %w", err)
	}
	var id uint64
	var cs *netsyv1.ClusterState
	if e != nil {
		id, cs, err = e.Register(ctx, r.self, r.cfg.ClusterID)
	} else {
		var resp *netsyv1.RegisterNodeResponse
		resp, err = c.RegisterNode(ctx, &netsyv1.RegisterNodeRequest{Node: r.self, ClusterId: r.cfg.ClusterID})
		if err == nil {
			id, cs = resp.MemberId, resp.ClusterState
		}
	}
	if err != nil {
		return fmt.Errorf("register with the Elector: %w", err)
	}
	if r.memberID.Swap(id) != id {
		r.log.Info("registered with the Elector", "member_id", fmt.Sprintf("%x", id))
	}
	r.registered.Store(true)
	r.view.Offer(cs, "registration")
	return nil
}

// sendHeartbeat is the heartbeat sender's Send: to this node's own
// Elector by a call, to another over the peer port; an unregistered node
// registers first.
func (r *roles) sendHeartbeat(ctx context.Context, hb *netsyv1.Heartbeat) (*netsyv1.HeartbeatResponse, error) {
	if !r.registered.Load() {
		if err := r.register(ctx); err != nil {
			if peer.ReasonOf(err) == peer.ReasonNotLoaded {
				return nil, heartbeat.ErrNoElector
			}
			return nil, err
		}
		hb = r.state()
	}
	c, e, err := r.electorClient()
	if err != nil {
		return nil, err
	}
	var resp *netsyv1.HeartbeatResponse
	if e != nil {
		resp, err = e.Heartbeat(ctx, hb)
	} else {
		resp, err = c.Heartbeat(ctx, hb)
	}
	switch peer.ReasonOf(err) {
	case peer.ReasonNotElector:
		// The node we took for the Elector is not (it resigned or lost
		// its lock): find the new one at once; not this node's fault.
		r.lock.Suspect()
		return nil, heartbeat.ErrNoElector
	case peer.ReasonNotLoaded, peer.ReasonElectingSuccessor:
		// No authoritative answer yet (the Elector is loading), or none
		// for this node's lease (it is replacing this Primary): the
		// cluster's state, not this node's fault; nothing is offered to
		// the view and no lease is renewed.
		return nil, heartbeat.ErrNoElector
	case peer.ReasonNotRegistered:
		// A new Elector that has not heard of this node yet.
		r.registered.Store(false)
	}
	return resp, err
}

// answered handles a heartbeat answer. It renews the Primary's lease only
// when the answer names this node Primary at the term it holds: an Elector
// that names another Primary (or none) vouches for no lease of this node's,
// and a new Elector that takes over waits only for the lease of the
// Primary the old one named.
func (r *roles) answered(resp *netsyv1.HeartbeatResponse, sentAt time.Time) {
	cs := resp.GetClusterState()
	accepted, _ := r.view.Offer(cs, "heartbeat")
	if _, held := r.prim.State(); accepted && cs.GetPrimary().GetNodeId() == r.cfg.NodeID && cs.GetPrimaryTerm() == held {
		r.prim.Answered(sentAt)
	}
	if el := cs.GetElector(); el != nil && el.NodeId != r.cfg.NodeID {
		r.lock.Observed(s3lect.Holder{NodeID: el.NodeId, PeerAddr: el.PeerAddr, Term: cs.ElectorTerm, Counter: resp.LockCounter})
	}
}

// runElectorTerms runs an Elector for every term this node holds the lock.
func (r *roles) runElectorTerms() {
	defer r.wg.Done()
	for {
		var lead s3lect.Leadership
		select {
		case l, ok := <-r.lock.Leadership():
			if !ok {
				return
			}
			lead = l
		case <-r.ctx.Done():
			return
		}
		e, err := elector.New(elector.Config{
			Self:                  r.self,
			ClusterID:             r.cfg.ClusterID,
			Store:                 r.store,
			Peers:                 nodePeers{r},
			Quorum:                r.cfg.Quorum,
			HeartbeatInterval:     r.cfg.HeartbeatInterval,
			DeregistrationTimeout: r.cfg.DeregistrationTimeout,
			HandshakeTimeout:      r.cfg.PrimaryHandshakeTimeout,
			Clock:                 r.clk,
			Logger:                r.log,
			OnEvent:               r.record,
			LockCounter: func() uint64 {
				h, _ := r.lock.Current()
				return h.Counter
			},
			LockValid: lead.Valid,
		}, lead.Term)
		if err != nil {
			r.log.Error("start the Elector", "error", err)
			continue
		}
		r.electorMu.Lock()
		r.elector = e
		r.electorMu.Unlock()
		r.hb.Now()
		sepDone := make(chan struct{})
		go func() {
			defer close(sepDone)
			r.separateRoles(lead.Ctx, e)
		}()
		e.Run(lead.Ctx)
		<-sepDone
		r.electorMu.Lock()
		r.elector = nil
		r.electorMu.Unlock()
		r.event("elector_lost", r.cfg.NodeID, "")
	}
}

// separateRoles keeps the Elector off the Primary: a node that holds both
// while another node is Healthy resigns the Elector lock, so
// that one crash never takes both roles (a Primary alone is replaced in
// about a heartbeat; an Elector only once its lock goes stale). Writes do
// not pause for it: the Primary stays.
func (r *roles) separateRoles(ctx context.Context, e *elector.Elector) {
	t := r.clk.NewTicker(2 * r.cfg.HeartbeatInterval)
	defer t.Stop()
	since := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if !r.prim.Active() {
			since = time.Time{}
			continue
		}
		cs, err := e.ClusterState(ctx, true)
		if err != nil {
			continue
		}
		other := ""
		for _, ns := range cs.Nodes {
			// The Elector role needs no data: any Healthy node will do.
			if ns.Info.NodeId != r.cfg.NodeID && ns.Health == netsyv1.HealthState_HEALTHY {
				other = ns.Info.NodeId
				break
			}
		}
		switch {
		case other == "":
			since = time.Time{}
		case since.IsZero():
			since = r.clk.Now()
		case r.clk.Since(since) >= 4*r.cfg.HeartbeatInterval:
			r.log.Info("this node is both Elector and Primary while another node can take the Elector role; resigning the Elector lock",
				"candidate", other)
			r.event("elector_resigned", r.cfg.NodeID, "separating the Elector from the Primary")
			// Not ctx: resigning ends it.
			rctx, cancel := clock.WithTimeout(r.ctx, r.clk, 5*time.Second)
			err := r.lock.Resign(rctx)
			cancel()
			if err != nil {
				r.log.Warn("resign the Elector lock", "error", err)
			}
			return
		}
	}
}

// watchView hands every accepted Cluster State to the roles.
func (r *roles) watchView() {
	defer r.wg.Done()
	ch, stop := r.view.Subscribe()
	defer stop()
	var last *netsyv1.ClusterState
	for {
		select {
		case cs := <-ch:
			if p := cs.GetPrimary(); p != nil && (last == nil || last.GetPrimary().GetNodeId() != p.NodeId || last.PrimaryTerm != cs.PrimaryTerm) {
				r.event("primary_known", p.NodeId, fmt.Sprintf("term %d", cs.PrimaryTerm))
			}
			last = cs
			r.prim.Observe(cs)
			r.follower.Observe(cs)
			r.notify()
		case <-r.ctx.Done():
			return
		}
	}
}

// nodePeers is how the Elector reaches nodes: this node by a call, others
// over the peer port.
type nodePeers struct{ r *roles }

func (p nodePeers) client(n *netsyv1.NodeInfo) (netsyv1.NodeClient, error) {
	conn, err := p.r.pool.Conn(n.PeerAddr)
	if err != nil {
		return nil, err
	}
	return netsyv1.NewNodeClient(conn), nil
}

func (p nodePeers) GetNodeState(ctx context.Context, n *netsyv1.NodeInfo) (*netsyv1.NodeState, error) {
	if n.NodeId == p.r.cfg.NodeID {
		return p.r.nodeState(), nil
	}
	c, err := p.client(n)
	if err != nil {
		return nil, err
	}
	return c.GetNodeState(ctx, &netsyv1.GetNodeStateRequest{})
}

func (p nodePeers) PushClusterState(ctx context.Context, n *netsyv1.NodeInfo, cs *netsyv1.ClusterState) (*netsyv1.PushClusterStateResponse, error) {
	if n.NodeId == p.r.cfg.NodeID {
		ok, cur := p.r.view.Offer(cs, "push")
		return &netsyv1.PushClusterStateResponse{Accepted: ok, Current: cur}, nil
	}
	c, err := p.client(n)
	if err != nil {
		return nil, err
	}
	return c.PushClusterState(ctx, cs)
}

func (p nodePeers) Drain(ctx context.Context, n *netsyv1.NodeInfo) error {
	if n.NodeId == p.r.cfg.NodeID {
		return p.r.prim.Drain(ctx)
	}
	c, err := p.client(n)
	if err != nil {
		return err
	}
	_, err = c.Drain(ctx, &netsyv1.HandoffRequest{})
	return err
}

func (r *roles) nodeState() *netsyv1.NodeState {
	r.eventsMu.Lock()
	evs := slices.Clone(r.events)
	r.eventsMu.Unlock()
	info := &netsyv1.NodeInfo{NodeId: r.self.NodeId, MemberId: r.memberID.Load(), PeerAddr: r.self.PeerAddr, ClientUrls: r.self.ClientUrls, HttpAddr: r.self.HttpAddr, Name: r.self.Name}
	return &netsyv1.NodeState{State: r.state(), Info: info, ClusterState: r.view.Current(), Events: evs}
}

// nodeService serves the Node gRPC service on the peer port.
type nodeService struct {
	netsyv1.UnsafeNodeServer
	r *roles
}

var _ netsyv1.NodeServer = nodeService{}

func (s nodeService) PushClusterState(_ context.Context, cs *netsyv1.ClusterState) (*netsyv1.PushClusterStateResponse, error) {
	ok, cur := s.r.view.Offer(cs, "push")
	return &netsyv1.PushClusterStateResponse{Accepted: ok, Current: cur}, nil
}

func (s nodeService) GetNodeState(context.Context, *netsyv1.GetNodeStateRequest) (*netsyv1.NodeState, error) {
	return s.r.nodeState(), nil
}

func (s nodeService) Drain(ctx context.Context, _ *netsyv1.HandoffRequest) (*netsyv1.HandoffResponse, error) {
	if err := s.r.prim.Drain(ctx); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &netsyv1.HandoffResponse{ClusterState: s.r.view.Current()}, nil
}

func (s nodeService) ResignElector(ctx context.Context, _ *netsyv1.ResignRequest) (*netsyv1.ResignResponse, error) {
	if err := s.r.lock.Resign(ctx); err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &netsyv1.ResignResponse{}, nil
}

func (s nodeService) ReadIndex(ctx context.Context, _ *netsyv1.ReadIndexRequest) (*netsyv1.ReadIndexResponse, error) {
	resp, err := s.r.prim.ReadIndex(ctx)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return resp, nil
}

func (s nodeService) LeaseRenew(ctx context.Context, r *netsyv1.LeaseRenewRequest) (*netsyv1.LeaseRenewResponse, error) {
	ttl, err := s.r.prim.LeaseRenew(ctx, r.Id)
	switch {
	case errors.Is(err, engine.ErrLeaseNotFound):
		return nil, status.Error(codes.NotFound, err.Error())
	case err != nil:
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return &netsyv1.LeaseRenewResponse{Ttl: ttl}, nil
}

// registerPeerServices puts the netsy peer services on g.
func (r *roles) registerPeerServices(g *grpc.Server) {
	netsyv1.RegisterElectorServer(g, &elector.Service{Current: r.currentElector, ElectorAddr: r.electorAddr})
	netsyv1.RegisterNodeServer(g, nodeService{r: r})
	netsyv1.RegisterFollowServer(g, r.follow)
}

// registration is this node's nodes/{node_id}.json.
func registration(cfg config.Config, now time.Time) discovery.Registration {
	return discovery.Registration{
		NodeID: cfg.NodeID, ClusterID: cfg.ClusterID, PeerAddr: cfg.AdvertisePeerAddr(),
		ClientURLs: []string{cfg.AdvertiseClientURL()}, HTTPAddr: cfg.HTTPAddr, Name: cfg.Name, RegisteredAt: now,
	}
}

// checkRegistration writes nodes/{node_id}.json and checks the cluster id
// against members.json, before anything is served. It returns how many
// other nodes are registered.
func checkRegistration(ctx context.Context, cfg config.Config, store objstore.Store, clk clock.Clock) (others int, err error) {
	// Load refuses a members.json of another cluster id.
	if _, _, err := discovery.NewMembersFile(store, cfg.ClusterID).Load(ctx); err != nil {
		return 0, err
	}
	if err := discovery.Register(ctx, store, registration(cfg, clk.Now())); err != nil {
		return 0, err
	}
	regs, _, err := discovery.List(ctx, store)
	if err != nil {
		return 0, err
	}
	// Alone (no other node registered) the Elector counts one
	// registration, so the node's majority is itself and it acknowledges
	// on its local fsync. members.json keeps the member id of every node
	// that ever joined, deregistered ones too, so it says nothing about
	// who holds acknowledged writes now.
	for _, reg := range regs {
		if reg.NodeID != cfg.NodeID {
			others++
		}
	}
	return others, nil
}
