package mvcc

import (
	"sort"
	"unsafe"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Compact drops history at and below rev. It returns ErrCompacted when rev
// is not above the current floor and ErrFutureRev when rev > Rev().
//
// What survives, per key: every version with mod_revision >= rev, plus the
// newest older version if it is live. Reads at rev and later need nothing
// else. Keeping all of revision rev (tombstones included) and the live
// version each of its events replaced lets Events(rev, ...) still return
// rev's events complete with PrevKv, which etcd itself loses at the floor
// and Kubernetes' watch cache rejects on DELETE events.
//
// Compaction works through every write since the previous floor, which can
// take long, so it releases the lock between batches to let readers in.
// Raising the floor first makes everything it drops unreachable; reads and
// snapshots never see a half-compacted store. Only the writer mutates the
// store, so nothing else can change the log in between.
func (s *Store) Compact(rev int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev <= s.compactRev.Load() {
		return ErrCompacted
	}
	if rev > s.rev.Load() {
		return ErrFutureRev
	}
	pause := func() {
		s.mu.Unlock()
		s.mu.Lock()
	}
	s.compact(rev, pause)
	if s.sp != nil && s.sp.needsRewrite() {
		s.rewriteSpill(pause)
	}
	return nil
}

// rewriteSpill copies every spilled value into a new file, so the old
// files, which hold mostly dropped values, are deleted as they empty. It
// calls pause between batches. Should the new file fail, the values not
// yet moved stay where they are.
func (s *Store) rewriteSpill(pause func()) {
	sp := s.sp
	nf, err := sp.newFile()
	if err != nil {
		return
	}
	old := sp.cur
	sp.cur = nf
	if old.live == 0 {
		sp.retire(old)
	}
	var buf []byte
	n := 0
	// Only the writer changes the index, and it is here: the walk may
	// pause.
	// Keys walked count toward a batch as values moved do: a store of
	// many small in-memory values and a few spilled ones would otherwise
	// hold the lock for the whole walk.
	s.idx.ascend(nil, nil, func(ki *keyIndex) bool {
		if n++; n%s.compactBatch == 0 && pause != nil {
			pause()
		}
		for _, kv := range ki.hist {
			r, ok := s.spilledAt(kv)
			if !ok || r.f == nf {
				continue
			}
			v, err := s.readSpilled(r, buf)
			if err != nil {
				return false
			}
			buf = v
			nr, err := sp.put(v)
			if err != nil {
				return false
			}
			// The place, not the published KeyValue, changes; readers
			// read it under the lock.
			(*spilledVersion)(unsafe.Pointer(kv)).ref = nr
			sp.drop(r)
			if n++; n%s.compactBatch == 0 && pause != nil {
				pause()
			}
		}
		return true
	})
}

// compact raises the floor to rev and drops what that makes unreachable,
// calling pause (if not nil) between batches.
func (s *Store) compact(rev int64, pause func()) {
	s.compactRev.Store(rev)
	// After the previous compaction every key held at most one version
	// below the old floor, so only keys written since then can hold
	// anything to drop, and the log names exactly those.
	p := s.logSearch(rev)
	for i := 0; i < p; i += s.compactBatch {
		if i > 0 && pause != nil {
			pause()
		}
		for _, e := range s.log[i:min(i+s.compactBatch, p)] {
			if ki := s.lookup(e.kv.Key); ki != nil {
				s.trim(ki, rev)
			}
		}
	}
	if p >= len(s.log)-p {
		// Most of the log goes: move the rest to a right-sized array so
		// the dead prefix is freed now rather than on a later append.
		s.log = append(make([]logEntry, 0, len(s.log)-p+len(s.log)/8+16), s.log[p:]...)
	} else {
		clear(s.log[:p])
		s.log = s.log[p:]
	}
	if s.idx.sparse() {
		s.idx.rebuild()
	}
}

// kept returns the versions of ki that compaction at floor keeps.
func (ki *keyIndex) kept(floor int64) []*mvccpb.KeyValue {
	h := ki.hist
	if len(h) > 0 && h[0].ModRevision >= floor {
		return h
	}
	return h[ki.keepFrom(floor):]
}

func (ki *keyIndex) keepFrom(floor int64) int {
	h := ki.hist
	j := sort.Search(len(h), func(i int) bool { return h[i].ModRevision >= floor })
	if j > 0 && !tombstone(h[j-1]) {
		return j - 1
	}
	return j
}

// trim drops the versions of ki that compaction at rev makes unreachable.
func (s *Store) trim(ki *keyIndex, rev int64) {
	h := ki.hist
	drop := ki.keepFrom(rev)
	if drop == 0 {
		return
	}
	for _, kv := range h[:drop] {
		s.bytes -= int64(s.valueLen(kv))
		s.unspill(kv)
	}
	s.versions -= int64(drop)
	n := len(h) - drop
	if n == 0 {
		// Only a dead key loses every version: the live count stays.
		s.removeKey(ki)
		ki.hist = nil
		return
	}
	if cap(h) > 8 && cap(h) > 4*n {
		ki.hist = append(make([]*mvccpb.KeyValue, 0, n), h[drop:]...)
		return
	}
	copy(h, h[drop:])
	clear(h[n:])
	ki.hist = h[:n]
}
