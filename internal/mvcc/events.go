package mvcc

import "go.etcd.io/etcd/api/v3/mvccpb"

// Events returns the events with from <= mod_revision <= to in (revision,
// sub) order. It returns whole revisions only and stops after the revision
// at which the result reaches limit events (limit <= 0: no limit); next is
// the first revision not returned. PrevKv is set when the key was live
// before the event and that version is not below the compaction floor. from < CompactRev() returns ErrCompacted; to is capped at
// Rev().
//
// The events are built per call from the shared log, so callers may keep
// them; the KeyValues they point to are shared and must not be modified.
// A spilled value that cannot be read back fails the call with that error.
func (s *Store) Events(from, to int64, limit int) ([]*mvccpb.Event, int64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if from < s.compactRev.Load() {
		return nil, from, ErrCompacted
	}
	to = min(to, s.rev.Load())
	if from > to {
		return nil, from, nil
	}
	start := s.logSearch(from)
	end := start
	next := to + 1
	for end < len(s.log) {
		r := s.log[end].kv.ModRevision
		if r > to {
			break
		}
		if limit > 0 && end-start >= limit && r != s.log[end-1].kv.ModRevision {
			next = r
			break
		}
		end++
	}
	if end == start {
		return nil, next, nil
	}
	evs := make([]mvccpb.Event, end-start)
	out := make([]*mvccpb.Event, end-start)
	floor := s.compactRev.Load()
	for i, e := range s.log[start:end] {
		ev := &evs[i]
		ev.Kv, ev.PrevKv = e.kv, e.prev
		// A previous version below the compaction floor is compacted away
		// as far as clients can tell: etcd sends no prev_kv for it, and
		// Kubernetes' watch relies on that to report the gap.
		if e.prev != nil && e.prev.ModRevision < floor {
			ev.PrevKv = nil
		}
		if tombstone(e.kv) {
			ev.Type = mvccpb.DELETE
		}
		out[i] = ev
	}
	if err := s.resolveEvents(out); err != nil {
		return nil, from, err
	}
	return out, next, nil
}
