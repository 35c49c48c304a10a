package mvcc

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Store is the multi-version key-value state. One goroutine writes (Put,
// Delete, Compact, Rollback, Restore); any number read concurrently.
type Store struct {
	mu sync.RWMutex

	idx tree
	// keys finds a key's index without the tree's pointer chasing: point
	// reads and writes, the hot paths, cost one hash lookup.
	keys map[string]*keyIndex
	// log holds every event with mod_revision >= compactRev in (revision,
	// sub) order; a version's sub is its position within its revision. Its
	// kv pointers are the same values the key histories hold.
	log []logEntry

	// rev and compactRev are written under mu and read without it by
	// Rev/CompactRev.
	rev        atomic.Int64
	compactRev atomic.Int64

	versions int64
	bytes    int64

	// compactBatch is how many log entries Compact works through per
	// hold of the lock.
	compactBatch int
}

// logEntry is one event: kv is the new version (a tombstone for a delete)
// and prev the version it replaced when the key was live before.
type logEntry struct {
	kv, prev *mvccpb.KeyValue
}

// keyIndex is one key and its versions in (mod_revision, sub) order.
//
// A tombstone is a *mvccpb.KeyValue with Version 0 carrying only Key and
// ModRevision, the exact value a DELETE event reports, so one pointer per
// version serves histories, the log and events alike. hist only loses its
// oldest entries to compaction and its newest to rollback.
type keyIndex struct {
	key  []byte
	hist []*mvccpb.KeyValue
}

func tombstone(kv *mvccpb.KeyValue) bool { return kv.Version == 0 }

// latest returns the newest version if it is live.
func (ki *keyIndex) latest() *mvccpb.KeyValue {
	if len(ki.hist) == 0 {
		return nil
	}
	kv := ki.hist[len(ki.hist)-1]
	if tombstone(kv) {
		return nil
	}
	return kv
}

func (ki *keyIndex) live() bool { return ki.latest() != nil }

// at returns the version visible at rev, or nil if the key is not live
// there.
func (ki *keyIndex) at(rev int64) *mvccpb.KeyValue {
	h := ki.hist
	n := len(h)
	if n == 0 {
		return nil
	}
	var kv *mvccpb.KeyValue
	if h[n-1].ModRevision <= rev {
		// Reads at the newest revisions are the common case.
		kv = h[n-1]
	} else {
		i := sort.Search(n, func(i int) bool { return h[i].ModRevision > rev })
		if i == 0 {
			return nil
		}
		kv = h[i-1]
	}
	if tombstone(kv) {
		return nil
	}
	return kv
}

// New returns an empty store at revision 0.
func New() *Store {
	return &Store{idx: newTree(), keys: map[string]*keyIndex{}, compactBatch: 1024}
}

func (s *Store) lookup(key []byte) *keyIndex { return s.keys[string(key)] }

func (s *Store) addKey(ki *keyIndex, live bool) {
	s.idx.insert(ki, live)
	// The map key aliases ki.key instead of copying it: stored keys are
	// never modified (see Put), so the string stays immutable as Go
	// requires.
	s.keys[unsafe.String(unsafe.SliceData(ki.key), len(ki.key))] = ki
	s.bytes += int64(len(ki.key))
}

func (s *Store) removeKey(ki *keyIndex) {
	s.idx.delete(ki.key)
	delete(s.keys, string(ki.key))
	s.bytes -= int64(len(ki.key))
}

// Rev returns the latest applied revision, uncommitted writes included.
func (s *Store) Rev() int64 { return s.rev.Load() }

// CompactRev returns the compaction floor (0 when never compacted).
func (s *Store) CompactRev() int64 { return s.compactRev.Load() }

// Stats describes what the store holds.
type Stats struct {
	// Keys is the number of keys live at the latest revision.
	Keys int64
	// Versions is the number of versions held, tombstones included.
	Versions int64
	// Bytes approximates the key and value bytes held: each key once,
	// each version's value.
	Bytes int64
}

// Stats reports the current size of the store.
func (s *Store) Stats() Stats {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return Stats{Keys: int64(s.idx.live), Versions: s.versions, Bytes: s.bytes}
}

// checkWriteRev panics unless rev opens the next revision or continues the
// current one: the engine owns revision numbering and a mismatch means its
// log and this store disagree, which no caller can recover from.
func (s *Store) checkWriteRev(rev int64) {
	cur := s.rev.Load()
	if rev != cur+1 && (rev != cur || cur == 0) {
		panic(fmt.Sprintf("mvcc: write at revision %d, store at revision %d", rev, cur))
	}
}

// Put sets key to value at revision rev and returns the PUT event. rev must
// be Rev()+1 (the first op of a new revision) or Rev() (a further op of the
// same revision); any other rev panics. The store keeps key and value: callers
// must not modify them afterwards.
func (s *Store) Put(rev int64, key, value []byte, lease int64) *mvccpb.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkWriteRev(rev)
	ki := s.lookup(key)
	if ki == nil {
		ki = &keyIndex{key: key}
		s.addKey(ki, true)
	}
	prev := ki.latest()
	kv := &mvccpb.KeyValue{Key: ki.key, CreateRevision: rev, ModRevision: rev, Version: 1, Value: value, Lease: lease}
	if prev != nil {
		kv.CreateRevision = prev.CreateRevision
		kv.Version = prev.Version + 1
	} else if len(ki.hist) > 0 {
		s.idx.setLive(key, true)
	}
	s.append(ki, kv, prev)
	s.rev.Store(rev)
	return &mvccpb.Event{Type: mvccpb.PUT, Kv: kv, PrevKv: prev}
}

// Delete writes a tombstone for key at revision rev (same rule as Put) and
// returns the DELETE event, or nil without changing anything when the key is
// not live at the latest revision.
func (s *Store) Delete(rev int64, key []byte) *mvccpb.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkWriteRev(rev)
	ki := s.lookup(key)
	if ki == nil {
		return nil
	}
	prev := ki.latest()
	if prev == nil {
		return nil
	}
	kv := &mvccpb.KeyValue{Key: ki.key, ModRevision: rev}
	s.idx.setLive(key, false)
	s.append(ki, kv, prev)
	s.rev.Store(rev)
	return &mvccpb.Event{Type: mvccpb.DELETE, Kv: kv, PrevKv: prev}
}

func (s *Store) append(ki *keyIndex, kv, prev *mvccpb.KeyValue) {
	ki.hist = append(ki.hist, kv)
	s.log = append(s.log, logEntry{kv: kv, prev: prev})
	s.versions++
	s.bytes += int64(len(kv.Value))
}

// logSearch returns the position of the first log entry with mod_revision
// >= rev.
//
// Revisions in the log are dense and each has at least one event, which
// pins the answer between rev-first and n-(last-rev+1): a point when every
// revision has one event, as nearly all do. The check afterwards guards
// against a log restored with gaps.
func (s *Store) logSearch(rev int64) int {
	log := s.log
	n := len(log)
	if n == 0 || rev <= log[0].kv.ModRevision {
		return 0
	}
	first, last := log[0].kv.ModRevision, log[n-1].kv.ModRevision
	if rev > last {
		return n
	}
	lo, hi := int(rev-first), n-int(last-rev+1)
	if lo <= hi {
		p := lo + sort.Search(hi-lo, func(i int) bool { return log[lo+i].kv.ModRevision >= rev })
		if log[p].kv.ModRevision >= rev && (p == 0 || log[p-1].kv.ModRevision < rev) {
			return p
		}
	}
	return sort.Search(n, func(i int) bool { return log[i].kv.ModRevision >= rev })
}

// Rollback discards every write above rev: they never became durable.
// rev must not be below the compaction floor, whose versions are gone.
func (s *Store) Rollback(rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev >= s.rev.Load() {
		return
	}
	if rev < s.compactRev.Load() {
		panic(fmt.Sprintf("mvcc: rollback to revision %d below compaction floor %d", rev, s.compactRev.Load()))
	}
	p := s.logSearch(rev + 1)
	for i := len(s.log) - 1; i >= p; i-- {
		kv := s.log[i].kv
		ki := s.lookup(kv.Key)
		wasLive := ki.live()
		ki.hist[len(ki.hist)-1] = nil
		ki.hist = ki.hist[:len(ki.hist)-1]
		s.versions--
		s.bytes -= int64(len(kv.Value))
		if len(ki.hist) == 0 {
			s.removeKey(ki)
		} else if live := ki.live(); live != wasLive {
			s.idx.setLive(ki.key, live)
		}
	}
	clear(s.log[p:])
	s.log = s.log[:p]
	s.rev.Store(rev)
	if s.idx.sparse() {
		s.idx.rebuild()
	}
}
