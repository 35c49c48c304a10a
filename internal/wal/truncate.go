package wal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/vfs"
)

// TruncateAfter removes every entry after index from the log in dir, which
// must not be open. It exists for a caller whose authority over the log
// outranks the local disk — objwal, when object storage holds a different
// entry at an index the local log also has: the local entries from there on
// were never acknowledged, and keeping them would fork the history.
//
// Segments that start after index are removed newest first and the removal
// is made durable before the segment holding index is cut, so a crash at
// any point leaves a dense log that Open accepts. The cut segment loses its
// footer (and any preallocated zeros) and becomes the unsealed newest
// segment, which Open preallocates again. An index below the newest
// local snapshot is refused: the snapshot would cover entries the log no
// longer has.
func TruncateAfter(dir string, index uint64) error {
	return TruncateAfterFS(vfs.OS(), dir, index)
}

// TruncateAfterFS is TruncateAfter for a log on fsys.
func TruncateAfterFS(fsys vfs.FS, dir string, index uint64) error {
	snaps, err := (&WAL{fs: fsys, snapDir: filepath.Join(dir, "snap")}).snapshots()
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("truncate wal %s: %w", dir, err)
	}
	if n := len(snaps); n > 0 && snaps[n-1] > index {
		return fmt.Errorf("truncate wal %s after index %d: the newest snapshot covers index %d", dir, index, snaps[n-1])
	}
	segs, err := listSegments(fsys, dir)
	if err != nil {
		return fmt.Errorf("truncate wal %s: %w", dir, err)
	}
	removed := false
	for len(segs) > 0 && segs[len(segs)-1].first > index {
		s := segs[len(segs)-1]
		if err := fsys.Remove(s.path); err != nil {
			return fmt.Errorf("truncate wal %s: remove segment: %w", dir, err)
		}
		segs, removed = segs[:len(segs)-1], true
	}
	if removed {
		if err := syncDir(fsys, dir); err != nil {
			return fmt.Errorf("truncate wal %s: %w", dir, err)
		}
	}
	if len(segs) == 0 {
		return nil
	}
	if err := cutSegment(fsys, segs[len(segs)-1].path, index); err != nil {
		return fmt.Errorf("truncate wal %s: %w", dir, err)
	}
	return nil
}

// cutSegment truncates the segment at path right after the entry at index;
// a segment that already ends at or before index is left alone (a torn
// tail is Open's to repair).
func cutSegment(fsys vfs.FS, path string, index uint64) error {
	f, err := fsys.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("open segment: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return fmt.Errorf("stat segment: %w", err)
	} else if st.Size() < datafile.HeaderSize {
		return nil // a torn header, which Open removes
	}
	r, err := datafile.NewReader(path, f)
	if err != nil {
		return err
	}
	for {
		e, err := r.NextEntry()
		if err == io.EOF || errors.Is(err, datafile.ErrTornTail) {
			return nil
		}
		if err != nil {
			return err
		}
		if e.Index == index {
			break
		}
		if e.Index > index {
			return fmt.Errorf("segment %s: entry %d comes before %d", path, e.Index, index)
		}
	}
	off := r.Offset()
	if _, err := r.NextEntry(); err == io.EOF {
		return nil // index is the last entry: keep the segment sealed
	}
	if err := f.Truncate(off); err != nil {
		return fmt.Errorf("truncate segment %s at %d: %w", path, off, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync segment %s: %w", path, err)
	}
	return nil
}
