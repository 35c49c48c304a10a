package primary

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/engine"
	"github.com/netsy-io/netsy/internal/objwal"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// Engine is what the Primary role needs of the engine.
type Engine interface {
	Promote(ctx context.Context, term int64, prepare func(context.Context) error) error
	Demote(ctx context.Context, flush bool) (uint64, error)
	HoldStorage(ctx context.Context) error
	IsWriter() bool
	CommittedIndex() uint64
	CurrentRevision() int64
	CompactRevision() int64
	LastAppended() (index uint64, revision, term int64)
	ReadEntries(from uint64, max int) ([]*netsyv1.Entry, error)
	EntryTerm(index uint64) (int64, bool)
	AppendNotify() <-chan struct{}
	// WatchAppends pokes ch (buffered) after appends while on holds true.
	WatchAppends(ch chan<- struct{}, on *atomic.Bool) (stop func())
	CommitNotify() <-chan struct{}
	LeaseRenew(ctx context.Context, id int64) (int64, error)
}

// Log is what the Primary role needs of object storage.
type Log interface {
	Claim(ctx context.Context) error
	Release(ctx context.Context, flush bool, keep uint64) error
	StillWriter(ctx context.Context) error
	SetMode(objwal.Mode)
	SetReplicated(index uint64)
}

// Config configures the Primary role.
type Config struct {
	Self   string
	Engine Engine
	Log    Log
	Quorum int
	// QuorumTimeout is how long a write waits for replica receipts
	// before it falls back to object storage (default 500 ms).
	QuorumTimeout time.Duration
	// HeartbeatInterval is the replicas' heartbeat cadence: a replica
	// silent for two intervals stops counting toward the quorum (default
	// 500 ms).
	HeartbeatInterval time.Duration
	// LeaseWindow is the Primary's lease (SPEC §5.4; default 1 s, two
	// heartbeat intervals).
	LeaseWindow time.Duration
	// TermFile records, durably, the highest term this node took up.
	TermFile string
	// StopFollowing makes the replica role stop feeding the engine before
	// a promotion; it returns once it has.
	StopFollowing func(ctx context.Context) error
	// HighestTerm, when set, reads the highest primary term handed out
	// (members.json's). The Starting step reads it once its claim is
	// made: a Starting step that outlived its election (a newer term was
	// handed out, whose Primary may have claimed before this node did)
	// gives the claim back rather than writing after that Primary's
	// claim, where its lease-based reads would miss what it acknowledged.
	// A Primary that claims after this read fences this one instead.
	HighestTerm func(ctx context.Context) (uint64, error)
	// Changed is told every change of state (to heartbeat at once, log an
	// event); it must not block.
	Changed func(state netsyv1.PrimaryState, term uint64)
	// Fenced, when set, is told when this Primary steps down because
	// another writer took the next wal seq (an upload collided, or a fence
	// check found it taken), with the term it lost.
	Fenced func(err error, term uint64)
	// Fallback is told when writes fall back to object storage (a
	// metric, an event); it must not block.
	Fallback func(reason string)
	// ReceiptLatency observes how long a quorum of replicas took to hold
	// an append; it must not block.
	ReceiptLatency func(time.Duration)
	// DrainTimeout bounds a drain's wait for pending writes.
	DrainTimeout time.Duration
	Clock        clock.Clock
	Logger       hclog.Logger
}

// Primary is the role. Its loop owns the state; other goroutines send it
// messages.
type Primary struct {
	cfg Config
	log hclog.Logger

	msgs   chan func()
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// Readable from any goroutine.
	state atomic.Int32 // netsyv1.PrimaryState
	// stepping is set from the moment an Active Primary decides to step
	// down until it is a Replica: it no longer counts as Active, so it
	// answers no linearizable read and takes no write meanwhile.
	stepping atomic.Bool
	term     atomic.Uint64 // the term held (Starting, Active, Draining) or last held
	// took is the highest term the term file records, stored once it is
	// durable (TookTerm).
	took atomic.Uint64
	// leaseUntil is when the lease ends, a Now reading of this node's
	// clock kept as a time.Time: on the real clock it carries the
	// monotonic reading, so a step of the wall clock neither revives a
	// lapsed lease nor ends a current one (SPEC §5.4). Never store it as
	// UnixNano: that is the wall.
	// leaseTerm is the term leaseUntil belongs to: a lease never carries
	// from one term to the next (promote starts each term with none), so
	// an answer that named this node at an earlier term, even one handled
	// while it was promoted, vouches for nothing at the new one.
	leaseMu    sync.Mutex
	leaseUntil time.Time
	leaseTerm  uint64

	// Owned by the loop.
	tookTerm  uint64 // highest term ever taken up (persisted)
	refused   uint64 // last term refused, to log it once
	cs        *netsyv1.ClusterState
	busy      bool // a promotion, step-down or drain is running
	pendingCS *netsyv1.ClusterState

	checks fenceChecks
	quorum quorum
	// batches is the entry batch the Follow streams last encoded (follow.go).
	batches batchCache
	// qcancel stops the quorum's goroutine (loop-owned).
	qcancel context.CancelFunc
}

// ErrNotActive answers what only an Active Primary may answer; it is the
// engine's not-the-writer error, so callers may send the request on.
var ErrNotActive = engine.ErrNotPrimary

// New reads the term file and returns the role in state Replica.
func New(cfg Config) (*Primary, error) {
	if cfg.LeaseWindow <= 0 {
		cfg.LeaseWindow = time.Second
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 10 * time.Second
	}
	if cfg.QuorumTimeout <= 0 {
		cfg.QuorumTimeout = 500 * time.Millisecond
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = 500 * time.Millisecond
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.StopFollowing == nil {
		cfg.StopFollowing = func(context.Context) error { return nil }
	}
	if cfg.Changed == nil {
		cfg.Changed = func(netsyv1.PrimaryState, uint64) {}
	}
	p := &Primary{cfg: cfg, log: cfg.Logger.Named("primary"), msgs: make(chan func(), 16)}
	p.checks.p = p
	p.quorum.p = p
	p.quorum.onFallback, p.quorum.receiptLatency = cfg.Fallback, cfg.ReceiptLatency
	p.quorum.reset(0)
	t, err := readTerm(cfg.TermFile)
	if err != nil {
		return nil, err
	}
	p.tookTerm = t
	p.took.Store(t)
	p.term.Store(t)
	p.state.Store(int32(netsyv1.PrimaryState_REPLICA))
	return p, nil
}

// Start runs the loop until Close.
func (p *Primary) Start() {
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			select {
			case f := <-p.msgs:
				f()
			case <-p.ctx.Done():
				return
			}
		}
	}()
}

// Close stops the loop and waits for what it started.
func (p *Primary) Close() {
	if p.cancel != nil {
		p.cancel()
	}
	p.wg.Wait()
}

func (p *Primary) send(f func()) {
	select {
	case p.msgs <- f:
	case <-p.ctx.Done():
	}
}

// goOwned runs f on a goroutine Close waits for.
func (p *Primary) goOwned(f func()) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
}

// State is this node's primary state and the term it holds or last held.
func (p *Primary) State() (netsyv1.PrimaryState, uint64) {
	return netsyv1.PrimaryState(p.state.Load()), p.term.Load()
}

// TookTerm is the highest primary term this node's term file records
// that it took up, in this process or an earlier one. Read it before
// State: it is raised only after the state became Starting at that term
// and the file holds it, so a TookTerm of T followed by a State of
// Replica proves that the Primary of term T (this node) stepped down or
// never got past Starting, and, since a node never takes up a term it
// took before, that it will not act at T again. The Elector skips the
// wait for that Primary's lease on it (elector package doc, rule 5).
func (p *Primary) TookTerm() uint64 { return p.took.Load() }

// Active reports whether this node is the Active Primary.
func (p *Primary) Active() bool {
	return netsyv1.PrimaryState(p.state.Load()) == netsyv1.PrimaryState_ACTIVE && !p.stepping.Load()
}

func (p *Primary) setState(s netsyv1.PrimaryState, term uint64) {
	p.state.Store(int32(s))
	p.term.Store(term)
	p.log.Info("primary state", "state", s, "primary_term", term)
	p.cfg.Changed(s, term)
}

// Observe hands the role a Cluster State this node accepted.
func (p *Primary) Observe(cs *netsyv1.ClusterState) {
	p.send(func() { p.observe(cs) })
}

func (p *Primary) observe(cs *netsyv1.ClusterState) {
	p.cs = cs
	if p.busy {
		p.pendingCS = cs
		return
	}
	state, term := p.State()
	named := cs.GetPrimary().GetNodeId() == p.cfg.Self
	switch state {
	case netsyv1.PrimaryState_REPLICA:
		switch {
		case !named:
		case cs.PrimaryTerm <= p.tookTerm:
			if p.refused != cs.PrimaryTerm {
				p.refused = cs.PrimaryTerm
				p.log.Warn("named Primary at a term this node held before (it restarted or drained); staying a Replica so the Elector runs its audit again",
					"primary_term", cs.PrimaryTerm, "held", p.tookTerm)
				p.term.Store(cs.PrimaryTerm)
				p.cfg.Changed(state, cs.PrimaryTerm)
			}
		default:
			p.promote(cs.PrimaryTerm)
		}
	case netsyv1.PrimaryState_ACTIVE:
		if !named && cs.Primary != nil && cs.PrimaryTerm > term {
			p.log.Warn("another node is Primary at a higher term; stepping down", "primary", cs.Primary.NodeId, "primary_term", cs.PrimaryTerm, "held", term)
			p.stepDown("superseded")
			return
		}
		n, members, ok := registeredCount(cs, p.cfg.Self, term)
		p.quorum.setRegistered(n, members, ok)
	}
}

// registeredCount is the count of registered nodes cs gives, the members
// it lists, and whether it vouches for that count so far as to lower the
// quorum to it and for those members so far as to count their receipts:
// only a
// state naming this node Primary at the term it holds, counting a nonzero
// number of registered nodes and listing this node among them. Any other
// state (from an Elector that had not loaded, a stale one, one naming
// another Primary or none) may only raise it: a count too low would let
// this Primary acknowledge writes too few replicas hold.
func registeredCount(cs *netsyv1.ClusterState, self string, term uint64) (int, []string, bool) {
	n := int(cs.GetRegisteredNodes())
	if n <= 0 || cs.GetPrimary().GetNodeId() != self || cs.GetPrimaryTerm() != term {
		return n, nil, false
	}
	ids := make([]string, 0, len(cs.GetMembers()))
	listed := false
	for _, m := range cs.GetMembers() {
		ids = append(ids, m.GetNodeId())
		listed = listed || m.GetNodeId() == self
	}
	return n, ids, listed
}

// startQuorum begins quorum commit at term: writes are acknowledged
// through object storage until enough replicas follow.
func (p *Primary) startQuorum(term uint64, cs *netsyv1.ClusterState) {
	ctx, cancel := context.WithCancel(p.ctx)
	p.qcancel = cancel
	n, members, ok := registeredCount(cs, p.cfg.Self, term)
	p.quorum.activate(term, n, members, ok)
	p.goOwned(func() { p.quorum.run(ctx) })
}

// stopQuorum ends quorum commit (the node is no longer the Primary).
func (p *Primary) stopQuorum() {
	p.quorum.deactivate()
	if p.qcancel != nil {
		p.qcancel()
		p.qcancel = nil
	}
}

// Replication is the Primary's account of quorum commit, or nil when it is
// not the Active Primary.
func (p *Primary) Replication() *netsyv1.Replication {
	if !p.Active() {
		return nil
	}
	return p.quorum.status(p.cfg.Clock.Now())
}

// promote runs the Starting step.
func (p *Primary) promote(term uint64) {
	p.busy = true
	// Whatever lease an earlier term left (a restarted node is answered
	// at its term file's term while it is a Replica) is not this term's:
	// the Elector counts this term's lease only from its own answers
	// naming this node at it.
	p.leaseMu.Lock()
	p.leaseUntil, p.leaseTerm = time.Time{}, term
	p.leaseMu.Unlock()
	p.setState(netsyv1.PrimaryState_STARTING, term)
	cs := p.cs
	p.goOwned(func() {
		start := p.cfg.Clock.Now()
		err := p.starting(term)
		p.send(func() {
			p.busy = false
			if err != nil {
				p.log.Error("Starting failed; back to Replica", "primary_term", term, "error", err)
				p.setState(netsyv1.PrimaryState_REPLICA, term)
			} else {
				// No lease yet: it counts from a heartbeat the Elector
				// answered naming this node at this term (one sent while
				// Starting, or the one setState sends now), never from
				// here: the Starting step may have outlasted the
				// Elector's patience.
				p.startQuorum(term, cs)
				p.setState(netsyv1.PrimaryState_ACTIVE, term)
				p.log.Info("Active", "primary_term", term, "took", p.cfg.Clock.Since(start))
			}
			p.replayPending()
		})
	})
}

func (p *Primary) starting(term uint64) error {
	ctx := p.ctx
	if err := p.cfg.StopFollowing(ctx); err != nil {
		return fmt.Errorf("stop following: %w", err)
	}
	if err := writeTerm(p.cfg.TermFile, term); err != nil {
		return err
	}
	// After setState(STARTING) and after the file is durable: see TookTerm.
	if term > p.took.Load() {
		p.took.Store(term)
	}
	p.send(func() { p.tookTerm = max(p.tookTerm, term) })
	// Writes are acknowledged through object storage until the quorum
	// rules choose: never weaker than the cluster may need.
	p.quorum.reset(term)
	p.cfg.Log.SetMode(objwal.ModeSync)
	// Atomic: an engine that stops may return before its loop ran prepare.
	var claimed atomic.Bool
	err := p.cfg.Engine.Promote(ctx, int64(term), func(ctx context.Context) error {
		err := p.cfg.Log.Claim(ctx)
		claimed.Store(err == nil)
		return err
	})
	if err != nil && claimed.Load() {
		// The engine refused after the log became the bucket's writer
		// (its log holds a newer term): give the role back, or the log
		// refuses the Follow stream and uploads at the seq it claimed
		// until the newer writer fences it. The engine adopted every
		// local entry before it refused, so keeping what it committed
		// cuts nothing.
		if rerr := p.cfg.Log.Release(ctx, false, p.cfg.Engine.CommittedIndex()); rerr != nil {
			return fmt.Errorf("%w (and giving the writer role back: %v)", err, rerr)
		}
	}
	if err != nil || p.cfg.HighestTerm == nil {
		return err
	}
	highest, err := p.cfg.HighestTerm(ctx)
	switch {
	case err != nil:
		err = fmt.Errorf("read the highest primary term handed out after the claim: %w", err)
	case highest > term:
		err = fmt.Errorf("primary term %d was handed out while this node was Starting at term %d", highest, term)
	default:
		return nil
	}
	if derr := p.giveBack(ctx, false); derr != nil {
		return fmt.Errorf("%w (and giving the writer role back: %v)", err, derr)
	}
	return err
}

// giveBack turns the writer into a follower: the engine stops writing
// (with flush, once what it took is durable), the log gives the writer
// role back keeping what the engine committed and whatever object
// storage already holds, and the engine holds the latter as followed
// entries, so that following the next Primary continues the local log.
func (p *Primary) giveBack(ctx context.Context, flush bool) error {
	committed, err := p.cfg.Engine.Demote(ctx, flush)
	if err != nil {
		return err
	}
	if err := p.cfg.Log.Release(ctx, flush, committed); err != nil {
		return err
	}
	return p.cfg.Engine.HoldStorage(ctx)
}

// replayPending applies a Cluster State that arrived while busy.
func (p *Primary) replayPending() {
	if cs := p.pendingCS; cs != nil {
		p.pendingCS = nil
		p.observe(cs)
	}
}

// stepDown makes an Active Primary a Replica without a flush.
func (p *Primary) stepDown(why string) {
	if p.busy {
		return
	}
	p.busy = true
	p.stepping.Store(true)
	_, term := p.State()
	p.stopQuorum()
	p.goOwned(func() {
		err := p.giveBack(p.ctx, false)
		p.send(func() {
			p.busy = false
			if err != nil {
				p.log.Error("stepping down", "why", why, "error", err)
			}
			p.setState(netsyv1.PrimaryState_REPLICA, term)
			p.stepping.Store(false)
			p.replayPending()
		})
	})
}

// Deposed is told by the engine that object storage fenced it.
func (p *Primary) Deposed(err error) {
	p.send(func() {
		if p.Active() {
			_, term := p.State()
			p.log.Error("fenced by object storage; stepping down", "error", err, "primary_term", term)
			if p.cfg.Fenced != nil {
				p.cfg.Fenced(err, term)
			}
			p.stepDown("fenced")
		}
	})
}

// Drain flushes an Active Primary to object storage and makes it a
// Replica (a handoff).
func (p *Primary) Drain(ctx context.Context) error {
	done := make(chan error, 1)
	p.send(func() {
		if !p.Active() || p.busy {
			if s, _ := p.State(); s == netsyv1.PrimaryState_REPLICA {
				done <- nil
			} else {
				done <- fmt.Errorf("cannot drain: this node is %s", s)
			}
			return
		}
		p.busy = true
		_, term := p.State()
		p.setState(netsyv1.PrimaryState_DRAINING, term)
		p.quorum.drain()
		p.goOwned(func() {
			dctx, cancel := clock.WithTimeout(p.ctx, p.cfg.Clock, p.cfg.DrainTimeout)
			defer cancel()
			err := p.giveBack(dctx, true)
			p.send(func() {
				p.busy = false
				p.stopQuorum()
				p.setState(netsyv1.PrimaryState_REPLICA, term)
				p.replayPending()
				done <- err
			})
		})
	})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Answered renews the lease of term: the Elector answered a heartbeat
// sent at sentAt with a Cluster State naming this node Primary at term.
// sentAt must be a Now reading of this node's Clock taken before the send
// (not a Wall reading, nor one that went through the wire or UnixNano:
// those lost the monotonic reading). An older answer never shortens the
// lease, and an answer for any term but the one this node last took up
// (promote) renews nothing.
func (p *Primary) Answered(sentAt time.Time, term uint64) {
	until := sentAt.Add(p.cfg.LeaseWindow)
	p.leaseMu.Lock()
	defer p.leaseMu.Unlock()
	if term == p.leaseTerm && until.After(p.leaseUntil) {
		p.leaseUntil = until
	}
}

// LeaseUntil is when the lease ends, a Now reading of this node's clock
// (zero before any answer renewed it). It is for observers (a
// simulation's recorder) and for the quorum's timer for the lapse; the
// role's decisions ask LeaseHeld.
func (p *Primary) LeaseUntil() time.Time {
	p.leaseMu.Lock()
	defer p.leaseMu.Unlock()
	return p.leaseUntil
}

// LeaseHeld reports whether the lease is current, on this node's
// monotonic clock.
func (p *Primary) LeaseHeld() bool {
	now := p.cfg.Clock.Now()
	p.leaseMu.Lock()
	defer p.leaseMu.Unlock()
	return now.Before(p.leaseUntil)
}

// ConfirmLinearizable returns nil when a linearizable read may be answered
// from this node's memory now: it is the Active Primary and its lease
// holds, or a check begun after this call found its next wal seq free.
func (p *Primary) ConfirmLinearizable(ctx context.Context) error {
	if !p.Active() {
		return ErrNotActive
	}
	if p.LeaseHeld() {
		return nil
	}
	return p.checks.confirm(ctx)
}

// ReadIndex answers a replica's read index: the commit point, confirmed.
func (p *Primary) ReadIndex(ctx context.Context) (*netsyv1.ReadIndexResponse, error) {
	idx, rev := p.cfg.Engine.CommittedIndex(), p.cfg.Engine.CurrentRevision()
	_, term := p.State()
	if err := p.ConfirmLinearizable(ctx); err != nil {
		return nil, err
	}
	return &netsyv1.ReadIndexResponse{Index: idx, Revision: rev, PrimaryTerm: term}, nil
}

// LeaseRenew renews a lease for a replica's client.
func (p *Primary) LeaseRenew(ctx context.Context, id int64) (int64, error) {
	if !p.Active() {
		return 0, engine.ErrNotPrimary
	}
	return p.cfg.Engine.LeaseRenew(ctx, id)
}

// fenceChecks batches seq checks: every caller waits for a check that
// started after it arrived, and one check answers all who were waiting
// when it started.
type fenceChecks struct {
	p       *Primary
	mu      sync.Mutex
	waiting []chan error
	running bool
}

func (f *fenceChecks) confirm(ctx context.Context) error {
	ch := make(chan error, 1)
	f.mu.Lock()
	f.waiting = append(f.waiting, ch)
	if !f.running {
		f.running = true
		f.p.goOwned(f.run)
	}
	f.mu.Unlock()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fenceChecks) run() {
	for {
		f.mu.Lock()
		batch := f.waiting
		f.waiting = nil
		if len(batch) == 0 {
			f.running = false
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		cctx, cancel := clock.WithTimeout(f.p.ctx, f.p.cfg.Clock, 5*time.Second)
		err := f.p.cfg.Log.StillWriter(cctx)
		cancel()
		if errors.Is(err, objwal.ErrFenced) {
			f.p.Deposed(err)
		}
		if err != nil {
			err = fmt.Errorf("%w: %v", engine.ErrNoLeader, err)
		}
		for _, ch := range batch {
			ch <- err
		}
	}
}

// termFile is the content of TermFile.
type termFile struct {
	Term uint64 `json:"term"`
}

func readTerm(path string) (uint64, error) {
	if path == "" {
		return 0, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	var t termFile
	if err := json.Unmarshal(b, &t); err != nil {
		return 0, fmt.Errorf("%s is damaged (%v): remove it only if the node is stopped; it records the last primary term this node held", path, err)
	}
	return t.Term, nil
}

// writeTerm records term durably before it is taken up.
func writeTerm(path string, term uint64) error {
	if path == "" {
		return nil
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	_, err = f.WriteString(`{"term":` + strconv.FormatUint(term, 10) + "}\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
