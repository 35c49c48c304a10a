package wal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/netsy-io/netsy/internal/clock"
	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/vfs"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

const (
	// DefaultSegmentBytes is the segment size used when Options leaves it 0.
	DefaultSegmentBytes = 64 << 20

	segmentSuffix = ".seg"
	// spareName is the preallocated empty segment waiting to be renamed
	// into place; listSegments does not see it.
	spareName = "spare.seg.tmp"
	// slowSync is how long an fsync may take before it is worth a warning.
	slowSync = time.Second
	// maxIdleBuffer bounds the queue buffer kept between batches, so one
	// burst does not pin its memory for the life of the process.
	maxIdleBuffer = 16 << 20
)

var (
	// ErrClosed is returned by calls made after Close.
	ErrClosed = errors.New("wal: closed")
	// ErrCompacted means the entries asked for were deleted after a snapshot
	// covered them.
	ErrCompacted = errors.New("wal: entries were removed after a snapshot")
)

// Options configures a WAL.
type Options struct {
	// Dir holds the segments and, under snap/, the local snapshots.
	Dir string
	// FS is the file system every file of the log is on (nil: vfs.OS()).
	FS vfs.FS
	// SegmentBytes is the size after which a segment is sealed and a new one
	// started (default 64 MiB). A segment always holds at least one entry.
	SegmentBytes int64
	// OnSync is called on the writer goroutine after every fsync with the
	// highest index now durable, and once with the error that failed the
	// WAL (index is then the highest index that did become durable). It must
	// not block for long, since the next fsync waits for it, and must not
	// call Close or SaveSnapshot, which wait for the writer goroutine.
	OnSync func(index uint64, err error)
	// SyncOnRequest makes the writer fsync only up to what SyncTo (or
	// WaitSynced) asked for, and on seal and Close, instead of after every
	// batch: for a caller that waits for something slower anyway (an
	// object-storage PUT) and can ask for the fsync when it starts that,
	// one fsync then covers everything written meanwhile.
	SyncOnRequest bool
	// CutDamage makes Open cut the log at damage that is not a torn tail
	// (see DamageError) instead of failing: the rest of the damaged
	// segment and every newer segment are removed, logged and reported by
	// Cut. Only for a caller that can fetch what followed the damage from
	// elsewhere (a replica from its Primary, a node whose acknowledged
	// entries are all in object storage).
	CutDamage bool
	Logger    hclog.Logger
	Clock     clock.Clock

	hooks *hooks
}

// hooks are fault-injection points for tests.
type hooks struct {
	// beforeSync runs before each fsync of a segment; an error stands in for
	// the fsync failing.
	beforeSync func() error
	// beforeSpareFill runs on the spare goroutine before it writes zeros.
	beforeSpareFill func()
	// afterCommit runs on the writer goroutine after each batch it
	// committed, with the newest index written but not fsync'd (0: none).
	afterCommit func(unsynced uint64)
}

// WAL is the local log. Append is meant to be called by one goroutine (the
// engine's write loop); the other methods may be called from any goroutine.
type WAL struct {
	fs      vfs.FS
	dir     string
	snapDir string
	segSize int64
	onSync  func(uint64, error)
	log     hclog.Logger
	clk     clock.Clock
	hooks   hooks

	kick chan struct{}
	done chan struct{}

	// The spare-segment goroutine (see spare.go) takes requests on
	// spareReq, answers each on spareReady, and exits when stop closes.
	spareReq   chan struct{}
	spareReady chan error
	stop       chan struct{}
	spareDone  chan struct{}
	// prepared closes once the first segment of a new log is preallocated
	// (see Prepared).
	prepared     chan struct{}
	preparedOnce sync.Once

	mu       sync.Mutex
	pend     []byte      // framed entries queued for the writer goroutine
	pendMeta []frameMeta // one per queued entry or seal request
	first    uint64      // oldest entry held (written or queued); 0 if none
	last     uint64      // newest entry held; 0 if none
	synced   uint64      // highest index known durable
	appended uint64      // highest index ever accepted, for WaitSynced
	sealedTo uint64      // highest index covered by a completed seal request
	err      error       // sticky failure
	syncTo   uint64      // with SyncOnRequest: fsync at least this far
	closed   bool
	stopped  bool          // the writer goroutine has exited
	changed  chan struct{} // closed and replaced whenever the fields above move

	// segMu guards segs and the mutable fields of its elements.
	segMu sync.Mutex
	segs  []*segment

	// delMu keeps segment files alive while Replay reads them.
	delMu sync.RWMutex

	snapMu sync.Mutex // serializes SaveSnapshot

	// Owned by the writer goroutine (and by Open before it starts).
	lazy         atomic.Bool // Options.SyncOnRequest, or SetSyncOnRequest
	unsynced     uint64      // newest index written but not fsync'd (0: none)
	unsyncedN    uint64      // entries written but not fsync'd
	active       *segment
	file         vfs.File
	bw           *bufio.Writer
	dw           *datafile.Writer
	sparePending bool // a spare was requested and its answer not yet taken

	stats syncStats

	// torn describes a torn tail Open cut off (nil if none); see Torn.
	torn *Torn
	// cutDamage is Options.CutDamage; cut describes what Open cut (see Cut).
	cutDamage bool
	cut       *Cut
}

// Torn describes damage Open cut off the end of the newest segment: a
// record that a crash left half written. What that record held, and
// whether anybody was told it was durable, is for the caller to judge (the
// WAL reports an entry durable only after its fsync, so a torn record was
// never reported, unless the disk lost writes it had confirmed).
type Torn struct {
	Path   string // the segment
	Offset int64  // where the damage started
	After  uint64 // the last intact entry before it (0: none)
	Reason string
}

type frameMeta struct {
	index    uint64
	revision int64
	off, end int
	// seal asks the writer goroutine to seal the active segment once the
	// entries queued before it are written (see SaveSnapshot).
	seal bool
}

type segment struct {
	path   string
	first  uint64 // from the file name
	count  uint64 // entries durable in the file
	size   int64  // bytes durable in the file
	sealed bool
}

// lastIndex is first-1 for an empty segment, which keeps density checks
// uniform.
func (s *segment) lastIndex() uint64 { return s.first + s.count - 1 }

func segmentName(first uint64) string { return fmt.Sprintf("%020d%s", first, segmentSuffix) }

// Open opens or creates the WAL in opts.Dir, verifying every segment and
// truncating only a torn tail of the newest one. Other damage is a
// *DamageError, or is cut out with Options.CutDamage.
func Open(opts Options) (*WAL, error) {
	if opts.Dir == "" {
		return nil, errors.New("open wal: Options.Dir is empty")
	}
	if opts.SegmentBytes < 0 {
		return nil, fmt.Errorf("open wal: Options.SegmentBytes is negative (%d)", opts.SegmentBytes)
	}
	w := &WAL{
		fs:      vfs.OrOS(opts.FS),
		dir:     opts.Dir,
		snapDir: filepath.Join(opts.Dir, "snap"),
		segSize: opts.SegmentBytes,
		onSync:  opts.OnSync,
		log:     opts.Logger,
		clk:     opts.Clock,
		kick:    make(chan struct{}, 1),
		done:    make(chan struct{}),
		changed: make(chan struct{}),

		spareReq:   make(chan struct{}, 1),
		spareReady: make(chan error, 1),
		stop:       make(chan struct{}),
		spareDone:  make(chan struct{}),
		prepared:   make(chan struct{}),
	}
	w.lazy.Store(opts.SyncOnRequest)
	w.cutDamage = opts.CutDamage
	if w.segSize == 0 {
		w.segSize = DefaultSegmentBytes
	}
	if w.onSync == nil {
		w.onSync = func(uint64, error) {}
	}
	if w.log == nil {
		// The caller names the logger (the node passes logger.Named("wal")).
		w.log = hclog.NewNullLogger()
	}
	if w.clk == nil {
		w.clk = clock.Real()
	}
	if opts.hooks != nil {
		w.hooks = *opts.hooks
	}
	if err := w.load(); err != nil {
		if w.file != nil {
			w.file.Close()
		}
		return nil, fmt.Errorf("open wal %s: %w", opts.Dir, err)
	}
	if w.active == nil {
		// The first segment of a new log is preallocated too; Prepared
		// tells when.
		w.requestSpare()
	} else {
		w.markPrepared()
	}
	go w.runSpares()
	go w.run()
	return w, nil
}

// SegmentPath names the segment file that holds index, or "" if no
// segment does (for messages that must name the local file).
func (w *WAL) SegmentPath(index uint64) string {
	w.segMu.Lock()
	defer w.segMu.Unlock()
	for _, s := range w.segs {
		if index >= s.first && index <= s.lastIndex() {
			return s.path
		}
	}
	return ""
}

// Torn reports the torn tail Open cut off the newest segment, or nil.
func (w *WAL) Torn() *Torn { return w.torn }

// FirstIndex is the index of the oldest entry held, or 0 if none.
func (w *WAL) FirstIndex() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.first
}

// LastIndex is the index of the newest entry appended (queued or durable),
// or 0 if the WAL holds no entries.
func (w *WAL) LastIndex() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// Append queues e for the next group commit and returns without waiting for
// it to be durable; OnSync or WaitSynced report when it is. e.Index must be
// LastIndex()+1, or any index above everything synced so far when the WAL
// holds no entries (a log restarting after a snapshot). e is encoded before
// Append returns, so the caller may reuse it.
func (w *WAL) Append(e *netsyv1.Entry) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.checkAppendLocked(e.GetIndex()); err != nil {
		return err
	}
	off := len(w.pend)
	pend, err := datafile.FrameEntry(w.pend, e)
	w.pend = pend
	if err != nil {
		return fmt.Errorf("wal append: %w", err)
	}
	w.queuedLocked(e.Index, e.Revision, off)
	return nil
}

// AppendFramed is Append for an entry the caller has already framed with
// datafile.FrameEntry (objwal frames each entry once for both the local
// log and its upload queue). frame must be exactly that one record, for
// the entry at index with revision; it is copied.
func (w *WAL) AppendFramed(index uint64, revision int64, frame []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.checkAppendLocked(index); err != nil {
		return err
	}
	off := len(w.pend)
	w.pend = append(w.pend, frame...)
	w.queuedLocked(index, revision, off)
	return nil
}

// checkAppendLocked refuses an append the log cannot take at index.
func (w *WAL) checkAppendLocked(index uint64) error {
	switch {
	case w.err != nil:
		return w.err
	case w.closed:
		return ErrClosed
	case index == 0:
		return errors.New("wal append: index 0 is not a log position")
	case w.last != 0 && index != w.last+1:
		return fmt.Errorf("wal append: index %d does not follow last index %d", index, w.last)
	case w.last == 0 && index <= w.synced:
		return fmt.Errorf("wal append: index %d is at or below the already synced index %d", index, w.synced)
	}
	return nil
}

// queuedLocked records the record framed at w.pend[off:] and wakes the
// writer.
func (w *WAL) queuedLocked(index uint64, revision int64, off int) {
	w.pendMeta = append(w.pendMeta, frameMeta{index: index, revision: revision, off: off, end: len(w.pend)})
	if w.first == 0 {
		w.first = index
	}
	w.last = index
	w.appended = max(w.appended, index)
	w.wake()
}

// WaitSynced blocks until index is durable, the WAL fails, or ctx ends. A
// nil return also means OnSync has been called for index (or a later one).
func (w *WAL) WaitSynced(ctx context.Context, index uint64) error {
	w.SyncTo(index)
	for {
		w.mu.Lock()
		synced, err, appended, stopped, ch := w.synced, w.err, w.appended, w.stopped, w.changed
		w.mu.Unlock()
		switch {
		case synced >= index:
			return nil
		case err != nil:
			return err
		case index > appended:
			return fmt.Errorf("wal: wait for index %d that was never appended (last %d)", index, appended)
		case stopped:
			return ErrClosed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// SetSyncOnRequest changes Options.SyncOnRequest on a running log (objwal
// switches between its durability modes). Turning it off fsyncs whatever
// is written at once.
func (w *WAL) SetSyncOnRequest(on bool) {
	if w.lazy.Swap(on) && !on {
		w.wake()
	}
}

// SyncTo asks the writer to fsync at least through index; it does not
// wait (OnSync or WaitSynced report it). Without Options.SyncOnRequest
// every batch is fsync'd anyway and it does nothing useful.
func (w *WAL) SyncTo(index uint64) {
	w.mu.Lock()
	if index <= w.syncTo {
		w.mu.Unlock()
		return
	}
	w.syncTo = index
	w.mu.Unlock()
	w.wake()
}

// Close stops accepting appends, makes everything already queued durable
// (reporting it through OnSync) and stops the writer goroutine. It does not
// seal the active segment: an unsealed newest segment is the normal state.
func (w *WAL) Close() error {
	w.mu.Lock()
	already := w.closed
	w.closed = true
	w.mu.Unlock()
	if !already {
		w.wake()
	}
	<-w.done
	// Only now: the writer may have waited for a spare while draining.
	if !already {
		close(w.stop)
	}
	<-w.spareDone
	w.mu.Lock()
	defer w.mu.Unlock()
	if !already && w.file != nil {
		if err := w.file.Close(); err != nil && w.err == nil {
			return fmt.Errorf("close wal: %w", err)
		}
	}
	return w.err
}

// wake tells the writer goroutine there is work, without blocking.
func (w *WAL) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// broadcast wakes every WaitSynced; callers hold w.mu.
func (w *WAL) broadcast() {
	close(w.changed)
	w.changed = make(chan struct{})
}
