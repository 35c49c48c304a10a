package wal

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/vfs"
)

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
