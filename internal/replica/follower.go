package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
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
	// FollowCommit is Follow, then CommitTo(commit) when commit > 0 and
	// the entries were taken, in one handoff to the engine.
	FollowCommit(ctx context.Context, term int64, entries []*netsyv1.Entry, commit uint64) error
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
	// State is this node's heartbeat, embedded in receipts. Its primary
	// state also says whether the Primary role still holds the log: the
	// node follows only while it says Replica (or nothing).
	State func() *netsyv1.Heartbeat
	// Refused is told when the Primary's address refused the stream (its
	// process is gone), or nil once a stream is open again.
	Refused func(refused bool)
	// Sent is told how sending to the Primary goes, for this node's one
	// health decision (heartbeat.Judge.Sent): nil once a receipt or
	// heartbeat got through on the stream (first, or after a failure), an
	// error once one failed and its immediate retry (a new stream opened
	// at once) failed too. Nil: nobody is told.
	Sent func(err error)
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
	// reported is the last send outcome told to Sent: 0 none, 1 got
	// through, 2 failed with its retry.
	reported atomic.Int32
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
	retrying := false // the last session's send failed; this one is its retry
	for f.ctx.Err() == nil {
		// Asked before f.mu: it reads the node's state, which must not
		// wait on the Follower.
		writing := f.writing()
		f.mu.Lock()
		target, term, paused := f.target, f.term, f.paused
		// This reads the newest target: a change signalled before it is
		// taken into account (Observe signals under f.mu).
		select {
		case <-f.changed:
		default:
		}
		if target == nil || paused || writing {
			// When only this node's own writer role holds us back, it
			// was the Primary and is stepping down. That runs on its own
			// (the engine stops writing, then the log gives the writer
			// role up and cuts what no Primary committed) and tells
			// nobody here. Look again shortly instead of waiting for a
			// Cluster State that will not come again: the one naming the
			// new Primary is already here.
			var recheck <-chan time.Time
			if target != nil && !paused {
				recheck = f.cfg.Clock.After(writerRecheck)
			}
			f.running = nil
			f.mu.Unlock()
			select {
			case <-f.changed:
			case <-recheck:
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

		sent, err := f.session(ctx, target, term)
		// Read before cancel: cancelled by Observe or Stop means a new
		// target, not a failure.
		retarget := ctx.Err() != nil
		cancel()
		close(running)
		f.setStatus(false, err)
		if f.cfg.Refused != nil && peer.Refused(err) {
			f.cfg.Refused(true)
		}
		if f.ctx.Err() != nil {
			return
		}
		var se *sendError
		switch failed := errors.As(err, &se); {
		case retarget:
			retrying = false // a new target: judge its stream afresh
		case failed && (!retrying || sent):
			// A receipt or heartbeat failed to go out: retry at once on a
			// new stream before judging.
			f.log.Debug("a send to the Primary failed; retrying at once on a new stream", "primary", target.NodeId, "error", err)
			retrying = true
			continue
		case failed || (retrying && !sent && err != nil):
			// The retry failed too (its send failed, or it could not even
			// open a stream): the seed's rule degrades this node.
			retrying = false
			f.reportSend(fmt.Errorf("a send to the Primary %s and its immediate retry failed: %w", target.NodeId, err))
		case sent:
			retrying = false
		}
		if err != nil && !retarget {
			// A Primary still Starting refuses the stream by design, and
			// turns Active soon (or fails, and a new Cluster State cuts
			// the wait): ask again every startingRetry, never backing off
			// as from a fault, so this node follows (and serves
			// linearizable reads) within that of the Primary turning
			// Active. The backoff grew 20 ms to 640 ms against a long
			// Starting step before.
			starting := peer.ReasonOf(err) == peer.ReasonPrimaryStarting
			wait := backoff
			if starting {
				wait = startingRetry
			}
			f.log.Debug("follow stream ended; reconnecting", "primary", target.NodeId, "error", err, "in", wait)
			// A Cluster State naming another Primary ends the wait: the
			// node reconnects to a new Primary at once.
			t := f.cfg.Clock.NewTimer(wait)
			select {
			case <-t.C():
				if starting {
					backoff = 20 * time.Millisecond
				} else {
					backoff = min(2*backoff, time.Second)
				}
			case <-f.changed:
				backoff = 20 * time.Millisecond
			case <-f.ctx.Done():
				t.Stop()
				return
			}
			t.Stop()
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

// startingRetry is how soon a Follower asks again a Primary that refused
// its stream because it is still Starting (peer.ReasonPrimaryStarting).
const startingRetry = 50 * time.Millisecond

// writerRecheck is how often a Follower named a Primary to follow looks
// again whether the local engine stopped writing (a step-down finished).
const writerRecheck = 20 * time.Millisecond

var errTerm = errors.New("replica: a Follow message carries another primary term")

// writing reports whether this node still holds the writer's role: its
// engine evaluates writes, or its Primary role has not finished handing
// the log back (Starting, Active, Draining or stepping down). Following
// meanwhile would append to a log the writer still owns.
func (f *Follower) writing() bool {
	if f.cfg.Engine.IsWriter() {
		return true
	}
	if f.cfg.State == nil {
		return false
	}
	switch f.cfg.State().GetPrimaryState() {
	case netsyv1.PrimaryState_STARTING, netsyv1.PrimaryState_ACTIVE, netsyv1.PrimaryState_DRAINING:
		return true
	}
	return false
}

// reportSend tells Sent how sending goes, when that changes.
func (f *Follower) reportSend(err error) {
	if f.cfg.Sent == nil {
		return
	}
	state := int32(1)
	if err != nil {
		state = 2
	}
	if f.reported.Swap(state) != state {
		f.cfg.Sent(err)
	}
}

// sendError is a receipt or heartbeat that failed to go out on the stream.
type sendError struct{ err error }

func (e *sendError) Error() string { return "send on the Follow stream: " + e.err.Error() }
func (e *sendError) Unwrap() error { return e.err }

// session follows target at term until the stream ends. sent reports
// whether a receipt or heartbeat went out on it.
func (f *Follower) session(ctx context.Context, target *netsyv1.NodeInfo, term uint64) (sent bool, err error) {
	var sentAny atomic.Bool
	defer func() { sent = sentAny.Load() }()
	conn, err := f.cfg.Conn(target.PeerAddr)
	if err != nil {
		return false, err
	}
	// A failed send ends the stream at once (the receive loop may be
	// waiting on a quiet Primary).
	streamCtx, endStream := context.WithCancel(ctx)
	defer endStream()
	stream, err := netsyv1.NewFollowClient(conn).Follow(streamCtx)
	if err != nil {
		return false, err
	}
	eng := f.cfg.Engine
	last, rev, lastTerm := eng.LastAppended()
	err = stream.Send(&netsyv1.FollowRequest{Msg: &netsyv1.FollowRequest_Start{Start: &netsyv1.FollowStart{
		NodeId: f.cfg.Self, PrimaryTerm: term, LastIndex: last, LastRevision: rev, LastTerm: lastTerm,
		CommittedIndex: eng.CommittedIndex(),
	}}})
	if err != nil {
		return false, err
	}
	first, err := stream.Recv()
	if err != nil {
		return false, err
	}
	if first.PrimaryTerm != term {
		return false, fmt.Errorf("%w: %d, following %d", errTerm, first.PrimaryTerm, term)
	}
	init := first.GetInitial()
	if init == nil {
		return false, errors.New("replica: the Follow stream did not start with Initial")
	}
	if init.CatchUpFromStorage {
		f.log.Info("too far behind the Primary; catching up from object storage first", "primary", target.NodeId, "from", init.NextIndex)
		return false, eng.Resync(ctx, f.cfg.CatchUp)
	}
	if init.Truncate {
		f.log.Warn("the Primary's history diverges from the local log: cutting entries no Primary committed",
			"after", init.TruncateAfter, "local_last", last)
		if err := eng.TruncateFollowed(ctx, init.TruncateAfter); err != nil {
			return false, fmt.Errorf("cut the local log after %d: %w", init.TruncateAfter, err)
		}
	}
	if last, _, _ := eng.LastAppended(); init.NextIndex != last+1 {
		return false, fmt.Errorf("replica: the Primary streams from index %d but the local log ends at %d", init.NextIndex, last)
	}
	// Initial's commit point takes the path every Commit takes.
	if err := f.committed(ctx, init.CommittedIndex); err != nil {
		return false, err
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
	go func() {
		err := f.sendReceipts(sctx, stream, &sentAny)
		if err != nil {
			endStream()
		}
		sendErr <- err
	}()
	// end stops the sender; a failed send is the cause to report (a
	// broken stream fails the receive too).
	end := func(err error) (bool, error) {
		stopSend()
		var se *sendError
		if serr := <-sendErr; errors.As(serr, &se) {
			return false, serr
		}
		return false, err
	}
	// One envelope for every message of the stream: decoding resets it
	// and allocates what it holds afresh, so the entries handed to the
	// engine (which keeps them) are never overwritten.
	m := new(netsyv1.FollowResponse)
	for {
		if err := stream.RecvMsg(m); err != nil {
			return end(err)
		}
		if m.PrimaryTerm != term {
			return end(fmt.Errorf("%w: %d, following %d", errTerm, m.PrimaryTerm, term))
		}
		switch v := m.Msg.(type) {
		case *netsyv1.FollowResponse_Entries:
			// The batch's commit point takes the engine's one path for
			// commits (CommitTo), in the same handoff as its entries.
			err = eng.FollowCommit(ctx, int64(term), v.Entries.Entries, v.Entries.CommitIndex)
		case *netsyv1.FollowResponse_Commit:
			err = f.committed(ctx, v.Commit.Index)
		case *netsyv1.FollowResponse_Compact:
			// Deliberately not acted on: a compaction is an entry of the
			// log, applied by every node at the same place in the history
			// once a commit covers it (so the floor already follows
			// Initial and Commit). Compacting here on the message instead
			// could compact a replica ahead of entries it has not applied.
		case *netsyv1.FollowResponse_Initial:
			return end(errors.New("replica: a second Initial on one Follow stream"))
		}
		if err != nil {
			return end(err)
		}
		select {
		case err := <-sendErr:
			return false, err
		default:
		}
	}
}

// committed applies the Primary's commit point: Initial's and every
// Commit's take this one path (an entry batch's takes the engine's same
// one, in the handoff that appends the batch: FollowCommit). Entries
// through index that are durable here become visible, and with them any
// compaction among them, so the committed revision and the compaction
// floor follow.
func (f *Follower) committed(ctx context.Context, index uint64) error {
	return f.cfg.Engine.CommitTo(ctx, index)
}

// sendReceipts sends a Receipt whenever the durable index advances, and a
// heartbeat whenever nothing went out for a whole interval: the Primary
// never goes longer than one interval without hearing from this node, nor
// without its heartbeat, nor counts a receipt by a health it no longer
// has.
func (f *Follower) sendReceipts(ctx context.Context, stream netsyv1.Follow_FollowClient, sentAny *atomic.Bool) error {
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
	// The heartbeat last sent on this stream: its health, and when. A
	// receipt carries the heartbeat only when the Primary has none from
	// this stream, when the health changed since (the Primary counts a
	// receipt by the last health it heard: a change must reach it with
	// the first receipt after it, as when every receipt carried one), or
	// when the last is an interval old; the receipts between carry the
	// index alone. Encoding the heartbeat into every receipt was half of
	// what sending receipts cost a replica in the 3-node put-seq profile.
	var (
		hbSent   bool
		hbHealth netsyv1.HealthState
		hbAt     time.Time
	)
	heartbeat := func(force bool) *netsyv1.Heartbeat {
		hb := f.cfg.State()
		now := f.cfg.Clock.Now()
		if !force && hbSent && hb.GetHealth() == hbHealth && now.Sub(hbAt) < f.cfg.HeartbeatInterval {
			return nil
		}
		hbSent, hbHealth, hbAt = true, hb.GetHealth(), now
		return hb
	}
	for {
		notify := eng.DurableNotify()
		if d := eng.DurableIndex(); d > sent {
			err := stream.Send(&netsyv1.FollowRequest{Msg: &netsyv1.FollowRequest_Receipt{Receipt: &netsyv1.Receipt{Index: d, Heartbeat: heartbeat(false)}}})
			if err != nil {
				return &sendError{err}
			}
			f.sentOK(sentAny)
			sent = d
			rearm()
		}
		select {
		case <-notify:
		case <-quiet.C():
			err := stream.Send(&netsyv1.FollowRequest{Msg: &netsyv1.FollowRequest_Heartbeat{Heartbeat: heartbeat(true)}})
			if err != nil {
				return &sendError{err}
			}
			f.sentOK(sentAny)
			quiet.Reset(f.cfg.HeartbeatInterval)
		case <-ctx.Done():
			return nil
		}
	}
}

// sentOK notes a receipt or heartbeat that went out.
func (f *Follower) sentOK(sentAny *atomic.Bool) {
	if !sentAny.Swap(true) {
		f.reportSend(nil)
	}
}
