package wal

import (
	"fmt"
	"io"

	"github.com/netsy-io/netsy/internal/datafile"
	"github.com/netsy-io/netsy/internal/vfs"
	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

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
