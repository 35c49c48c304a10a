package objwal

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/objstore"
	"github.com/netsy-io/netsy/internal/vfs"
	"github.com/netsy-io/netsy/internal/wal"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// Mode says when an entry counts as durable.
type Mode int

const (
	// ModeSync (quorum 0): an entry is durable once the chunk holding it is
	// in object storage and it is fsync'd locally.
	ModeSync Mode = iota
	// ModeAsync: durable once fsync'd locally; chunks are uploaded in the
	// background by size and age.
	ModeAsync
	// ModeQuorum: durable once fsync'd locally and either replicated (a
	// quorum of replicas reported it fsync'd, see SetReplicated) or in
	// object storage; chunks are uploaded in the background by size and
	// age. Switching to ModeSync (the quorum fallback) uploads at once and
	// still counts replication.
	ModeQuorum
)

func (m Mode) String() string {
	switch m {
	case ModeSync:
		return "sync"
	case ModeAsync:
		return "async"
	case ModeQuorum:
		return "quorum"
	}
	return fmt.Sprintf("mode(%d)", int(m))
}

// Defaults for Options fields left zero.
const (
	DefaultChunkMaxBytes   = 4 << 20
	DefaultChunkMaxAge     = time.Second
	DefaultSnapshotKeep    = 3
	DefaultMinWALAge       = time.Hour
	DefaultMaxBacklogBytes = 64 << 20
)

const (
	// stallBound is how long the oldest entry may wait for object storage
	// before new writes are refused. Long enough to ride out a slow PUT or a
	// few retries, short enough that clients hear "unavailable" well before
	// their own timeouts.
	stallBound = 5 * time.Second
	// attemptTimeout bounds one object-storage call, so a request stuck on
	// a dead connection is retried instead of stalling uploads for good.
	attemptTimeout = 10 * time.Second
	// minTransferRate (bytes per second) extends attemptTimeout for a
	// snapshot: its attempt may take as long as its size at this rate.
	minTransferRate = 4 << 20
	// Retries back off from minBackoff, doubling, up to maxBackoff.
	minBackoff = 50 * time.Millisecond
	maxBackoff = 2 * time.Second
	// openAttempts bounds transient-error retries of each call during Open:
	// a bucket that stays unreachable for that long fails start-up with the
	// error rather than hanging it.
	openAttempts = 8
	// closeTimeout bounds how long Close keeps uploading what is pending.
	closeTimeout = 5 * time.Second
	// maxClaimRounds bounds how often Open loses the claim race before it
	// gives up: each loss means another writer wrote a chunk meanwhile.
	maxClaimRounds = 10
)

var (
	// ErrFenced means another writer took a wal seq this log needed: this
	// node has been deposed and must not acknowledge anything more. It
	// reports Deposed() true, which is how the engine, which does not know
	// objwal, tells it from other storage failures.
	ErrFenced error = fencedError{}
	// ErrHistoryConflict means the bucket holds a different entry at an
	// index that this node had acknowledged: two writers forked the
	// history, and no automatic choice between them is safe.
	ErrHistoryConflict = errors.New("objwal: object storage contradicts an acknowledged local entry")
	// ErrSnapshotAheadOfBucket refuses a claim: the local snapshot covers
	// entries the bucket does not hold yet (a follower's, in quorum mode)
	// and the local log no longer holds them to upload, so claiming would
	// leave the bucket's history a hole. The node can still follow; the
	// claim goes through once the bucket holds them (the old Primary
	// uploads them) or from a node whose log holds them.
	ErrSnapshotAheadOfBucket = errors.New("objwal: the local snapshot covers entries the bucket lacks and the local log no longer holds")
	// ErrClosed is returned by calls made after Close.
	ErrClosed = errors.New("objwal: closed")
)

type fencedError struct{}

func (fencedError) Error() string { return "objwal: fenced: another writer took the next wal seq" }
func (fencedError) Deposed() bool { return true }

// Options configures Open.
type Options struct {
	Store objstore.Store
	// WALDir is the local wal directory; objwal opens and owns the wal and
	// keeps its metadata file (objwal.json) there too.
	WALDir string
	// FS is the file system of WALDir (nil: vfs.OS()); the wal uses it too.
	FS vfs.FS
	// SegmentBytes is passed to the wal.
	SegmentBytes int64
	// OnSync receives durability progress in index order; an error is
	// permanent. The engine sets it with Attach instead.
	OnSync func(index uint64, err error)
	Mode   Mode
	// Follower opens the log without claiming the bucket: it catches up
	// with the bucket and then takes entries another node wrote, kept
	// locally only, until Claim makes it the writer.
	Follower bool
	// AckOnFsync says a local fsync alone acknowledged an entry (ModeAsync
	// on a node without replicas): a local entry the bucket contradicts
	// then stops Open with ErrHistoryConflict instead of being cut.
	AckOnFsync bool
	// CutDamage lets Open cut the local log at damage that is not a torn
	// tail (wal.Options.CutDamage) and fetch what followed it back from
	// the bucket, instead of failing with the wal's *wal.DamageError. Only
	// for a log whose acknowledged entries are all elsewhere: in the
	// bucket (sync mode) or on a quorum of replicas (a cluster). It cannot
	// be combined with AckOnFsync.
	CutDamage bool
	// ChunkMaxBytes caps a chunk; in async mode a chunk is also cut as soon
	// as this many bytes are pending (default 4 MiB).
	ChunkMaxBytes int
	// ChunkMaxAge cuts an async chunk once its oldest entry is this old
	// (default 1 s).
	ChunkMaxAge time.Duration
	// SnapshotKeep is how many snapshots stay in the bucket (default 3).
	SnapshotKeep int
	// MinWALAge protects young chunks from garbage collection (default 1 h).
	MinWALAge time.Duration
	// Retention keeps, besides the newest SnapshotKeep snapshots, every
	// snapshot and chunk a restore of a revision committed within this
	// long of now needs (see windowAnchor); 0 keeps only the newest
	// snapshots and the chunks after them.
	Retention time.Duration
	// MaxBacklogBytes is how many bytes may wait for object storage before
	// Backpressure refuses writes (default 64 MiB).
	MaxBacklogBytes int64
	Clock           clock.Clock
	// Logger is named by the caller (the node passes logger.Named("objwal"));
	// the wal logs under its "wal" sub-logger.
	Logger hclog.Logger
}

func (o *Options) setDefaults() error {
	switch {
	case o.Store == nil:
		return errors.New("objwal: Options.Store is nil")
	case o.WALDir == "":
		return errors.New("objwal: Options.WALDir is empty")
	case o.Mode != ModeSync && o.Mode != ModeAsync && o.Mode != ModeQuorum:
		return fmt.Errorf("objwal: Options.Mode %d is not ModeSync, ModeAsync or ModeQuorum", int(o.Mode))
	case o.ChunkMaxBytes < 0, o.ChunkMaxAge < 0, o.SnapshotKeep < 0, o.MinWALAge < 0, o.MaxBacklogBytes < 0, o.Retention < 0:
		return errors.New("objwal: Options has a negative size, age or count")
	}
	o.FS = vfs.OrOS(o.FS)
	if o.ChunkMaxBytes == 0 {
		o.ChunkMaxBytes = DefaultChunkMaxBytes
	}
	if o.ChunkMaxAge == 0 {
		o.ChunkMaxAge = DefaultChunkMaxAge
	}
	if o.SnapshotKeep == 0 {
		o.SnapshotKeep = DefaultSnapshotKeep
	}
	if o.MinWALAge == 0 {
		o.MinWALAge = DefaultMinWALAge
	}
	if o.MaxBacklogBytes == 0 {
		o.MaxBacklogBytes = DefaultMaxBacklogBytes
	}
	if o.OnSync == nil {
		o.OnSync = func(uint64, error) {}
	}
	if o.Clock == nil {
		o.Clock = clock.Real()
	}
	if o.Logger == nil {
		o.Logger = hclog.NewNullLogger()
	}
	if o.CutDamage && o.AckOnFsync {
		return errors.New("objwal: Options.CutDamage with AckOnFsync: the entries a cut drops may have been acknowledged and exist nowhere else")
	}
	return nil
}

// Stats counts uploads since Open.
type Stats struct {
	// Puts is the number of chunks uploaded at run time (Open's claim not
	// included), Entries the entries they carried, Bytes their size.
	Puts, Entries, Bytes uint64
	// MaxEntries is the most entries one chunk carried.
	MaxEntries uint64
	// Retries counts failed upload attempts that were retried.
	Retries uint64
	// Seq is the next wal seq to be written.
	Seq uint64
	// Uploaded is the highest index in the bucket; Synced the highest
	// fsync'd locally; Reported the highest reported durable.
	Uploaded, Synced, Reported uint64
	// RestoreOldestRevision is the oldest revision a restore from the
	// bucket can rebuild (the oldest snapshot garbage collection kept, or
	// the first entry while the bucket holds the history from index 1),
	// RestoreOldestTimeMs its commit time in unix ms (0 if unknown). Both
	// are 0 until this node, as the writer, collected garbage once.
	RestoreOldestRevision, RestoreOldestTimeMs int64
}

// Log is object-storage-backed durable storage for the engine: it
// implements engine.Storage plus Backpressure.
type Log struct {
	o        Options
	store    objstore.Store
	clk      clock.Clock
	log      hclog.Logger
	metaPath string
	hooks    hooks
	// sealer compresses the chunks this log uploads (its own, not the
	// process's: see datafile.ChunkSealer).
	sealer *datafile.ChunkSealer

	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	upKick    chan struct{}
	maintKick chan struct{}
	closingCh chan struct{} // closed when Close starts
	// jobs are role changes, run by the maintenance goroutine so that they
	// never meet a snapshot or checkpoint half-way.
	jobs chan func()

	// wal is replaced only during Open (truncation reopens it).
	wal *wal.WAL

	// curMode is the durability mode (Options.Mode, then SetMode).
	curMode atomic.Int32

	mu sync.Mutex
	// writer is true while this log is the bucket's writer (Claim to
	// Release): appends are queued for upload and the uploader runs,
	// under upCtx, until upDone closes.
	writer   bool
	upCtx    context.Context
	upCancel context.CancelFunc
	upDone   chan struct{}
	// flushing makes the uploader send everything at once (Release).
	flushing bool
	// upIdle is closed and replaced whenever nothing is left to upload.
	upIdle chan struct{}
	// localSnapIdx is the index of the newest local snapshot.
	localSnapIdx uint64
	// Entries appended but not yet taken by the uploader: frames back to
	// back in pendBuf after a chunk header, described by pend. The
	// uploader takes the buffer with its batch (Append goes on in another)
	// and seals it into the chunk object in a body buffer of its own.
	pendBuf   []byte
	pend      []pendEntry
	pendBytes int64
	// spare is the buffer of the last uploaded batch, reused for pendBuf;
	// lastBatch is that batch's size, which sizes a new buffer. spareEnts
	// is that batch's entry list, reused for the next one's.
	spare     []byte
	spareEnts []pendEntry
	lastBatch int
	// The batch being uploaded: its size and its oldest entry's append time.
	inflightBytes int64
	inflightAt    time.Time
	// expect is how many entries the next sync-mode batch waits for, until
	// holdUntil (see holdLocked); 0 after a batch is taken.
	expect      int
	holdUntil   time.Time
	localSynced uint64 // highest index fsync'd locally
	uploaded    uint64 // highest index in the bucket
	reported    uint64 // highest index reported durable
	// replicated is the highest index a quorum of replicas holds fsync'd
	// (SetReplicated); it counts in ModeQuorum and ModeSync.
	replicated uint64
	nextSeq    uint64 // next wal seq to write
	// chunks this process uploaded (or found at Open), oldest first, kept
	// to pick snapshot wal_seqs and metadata checkpoints.
	chunks   []chunkRef
	failing  error // last transient upload error, nil after a success
	err      error // permanent: fenced or the local wal failed
	started  bool  // Open finished; OnSync reports flow
	closing  bool
	closed   bool
	snap     *datafile.Snapshot // newest snapshot, handed to the engine once
	nextSnap *datafile.Snapshot // waiting to be saved and uploaded
	stats    Stats

	// Owned by the maintenance goroutine (and by Open and Close while it
	// does not run).
	meta        *metaState
	metaWritten time.Time
	gcFloor     uint64 // chunks at or below this seq are known deleted

	// opened (a monotonic reading) is when Open began; gcSeen (under mu)
	// is when this process uploaded each chunk it has not deleted yet.
	// Chunks it did not upload existed when it opened, or were written by
	// a writer it has since replaced.
	opened time.Time
	gcSeen map[string]time.Time
	// openedWall is the wall clock when Open began: with opened it gives
	// the retention window an end a forward wall step cannot move.
	openedWall time.Time
	// snapHeads caches bucket snapshot headers for garbage collection
	// (maintenance goroutine only).
	snapHeads map[string]*netsyv1.SnapshotHeader
	// chunkStarts caches the first index of each chunk a follower's
	// checkpoint search read (0: an empty chunk), and firsts reads them
	// (maintenance goroutine only; see lastChunkStartingBy).
	chunkStarts map[uint64]uint64
	firsts      datafile.FirstEntryReader
	// firstEntry is the history's first entry while the bucket holds it
	// (maintenance goroutine only; see noteFirstEntry).
	firstEntry *netsyv1.Entry

	// Commit-time stamps (stamp.go), under mu: stamp is the highest
	// commit_time_ms the log holds or wrote, stampIdx the newest index
	// whose stamp it saw, stampRuns recent indices' stamps for snapshot
	// headers.
	stamp     int64
	stampIdx  uint64
	stampRuns []stampRun
}

type pendEntry struct {
	index    uint64
	revision int64
	off, end int
	at       time.Time
}

// chunkRef names an uploaded chunk and the last index the bucket holds
// once it is there (an empty chunk repeats the previous last index).
type chunkRef struct {
	seq, last uint64
}

// hooks are observation points for tests.
type hooks struct {
	// putDone runs after every run-time upload attempt, with its result:
	// a failure before any backoff wait starts, a success once the log's
	// state and stats include the chunk.
	putDone func(seq uint64, err error)
	// snapDone runs after a snapshot was uploaded (or found already there)
	// and garbage collection that followed it finished.
	snapDone func(key string)
}

// Open opens the local wal in o.WALDir, brings it in line with the bucket
// (restoring from the bucket when the directory is empty), claims the next
// wal seq and starts the uploader. ctx bounds Open only.
func Open(ctx context.Context, o Options) (*Log, error) {
	return open(ctx, o, hooks{})
}

func open(ctx context.Context, o Options, h hooks) (*Log, error) {
	if err := o.setDefaults(); err != nil {
		return nil, err
	}
	sealer, err := datafile.NewChunkSealer()
	if err != nil {
		return nil, err
	}
	l := &Log{
		sealer:      sealer,
		o:           o,
		store:       o.Store,
		clk:         o.Clock,
		log:         o.Logger,
		metaPath:    filepath.Join(o.WALDir, metaFileName),
		hooks:       h,
		opened:      o.Clock.Now(),
		openedWall:  o.Clock.Wall(),
		gcSeen:      make(map[string]time.Time),
		snapHeads:   make(map[string]*netsyv1.SnapshotHeader),
		chunkStarts: make(map[uint64]uint64),
		upKick:      make(chan struct{}, 1),
		maintKick:   make(chan struct{}, 1),
		closingCh:   make(chan struct{}),
		jobs:        make(chan func()),
		upDone:      closedChan(),
		upIdle:      make(chan struct{}),
	}
	l.curMode.Store(int32(o.Mode))
	l.pendBuf = l.newPendBuf()
	if l.meta, err = readMetaFS(l.o.FS, l.metaPath); err != nil {
		return nil, err
	}
	if err := l.openWAL(); err != nil {
		return nil, fmt.Errorf("objwal open: %w", err)
	}
	if l.snap, err = l.wal.LoadSnapshot(); err != nil {
		l.wal.Close()
		return nil, fmt.Errorf("objwal open: %w", err)
	}
	if l.snap != nil {
		l.localSnapIdx = l.snap.Header.Index
		l.observeLocked(l.snap.Header.Index, l.snap.Header.CommitTimeMs)
	}
	if o.Follower {
		err = l.follow(ctx)
	} else {
		err = l.reconcile(ctx)
	}
	if err != nil {
		l.wal.Close()
		return nil, fmt.Errorf("objwal open: %w", err)
	}
	if !o.Follower {
		if err := l.loadTailStamp(ctx); err != nil {
			l.wal.Close()
			return nil, fmt.Errorf("objwal open: %w", err)
		}
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.mu.Lock()
	l.started = true
	if !o.Follower {
		l.startUploaderLocked()
	}
	l.mu.Unlock()
	l.wg.Add(1)
	go l.runMaintenance()
	return l, nil
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// follow catches up with the bucket without claiming it: what a follower
// holds locally beyond the bucket stays, for its Primary to judge.
func (l *Log) follow(ctx context.Context) error {
	v, err := l.catchUp(ctx)
	if err != nil {
		return err
	}
	l.reportCut(v)
	if v.snapAhead > 0 {
		l.log.Warn("this node cannot become the writer until object storage holds the entries its local snapshot ran ahead of",
			"error", snapAheadError(v))
	}
	last, _ := l.localState()
	l.mu.Lock()
	l.localSynced, l.reported = last, last
	l.uploaded = v.bucketLast
	l.mu.Unlock()
	l.log.Info("caught up with object storage as a follower", "index", last, "bucket_index", v.bucketLast, "seq", v.lastSeq)
	return nil
}

// startUploaderLocked makes the log the writer and starts the uploader.
func (l *Log) startUploaderLocked() {
	l.writer, l.replicated = true, 0
	l.upCtx, l.upCancel = context.WithCancel(context.Background())
	l.upDone = make(chan struct{})
	l.wg.Add(1)
	go l.runUploader(l.upCtx, l.upDone)
}

// job runs f on the maintenance goroutine and waits for it.
func (l *Log) job(ctx context.Context, f func() error) error {
	res := make(chan error, 1)
	select {
	case l.jobs <- func() { res <- f() }:
	case <-ctx.Done():
		return ctx.Err()
	case <-l.ctx.Done():
		return ErrClosed
	}
	return <-res
}

// Claim makes a follower the bucket's writer: once every local entry is
// durable it catches up with the bucket again (another writer may have
// moved it) and claims the next wal seq, as Open does for a writer. The
// caller must not append meanwhile. From here on appends are uploaded.
func (l *Log) Claim(ctx context.Context) error {
	return l.job(ctx, func() error {
		l.mu.Lock()
		writer, err := l.writer, l.refuseLocked()
		l.mu.Unlock()
		switch {
		case err != nil:
			return err
		case writer:
			return errors.New("objwal: already the writer")
		}
		if last := l.wal.LastIndex(); last > 0 {
			if err := l.wal.WaitSynced(ctx, last); err != nil {
				return fmt.Errorf("objwal claim: sync the local log: %w", err)
			}
		}
		if err := l.reconcile(ctx); err != nil {
			return fmt.Errorf("objwal claim: %w", err)
		}
		if err := l.loadTailStamp(ctx); err != nil {
			return fmt.Errorf("objwal claim: %w", err)
		}
		l.mu.Lock()
		l.startUploaderLocked()
		l.reportLocked()
		l.mu.Unlock()
		return nil
	})
}

// Release ends the writer role. With flush (Draining) it first uploads
// everything pending, bounded by ctx. The uploader then stops; a fence
// (ErrFenced) is forgotten, since following the new writer is what comes
// next; and local entries after keep that the bucket does not hold (no
// Primary committed them) are cut. The log takes followed entries again.
func (l *Log) Release(ctx context.Context, flush bool, keep uint64) error {
	return l.job(ctx, func() error {
		l.mu.Lock()
		if !l.writer {
			l.mu.Unlock()
			return l.truncateFollowed(keep)
		}
		if flush {
			l.flushing = true
		}
		l.mu.Unlock()
		if flush {
			kick(l.upKick)
			if err := l.waitUploaded(ctx); err != nil {
				l.log.Warn("releasing the writer role before everything was uploaded", "error", err)
			}
		}
		l.mu.Lock()
		l.upCancel()
		done := l.upDone
		l.mu.Unlock()
		<-done
		l.mu.Lock()
		l.writer, l.flushing, l.replicated = false, false, 0
		if errors.Is(l.err, ErrFenced) {
			l.err = nil
		}
		clear(l.pend)
		l.pend, l.pendBytes = l.pend[:0], 0
		l.pendBuf = l.newPendBuf()
		l.inflightBytes, l.inflightAt = 0, time.Time{}
		keep = max(keep, l.uploaded)
		l.mu.Unlock()
		l.log.Info("released the writer role", "flushed", flush, "uploaded", keep)
		return l.truncateFollowed(keep)
	})
}

// waitUploaded waits until nothing appended is left to upload.
func (l *Log) waitUploaded(ctx context.Context) error {
	for {
		l.mu.Lock()
		idle, ch, err := len(l.pend) == 0 && l.inflightBytes == 0, l.upIdle, l.err
		l.mu.Unlock()
		switch {
		case err != nil:
			return err
		case idle:
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// TruncateAfter cuts local entries after index, which no Primary
// committed (a follower whose new Primary's history diverges there). It
// refuses to cut what the bucket holds.
func (l *Log) TruncateAfter(index uint64) error {
	return l.job(context.Background(), func() error { return l.truncateFollowed(index) })
}

// truncateFollowed runs on the maintenance goroutine.
func (l *Log) truncateFollowed(index uint64) error {
	l.mu.Lock()
	writer, uploaded := l.writer, l.uploaded
	l.mu.Unlock()
	if writer {
		return errors.New("objwal: the writer cannot truncate its log")
	}
	last := l.wal.LastIndex()
	if last <= index {
		return nil
	}
	if index < uploaded || (l.meta != nil && index < l.meta.Index) || index < l.localSnapIdx {
		return fmt.Errorf("objwal: refusing to cut the local log after index %d: object storage or a local snapshot holds entries through %d",
			index, max(uploaded, l.localSnapIdx))
	}
	l.log.Warn("cutting local entries no Primary committed", "from", index+1, "to", last)
	if err := l.truncateLocal(index); err != nil {
		l.mu.Lock()
		l.failLocked(err)
		l.mu.Unlock()
		return err
	}
	l.mu.Lock()
	l.localSynced = min(l.localSynced, index)
	l.reported = min(l.reported, index)
	l.mu.Unlock()
	return nil
}

// CatchUp brings a follower's local log up to the bucket (a replica too
// far behind for its Primary's stream), as Open does.
func (l *Log) CatchUp(ctx context.Context) error {
	return l.job(ctx, func() error {
		l.mu.Lock()
		writer := l.writer
		l.mu.Unlock()
		if writer {
			return errors.New("objwal: the writer does not catch up")
		}
		return l.follow(ctx)
	})
}

// StillWriter confirms that this log is still the bucket's writer: no
// chunk exists at its next seq, which another writer must create before it
// writes anything. A Primary whose lease has lapsed asks this before it
// answers a linearizable read; the caller batches concurrent reads. It
// returns ErrFenced when the seq is taken by someone else.
func (l *Log) StillWriter(ctx context.Context) error {
	for {
		l.mu.Lock()
		writer, seq, err, inflight := l.writer, l.nextSeq, l.err, l.inflightBytes > 0
		l.mu.Unlock()
		switch {
		case err != nil:
			return err
		case !writer:
			return errors.New("objwal: not the writer")
		}
		key := walKey(seq)
		_, err = l.openGet(ctx, key)
		switch {
		case isNotFound(err):
			return nil
		case err != nil:
			return fmt.Errorf("check %s: %w", key, err)
		case !inflight:
			l.mu.Lock()
			moved := l.nextSeq > seq
			l.mu.Unlock()
			if !moved {
				return fmt.Errorf("%s exists: %w", key, ErrFenced)
			}
		}
		// Our own upload of that seq may be what is there: wait for its
		// outcome and check the seq after it.
		for {
			l.mu.Lock()
			moved, err := l.nextSeq > seq, l.err
			l.mu.Unlock()
			if moved || err != nil {
				break
			}
			if err := l.clk.Sleep(ctx, 5*time.Millisecond); err != nil {
				return err
			}
		}
	}
}

// IsWriter reports whether the log is the bucket's writer.
func (l *Log) IsWriter() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.writer
}

// KnownCommitted is the last local index known committed: what the
// bucket holds (after Open's catch-up) or a local snapshot covers. A
// follower's local entries after it (an ex-Primary's that its crash kept
// from the bucket, or entries its Primary had not committed) are for the
// Primary to judge, so the engine holds them unapplied. With AckOnFsync
// (a lone node) and for the writer, every local entry counts: the former
// acknowledged each on its fsync, the latter's claim uploaded them all.
func (l *Log) KnownCommitted() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.writer || l.o.AckOnFsync {
		return max(l.wal.LastIndex(), l.localSnapIdx)
	}
	return max(l.uploaded, l.localSnapIdx)
}

// FirstIndex is the oldest entry the local log holds (0: none).
func (l *Log) FirstIndex() uint64 { return l.wal.FirstIndex() }

func (l *Log) openWAL() error {
	w, err := wal.Open(wal.Options{
		Dir:          l.o.WALDir,
		FS:           l.o.FS,
		SegmentBytes: l.o.SegmentBytes,
		OnSync:       l.onWALSync,
		// In sync mode a write waits for its chunk's PUT, which takes far
		// longer than an fsync: under load the uploader asks for the fsync
		// as it takes a batch (takeBatch), so one fsync runs alongside
		// each PUT instead of one per write batch competing with it; an
		// append to an idle uploader asks at once (Append).
		SyncOnRequest: l.mode() == ModeSync,
		CutDamage:     l.o.CutDamage,
		Logger:        l.o.Logger.Named("wal"),
		Clock:         l.clk,
	})
	if err != nil {
		return err
	}
	l.wal = w
	return nil
}

func (l *Log) mode() Mode { return Mode(l.curMode.Load()) }

// eager reports whether entries go up at once (ModeSync) rather than by
// size and age once fsync'd locally.
func (l *Log) eager() bool { return l.mode() == ModeSync }

// SetMode changes the durability mode of a running log: the Primary uses
// replica receipts (ModeQuorum) while its quorum can be met, object-storage
// acknowledgement (ModeSync) whenever it cannot, and the local fsync
// (ModeAsync) when it is the whole cluster. Entries already reported
// durable stay so.
func (l *Log) SetMode(m Mode) {
	l.mu.Lock()
	if l.mode() == m {
		l.mu.Unlock()
		return
	}
	l.curMode.Store(int32(m))
	l.wal.SetSyncOnRequest(m == ModeSync)
	if m == ModeAsync {
		// Replication counts for nothing here; a later ModeQuorum starts
		// from what is then reported.
		l.replicated = 0
	}
	if m == ModeSync && len(l.pend) > 0 {
		l.wal.SyncTo(l.pend[len(l.pend)-1].index)
	}
	l.reportLocked()
	l.mu.Unlock()
	l.log.Info("durability mode changed", "mode", m)
	kick(l.upKick)
}

// SetReplicated says a quorum of replicas holds every entry through index
// fsync'd. In ModeQuorum and ModeSync such an entry is durable once it is
// fsync'd here too, uploaded or not; in ModeAsync it means nothing. Only a
// writer's replication counts, and index never moves back.
func (l *Log) SetReplicated(index uint64) {
	l.mu.Lock()
	if l.writer && index > l.replicated && l.mode() != ModeAsync {
		l.replicated = index
		l.reportLocked()
	}
	l.mu.Unlock()
}

// Attach makes onSync the receiver of durability reports (replacing
// Options.OnSync) and tells it at once where durability stands, so reports
// made between Open and Attach are not lost. The engine attaches itself
// when it opens the log.
func (l *Log) Attach(onSync func(index uint64, err error)) {
	l.mu.Lock()
	l.o.OnSync = onSync
	reported, err := l.reported, l.err
	l.mu.Unlock()
	if reported > 0 || err != nil {
		onSync(reported, err)
	}
}

// LoadSnapshot returns the newest snapshot: the one Open restored or found
// (once), else the newest local one.
func (l *Log) LoadSnapshot() (*datafile.Snapshot, error) {
	l.mu.Lock()
	s := l.snap
	l.snap = nil
	l.mu.Unlock()
	if s != nil {
		return s, nil
	}
	return l.wal.LoadSnapshot()
}

// HandsOverSnapshots reports that LoadSnapshot hands over what it returns:
// the snapshot found at Open (or fetched by a catch-up) once, later ones
// decoded afresh from the local file. So the engine may free each version
// as it loads it (engine.Storage's optional HandsOverSnapshots).
func (l *Log) HandsOverSnapshots() bool { return true }

// Replay calls fn for every durable local entry from index from on; after
// Open the local log holds everything the bucket does.
func (l *Log) Replay(from uint64, fn func(*netsyv1.Entry) error) error {
	return l.wal.Replay(from, fn)
}

// Append queues e for the local fsync and the next upload without waiting
// for either.
func (l *Log) Append(e *netsyv1.Entry) error {
	now := l.clk.Now()
	l.mu.Lock()
	if err := l.refuseLocked(); err != nil {
		l.mu.Unlock()
		return err
	}
	if l.writer && e.CommitTimeMs == 0 {
		e.CommitTimeMs = l.stampLocked()
	}
	// One framing serves the local log and the upload queue. The wal
	// checks the index and takes the record first, so a refused entry is
	// never queued for upload. (The wal never calls back into objwal while
	// holding its own lock, so holding l.mu across it is safe.)
	off := len(l.pendBuf)
	if cap(l.pendBuf)-off < minPendRoom {
		// Double: append grows a large slice by a quarter at a time,
		// which leaves about four times the final size as garbage.
		l.pendBuf = slices.Grow(l.pendBuf, max(off, minPendRoom))
	}
	buf, err := datafile.FrameEntry(l.pendBuf, e)
	if err == nil {
		err = l.wal.AppendFramed(e.Index, e.Revision, buf[off:])
	}
	if err == nil {
		l.observeLocked(e.Index, e.CommitTimeMs)
	}
	if err != nil || !l.writer {
		l.pendBuf = buf[:off]
		if err == nil {
			// A follower keeps entries locally only (the Primary uploads
			// them) and its receipts wait for the fsync: ask for it now.
			l.wal.SyncTo(e.Index)
		}
		l.mu.Unlock()
		if err != nil {
			return fmt.Errorf("objwal append: %w", err)
		}
		return nil
	}
	l.pendBuf = buf
	l.pend = append(l.pend, pendEntry{index: e.Index, revision: e.Revision, off: off, end: len(l.pendBuf), at: now})
	l.pendBytes += int64(len(l.pendBuf) - off)
	if l.mode() == ModeSync && l.inflightBytes == 0 && !now.Before(l.holdUntil) {
		// The uploader is idle, so this entry goes up at once: its fsync
		// should start now too, ahead of the PUT rather than alongside
		// it (measured: sequential puts lose 10% when the local fsync
		// and MinIO's write share the disk).
		l.wal.SyncTo(e.Index)
	}
	sync := l.mode() == ModeSync
	l.mu.Unlock()
	// In async mode only the local fsync makes an entry uploadable, and
	// onWALSync kicks then.
	if sync {
		kick(l.upKick)
	}
	return nil
}

func (l *Log) refuseLocked() error {
	switch {
	case l.err != nil:
		return l.err
	case l.closing || l.closed:
		return ErrClosed
	}
	return nil
}

// SaveSnapshot hands s (whose index the engine already saw durable) to the
// background goroutine, which saves it locally and uploads it once every
// chunk up to its index is in the bucket. It returns without waiting, so a
// storage outage never blocks the engine; a newer snapshot replaces one
// still waiting. The log releases s (see datafile.Snapshot.Release) once it
// is saved or dropped.
func (l *Log) SaveSnapshot(s *datafile.Snapshot) error {
	if s == nil || s.Header == nil {
		return errors.New("objwal save snapshot: missing header")
	}
	l.mu.Lock()
	if l.closing || l.closed {
		l.mu.Unlock()
		s.Release()
		return ErrClosed
	}
	drop := s
	if l.nextSnap == nil || s.Header.Index > l.nextSnap.Header.Index {
		drop, l.nextSnap = l.nextSnap, s
	}
	l.mu.Unlock()
	if drop != nil {
		drop.Release()
	}
	kick(l.maintKick)
	return nil
}

// Backpressure reports whether a new write can be taken now: nil, or an
// error saying why object storage cannot keep up. It is cheap enough to
// call for every write.
func (l *Log) Backpressure() error {
	now := l.clk.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.refuseLocked(); err != nil {
		return err
	}
	if backlog := l.pendBytes + l.inflightBytes; backlog > l.o.MaxBacklogBytes {
		return fmt.Errorf("object storage unavailable: %d bytes wait for upload (limit %d)", backlog, l.o.MaxBacklogBytes)
	}
	oldest := l.inflightAt
	if oldest.IsZero() && len(l.pend) > 0 {
		oldest = l.pend[0].at
	}
	bound := stallBound
	if !l.eager() {
		bound += l.o.ChunkMaxAge
	}
	if !oldest.IsZero() && now.Sub(oldest) >= bound {
		cause := "uploads are slow"
		if l.failing != nil {
			cause = l.failing.Error()
		}
		return fmt.Errorf("object storage unavailable: the oldest entry has waited %s for upload: %s", now.Sub(oldest), cause)
	}
	return nil
}

// Stats returns upload counters.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stats
	s.Seq, s.Uploaded, s.Synced, s.Reported = l.nextSeq, l.uploaded, l.localSynced, l.reported
	return s
}

// WALSyncStats reports the local log's fsyncs (wal.WAL.SyncStats).
func (l *Log) WALSyncStats() wal.SyncStats { return l.wal.SyncStats() }

// WALPrepared is closed once the local log can take its first write
// without waiting for its segment to be preallocated (wal.WAL.Prepared).
func (l *Log) WALPrepared() <-chan struct{} { return l.wal.Prepared() }

// Close stops accepting entries, keeps uploading what is pending for up to
// a few seconds (until an upload fails), stops the goroutines and closes
// the wal. It does not close the Store.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		l.wg.Wait()
		return nil
	}
	l.closing = true
	upDone, upCancel := l.upDone, l.upCancel
	l.mu.Unlock()
	close(l.closingCh)
	kick(l.upKick)

	t := l.clk.NewTimer(closeTimeout)
	select {
	case <-upDone:
	case <-t.C():
	}
	t.Stop()
	if upCancel != nil {
		upCancel()
	}
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	if l.nextSnap != nil {
		l.nextSnap.Release()
		l.nextSnap = nil
	}
	if n := len(l.pend); l.err == nil && (n > 0 || l.inflightBytes > 0) {
		l.log.Warn("closing with entries not in object storage; the next Open uploads them from the local log",
			"queued", n, "uploaded", l.uploaded)
	}
	l.mu.Unlock()

	werr := l.wal.Close()
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	// The final checkpoint spares the next Open re-reading chunks.
	if err := l.checkpoint(true); err != nil {
		l.log.Warn("write metadata on close", "error", err)
	}
	if werr != nil && !errors.Is(werr, l.err) {
		return fmt.Errorf("objwal close: %w", werr)
	}
	return nil
}

// onWALSync receives the local wal's fsync progress.
func (l *Log) onWALSync(index uint64, err error) {
	l.mu.Lock()
	if err != nil {
		l.failLocked(fmt.Errorf("local wal: %w", err))
	}
	prev := l.localSynced
	if index > l.localSynced {
		l.localSynced = index
	}
	l.reportLocked()
	// Wake the other goroutines only when this fsync gives them work: every
	// needless wake-up competes for a core with the engine loop, which has
	// just been told to answer clients. The uploader (async mode) waits for
	// fsync'd entries: if some were pending before, it already holds a
	// timer for the oldest one's age, so only a first one or a full chunk
	// is news. Maintenance cares about uploaded entries becoming local
	// (the checkpoint) and about a waiting snapshot.
	upWake := !l.eager() &&
		len(l.pend) > 0 && (l.pend[0].index > prev || l.pendBytes >= int64(l.o.ChunkMaxBytes))
	maintWake := err != nil || l.uploaded > prev || l.nextSnap != nil
	l.mu.Unlock()
	if upWake {
		kick(l.upKick)
	}
	if maintWake {
		kick(l.maintKick)
	}
}

// reportLocked tells the engine about new durability, in index order.
func (l *Log) reportLocked() {
	if !l.started || l.err != nil {
		return
	}
	d := l.localSynced
	if l.writer && l.mode() != ModeAsync {
		d = min(d, max(l.uploaded, l.replicated))
	}
	if d > l.reported {
		l.reported = d
		l.o.OnSync(d, nil)
	}
}

// failLocked makes err permanent and tells the engine once.
func (l *Log) failLocked(err error) {
	if l.err != nil {
		return
	}
	l.err = err
	l.log.Error("object-storage log failed; refusing further writes", "error", err, "durable", l.reported)
	if l.started {
		l.o.OnSync(l.reported, err)
	}
}

func kick(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
