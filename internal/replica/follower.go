package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/peer"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// FollowEngine is what following needs of the engine.
type FollowEngine interface {
	Follow(ctx context.Context, term int64, entries []*netsyv1.Entry) error
	CommitTo(ctx context.Context, index uint64) error
	TruncateFollowed(ctx context.Context, index uint64) error
	Resync(ctx context.Context, prepare func(context.Context) error) error
	LastAppended() (index uint64, revision, term int64)
	CommittedIndex() uint64
	DurableIndex() uint64
	DurableNotify() <-chan struct{}
	IsWriter() bool
}

// FollowerConfig configures a Follower.
type FollowerConfig struct {
	Self   string
	Engine FollowEngine
	// CatchUp brings the local log up to object storage (objwal).
	CatchUp func(ctx context.Context) error
	// Conn returns a connection to a peer address.
	Conn func(addr string) (*grpc.ClientConn, error)
	// State is this node's heartbeat, embedded in receipts.
	State func() *netsyv1.Heartbeat
	// Refused is told when the Primary's address refused the stream (its
	// process is gone), or nil once a stream is open again.
	Refused func(refused bool)
	// HeartbeatInterval is the cadence of standalone heartbeats on the
	// stream when no receipt went out (default 500 ms).
	HeartbeatInterval time.Duration
	Clock             clock.Clock
	Logger            hclog.Logger
}

// Follower keeps the local log following the Primary.
type Follower struct {
	cfg FollowerConfig
	log hclog.Logger

	mu      sync.Mutex
	target  *netsyv1.NodeInfo // the Primary to follow; nil: none
	term    uint64
	paused  bool // Stop was called and no new Primary was named since
	cancel  context.CancelFunc
	running chan struct{} // closed when the current session ends
	changed chan struct{}

	ctx    context.Context
	stop   context.CancelFunc
	wg     sync.WaitGroup
	status followStatus
}

type followStatus struct {
	mu        sync.Mutex
	connected bool
	since     time.Time
	err       error
}

// NewFollower returns a Follower; Start runs it.
func NewFollower(cfg FollowerConfig) *Follower {
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 500 * time.Millisecond
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Follower{cfg: cfg, log: cfg.Logger.Named("replica"), changed: make(chan struct{}, 1)}
}

// Start runs the follow loop until Close.
func (f *Follower) Start() {
	f.ctx, f.stop = context.WithCancel(context.Background())
	f.wg.Add(1)
	go f.run()
}

// Close stops following and waits.
func (f *Follower) Close() {
	if f.stop != nil {
		f.stop()
	}
	f.mu.Lock()
	if f.cancel != nil {
		f.cancel()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// Observe hands the Follower a Cluster State this node accepted.
func (f *Follower) Observe(cs *netsyv1.ClusterState) {
	p := cs.GetPrimary()
	f.mu.Lock()
	defer f.mu.Unlock()
	if p == nil || p.NodeId == f.cfg.Self {
		if f.target != nil && f.cancel != nil {
			f.cancel()
		}
		f.target, f.term = nil, 0
		return
	}
	if f.target != nil && f.target.NodeId == p.NodeId && f.term == cs.PrimaryTerm && !f.paused {
		return
	}
	f.target, f.term, f.paused = p, cs.PrimaryTerm, false
	if f.cancel != nil {
		f.cancel() // the session ends; run starts one for the new target
	}
	select {
	case f.changed <- struct{}{}:
	default:
	}
}

// Stop ends following (before this node is promoted) and returns once no
// more entries reach the engine. Following resumes on the next Primary
// named.
func (f *Follower) Stop(ctx context.Context) error {
	f.mu.Lock()
	f.paused = true
	if f.cancel != nil {
		f.cancel()
	}
	running := f.running
	f.mu.Unlock()
	if running == nil {
		return nil
	}
	select {
	case <-running:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Connected reports whether a Follow stream is open, since when, and the
// last error.
func (f *Follower) Connected() (bool, time.Time, error) {
	f.status.mu.Lock()
	defer f.status.mu.Unlock()
	return f.status.connected, f.status.since, f.status.err
}

func (f *Follower) run() {
	defer f.wg.Done()
	backoff := 20 * time.Millisecond
	for f.ctx.Err() == nil {
		f.mu.Lock()
		target, term, paused := f.target, f.term, f.paused
		if target == nil || paused || f.cfg.Engine.IsWriter() {
			f.running = nil
			f.mu.Unlock()
			select {
			case <-f.changed:
			case <-f.ctx.Done():
				return
			}
			continue
		}
		ctx, cancel := context.WithCancel(f.ctx)
		f.cancel = cancel
		running := make(chan struct{})
		f.running = running
		f.mu.Unlock()

		err := f.session(ctx, target, term)
		cancel()
		close(running)
		f.setStatus(false, err)
		if f.cfg.Refused != nil && peer.Refused(err) {
			f.cfg.Refused(true)
		}
		if f.ctx.Err() != nil {
			return
		}
		if err != nil && ctx.Err() == nil {
			f.log.Debug("follow stream ended; reconnecting", "primary", target.NodeId, "error", err, "in", backoff)
			if f.cfg.Clock.Sleep(f.ctx, backoff) != nil {
				return
			}
			backoff = min(2*backoff, time.Second)
		} else {
			backoff = 20 * time.Millisecond
		}
	}
}

func (f *Follower) setStatus(connected bool, err error) {
	f.status.mu.Lock()
	defer f.status.mu.Unlock()
	f.status.connected, f.status.err = connected, err
	if connected {
		f.status.since = f.cfg.Clock.Now()
	}
}

var errTerm = errors.New("replica: a Follow message carries another primary term")

// session follows target at term until the stream ends.
func (f *Follower) session(ctx context.Context, target *netsyv1.NodeInfo, term uint64) error {
	conn, err := f.cfg.Conn(target.PeerAddr)
	if err != nil {
		return err
	}
	stream, err := netsyv1.NewFollowClient(conn).Follow(ctx)
	if err != nil {
		return err
	}
	eng := f.cfg.Engine
	last, rev, lastTerm := eng.LastAppended()
	err = stream.Send(&netsyv1.FollowRequest{Msg: &netsyv1.FollowRequest_Start{Start: &netsyv1.FollowStart{
		NodeId: f.cfg.Self, PrimaryTerm: term, LastIndex: last, LastRevision: rev, LastTerm: lastTerm,
		CommittedIndex: eng.CommittedIndex(),
	}}})
	if err != nil {
		return err
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	if first.PrimaryTerm != term {
		return fmt.Errorf("%w: %d, following %d", errTerm, first.PrimaryTerm, term)
	}
	init := first.GetInitial()
	if init == nil {
		return errors.New("replica: the Follow stream did not start with Initial")
	}
	if init.CatchUpFromStorage {
		f.log.Info("too far behind the Primary; catching up from object storage first", "primary", target.NodeId, "from", init.NextIndex)
		return eng.Resync(ctx, f.cfg.CatchUp)
	}
	if init.Truncate {
		f.log.Warn("the Primary's history diverges from the local log: cutting entries no Primary committed",
			"after", init.TruncateAfter, "local_last", last)
		if err := eng.TruncateFollowed(ctx, init.TruncateAfter); err != nil {
			return fmt.Errorf("cut the local log after %d: %w", init.TruncateAfter, err)
		}
	}
	if last, _, _ := eng.LastAppended(); init.NextIndex != last+1 {
		return fmt.Errorf("replica: the Primary streams from index %d but the local log ends at %d", init.NextIndex, last)
	}
	if err := eng.CommitTo(ctx, init.CommittedIndex); err != nil {
		return err
	}
	f.setStatus(true, nil)
	if f.cfg.Refused != nil {
		f.cfg.Refused(false)
	}
	f.log.Info("following the Primary", "primary", target.NodeId, "primary_term", term, "from", init.NextIndex)

	// One goroutine sends receipts and heartbeats; this one receives.
	sendErr := make(chan error, 1)
	sctx, stopSend := context.WithCancel(ctx)
	defer stopSend()
	go func() { sendErr <- f.sendReceipts(sctx, stream) }()
	for {
		m, err := stream.Recv()
		if err != nil {
			stopSend()
			<-sendErr
			return err
		}
		if m.PrimaryTerm != term {
			stopSend()
			<-sendErr
			return fmt.Errorf("%w: %d, following %d", errTerm, m.PrimaryTerm, term)
		}
		switch v := m.Msg.(type) {
		case *netsyv1.FollowResponse_Entries:
			err = eng.Follow(ctx, int64(term), v.Entries.Entries)
			if c := v.Entries.CommitIndex; err == nil && c > 0 {
				err = eng.CommitTo(ctx, c)
			}
		case *netsyv1.FollowResponse_Commit:
			err = eng.CommitTo(ctx, v.Commit.Index)
		case *netsyv1.FollowResponse_Compact, *netsyv1.FollowResponse_Initial:
			// Compaction is an entry of the log; Initial comes once.
		}
		if err != nil {
			stopSend()
			<-sendErr
			return err
		}
		select {
		case err := <-sendErr:
			return err
		default:
		}
	}
}

// sendReceipts sends a Receipt whenever the durable index advances, and a
// heartbeat whenever nothing went out for a whole interval: the Primary
// never goes longer than one interval without hearing from this node.
func (f *Follower) sendReceipts(ctx context.Context, stream netsyv1.Follow_FollowClient) error {
	eng := f.cfg.Engine
	var sent uint64
	quiet := f.cfg.Clock.NewTimer(f.cfg.HeartbeatInterval)
	defer quiet.Stop()
	// rearm restarts the quiet timer after a send.
	rearm := func() {
		if !quiet.Stop() {
			select {
			case <-quiet.C():
			default:
			}
		}
		quiet.Reset(f.cfg.HeartbeatInterval)
	}
	for {
		notify := eng.DurableNotify()
		if d := eng.DurableIndex(); d > sent {
			err := stream.Send(&netsyv1.FollowRequest{Msg: &netsyv1.FollowRequest_Receipt{Receipt: &netsyv1.Receipt{Index: d, Heartbeat: f.cfg.State()}}})
			if err != nil {
				return err
			}
			sent = d
			rearm()
		}
		select {
		case <-notify:
		case <-quiet.C():
			err := stream.Send(&netsyv1.FollowRequest{Msg: &netsyv1.FollowRequest_Heartbeat{Heartbeat: f.cfg.State()}})
			if err != nil {
				return err
			}
			quiet.Reset(f.cfg.HeartbeatInterval)
		case <-ctx.Done():
			return nil
		}
	}
}
