package wal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
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

func (w *WAL) load() error {
	for _, d := range []string{w.dir, w.snapDir} {
		if err := w.fs.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("create directory: %w", err)
		}
		// The directory's own name must survive a power loss before any
		// file in it is reported durable.
		if err := syncDir(w.fs, filepath.Dir(d)); err != nil {
			return err
		}
	}
	if err := w.removeTempSnapshots(); err != nil {
		return err
	}
	segs, err := listSegments(w.fs, w.dir)
	if err != nil {
		return err
	}
	for i, s := range segs {
		if i < len(segs)-1 {
			err = w.scanSealed(s)
		} else {
			var keep bool
			keep, err = w.scanNewest(s)
			if err == nil && !keep {
				segs = segs[:i]
			}
		}
		var d *DamageError
		if errors.As(err, &d) {
			d.Newer = len(segs) - 1 - i
			if w.cutDamage {
				segs, err = w.cutAt(segs, i, d)
				if err != nil {
					return err
				}
				break
			}
		}
		if err != nil {
			return err
		}
	}
	for i := 1; i < len(segs); i++ {
		prev, s := segs[i-1], segs[i]
		if s.first != prev.lastIndex()+1 {
			return fmt.Errorf("hole in the log: %s ends at index %d but %s starts at %d", prev.path, prev.lastIndex(), s.path, s.first)
		}
	}
	w.segs = segs
	for _, s := range segs {
		if s.count > 0 {
			w.first = s.first
			break
		}
	}
	if w.first != 0 {
		w.last = segs[len(segs)-1].lastIndex()
	}
	// Everything recovered is durable now: sealed segments were fsync'd when
	// sealed and scanNewest fsync'd the newest.
	w.synced, w.appended = w.last, w.last
	w.log.Debug("opened", "segments", len(segs), "first", w.first, "last", w.last)
	return nil
}

func listSegments(fsys vfs.FS, dir string) ([]*segment, error) {
	ents, err := fsys.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list segments: %w", err)
	}
	var segs []*segment
	for _, e := range ents {
		name := e.Name()
		base, ok := strings.CutSuffix(name, segmentSuffix)
		if !ok || len(base) != 20 || !e.Type().IsRegular() {
			continue
		}
		first, err := strconv.ParseUint(base, 10, 64)
		if err != nil || first == 0 {
			return nil, fmt.Errorf("segment %s: name is not a log index", filepath.Join(dir, name))
		}
		segs = append(segs, &segment{path: filepath.Join(dir, name), first: first})
	}
	sort.Slice(segs, func(i, j int) bool { return segs[i].first < segs[j].first })
	return segs, nil
}

// scanSealed verifies a segment that has a newer one after it. It must be
// sealed: it was fsync'd with its footer before the next was created, so any
// damage, even at its end, is corruption rather than an interrupted append.
// Records are checked but not decoded; Replay decodes them.
func (w *WAL) scanSealed(s *segment) error {
	f, err := w.fs.Open(s.path)
	if err != nil {
		return fmt.Errorf("open segment: %w", err)
	}
	defer f.Close()
	r, err := datafile.NewReader(s.path, f)
	if err != nil {
		return damaged(s, nil, 0, err)
	}
	if k := r.Header().Kind; k != datafile.KindSegment {
		return fmt.Errorf("segment %s: data file kind is %s", s.path, k)
	}
	var n uint64
	for ; ; n++ {
		_, err := r.Next()
		if err == io.EOF {
			break
		}
		var torn *datafile.TornTailError
		if errors.As(err, &torn) {
			return &DamageError{Path: s.path, Offset: torn.Offset, After: s.first - 1 + n,
				Reason: "the segment is followed by newer segments, so its damaged end is corruption: " + torn.Reason}
		}
		if err != nil {
			return damaged(s, r, n, err)
		}
	}
	ft, ok := r.Footer()
	if !ok {
		return &DamageError{Path: s.path, Offset: r.Offset(), After: s.first - 1 + n,
			Reason: "the segment is not sealed but newer segments follow it (its footer is missing)"}
	}
	if ft.Records > 0 && (ft.FirstIndex != s.first || ft.LastIndex-ft.FirstIndex+1 != ft.Records) {
		return fmt.Errorf("segment %s: footer index range %d..%d with %d records does not match its name", s.path, ft.FirstIndex, ft.LastIndex, ft.Records)
	}
	s.count, s.size, s.sealed = ft.Records, r.Offset(), true
	return nil
}

// scanNewest verifies the newest segment, truncates a torn tail and, if the
// segment is not sealed, makes it the active segment. keep is false when the
// segment was only a torn header and has been removed.
func (w *WAL) scanNewest(s *segment) (keep bool, err error) {
	st, err := w.fs.Stat(s.path)
	if err != nil {
		return false, fmt.Errorf("stat segment: %w", err)
	}
	if st.Size() < datafile.HeaderSize {
		// Creating a segment and writing its header is not atomic; a crash
		// in between leaves this, and the segment held nothing yet.
		w.log.Warn("removing segment with a torn header", "path", s.path, "size", st.Size())
		if err := w.fs.Remove(s.path); err != nil {
			return false, fmt.Errorf("remove torn segment: %w", err)
		}
		return false, syncDir(w.fs, w.dir)
	}
	f, err := w.fs.OpenFile(s.path, os.O_RDWR, 0)
	if err != nil {
		return false, fmt.Errorf("open segment: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	r, err := datafile.NewReader(s.path, f)
	if err != nil {
		return false, damaged(s, nil, 0, err)
	}
	if k := r.Header().Kind; k != datafile.KindSegment {
		return false, fmt.Errorf("segment %s: data file kind is %s", s.path, k)
	}
	var torn *datafile.TornTailError
	for n := uint64(0); ; n++ {
		e, err := r.NextEntry()
		if err == io.EOF || errors.As(err, &torn) {
			break
		}
		if err != nil {
			return false, damaged(s, r, n, err)
		}
		if n == 0 && e.Index != s.first {
			return false, fmt.Errorf("segment %s: first entry has index %d, not the %d its name says", s.path, e.Index, s.first)
		}
	}
	if r.Sealed() {
		ft, _ := r.Footer()
		s.count, s.size, s.sealed = ft.Records, r.Offset(), true
		if st.Size() > s.size {
			// A crash while sealing left the padding after the footer.
			if err := f.Truncate(s.size); err != nil {
				return false, fmt.Errorf("truncate sealed segment %s at %d: %w", s.path, s.size, err)
			}
			if err := f.Sync(); err != nil {
				return false, fmt.Errorf("sync segment %s: %w", s.path, err)
			}
		}
		return true, nil
	}
	tail, _ := r.Tail()
	size := st.Size()
	if torn != nil {
		// Cut the damage off and let the fill below put zeros back, so the
		// segment keeps its preallocation and nothing but zeros follows
		// the valid prefix.
		after := s.first - 1 + tail.Summary.Records
		w.torn = &Torn{Path: s.path, Offset: torn.Offset, After: after, Reason: torn.Reason}
		w.log.Warn("cutting a torn record off the end of the newest segment", "path", s.path, "offset", torn.Offset,
			"after_index", after, "size", size, "reason", torn.Reason)
		if err := f.Truncate(tail.Offset); err != nil {
			return false, fmt.Errorf("truncate segment %s at %d: %w", s.path, tail.Offset, err)
		}
		size = tail.Offset
	}
	if size < w.segSize {
		// After a torn tail, TruncateAfter, or a segment written before
		// segments were preallocated.
		if err := fillZeros(f, size, w.segSize, nil); err != nil {
			return false, fmt.Errorf("preallocate segment %s: %w", s.path, err)
		}
	}
	// The previous process may have died with written but unsynced pages;
	// what Open reports as held must be durable.
	if err := f.Sync(); err != nil {
		return false, fmt.Errorf("sync segment %s: %w", s.path, err)
	}
	if _, err := f.Seek(tail.Offset, io.SeekStart); err != nil {
		return false, fmt.Errorf("seek segment %s: %w", s.path, err)
	}
	w.bw = bufio.NewWriterSize(f, 256<<10)
	if w.dw, err = datafile.ResumeWriter(w.bw, tail); err != nil {
		return false, fmt.Errorf("resume segment %s: %w", s.path, err)
	}
	s.count, s.size = tail.Summary.Records, tail.Offset
	w.active, w.file, ok = s, f, true
	return true, nil
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

// run is the writer goroutine: it takes whatever is queued, writes it as one
// batch, fsyncs once and reports. Appends arriving meanwhile queue up for the
// next batch, which is the whole of group commit.
func (w *WAL) run() {
	defer func() {
		w.mu.Lock()
		w.stopped = true
		w.broadcast()
		w.mu.Unlock()
		close(w.done)
	}()
	var buf []byte
	var meta []frameMeta
	for {
		w.mu.Lock()
		buf, w.pend = w.pend, buf[:0]
		meta, w.pendMeta = w.pendMeta, meta[:0]
		closing := w.closed
		want := closing || w.syncTo > w.synced
		w.mu.Unlock()
		if len(meta) == 0 {
			if w.unsynced != 0 && (want || !w.lazy.Load()) {
				// A request for entries an earlier batch wrote, or
				// SetSyncOnRequest turned off after a batch written
				// lazily: no later batch may come to fsync it.
				if err := w.commit(nil, nil, true); err != nil {
					return
				}
				continue
			}
			if closing {
				return
			}
			<-w.kick
			continue
		}
		if err := w.commit(buf, meta, want); err != nil {
			return
		}
		if cap(buf) > maxIdleBuffer {
			buf = nil
		}
	}
}

// commit writes one batch, fsyncs unless the WAL syncs on request and
// none is wanted, and reports what became durable. A non-nil error means
// the WAL has failed.
func (w *WAL) commit(buf []byte, meta []frameMeta, want bool) error {
	var durable, sealedTo uint64
	err := func() error {
		for _, m := range meta {
			if m.seal {
				if err := w.sealActive(); err != nil {
					return err
				}
				// The seal's fsync covered everything written before it.
				sealedTo, durable = m.index, max(durable, w.allSynced())
				continue
			}
			if err := w.prepare(m.index, m.end-m.off); err != nil {
				return err
			}
			if err := w.dw.AppendFramed(buf[m.off:m.end], m.index, m.revision); err != nil {
				return fmt.Errorf("segment %s: %w", w.active.path, err)
			}
			w.unsynced = m.index
			w.unsyncedN++
		}
		if w.unsynced == 0 || w.lazy.Load() && !want {
			return nil
		}
		if err := w.syncActive(); err != nil {
			return err
		}
		durable = w.allSynced()
		return nil
	}()

	if err != nil {
		err = fmt.Errorf("wal: %w", err)
		w.mu.Lock()
		w.err = err
		synced := w.synced
		w.mu.Unlock()
		w.log.Error("write failed; refusing further appends", "error", err, "synced", synced)
		w.onSync(synced, err)
		w.mu.Lock()
		w.broadcast()
		w.mu.Unlock()
		return err
	}
	// OnSync runs before waiters are released, so a caller returning from
	// WaitSynced knows the matching OnSync has been delivered.
	if durable != 0 {
		w.onSync(durable, nil)
	}
	w.mu.Lock()
	w.synced = max(w.synced, durable)
	w.sealedTo = max(w.sealedTo, sealedTo)
	w.broadcast()
	w.mu.Unlock()
	if w.hooks.afterCommit != nil {
		w.hooks.afterCommit(w.unsynced)
	}
	return nil
}

// allSynced records that an fsync just covered every entry written so far
// and returns the newest (0 if none was waiting).
func (w *WAL) allSynced() uint64 {
	w.stats.durable(w.unsyncedN)
	last := w.unsynced
	w.unsynced, w.unsyncedN = 0, 0
	return last
}

// prepare makes sure the active segment can take the entry index of n
// framed bytes: it rolls a full segment and replaces an empty one whose name
// no longer fits (the log restarted after a snapshot).
func (w *WAL) prepare(index uint64, n int) error {
	if w.active != nil {
		records := w.dw.Records()
		switch {
		case records > 0 && w.dw.Offset()+int64(n)+datafile.FooterSize > w.segSize:
			if err := w.sealActive(); err != nil {
				return err
			}
		case records == 0 && w.active.first != index:
			if err := w.dropEmptyActive(); err != nil {
				return err
			}
		default:
			if w.dw.Offset() > w.segSize/2 {
				w.requestSpare()
			}
			return nil
		}
	}
	return w.createSegment(index)
}

func (w *WAL) createSegment(first uint64) error {
	s := &segment{path: filepath.Join(w.dir, segmentName(first)), first: first}
	f, err := w.newSegmentFile(s.path)
	if err != nil {
		return fmt.Errorf("create segment: %w", err)
	}
	// The spare's header is already on disk; writing the same bytes again
	// keeps the Writer's checksum and offset its own business.
	if w.bw == nil {
		w.bw = bufio.NewWriterSize(f, 256<<10)
	} else {
		w.bw.Reset(f)
	}
	dw, err := datafile.NewWriter(w.bw, datafile.KindSegment)
	if err != nil {
		f.Close()
		return fmt.Errorf("segment %s: %w", s.path, err)
	}
	// The new name must survive a crash before any entry in it is reported
	// durable.
	if err := syncDir(w.fs, w.dir); err != nil {
		f.Close()
		return err
	}
	w.active, w.file, w.dw = s, f, dw
	w.segMu.Lock()
	w.segs = append(w.segs, s)
	w.segMu.Unlock()
	// The next spare is asked for once this segment is half full (see
	// prepare): a log that never fills its segment, as a short-lived or
	// quiet node's, never writes a second 64 MiB of zeros, and a fresh
	// node's first writes do not share the disk with that fill.
	return nil
}

// syncActive flushes and fsyncs the active segment, then publishes its new
// durable length to Replay and SaveSnapshot.
func (w *WAL) syncActive() error {
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("write segment %s: %w", w.active.path, err)
	}
	if err := w.fsync(w.file); err != nil {
		return fmt.Errorf("sync segment %s: %w", w.active.path, err)
	}
	w.segMu.Lock()
	w.active.count, w.active.size = w.dw.Records(), w.dw.Offset()
	w.segMu.Unlock()
	return nil
}

// sealActive writes the active segment's footer, fsyncs and closes it. The
// next entry starts a new segment.
func (w *WAL) sealActive() error {
	if w.active == nil || w.dw.Records() == 0 {
		return nil
	}
	if _, err := w.dw.Finish(); err != nil {
		return fmt.Errorf("seal segment %s: %w", w.active.path, err)
	}
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("write segment %s: %w", w.active.path, err)
	}
	// A sealed file ends with its footer. One fsync covers the footer and
	// the cut; a crash before it leaves the footer followed by zeros,
	// which Open reads as sealed.
	if err := w.file.Truncate(w.dw.Offset()); err != nil {
		return fmt.Errorf("cut padding of segment %s: %w", w.active.path, err)
	}
	if err := w.syncActive(); err != nil {
		return err
	}
	if err := w.file.Close(); err != nil {
		return fmt.Errorf("close segment %s: %w", w.active.path, err)
	}
	w.segMu.Lock()
	w.active.sealed = true
	w.segMu.Unlock()
	w.log.Debug("sealed segment", "path", w.active.path, "first", w.active.first, "last", w.active.lastIndex())
	w.active, w.file, w.dw = nil, nil, nil
	return nil
}

func (w *WAL) dropEmptyActive() error {
	path := w.active.path
	if err := w.file.Close(); err != nil {
		return fmt.Errorf("close segment %s: %w", path, err)
	}
	w.segMu.Lock()
	w.segs = w.segs[:len(w.segs)-1]
	w.segMu.Unlock()
	w.active, w.file, w.dw = nil, nil, nil
	if err := w.fs.Remove(path); err != nil {
		return fmt.Errorf("remove empty segment: %w", err)
	}
	return nil
}

func (w *WAL) fsync(f vfs.File) error {
	if w.hooks.beforeSync != nil {
		if err := w.hooks.beforeSync(); err != nil {
			return err
		}
	}
	start := w.clk.Now()
	err := f.Sync()
	d := w.clk.Since(start)
	w.stats.observe(d)
	if d > slowSync {
		w.log.Warn("slow fsync", "path", f.Name(), "duration", d)
	}
	return err
}

func syncDir(fsys vfs.FS, dir string) error {
	if err := fsys.SyncDir(dir); err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// Replay calls fn, in order, for every durable entry with Index >= from.
// Entries still queued are not included: call WaitSynced first to cover
// recent appends. from == 0 means from the oldest entry held; asking for
// entries older than that is ErrCompacted. An error from fn stops the replay
// and is returned as is. fn must not call SaveSnapshot: segment deletion
// waits for Replay to finish.
func (w *WAL) Replay(from uint64, fn func(*netsyv1.Entry) error) error {
	w.delMu.RLock()
	defer w.delMu.RUnlock()
	w.mu.Lock()
	first := w.first
	w.mu.Unlock()
	if first == 0 {
		return nil
	}
	if from != 0 && from < first {
		return fmt.Errorf("wal replay from %d: %w (first index is %d)", from, ErrCompacted, first)
	}
	w.segMu.Lock()
	segs := make([]segment, len(w.segs))
	for i, s := range w.segs {
		segs[i] = *s
	}
	w.segMu.Unlock()

	next := uint64(0) // expected index of the next entry read
	for _, s := range segs {
		if s.count == 0 || s.lastIndex() < from {
			continue
		}
		if next != 0 && s.first != next {
			return fmt.Errorf("wal replay: %s starts at index %d, expected %d", s.path, s.first, next)
		}
		if err := replaySegment(w.fs, s, from, fn); err != nil {
			return err
		}
		next = s.lastIndex() + 1
	}
	return nil
}

func replaySegment(fsys vfs.FS, s segment, from uint64, fn func(*netsyv1.Entry) error) error {
	f, err := fsys.Open(s.path)
	if err != nil {
		return fmt.Errorf("wal replay: %w", err)
	}
	defer f.Close()
	// Only the durable prefix: the writer goroutine may be appending to the
	// active segment right now.
	r, err := datafile.NewReader(s.path, io.LimitReader(f, s.size))
	if err != nil {
		return fmt.Errorf("wal replay: %w", err)
	}
	want := s.first
	for n := uint64(0); ; n++ {
		e, err := r.NextEntry()
		if err == io.EOF {
			if n != s.count || (s.sealed && !r.Sealed()) {
				return fmt.Errorf("wal replay: segment %s holds %d entries (sealed %v), expected %d (sealed %v)", s.path, n, r.Sealed(), s.count, s.sealed)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("wal replay: %w", err)
		}
		if e.Index != want {
			return fmt.Errorf("wal replay: segment %s: entry index %d, expected %d", s.path, e.Index, want)
		}
		want++
		if e.Index < from {
			continue
		}
		if err := fn(e); err != nil {
			return err
		}
	}
}
