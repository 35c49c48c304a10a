package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/gctune"
	"github.com/netsy-io/netsy/internal/mvcc"
	"github.com/netsy-io/netsy/proto/netsyv1"
)

// Storage makes entries durable. Append must not wait for I/O: the storage
// reports progress to the callback the engine attaches when it opens, in
// index order.
type Storage interface {
	// Attach sets the durability callback and reports at once where
	// durability stands.
	Attach(onSync func(index uint64, err error))
	LoadSnapshot() (*datafile.Snapshot, error)
	Replay(from uint64, fn func(*netsyv1.Entry) error) error
	Append(e *netsyv1.Entry) error
	SaveSnapshot(s *datafile.Snapshot) error
}

// Config configures an Engine. Zero values take the defaults.
type Config struct {
	Storage Storage
	Clock   clock.Clock
	Logger  hclog.Logger

	ClusterID uint64
	MemberID  uint64
	// Members lists the cluster for MemberList; nil reports no members.
	Members func() []*pb.Member

	// SnapshotEntries is how many entries may follow the last local
	// snapshot before a new one is written (default 100000).
	SnapshotEntries uint64
	// SnapshotPhase shifts where the snapshots fall: one is written when
	// index + SnapshotPhase crosses a multiple of SnapshotEntries, so
	// nodes of one cluster given different phases (SnapshotPhase of their
	// node IDs) never snapshot together. 0 snapshots at the multiples.
	SnapshotPhase uint64
	// LeaseCheckInterval is how often expired leases are looked for
	// (default 500ms).
	LeaseCheckInterval time.Duration
	// MinLeaseTTL is the smallest TTL granted, in seconds (default 2, as
	// etcd with its default election timeout).
	MinLeaseTTL int64
	// LeaseCheckpointInterval is how often the writer logs, in one entry,
	// the remaining time of the leases that need a checkpoint (default
	// 1 s): renewed ones, so replicas answer TimeToLive within about this
	// much of the Primary, and old ones (see LeaseCheckpointAge). It is
	// also the least time a new Primary leaves a lease it takes over.
	LeaseCheckpointInterval time.Duration
	// LeaseCheckpointAge is the least age at which a lease nobody renews
	// is checkpointed again (default 5 s; a tenth of its TTL when that is
	// longer, at most 5 min): a restarted node starts each lease from its
	// last checkpoint, so this bounds how much longer than its TTL a lease
	// can live across a restart, besides the downtime.
	LeaseCheckpointAge time.Duration
	// SpillDir, when not empty, is a directory the engine owns for values
	// of at least SpillMin bytes (default mvcc.DefaultSpillMin), kept out
	// of memory: see mvcc.Options.
	SpillDir string
	SpillMin int
	// Follower starts the engine following (see Follow) instead of writing;
	// Promote makes it the writer. A writer that is not a Follower starts
	// writing at Term at once (a single node without the cluster roles).
	Follower bool
	Term     int64
	// OnDeposed, when set, is told that the storage reported another
	// writer taking over; it runs in the loop, so it must only hand the
	// news on (it must not block or call the engine). The engine then steps down to
	// following instead of refusing everything for good: in a cluster the
	// roles find the new Primary and follow it. Nil keeps the refusal
	// (ErrDeposed) until a restart.
	OnDeposed func(error)
	// QuotaBackendBytes is the space quota (0: none): a write that would
	// take the store's space in use (mvcc.Stats.InUse) past it raises the
	// NOSPACE alarm and is refused; Open refuses a store already past it.
	QuotaBackendBytes int64
	// Member, when set, returns the member id this node raises alarms
	// under (a cluster node learns it after the engine opens); nil or 0
	// uses MemberID.
	Member func() uint64
	// WriteTimeout bounds how long a write waits to become durable before
	// the client gets ErrTimeout (default 7 s, etcd's request timeout).
	// The write may still commit later, as with etcd. The loop checks the
	// deadline every LeaseCheckInterval, so a writer gives up after
	// WriteTimeout plus at most one interval.
	WriteTimeout time.Duration
}

// backpressurer is implemented by storages that can refuse new writes for
// a while (object storage down, backlog too large) without failing.
type backpressurer interface {
	Backpressure() error
}

func (c *Config) setDefaults() {
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Logger == nil {
		c.Logger = hclog.NewNullLogger()
	}
	if c.SnapshotEntries == 0 {
		c.SnapshotEntries = defaultSnapshotEntries
	}
	if c.LeaseCheckInterval == 0 {
		c.LeaseCheckInterval = 500 * time.Millisecond
	}
	if c.MinLeaseTTL == 0 {
		c.MinLeaseTTL = 2
	}
	if c.LeaseCheckpointInterval == 0 {
		c.LeaseCheckpointInterval = time.Second
	}
	if c.LeaseCheckpointAge == 0 {
		c.LeaseCheckpointAge = 5 * time.Second
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = 7 * time.Second
	}
}

// Engine is the single-writer database core.
type Engine struct {
	cfg   Config
	log   hclog.Logger
	store *mvcc.Store
	lease *lessor

	proposals chan *proposal
	syncKick  chan struct{}
	// ctrl runs role changes and follower input in the loop.
	ctrl chan func()

	// Written by OnSync (storage goroutine), read by the loop.
	syncMu    sync.Mutex
	syncedIdx uint64
	syncErr   error

	// Committed state, readable from any goroutine.
	committedRev atomic.Int64
	committedIdx atomic.Uint64
	compactRev   atomic.Int64
	failed       atomic.Pointer[error]
	// stopped is set when the loop leaves (see drainProposals).
	stopped atomic.Bool
	// deposed is set (for good) when the storage reports that another
	// writer took over and no OnDeposed is configured: see ErrDeposed.
	deposed atomic.Pointer[error]
	// writer is true while the engine evaluates writes (the Primary); term
	// is the primary term it writes or follows. Only the loop changes them.
	writer atomic.Bool
	term   atomic.Int64
	// appendedIdx and durableIdx mirror, for other goroutines, the last
	// index appended to storage and the last the storage reported durable.
	appendedIdx atomic.Uint64
	durableIdx  atomic.Uint64
	appendedRev atomic.Int64
	lastTerm    atomic.Int64
	// primaryCommit is the newest commit index a Primary told this
	// follower (CommitTo), and writesFailed counts writes that failed
	// after the loop took them: both for metrics (see metrics.go).
	primaryCommit atomic.Uint64
	writesFailed  atomic.Uint64

	// doneChans recycles writers' answer channels (see proposal.finish).
	// It is the engine's, not the process's: a channel belongs to the
	// synctest bubble that made it, and tests run engines in several.
	doneChans sync.Pool

	notifyMu sync.Mutex
	notifyCh signal
	// durableCh fires when the durable index advances.
	durableCh signal

	// feed keeps the writer's newest entries for Follow streams.
	feed *feed
	// alarms are the committed active alarms (see alarm.go).
	alarms alarmSet
	// reqs indexes the request ids of recent committed entries.
	reqs *reqIndex

	// Owned by the loop goroutine.
	wtxn    writeTxn // see newWriteTxn
	lastIdx uint64
	lastRev int64
	// pending holds records, not pointers: one allocation less per write.
	pending     []pendingEntry
	noopWaiters []*proposal
	// pendingAlarms counts the pending entries that change an alarm (see
	// alarmsAhead); it is 0 whenever pending is empty.
	pendingAlarms int

	// pendingIDs are the request ids of the pending entries (the loop's),
	// except those made new for their first sending (WithNewRequestID)
	// by freshMember: freshN pending entries carry such ids, and they are
	// found by a scan of pending (pendingFresh). Nothing looks a new id
	// up as it is logged, and only a sending again by the node that made
	// it (that member's id, so rare) can name one later, so the map's
	// insertion and deletion per write of a Primary's own clients are
	// saved. A new id of another member while freshN > 0 goes to the map.
	pendingIDs  map[RequestID]struct{}
	freshMember uint64
	freshN      int

	// Follower state: entries appended to storage but not yet applied
	// (applied once committed by the Primary and durable here), and the
	// Primary's commit index.
	follow      []*netsyv1.Entry
	commitLimit uint64
	// draining refuses new proposals while a writer steps down with a
	// flush; drained is closed once nothing is pending.
	draining     bool
	drained      chan struct{}
	sinceSnap    uint64
	snapshotting bool
	// lastCheckpoint is when the writer last looked for lease checkpoints
	// to log.
	lastCheckpoint time.Time
	snapDone       chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// pendingEntry is an appended entry waiting for durability.
type pendingEntry struct {
	index uint64
	rev   int64
	entry *netsyv1.Entry
	p     *proposal // nil for internal entries (lease expiry)
	// revoked are the leases the entry revoked, kept so that a rollback
	// can restore them.
	revoked []*netsyv1.LeaseGrant
	// freshID says the entry's request id is counted in freshN, not in
	// pendingIDs.
	freshID bool
}

// Open restores the engine from storage (newest snapshot plus the entries
// after it) and starts its loop.
func Open(cfg Config) (*Engine, error) {
	cfg.setDefaults()
	if cfg.Storage == nil {
		return nil, errors.New("engine: no storage")
	}
	store, err := mvcc.Open(mvcc.Options{SpillDir: cfg.SpillDir, SpillMin: cfg.SpillMin})
	if err != nil {
		return nil, err
	}
	e := &Engine{
		cfg:       cfg,
		log:       cfg.Logger.Named("engine"),
		store:     store,
		lease:     newLessor(cfg.Clock),
		proposals: make(chan *proposal, 1024),
		syncKick:  make(chan struct{}, 1),
		ctrl:      make(chan func()),
		snapDone:  make(chan struct{}, 1),
		feed:      newFeed(),
		reqs:      newReqIndex(cfg.Clock),
	}
	e.lease.minDrift = cfg.LeaseCheckpointInterval / 4
	e.lease.ageFloor, e.lease.ageCap = cfg.LeaseCheckpointAge, max(cfg.LeaseCheckpointAge, maxCheckpointAge)
	if err := e.recover(); err != nil {
		_ = store.Close()
		return nil, err
	}
	if err := e.checkQuotaAtOpen(); err != nil {
		_ = store.Close()
		return nil, err
	}
	e.term.Store(cfg.Term)
	e.writer.Store(!cfg.Follower)
	e.lease.setRenewing(!cfg.Follower)
	e.publishAppended()
	// Everything Replay gave is durable here, held entries included.
	e.syncMu.Lock()
	e.syncedIdx = e.appendedIdx.Load()
	e.syncMu.Unlock()
	cfg.Storage.Attach(e.OnSync)
	e.ctx, e.cancel = context.WithCancel(context.Background())
	// The ticker is armed before Open returns so fake-clock tests can
	// advance time right away.
	ticker := e.cfg.Clock.NewTicker(e.cfg.LeaseCheckInterval)
	e.wg.Add(1)
	go e.run(ticker)
	return e, nil
}

// committedKnower is a Storage that knows, once opened, through which
// index its entries are known committed (object storage holds them, or
// every one was acknowledged on its local fsync). A Storage without it
// holds only committed entries.
type committedKnower interface {
	KnownCommitted() uint64
}

// recover rebuilds the state from the storage. A follower applies only
// the entries known committed: the rest (an ex-Primary's entries its
// crash kept from object storage, or a replica's its Primary had not yet
// committed) are held appended but not applied, exactly as followed
// entries are, until the Primary's Follow handshake commits them (same
// term at that index) or cuts them (TruncateFollowed). Applying them
// would serve a history the cluster may have replaced.
func (e *Engine) recover() error {
	known := uint64(math.MaxUint64)
	if k, ok := e.cfg.Storage.(committedKnower); ok && e.cfg.Follower {
		known = k.KnownCommitted()
	}
	snap, err := e.cfg.Storage.LoadSnapshot()
	if err != nil {
		return fmt.Errorf("load snapshot: %w", err)
	}
	hold := e.holdFor(snap)
	defer hold.Release()
	from := uint64(1)
	if snap == nil {
		// etcd's revisions start at 1 on an empty store: the first write
		// gets revision 2, and clients (the Kubernetes storage tests among
		// them) depend on it.
		if err := e.store.Restore(1, 0, nil); err != nil {
			return fmt.Errorf("initialise store: %w", err)
		}
		e.lastRev = 1
	} else {
		h := snap.Header
		if err := e.loadSnapshot(snap, false); err != nil {
			return fmt.Errorf("restore snapshot at index %d: %w", h.Index, err)
		}
		from = h.Index + 1
	}
	e.reqs.reset(from - 1)
	n := 0
	err = e.cfg.Storage.Replay(from, func(ent *netsyv1.Entry) error {
		prev := e.lastIdx
		if k := len(e.follow); k > 0 {
			prev = e.follow[k-1].Index
		}
		if ent.Index != prev+1 && prev != 0 {
			return fmt.Errorf("log hole: entry %d follows %d", ent.Index, prev)
		}
		e.lastTerm.Store(ent.Term)
		if ent.Index > known {
			e.follow = append(e.follow, ent)
			return nil
		}
		if err := e.applyEntry(ent); err != nil {
			return fmt.Errorf("replay entry %d: %w", ent.Index, err)
		}
		n++
		return nil
	})
	if err != nil {
		return fmt.Errorf("replay log: %w", err)
	}
	e.committedIdx.Store(e.lastIdx)
	e.committedRev.Store(e.lastRev)
	e.commitLimit = e.lastIdx
	e.sinceSnap = uint64(n)
	e.log.Info("recovered", "index", e.lastIdx, "rev", e.lastRev, "compact_rev", e.compactRev.Load(), "replayed", n, "leases", e.lease.count())
	if k := len(e.follow); k > 0 {
		e.log.Info("holding local entries not known committed until the Primary judges them",
			"from", e.follow[0].Index, "to", e.follow[k-1].Index, "known_committed", known)
	}
	return nil
}

// snapshotHandover is a Storage whose LoadSnapshot hands over the
// snapshot it returns: nothing keeps it or hands its versions out again
// (the local log decodes its file afresh for every call; objwal gives the
// snapshot it found at open only once). The engine then frees each
// version as the store takes it (mvcc.Load.Consume). A Storage that
// keeps what it returns (enginetest's, a restore's) must not say so.
type snapshotHandover interface {
	HandsOverSnapshots() bool
}

// loadSnapshot loads snap into the store, into an empty one or (replace)
// over what it holds, with its leases: they are restored first, so keys
// attach to them as they load instead of in a pass over every key after.
// Once it is loaded, the engine's state is the snapshot's: its index,
// revision, compaction floor and alarms.
// Callers hold the Go collector to the heap the load will take (holdFor)
// while it runs, and while the entries after it replay.
func (e *Engine) loadSnapshot(snap *datafile.Snapshot, replace bool) error {
	h := snap.Header
	consume := e.consumes()
	e.lease.reset()
	e.restoreLeases(snap.Leases)
	l := mvcc.Load{Rev: h.Revision, CompactRev: h.CompactRevision, Versions: snap.KVs, Consume: consume, OnLease: e.lease.attach}
	var err error
	if replace {
		err = e.store.ReplaceFrom(l)
	} else {
		err = e.store.RestoreFrom(l)
	}
	if err != nil {
		e.lease.reset()
		return err
	}
	e.lastIdx, e.lastRev = h.Index, h.Revision
	e.compactRev.Store(h.CompactRevision)
	e.alarms.restore(h.Alarms)
	return nil
}

const (
	// decodedKVHeap is the heap one decoded key version takes besides
	// its key and value (its KeyVersion, its pointer in the snapshot, the
	// rounding of its allocations), on the low side.
	decodedKVHeap = 150
	// spilledKVHeap is what a version whose value is spilled takes
	// besides mvcc's measured bookkeeping: its slot in the store's index
	// of spilled values, sized for the whole snapshot at once.
	spilledKVHeap = 64
)

// holdFor holds the Go collector (gctune.Hold) to the heap a load of snap
// grows to, so a restart marks the data it loads about once instead of at
// every quarter it grows by. Callers keep it through the replay of the
// entries after the snapshot: the floor is the peak of the load, when
// the decoded snapshot and the store both exist, so the replay fits under
// it once the decoded snapshot is garbage (1 M keys and 100 k entries to
// replay: 4 collections of 300–600 MB in the restart, then 1). Its
// Release settles the heap (gctune.Settle): the last collection may have
// come at the load's peak and set a goal that keeps that memory (929 MiB
// of RSS at the first read, 450 live, without it). The zero loadHold
// (no snapshot) releases nothing; without a running tuner (tests,
// netsyctl) neither does any.
func (e *Engine) holdFor(snap *datafile.Snapshot) loadHold {
	if snap == nil {
		return loadHold{}
	}
	return loadHold{gctune.Hold(e.loadHeap(snap.KVs)), true}
}

// loadHold is a load's hold on the collector.
type loadHold struct {
	h      *gctune.Holding
	loaded bool
}

func (l loadHold) Release() {
	l.h.Release()
	if l.loaded {
		gctune.Settle()
	}
}

// consumes reports whether the Storage hands its snapshots over, so a
// load frees the decoded versions as it goes.
func (e *Engine) consumes() bool {
	sh, ok := e.cfg.Storage.(snapshotHandover)
	return ok && sh.HandsOverSnapshots()
}

// loadHeap estimates, on the low side, the heap a load of kvs grows to:
// the decoded snapshot, which is whole when the load starts, and the
// store it builds (mvcc's measured bookkeeping per version and per key,
// keys, and the values it keeps in memory). A load that consumes the
// decoded versions frees them as the store grows, so its live heap peaks
// at its start (the decoded snapshot and the store's maps, sized at
// once) and the sum is about the 1.25 times that peak the usual headroom
// would let the heap reach anyway: the floor takes away the collections
// on the way there (BenchmarkRestart, 1 M keys: 3 in the load, now 1),
// not memory. A load that cannot consume holds both to its end. It
// samples at most about a thousand versions: the load is what costs
// time.
func (e *Engine) loadHeap(kvs []*netsyv1.KeyVersion) int64 {
	n := len(kvs)
	if n == 0 {
		return 0
	}
	spillMin := math.MaxInt
	if e.cfg.SpillDir != "" {
		spillMin = e.cfg.SpillMin
		if spillMin <= 0 {
			spillMin = mvcc.DefaultSpillMin
		}
	}
	step := max(1, n/1024)
	var store, decoded, sampled int64
	for i := 0; i < n; i += step {
		kv := kvs[i]
		if kv == nil {
			continue
		}
		sampled++
		store += mvcc.VersionOverhead + mvcc.KeyOverhead + int64(len(kv.Key))
		if len(kv.Value) < spillMin {
			store += int64(len(kv.Value))
		} else {
			store += spilledKVHeap
		}
		decoded += decodedKVHeap + int64(len(kv.Key)+len(kv.Value))
	}
	if sampled == 0 {
		return 0
	}
	return (store + decoded) * int64(n) / sampled
}

// applyEntry applies a logged entry without evaluating anything: the path
// of replay and of followers.
func (e *Engine) applyEntry(ent *netsyv1.Entry) error {
	for _, g := range ent.LeaseGrants {
		e.lease.grant(g.Id, g.Ttl)
	}
	if len(ent.Ops) > 0 {
		rev := e.store.Rev() + 1
		if ent.Revision != rev {
			return fmt.Errorf("entry revision %d, expected %d", ent.Revision, rev)
		}
		for _, op := range ent.Ops {
			switch op.Type {
			case netsyv1.Op_PUT:
				kv, prev := e.store.PutKV(rev, op.Key, op.Value, op.Lease)
				var from int64
				if prev != nil {
					from = prev.Lease
				}
				e.lease.move(kv.Key, from, kv.Lease)
			case netsyv1.Op_DELETE:
				kv, prev := e.store.DeleteKV(rev, op.Key)
				if kv == nil {
					return fmt.Errorf("delete of missing key %q", op.Key)
				}
				e.lease.move(kv.Key, prev.Lease, 0)
			}
		}
	} else if ent.Revision != e.store.Rev() {
		return fmt.Errorf("key-less entry at revision %d, store at %d", ent.Revision, e.store.Rev())
	}
	for _, c := range ent.LeaseCheckpoints {
		e.lease.applyCheckpoint(c.Id, c.RemainingMs)
	}
	for _, id := range ent.LeaseRevokes {
		e.lease.revoke(id)
	}
	if ent.CompactRevision > 0 {
		if err := e.store.Compact(ent.CompactRevision); err != nil && !errors.Is(err, mvcc.ErrCompacted) {
			return fmt.Errorf("compact %d: %w", ent.CompactRevision, err)
		}
		e.compactRev.Store(e.store.CompactRev())
	}
	e.alarms.apply(ent.Alarm)
	e.lastIdx, e.lastRev = ent.Index, ent.Revision
	e.reqs.observe(ent)
	return nil
}

// OnSync is called by the Storage once every entry up to index is durable,
// or with an error when durability failed for good.
//
// The durable index (DurableIndex, DurableNotify) moves here, on the
// storage's goroutine, not in the loop: a follower's receipt goes out
// as soon as its fsync is done, without waiting for the loop to be
// scheduled. The loop is woken only when it has work: the writer
// commits, an error is handled, or a follower may apply entries (the
// Primary's commit point is above what was durable before this sync; when
// it is not, applying stays limited by the commit point, and the next
// CommitTo applies). That saves a follower one wake-up of its loop per
// fsync when the commit point lags, as it does for every entry written
// one at a time.
func (e *Engine) OnSync(index uint64, err error) {
	e.syncMu.Lock()
	if err != nil && e.syncErr == nil {
		e.syncErr = err
	}
	prev := e.syncedIdx
	if index > e.syncedIdx {
		e.syncedIdx = index
	}
	synced := e.syncedIdx
	// primaryCommit is stored under syncMu (commitTo), so either it is
	// seen here or that CommitTo's applyFollowed sees this sync.
	kick := err != nil || e.writer.Load() || e.primaryCommit.Load() > prev
	advanced := synced != e.durableIdx.Swap(synced)
	e.syncMu.Unlock()
	if advanced {
		e.notifyDurable()
	}
	if !kick {
		return
	}
	select {
	case e.syncKick <- struct{}{}:
	default:
	}
}

// notifyDurable wakes whoever waits on DurableNotify; called after the
// durable index moved.
func (e *Engine) notifyDurable() {
	e.notifyMu.Lock()
	e.durableCh.fire()
	e.notifyMu.Unlock()
}

// drainProposals answers with ErrStopped every proposal queued for a loop
// that stopped. The loop calls it as it leaves, and so does a writer that
// queued after it left; each proposal is taken, and answered, once.
func (e *Engine) drainProposals() {
	for {
		select {
		case p := <-e.proposals:
			p.finish(ErrStopped)
		default:
			return
		}
	}
}

// Close stops the loop. Writes not yet durable fail with ErrStopped.
func (e *Engine) Close() error {
	e.cancel()
	e.wg.Wait()
	return e.store.Close()
}

func (e *Engine) run(ticker clock.Ticker) {
	defer e.wg.Done()
	defer ticker.Stop()
	for {
		// Whatever this pass appended reaches the Follow streams now, in
		// one wake-up.
		e.feed.publish()
		select {
		case <-e.ctx.Done():
			e.failAll(ErrStopped)
			// A writer that queues after this sees stopped and drains
			// itself: either way nobody waits on a proposal nobody takes.
			e.stopped.Store(true)
			e.drainProposals()
			return
		case p := <-e.proposals:
			e.handle(p)
			// Drain what else is queued so one sync covers the batch.
			for more := true; more; {
				select {
				case p := <-e.proposals:
					e.handle(p)
				default:
					more = false
				}
			}
		case f := <-e.ctrl:
			f()
		case <-e.syncKick:
			e.processSync()
		case now := <-ticker.C():
			e.expireWaits(now)
			if e.writer.Load() {
				e.expireLeases()
				// Half a tick of slack: ticks arrive a little late, and a
				// pass skipped for a microsecond would wait a whole tick.
				if now := e.cfg.Clock.Now(); now.Sub(e.lastCheckpoint) >= e.cfg.LeaseCheckpointInterval-e.cfg.LeaseCheckInterval/2 {
					e.lastCheckpoint = now
					e.checkpointLeases()
				}
			}
		case <-e.snapDone:
			e.snapshotting = false
		}
	}
}

func (e *Engine) processSync() {
	e.syncMu.Lock()
	idx, err := e.syncedIdx, e.syncErr
	// Each error is handled once: a step-down must not repeat.
	e.syncErr = nil
	// OnSync moved the durable index already; this keeps the mirror
	// exact should the loop have set syncedIdx itself since.
	advanced := idx != e.durableIdx.Swap(idx)
	e.syncMu.Unlock()
	if advanced {
		e.notifyDurable()
	}
	if e.writer.Load() {
		e.commitUpTo(idx)
	} else {
		e.applyFollowed()
	}
	if err != nil && e.failed.Load() == nil {
		e.storageFailed(err)
	}
}

// storageFailed handles a durability error: a writer that learns another
// writer took over steps down when the roles can find the new one
// (OnDeposed); anything else is permanent.
func (e *Engine) storageFailed(err error) {
	if !isDeposed(err) || e.cfg.OnDeposed == nil {
		e.failStorage(err)
		return
	}
	if !e.writer.Load() {
		return // already following; nothing of ours is pending
	}
	e.log.Error("DEPOSED: another writer took over object storage; stepping down to follow the new Primary",
		"error", err, "term", e.term.Load(), "committed_index", e.committedIdx.Load(), "rev", e.committedRev.Load())
	e.stepDown(ErrLeaderChanged)
	e.cfg.OnDeposed(err)
}

// deposer is implemented by storage errors that mean another writer took
// over the storage (objwal's fence): the engine does not know who reports
// them, only what they mean.
type deposer interface{ Deposed() bool }

func isDeposed(err error) bool {
	var d deposer
	return errors.As(err, &d) && d.Deposed()
}

// failStorage makes a storage failure permanent: every pending write fails
// with it, and no write is accepted again. A failure that says another
// writer took over also stops linearizable reads, watches and lease
// renewals at once (see ErrDeposed): this node's state may already be
// behind the new writer's.
func (e *Engine) failStorage(err error) {
	if e.failed.Load() == nil {
		ferr := fmt.Errorf("%w: %v", ErrUnavailable, err)
		if isDeposed(err) {
			ferr = fmt.Errorf("%w: %v", ErrDeposed, err)
			e.deposed.Store(&ferr)
			e.log.Error("DEPOSED: another writer took over this node's object storage; refusing writes, linearizable reads, watches and lease renewals (serializable reads still served); restart the node to rejoin",
				"error", err, "committed_index", e.committedIdx.Load(), "rev", e.committedRev.Load())
		} else {
			e.log.Error("durable storage failed; refusing writes", "error", err)
		}
		e.failed.Store(&ferr)
		if e.deposed.Load() != nil {
			// Watchers waiting for the next commit learn it now, before
			// any writer hears of the failure.
			e.broadcast()
		}
	}
	e.failAll(*e.failed.Load())
}

// Deposed returns the reason this node stopped serving linearizable
// requests (see ErrDeposed), or nil.
func (e *Engine) Deposed() error {
	if d := e.deposed.Load(); d != nil {
		return *d
	}
	return nil
}

// Failed returns why the engine refuses writes, or nil.
func (e *Engine) Failed() error {
	if f := e.failed.Load(); f != nil {
		return *f
	}
	return nil
}

// commitUpTo makes entries up to idx visible and answers their writers.
func (e *Engine) commitUpTo(idx uint64) {
	if idx <= e.committedIdx.Load() {
		return
	}
	n := 0
	for n < len(e.pending) && e.pending[n].index <= idx {
		n++
	}
	if n == 0 {
		return
	}
	done := e.pending[:n]
	last := done[n-1]
	for _, pe := range done {
		e.reqs.observe(pe.entry)
		if pe.freshID {
			e.freshN--
		} else if r := pe.entry.GetRequestId(); r != nil {
			delete(e.pendingIDs, RequestID{Member: r.Member, Seq: r.Seq})
		}
		if pe.entry.CompactRevision > 0 {
			if err := e.store.Compact(pe.entry.CompactRevision); err != nil && !errors.Is(err, mvcc.ErrCompacted) {
				e.log.Error("compaction failed", "rev", pe.entry.CompactRevision, "error", err)
			}
			e.compactRev.Store(e.store.CompactRev())
		}
		if pe.entry.Alarm != nil {
			e.alarms.apply(pe.entry.Alarm)
			e.pendingAlarms--
		}
	}
	e.committedRev.Store(last.rev)
	e.committedIdx.Store(last.index)
	// Wake the watchers before the writers, as etcd queues a write's events
	// before it answers the write: a client that hears back from its put
	// should find the event already on its way (the watch-latency
	// benchmark measures exactly that gap).
	e.broadcast()
	for _, pe := range done {
		if pe.p != nil {
			pe.p.finish(nil)
		}
	}
	// Move the rest to the front instead of reslicing past the committed
	// records, so the slice keeps its capacity and appending under load
	// does not allocate again (the rest is at most a batch or two).
	m := copy(e.pending, e.pending[n:])
	clear(e.pending[m:])
	e.pending = e.pending[:m]
	// Read-only and no-op requests waiting for everything before them.
	e.answerNoopWaiters(func(p *proposal) (bool, error) { return p.waitIdx <= last.index, nil })
	e.checkDrained()
	e.maybeSnapshot()
}

func (e *Engine) broadcast() {
	e.notifyMu.Lock()
	e.notifyCh.fire()
	e.notifyMu.Unlock()
}

func (e *Engine) failAll(err error) {
	// Undo first, answer after: a caller told its write failed must not
	// then read what it wrote, or a lease grant or revoke that never
	// became durable (answered first, a test reading right after its
	// error saw the grant still there now and then). rollbackPending
	// drops the records but not the array they are in.
	pending, waiters := e.pending, e.noopWaiters
	e.noopWaiters = nil
	e.rollbackPending()
	for _, pe := range pending {
		if pe.p != nil {
			pe.p.finish(err)
		}
	}
	for _, p := range waiters {
		p.finish(err)
	}
}

// rollbackPending undoes, newest first, every entry applied but not
// committed: never-durable writes must not stay readable, and their lease
// grants and revokes must not outlive them.
func (e *Engine) rollbackPending() {
	for i := len(e.pending) - 1; i >= 0; i-- {
		ent := e.pending[i].entry
		for _, g := range ent.LeaseGrants {
			e.lease.revoke(g.Id)
		}
		for _, g := range e.pending[i].revoked {
			e.lease.grant(g.Id, g.Ttl)
		}
	}
	rolled := len(e.pending) > 0
	e.pending, e.pendingAlarms = nil, 0
	clear(e.pendingIDs)
	e.freshN = 0
	if e.store.Rev() > e.committedRev.Load() {
		e.store.Rollback(e.committedRev.Load())
		rolled = true
	}
	if rolled {
		// Attachments follow the keys as they are now.
		e.lease.reattachAll(e.store, e.committedRev.Load())
	}
	e.lastIdx, e.lastRev = e.committedIdx.Load(), e.committedRev.Load()
	e.feed.truncate(e.lastIdx)
	// The log's last term is its last entry's again, not the term this
	// node wrote (or was promoted) at: a Follow handshake compares it with
	// the Primary's entry there, and a false mismatch cuts below history.
	if t, ok := e.termAt(e.lastIdx); ok {
		e.lastTerm.Store(t)
	}
	e.publishAppended()
}

// termAt returns the term of the entry at index from the feed or the
// storage (a scan of the local log: for role changes, not hot paths).
func (e *Engine) termAt(index uint64) (int64, bool) {
	if t, ok := e.feed.term(index); ok {
		return t, true
	}
	if index == 0 {
		return 0, false
	}
	var term int64
	found := false
	stop := errors.New("enough")
	err := e.cfg.Storage.Replay(index, func(ent *netsyv1.Entry) error {
		term, found = ent.Term, ent.Index == index
		return stop
	})
	if err != nil && !errors.Is(err, stop) {
		return 0, false
	}
	return term, found
}

// appendEntry logs an entry evaluated by the loop and queues p (nil for
// internal entries) for its durability. If the storage refuses the entry,
// the failure is handled like a reported one: p and everything else
// pending are answered with it and rolled back.
func (e *Engine) appendEntry(ent *netsyv1.Entry, p *proposal, revoked []*netsyv1.LeaseGrant) {
	ent.Term = e.term.Load()
	e.lastIdx, e.lastRev = ent.Index, ent.Revision
	pe := pendingEntry{index: ent.Index, rev: ent.Revision, entry: ent, p: p, revoked: revoked}
	if ent.Alarm != nil {
		e.pendingAlarms++
	}
	if r := ent.GetRequestId(); r != nil {
		switch {
		case p != nil && p.newID && (e.freshN == 0 || e.freshMember == r.Member):
			pe.freshID, e.freshMember = true, r.Member
			e.freshN++
		default:
			if e.pendingIDs == nil {
				e.pendingIDs = make(map[RequestID]struct{})
			}
			e.pendingIDs[RequestID{Member: r.Member, Seq: r.Seq}] = struct{}{}
		}
	}
	e.pending = append(e.pending, pe)
	if err := e.cfg.Storage.Append(ent); err != nil {
		e.storageFailed(err)
		return
	}
	e.lastTerm.Store(ent.Term)
	e.sinceSnap++
	e.publishAppended()
	e.feed.add(ent)
}

// expireWaits answers with ErrTimeout every writer still waiting for
// durability past its deadline. Its entry stays pending and may still
// commit, as with etcd; the writer just stops waiting for it.
func (e *Engine) expireWaits(now time.Time) {
	for _, pe := range e.pending {
		if p := pe.p; p != nil && !p.finished && !now.Before(p.deadline) {
			p.finish(ErrTimeout)
		}
	}
	e.answerNoopWaiters(func(p *proposal) (bool, error) { return !now.Before(p.deadline), ErrTimeout })
}

// answerNoopWaiters answers, with the error due returns, every read-only
// or no-op request for which due says it is time, and keeps the rest.
func (e *Engine) answerNoopWaiters(due func(*proposal) (bool, error)) {
	kept := e.noopWaiters[:0]
	for _, p := range e.noopWaiters {
		if ok, err := due(p); ok {
			p.finish(err)
		} else {
			kept = append(kept, p)
		}
	}
	clear(e.noopWaiters[len(kept):])
	e.noopWaiters = kept
}

// waitForLast answers p once everything appended so far is durable.
func (e *Engine) waitForLast(p *proposal) {
	if e.lastIdx <= e.committedIdx.Load() {
		p.finish(nil)
		return
	}
	p.waitIdx = e.lastIdx
	e.noopWaiters = append(e.noopWaiters, p)
}

// CurrentRevision is the committed revision.
func (e *Engine) CurrentRevision() int64 { return e.committedRev.Load() }

// CompactRevision is the compaction floor.
func (e *Engine) CompactRevision() int64 { return e.compactRev.Load() }

// CommittedIndex is the last durable log index.
func (e *Engine) CommittedIndex() uint64 { return e.committedIdx.Load() }

// CommitNotify returns a channel closed at the next commit or compaction.
func (e *Engine) CommitNotify() <-chan struct{} {
	e.notifyMu.Lock()
	defer e.notifyMu.Unlock()
	return e.notifyCh.wait()
}

// Identity returns header identity values; the raft term is the primary
// term (at least 1, as etcd's first term).
func (e *Engine) Identity() (clusterID, memberID, raftTerm uint64) {
	return e.cfg.ClusterID, e.cfg.MemberID, uint64(max(e.term.Load(), 1))
}
