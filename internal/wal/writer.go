package wal

import (
	"bufio"
	"fmt"
	"path/filepath"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/vfs"
)

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
