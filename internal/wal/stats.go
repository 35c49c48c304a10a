package wal

import (
	"sync"
	"time"
)

const syncBucketCount = 14

// SyncBuckets are the upper bounds of SyncStats.Buckets: etcd's buckets for
// etcd_disk_wal_fsync_duration_seconds (1 ms doubling to about 8 s), so
// dashboards and alerts written for etcd read the same way.
var SyncBuckets = func() []time.Duration {
	b := make([]time.Duration, syncBucketCount)
	for i := range b {
		b[i] = time.Millisecond << i
	}
	return b
}()

// SyncStats describes the fsyncs of the WAL's segments.
type SyncStats struct {
	// Syncs is the number of fsyncs and Time their total duration.
	Syncs uint64
	Time  time.Duration
	// Buckets[i] counts the fsyncs that took at most SyncBuckets[i]
	// (cumulative, as Prometheus histograms are).
	Buckets []uint64
	// Entries is the number of entries those fsyncs made durable:
	// Entries/Syncs is the mean group-commit size.
	Entries uint64
}

// syncStats is owned by the writer goroutine and read by SyncStats.
type syncStats struct {
	mu      sync.Mutex
	syncs   uint64
	time    time.Duration
	buckets [syncBucketCount]uint64 // not cumulative; one per SyncBuckets entry
	entries uint64
}

func (s *syncStats) observe(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncs++
	s.time += d
	for i, le := range SyncBuckets {
		if d <= le {
			s.buckets[i]++
			break
		}
	}
}

func (s *syncStats) durable(entries uint64) {
	s.mu.Lock()
	s.entries += entries
	s.mu.Unlock()
}

// SyncStats reports the fsyncs so far.
func (w *WAL) SyncStats() SyncStats {
	s := &w.stats
	s.mu.Lock()
	defer s.mu.Unlock()
	out := SyncStats{Syncs: s.syncs, Time: s.time, Entries: s.entries, Buckets: make([]uint64, len(SyncBuckets))}
	var sum uint64
	for i := range SyncBuckets {
		sum += s.buckets[i]
		out.Buckets[i] = sum
	}
	return out
}
