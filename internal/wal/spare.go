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

// Segments are preallocated so that an fsync after an append finds the
// file's size and block map unchanged and has only the data to write. The
// preallocation writes real zeros: fallocate alone leaves unwritten extents,
// and converting them on the first write into each block costs a journal
// commit much as growing the file does. Measured on ext4 (Linux 6.18),
// fsync after a 4 KiB append: ~390 µs growing the file, ~300 µs over
// fallocate'd space, ~225 µs over written zeros. Small appends mostly land
// in a block an earlier append already converted, which hides the
// difference. The price is that every segment is written twice, zeros then
// entries, which shows only when the log is written at disk bandwidth
// (BenchmarkAppend: ~25% slower).
//
// Writing 64 MiB of zeros must not sit on the write path, so the spare
// goroutine keeps one empty segment ready under spareName: the header and
// zeros up to the segment size, fsync'd. When the log rolls the writer
// renames it into place; it asks for the next one once the new segment is
// half full, so a log that never fills a segment writes no spare for it.

// fillChunk is the size of one zero write, each fsync'd before the next. An
// fsync of the active segment that lands while a spare is being written
// otherwise queues behind all of the spare's dirty zeros: writing a 64 MiB
// spare took ~80 ms here, and the slowest concurrent fsync of the active
// segment took ~30 ms with one fsync at the end, ~15 ms syncing every
// 8 MiB, and a few ms syncing every MiB.
const fillChunk = 1 << 20

// errStopped means Close interrupted a spare being prepared.
var errStopped = errors.New("wal: closing")

// runSpares is the spare goroutine: it prepares one spare per request and
// answers every request, exiting when Close closes stop.
func (w *WAL) runSpares() {
	defer close(w.spareDone)
	defer w.markPrepared()
	for {
		select {
		case <-w.stop:
			return
		case <-w.spareReq:
		}
		err := w.prepareSpare()
		if err != nil && !errors.Is(err, errStopped) {
			w.log.Warn("preparing a spare segment failed", "error", err)
		}
		// The first answer covers a new log's first segment.
		w.markPrepared()
		// There is room: a request is only made once the last answer
		// was taken.
		w.spareReady <- err
		if errors.Is(err, errStopped) {
			return
		}
	}
}

// Prepared returns a channel that is closed once a new log's first segment
// is preallocated, or its preallocation failed or was stopped by Close; for
// a log that already had a segment at Open it is closed from the start.
// Until then the log's first write waits for the segment's 64 MiB of zeros
// before it can be made durable: a server that waits for Prepared before it
// takes writes keeps that wait out of its first client's deadline.
func (w *WAL) Prepared() <-chan struct{} { return w.prepared }

func (w *WAL) markPrepared() { w.preparedOnce.Do(func() { close(w.prepared) }) }

// requestSpare asks for a spare unless one is already on its way. Only the
// writer goroutine (or Open before it starts) calls it.
func (w *WAL) requestSpare() {
	if !w.sparePending {
		w.sparePending = true
		w.spareReq <- struct{}{}
	}
}

// prepareSpare makes spareName an fsync'd empty segment of w.segSize bytes.
// A spare left by an earlier process was written only with the header and
// zeros, front to back, so it is completed rather than started over.
func (w *WAL) prepareSpare() (err error) {
	path := filepath.Join(w.dir, spareName)
	f, err := w.fs.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("create spare segment: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close spare segment %s: %w", path, cerr)
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("stat spare segment %s: %w", path, err)
	}
	size := st.Size()
	if size > w.segSize {
		// Left by a process configured with larger segments.
		if err := f.Truncate(w.segSize); err != nil {
			return fmt.Errorf("truncate spare segment %s: %w", path, err)
		}
		size = w.segSize
	}
	if _, err := datafile.NewWriter(io.NewOffsetWriter(f, 0), datafile.KindSegment); err != nil {
		return fmt.Errorf("spare segment %s: %w", path, err)
	}
	if w.hooks.beforeSpareFill != nil {
		w.hooks.beforeSpareFill()
	}
	if err := fillZeros(f, max(size, datafile.HeaderSize), w.segSize, w.stop); err != nil {
		return fmt.Errorf("preallocate spare segment %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync spare segment %s: %w", path, err)
	}
	return nil
}

// newSegmentFile puts a new segment file at path: the spare renamed into
// place, or, without a spare, an empty file that grows as it is written.
// The caller makes the new name durable.
func (w *WAL) newSegmentFile(path string) (vfs.File, error) {
	// Rename would replace an existing file silently.
	if _, err := w.fs.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		if err == nil {
			err = os.ErrExist
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if w.sparePending {
		// Only waits if the log filled a whole segment faster than the
		// spare goroutine wrote one of zeros, or on the first segment of
		// a new log.
		w.sparePending = false
		if err := <-w.spareReady; err == nil {
			if err := w.fs.Rename(filepath.Join(w.dir, spareName), path); err != nil {
				return nil, fmt.Errorf("rename spare segment: %w", err)
			}
			return w.fs.OpenFile(path, os.O_RDWR, 0)
		}
		w.log.Warn("no spare segment; creating one that grows as it is written", "path", path)
	}
	return w.fs.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
}

// fillZeros writes zeros over [from, to) of f, giving up with errStopped
// once stop is closed (a nil stop never is). The caller fsyncs the last
// chunk.
func fillZeros(f vfs.File, from, to int64, stop <-chan struct{}) error {
	if from >= to {
		return nil
	}
	zeros := make([]byte, min(fillChunk, to-from))
	for off := from; off < to; {
		select {
		case <-stop:
			return errStopped
		default:
		}
		n := min(int64(len(zeros)), to-off)
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		if off += n; off < to {
			if err := f.Sync(); err != nil {
				return err
			}
		}
	}
	return nil
}
