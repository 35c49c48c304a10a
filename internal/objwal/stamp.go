package objwal

import (
	"context"
	"errors"
	"fmt"
	"sort"

	netsyv1 "github.com/netsy-io/netsy/proto/netsyv1"
)

// maxStampRuns bounds the in-memory index-to-stamp map: a run starts at the
// first index carrying a new stamp, so under load there is at most one per
// millisecond. When snapshots are rare the oldest runs are dropped, and a
// snapshot whose index fell off gets no stamp (unknown): garbage
// collection never takes such a snapshot for one before the retention
// window, so it keeps more, never less.
const maxStampRuns = 1 << 16

// stampRun says that entries from first on (up to the next run) carry ms.
type stampRun struct {
	first uint64
	ms    int64
}

// stampLocked returns the commit time the writer gives a new entry: its
// wall clock in unix milliseconds, but never below the newest stamp the
// log holds, so a wall clock stepped back (or a new Primary whose clock
// runs behind the old one's) never makes the time-to-revision map go
// backwards. Stamps stay flat until the wall clock catches up.
func (l *Log) stampLocked() int64 {
	return max(l.clk.Wall().UnixMilli(), l.stamp)
}

// observeLocked records that the local log now holds entry index with
// stamp ms (0: unknown). A lower index than a recorded run means the log
// was cut and is being written again: the runs past it are dropped.
func (l *Log) observeLocked(index uint64, ms int64) {
	l.stamp = max(l.stamp, ms)
	l.stampIdx = max(l.stampIdx, index)
	n := len(l.stampRuns)
	for n > 0 && l.stampRuns[n-1].first >= index {
		n--
	}
	l.stampRuns = l.stampRuns[:n]
	if n > 0 && l.stampRuns[n-1].ms == ms {
		return
	}
	if n >= maxStampRuns {
		l.stampRuns = append(l.stampRuns[:0], l.stampRuns[n/2:]...)
	}
	l.stampRuns = append(l.stampRuns, stampRun{first: index, ms: ms})
}

// stampAtLocked returns the stamp of entry index, 0 if this log never saw
// it. An index older than every run it remembers is unknown.
func (l *Log) stampAtLocked(index uint64) int64 {
	i := sort.Search(len(l.stampRuns), func(i int) bool { return l.stampRuns[i].first > index })
	if i == 0 {
		return 0
	}
	return l.stampRuns[i-1].ms
}

// forgetStampsBeforeLocked drops the runs wholly below index: snapshots
// only move forward, so no later one asks for them.
func (l *Log) forgetStampsBeforeLocked(index uint64) {
	i := sort.Search(len(l.stampRuns), func(i int) bool { return l.stampRuns[i].first > index })
	if i > 1 {
		l.stampRuns = append(l.stampRuns[:0], l.stampRuns[i-1:]...)
	}
}

// loadTailStamp makes sure the log knows the stamp of its newest entry
// before it writes: a new Primary continues from the last stamp in the
// log, never from its own clock alone. Entries that came through Append or
// a catch-up were seen already; a restart reads the last local entry (or
// the local snapshot's header, seen at Open).
func (l *Log) loadTailStamp(ctx context.Context) error {
	last := l.wal.LastIndex()
	l.mu.Lock()
	known := l.stampIdx >= last || last <= l.localSnapIdx
	l.mu.Unlock()
	if known {
		return nil
	}
	if err := l.wal.WaitSynced(ctx, last); err != nil {
		return fmt.Errorf("read the last entry's commit time: %w", err)
	}
	stop := errors.New("stop")
	var ms int64
	err := l.wal.Replay(last, func(e *netsyv1.Entry) error {
		ms = e.CommitTimeMs
		return stop
	})
	if err != nil && !errors.Is(err, stop) {
		return fmt.Errorf("read the last entry's commit time: %w", err)
	}
	l.mu.Lock()
	l.observeLocked(last, ms)
	l.mu.Unlock()
	return nil
}
