package roles

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/elector"
	"github.com/netsy-io/netsy/internal/heartbeat"
	"github.com/netsy-io/netsy/internal/objwal"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/internal/s3lect"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// errLeaving refuses registering again once the node is leaving.
var errLeaving = errors.New("roles: this node is leaving the cluster")

// electorAddr is the peer address of the Elector this node knows: the
// newer of what the Cluster State says and what the lock says.
func (r *Roles) electorAddr() string {
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

// electorAPI is the Elector: the one this node runs, or the one it knows
// over the Transport. heartbeat.ErrNoElector: none is known (or the one
// known is this node, which runs none now).
func (r *Roles) electorAPI() (ElectorAPI, error) {
	if e := r.RunningElector(); e != nil {
		return e, nil
	}
	addr := r.electorAddr()
	if addr == "" || addr == r.self.PeerAddr {
		return nil, heartbeat.ErrNoElector
	}
	return r.cfg.Transport.Elector(addr)
}

// node is a node the Elector talks to: this one by a call, others over
// the Transport.
func (r *Roles) node(info *netsyv1.NodeInfo) (NodeAPI, error) {
	if info.GetNodeId() == r.self.NodeId {
		return localNode{r}, nil
	}
	return r.cfg.Transport.Node(info)
}

// electorRefusal turns an Elector's refusal into what the heartbeat
// sender understands, by its Reason. Not the Elector, or not loaded yet,
// (or replacing this Primary) is the cluster's state and not this node's fault: heartbeat.ErrNoElector
// (retry on the next beat, no self-degrading). Not registered: register
// again at the next beat.
func (r *Roles) electorRefusal(err error) error {
	switch peer.ReasonOf(err) {
	case peer.ReasonNotElector:
		// It resigned or lost its lock: find the new one at once.
		r.lock.Suspect()
		return fmt.Errorf("%w: %v", heartbeat.ErrNoElector, err)
	case peer.ReasonNotLoaded:
		// No authority before its load: nothing it says counts yet.
		return fmt.Errorf("%w: the Elector has not loaded its node map yet: %v", heartbeat.ErrNoElector, err)
	case peer.ReasonElectingSuccessor:
		// The Elector is replacing this Primary and vouches for no lease
		// of its: the lease is not renewed, but the node is not at fault.
		return fmt.Errorf("%w: the Elector is electing this Primary's successor: %v", heartbeat.ErrNoElector, err)
	case peer.ReasonNotRegistered:
		r.do(func(c *core, _ **elector.Elector) effects {
			c.notRegistered()
			return effects{}
		})
	}
	return err
}

// state is this node's heartbeat (sent to the Elector, and embedded in
// receipts).
func (r *Roles) state() *netsyv1.Heartbeat {
	s := r.snap()
	// TookTerm before State (primary.TookTerm): the pair then never says
	// Replica for a term this process is still taking up.
	took := r.prim.TookTerm()
	ps, held := r.prim.State()
	idx := r.eng.DurableIndex()
	hb := &netsyv1.Heartbeat{
		NodeId:            r.self.NodeId,
		MemberId:          s.memberID,
		Health:            s.health,
		PrimaryState:      ps,
		LatestIndex:       idx,
		LatestRevision:    r.eng.CurrentRevision(),
		CommittedIndex:    r.eng.CommittedIndex(),
		CommittedRevision: r.eng.CurrentRevision(),
		StartTimeUnixNano: r.start.UnixNano(),
		ElectorTerm:       r.view.ElectorTerm(),
		PrimaryRefused:    s.primaryRefused,
		TookPrimaryTerm:   took,
	}
	if r.eng.Failed() != nil {
		// A node whose log failed for good acknowledges nothing: no
		// quorum may count on it, and no election may pick it.
		hb.Health = netsyv1.HealthState_DEGRADED
	}
	if cs := r.view.Current(); cs != nil {
		hb.PrimaryTerm = cs.PrimaryTerm
		hb.PrimaryId = cs.GetPrimary().GetNodeId()
	}
	if ps != netsyv1.PrimaryState_REPLICA {
		// A node that holds (or takes up, or hands off) a term reports it.
		hb.PrimaryTerm, hb.PrimaryId = held, r.self.NodeId
	} else if held > hb.PrimaryTerm {
		hb.PrimaryTerm = held
	}
	if last, rev, term := r.eng.LastAppended(); last == idx {
		hb.LatestRevision, hb.LatestTerm = rev, term
	} else if t, ok := r.eng.EntryTerm(idx); ok {
		hb.LatestTerm = t
	}
	hb.Replication = r.prim.Replication()
	if ps == netsyv1.PrimaryState_ACTIVE {
		hb.RestoreOldestRevision, hb.RestoreOldestTimeMs = r.restoreOldest()
	}
	return hb
}

// restoreOldest is the oldest point a restore from the bucket can rebuild,
// as the log's last garbage collection (the Primary's) left it; zeros
// while unknown or when the log does not say.
func (r *Roles) restoreOldest() (rev, timeMs int64) {
	if l, ok := r.cfg.Log.(interface{ Stats() objwal.Stats }); ok {
		st := l.Stats()
		return st.RestoreOldestRevision, st.RestoreOldestTimeMs
	}
	return 0, 0
}

// register registers this node with the Elector and learns its member id.
func (r *Roles) register(ctx context.Context) error {
	if r.snap().leaving {
		return errLeaving
	}
	el, err := r.electorAPI()
	if err != nil {
		return err
	}
	// The file goes first, as at start-up: it is gone if the node was
	// deregistered while it ran, and the Elector's map and nodes/ must
	// agree (a later Elector builds its map from nodes/).
	if err := discovery.Register(ctx, r.store, Registration(r.cfg.Node, r.clk.Wall())); err != nil {
		return fmt.Errorf("register with the Elector: %w", err)
	}
	id, cs, err := el.Register(ctx, r.self, r.cfg.Node.ClusterID)
	if err != nil {
		return fmt.Errorf("register with the Elector: %w", r.electorRefusal(err))
	}
	r.do(func(c *core, _ **elector.Elector) effects {
		if c.registeredAs(id) {
			r.log.Info("registered with the Elector", "member_id", fmt.Sprintf("%x", id))
		}
		return effects{}
	})
	r.offer(cs, "registration")
	return nil
}

// sendHeartbeat is the heartbeat sender's Send; an unregistered node
// registers first.
func (r *Roles) sendHeartbeat(ctx context.Context, hb *netsyv1.Heartbeat) (*netsyv1.HeartbeatResponse, error) {
	if !r.snap().registered {
		if err := r.register(ctx); err != nil {
			return nil, err
		}
		seq := hb.Seq
		hb = r.state()
		hb.Seq = seq
	}
	el, err := r.electorAPI()
	if err != nil {
		return nil, err
	}
	resp, err := el.Heartbeat(ctx, hb)
	if err != nil {
		r.hbFailuresC.Inc()
		return nil, r.electorRefusal(err)
	}
	return resp, nil
}

// offer offers the view a Cluster State, and tells the Observer.
func (r *Roles) offer(cs *netsyv1.ClusterState, from string) (bool, *netsyv1.ClusterState) {
	before := r.view.ElectorTerm()
	ok, cur := r.view.Offer(cs, from)
	if f := r.cfg.Observer.Offered; f != nil && cs != nil {
		f(cs, ok, before, from)
	}
	return ok, cur
}

// answered handles a heartbeat answer: the view is offered its Cluster
// State, the Primary's lease is renewed by the lease rule (renewsLease),
// and the lock learns of the Elector that answered.
func (r *Roles) answered(resp *netsyv1.HeartbeatResponse, sentAt time.Time) {
	cs := resp.GetClusterState()
	if el := cs.GetElector(); el != nil && el.NodeId != r.self.NodeId && el.MemberId != 0 {
		// A heartbeat answered by another node is a real round trip;
		// this node's own Elector answers by a call.
		r.peerRTTH.WithLabelValues(strconv.FormatUint(el.MemberId, 16)).Observe(r.clk.Now().Sub(sentAt).Seconds())
	}
	accepted, _ := r.offer(cs, "heartbeat")
	if _, held := r.prim.State(); renewsLease(r.self.NodeId, accepted, cs, held) {
		r.prim.Answered(sentAt, held)
		if f := r.cfg.Observer.Lease; f != nil {
			f(r.prim.LeaseUntil())
		}
	}
	if el := cs.GetElector(); el != nil && el.NodeId != r.self.NodeId {
		r.lock.Observed(s3lect.Holder{NodeID: el.NodeId, PeerAddr: el.PeerAddr, Term: cs.ElectorTerm, Counter: resp.LockCounter})
	}
}

// setElector makes e the running Elector (nil: none), on the loop.
func (r *Roles) setElector(e *elector.Elector) {
	r.do(func(_ *core, el **elector.Elector) effects {
		*el = e
		return effects{}
	})
}

// runElectorTerms runs an Elector for every term this node holds the lock.
func (r *Roles) runElectorTerms(ctx context.Context) {
	defer r.wg.Done()
	nc := r.cfg.Node
	for {
		var lead s3lect.Leadership
		select {
		case l, ok := <-r.lock.Leadership():
			if !ok {
				return
			}
			lead = l
		case <-ctx.Done():
			return
		}
		e, err := elector.New(elector.Config{
			Self:                  r.self,
			ClusterID:             nc.ClusterID,
			Store:                 r.store,
			Peers:                 nodePeers{r},
			Quorum:                nc.Quorum,
			HeartbeatInterval:     nc.HeartbeatInterval,
			LeaseWindow:           LeaseWindow(nc.HeartbeatInterval),
			DeregistrationTimeout: nc.DeregistrationTimeout,
			HandshakeTimeout:      nc.PrimaryHandshakeTimeout,
			DurableTip: func(ctx context.Context) (uint64, error) {
				return objwal.DurableTip(ctx, r.store)
			},
			Clock:  r.clk,
			Logger: r.log,
			OnEvent: func(ev *netsyv1.Event) {
				r.post(func(c *core, _ **elector.Elector) effects {
					c.record(ev)
					r.eventsC.WithLabelValues(ev.Kind).Inc()
					return effects{}
				})
			},
			LockCounter: func() uint64 {
				h, _ := r.lock.Current()
				return h.Counter
			},
			LockValid: lead.Valid,
			// This node registered (or beat) as the Elector started and
			// was refused until the load: beat again now, not a heartbeat
			// interval later (a lone node's restart waited for it).
			OnLoaded: r.hb.Now,
		}, lead.Term)
		if err != nil {
			r.log.Error("start the Elector", "error", err)
			continue
		}
		r.setElector(e)
		term := lead.Term
		if f := r.cfg.Observer.ElectorStarted; f != nil {
			f(term)
		}
		stopObs := func() bool { return false }
		if f := r.cfg.Observer.ElectorStopped; f != nil {
			stopObs = context.AfterFunc(lead.Ctx, func() { f(term) })
		}
		r.hb.Now()
		sepDone := make(chan struct{})
		go func() {
			defer close(sepDone)
			r.separateRoles(ctx, lead.Ctx, e)
		}()
		e.Run(lead.Ctx)
		<-sepDone
		if stopObs() {
			// Run returned while the lock still held.
			r.cfg.Observer.ElectorStopped(term)
		}
		r.setElector(nil)
		r.event("elector_lost", nc.NodeID, "")
	}
}

// separateRoles keeps the Elector off the Primary: a node that holds both
// while another node is Healthy resigns the Elector lock, so that one
// crash never takes both roles (a Primary alone is replaced in about a
// heartbeat; an Elector only once its lock goes stale). Writes do not
// pause for it: the Primary stays. It runs for one lock term (term ends
// it); resigning is bounded by the roles' context, not the term's.
func (r *Roles) separateRoles(ctx, term context.Context, e *elector.Elector) {
	interval := r.cfg.Node.HeartbeatInterval
	t := r.clk.NewTicker(2 * interval)
	defer t.Stop()
	since := time.Time{}
	for {
		select {
		case <-term.Done():
			return
		case <-t.C():
		}
		if !r.prim.Active() {
			since = time.Time{}
			continue
		}
		cs, err := e.ClusterState(term, true)
		if err != nil {
			continue
		}
		other := ""
		for _, ns := range cs.Nodes {
			// The Elector role needs no data: any Healthy node will do.
			if ns.Info.NodeId != r.self.NodeId && ns.Health == netsyv1.HealthState_HEALTHY {
				other = ns.Info.NodeId
				break
			}
		}
		switch {
		case other == "":
			since = time.Time{}
		case since.IsZero():
			since = r.clk.Now()
		case r.clk.Since(since) >= 4*interval:
			r.log.Info("this node is both Elector and Primary while another node can take the Elector role; resigning the Elector lock",
				"candidate", other)
			r.event("elector_resigned", r.self.NodeId, "separating the Elector from the Primary")
			rctx, cancel := clock.WithTimeout(ctx, r.clk, 5*time.Second)
			err := r.lock.Resign(rctx)
			cancel()
			if err != nil {
				r.log.Warn("resign the Elector lock", "error", err)
			}
			return
		}
	}
}

// watchView hands every accepted Cluster State to the Primary role and
// the follower, then tells the loop (a new Primary is an event, and may
// end a deposition). Asked to (refollow), it hands the follower the last
// state again; it is the follower's only feed, so the follower never
// gets an older state after a newer one.
func (r *Roles) watchView(ctx context.Context) {
	defer r.wg.Done()
	ch, stop := r.view.Subscribe()
	defer stop()
	var last *netsyv1.ClusterState
	for {
		select {
		case cs := <-ch:
			var notes []note
			if p := cs.GetPrimary(); p != nil && (last == nil || last.GetPrimary().GetNodeId() != p.NodeId || last.PrimaryTerm != cs.PrimaryTerm) {
				notes = append(notes, note{"primary_known", p.NodeId, fmt.Sprintf("term %d", cs.PrimaryTerm)})
				r.leaderChangesC.Inc()
			}
			last = cs
			r.prim.Observe(cs)
			r.follower.Observe(cs)
			r.post(func(c *core, _ **elector.Elector) effects {
				r.reconsiderDeposition(c)
				return effects{notes: notes, notify: true}
			})
		case <-r.refollow:
			if last != nil {
				r.follower.Observe(last)
			}
		case <-ctx.Done():
			return
		}
	}
}

// nodePeers is how the Elector reaches nodes, itself included.
type nodePeers struct{ r *Roles }

var _ elector.Peers = nodePeers{}

func (p nodePeers) GetNodeState(ctx context.Context, n *netsyv1.NodeInfo) (*netsyv1.NodeState, error) {
	api, err := p.r.node(n)
	if err != nil {
		return nil, err
	}
	return api.NodeState(ctx)
}

func (p nodePeers) PushClusterState(ctx context.Context, n *netsyv1.NodeInfo, cs *netsyv1.ClusterState) (*netsyv1.PushClusterStateResponse, error) {
	api, err := p.r.node(n)
	if err != nil {
		return nil, err
	}
	return api.PushClusterState(ctx, cs)
}

func (p nodePeers) Drain(ctx context.Context, n *netsyv1.NodeInfo) error {
	api, err := p.r.node(n)
	if err != nil {
		return err
	}
	return api.Drain(ctx)
}

// localNode is this node as a NodeAPI: what the peer port's Node service
// serves, and what this node's own Elector calls.
type localNode struct{ r *Roles }

var _ NodeAPI = localNode{}

func (n localNode) NodeState(context.Context) (*netsyv1.NodeState, error) {
	return n.r.NodeState(), nil
}

func (n localNode) PushClusterState(_ context.Context, cs *netsyv1.ClusterState) (*netsyv1.PushClusterStateResponse, error) {
	ok, cur := n.r.offer(cs, "push")
	return &netsyv1.PushClusterStateResponse{Accepted: ok, Current: cur}, nil
}

func (n localNode) Drain(ctx context.Context) error { return n.r.prim.Drain(ctx) }
