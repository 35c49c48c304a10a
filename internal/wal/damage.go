package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/vfs"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// DamageError is damage in the log that is not a torn tail: a bad record
// or zeros with valid records after them, any damage in a segment that
// newer segments follow, or a bad segment header. Entries after it may
// have been reported durable, so Open never drops them on its own; it
// returns this error unless Options.CutDamage says the caller can fetch
// them from elsewhere.
type DamageError struct {
	Path string // the damaged segment
	// Offset is where the damage starts: the first bad record, or where
	// a missing footer should be. A cut keeps the bytes before it (none if
	// it is inside the header).
	Offset int64
	// After is the last intact entry before the damage (the segment's
	// first index minus one when there is none).
	After uint64
	// Newer is how many segments follow the damaged one; a cut removes
	// them whole.
	Newer  int
	Reason string

	err error // the data-file error, if one found the damage
}

func (e *DamageError) Error() string {
	s := fmt.Sprintf("damaged log segment %s at offset %d: %s; the last intact entry before it is index %d", e.Path, e.Offset, e.Reason, e.After)
	if e.Newer > 0 {
		s += fmt.Sprintf(", and %d newer segment(s) follow", e.Newer)
	}
	return s
}

// Unwrap returns the data-file error, so errors.Is(err, datafile.ErrCorrupt)
// holds where the reader found the damage.
func (e *DamageError) Unwrap() error { return e.err }

// Cut describes damage that Open (with Options.CutDamage) or Repair cut
// out of the log, with everything after it: the rest of the damaged
// segment and every newer segment.
type Cut struct {
	Damage DamageError
	// Removed are the segments removed whole: every newer one, the damaged
	// one if its header was bad, and all the rest if the newest local
	// snapshot covers every entry the cut kept.
	Removed []string
	// Dropped are the entries after the damage that could still be read
	// (their records verify), as dense runs in file order. Indices missing
	// between runs, or after the last one, were in bytes that could not be
	// read (Unread).
	Dropped []Run
	// Unread are the byte ranges after the damage in which no entry could
	// be read.
	Unread []Span
	// Snapshot is the index of the newest local snapshot (0: none); the
	// dropped entries at or below it are covered by it and not lost.
	Snapshot uint64
}

// Run is a dense run of entries.
type Run struct {
	FirstIndex, LastIndex       uint64
	FirstRevision, LastRevision int64
}

func (r Run) String() string {
	return fmt.Sprintf("index %d-%d (revision %d-%d)", r.FirstIndex, r.LastIndex, r.FirstRevision, r.LastRevision)
}

// Span is a byte range of a segment file.
type Span struct {
	Path           string
	Offset, Length int64
}

// DroppedEntries is the number of entries in c.Dropped.
func (c *Cut) DroppedEntries() uint64 {
	var n uint64
	for _, r := range c.Dropped {
		n += r.LastIndex - r.FirstIndex + 1
	}
	return n
}

// UnreadBytes is the number of bytes in c.Unread.
func (c *Cut) UnreadBytes() int64 {
	var n int64
	for _, s := range c.Unread {
		n += s.Length
	}
	return n
}

// Cut reports the damage Open cut out of the log (Options.CutDamage), or
// nil.
func (w *WAL) Cut() *Cut { return w.cut }

// Report is what Repair did.
type Report struct {
	// Cut is the damage cut out of the log; nil if there was none.
	Cut *Cut
	// Torn is a torn tail cut off the newest segment, as every Open does.
	Torn *Torn
	// First and Last are the entries the log holds afterwards (0: none).
	First, Last uint64
}

// Repair opens the log in dir (which must exist) as Open with
// Options.CutDamage would, without starting it: damage is cut out of the
// log with everything after it, and a torn tail is cut as always. It is
// for an operator whose node refuses to start because the entries after
// the damage may exist nowhere else; Report says what they were, as far
// as their records can still be read. Nothing else may have the log open.
func Repair(dir string, fsys vfs.FS) (*Report, error) {
	fsys = vfs.OrOS(fsys)
	if st, err := fsys.Stat(dir); err != nil {
		return nil, fmt.Errorf("repair wal: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("repair wal: %s is not a directory", dir)
	}
	w := &WAL{
		fs:        fsys,
		dir:       dir,
		snapDir:   filepath.Join(dir, "snap"),
		segSize:   DefaultSegmentBytes,
		log:       hclog.NewNullLogger(),
		cutDamage: true,
	}
	err := w.load()
	if w.file != nil {
		if cerr := w.file.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}
	if err != nil {
		return nil, fmt.Errorf("repair wal %s: %w", dir, err)
	}
	return &Report{Cut: w.cut, Torn: w.torn, First: w.first, Last: w.last}, nil
}

// damaged turns err, met reading segment s after n intact records, into a
// *DamageError when it is damage a cut can remove. Other errors (I/O, a
// format this build does not read) are returned as they are. r is nil for
// an error from the header.
func damaged(s *segment, r *datafile.Reader, n uint64, err error) error {
	var ce *datafile.CorruptError
	if !errors.As(err, &ce) {
		return err
	}
	off, reason := int64(0), "corrupt header: "+ce.Reason
	if r != nil {
		// The reader names the damaged structure, which for a footer may
		// start before the byte it blames, and for an entry that does not
		// decode is the record it already passed.
		off, reason = min(ce.Offset, r.Offset()), "corrupt: "+ce.Reason
		if off != ce.Offset {
			reason += fmt.Sprintf(" (at offset %d)", ce.Offset)
		}
	}
	return &DamageError{Path: s.path, Offset: off, After: s.first - 1 + n, Reason: reason, err: err}
}

// cutAt cuts the log at the damage d found in segs[i], which has been
// closed: everything from d.Offset on goes, and every newer segment. It
// returns the segments left, all scanned; the newest is active unless it
// is sealed. Newer segments are removed first, newest first, and their
// removal made durable before the damaged one is cut, so that a crash
// half-way leaves the damage as the newest thing in the log for the next
// Open to find again.
func (w *WAL) cutAt(segs []*segment, i int, d *DamageError) ([]*segment, error) {
	c := &Cut{Damage: *d}
	if err := w.listDropped(c, segs[i:]); err != nil {
		return nil, fmt.Errorf("cut %s: %w", d.Path, err)
	}
	snaps, err := w.snapshots()
	if err != nil {
		return nil, err
	}
	if len(snaps) > 0 {
		c.Snapshot = snaps[len(snaps)-1]
	}
	remove := func(s *segment) error {
		if err := w.fs.Remove(s.path); err != nil {
			return fmt.Errorf("cut %s: remove segment: %w", d.Path, err)
		}
		c.Removed = append(c.Removed, s.path)
		return nil
	}
	for j := len(segs) - 1; j > i; j-- {
		if err := remove(segs[j]); err != nil {
			return nil, err
		}
	}
	segs = segs[:i+1]
	// A cut the newest snapshot covers leaves entries the log can never
	// continue from (Append needs the index after the snapshot): they go
	// too, and the log restarts after the snapshot as it does when a
	// snapshot covers everything.
	// Oldest first, the damaged segment last: until it goes, the next Open
	// finds the damage again.
	covered := c.Snapshot >= d.After
	if covered || d.Offset < datafile.HeaderSize {
		n := i
		if covered {
			n = 0
		}
		for j := n; j <= i; j++ {
			if err := remove(segs[j]); err != nil {
				return nil, err
			}
		}
		segs = segs[:n]
	}
	if err := syncDir(w.fs, w.dir); err != nil {
		return nil, err
	}
	if len(segs) == i+1 {
		if err := truncateSegment(w.fs, segs[i].path, d.Offset); err != nil {
			return nil, fmt.Errorf("cut %s: %w", d.Path, err)
		}
	}
	if n := len(segs); n > 0 {
		// The segment now newest is scanned again as the newest, which
		// makes it the active segment (and preallocates it) unless it is
		// sealed. Nothing damaged is left in it.
		keep, err := w.scanNewest(segs[n-1])
		if err != nil {
			return nil, fmt.Errorf("after cutting %s at offset %d: %w", d.Path, d.Offset, err)
		}
		if !keep {
			segs = segs[:n-1]
		}
	}
	w.cut = c
	w.logCut(c)
	return segs, nil
}

func truncateSegment(fsys vfs.FS, path string, off int64) error {
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open segment: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(off); err != nil {
		return fmt.Errorf("truncate segment %s at %d: %w", path, off, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync segment %s: %w", path, err)
	}
	return nil
}

func (w *WAL) logCut(c *Cut) {
	d := c.Damage
	runs := make([]string, len(c.Dropped))
	for i, r := range c.Dropped {
		runs[i] = r.String()
	}
	w.log.Warn("CUT the log at a damaged record: everything after it is dropped from the local log",
		"path", d.Path, "offset", d.Offset, "reason", d.Reason, "after_index", d.After,
		"removed_segments", len(c.Removed), "dropped_entries", c.DroppedEntries(), "dropped", strings.Join(runs, ", "),
		"unread_bytes", c.UnreadBytes(), "snapshot_index", c.Snapshot)
}

// listDropped fills c.Dropped and c.Unread from the bytes the cut will
// discard: segs[0] (the damaged segment) from the damage on, and every
// later segment whole. Best effort: it reads what still verifies.
func (w *WAL) listDropped(c *Cut, segs []*segment) error {
	d := c.Damage
	var cur *Run
	flush := func() {
		if cur != nil {
			c.Dropped = append(c.Dropped, *cur)
			cur = nil
		}
	}
	for k, s := range segs {
		data, err := w.fs.ReadFile(s.path)
		if err != nil {
			return fmt.Errorf("read segment: %w", err)
		}
		from := int64(datafile.HeaderSize)
		if k == 0 {
			from = d.Offset
		}
		if from >= int64(len(data)) {
			continue
		}
		recs, gaps := datafile.Salvage(data[from:], from)
		for _, g := range gaps {
			c.Unread = append(c.Unread, Span{Path: s.path, Offset: g.Offset, Length: g.Length})
		}
		for _, r := range recs {
			e := &netsyv1.Entry{}
			if err := proto.Unmarshal(r.Payload, e); err != nil || e.Index <= d.After {
				// A record that verifies but is no entry of this log's
				// future is as good as unread.
				flush()
				c.Unread = append(c.Unread, Span{Path: s.path, Offset: r.Offset, Length: int64(datafile.RecordHeaderSize + len(r.Payload))})
				continue
			}
			if cur != nil && e.Index == cur.LastIndex+1 {
				cur.LastIndex, cur.LastRevision = e.Index, e.Revision
				continue
			}
			flush()
			cur = &Run{FirstIndex: e.Index, LastIndex: e.Index, FirstRevision: e.Revision, LastRevision: e.Revision}
		}
	}
	flush()
	return nil
}
