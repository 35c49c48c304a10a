package roles

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/config"
	"github.com/netsy-io/netsy/internal/discovery"
	"github.com/netsy-io/netsy/internal/elector"
	"github.com/netsy-io/netsy/internal/heartbeat"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/primary"
	"github.com/netsy-io/netsy/internal/replica"
	"github.com/netsy-io/netsy/internal/s3lect"
	"github.com/netsy-io/netsy/internal/view"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// Engine is what the roles need of the engine: the Primary's and the
// follower's interfaces, and whether the log failed for good.
type Engine interface {
	primary.Engine
	replica.FollowEngine
	// Failed is the log's permanent failure, or nil.
	Failed() error
}

// Log is what the roles need of the object-storage log: the Primary's
// interface, and catching a replica up from the bucket.
type Log interface {
	primary.Log
	CatchUp(ctx context.Context) error
}

// Config configures the roles of one node.
type Config struct {
	// Node is the node's identity (NodeID, ClusterID, Name, advertised
	// addresses) and its cluster flags (Quorum, timings). Addresses are
	// the ones the node listens on already.
	Node   config.Config
	Clock  clock.Clock
	Store  objstore.Store
	Engine Engine
	Log    Log
	// Conn returns a connection to a peer address, for Follow streams and
	// (when Transport is nil) for the gRPC Transport.
	Conn func(addr string) (*grpc.ClientConn, error)
	// Transport reaches other nodes' Elector and Node services (nil:
	// GRPCTransport over Conn).
	Transport Transport
	Logger    hclog.Logger
	// TermFile is where the Primary records the highest term it took up
	// (default <Node.DataDir>/primary-term.json).
	TermFile string
	// Observer, when set, is told of role changes as they happen (a
	// simulation's recorder; the node sets none).
	Observer *Observer
}

// Observer is told of the role changes a simulation checks its
// invariants against. Every field may be nil. Each runs on the goroutine
// that made the change, as it is made: it must not block, nor call back
// into the roles beyond their read-only methods.
type Observer struct {
	// ElectorStarted: this node runs an Elector for lock term term.
	ElectorStarted func(term uint64)
	// ElectorStopped: the lock term term ended (the Elector stops acting;
	// it is told the moment the lock is lost, before Run returns).
	ElectorStopped func(term uint64)
	// Offered: the view was offered cs (from "push", "heartbeat",
	// "registration") while it held Elector term before, and took it or
	// not.
	Offered func(cs *netsyv1.ClusterState, accepted bool, before uint64, from string)
	// Health: this node's own judgement of its health changed.
	Health func(ok bool, err error)
	// Primary: the Primary role changed state (Primary.Changed), with
	// its lease deadline then (a Now reading of the node's clock).
	Primary func(state netsyv1.PrimaryState, term uint64, leaseUntil time.Time)
	// Lease: a heartbeat answer renewed the lease, until leaseUntil.
	Lease func(leaseUntil time.Time)
}

func (c *Config) setDefaults() error {
	switch {
	case c.Node.NodeID == "":
		return errors.New("roles: Config.Node.NodeID is empty")
	case c.Store == nil || c.Engine == nil || c.Log == nil:
		return errors.New("roles: Config.Store, Config.Engine and Config.Log are required")
	case c.Conn == nil:
		return errors.New("roles: Config.Conn is required")
	}
	if c.Transport == nil {
		c.Transport = GRPCTransport{Conn: c.Conn}
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.Observer == nil {
		c.Observer = &Observer{}
	}
	if c.TermFile == "" {
		c.TermFile = filepath.Join(c.Node.DataDir, "primary-term.json")
	}
	return nil
}

// Roles is one node's cluster roles and the state they share.
type Roles struct {
	cfg   Config
	log   hclog.Logger
	clk   clock.Clock
	store objstore.Store
	eng   Engine
	self  *netsyv1.NodeInfo
	start time.Time

	view     *view.View
	lock     *s3lect.Election
	hb       *heartbeat.Sender
	prim     *primary.Primary
	follow   *primary.FollowService
	follower *replica.Follower

	// Owned by the loop.
	core    core
	running *elector.Elector

	inbox    inbox
	snapshot atomic.Pointer[snapshot]
	loopDone chan struct{}

	changedMu sync.Mutex
	changedCh chan struct{}
	// refollow asks watchView to hand the follower the last Cluster State
	// again: the Primary role is a Replica again (see Changed in New).
	refollow chan struct{}

	eventsC    *prometheus.CounterVec
	fallbacksC prometheus.Counter
	receiptH   prometheus.Histogram
	catchUpsC  prometheus.Counter
	// etcd's names for what the roles see (service.go's Collectors).
	leaderChangesC prometheus.Counter
	hbFailuresC    prometheus.Counter
	peerRTTH       *prometheus.HistogramVec

	// compaction runs auto-compaction while this node is Active (nil:
	// off).
	compaction *autoCompaction

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// ClusterIDHash is the etcd header cluster id of a cluster id name.
func ClusterIDHash(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	v := h.Sum64() >> 1
	if v == 0 {
		v = 1
	}
	return v
}

// Registration is the node's nodes/{node_id}.json.
func Registration(cfg config.Config, now time.Time) discovery.Registration {
	return discovery.Registration{
		NodeID: cfg.NodeID, ClusterID: cfg.ClusterID, PeerAddr: cfg.AdvertisePeerAddr(),
		ClientURLs: []string{cfg.AdvertiseClientURL()}, HTTPAddr: cfg.HTTPAddr, Name: cfg.Name, RegisteredAt: now,
	}
}

// New builds the roles; Start runs them.
func New(cfg Config) (*Roles, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	nc := cfg.Node
	policy, perr := nc.AutoCompaction()
	if perr != nil {
		return nil, fmt.Errorf("roles: %w", perr)
	}
	r := &Roles{
		cfg: cfg, log: cfg.Logger, clk: cfg.Clock, store: cfg.Store, eng: cfg.Engine,
		self: &netsyv1.NodeInfo{
			NodeId:     nc.NodeID,
			PeerAddr:   nc.AdvertisePeerAddr(),
			ClientUrls: []string{nc.AdvertiseClientURL()},
			HttpAddr:   nc.HTTPAddr,
			Name:       nc.Name,
		},
		start:     cfg.Clock.Wall(),
		view:      view.New(cfg.Logger.Named("view")),
		core:      newCore(nc.NodeID),
		inbox:     inbox{wake: make(chan struct{}, 1)},
		loopDone:  make(chan struct{}),
		changedCh: make(chan struct{}),
		refollow:  make(chan struct{}, 1),
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
		leaderChangesC: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "etcd_server_leader_changes_seen_total", Help: "The number of leader changes seen (a Primary this node had not known, or a new term of it).",
		}),
		hbFailuresC: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "etcd_server_heartbeat_send_failures_total", Help: "The total number of heartbeats to the Elector that failed or were refused.",
		}),
		// etcd's buckets: 100 µs doubling to about 3.3 s.
		peerRTTH: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "etcd_network_peer_round_trip_time_seconds", Help: "Round-trip-time histogram between peers (this node's heartbeats to the Elector, by its member id).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"To"}),
	}
	r.publish()
	var err error
	// One judge of this node's own health for heartbeats and receipts
	// alike: a failed send of either, after one immediate retry,
	// self-degrades (seed: Heartbeat-Based Degradation).
	judge := heartbeat.NewJudge(cfg.Logger.Named("heartbeat"), func(ok bool, err error) {
		if f := cfg.Observer.Health; f != nil {
			f(ok, err)
		}
		r.post(func(c *core, _ **elector.Elector) effects { return c.health(ok, err) })
	})
	r.follower = replica.NewFollower(replica.FollowerConfig{
		Self:   nc.NodeID,
		Engine: cfg.Engine,
		CatchUp: func(ctx context.Context) error {
			r.catchUpsC.Inc()
			return cfg.Log.CatchUp(ctx)
		},
		Conn:  cfg.Conn,
		State: r.state,
		Refused: func(refused bool) {
			r.post(func(c *core, _ **elector.Elector) effects { return c.refused(refused) })
		},
		Sent:              func(err error) { judge.Sent("receipt", err) },
		HeartbeatInterval: nc.HeartbeatInterval,
		Clock:             cfg.Clock,
		Logger:            cfg.Logger,
	})
	r.compaction = newAutoCompaction(policy, cfg.Engine, cfg.Clock, cfg.Logger)
	r.prim, err = primary.New(primary.Config{
		Self:              nc.NodeID,
		Engine:            cfg.Engine,
		Log:               cfg.Log,
		Quorum:            nc.Quorum,
		QuorumTimeout:     nc.QuorumTimeout,
		HeartbeatInterval: nc.HeartbeatInterval,
		LeaseWindow:       LeaseWindow(nc.HeartbeatInterval),
		Fallback: func(reason string) {
			r.fallbacksC.Inc()
			r.event("quorum_fallback", nc.NodeID, reason)
		},
		ReceiptLatency: func(d time.Duration) { r.receiptH.Observe(d.Seconds()) },
		TermFile:       cfg.TermFile,
		StopFollowing:  r.follower.Stop,
		HighestTerm: func(ctx context.Context) (uint64, error) {
			ctx, cancel := clock.WithTimeout(ctx, cfg.Clock, 5*time.Second)
			defer cancel()
			m, _, err := discovery.NewMembersFile(cfg.Store, nc.ClusterID).Load(ctx)
			return m.PrimaryTerm, err
		},
		Fenced: r.fenced,
		Changed: func(s netsyv1.PrimaryState, term uint64) {
			if f := cfg.Observer.Primary; f != nil {
				f(s, term, r.prim.LeaseUntil())
			}
			r.compaction.primaryState(s)
			if s == netsyv1.PrimaryState_REPLICA {
				// The Starting step stops the follower from its own
				// goroutine, so that Stop may land after the follower
				// was told of a newer Primary (the node was paused
				// between the two), and then nothing resumes it: the
				// view hands out no state twice. Once the role is a
				// Replica again, the follower gets the current state
				// again, which resumes a paused follower and changes
				// nothing for one that follows already.
				select {
				case r.refollow <- struct{}{}:
				default:
				}
			}
			r.post(func(c *core, _ **elector.Elector) effects {
				r.reconsiderDeposition(c)
				return effects{notify: true, beat: true,
					notes: []note{{"primary_" + strings.ToLower(s.String()), nc.NodeID, fmt.Sprintf("term %d", term)}}}
			})
		},
		Clock:  cfg.Clock,
		Logger: cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("roles: %w", err)
	}
	r.follow = &primary.FollowService{P: r.prim}
	r.lock, err = s3lect.New(s3lect.Config{
		Store:    cfg.Store,
		NodeID:   nc.NodeID,
		PeerAddr: nc.AdvertisePeerAddr(),
		Lease:    nc.ElectorLease,
		Renew:    nc.ElectorRenew,
		MinTerm:  r.view.ElectorTerm,
		Clock:    cfg.Clock,
		Logger:   cfg.Logger.Named("s3lect"),
	})
	if err != nil {
		return nil, fmt.Errorf("roles: %w", err)
	}
	r.hb = heartbeat.New(heartbeat.Config{
		Interval: nc.HeartbeatInterval,
		Clock:    cfg.Clock,
		Logger:   cfg.Logger.Named("heartbeat"),
		State:    r.state,
		Send:     r.sendHeartbeat,
		Answered: r.answered,
		Judge:    judge,
		Fast:     func() bool { return r.prim.Active() },
	})
	return r, nil
}

// LeaseWindow is the Primary's lease for a heartbeat interval: one and a
// half intervals. The Elector waits a quarter more than that after the
// last heartbeat answer it gave the Primary before it elects a successor,
// so a SIGKILLed Primary is replaced in about a second with the default
// 500 ms interval. The Primary heartbeats its Elector every half interval
// while it is Active (heartbeat.Config.Fast), so its lease lapses only after three
// heartbeats in a row go unanswered: a longer silence than the two a
// lease of two intervals renewed every interval would tolerate.
func LeaseWindow(heartbeat time.Duration) time.Duration { return heartbeat + heartbeat/2 }

// Start runs the roles until Close. The roles' goroutines live on a
// context derived from ctx: cancelling it stops them as Close does, but
// only Close waits for them.
func (r *Roles) Start(ctx context.Context) {
	ctx, r.cancel = context.WithCancel(ctx)
	r.wg.Add(4)
	go func() {
		defer r.wg.Done()
		r.loop(ctx)
	}()
	r.prim.Start()
	r.follower.Start()
	r.lock.Start()
	go r.runElectorTerms(ctx)
	go r.watchView(ctx)
	go r.beatOnNewElector(ctx)
	r.hb.Start()
}

// beatOnNewElector asks for a heartbeat at once whenever the lock comes
// to name another node as the Elector. The sender's first beat goes out
// as Start returns, usually before the lock's first read: without this
// the node would register only at the next tick, a heartbeat interval
// later, and on a restart of every node that wait was on the way to the
// first election (the Elector needs the others' heartbeats to count them
// Healthy). A beat asked for while one runs is not lost (heartbeat.Now).
// Only a new node or term counts: the lock also notifies when the same
// holder is seen with other details (the one an answer names carries no
// lease length), and that needs no beat.
func (r *Roles) beatOnNewElector(ctx context.Context) {
	defer r.wg.Done()
	holders, stop := r.lock.Subscribe()
	defer stop()
	w := electorWatch{self: r.self.NodeId}
	for {
		select {
		case h, ok := <-holders:
			if !ok {
				return
			}
			if w.newElector(h) {
				r.hb.Now()
			}
		case <-ctx.Done():
			return
		}
	}
}

// electorWatch follows the lock's holders for beatOnNewElector.
type electorWatch struct {
	self string
	node string
	term uint64
}

// newElector says whether h names an Elector other than this node that
// the last holder seen did not (another node or term); a released or
// empty lock forgets the last one.
func (w *electorWatch) newElector(h s3lect.Holder) bool {
	if h.NodeID == "" || h.Released {
		w.node, w.term = "", 0
		return false
	}
	fresh := h.NodeID != w.node || h.Term != w.term
	w.node, w.term = h.NodeID, h.Term
	return fresh && h.NodeID != w.self
}

// Close stops every role, in the order that lets each one finish: no more
// heartbeats or Follow streams, the lock given up, the Elector and the
// wiring's goroutines stopped, then the Primary.
func (r *Roles) Close() {
	r.hb.Close()
	r.follower.Close()
	r.lock.Close()
	if r.cancel != nil {
		r.cancel()
	}
	r.wg.Wait()
	r.prim.Close()
	r.compaction.close()
}

// Primary implements replica.Roles.
func (r *Roles) Primary() (*netsyv1.NodeInfo, uint64) {
	cs := r.view.Current()
	if cs == nil {
		return nil, 0
	}
	return cs.Primary, cs.PrimaryTerm
}

var _ replica.Roles = (*Roles)(nil)

// Changed implements replica.Roles.
func (r *Roles) Changed() <-chan struct{} {
	r.changedMu.Lock()
	defer r.changedMu.Unlock()
	return r.changedCh
}

// Active implements replica.Roles.
func (r *Roles) Active() bool { return r.prim.Active() }

// ConfirmLinearizable implements replica.Roles.
func (r *Roles) ConfirmLinearizable(ctx context.Context) error {
	return r.prim.ConfirmLinearizable(ctx)
}

// Members implements replica.Roles.
func (r *Roles) Members() []*netsyv1.NodeInfo {
	if cs := r.view.Current(); cs != nil {
		return cs.Members
	}
	return nil
}

// Identity implements replica.Roles.
func (r *Roles) Identity() (uint64, uint64) {
	return ClusterIDHash(r.cfg.Node.ClusterID), r.snap().memberID
}

// MemberID is the member id the Elector gave this node (0 before).
func (r *Roles) MemberID() uint64 { return r.snap().memberID }

// Registered reports whether the Elector this node knows registered it.
func (r *Roles) Registered() bool { return r.snap().registered }

// Healthy reports this node's own judgement: its heartbeats get through,
// it is not leaving and its log has not failed.
func (r *Roles) Healthy() bool {
	s := r.snap()
	return s.healthy && !s.leaving && r.eng.Failed() == nil
}

// PrimaryState is this node's primary state and the term it holds or
// last held.
func (r *Roles) PrimaryState() (netsyv1.PrimaryState, uint64) { return r.prim.State() }

// Replication is the Primary's view of its replicas (nil unless Active).
func (r *Roles) Replication() *netsyv1.Replication { return r.prim.Replication() }

// Following reports whether this replica's Follow stream is open, and
// its last error.
func (r *Roles) Following() (bool, error) {
	ok, _, err := r.follower.Connected()
	return ok, err
}

// RunningElector is the Elector this node runs now, or nil.
func (r *Roles) RunningElector() *elector.Elector { return r.snap().elector }

// ElectorTerm is the highest Elector term this node has seen.
func (r *Roles) ElectorTerm() uint64 { return r.view.ElectorTerm() }

// Handoff asks the Elector to move the Primary role (to node to, if
// given).
func (r *Roles) Handoff(ctx context.Context, to string) (*netsyv1.ClusterState, error) {
	el, err := r.electorAPI()
	if err != nil {
		return nil, err
	}
	return el.Handoff(ctx, to)
}

// LogLost is told that this node's local log failed for good (the engine
// refuses writes and Follow already): an Active Primary drains what it
// can to object storage and becomes a Replica, so that the Elector, which
// hears this node Degraded from now on, elects another node instead of
// deferring to a Primary that cannot write.
func (r *Roles) LogLost(ctx context.Context) error {
	if !r.prim.Active() {
		return nil
	}
	return r.prim.Drain(ctx)
}

// EngineDeposed is the engine's OnDeposed: object storage fenced it.
func (r *Roles) EngineDeposed(err error) { r.prim.Deposed(err) }

// fenced is the Primary's Fenced: it stepped down at term because another
// writer took over object storage.
func (r *Roles) fenced(err error, term uint64) {
	at := r.clk.Wall()
	r.post(func(c *core, _ **elector.Elector) effects {
		c.fenced(err, term, at)
		return effects{notify: true}
	})
}

// reconsiderDeposition ends the deposition if it is over (on the loop).
func (r *Roles) reconsiderDeposition(c *core) {
	p, term := r.Primary()
	_, held := r.prim.State()
	c.reconsider(p, term, r.prim.Active(), held)
}

// DepositionReason says why a node that lost its fence cannot serve yet,
// or nil. It can once the Elector has named a Primary at a later term:
// this node, Active again (its Starting step caught up with the bucket),
// or another node, which it follows (Ready checks that on its own). Until
// then /healthz and /readyz give the deposition as their reason;
// linearizable reads and watches wait for the same thing meanwhile, as a
// deposed Primary is a Replica whose Primary is not known.
func (r *Roles) DepositionReason() error {
	d := r.snap().deposed
	if d == nil {
		return nil
	}
	p, term := r.Primary()
	_, held := r.prim.State()
	if depositionOver(d, r.cfg.Node.NodeID, p, term, r.prim.Active(), held) {
		r.post(func(c *core, _ **elector.Elector) effects {
			r.reconsiderDeposition(c)
			return effects{}
		})
		return nil
	}
	return fmt.Errorf("deposed %s ago as Primary (term %d): another writer took over object storage (%v); stepped down until the Elector names a Primary at a later term and this node has caught up with the bucket",
		r.clk.Since(d.At).Round(time.Millisecond), d.Term, d.Err)
}

// Ready says why the roles cannot serve clients yet, or nil: deposed, not
// registered, no Primary known, this node the Primary but not Active, or
// not following the Primary.
func (r *Roles) Ready() error {
	if err := r.DepositionReason(); err != nil {
		return err
	}
	if !r.snap().registered {
		return errors.New("not registered with an Elector yet")
	}
	p, _ := r.Primary()
	switch {
	case p == nil:
		return errors.New("no Primary elected yet")
	case p.NodeId == r.cfg.Node.NodeID:
		if !r.prim.Active() {
			s, _ := r.prim.State()
			return fmt.Errorf("this node is the Primary and %s", s)
		}
	default:
		if ok, _, err := r.follower.Connected(); !ok {
			return fmt.Errorf("not following the Primary %s yet (%v)", p.NodeId, err)
		}
	}
	return nil
}

// NodeState is this node's state as the Elector and netsyctl see it.
func (r *Roles) NodeState() *netsyv1.NodeState {
	s := r.snap()
	info := &netsyv1.NodeInfo{NodeId: r.self.NodeId, MemberId: s.memberID, PeerAddr: r.self.PeerAddr, ClientUrls: r.self.ClientUrls, HttpAddr: r.self.HttpAddr, Name: r.self.Name}
	evs := append([]*netsyv1.Event(nil), s.events...)
	return &netsyv1.NodeState{State: r.state(), Info: info, ClusterState: r.view.Current(), Events: evs}
}

// ClusterState is the Elector's full view (nil when no Elector answers)
// and this node's own state.
func (r *Roles) ClusterState(ctx context.Context) (*netsyv1.ClusterState, *netsyv1.NodeState) {
	self := r.NodeState()
	el, err := r.electorAPI()
	if err != nil {
		return nil, self
	}
	cs, err := el.ClusterState(ctx, true)
	if err != nil {
		return nil, self
	}
	return cs, self
}
