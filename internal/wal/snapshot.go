package wal

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/vfs"
)

const (
	snapSuffix = ".snap"
	tmpSuffix  = ".tmp"
	// keepSnapshots is how many local snapshots survive a new one. The older
	// one is a spare for an operator if the newest turns out damaged.
	keepSnapshots = 2
)

func snapName(index uint64) string { return fmt.Sprintf("%020d%s", index, snapSuffix) }

// SaveSnapshot stores s durably as snap/{index}.snap, then deletes the
// sealed segments it covers and all but the newest two snapshots. When s
// covers every entry held, the active segment is sealed first so that it can
// go too and the log can restart at any index above s (a node that caught
// up from a newer snapshot than its own log).
func (w *WAL) SaveSnapshot(s *datafile.Snapshot) error {
	w.snapMu.Lock()
	defer w.snapMu.Unlock()
	if err := w.writeSnapshot(s); err != nil {
		return err
	}
	return w.deleteCoveredLocked(s.Header.Index)
}

// WriteSnapshot stores s durably as snap/{index}.snap and keeps all but
// the newest two snapshots, like SaveSnapshot, but deletes no segment: the
// caller still needs the entries s covers (a follower whose snapshot runs
// ahead of what object storage holds must be able to upload them if it
// becomes the writer) and deletes them later with DeleteCovered.
func (w *WAL) WriteSnapshot(s *datafile.Snapshot) error {
	w.snapMu.Lock()
	defer w.snapMu.Unlock()
	return w.writeSnapshot(s)
}

// DeleteCovered deletes the sealed segments whose entries are all at or
// below index, which a local snapshot must cover (index is at most the
// newest snapshot's). When index covers every entry held, the active
// segment is sealed first so that it can go too, as in SaveSnapshot.
func (w *WAL) DeleteCovered(index uint64) error {
	w.snapMu.Lock()
	defer w.snapMu.Unlock()
	idxs, err := w.snapshots()
	if err != nil {
		return fmt.Errorf("wal delete covered %d: %w", index, err)
	}
	if len(idxs) == 0 || idxs[len(idxs)-1] < index {
		// The segments are the only copy of what no snapshot covers.
		return fmt.Errorf("wal delete covered %d: no local snapshot covers it", index)
	}
	return w.deleteCoveredLocked(index)
}

// writeSnapshot is SaveSnapshot up to the segment deletion; the caller
// holds snapMu.
func (w *WAL) writeSnapshot(s *datafile.Snapshot) error {
	if s == nil || s.Header == nil {
		return errors.New("wal save snapshot: missing header")
	}
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return ErrClosed
	}
	index := s.Header.Index
	final := filepath.Join(w.snapDir, snapName(index))
	write := func(f vfs.File) error {
		// The encoder writes one small frame per key: buffer them, or
		// each is a system call.
		b := bufio.NewWriterSize(f, 256<<10)
		if err := datafile.EncodeSnapshot(b, s); err != nil {
			return err
		}
		return b.Flush()
	}
	if err := writeFileAtomic(w.fs, final, write); err != nil {
		return fmt.Errorf("wal save snapshot %d: %w", index, err)
	}
	if err := w.pruneSnapshots(); err != nil {
		return fmt.Errorf("wal save snapshot %d: %w", index, err)
	}
	w.log.Info("saved snapshot", "index", index, "rev", s.Header.Revision, "path", final)
	return nil
}

// deleteCoveredLocked seals the active segment if index covers it and
// deletes the sealed segments index covers; the caller holds snapMu.
func (w *WAL) deleteCoveredLocked(index uint64) error {
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if err := w.sealCovered(index); err != nil {
		return fmt.Errorf("wal delete segments covered by %d: %w", index, err)
	}
	if err := w.deleteCovered(index); err != nil {
		return fmt.Errorf("wal delete segments covered by %d: %w", index, err)
	}
	return nil
}

// writeFileAtomic makes path appear complete or not at all: a temp file is
// written and fsync'd, renamed over path, and the rename made durable.
func writeFileAtomic(fsys vfs.FS, path string, write func(vfs.File) error) error {
	tmp := path + tmpSuffix
	f, err := fsys.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fsys.Remove(tmp)
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := fsys.Rename(tmp, path); err != nil {
		fsys.Remove(tmp)
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return syncDir(fsys, filepath.Dir(path))
}

// sealCovered asks the writer goroutine to seal the active segment when the
// snapshot covers every entry held, and waits for it. The request rides the
// append queue so it is ordered after every entry queued before it.
func (w *WAL) sealCovered(index uint64) error {
	w.mu.Lock()
	target := w.last
	if target == 0 || target > index {
		w.mu.Unlock()
		return nil
	}
	w.pendMeta = append(w.pendMeta, frameMeta{index: target, seal: true})
	w.wake()
	w.mu.Unlock()
	for {
		w.mu.Lock()
		done, err, stopped, ch := w.sealedTo >= target, w.err, w.stopped, w.changed
		w.mu.Unlock()
		switch {
		case done:
			return nil
		case err != nil:
			return err
		case stopped:
			return ErrClosed
		}
		<-ch
	}
}

// deleteCovered removes the oldest sealed segments whose entries are all at
// or below index.
func (w *WAL) deleteCovered(index uint64) error {
	w.delMu.Lock()
	defer w.delMu.Unlock()
	w.segMu.Lock()
	n := 0
	for n < len(w.segs) && w.segs[n].sealed && w.segs[n].lastIndex() <= index {
		n++
	}
	victims := append([]*segment(nil), w.segs[:n]...)
	w.segs = w.segs[n:]
	w.segMu.Unlock()
	if n == 0 {
		return nil
	}
	lastDeleted := victims[n-1].lastIndex()
	w.mu.Lock()
	if lastDeleted >= w.last {
		w.first, w.last = 0, 0
	} else if w.first <= lastDeleted {
		w.first = lastDeleted + 1
	}
	w.mu.Unlock()
	var errs []error
	for _, s := range victims {
		if err := w.fs.Remove(s.path); err != nil {
			// The file stays behind but is covered by the snapshot; reopening
			// reads it as an ordinary older segment.
			errs = append(errs, fmt.Errorf("remove segment: %w", err))
			continue
		}
		w.log.Debug("removed segment covered by snapshot", "path", s.path, "last", s.lastIndex(), "index", index)
	}
	errs = append(errs, syncDir(w.fs, w.dir))
	return errors.Join(errs...)
}

// snapshots lists the snapshot files, oldest first.
func (w *WAL) snapshots() ([]uint64, error) {
	ents, err := w.fs.ReadDir(w.snapDir)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	var out []uint64
	for _, e := range ents {
		base, ok := strings.CutSuffix(e.Name(), snapSuffix)
		if !ok || len(base) != 20 {
			continue
		}
		idx, err := strconv.ParseUint(base, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("snapshot %s: name is not a log index", filepath.Join(w.snapDir, e.Name()))
		}
		out = append(out, idx)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

func (w *WAL) pruneSnapshots() error {
	idxs, err := w.snapshots()
	if err != nil || len(idxs) <= keepSnapshots {
		return err
	}
	for _, idx := range idxs[:len(idxs)-keepSnapshots] {
		if err := w.fs.Remove(filepath.Join(w.snapDir, snapName(idx))); err != nil {
			return fmt.Errorf("remove old snapshot: %w", err)
		}
	}
	return syncDir(w.fs, w.snapDir)
}

// removeTempSnapshots clears snapshot writes a crash interrupted.
func (w *WAL) removeTempSnapshots() error {
	ents, err := w.fs.ReadDir(w.snapDir)
	if err != nil {
		return fmt.Errorf("list snapshots: %w", err)
	}
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), tmpSuffix) {
			p := filepath.Join(w.snapDir, e.Name())
			w.log.Warn("removing interrupted snapshot write", "path", p)
			if err := w.fs.Remove(p); err != nil {
				return fmt.Errorf("remove %s: %w", p, err)
			}
		}
	}
	return nil
}

// LoadSnapshot returns the newest local snapshot, or nil, nil if there is
// none. A damaged newest snapshot is an error naming the file: falling back
// to an older one silently could skip entries the deleted segments held.
func (w *WAL) LoadSnapshot() (*datafile.Snapshot, error) {
	idxs, err := w.snapshots()
	if err != nil || len(idxs) == 0 {
		return nil, err
	}
	idx := idxs[len(idxs)-1]
	path := filepath.Join(w.snapDir, snapName(idx))
	f, err := w.fs.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load snapshot: %w", err)
	}
	defer f.Close()
	s, err := datafile.DecodeSnapshot(path, bufio.NewReaderSize(f, 256<<10))
	if err != nil {
		return nil, fmt.Errorf("load snapshot: %w", err)
	}
	if s.Header.Index != idx {
		return nil, fmt.Errorf("load snapshot %s: header says index %d", path, s.Header.Index)
	}
	return s, nil
}
